//! The pieces together: an MLP trained on the bundled MNIST subset with a
//! jit-captured AdamW step over parameter and state trees, batches in a
//! permuted order, and a checkpoint resumed to the same bits.

mod common;

use kiln::prelude::*;
use kiln_nn::checkpoint::Checkpoint;
use kiln_nn::data::{ImageLayout, Mnist};
use kiln_nn::optim::*;
use std::path::Path;

#[derive(Tree)]
struct Mlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

/// Deterministic weights uniform in ±1/sqrt(fan_in) (a plain LCG: the
/// random-key helpers are not this test's subject).
fn mlp(dev: &Device) -> Mlp {
    let mut s = 12345u64;
    let mut w = |shape: &[usize]| {
        let bound = 1.0 / (shape[0] as f64).sqrt();
        let v: Vec<f64> = (0..shape.iter().product())
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * bound
            })
            .collect();
        Tensor::from_f64(dev, &v, shape, DType::F32).unwrap()
    };
    Mlp {
        w1: w(&[784, 32]),
        b1: Tensor::zeros(dev, &[32], DType::F32).unwrap(),
        w2: w(&[32, 10]),
        b2: Tensor::zeros(dev, &[10], DType::F32).unwrap(),
    }
}

fn logits(p: &Mlp, x: &Tensor) -> Result<Tensor> {
    x.matmul(&p.w1)?.add(&p.b1)?.relu()?.matmul(&p.w2)?.add(&p.b2)
}

fn one_hot(labels: &Tensor) -> Result<Tensor> {
    let classes = Tensor::arange(labels.device(), 0.0, 10.0, 1.0, DType::I32)?;
    labels.unsqueeze(1)?.eq(&classes)?.cast(DType::F32)
}

type Opt = Chain<(ClipByGlobalNorm, Chain<(ScaleByAdam, AddDecayedWeights, ScaleByLearningRate)>)>;

fn optimizer() -> Opt {
    chain((clip_by_global_norm(5.0), adamw(warmup_cosine_decay(0.0, 1e-2, 5, 60, 1e-3), 0.9, 0.999, 1e-8, 1e-4)))
}

#[test]
fn an_mlp_learns_mnist_with_a_jitted_adamw_step_and_resumes_from_a_checkpoint() {
    let data = Mnist::load(Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/mnist-10k")).unwrap();
    let order: Vec<usize> = (0..data.train.len()).map(|i| i * 7919 % data.train.len()).collect();
    for (label, dev, _) in common::devices().into_iter().take(2) {
        let opt = optimizer();
        let p0 = mlp(&dev);
        let s0 = opt.init(&p0).unwrap();
        let (np, ns) = (p0.leaves().len(), s0.leaves().len());
        // (x, one-hot y, params.., state..) → (loss, params.., state..)
        let step = kiln::jit_flat(|inputs: &[Tensor]| {
            let (x, y) = (&inputs[0], &inputs[1]);
            let p = p0.unflatten(inputs[2..2 + np].to_vec())?;
            let s = s0.unflatten(inputs[2 + np..].to_vec())?;
            let loss = |p: &Mlp| logits(p, x)?.log_softmax(-1)?.mul(y)?.sum(&[-1], false)?.mean(&[], false)?.neg();
            let (value, g) = value_and_grad(loss)(&p)?;
            let (u, s) = opt.update(&g, &s, Some(&p))?;
            Ok([vec![value], apply_updates(&p, &u)?.leaves(), s.leaves()].concat())
        });
        let run = |x: &Tensor, y: &Tensor, state: &[Tensor]| {
            let inputs = [vec![x.clone(), one_hot(y).unwrap()], state.to_vec()].concat();
            kiln::block_on(step.call(&inputs)).unwrap()
        };
        let mut state = [p0.leaves(), s0.leaves()].concat();
        let mut losses = Vec::new();
        let batches: Vec<_> = data.train.batches(order.clone(), 64, true).unwrap().take(41).collect();
        let path = std::env::temp_dir().join(format!("kiln-train-{}.safetensors", std::process::id()));
        for (i, b) in batches[..40].iter().enumerate() {
            let (x, y) = b.to_device(&dev, ImageLayout::Flat).unwrap();
            let out = run(&x, &y, &state);
            losses.push(kiln::block_on(out[0].item::<f32>()).unwrap());
            state = out[1..].to_vec();
            if i == 19 {
                let mut ck = Checkpoint::new();
                kiln::block_on(ck.add("params", &p0.unflatten(state[..np].to_vec()).unwrap())).unwrap();
                kiln::block_on(ck.add("opt", &s0.unflatten(state[np..].to_vec()).unwrap())).unwrap();
                ck.set_metadata("step", "20").unwrap();
                ck.save(&path).unwrap();
            }
        }
        let (first, last) = (losses[..5].iter().sum::<f32>() / 5.0, losses[35..].iter().sum::<f32>() / 5.0);
        assert!(first > 2.0 && last < 0.6 * first, "{label}: losses {losses:?}");
        assert_eq!(state.len(), np + ns);

        let p = p0.unflatten(state[..np].to_vec()).unwrap();
        let (x, y) = data
            .test
            .batches((0..1000).collect(), 1000, false)
            .unwrap()
            .next()
            .unwrap()
            .to_device(&dev, ImageLayout::Flat)
            .unwrap();
        let hits = logits(&p, &x).unwrap().argmax(Some(-1), false).unwrap().eq(&y).unwrap().sum(&[], false).unwrap();
        let accuracy = kiln::block_on(hits.item::<i32>()).unwrap() as f64 / 1000.0;
        assert!(accuracy > 0.7, "{label}: test accuracy {accuracy}");
        eprintln!("{label}: mean loss of steps 1-5 {first}, 36-40 {last}; test accuracy {accuracy}");

        // Resume at step 20 from the file: the next step is bit-identical.
        let ck = Checkpoint::load(&path).unwrap();
        assert_eq!(ck.metadata()["step"], "20");
        let resumed =
            [ck.tree("params", &p0, &dev).unwrap().leaves(), ck.tree("opt", &s0, &dev).unwrap().leaves()].concat();
        let mut live = [p0.leaves(), s0.leaves()].concat();
        for b in &batches[..20] {
            let (x, y) = b.to_device(&dev, ImageLayout::Flat).unwrap();
            live = run(&x, &y, &live)[1..].to_vec();
        }
        let (x, y) = batches[20].to_device(&dev, ImageLayout::Flat).unwrap();
        let (a, b) = (run(&x, &y, &live), run(&x, &y, &resumed));
        for (u, v) in a.iter().zip(&b) {
            if label == "cpu" {
                // The reference holds f32 tensors in f64; the file holds f32.
                common::assert_close(&format!("{label}: resumed step"), &common::read(u), &common::read(v), 1e-6);
            } else {
                assert_eq!(common::read(u), common::read(v), "{label}: resumed step");
            }
        }
        assert_eq!(step.captures(), if label == "cpu" { 0 } else { 1 }, "{label}");
        std::fs::remove_file(&path).unwrap();
    }
}
