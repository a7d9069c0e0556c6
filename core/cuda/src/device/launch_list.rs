//! A realization's launch list: each kernel launch (its kernel, meta slot,
//! grid and buffers) and each cuBLAS call, in order, with every binding
//! held as what names its buffer rather than as an address, so that a jit
//! replay enqueues the same list over other buffers (`program.rs`).

use super::blas::{Gemm, GemmEpilogue};
use super::engine::Call;
use super::graphs::{Enqueued, Graphs};
use super::kernels::Loaded;
use super::{CudaDevice, resolved};
use kiln_codegen::launch::{self, Binder, Variants};
use kiln_codegen::operand_textures::OperandTexture;
use kiln_codegen::{KernelKey, META_WORDS};
use kiln_ir::dtype::DType;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::ir::DeviceBuffer;
use kiln_sched::schedule::{Item, Schedule};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

pub(super) enum Step<B> {
    Launch {
        kernel: Arc<Loaded>,
        bindings: Vec<B>,
        meta_slot: usize,
        groups: [u32; 3],
    },
    /// A cuBLAS call: its plan (buffer offsets only), and the buffers of
    /// kiln's A, B and out, and of the bias its epilogue reads.
    Gemm {
        plan: Gemm,
        buffers: [B; 3],
        bias: Option<B>,
    },
}

pub(super) struct LaunchList<B> {
    pub steps: Vec<Step<B>>,
    /// Every launch's meta block, one slot each.
    pub meta: Option<Arc<dyn DeviceBuffer>>,
}

/// A binding as the buffer it is: the list a realization enqueues.
pub(super) type Buffers = LaunchList<Arc<dyn DeviceBuffer>>;

impl<B> LaunchList<B> {
    /// The same list with each binding as `f` gives it.
    pub fn map<C>(&self, mut f: impl FnMut(&B) -> C) -> LaunchList<C> {
        let steps = self
            .steps
            .iter()
            .map(|s| match s {
                Step::Launch { kernel, bindings, meta_slot, groups } => Step::Launch {
                    kernel: kernel.clone(),
                    bindings: bindings.iter().map(&mut f).collect(),
                    meta_slot: *meta_slot,
                    groups: *groups,
                },
                Step::Gemm { plan, buffers, bias } => Step::Gemm {
                    plan: *plan,
                    buffers: [&buffers[0], &buffers[1], &buffers[2]].map(&mut f),
                    bias: bias.as_ref().map(&mut f),
                },
            })
            .collect();
        LaunchList { steps, meta: self.meta.clone() }
    }

    pub fn len(&self) -> usize {
        self.steps.len()
    }
}

/// A step of a list being recorded: a launch (by its index) waits for its
/// kernel to be loaded.
enum Pending {
    Launch(usize),
    Ready(Step<Arc<dyn DeviceBuffer>>),
}

/// Bindings on a CUDA device: slot buffers, this device's tensors, and
/// scratch buffers from the pool.
struct CudaBinder<'a> {
    device: &'a CudaDevice,
    slots: &'a [Arc<dyn DeviceBuffer>],
}

impl Binder for CudaBinder<'_> {
    type Handle = Arc<dyn DeviceBuffer>;
    fn buffer(&mut self, b: &Arc<dyn DeviceBuffer>) -> Arc<dyn DeviceBuffer> {
        resolved(self.slots, b)
    }
    fn scratch(&mut self, op: &'static str, dtype: DType, shape: &[usize]) -> Result<Arc<dyn DeviceBuffer>> {
        Ok(self.device.buffer(op, dtype, shape)?)
    }
    fn texture(&mut self, _: &OperandTexture) -> Result<Arc<dyn DeviceBuffer>> {
        Err(KilnError::Gpu("CUDA has no operand textures (Caps::cuda() offers none)".into()))
    }
}

