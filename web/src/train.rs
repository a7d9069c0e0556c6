//! TEMPORARY until the nn crate lands (layers, optimizers, kiln::random):
//! a 784-128-10 MLP trained with plain SGD, its one-step update captured
//! by `kiln::jit`, and a host-side seeded init.

use crate::data::Split;
use kiln::prelude::*;
use kiln_conformance::rng::Rng;
use std::rc::Rc;

pub const HIDDEN: usize = 128;
pub const CLASSES: usize = 10;
pub const BATCH: usize = 64;
/// Frozen into the captured step (see the jit sharp edge).
pub const LR: f64 = 0.1;

/// The two splits of the data set.
pub struct Mnist {
    pub train: Split,
    pub test: Split,
}

type StepFn = fn(&[Tensor]) -> Result<Vec<Tensor>>;

pub struct Trainer {
    device: Device,
    data: Rc<Mnist>,
    /// [w1 (784×128), b1, w2 (128×10), b2]
    params: Vec<Tensor>,
    step_fn: kiln::Jit<StepFn>,
    rng: Rng,
    order: Vec<usize>,
    cursor: usize,
    pub steps: usize,
    test_x: Option<(Tensor, Tensor)>,
}

/// logits = relu(x·w1 + b1)·w2 + b2
pub fn forward(params: &[Tensor], x: &Tensor) -> Result<Tensor> {
    let h = x.matmul(&params[0])?.add(&params[1])?.relu()?;
    h.matmul(&params[2])?.add(&params[3])
}

/// Mean cross-entropy of `logits` against one-hot `y`.
fn cross_entropy(logits: &Tensor, y: &Tensor) -> Result<Tensor> {
    logits.log_softmax(-1)?.mul(y)?.sum(&[-1], false)?.mean(&[], false)?.neg()
}

/// (x, one-hot y, params..) → (loss, updated params..)
fn sgd_step(inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, y) = (&inputs[0], &inputs[1]);
    let params = inputs[2..].to_vec();
    let (loss, grads) = kiln::value_and_grad(|p: &Vec<Tensor>| cross_entropy(&forward(p, x)?, y))(&params)?;
    let mut out = vec![loss];
    for (p, g) in params.iter().zip(&grads) {
        out.push(p.sub(&g.mul_scalar(LR)?)?);
    }
    Ok(out)
}

/// Uniform in ±1/√fan_in (PyTorch's default for linear layers).
fn init(device: &Device, rng: &mut Rng, shape: &[usize], fan_in: usize) -> Result<Tensor> {
    let bound = 1.0 / (fan_in as f64).sqrt();
    let values: Vec<f64> = (0..shape.iter().product()).map(|_| rng.uniform(-bound, bound)).collect();
    Tensor::from_f64(device, &values, shape, DType::F32)
}

impl Trainer {
    pub fn new(device: &Device, data: Rc<Mnist>, seed: u64) -> Result<Trainer> {
        let mut rng = Rng::new(seed);
        let inputs = data.train.pixels;
        let params = vec![
            init(device, &mut rng, &[inputs, HIDDEN], inputs)?,
            init(device, &mut rng, &[HIDDEN], inputs)?,
            init(device, &mut rng, &[HIDDEN, CLASSES], HIDDEN)?,
            init(device, &mut rng, &[CLASSES], HIDDEN)?,
        ];
        let order = (0..data.train.len()).collect();
        let mut t = Trainer {
            device: device.clone(),
            data,
            params,
            step_fn: kiln::jit(sgd_step as StepFn),
            rng,
            order,
            cursor: 0,
            steps: 0,
            test_x: None,
        };
        t.shuffle();
        Ok(t)
    }

    /// Fisher–Yates over the training order, from the trainer's generator.
    fn shuffle(&mut self) {
        for i in (1..self.order.len()).rev() {
            let j = (self.rng.next_u64() % (i as u64 + 1)) as usize;
            self.order.swap(i, j);
        }
        self.cursor = 0;
    }

    /// The next batch as (x [BATCH, 784], one-hot y [BATCH, 10]).
    fn batch(&mut self) -> Result<(Tensor, Tensor)> {
        if self.cursor + BATCH > self.order.len() {
            self.shuffle();
        }
        let train = &self.data.train;
        let idx = &self.order[self.cursor..self.cursor + BATCH];
        self.cursor += BATCH;
        let mut x = Vec::with_capacity(BATCH * train.pixels);
        for &i in idx {
            x.extend_from_slice(&train.images[i * train.pixels..(i + 1) * train.pixels]);
        }
        let labels: Vec<i32> = idx.iter().map(|&i| train.labels[i] as i32).collect();
        let x = Tensor::from_slice(&self.device, &x, &[BATCH, train.pixels])?;
        let y = Tensor::from_slice(&self.device, &labels, &[BATCH])?.one_hot(CLASSES, DType::F32)?;
        Ok((x, y))
    }

    /// `n` SGD steps; the mean of their losses, read back once.
    pub async fn step(&mut self, n: usize) -> Result<f32> {
        let mut losses = Vec::with_capacity(n);
        for _ in 0..n {
            let (x, y) = self.batch()?;
            let mut inputs = vec![x, y];
            inputs.extend(self.params.iter().cloned());
            let mut out = self.step_fn.call(&inputs).await?;
            self.params = out.split_off(1);
            losses.push(out.remove(0));
            self.steps += 1;
        }
        let refs: Vec<&Tensor> = losses.iter().collect();
        Tensor::stack(&refs, 0)?.mean(&[], false)?.item::<f32>().await
    }

    /// Accuracy on the whole test split.
    pub async fn evaluate(&mut self) -> Result<f32> {
        if self.test_x.is_none() {
            let test = &self.data.test;
            let x = Tensor::from_slice(&self.device, &test.images, &[test.len(), test.pixels])?;
            let labels: Vec<i32> = test.labels.iter().map(|&l| l as i32).collect();
            self.test_x = Some((x, Tensor::from_slice(&self.device, &labels, &[test.len()])?));
        }
        let (x, labels) = self.test_x.as_ref().expect("set above");
        let predicted = forward(&self.params, x)?.argmax(Some(-1), false)?;
        let hits = predicted.eq(&labels.cast(predicted.dtype())?)?.cast(DType::F32)?;
        hits.mean(&[], false)?.item::<f32>().await
    }

    /// Class probabilities for one image of `pixels` values in [0, 1].
    pub async fn predict(&self, pixels: &[f32]) -> Result<Vec<f32>> {
        let x = Tensor::from_slice(&self.device, pixels, &[1, pixels.len()])?;
        forward(&self.params, &x)?.softmax(-1)?.to_vec::<f32>().await
    }
}
