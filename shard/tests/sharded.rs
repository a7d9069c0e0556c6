//! Sharded ops against the same ops on one device, on meshes of CPU
//! reference devices (each its own device): results, shardings, gradients
//! and the errors for what has no sharded form.

use kiln::prelude::*;
use kiln_shard::{Mesh, Replicas, ShardTensor, Sharded, Sharding};

fn mesh(world: usize) -> Mesh {
    Mesh::local((0..world).map(|_| Device::cpu()).collect()).unwrap()
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect()
}

fn close(got: &[f64], want: &[f32], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - f64::from(*w)).abs() <= tol * (1.0 + f64::from(w.abs())), "element {i}: {g} against {w}");
    }
}

#[test]
fn ops_follow_the_shardings_and_match_one_device() {
    kiln::block_on(async {
        let one = Device::cpu();
        // 7 rows over 3 ranks: blocks of 3, 2 and 2.
        let (x, w, b) = (values(7 * 4, 1), values(4 * 5, 2), values(5, 3));
        let xt = Tensor::from_slice(&one, &x, &[7, 4]).unwrap();
        let wt = Tensor::from_slice(&one, &w, &[4, 5]).unwrap();
        let bt = Tensor::from_slice(&one, &b, &[5]).unwrap();
        let want = xt.matmul(&wt).unwrap().add(&bt).unwrap().relu().unwrap().softmax(-1).unwrap();
        let want_total = want.sum(&[0], false).unwrap();

        let m = mesh(3);
        let xs = xt.shard(&m, Sharding::Split(0)).await.unwrap();
        let ws = wt.shard(&m, Sharding::Replicated).await.unwrap();
        let bs = bt.shard(&m, Sharding::Replicated).await.unwrap();
        let ys = xs.matmul(&ws).unwrap().add(&bs).unwrap().map("relu", Tensor::relu).unwrap().softmax(-1).unwrap();
        assert_eq!(ys.sharding(), Sharding::Split(0));
        assert_eq!(ys.shape(), [7, 5]);
        let rows: Vec<usize> = ys.shards().iter().map(|s| s.shape()[0]).collect();
        assert_eq!(rows, [3, 2, 2]);
        close(&ys.gather().await.unwrap().data, &want.to_vec::<f32>().await.unwrap(), 1e-6);

        let total = ys.sum(&[0], false).unwrap();
        assert_eq!(total.sharding(), Sharding::Partial);
        let total = total.all_reduce().await.unwrap();
        assert_eq!(total.sharding(), Sharding::Replicated);
        close(&total.gather().await.unwrap().data, &want_total.to_vec::<f32>().await.unwrap(), 1e-6);

        // A reduction that keeps the split axis keeps the split.
        let per_row = ys.sum(&[1], false).unwrap();
        assert_eq!((per_row.sharding(), per_row.shape()), (Sharding::Split(0), &[7][..]));

        // Xᵀ·X with both sides split along the contraction: a partial sum.
        let xts = Sharded::from_shards(
            &m,
            Sharding::Split(1),
            vec![4, 7],
            xs.shards().iter().map(|s| s.t().unwrap()).collect(),
        )
        .unwrap();
        let gram = xts.matmul(&xs).unwrap();
        assert_eq!(gram.sharding(), Sharding::Partial);
        let want_gram = xt.t().unwrap().matmul(&xt).unwrap().to_vec::<f32>().await.unwrap();
        close(&gram.gather().await.unwrap().data, &want_gram, 1e-6);
    })
}

#[test]
fn a_replicated_operand_with_the_split_extent_is_sliced_to_each_block() {
    kiln::block_on(async {
        let m = mesh(2);
        let (a, c) = (values(5 * 3, 4), values(5, 5));
        let xs = Sharded::from_slice(&m, &a, &[5, 3], Sharding::Split(0)).unwrap();
        let cs = Sharded::from_slice(&m, &c, &[5, 1], Sharding::Replicated).unwrap();
        let got = xs.mul(&cs).unwrap().gather().await.unwrap().data;
        let want: Vec<f32> = (0..15).map(|i| a[i] * c[i / 3]).collect();
        close(&got, &want, 0.0);
    })
}

#[derive(Tree, Clone, Debug)]
struct Linear {
    weight: Tensor,
    bias: Tensor,
}

fn loss_on_one_device(p: &Linear, x: &Tensor, labels: &Tensor) -> Result<Tensor> {
    kiln_nn::loss::cross_entropy(&x.matmul(&p.weight)?.add(&p.bias)?, labels)
}

