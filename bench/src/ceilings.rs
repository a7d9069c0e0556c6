//! The ceilings every other figure is compared with, measured by WGSL
//! microkernels on a device of their own on the same adapter: copy
//! bandwidth (a vec4 copy, bytes read + written) and FMA throughput
//! (independent `acc = acc * a + b` chains in registers, the same
//! multiply-add form the matmul kernels use).

use crate::measure::{Reps, Timing, time};
use kiln::core::wgpu;

/// The copy takes 8 vec4s per invocation, a grid apart, as kiln's own
/// elementwise kernels do: with one vec4 per invocation, kiln's generated
/// one-op kernel outran this "ceiling" by up to a quarter on CPU adapters.
const COPY_VEC4S_PER_INVOCATION: usize = 8;
fn copy_wgsl() -> String {
    format!(
        "
@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {{
    let row = groups.x * 256u;
    let threads = row * groups.y;
    let t = gid.y * row + gid.x;
    let n = arrayLength(&dst);
    for (var r = 0u; r < {COPY_VEC4S_PER_INVOCATION}u; r++) {{
        let i = t + r * threads;
        if (i < n) {{
            dst[i] = src[i];
        }}
    }}
}}
"
    )
}

/// `FMA_CHAINS` independent f32 chains of fused multiply-adds (`fma`, the
/// form the matmul kernels use), unrolled `FMA_UNROLL`× per loop iteration:
/// enough chains to hide FMA latency, few enough to stay in registers on CPU
/// adapters (more chains, or vec4 chains, measured slower on lavapipe: spills).
fn fma_wgsl() -> String {
    let chains = 0..FMA_CHAINS;
    let mut s = String::from(
        "@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let a = src[0].x;
    let b = src[1].x;
    let iters = u32(src[2].x);
",
    );
    chains.clone().for_each(|c| s += &format!("    var c{c} = f32(gid.x) + {c}.0;\n"));
    s += &format!("    for (var k = 0u; k < iters; k += {FMA_UNROLL}u) {{\n");
    for _ in 0..FMA_UNROLL {
        chains.clone().for_each(|c| s += &format!("        c{c} = fma(c{c}, a, b);\n"));
    }
    let sum: Vec<String> = chains.map(|c| format!("c{c}")).collect();
    s + &format!("    }}\n    dst[gid.x] = vec4<f32>({});\n}}\n", sum.join(" + "))
}
const FMA_CHAINS: usize = 12;
const FMA_UNROLL: usize = 8;
/// Multiply-adds per invocation per loop count.
const FMA_PER_ITER: f64 = FMA_CHAINS as f64;
const FMA_ITERS: u32 = 4096;
const FMA_INVOCATIONS: u32 = 64 * 512;

pub struct Ceilings {
    pub copy: Timing,
    pub copy_bytes: f64,
    pub fma: Timing,
    pub fma_flops: f64,
    /// The copy and FMA microkernels, each a submit and a wait, to time
    /// again next to a figure (`measure::time_paired`).
    pub copy_run: Box<dyn Fn() -> Result<(), String>>,
    pub fma_run: Box<dyn Fn() -> Result<(), String>>,
}

/// A device of the bench's own for hand-written WGSL microkernels.
pub struct Gpu {
    device: wgpu::Device,
    pub queue: wgpu::Queue,
}

