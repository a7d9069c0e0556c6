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

/// `got`, gathered, against `want` computed on one device.
async fn same_as(got: &Sharded, want: &Tensor, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "shape");
    close(&got.gather().await.unwrap().data, &want.to_vec::<f32>().await.unwrap(), tol);
}

#[test]
fn batched_matmuls_follow_a_split_batch_or_rows() {
    kiln::block_on(async {
        let one = Device::cpu();
        let m = mesh(2);
        let x = Tensor::from_slice(&one, &values(3 * 4 * 5, 11), &[3, 4, 5]).unwrap();
        let w = Tensor::from_slice(&one, &values(5 * 2, 12), &[5, 2]).unwrap();
        let wb = Tensor::from_slice(&one, &values(3 * 5 * 2, 13), &[3, 5, 2]).unwrap();
        let (ws, wbs) =
            (w.shard(&m, Sharding::Replicated).await.unwrap(), wb.shard(&m, Sharding::Replicated).await.unwrap());
        for axis in [0, 1] {
            let xs = x.shard(&m, Sharding::Split(axis)).await.unwrap();
            // A shared weight, and (split along the batch) a weight per batch
            // item, which each rank slices to its own block.
            for (right, right_sharded) in [(&w, &ws), (&wb, &wbs)] {
                let got = xs.matmul(right_sharded).unwrap();
                assert_eq!(got.sharding(), Sharding::Split(axis), "split {axis} × {:?}", right.shape());
                same_as(&got, &x.matmul(right).unwrap(), 1e-6).await;
            }
        }
        // The right side's columns split: the product's columns split.
        let cols = wb.shard(&m, Sharding::Split(2)).await.unwrap();
        let xr = x.shard(&m, Sharding::Replicated).await.unwrap();
        let got = xr.matmul(&cols).unwrap();
        assert_eq!(got.sharding(), Sharding::Split(2));
        same_as(&got, &x.matmul(&wb).unwrap(), 1e-6).await;
    })
}

#[test]
fn means_and_row_ops_follow_the_split() {
    kiln::block_on(async {
        let one = Device::cpu();
        let m = mesh(3);
        let x = Tensor::from_slice(&one, &values(7 * 4, 21), &[7, 4]).unwrap();
        let xs = x.shard(&m, Sharding::Split(0)).await.unwrap();
        // Over the split axis: each rank's part of the global mean.
        let over_rows = xs.mean(&[0], false).unwrap();
        assert_eq!(over_rows.sharding(), Sharding::Partial);
        same_as(&over_rows, &x.mean(&[0], false).unwrap(), 1e-6).await;
        let whole = xs.mean(&[], true).unwrap();
        assert_eq!((whole.sharding(), whole.shape()), (Sharding::Partial, &[1, 1][..]));
        same_as(&whole, &x.mean(&[], true).unwrap(), 1e-6).await;
        // Along the other axis: per row, still split.
        let per_row = xs.mean(&[-1], true).unwrap();
        assert_eq!((per_row.sharding(), per_row.shape()), (Sharding::Split(0), &[7, 1][..]));
        same_as(&per_row, &x.mean(&[-1], true).unwrap(), 1e-6).await;
        let log_p = xs.log_softmax(1).unwrap();
        assert_eq!(log_p.sharding(), Sharding::Split(0));
        same_as(&log_p, &x.log_softmax(1).unwrap(), 1e-6).await;
        // Split along the columns, a reduction over the rows keeps the split
        // axis (now axis 0 of the result).
        let xc = x.shard(&m, Sharding::Split(1)).await.unwrap();
        let col_means = xc.mean(&[0], false).unwrap();
        assert_eq!(col_means.sharding(), Sharding::Split(0));
        same_as(&col_means, &x.mean(&[0], false).unwrap(), 1e-6).await;
    })
}

