//! Tensors laid across a mesh, and ops whose results follow the shardings
//! of their operands: each rank runs the op on its own part (one lazy graph
//! per device), and a reduction over a split axis leaves a partial sum for
//! [`Sharded::all_reduce`].

use crate::collective::all_reduce_sum;
use crate::mesh::Mesh;
use crate::ravel::{ravel, unravel};
use crate::replicas::Replicas;
use crate::sharding::{Sharding, block};
use kiln::core::interp::HostArray;
use kiln::core::shape::{Layout, SliceSpec, broadcast_shapes, checked_numel, normalize_axis, numel};
use kiln::prelude::*;
use kiln::{Element, KilnError};
use std::future::Future;

/// A tensor of a global shape laid across a [`Mesh`]: one local tensor (a
/// shard) per rank this process holds, each on its rank's device.
#[derive(Clone, Debug)]
pub struct Sharded {
    mesh: Mesh,
    sharding: Sharding,
    shape: Vec<usize>,
    shards: Vec<Tensor>,
}

/// `Tensor::shard`: lay a tensor across a mesh.
pub trait ShardTensor {
    /// This tensor's values laid across `mesh` by `sharding` (read back
    /// from its device, then each rank's part uploaded to its device).
    fn shard(&self, mesh: &Mesh, sharding: Sharding) -> impl Future<Output = Result<Sharded>>;
}

impl ShardTensor for Tensor {
    async fn shard(&self, mesh: &Mesh, sharding: Sharding) -> Result<Sharded> {
        Sharded::from_host(mesh, &self.to_host().await?, sharding)
    }
}

fn sharding_err(op: &'static str, detail: String) -> KilnError {
    KilnError::Invalid { op, detail }
}

/// How a binary op treats partial sums: only linear ops keep them partial.
#[derive(Clone, Copy, PartialEq)]
enum Linearity {
    /// `p + q` of two partial sums is the partial sum of the total.
    Additive,
    /// `p * r` or `r * p` with `r` replicated.
    Product,
    /// `p / r` with `r` replicated.
    Quotient,
    Nonlinear,
}

