//! Draws one SGD step of a 784-128-10 MLP (forward, cross-entropy, backward,
//! update) as Graphviz DOT, before fusion and as kernels, into a directory
//! (default `docs/`): `mlp-step-ir.dot` and `mlp-step-kernels.dot`. Render
//! with `dot -Tsvg docs/mlp-step-kernels.dot -o docs/mlp-step-kernels.svg`.

use kiln::prelude::*;
use kiln::{DotView, Graph};

#[derive(Tree)]
struct Mlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

fn main() -> Result<()> {
    let out = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "docs".into()));
    let dev = kiln::block_on(Device::gpu())?;
    let (batch, classes) = (64, 10);
    let fill = |shape: &[usize], scale: f64| {
        let n: usize = shape.iter().product();
        let values: Vec<f64> = (0..n).map(|i| ((i * 7919 % 1000) as f64 / 1000.0 - 0.5) * scale).collect();
        Tensor::from_f64(&dev, &values, shape, DType::F32)
    };
    let p =
        Mlp { w1: fill(&[784, 128], 0.1)?, b1: fill(&[128], 0.0)?, w2: fill(&[128, 10], 0.2)?, b2: fill(&[10], 0.0)? };
    let x = fill(&[batch, 784], 1.0)?;
    let labels = Tensor::from_slice(&dev, &(0..batch as i32).map(|i| i % 10).collect::<Vec<_>>(), &[batch])?;
    let onehot = labels.one_hot(classes, DType::F32)?;

    let (loss, g) = value_and_grad(|p: &Mlp| {
        let h = x.matmul(&p.w1)?.add(&p.b1)?.relu()?;
        let logp = h.matmul(&p.w2)?.add(&p.b2)?.log_softmax(-1)?;
        logp.mul(&onehot)?.sum(&[], false)?.neg()?.div_scalar(batch as f64)
    })(&p)?;
    let step = |w: &Tensor, g: &Tensor| w.sub(&g.mul_scalar(0.1)?);
    let new = [step(&p.w1, &g.w1)?, step(&p.b1, &g.b1)?, step(&p.w2, &g.w2)?, step(&p.b2, &g.b2)?];

    let roots: Vec<&Tensor> = std::iter::once(&loss).chain(&new).collect();
    let mut graph = Graph::new(&roots)?.name(&x, "x").name(&onehot, "one-hot labels").name(&loss, "loss");
    for (t, name) in [(&p.w1, "w1"), (&p.b1, "b1"), (&p.w2, "w2"), (&p.b2, "b2")] {
        graph = graph.name(t, name);
    }
    for (t, name) in new.iter().zip(["w1'", "b1'", "w2'", "b2'"]) {
        graph = graph.name(t, name);
    }
    for (view, file) in [(DotView::Ir, "mlp-step-ir.dot"), (DotView::Kernels, "mlp-step-kernels.dot")] {
        let path = out.join(file);
        std::fs::write(&path, graph.to_dot(view)?).map_err(|e| KilnError::Invalid {
            op: "graph example",
            detail: format!("cannot write {}: {e}", path.display()),
        })?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