impl CudaDevice {
    /// `schedule` as a launch list (its new kernels compiled, its meta
    /// blocks written), and the buffer each of its slots was given.
    pub(super) fn record(&self, schedule: &Schedule) -> Result<(Buffers, Vec<Arc<dyn DeviceBuffer>>)> {
        let slots = schedule
            .slots
            .iter()
            .map(|s| Ok(self.buffer(s.op, s.dtype, &s.shape)? as Arc<dyn DeviceBuffer>))
            .collect::<Result<Vec<_>>>()?;
        let variants = Variants::of(&self.caps);
        let mut binder = CudaBinder { device: self, slots: &slots };
        let (mut launches, mut order) = (Vec::new(), Vec::new());
        for k in &schedule.items {
            let mut item = &k.item;
            let pass;
            if let (Some((plan, bias)), Item::Matmul { out, args, shape, epilogue, .. }) = (self.gemm_plan(item), item)
            {
                // An epilogue cuBLASLt does not run inside the product
                // follows as a pass, the product in scratch.
                let fused = plan.epilogue != GemmEpilogue::None;
                let product = match epilogue {
                    Some(_) if !fused => binder.scratch("matmul", DType::F32, shape)?,
                    _ => binder.buffer(out),
                };
                let [a, b] = [&args.buffers[0], &args.buffers[1]].map(|b| binder.buffer(b));
                let bias = bias.map(|b| binder.buffer(&b));
                order.push(Pending::Ready(Step::Gemm { plan, buffers: [a, b, product.clone()], bias }));
                if fused {
                    continue;
                }
                let Some(p) = item.epilogue_pass(product) else { continue };
                pass = p;
                item = &pass;
            }
            let config = |_, _| Ok(self.matmul_config());
            for l in launch::bind(&self.caps, &variants, k.op, item, config, &mut binder)? {
                order.push(Pending::Launch(launches.len()));
                launches.push(l);
            }
        }
        let keys: Vec<&KernelKey> = launches.iter().map(|l| &l.launch.key).collect();
        let loaded = self.kernels.get(&*self.engine, &keys)?;
        let mut meta = Vec::with_capacity(launches.len() * META_WORDS);
        let steps = order
            .into_iter()
            .map(|o| match o {
                Pending::Launch(i) => Ok(Step::Launch {
                    kernel: loaded[i].clone(),
                    bindings: launches[i].bindings.clone(),
                    meta_slot: launches[i].launch.append_meta(&mut meta)?,
                    groups: launches[i].launch.groups,
                }),
                Pending::Ready(step) => Ok(step),
            })
            .collect::<Result<Vec<_>>>()?;
        let meta = match meta.is_empty() {
            true => None,
            false => {
                let block = self.buffer("meta", DType::U32, &[meta.len()])?;
                let _order = self.enqueue_lock.lock().unwrap();
                self.engine.write(block.memory(), &meta)?;
                Some(block as Arc<dyn DeviceBuffer>)
            }
        };
        Ok((LaunchList { steps, meta }, slots))
    }

    /// `list`'s calls, each binding at the address `address` gives.
    pub(super) fn calls<B>(&self, list: &LaunchList<B>, address: impl Fn(&B) -> Result<u64>) -> Result<Vec<Call>> {
        let meta = list.meta.as_ref().map(|m| self.own(m).map(|m| m.address())).transpose()?;
        list.steps
            .iter()
            .map(|step| match step {
                Step::Gemm { plan, buffers: [a, b, out], bias } => {
                    let bias = bias.as_ref().map(&address).transpose()?;
                    Ok(Call::Gemm(plan.located(address(a)?, address(b)?, address(out)?, bias)))
                }
                Step::Launch { kernel, bindings, meta_slot, groups } => {
                    let meta = meta.expect("launches have a meta block") + (meta_slot * META_WORDS * 4) as u64;
                    let pointers = kernel
                        .kernel
                        .bindings
                        .iter()
                        .map(|b| match b.binding {
                            0 => Ok(meta),
                            n => address(&bindings[n as usize - 1]),
                        })
                        .collect::<Result<Vec<u64>>>()?;
                    Ok(Call::Launch { kernel: kernel.clone(), pointers, grid: *groups })
                }
            })
            .collect()
    }

    /// Enqueue `list`, each binding at the address `address` gives.
    pub(super) fn enqueue<B>(&self, list: &LaunchList<B>, address: impl Fn(&B) -> Result<u64>) -> Result<()> {
        let calls = self.calls(list, address)?;
        let _order = self.enqueue_lock.lock().unwrap();
        // SAFETY: every buffer is as large as its slot (or scratch) asks,
        // which is what each kernel was generated to index and each cuBLAS
        // plan sized from; the list holds its buffers until these calls are
        // enqueued, and any later use of one is enqueued behind them.
        unsafe { self.enqueue_calls(&calls, None) }.map(drop)
    }

    /// Enqueue `calls` as one launch list: timed one by one while
    /// profiling, else through `graphs` where given, else in order. The
    /// caller holds the enqueue lock.
    ///
    /// # Safety
    /// As [`Engine::enqueue`](super::engine::Engine::enqueue).
    pub(super) unsafe fn enqueue_calls(&self, calls: &[Call], graphs: Option<&Mutex<Graphs>>) -> Result<Enqueued> {
        // SAFETY: the caller's promise, passed on.
        let enqueued = unsafe {
            match graphs {
                _ if self.profiler.on() => self.profiler.enqueue(&*self.engine, calls).map(|()| Enqueued::Calls)?,
                Some(graphs) => graphs.lock().unwrap().enqueue(&*self.engine, calls)?,
                None => self.engine.enqueue(calls).map(|()| Enqueued::Calls)?,
            }
        };
        if enqueued == Enqueued::Graph {
            self.graphs_launched.fetch_add(1, Ordering::Relaxed);
        }
        if !calls.is_empty() {
            self.submits.fetch_add(1, Ordering::Relaxed);
            self.kernels_launched.fetch_add(calls.len() as u64, Ordering::Relaxed);
        }
        Ok(enqueued)
    }
}