impl Sharded {
    /// The values of `host` (the whole tensor, on every process) laid out
    /// by `sharding`: each rank uploads its block.
    pub fn from_host(mesh: &Mesh, host: &HostArray, sharding: Sharding) -> Result<Sharded> {
        let op = "shard";
        let (shape, world) = (host.shape.clone(), mesh.world_size());
        if checked_numel(&shape) != Some(host.data.len()) {
            return Err(KilnError::Shape {
                op,
                detail: format!("{} values do not fill shape {shape:?}", host.data.len()),
            });
        }
        let sharding = match sharding {
            Sharding::Partial => {
                return Err(sharding_err(op, "a whole value cannot be laid out as a partial sum".into()));
            }
            Sharding::Split(axis) => {
                let a = normalize_axis(op, axis, shape.len())?;
                if shape[a] < world {
                    return Err(sharding_err(
                        op,
                        format!("axis {axis} of shape {shape:?} has {} items, fewer than the {world} ranks", shape[a]),
                    ));
                }
                Sharding::Split(a as isize)
            }
            Sharding::Replicated => Sharding::Replicated,
        };
        let shards = mesh
            .ranks()
            .map(|(rank, device)| {
                let (data, local) = match sharding {
                    Sharding::Split(a) => host_block(host, a as usize, world, rank),
                    _ => (host.data.clone(), shape.clone()),
                };
                Tensor::from_f64(device, &data, &local, host.dtype)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Sharded { mesh: mesh.clone(), sharding, shape, shards })
    }

    /// `data` of `shape` laid out by `sharding` (see [`Sharded::from_host`]).
    pub fn from_slice<T: Element>(mesh: &Mesh, data: &[T], shape: &[usize], sharding: Sharding) -> Result<Sharded> {
        // `from_host` checks that the values fill the shape.
        let host = HostArray::new(T::DTYPE, shape.to_vec(), data.iter().map(|v| v.to_f64()).collect());
        Sharded::from_host(mesh, &host, sharding)
    }

    /// Shards already on the mesh's devices, one per local rank, making up
    /// a tensor of global `shape` laid out by `sharding`.
    pub fn from_shards(mesh: &Mesh, sharding: Sharding, shape: Vec<usize>, shards: Vec<Tensor>) -> Result<Sharded> {
        let op = "from_shards";
        if shards.len() != mesh.devices().len() {
            return Err(sharding_err(
                op,
                format!("{} shards for the {} local ranks", shards.len(), mesh.devices().len()),
            ));
        }
        for (i, (s, device)) in shards.iter().zip(mesh.devices()).enumerate() {
            if s.device() != device {
                return Err(KilnError::DeviceMismatch {
                    op,
                    left: format!("rank {i}'s device {}", device.info().name),
                    right: s.device().info().name,
                });
            }
        }
        let sharding = match sharding {
            Sharding::Split(axis) => Sharding::Split(normalize_axis(op, axis, shape.len())? as isize),
            other => other,
        };
        for ((rank, _), s) in mesh.ranks().zip(&shards) {
            let mut want = shape.clone();
            if let Sharding::Split(a) = sharding {
                want[a as usize] = block(shape[a as usize], mesh.world_size(), rank).1;
            }
            if s.shape() != want {
                return Err(KilnError::Shape {
                    op,
                    detail: format!(
                        "rank {rank}'s shard is {:?}, but {shape:?} {sharding} gives it {want:?}",
                        s.shape()
                    ),
                });
            }
            if s.dtype() != shards[0].dtype() {
                return Err(KilnError::DType {
                    op,
                    detail: format!("rank {rank}'s shard is {}, rank 0's {}", s.dtype(), shards[0].dtype()),
                });
            }
        }
        Ok(Sharded { mesh: mesh.clone(), sharding, shape, shards })
    }

    /// The mesh it is laid across.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }
    /// How it is laid across the mesh.
    pub fn sharding(&self) -> Sharding {
        self.sharding
    }
    /// The global shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The element type (every shard's).
    pub fn dtype(&self) -> DType {
        self.shards[0].dtype()
    }
    /// This process's shards, one per local rank.
    pub fn shards(&self) -> &[Tensor] {
        &self.shards
    }

    fn split_axis(&self) -> Option<usize> {
        match self.sharding {
            Sharding::Split(a) => Some(a as usize),
            _ => None,
        }
    }

    /// Local rank `i`'s block along `axis` of this replicated tensor: its
    /// part against an operand split along that axis.
    fn block_of(&self, i: usize, axis: usize) -> Result<Tensor> {
        let rank = self.mesh.local_ranks().start + i;
        let (start, len) = block(self.shape[axis], self.mesh.world_size(), rank);
        self.shards[i].narrow(axis as isize, start, len)
    }

    fn with(&self, sharding: Sharding, shape: Vec<usize>, shards: Vec<Tensor>) -> Sharded {
        Sharded { mesh: self.mesh.clone(), sharding, shape, shards }
    }

    fn expect_same_mesh(&self, op: &'static str, other: &Mesh) -> Result<()> {
        if self.mesh != *other {
            return Err(sharding_err(op, format!("operands are on different meshes ({:?} and {other:?})", self.mesh)));
        }
        Ok(())
    }

    fn refuse_partial(&self, op: &'static str) -> Result<()> {
        if self.sharding == Sharding::Partial {
            return Err(sharding_err(
                op,
                format!("its operand of shape {:?} is a partial sum; all_reduce it first", self.shape),
            ));
        }
        Ok(())
    }

    /// `f` on every shard, for an op that maps the split axis's items one to
    /// one (elementwise ops, a model's forward pass over a batch split along
    /// its rows). A split result keeps its axis and must keep its extent.
    pub fn map(&self, op: &'static str, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Sharded> {
        self.refuse_partial(op)?;
        let shards = self.shards.iter().map(&f).collect::<Result<Vec<_>>>()?;
        self.mapped(op, shards)
    }

    /// `f` on every shard with the same rank's copy of a replicated tree
    /// (a model's parameters): `x.map_with(&params, "forward", |p, x| p.forward(x))`.
    pub fn map_with<P: Tree + Clone>(
        &self,
        replicas: &Replicas<P>,
        op: &'static str,
        f: impl Fn(&P, &Tensor) -> Result<Tensor>,
    ) -> Result<Sharded> {
        self.refuse_partial(op)?;
        self.expect_same_mesh(op, replicas.mesh())?;
        let shards = replicas.trees().iter().zip(&self.shards).map(|(p, x)| f(p, x)).collect::<Result<Vec<_>>>()?;
        self.mapped(op, shards)
    }

    /// The sharded result of a per-shard op, its global shape worked out.
    fn mapped(&self, op: &'static str, shards: Vec<Tensor>) -> Result<Sharded> {
        let local = shards[0].shape().to_vec();
        let Some(a) = self.split_axis() else {
            return Ok(self.with(self.sharding, local, shards));
        };
        for (s, x) in shards.iter().zip(&self.shards) {
            if s.rank() != self.shape.len() || s.shape()[a] != x.shape()[a] {
                return Err(sharding_err(
                    op,
                    format!(
                        "a shard of shape {:?} (split along axis {a}) became {:?}: a per-shard op must keep \
                         the split axis and its extent",
                        x.shape(),
                        s.shape()
                    ),
                ));
            }
        }
        let mut shape = local;
        shape[a] = self.shape[a];
        Ok(self.with(self.sharding, shape, shards))
    }

    /// An elementwise binary op under broadcasting: split with split along
    /// the same axis, split with replicated (whose matching block each rank
    /// takes when it is not broadcast along the split axis), replicated with
    /// replicated; partial sums only where `linearity` keeps them.
    fn binary(
        &self,
        op: &'static str,
        other: &Sharded,
        linearity: Linearity,
        f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<Sharded> {
        self.expect_same_mesh(op, &other.mesh)?;
        let shape = broadcast_shapes(op, &self.shape, &other.shape)?;
        let rank = shape.len();
        // The split axis in the result's coordinates.
        let placed = |s: &Sharded| s.split_axis().map(|a| a + rank - s.shape.len());
        use Sharding::*;
        let sharding = match (self.sharding, other.sharding) {
            (Partial, Partial) if linearity == Linearity::Additive => Partial,
            (Partial, Replicated) if matches!(linearity, Linearity::Product | Linearity::Quotient) => Partial,
            (Replicated, Partial) if linearity == Linearity::Product => Partial,
            (Partial, _) | (_, Partial) => {
                return Err(sharding_err(
                    op,
                    format!(
                        "{} and {}: a partial sum only adds to another or scales by a replicated value; \
                         all_reduce it first",
                        self.sharding, other.sharding
                    ),
                ));
            }
            (Replicated, Replicated) => Replicated,
            (Split(_), Split(_)) if placed(self) == placed(other) && self.shape.len() == other.shape.len() => {
                Split(placed(self).expect("split") as isize)
            }
            (Split(_), Replicated) => Split(placed(self).expect("split") as isize),
            (Replicated, Split(_)) => Split(placed(other).expect("split") as isize),
            (a, b) => {
                return Err(sharding_err(
                    op,
                    format!(
                        "shapes {:?} ({a}) and {:?} ({b}) are split along different axes; gather one first",
                        self.shape, other.shape
                    ),
                ));
            }
        };
        let local_of = |s: &Sharded, i: usize| -> Result<Tensor> {
            // A replicated operand against a split one takes its block where
            // it is not broadcast along the split axis.
            if let (Split(axis), Replicated) = (sharding, s.sharding) {
                let at = axis - (rank - s.shape.len()) as isize;
                if at >= 0 && s.shape[at as usize] > 1 {
                    return s.block_of(i, at as usize);
                }
            }
            Ok(s.shards[i].clone())
        };
        let shards =
            (0..self.shards.len()).map(|i| f(&local_of(self, i)?, &local_of(other, i)?)).collect::<Result<Vec<_>>>()?;
        Ok(self.with(sharding, shape, shards))
    }

    /// Elementwise sum, broadcast; partial sums add to a partial sum.
    pub fn add(&self, other: &Sharded) -> Result<Sharded> {
        self.binary("add", other, Linearity::Additive, Tensor::add)
    }
    /// Elementwise difference, broadcast; partial sums subtract to a partial sum.
    pub fn sub(&self, other: &Sharded) -> Result<Sharded> {
        self.binary("sub", other, Linearity::Additive, Tensor::sub)
    }
    /// Elementwise product, broadcast; a partial sum times a replicated value stays partial.
    pub fn mul(&self, other: &Sharded) -> Result<Sharded> {
        self.binary("mul", other, Linearity::Product, Tensor::mul)
    }
    /// Elementwise quotient, broadcast; a partial sum over a replicated value stays partial.
    pub fn div(&self, other: &Sharded) -> Result<Sharded> {
        self.binary("div", other, Linearity::Quotient, Tensor::div)
    }
    /// `f` on every pair of shards, for any other elementwise binary op
    /// (not linear: partial sums are refused).
    pub fn zip_with(
        &self,
        op: &'static str,
        other: &Sharded,
        f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<Sharded> {
        self.binary(op, other, Linearity::Nonlinear, f)
    }

    /// Matrix product `[.., m, k] × [.., k, n]`: rows split with the right
    /// side replicated gives rows split, columns split on the right gives
    /// columns split, and both split along `k` gives a partial sum (the
    /// gradient of a weight from a batch split along its rows).
    pub fn matmul(&self, other: &Sharded) -> Result<Sharded> {
        let op = "matmul";
        self.expect_same_mesh(op, &other.mesh)?;
        let (ra, rb) = (self.shape.len(), other.shape.len());
        if ra < 2 || rb < 2 {
            return Err(KilnError::Shape {
                op,
                detail: format!("sharded matmul needs rank ≥ 2 operands, got {:?} and {:?}", self.shape, other.shape),
            });
        }
        use Sharding::*;
        let refuse = || {
            sharding_err(
                op,
                format!(
                    "{:?} ({}) × {:?} ({}) has no sharded form here: split the left side's rows or batch, \
                     the right side's columns, or both along k",
                    self.shape, self.sharding, other.shape, other.sharding
                ),
            )
        };
        let (sharding, slice_right_batch) = match (self.sharding, other.sharding) {
            (Replicated, Replicated) => (Replicated, None),
            (Partial, Replicated) | (Replicated, Partial) => (Partial, None),
            (Split(a), Split(b)) if a as usize == ra - 1 && b as usize == rb - 2 => (Partial, None),
            (Split(a), Replicated) if (a as usize) < ra - 1 => {
                let out_rank = ra.max(rb);
                let placed = a as usize + out_rank - ra;
                // A batch axis the right side also has must be sliced alike.
                let at = placed as isize - (out_rank - rb) as isize;
                let slice = (a as usize) < ra - 2 && at >= 0 && other.shape[at as usize] > 1;
                (Split(placed as isize), slice.then_some(at as usize))
            }
            (Replicated, Split(b)) if b as usize == rb - 1 => (Split((ra.max(rb) - 1) as isize), None),
            _ => return Err(refuse()),
        };
        let shards = self
            .shards
            .iter()
            .zip(&other.shards)
            .enumerate()
            .map(|(i, (a, b))| match slice_right_batch {
                Some(at) => a.matmul(&other.block_of(i, at)?),
                None => a.matmul(b),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut shape = broadcast_shapes(op, &self.shape[..ra - 2], &other.shape[..rb - 2])?;
        shape.extend([self.shape[ra - 2], other.shape[rb - 1]]);
        Ok(self.with(sharding, shape, shards))
    }

    /// Sum over `axes` (empty: all). Over the split axis each rank sums its
    /// block: a partial sum.
    pub fn sum(&self, axes: &[isize], keepdim: bool) -> Result<Sharded> {
        self.reduce("sum", axes, keepdim, 1.0)
    }

    /// Mean over `axes` (empty: all), dividing by the global count.
    pub fn mean(&self, axes: &[isize], keepdim: bool) -> Result<Sharded> {
        let reduced = self.reduced_axes("mean", axes)?;
        let count: usize = reduced.iter().map(|&a| self.shape[a]).product();
        self.reduce("mean", axes, keepdim, 1.0 / count as f64)
    }

    fn reduced_axes(&self, op: &'static str, axes: &[isize]) -> Result<Vec<usize>> {
        if axes.is_empty() {
            return Ok((0..self.shape.len()).collect());
        }
        axes.iter().map(|&a| normalize_axis(op, a, self.shape.len())).collect()
    }

    fn reduce(&self, op: &'static str, axes: &[isize], keepdim: bool, scale: f64) -> Result<Sharded> {
        let reduced = self.reduced_axes(op, axes)?;
        let all: Vec<isize> = reduced.iter().map(|&a| a as isize).collect();
        let shards = self
            .shards
            .iter()
            .map(|s| {
                let total = s.sum(&all, keepdim)?;
                if scale == 1.0 { Ok(total) } else { total.mul_scalar(scale) }
            })
            .collect::<Result<Vec<_>>>()
            .map_err(|e| e.in_op(op))?;
        let shape: Vec<usize> = (0..self.shape.len())
            .filter_map(|a| match reduced.contains(&a) {
                true => keepdim.then_some(1),
                false => Some(self.shape[a]),
            })
            .collect();
        let sharding = match self.sharding {
            Sharding::Split(a) if reduced.contains(&(a as usize)) => Sharding::Partial,
            Sharding::Split(a) if !keepdim => {
                Sharding::Split((a as usize - reduced.iter().filter(|&&r| r < a as usize).count()) as isize)
            }
            other => other,
        };
        Ok(self.with(sharding, shape, shards))
    }

    /// A row op along `axis` on every shard; refused along the split axis.
    fn along(&self, op: &'static str, axis: isize, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Sharded> {
        let a = normalize_axis(op, axis, self.shape.len())?;
        if self.split_axis() == Some(a) {
            return Err(sharding_err(
                op,
                format!("axis {axis} of shape {:?} is the split axis; gather it first", self.shape),
            ));
        }
        self.map(op, f)
    }

    /// Softmax along `axis` on every shard; refused along the split axis.
    pub fn softmax(&self, axis: isize) -> Result<Sharded> {
        self.along("softmax", axis, |t| t.softmax(axis))
    }

    /// Log-softmax along `axis` on every shard; refused along the split axis.
    pub fn log_softmax(&self, axis: isize) -> Result<Sharded> {
        self.along("log_softmax", axis, |t| t.log_softmax(axis))
    }

    /// Mean cross-entropy of `logits [N, C]` against integer `labels [N]`
    /// ([`kiln_nn::loss::cross_entropy`]), both split along their rows or
    /// both replicated.
    pub fn cross_entropy(&self, labels: &Sharded) -> Result<Sharded> {
        self.batch_mean_loss("cross_entropy", labels, kiln_nn::loss::cross_entropy)
    }

    /// Mean cross-entropy of `logits [N, C]` against target distributions
    /// `[N, C]` ([`kiln_nn::loss::cross_entropy_one_hot`]).
    pub fn cross_entropy_one_hot(&self, targets: &Sharded) -> Result<Sharded> {
        self.batch_mean_loss("cross_entropy_one_hot", targets, kiln_nn::loss::cross_entropy_one_hot)
    }

    /// Mean squared error ([`kiln_nn::loss::mse`]).
    pub fn mse(&self, targets: &Sharded) -> Result<Sharded> {
        self.batch_mean_loss("mse", targets, kiln_nn::loss::mse)
    }

    /// Binary cross-entropy of logits
    /// ([`kiln_nn::loss::binary_cross_entropy_with_logits`]).
    pub fn binary_cross_entropy_with_logits(&self, targets: &Sharded) -> Result<Sharded> {
        self.batch_mean_loss(
            "binary_cross_entropy_with_logits",
            targets,
            kiln_nn::loss::binary_cross_entropy_with_logits,
        )
    }

    /// A loss that is a mean over its operands' leading axis, per shard.
    /// Split along that axis (both operands), each rank's mean weighted by
    /// its share of the items is a partial sum of the global mean; both
    /// replicated, every rank computes the whole loss.
    fn batch_mean_loss(
        &self,
        op: &'static str,
        targets: &Sharded,
        loss: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<Sharded> {
        self.expect_same_mesh(op, &targets.mesh)?;
        let sharding = match (self.sharding, targets.sharding) {
            (Sharding::Split(0), Sharding::Split(0)) => Sharding::Partial,
            (Sharding::Replicated, Sharding::Replicated) => Sharding::Replicated,
            (a, b) => {
                return Err(sharding_err(
                    op,
                    format!(
                        "needs predictions {:?} and targets {:?} both split along axis 0 or both replicated, \
                         got {a} and {b}",
                        self.shape, targets.shape
                    ),
                ));
            }
        };
        if sharding == Sharding::Partial && self.shape[0] != targets.shape[0] {
            return Err(KilnError::Shape {
                op,
                detail: format!(
                    "predictions {:?} and targets {:?} have different numbers of items along the split axis 0",
                    self.shape, targets.shape
                ),
            });
        }
        let items = self.shape.first().copied().unwrap_or(1) as f64;
        let shards = self
            .shards
            .iter()
            .zip(&targets.shards)
            .map(|(x, y)| match sharding {
                // A rank with no rows (fewer rows than ranks) adds nothing;
                // its mean over no rows would be 0/0.
                Sharding::Partial if x.shape()[0] == 0 => Tensor::zeros(x.device(), &[], x.dtype()),
                Sharding::Partial => loss(x, y)?.mul_scalar(x.shape()[0] as f64 / items),
                _ => loss(x, y),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.with(sharding, Vec::new(), shards))
    }

    /// Compute every shard now (one realization per device, all submitted
    /// before any is awaited).
    pub async fn realize(&self) -> Result<()> {
        launch_all(&self.shards).await
    }

    /// A partial sum completed: the ranks' parts summed in rank order (in
    /// f64, rounded once), replicated on every rank. Any other sharding is
    /// already complete and comes back as it is. f32 only.
    pub async fn all_reduce(&self) -> Result<Sharded> {
        if self.sharding != Sharding::Partial {
            return Ok(self.clone());
        }
        let groups: Vec<Vec<Tensor>> = self.shards.iter().map(|s| vec![s.clone()]).collect();
        let totals = all_reduce_tensors(&self.mesh, "all_reduce", &groups).await?;
        let shards = totals.into_iter().map(|mut t| t.remove(0)).collect();
        Ok(self.with(Sharding::Replicated, self.shape.clone(), shards))
    }

    /// The whole value, on every process: split blocks gathered in rank
    /// order, partial sums all-reduced. Values travel as f32, so integers
    /// must be exact in f32 (|v| ≤ 2^24).
    pub async fn gather(&self) -> Result<HostArray> {
        let op = "gather";
        let done = self.all_reduce().await?;
        let Some(axis) = done.split_axis() else {
            return done.shards[0].to_host().await;
        };
        done.realize().await?;
        let local = futures_util::future::try_join_all(done.shards.iter().map(Tensor::to_host)).await?;
        let parts = local.iter().map(|h| exact_f32(op, h)).collect::<Result<Vec<_>>>()?;
        let world = done.mesh.collective().all_gather(parts)?;
        let mut shapes = Vec::with_capacity(world.len());
        for (rank, part) in world.iter().enumerate() {
            let mut s = done.shape.clone();
            s[axis] = block(done.shape[axis], world.len(), rank).1;
            // Processes that disagree on the global shape send other blocks.
            if part.len() != numel(&s) {
                return Err(KilnError::Shape {
                    op,
                    detail: format!(
                        "rank {rank} sent {} values for its block {s:?} of {:?}: do the processes agree on the shape?",
                        part.len(),
                        done.shape
                    ),
                });
            }
            shapes.push(s);
        }
        Ok(concat_host(&world, &shapes, axis, done.dtype(), &done.shape))
    }
}

/// Every device's work launched before any is read: a read that blocks
/// its thread until its device is done (CUDA's) would otherwise keep the
/// next device from starting, and the devices would run one after another.
pub(crate) async fn launch_all(tensors: &[Tensor]) -> Result<()> {
    futures_util::future::try_join_all(tensors.iter().map(Tensor::realize)).await?;
    Ok(())
}

/// Every element of `host` as f32: floats rounded as a device stores them,
/// integers only when exact.
fn exact_f32(op: &'static str, host: &HostArray) -> Result<Vec<f32>> {
    let float = host.dtype.is_float();
    host.data
        .iter()
        .map(|&v| {
            let f = v as f32;
            if float || f64::from(f) == v {
                Ok(f)
            } else {
                Err(KilnError::DType {
                    op,
                    detail: format!("{} value {v} is not exact in f32, in which values travel", host.dtype),
                })
            }
        })
        .collect()
}

/// Sum over all ranks of each group of tensors (one group per local rank,
/// the same f32 shapes in each): one realization and readback per device,
/// one collective for all of them. Returns each local rank's copies.
pub(crate) async fn all_reduce_tensors(
    mesh: &Mesh,
    op: &'static str,
    per_rank: &[Vec<Tensor>],
) -> Result<Vec<Vec<Tensor>>> {
    let first = &per_rank[0];
    for t in first {
        if t.dtype() != DType::F32 {
            return Err(KilnError::DType {
                op,
                detail: format!("all-reduce sums f32 values; a tensor of shape {:?} is {}", t.shape(), t.dtype()),
            });
        }
    }
    let flats = per_rank.iter().map(|group| ravel(group)).collect::<Result<Vec<_>>>()?;
    launch_all(&flats).await?;
    let local = futures_util::future::try_join_all(flats.iter().map(Tensor::to_vec::<f32>)).await?;
    let total = all_reduce_sum(mesh.collective(), local)?;
    mesh.devices()
        .iter()
        .map(|device| unravel(&Tensor::from_slice(device, &total, &[total.len()])?, 0, first))
        .collect()
}

/// Rank `rank`'s block of `host` along `axis` over `world` ranks, with its shape.
fn host_block(host: &HostArray, axis: usize, world: usize, rank: usize) -> (Vec<f64>, Vec<usize>) {
    let (start, len) = block(host.shape[axis], world, rank);
    let specs: Vec<SliceSpec> = (0..host.shape.len())
        .map(|d| match d == axis {
            true => SliceSpec { start, len, step: 1 },
            false => SliceSpec { start: 0, len: host.shape[d], step: 1 },
        })
        .collect();
    let layout = Layout::contiguous(&host.shape).slice(&specs);
    (host.view(&layout), layout.shape)
}

/// Blocks of `shapes` (one per rank) put back together along `axis`.
fn concat_host(parts: &[Vec<f32>], shapes: &[Vec<usize>], axis: usize, dtype: DType, shape: &[usize]) -> HostArray {
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut data = Vec::with_capacity(shape.iter().product());
    for o in 0..outer {
        for (part, s) in parts.iter().zip(shapes) {
            let run = s[axis] * inner;
            data.extend(part[o * run..(o + 1) * run].iter().map(|&v| f64::from(v)));
        }
    }
    HostArray::new(dtype, shape.to_vec(), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_blocks_put_back_together_give_the_whole() {
        let host = HostArray::new(DType::F32, vec![2, 5, 3], (0..30).map(f64::from).collect());
        for axis in 0..3 {
            let world = 2;
            let (mut parts, mut shapes) = (Vec::new(), Vec::new());
            for rank in 0..world {
                let (data, shape) = host_block(&host, axis, world, rank);
                parts.push(data.iter().map(|&v| v as f32).collect::<Vec<_>>());
                shapes.push(shape);
            }
            let back = concat_host(&parts, &shapes, axis, DType::F32, &host.shape);
            assert_eq!(back.data, host.data, "axis {axis}");
        }
    }
}