#[test]
fn partial_sums_stay_partial_only_under_linear_ops() {
    kiln::block_on(async {
        let one = Device::cpu();
        let m = mesh(2);
        let x = Tensor::from_slice(&one, &values(5 * 3, 31), &[5, 3]).unwrap();
        let r = Tensor::from_slice(&one, &values(3, 32).iter().map(|v| v + 2.0).collect::<Vec<_>>(), &[3]).unwrap();
        let xs = x.shard(&m, Sharding::Split(0)).await.unwrap();
        let rs = r.shard(&m, Sharding::Replicated).await.unwrap();
        let p = xs.sum(&[0], false).unwrap();
        let total = x.sum(&[0], false).unwrap();
        let linear: [(&str, Sharded, Tensor); 5] = [
            ("p + p", p.add(&p).unwrap(), total.add(&total).unwrap()),
            ("p - p·r", p.sub(&p.mul(&rs).unwrap()).unwrap(), total.sub(&total.mul(&r).unwrap()).unwrap()),
            ("p · r", p.mul(&rs).unwrap(), total.mul(&r).unwrap()),
            ("r · p", rs.mul(&p).unwrap(), r.mul(&total).unwrap()),
            ("p / r", p.div(&rs).unwrap(), total.div(&r).unwrap()),
        ];
        for (what, got, want) in linear {
            assert_eq!(got.sharding(), Sharding::Partial, "{what}");
            same_as(&got, &want, 1e-6).await;
        }
        // Each of these would count a replicated value once per rank, or
        // apply a nonlinear op to a part.
        let err = |r: Result<Sharded>| r.unwrap_err().to_string();
        assert!(err(p.add(&rs)).starts_with("add: partial (awaiting all-reduce) and replicated"));
        assert!(err(rs.div(&p)).starts_with("div: replicated and partial"));
        assert!(err(p.zip_with("max", &p, Tensor::maximum)).starts_with("max: partial"));
        assert!(err(p.map("exp", Tensor::exp)).contains("is a partial sum; all_reduce it first"));
    })
}

#[test]
fn losses_over_split_rows_equal_the_whole_batch_loss() {
    kiln::block_on(async {
        let one = Device::cpu();
        let m = mesh(3);
        let (n, c) = (8, 5);
        let x = Tensor::from_slice(&one, &values(n * c, 41), &[n, c]).unwrap();
        let soft = Tensor::from_slice(&one, &values(n * c, 42), &[n, c]).unwrap().softmax(-1).unwrap();
        let unit = Tensor::from_slice(&one, &values(n * c, 43), &[n, c]).unwrap().sigmoid().unwrap();
        let labels: Vec<i32> = (0..n as i32).map(|i| (i * 3) % c as i32).collect();
        let y = Tensor::from_slice(&one, &labels, &[n]).unwrap();
        type Loss = fn(&Sharded, &Sharded) -> Result<Sharded>;
        type Want = fn(&Tensor, &Tensor) -> Result<Tensor>;
        let cases: [(&str, Loss, Want, &Tensor); 4] = [
            ("cross_entropy", Sharded::cross_entropy, kiln_nn::loss::cross_entropy, &y),
            ("cross_entropy_one_hot", Sharded::cross_entropy_one_hot, kiln_nn::loss::cross_entropy_one_hot, &soft),
            ("mse", Sharded::mse, kiln_nn::loss::mse, &soft),
            ("bce", Sharded::binary_cross_entropy_with_logits, kiln_nn::loss::binary_cross_entropy_with_logits, &unit),
        ];
        for (name, sharded, whole, targets) in cases {
            let want = whole(&x, targets).unwrap();
            for (sharding, result) in
                [(Sharding::Split(0), Sharding::Partial), (Sharding::Replicated, Sharding::Replicated)]
            {
                let (xs, ts) = (x.shard(&m, sharding).await.unwrap(), targets.shard(&m, sharding).await.unwrap());
                let got = sharded(&xs, &ts).unwrap();
                assert_eq!(got.sharding(), result, "{name} over {sharding}");
                same_as(&got, &want, 1e-6).await;
            }
        }
        let xs = x.shard(&m, Sharding::Split(0)).await.unwrap();
        let e = xs.mse(&soft.shard(&m, Sharding::Replicated).await.unwrap()).unwrap_err().to_string();
        assert!(e.starts_with("mse: needs predictions [8, 5] and targets [8, 5] both split along axis 0"), "{e}");
        let short = Tensor::from_slice(&one, &labels[..6], &[6]).unwrap().shard(&m, Sharding::Split(0)).await.unwrap();
        let e = xs.cross_entropy(&short).unwrap_err().to_string();
        assert!(e.contains("predictions [8, 5] and targets [6] have different numbers of items"), "{e}");
    })
}

