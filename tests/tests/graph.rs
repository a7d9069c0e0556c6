//! Graph pictures: the IR as DOT lists every node and edge; the kernel view
//! draws exactly the kernels the scheduler launches, each around the nodes
//! it computes.

use kiln::prelude::*;
use kiln::{DotView, Graph};
use kiln_conformance::adapters::shared as devices;
use kiln_conformance::rng::tensor;
use std::collections::HashMap;

/// Node id → the cluster it is drawn in (None: outside every kernel), and
/// the number of edges.
fn parse(dot: &str) -> (HashMap<String, Option<usize>>, usize) {
    let (mut nodes, mut edges, mut cluster) = (HashMap::new(), 0, None);
    for line in dot.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("subgraph cluster_") {
            cluster = Some(rest.trim_end_matches(" {").parse().unwrap());
        } else if line == "}" {
            cluster = None;
        } else if line.contains(" -> ") {
            edges += 1;
        } else if line.starts_with('n') && line.contains(" [label=") {
            nodes.insert(line.split(' ').next().unwrap().to_string(), cluster);
        }
    }
    (nodes, edges)
}

fn id(t: &Tensor) -> String {
    format!("n{}", t.node().id())
}

#[test]
fn the_ir_view_lists_every_node_and_edge() {
    let dev = Device::cpu();
    let x = tensor(&dev, &[4, 3], 1, -1.0, 1.0);
    let w = tensor(&dev, &[3, 2], 2, -1.0, 1.0);
    let b = tensor(&dev, &[2], 3, -1.0, 1.0);
    let y = x.matmul(&w).unwrap().add(&b).unwrap().relu().unwrap();
    let dot = Graph::new(&[&y]).unwrap().name(&w, "weight").to_dot(DotView::Ir).unwrap();
    let (nodes, edges) = parse(&dot);
    // x, w, b, matmul, expand(b), add, relu; edges: 2 + 1 + 2 + 1.
    assert_eq!(nodes.len(), 7, "{dot}");
    assert_eq!(edges, 6, "{dot}");
    assert!(nodes.values().all(Option::is_none), "no clusters before fusion");
    assert!(dot.contains("weight\\ninput\\nf32[3, 2]"), "{dot}");
}

#[test]
fn the_kernel_view_on_the_cpu_reference_is_an_error() {
    let dev = Device::cpu();
    let y = tensor(&dev, &[3], 1, -1.0, 1.0).exp().unwrap();
    let err = Graph::new(&[&y]).unwrap().to_dot(DotView::Kernels).unwrap_err();
    assert!(err.to_string().contains("plan_kernels"), "{err}");
    assert!(Graph::new(&[]).is_err());
}

#[test]
fn the_kernel_view_draws_the_kernels_that_run() {
    for (label, dev) in devices().iter() {
        let x = tensor(dev, &[64, 32], 1, -1.0, 1.0);
        let w = tensor(dev, &[32, 16], 2, -1.0, 1.0);
        let b = tensor(dev, &[16], 3, -1.0, 1.0);
        let mm = x.matmul(&w).unwrap();
        let y = mm.add(&b).unwrap().relu().unwrap();
        let probs = y.softmax(-1).unwrap();
        let dot = Graph::new(&[&probs]).unwrap().to_dot(DotView::Kernels).unwrap();
        let (nodes, _) = parse(&dot);
        let clusters = dot.matches("subgraph cluster_").count() as u64;
        // relu(x @ w + b) is one matmul with an epilogue; softmax reads it.
        assert_eq!(nodes[&id(&mm)], nodes[&id(&y)], "{label}: epilogue in the matmul's kernel\n{dot}");
        assert!(nodes[&id(&mm)].is_some() && nodes[&id(&probs)].is_some(), "{label}\n{dot}");
        assert_eq!(nodes[&id(&x)], None, "{label}: inputs are drawn as data");
        let before = dev.stats().kernels_launched;
        kiln::block_on(probs.realize()).unwrap();
        assert_eq!(dev.stats().kernels_launched - before, clusters, "{label}: one cluster per launch\n{dot}");
    }
}

#[test]
fn an_mlp_training_step_draws_one_cluster_per_launch() {
    for (label, dev) in devices().iter() {
        let x = tensor(dev, &[32, 64], 1, 0.0, 1.0);
        let labels = Tensor::from_slice(dev, &(0..32).map(|i| i % 10).collect::<Vec<i32>>(), &[32]).unwrap();
        let params = vec![tensor(dev, &[64, 32], 2, -0.2, 0.2), tensor(dev, &[32], 3, -0.1, 0.1)];
        let head = tensor(dev, &[32, 10], 4, -0.2, 0.2);
        let (loss, grads) = value_and_grad(|p: &Vec<Tensor>| {
            let h = x.matmul(&p[0])?.add(&p[1])?.relu()?;
            let logp = h.matmul(&head)?.log_softmax(-1)?;
            logp.mul(&labels.one_hot(10, DType::F32)?)?.sum(&[], false)?.neg()?.div_scalar(32.0)
        })(&params)
        .unwrap();
        let new: Vec<Tensor> =
            params.iter().zip(&grads).map(|(p, g)| p.sub(&g.mul_scalar(0.1)?)).collect::<Result<_>>().unwrap();
        let roots: Vec<&Tensor> = std::iter::once(&loss).chain(&new).collect();
        let dot = Graph::new(&roots).unwrap().to_dot(DotView::Kernels).unwrap();
        let clusters = dot.matches("subgraph cluster_").count() as u64;
        let before = dev.stats().kernels_launched;
        kiln::block_on(Tensor::realize_all(&roots)).unwrap();
        assert_eq!(dev.stats().kernels_launched - before, clusters, "{label}\n{dot}");
        assert!(clusters >= 4, "{label}: forward, backward and update need several kernels");
    }
}
