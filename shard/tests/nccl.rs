//! A mesh through NCCL (feature `nccl`): where the driver, a GPU and NCCL
//! are found, a world of one GPU gathers, all-reduces and computes a
//! data-parallel gradient as one device does; elsewhere asking for it is an
//! error naming what is missing (skipped by name, as the device check runs
//! this on a GPU machine).
#![cfg(feature = "nccl")]

use kiln::prelude::*;
use kiln_nn::Linear;
use kiln_shard::{Collective, Mesh, NcclWorld, Replicas, ShardTensor, Sharding};

/// Where NCCL is found (no GPU needed), its version; elsewhere the error.
#[test]
fn nccl_reports_its_version_or_what_is_missing() {
    match NcclWorld::version() {
        Ok(v) => {
            assert!(v.starts_with("2."), "NCCL {v}");
            eprintln!("NCCL {v}");
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("NCCL (libnccl.so) is not available") && msg.contains("nvidia-nccl-cu13"), "{msg}");
            kiln_require::skip("nccl", &msg);
        }
    }
}

#[test]
fn a_world_of_one_gpu_through_nccl_computes_as_one_device() {
    let world = match NcclWorld::local(&[0]) {
        Ok(w) => w,
        Err(e) => {
            let msg = e.to_string();
            let named = ["CUDA driver", "NCCL (libnccl.so)", "a CUDA GPU"].iter().any(|m| msg.contains(m));
            assert!(named && msg.contains("is not available"), "{msg}");
            return kiln_require::skip("nccl", &msg);
        }
    };
    eprintln!("NCCL {}", NcclWorld::version().unwrap());
    assert_eq!(world.world_size(), 1);
    assert_eq!(world.all_gather(vec![vec![1.0, 2.5, -3.0]]).unwrap(), vec![vec![1.0, 2.5, -3.0]]);
    let e = world.all_gather(vec![vec![1.0], vec![2.0]]).unwrap_err().to_string();
    assert!(e.contains("holds 1 ranks but gave 2 parts"), "{e}");

    let dev = Device::cuda().unwrap();
    let mesh = Mesh::over(vec![dev.clone()], Box::new(world)).unwrap();
    kiln::block_on(async {
        let p = Linear::new(&dev, Key::new(3), 6, 4).unwrap();
        let x = input(&dev, &[8, 6]);
        let labels: Vec<i32> = (0..8).map(|i| i % 4).collect();
        let y = Tensor::from_slice(&dev, &labels, &[8]).unwrap();
        let loss = |p: &Linear| kiln_nn::loss::cross_entropy(&p.forward(&x)?, &y);
        let (want_loss, want) = kiln::value_and_grad(loss)(&p).unwrap();
        let (xs, ys) =
            (x.shard(&mesh, Sharding::Split(0)).await.unwrap(), y.shard(&mesh, Sharding::Split(0)).await.unwrap());
        let params = Replicas::new(&mesh, &p).await.unwrap();
        let (got_loss, grads) =
            kiln_shard::value_and_grad(&params, |p| xs.map_with(p, "forward", |p, x| p.forward(x))?.cross_entropy(&ys))
                .await
                .unwrap();
        // One rank: the all-reduce sums one part, so the bits are one device's.
        assert_eq!(got_loss.gather().await.unwrap().data, vec![f64::from(want_loss.item::<f32>().await.unwrap())]);
        for (g, w) in grads.trees()[0].leaves().iter().zip(want.leaves()) {
            assert_eq!(g.to_vec::<f32>().await.unwrap(), w.to_vec::<f32>().await.unwrap());
        }
    });
}

/// A fixed `[rows, cols]` input in [-1, 1).
fn input(dev: &Device, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32) / 50.5 - 1.0).collect();
    Tensor::from_slice(dev, &v, shape).unwrap()
}
