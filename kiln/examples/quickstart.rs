use kiln::prelude::*;
use kiln_nn::optim::{adam, training_step};
use kiln_nn::{Layer, Sequential, loss, mlp};

/// Three interleaved spirals of 100 points each: (x, y) and the spiral's index.
fn spirals(dev: &Device) -> Result<(Tensor, Tensor)> {
    let (mut points, mut labels) = (Vec::new(), Vec::new());
    for class in 0..3 {
        for i in 0..100 {
            let (r, angle) = (i as f32 / 100.0, class as f32 * 2.1 + i as f32 * 0.1);
            points.extend([r * angle.sin(), r * angle.cos()]);
            labels.push(class);
        }
    }
    Ok((Tensor::from_slice(dev, &points, &[300, 2])?, Tensor::from_slice(dev, &labels, &[300])?))
}

fn main() -> Result<()> {
    kiln::block_on(async {
        let dev = Device::gpu().await?; // the best adapter, or $KILN_ADAPTER
        println!("adapter: {} ({})", dev.info().name, dev.info().backend);
        let batch = spirals(&dev)?;
        let mut model = mlp(&dev, Key::new(0), &[2, 64, 64, 3], Layer::Relu)?;
        let opt = adam(1e-2, 0.9, 0.999, 1e-8);
        let mut state = opt.init(&model)?;
        // (model, state, batch) → (loss, model, state), captured once, replayed as one submit.
        let step = kiln::jit(training_step(opt, |m: &Sequential, (x, y): &(Tensor, Tensor)| {
            loss::cross_entropy(&m.forward(x)?, y)
        }));
        for i in 0..500 {
            let loss;
            (loss, model, state) = step.call(&(model, state, batch.clone())).await?;
            if i % 100 == 0 {
                println!("step {i}: loss {:.4}", loss.item::<f32>().await?);
            }
        }
        let (x, y) = &batch;
        let right = model.forward(x)?.argmax(Some(-1), false)?.eq(y)?.cast(DType::F32)?.mean(&[], false)?;
        println!("accuracy: {:.1}%", 100.0 * right.item::<f32>().await?);
        Ok(())
    })
}