#[test]
fn data_parallel_gradients_equal_the_whole_batch_gradient_and_repeat_bit_for_bit() {
    kiln::block_on(async {
        let one = Device::cpu();
        let (n, d, k) = (9, 6, 4);
        let p = Linear {
            weight: Tensor::from_slice(&one, &values(d * k, 7), &[d, k]).unwrap(),
            bias: Tensor::from_slice(&one, &values(k, 8), &[k]).unwrap(),
        };
        let x = Tensor::from_slice(&one, &values(n * d, 9), &[n, d]).unwrap();
        let labels: Vec<i32> = (0..n as i32).map(|i| (i * 7) % k as i32).collect();
        let y = Tensor::from_slice(&one, &labels, &[n]).unwrap();
        let (want_loss, want) = value_and_grad(|p: &Linear| loss_on_one_device(p, &x, &y))(&p).unwrap();

        let mut runs = Vec::new();
        for _ in 0..2 {
            let m = mesh(2);
            let (xs, ys) =
                (x.shard(&m, Sharding::Split(0)).await.unwrap(), y.shard(&m, Sharding::Split(0)).await.unwrap());
            let params = Replicas::new(&m, &p).await.unwrap();
            let (loss, grads) = kiln_shard::value_and_grad(&params, |p| {
                xs.map_with(p, "forward", |p, x| x.matmul(&p.weight)?.add(&p.bias))?.cross_entropy(&ys)
            })
            .await
            .unwrap();
            assert_eq!(loss.sharding(), Sharding::Replicated);
            let loss = loss.gather().await.unwrap().data;
            close(&loss, &[want_loss.item::<f32>().await.unwrap()], 1e-6);
            let mut run = loss;
            let flat = |tree: &Linear| tree.leaves();
            for (copy, tree) in grads.trees().iter().enumerate() {
                let mut copy_values = Vec::new();
                for (g, w) in flat(tree).iter().zip(want.leaves()) {
                    let g = g.to_host().await.unwrap().data;
                    close(&g, &w.to_vec::<f32>().await.unwrap(), 1e-6);
                    copy_values.extend(g);
                }
                if copy == 0 {
                    run.extend(copy_values);
                } else {
                    assert_eq!(copy_values, run[1..], "rank {copy}'s gradient differs from rank 0's");
                }
            }
            runs.push(run);
        }
        assert_eq!(runs[0], runs[1], "two runs of the same world size differ");
    })
}

#[test]
fn a_loss_that_is_not_one_reduced_value_is_an_error() {
    kiln::block_on(async {
        let m = mesh(2);
        let one = Device::cpu();
        let p = Linear {
            weight: Tensor::from_slice(&one, &values(4, 1), &[2, 2]).unwrap(),
            bias: Tensor::from_slice(&one, &values(2, 2), &[2]).unwrap(),
        };
        let params = Replicas::new(&m, &p).await.unwrap();
        let xs = Sharded::from_slice(&m, &values(8, 3), &[4, 2], Sharding::Split(0)).unwrap();
        let forward = |p: &Replicas<Linear>| xs.map_with(p, "forward", |p, x| x.matmul(&p.weight)?.add(&p.bias));
        let e = kiln_shard::value_and_grad(&params, forward).await.unwrap_err().to_string();
        assert!(e.contains("the loss must be one f32 value, got f32 [4, 2]"), "{e}");
        // One value split over one rank is still split: reduce it first.
        let solo = mesh(1);
        let params = Replicas::new(&solo, &p).await.unwrap();
        let e = kiln_shard::value_and_grad(&params, |p| {
            let row = Sharded::from_slice(&solo, &[1.0f32], &[1], Sharding::Split(0))?;
            row.map_with(p, "scale", |p, r| r.mul(&p.bias.sum(&[], false)?))
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("the loss is split across ranks"), "{e}");
    })
}

#[test]
fn what_has_no_sharded_form_is_an_error_naming_the_op() {
    kiln::block_on(async {
        let m = mesh(2);
        let xs = Sharded::from_slice(&m, &values(8, 1), &[4, 2], Sharding::Split(0)).unwrap();
        let err = |r: Result<Sharded>| r.unwrap_err().to_string();
        assert!(err(xs.softmax(0)).starts_with("softmax: axis 0 of shape [4, 2] is the split axis"));
        let partial = xs.sum(&[0], false).unwrap();
        assert!(err(partial.softmax(-1)).contains("partial sum; all_reduce it first"));
        assert!(err(partial.mul(&partial)).starts_with("mul: partial"));
        let cols = Sharded::from_slice(&m, &values(8, 2), &[4, 2], Sharding::Split(1)).unwrap();
        assert!(err(xs.add(&cols)).contains("split along different axes"));
        let wide = Sharded::from_slice(&m, &values(8, 4), &[2, 4], Sharding::Split(1)).unwrap();
        assert!(err(xs.matmul(&wide)).starts_with("matmul: [4, 2] (split along axis 0) × [2, 4] (split along axis 1)"));
        let e = Sharded::from_slice(&m, &[1.0f32], &[1], Sharding::Split(0)).unwrap_err().to_string();
        assert!(e.contains("has 1 items, fewer than the 2 ranks"), "{e}");
        let other = mesh(2);
        let ys = Sharded::from_slice(&other, &values(8, 3), &[4, 2], Sharding::Split(0)).unwrap();
        assert!(err(xs.add(&ys)).contains("different meshes"));
        let e = Mesh::local(Vec::new()).unwrap_err().to_string();
        assert!(e.contains("given 0 devices"), "{e}");
        let d = Device::cpu();
        let e = Mesh::local(vec![d.clone(), d]).unwrap_err().to_string();
        assert!(e.contains("device 1 (") && e.contains("given twice"), "{e}");
    })
}
