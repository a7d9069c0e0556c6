//! Bad input to the transforms is a clear error naming the op, the path
//! and the shapes.

use kiln::prelude::*;

fn msg<T>(r: Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn grad_of_a_non_scalar_output() {
    let x = Tensor::ones(&Device::cpu(), &[3, 4], DType::F32).unwrap();
    let e = msg(grad(|x: &Tensor| x.exp())(&x));
    assert!(e.starts_with("grad:") && e.contains("[3, 4]") && e.contains("vjp"), "{e}");
    let e = msg(value_and_grad(|x: &Tensor| x.gt(&x.scalar_like(0.0)?)?.sum(&[], false))(&x));
    assert!(e.starts_with("value_and_grad:") && e.contains("i32"), "{e}");
}

#[test]
fn integer_and_bool_leaves() {
    let dev = Device::cpu();
    let p = (Tensor::ones(&dev, &[2], DType::F32).unwrap(), Tensor::ones(&dev, &[5], DType::I32).unwrap());
    let e = msg(grad(|p: &(Tensor, Tensor)| p.0.sum(&[], false))(&p));
    assert!(e.contains("leaf `1` is i32 [5]"), "{e}");
    let b = Tensor::ones(&dev, &[2], DType::Bool).unwrap();
    let e = msg(vjp(|b: &Tensor| b.cast(DType::F32), &b));
    assert!(e.starts_with("vjp:") && e.contains("`<root>` is bool [2]"), "{e}");
}

#[test]
fn a_tree_whose_structure_changed_between_calls() {
    let dev = Device::cpu();
    let df = grad(|p: &Vec<Tensor>| {
        p.iter().try_fold(Tensor::scalar(&dev, 0.0, DType::F32)?, |a, x| a.add(&x.sum(&[], false)?))
    });
    let two = vec![Tensor::ones(&dev, &[2], DType::F32).unwrap(), Tensor::ones(&dev, &[3], DType::F32).unwrap()];
    df(&two).unwrap();
    let three = vec![two[0].clone(), two[1].clone(), two[1].clone()];
    let e = msg(df(&three));
    assert!(e.contains("structure changed") && e.contains("leaf 2 is `2`"), "{e}");
    let reshaped = vec![two[0].clone(), Tensor::ones(&dev, &[1, 3], DType::F32).unwrap()];
    let e = msg(df(&reshaped));
    assert!(e.contains("`1` (f32 [1, 3])") && e.contains("`1` (f32 [3])"), "{e}");
}

#[test]
fn a_cotangent_that_does_not_match_the_output() {
    let dev = Device::cpu();
    let x = Tensor::ones(&dev, &[2, 3], DType::F32).unwrap();
    let (_, pb) = vjp(|x: &Tensor| Ok((x.exp()?, x.sum(&[], false)?)), &x).unwrap();
    let bad = (Tensor::ones(&dev, &[3, 2], DType::F32).unwrap(), Tensor::ones(&dev, &[], DType::F32).unwrap());
    let e = msg(pb.pullback(&bad));
    assert!(e.starts_with("vjp:") && e.contains("cotangent") && e.contains("[3, 2]") && e.contains("[2, 3]"), "{e}");
}
