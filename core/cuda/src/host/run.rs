//! A schedule made without a device (its inputs on the CPU reference, in
//! placeholder slots) run on the host as CUDA: each item bound as a GPU
//! runtime binds it (`kiln_codegen::launch::bind`), its distinct kernels
//! rendered as CUDA C++ and built as one library, every launch run in
//! order over host memory.

use super::HostModule;
use kiln_codegen::cuda::CudaKernel;
use kiln_codegen::launch::{self, Binder, BoundLaunch, Variants};
use kiln_codegen::matmul::MatmulConfig;
use kiln_codegen::operand_textures::OperandTexture;
use kiln_codegen::{Caps, META_WORDS};
use kiln_ir::dtype::{DType, pack_words, unpack_words};
use kiln_ir::error::{KilnError, Result};
use kiln_ir::interp::HostArray;
use kiln_ir::ir::{DeviceBuffer, Node, Realized};
use kiln_ir::shape::numel;
use kiln_sched::schedule::{Schedule, slot_of};
use std::collections::HashMap;
use std::sync::Arc;

/// A node the schedule computed: its elements in row-major order.
pub struct HostResult {
    pub node: Node,
    pub values: Vec<f64>,
}

/// Host memory: a buffer per slot, then the scratch buffers launches add.
struct Memory {
    buffers: Vec<Vec<u32>>,
    /// A buffer the schedule names that is not one of its slots.
    foreign: bool,
}

/// Words for `bytes`, rounded up to whole vec4s as GPU buffers are.
fn words(bytes: u64) -> usize {
    (bytes as usize).div_ceil(16) * 4
}

impl Binder for Memory {
    type Handle = usize;
    fn buffer(&mut self, b: &Arc<dyn DeviceBuffer>) -> usize {
        slot_of(b).unwrap_or_else(|| {
            self.foreign = true;
            0
        })
    }
    fn scratch(&mut self, _: &'static str, dtype: DType, shape: &[usize]) -> Result<usize> {
        self.buffers.push(vec![0; words(dtype.storage_bytes(numel(shape)))]);
        Ok(self.buffers.len() - 1)
    }
    fn texture(&mut self, _: &OperandTexture) -> Result<usize> {
        Err(KilnError::Gpu("CUDA has no operand textures (Caps::cuda() offers none)".into()))
    }
}

/// Kernels per host library: the libraries build in parallel.
const PER_LIBRARY: usize = 32;

/// One schedule bound: its memory and its launches, each with the index
/// of its kernel in the table of all schedules' distinct kernels.
struct Bound {
    schedule: Schedule,
    memory: Memory,
    launches: Vec<(BoundLaunch<usize>, usize)>,
}

/// Run `schedules` as a CUDA device with `caps` would (untuned matmul
/// configs), on the host: each one's computed nodes, or why it could not
/// run. Their distinct kernels are built once, as a few libraries.
pub fn run(schedules: Vec<Schedule>, caps: &Caps) -> Result<Vec<Result<Vec<HostResult>>>> {
    let mut table: HashMap<String, usize> = HashMap::new();
    let mut kernels: Vec<CudaKernel> = Vec::new();
    let mut bound = Vec::new();
    for schedule in schedules {
        bound.push(bind(schedule, caps, &mut table, &mut kernels));
    }
    let chunks: Vec<&[CudaKernel]> = kernels.chunks(PER_LIBRARY).collect();
    let modules = in_parallel(chunks, HostModule::build).into_iter().collect::<Result<Vec<_>>>()?;
    let kernel = |i: usize| (&modules[i / PER_LIBRARY], i % PER_LIBRARY, &kernels[i]);
    Ok(in_parallel(bound, |b| execute(b?, &kernel)))
}

/// `f` of each item, spread over the machine's cores, in order.
fn in_parallel<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut shares: Vec<Vec<T>> = (0..threads).map(|_| Vec::new()).collect();
    let per = items.len().div_ceil(threads).max(1);
    for (i, item) in items.into_iter().enumerate() {
        shares[i / per].push(item);
    }
    std::thread::scope(|scope| {
        let f = &f;
        let workers: Vec<_> =
            shares.into_iter().map(|share| scope.spawn(move || share.into_iter().map(f).collect::<Vec<R>>())).collect();
        workers.into_iter().flat_map(|w| w.join().expect("a host kernel thread panicked")).collect()
    })
}

/// `schedule`'s memory (inputs filled in) and launches, its kernels added
/// to the table.
fn bind(
    schedule: Schedule,
    caps: &Caps,
    table: &mut HashMap<String, usize>,
    kernels: &mut Vec<CudaKernel>,
) -> Result<Bound> {
    let variants = Variants::of(caps);
    let buffers = schedule.slots.iter().map(|s| vec![0; words(s.bytes())]).collect();
    let mut memory = Memory { buffers, foreign: false };
    for (slot, node) in &schedule.inputs {
        let Some(Realized::Host(host)) = node.realized_value() else {
            return Err(KilnError::Gpu(format!("input slot {slot} is not on the CPU reference")));
        };
        let packed = pack_words(host.dtype, &host.data);
        memory.buffers[*slot][..packed.len()].copy_from_slice(&packed);
    }
    let mut launches = Vec::new();
    for k in &schedule.items {
        let config = |_, _| Ok(MatmulConfig::default_for(caps));
        for l in launch::bind(caps, &variants, k.op, &k.item, config, &mut memory)? {
            let wgsl = l.launch.key.wgsl();
            let i = match table.get(&wgsl) {
                Some(&i) => i,
                None => {
                    kernels.push(kiln_codegen::cuda::from_wgsl(&wgsl)?);
                    table.insert(wgsl, kernels.len() - 1);
                    kernels.len() - 1
                }
            };
            launches.push((l, i));
        }
    }
    if memory.foreign {
        return Err(KilnError::Gpu("the schedule reads a buffer realized on a device".into()));
    }
    Ok(Bound { schedule, memory, launches })
}

/// Run a bound schedule's launches in order; its computed nodes.
fn execute<'a>(
    mut b: Bound,
    kernel: &impl Fn(usize) -> (&'a HostModule, usize, &'a CudaKernel),
) -> Result<Vec<HostResult>> {
    for (l, i) in &b.launches {
        let (module, index, k) = kernel(*i);
        let mut meta = l.launch.meta.0.clone();
        meta.resize(META_WORDS, 0);
        // Binding 0 is the meta block; binding n the launch's (n - 1)th.
        let pointers: Vec<*mut u32> = k
            .bindings
            .iter()
            .map(|binding| match binding.binding {
                0 => meta.as_mut_ptr(),
                n => b.memory.buffers[l.bindings[n as usize - 1]].as_mut_ptr(),
            })
            .collect();
        // SAFETY: every buffer is as large as its slot (or scratch) asks,
        // which is what the kernel was generated to index.
        unsafe { module.launch(index, &pointers, l.launch.groups, k.workgroup_size)? };
    }
    let results = b.schedule.results.iter().map(|(node, array)| {
        let slot = slot_of(&array.buffer).expect("results land in slots");
        let elements = numel(&b.schedule.slots[slot].shape);
        let held = HostArray {
            dtype: array.dtype,
            shape: vec![elements],
            data: unpack_words(array.dtype, &b.memory.buffers[slot], elements),
        };
        HostResult { node: node.clone(), values: held.view(&array.layout) }
    });
    Ok(results.collect())
}
