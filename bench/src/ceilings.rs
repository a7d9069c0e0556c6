//! The ceilings every other figure is compared with, measured by WGSL
//! microkernels on a device of their own on the same adapter: copy
//! bandwidth (a vec4 copy, bytes read + written) and FMA throughput
//! (independent `acc = acc * a + b` chains in registers, the same
//! multiply-add form the matmul kernels use).

use crate::measure::{Reps, Timing, time};
use kiln::core::codegen::ceilings::{
    COPY_VEC4S_PER_INVOCATION, COPY_WORKGROUP, FMA_INVOCATIONS, FMA_WORKGROUP, copy_wgsl, fma_flops, fma_params,
    fma_wgsl,
};
use kiln::core::wgpu;

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
    let groups = (elements / 4).div_ceil(COPY_VEC4S_PER_INVOCATION).div_ceil(COPY_WORKGROUP) as u32;
    let copy_run = gpu.kernel(&copy_wgsl(), &src, &dst, [groups.min(65535), groups.div_ceil(65535)]);
    let copy = time(reps, &copy_run)?;
    let params = fma_params();
    let fsrc = gpu.buffer(4 * params.len() as u64);
    let words: Vec<u8> = params.iter().flat_map(|x| x.to_ne_bytes()).collect();
    gpu.queue.write_buffer(&fsrc, 0, &words);
    let fdst = gpu.buffer(FMA_INVOCATIONS as u64 * 16);
    let fma_run = gpu.kernel(&fma_wgsl(), &fsrc, &fdst, [FMA_INVOCATIONS / FMA_WORKGROUP, 1]);
    let fma = time(reps, &fma_run)?;
    let fma_flops = fma_flops();
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

/// The side of the host engine's product ceiling (its loop at 4096³
/// would take minutes).
pub const HOST_SIDE: usize = 256;

/// The CUDA host engine's ceilings, for a dry run of the CUDA figures
/// without a GPU: a memcpy of `bytes` and a plain f32 product of
/// [`HOST_SIDE`]³ on the CPU. Their figures say nothing of a GPU.
pub fn measure_cuda_host(reps: Reps, bytes: usize) -> Result<Ceilings, String> {
    let (from, to) = (vec![1u8; bytes], std::cell::RefCell::new(vec![0u8; bytes]));
    let copy_run: Box<dyn Fn() -> Result<(), String>> = Box::new(move || {
        to.borrow_mut().copy_from_slice(std::hint::black_box(&from));
        Ok(())
    });
    let n = HOST_SIDE;
    let (a, b, c) = (vec![1.0f32; n * n], vec![0.5f32; n * n], std::cell::RefCell::new(vec![0f32; n * n]));
    let fma_run: Box<dyn Fn() -> Result<(), String>> = Box::new(move || {
        let mut c = c.borrow_mut();
        for i in 0..n {
            for k in 0..n {
                let aik = a[i * n + k];
                for j in 0..n {
                    c[i * n + j] += aik * b[k * n + j];
                }
            }
        }
        std::hint::black_box(&c);
        Ok(())
    });
    let (copy, fma) = (time(reps, &copy_run)?, time(reps, &fma_run)?);
    Ok(Ceilings { copy, copy_bytes: 2.0 * bytes as f64, fma, fma_flops: 2.0 * (n as f64).powi(3), copy_run, fma_run })
}
