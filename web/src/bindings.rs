//! The JS API. Every method that reads from the GPU returns a Promise
//! (readback is async; the tab never blocks on the device).

use js_sys::Promise;
use kiln::{Device, DeviceOptions, KilnError, QuantFormat};
use kiln_conformance::grad_cases::{self, GradCase};
use kiln_conformance::{
    Case, Outcome, batch_check, batch_grad_check, cases, grad_check, matmul_family, report, vmap_checks,
};
use kiln_mnist::{Config, ModelKind};
use kiln_nn::data::Mnist;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

pub(crate) fn js_err(e: impl std::fmt::Display) -> JsValue {
    JsError::new(&e.to_string()).into()
}

/// A JSON string literal (serde_json escapes it).
fn quote(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// A check's failures as `{"failures": [what]}`.
fn failures_json(failures: &[String]) -> JsValue {
    let list = failures.iter().map(|s| quote(s)).collect::<Vec<_>>().join(",");
    format!("{{\"failures\":[{list}]}}").into()
}

/// A kiln device on the browser's WebGPU adapter, opened with the adapter's
/// own limits (kiln checks every buffer against them).
#[wasm_bindgen]
pub struct Gpu {
    pub(crate) device: Device,
}

#[wasm_bindgen]
impl Gpu {
    /// Every matmul kernel-family member this device runs, forced in turn
    /// on a ragged and a vec4-eligible product, and one reading B from
    /// column panels, against the CPU reference
    /// (`kiln_conformance::matmul_family`; the tuner only times them, so
    /// this is what checks each one's results in the browser); the other
    /// cases (batches, transposed operands copied into rows, f16, K = 0, k
    /// split over dispatches) on about one config in three, as natively.
    /// Resolves to `{"checked": n, "skipped": [reason], "failures": [what]}`.
    pub fn matmul_family(&self) -> Promise {
        let device = self.device.clone();
        future_to_promise(async move {
            let always =
                |w: &str| w.starts_with("ragged") || w.starts_with("vec4-eligible relu") || w.contains("column panels");
            let coverage = matmul_family::Coverage::EveryFor { always, every: 3 };
            let family = matmul_family::check(&device, &matmul_family::CASES, coverage).await.map_err(js_err)?;
            let list = |v: &[String]| format!("[{}]", v.iter().map(|s| quote(s)).collect::<Vec<_>>().join(","));
            let (skipped, failures) = (list(&family.skipped), list(&family.failures));
            Ok(format!("{{\"checked\":{},\"skipped\":{skipped},\"failures\":{failures}}}", family.checked).into())
        })
    }

    /// Tree reductions with each workgroup's partials combined in workgroup
    /// memory (what GPUs run), forced on this device and checked against
    /// the CPU reference (`kiln_conformance::workgroup_reductions`), so
    /// that Dawn compiles and runs those kernels too. Resolves to
    /// `{"failures": [what]}`.
    pub fn workgroup_reductions(&self) -> Promise {
        let device = self.device.clone();
        future_to_promise(async move {
            let failures = kiln_conformance::workgroup_reductions::check(&device).await.map_err(js_err)?;
            Ok(failures_json(&failures))
        })
    }

    /// Attention as one kernel, forced on this device in each way of
    /// sharing keys it has and checked against the CPU reference
    /// (`kiln_conformance::fused_attention`), so that Dawn compiles and
    /// runs it too. Resolves to `{"failures": [what]}`.
    pub fn fused_attention(&self) -> Promise {
        let device = self.device.clone();
        future_to_promise(async move {
            let failures = kiln_conformance::fused_attention::check(&device).await.map_err(js_err)?;
            Ok(failures_json(&failures))
        })
    }

    /// Resolves to a `Gpu`, or rejects saying why (no WebGPU, no adapter).
    pub fn init() -> Promise {
        future_to_promise(async {
            let options = DeviceOptions { adapter: None, backends: wgpu::Backends::BROWSER_WEBGPU };
            let device = Device::with_options(options).await.map_err(js_err)?;
            Ok(Gpu { device }.into())
        })
    }

    /// The adapter as kiln sees it (`Device::info()`), as JSON.
    pub fn info(&self) -> String {
        let i = self.device.info();
        let l = &i.limits;
        format!(
            "{{\"name\":{},\"backend\":{},\"device_type\":{},\"driver\":{},\"driver_info\":{},\
             \"max_storage_buffer_binding_size\":{},\"max_buffer_size\":{},\
             \"max_compute_workgroup_storage_size\":{},\"max_compute_invocations_per_workgroup\":{},\
             \"max_compute_workgroups_per_dimension\":{},\"shader_f16\":{},\"f16_path\":{}}}",
            quote(&i.name),
            quote(&i.backend),
            quote(&i.device_type),
            quote(&i.driver),
            quote(&i.driver_info),
            l.max_storage_buffer_binding_size,
            l.max_buffer_size,
            l.max_compute_workgroup_storage_size,
            l.max_compute_invocations_per_workgroup,
            l.max_compute_workgroups_per_dimension,
            i.shader_f16,
            quote(i.f16_path()),
        )
    }

    /// Turn the matmul autotuner on or off (`Device::set_matmul_tuning`; by
    /// default on for GPUs and off for CPU adapters such as SwiftShader).
    pub fn set_matmul_tuning(&self, on: bool) {
        self.device.set_matmul_tuning(Some(on));
    }

    /// The matmul autotuner's choices so far, as JSON
    /// `[[shape class, config], …]` (kept in memory on the web).
    pub fn matmul_choices(&self) -> String {
        serde_json::to_string(&self.device.matmul_choices()).unwrap_or_else(|_| "[]".into())
    }

    /// How many kernels this device has compiled (the page reports it).
    pub fn pipelines(&self) -> usize {
        self.device.compiled_sources().len()
    }

    /// kiln-bench's FMA ceiling microkernel, for the benchmark page to run
    /// through WebGPU on a device of its own, as JSON `{"wgsl", "params"
    /// (src's f32s), "workgroups", "output_bytes" (dst's size), "flops"
    /// (per run), "chains" (fma chains per invocation)}`.
    pub fn fma_ceiling() -> String {
        use kiln::core::codegen::ceilings::{
            FMA_CHAINS, FMA_INVOCATIONS, FMA_WORKGROUP, fma_flops, fma_params, fma_wgsl,
        };
        let params: Vec<String> = fma_params().iter().map(f32::to_string).collect();
        format!(
            "{{\"wgsl\":{},\"params\":[{}],\"workgroups\":{},\"output_bytes\":{},\"flops\":{},\"chains\":{}}}",
            quote(&fma_wgsl()),
            params.join(","),
            FMA_INVOCATIONS / FMA_WORKGROUP,
            FMA_INVOCATIONS * 16,
            fma_flops(),
            FMA_CHAINS
        )
    }

    /// Kernels launched and queue submits so far, as JSON
    /// `{"kernels": n, "submits": n}` (the benchmark page counts a
    /// training step's).
    pub fn stats(&self) -> String {
        let s = self.device.stats();
        format!("{{\"kernels\":{},\"submits\":{}}}", s.kernels_launched, s.submits)
    }
}

/// MNIST from the four gzipped IDX files.
#[wasm_bindgen]
pub struct Dataset {
    inner: Arc<Mnist>,
}

#[wasm_bindgen]
impl Dataset {
    #[wasm_bindgen(constructor)]
    pub fn new(
        train_images: &[u8],
        train_labels: &[u8],
        test_images: &[u8],
        test_labels: &[u8],
    ) -> Result<Dataset, JsError> {
        let split = |images, images_name, labels, labels_name| {
            kiln_nn::data::Dataset::from_idx(images, images_name, labels, labels_name)
                .map_err(|e| JsError::new(&e.to_string()))
        };
        let train = split(train_images, "train images", train_labels, "train labels")?;
        let test = split(test_images, "test images", test_labels, "test labels")?;
        Ok(Dataset { inner: Arc::new(Mnist { train, test }) })
    }

    #[wasm_bindgen(getter)]
    pub fn train_len(&self) -> usize {
        self.inner.train.len()
    }

    #[wasm_bindgen(getter)]
    pub fn test_len(&self) -> usize {
        self.inner.test.len()
    }
}

/// A value that one call at a time owns: empty while a call runs, so an
/// overlapping call rejects instead of waiting on a borrow.
pub(crate) struct Exclusive<T>(Rc<RefCell<Option<T>>>);

impl<T: 'static> Exclusive<T> {
    pub(crate) fn new(value: T) -> Exclusive<T> {
        Exclusive(Rc::new(RefCell::new(Some(value))))
    }

    /// `f` on the value, as a Promise; `after` sees the value once `f` is done.
    pub(crate) fn call<R, F>(&self, f: F, after: impl FnOnce(&T) + 'static) -> Promise
    where
        F: AsyncFnOnce(&mut T) -> kiln::Result<R> + 'static,
        R: Into<JsValue>,
    {
        let inner = self.0.clone();
        future_to_promise(async move {
            let taken = inner.borrow_mut().take();
            let mut value = taken.ok_or_else(|| js_err("busy: await the previous call"))?;
            let result = f(&mut value).await;
            after(&value);
            *inner.borrow_mut() = Some(value);
            result.map(Into::into).map_err(js_err)
        })
    }
}

/// The demo's model and optimizer state: the MLP and training loop of
/// `kiln-mnist`, the same code the desktop demo runs. Calls must not
/// overlap (each returns a Promise; await it first); an overlapping call
/// rejects.
#[wasm_bindgen]
pub struct Trainer {
    inner: Exclusive<kiln_mnist::Trainer>,
    train_len: usize,
    steps: Rc<Cell<usize>>,
}

impl Trainer {
    fn call<T, F>(&self, f: F) -> Promise
    where
        F: AsyncFnOnce(&mut kiln_mnist::Trainer) -> kiln::Result<T> + 'static,
        T: Into<JsValue>,
    {
        let steps = self.steps.clone();
        self.inner.call(f, move |t| steps.set(t.steps() as usize))
    }
}

#[wasm_bindgen]
impl Trainer {
    #[wasm_bindgen(constructor)]
    pub fn new(gpu: &Gpu, data: &Dataset, seed: u32) -> Result<Trainer, JsError> {
        let config = Config { seed: seed as u64, ..ModelKind::Mlp.default_config() };
        let t = kiln_mnist::Trainer::new(&gpu.device, data.inner.clone(), config)
            .map_err(|e| JsError::new(&e.to_string()))?;
        let train_len = data.inner.train.len();
        Ok(Trainer { inner: Exclusive::new(t), steps: Rc::default(), train_len })
    }

    /// `n` training steps; resolves to the mean of their losses (NaN when
    /// the run's steps are all taken).
    pub fn step(&self, n: usize) -> Promise {
        self.call(async move |t| Ok(mean(&t.run(n).await?)))
    }

    /// Resolves to the accuracy on the test split.
    pub fn evaluate(&self) -> Promise {
        self.call(async |t| Ok(t.evaluate().await?.1))
    }

    /// Resolves to the accuracy on the test split with the weights quantized:
    /// `bits` 8 (int8, a scale per output channel) or 4 (int4, a scale per
    /// group of 32).
    pub fn evaluate_quantized(&self, bits: u32) -> Promise {
        self.call(async move |t| {
            let format = match bits {
                8 => QuantFormat::INT8,
                4 => QuantFormat::int4(32),
                _ => {
                    return Err(KilnError::Invalid {
                        op: "evaluate_quantized",
                        detail: format!("{bits} bits: 8 or 4"),
                    });
                }
            };
            Ok(t.evaluate_quantized(format, false).await?.accuracy)
        })
    }

    /// Resolves to a Float32Array of class probabilities for 784 pixels in [0, 1].
    pub fn predict(&self, pixels: Vec<f32>) -> Promise {
        self.call(async move |t| t.predict(&pixels).await.map(|p| js_sys::Float32Array::from(p.as_slice())))
    }

    /// Steps taken, as of the last call that finished.
    #[wasm_bindgen(getter)]
    pub fn steps(&self) -> usize {
        self.steps.get()
    }

    /// Steps of the whole run (its epochs); `step` does nothing past them.
    #[wasm_bindgen(getter)]
    pub fn total_steps(&self) -> usize {
        let c = ModelKind::Mlp.default_config();
        self.train_len / c.batch_size * c.epochs
    }

    #[wasm_bindgen(getter)]
    pub fn batch_size(&self) -> usize {
        ModelKind::Mlp.default_config().batch_size
    }
}

fn mean(values: &[f32]) -> f32 {
    values.iter().sum::<f32>() / values.len() as f32
}

/// The conformance suite's cases (kiln-conformance's own lists): the op
/// cases, then the gradient cases (named "gradient: op"), each run on the
/// WebGPU device against the CPU reference compiled to wasm, then every op
/// case's batching check (named "vmap: op"), `vmap` against the stacked
/// examples on the WebGPU device, then every gradient case's (named
/// "vmap(grad): op"), per-example gradients against the stacked vjps, then
/// `vmap` against a loop and composed with `grad`, `jit` and itself
/// (named "vmap composition: op").
#[wasm_bindgen]
pub struct Conformance {
    cases: Rc<Vec<Case>>,
    grads: Rc<Vec<GradCase>>,
    compositions: Rc<Vec<vmap_checks::Check>>,
    gpu: Device,
}

/// Where a conformance page case comes from.
#[derive(Clone, Copy)]
enum Entry {
    Op(usize),
    Gradient(usize),
    Batching(usize),
    BatchedGradient(usize),
    Composition(usize),
}

/// One case's outcome as JSON.
fn outcome_json(o: &Outcome) -> String {
    let err = if o.max_abs_err.is_finite() { o.max_abs_err.to_string() } else { "null".into() };
    let failure = o.failure.as_deref().map_or_else(|| "null".into(), quote);
    format!("{{\"passed\":{},\"max_abs_err\":{err},\"failure\":{failure}}}", o.passed)
}

#[wasm_bindgen]
impl Conformance {
    #[wasm_bindgen(constructor)]
    pub fn new(gpu: &Gpu) -> Conformance {
        Conformance {
            cases: Rc::new(cases::all()),
            grads: Rc::new(grad_cases::all()),
            compositions: Rc::new(vmap_checks::all()),
            gpu: gpu.device.clone(),
        }
    }

    #[wasm_bindgen(getter)]
    pub fn len(&self) -> usize {
        2 * (self.cases.len() + self.grads.len()) + self.compositions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Which list case `i` is in, and its place there.
    fn locate(&self, i: usize) -> Option<Entry> {
        let (n, g) = (self.cases.len(), self.grads.len());
        match i {
            _ if i < n => Some(Entry::Op(i)),
            _ if i < n + g => Some(Entry::Gradient(i - n)),
            _ if i < 2 * n + g => Some(Entry::Batching(i - n - g)),
            _ if i < 2 * (n + g) => Some(Entry::BatchedGradient(i - 2 * n - g)),
            _ if i < self.len() => Some(Entry::Composition(i - 2 * (n + g))),
            _ => None,
        }
    }

    /// The op of case `i` ("gradient: op", "vmap: op", "vmap(grad): op" and
    /// "vmap composition: op" for the gradient and batching checks).
    pub fn op(&self, i: usize) -> String {
        match self.locate(i) {
            Some(Entry::Op(k)) => self.cases[k].op.to_string(),
            Some(Entry::Gradient(k)) => format!("gradient: {}", self.grads[k].op),
            Some(Entry::Batching(k)) => batch_check::browser_op(self.cases[k].op),
            Some(Entry::BatchedGradient(k)) => format!("{}{}", batch_grad_check::BROWSER_PREFIX, self.grads[k].op),
            Some(Entry::Composition(k)) => format!("{}{}", vmap_checks::BROWSER_PREFIX, self.compositions[k].op),
            None => String::new(),
        }
    }

    pub fn detail(&self, i: usize) -> String {
        match self.locate(i) {
            Some(Entry::Op(k) | Entry::Batching(k)) => self.cases[k].detail.clone(),
            Some(Entry::Gradient(k) | Entry::BatchedGradient(k)) => self.grads[k].detail.clone(),
            Some(Entry::Composition(k)) => self.compositions[k].detail.clone(),
            None => String::new(),
        }
    }

    /// Resolves to `{"passed": bool, "max_abs_err": number|null, "failure":
    /// string|null}`, or `{"skipped": reason}` for a batching check of a
    /// case without inputs.
    pub fn run(&self, i: usize) -> Promise {
        let (cases, grads, gpu) = (self.cases.clone(), self.grads.clone(), self.gpu.clone());
        let compositions = self.compositions.clone();
        let entry = self.locate(i);
        future_to_promise(async move {
            let cpu = Device::cpu();
            let outcome = match entry.ok_or_else(|| js_err(format!("no case {i}")))? {
                Entry::Op(k) => report::check(&cases[k], &report::reference(&cases[k], &cpu).await, &gpu).await,
                Entry::Gradient(k) => {
                    grad_check::check_device(&grads[k], &grad_check::reference(&grads[k], &cpu).await, &gpu).await
                }
                Entry::BatchedGradient(k) => batch_grad_check::check(&grads[k], &gpu).await,
                Entry::Composition(k) => compositions[k].run(&gpu).await,
                Entry::Batching(k) => match batch_check::check(&cases[k], &gpu).await {
                    Some(outcome) => outcome,
                    None => return Ok("{\"skipped\":\"no input to batch\"}".into()),
                },
            };
            Ok(outcome_json(&outcome).into())
        })
    }
}
