//! A first look at kiln: a broadcast add, a matmul and a softmax on the
//! best adapter found (set KILN_ADAPTER=gl, vulkan, or part of a name).

use kiln::prelude::*;

fn main() -> Result<()> {
    kiln::block_on(run())
}

async fn run() -> Result<()> {
    let dev = Device::gpu().await?;
    let info = dev.info();
    println!(
        "adapter: {} ({}, {}, driver {} {})",
        info.name, info.backend, info.device_type, info.driver, info.driver_info
    );

    let a = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    let b = Tensor::from_slice(&dev, &[10.0f32, 20.0, 30.0], &[3])?;
    let sum = a.add(&b)?;
    println!("[2,3] + [3] (broadcast) = {:?}", sum.to_vec::<f32>().await?);

    let w = Tensor::from_slice(&dev, &[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])?;
    let product = a.matmul(&w)?;
    println!("[2,3] @ [3,2] = {:?}", product.to_vec::<f32>().await?);

    let logits = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 1000.0, 1000.0, 1000.0], &[2, 3])?;
    let probs = logits.softmax(-1)?;
    println!("softmax rows = {:?}", probs.to_vec::<f32>().await?);

    let stats = dev.stats();
    println!(
        "{} kernels in {} submits, {} pipelines compiled",
        stats.kernels_launched, stats.submits, stats.pipelines_compiled
    );
    Ok(())
}