impl Gpu {
    pub fn open(adapter: &wgpu::Adapter, features: wgpu::Features) -> Result<Gpu, String> {
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("kiln-bench microkernels"),
            required_features: features,
            required_limits: adapter.limits(),
            ..Default::default()
        }))
        .map_err(|e| e.to_string())?;
        Ok(Gpu { device, queue })
    }

    pub fn buffer(&self, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// The first `bytes` of `buffer` as f32s.
    pub fn read(&self, buffer: &wgpu::Buffer, bytes: u64) -> Result<Vec<f32>, String> {
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(buffer, 0, &staging, 0, bytes);
        self.queue.submit([enc.finish()]);
        let slice = staging.slice(..);
        slice.map_async(wgpu::MapMode::Read, |_| ());
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| e.to_string())?;
        let view = slice.get_mapped_range().map_err(|e| e.to_string())?;
        let words = view.chunks_exact(4).map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(words)
    }

    /// Run `wgsl`'s main over `groups` with bindings (src, dst); the
    /// returned closure submits once and waits.
    pub fn kernel(
        &self,
        wgsl: &str,
        src: &wgpu::Buffer,
        dst: &wgpu::Buffer,
        groups: [u32; 2],
    ) -> impl Fn() -> Result<(), String> + 'static {
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(wgsl.into()),
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let bind = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: dst.as_entire_binding() },
            ],
        });
        let (device, queue) = (self.device.clone(), self.queue.clone());
        move || {
            let mut enc = device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &bind, &[]);
                pass.dispatch_workgroups(groups[0], groups[1], 1);
            }
            queue.submit([enc.finish()]);
            device.poll(wgpu::PollType::wait_indefinitely()).map(|_| ()).map_err(|e| e.to_string())
        }
    }
}

pub fn measure(adapter: &wgpu::Adapter, reps: Reps, elements: usize) -> Result<Ceilings, String> {
    let gpu = Gpu::open(adapter, wgpu::Features::empty())?;
    let bytes = (elements * 4) as u64;
    let (src, dst) = (gpu.buffer(bytes), gpu.buffer(bytes));
    let groups = (elements / 4).div_ceil(COPY_VEC4S_PER_INVOCATION).div_ceil(256) as u32;
    let copy_run = gpu.kernel(&copy_wgsl(), &src, &dst, [groups.min(65535), groups.div_ceil(65535)]);
    let copy = time(reps, &copy_run)?;
    let params: [f32; 12] = [0.999, 0.999, 0.999, 0.999, 1e-3, 1e-3, 1e-3, 1e-3, FMA_ITERS as f32, 0.0, 0.0, 0.0];
    let fsrc = gpu.buffer(48);
    let words: Vec<u8> = params.iter().flat_map(|x| x.to_ne_bytes()).collect();
    gpu.queue.write_buffer(&fsrc, 0, &words);
    let fdst = gpu.buffer(FMA_INVOCATIONS as u64 * 16);
    let fma_run = gpu.kernel(&fma_wgsl(), &fsrc, &fdst, [FMA_INVOCATIONS / 64, 1]);
    let fma = time(reps, &fma_run)?;
    let fma_flops = FMA_INVOCATIONS as f64 * FMA_ITERS as f64 * FMA_PER_ITER * 2.0;
    Ok(Ceilings {
        copy,
        copy_bytes: 2.0 * bytes as f64,
        fma,
        fma_flops,
        copy_run: Box::new(copy_run),
        fma_run: Box::new(fma_run),
    })
}

/// A CUDA GPU's ceilings: a copy kernel over `bytes` and cuBLAS sgemm at
/// 4096³ (the "FMA" figure there: what the matmul goals compare with).
pub fn measure_cuda(reps: Reps, bytes: usize) -> Result<Ceilings, String> {
    let copy_run = kiln_cuda::ceilings::copy(bytes).map_err(|e| e.to_string())?;
    let copy = time(reps, &copy_run)?;
    let fma_run = kiln_cuda::ceilings::sgemm(CUBLAS_SIDE).map_err(|e| e.to_string())?;
    let fma = time(reps, &fma_run)?;
    Ok(Ceilings {
        copy,
        copy_bytes: 2.0 * bytes as f64,
        fma,
        fma_flops: 2.0 * (CUBLAS_SIDE as f64).powi(3),
        copy_run,
        fma_run,
    })
}

/// The side of cuBLAS's sgemm ceiling.
pub const CUBLAS_SIDE: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_microkernels_validate() {
        for (name, source) in [("copy", copy_wgsl()), ("fma", fma_wgsl())] {
            kiln::core::validate::translate_all(&source).unwrap_or_else(|e| panic!("{name}: {e}\n{source}"));
        }
        assert_eq!(fma_wgsl().matches("fma(").count(), FMA_CHAINS * FMA_UNROLL);
    }
}