#[test]
fn a_sharded_regression_gradient_equals_the_whole_batch_gradient() {
    kiln::block_on(async {
        let one = Device::cpu();
        let (n, d, k) = (10, 3, 2);
        let p = Linear {
            weight: Tensor::from_slice(&one, &values(d * k, 51), &[d, k]).unwrap(),
            bias: Tensor::from_slice(&one, &values(k, 52), &[k]).unwrap(),
        };
        let x = Tensor::from_slice(&one, &values(n * d, 53), &[n, d]).unwrap();
        let t = Tensor::from_slice(&one, &values(n * k, 54), &[n, k]).unwrap();
        let forward = |p: &Linear, x: &Tensor| x.matmul(&p.weight)?.add(&p.bias);
        let (want_loss, want) = value_and_grad(|p: &Linear| kiln_nn::loss::mse(&forward(p, &x)?, &t))(&p).unwrap();
        let m = mesh(3);
        let (xs, ts) = (x.shard(&m, Sharding::Split(0)).await.unwrap(), t.shard(&m, Sharding::Split(0)).await.unwrap());
        let params = Replicas::new(&m, &p).await.unwrap();
        let (loss, grads) =
            kiln_shard::value_and_grad(&params, |p| xs.map_with(p, "forward", forward)?.mse(&ts)).await.unwrap();
        close(&loss.gather().await.unwrap().data, &[want_loss.item::<f32>().await.unwrap()], 1e-6);
        for tree in grads.trees() {
            for (g, w) in tree.leaves().iter().zip(want.leaves()) {
                close(&g.to_host().await.unwrap().data, &w.to_vec::<f32>().await.unwrap(), 1e-6);
            }
        }
    })
}

#[test]
fn shards_and_host_values_that_do_not_make_up_the_shape_are_errors() {
    let m = mesh(2);
    let on = |rank: usize, shape: &[usize], dtype: DType| Tensor::zeros(&m.devices()[rank], shape, dtype).unwrap();
    let err = |shape: Vec<usize>, sharding, shards| {
        Sharded::from_shards(&m, sharding, shape, shards).unwrap_err().to_string()
    };
    // 7 rows over 2 ranks: blocks of 4 and 3.
    let ok = Sharded::from_shards(
        &m,
        Sharding::Split(0),
        vec![7, 2],
        vec![on(0, &[4, 2], DType::F32), on(1, &[3, 2], DType::F32)],
    );
    assert_eq!(ok.unwrap().shape(), [7, 2]);
    let e = err(vec![8, 2], Sharding::Split(0), vec![on(0, &[3, 2], DType::F32), on(1, &[5, 2], DType::F32)]);
    assert_eq!(e, "from_shards: rank 0's shard is [3, 2], but [8, 2] split along axis 0 gives it [4, 2]");
    let e = err(vec![4, 2], Sharding::Replicated, vec![on(0, &[4, 2], DType::F32), on(1, &[4], DType::F32)]);
    assert_eq!(e, "from_shards: rank 1's shard is [4], but [4, 2] replicated gives it [4, 2]");
    let e = err(vec![2], Sharding::Partial, vec![on(0, &[2], DType::F32), on(1, &[2], DType::I32)]);
    assert_eq!(e, "from_shards: rank 1's shard is i32, rank 0's f32");
    let short = kiln::core::interp::HostArray::new(DType::F32, vec![4, 2], vec![0.0; 6]);
    let e = Sharded::from_host(&m, &short, Sharding::Split(0)).unwrap_err().to_string();
    assert_eq!(e, "shard: 6 values do not fill shape [4, 2]");
    let e = Sharded::from_slice(&m, &[1.0f32], &[1 << 40, 1 << 40], Sharding::Split(0)).unwrap_err().to_string();
    assert!(e.contains("1 values do not fill shape [1099511627776, 1099511627776]"), "{e}");
}

#[test]
fn a_rank_with_no_rows_adds_nothing_to_a_loss() {
    kiln::block_on(async {
        let m = mesh(2);
        let one = Device::cpu();
        let (x, t) = (values(3, 61), values(3, 62));
        let want = kiln_nn::loss::mse(
            &Tensor::from_slice(&one, &x, &[1, 3]).unwrap(),
            &Tensor::from_slice(&one, &t, &[1, 3]).unwrap(),
        )
        .unwrap();
        // One row over two ranks: rank 1's block is empty.
        let on =
            |rank: usize, data: &[f32], rows: usize| Tensor::from_slice(&m.devices()[rank], data, &[rows, 3]).unwrap();
        let split = |data: &[f32]| {
            Sharded::from_shards(&m, Sharding::Split(0), vec![1, 3], vec![on(0, data, 1), on(1, &[], 0)]).unwrap()
        };
        let loss = split(&x).mse(&split(&t)).unwrap();
        let got = loss.gather().await.unwrap().data;
        assert!(got[0].is_finite(), "{got:?}");
        close(&got, &[want.item::<f32>().await.unwrap()], 1e-6);
    })
}
