//! The one error type of kiln. Every variant names what the user can act on:
//! the op and the shapes, the limit, the file, or the adapter.

use crate::dtype::DType;

pub type Result<T, E = KilnError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum KilnError {
    #[error("{op}: {detail}")]
    Shape { op: &'static str, detail: String },

    #[error("{op}: {detail}")]
    DType { op: &'static str, detail: String },

    #[error("{op}: axis {axis} is out of range for a tensor of rank {rank}")]
    Axis { op: &'static str, axis: isize, rank: usize },

    #[error("{op}: {detail}")]
    Invalid { op: &'static str, detail: String },

    #[error(
        "{op}: a tensor of shape {shape:?} ({dtype}) needs {bytes} bytes, over the adapter's \
         {limit_name} of {limit} bytes"
    )]
    TooLarge { op: &'static str, shape: Vec<usize>, dtype: DType, bytes: u64, limit_name: &'static str, limit: u64 },

    #[error(
        "no GPU adapter found on backends {backends}. Install a driver (on Linux: Mesa's \
         `mesa-vulkan-drivers` for Vulkan, or EGL for OpenGL), or use Device::cpu()"
    )]
    NoAdapter { backends: String },

    #[error("no adapter matches KILN_ADAPTER/selector {selector:?}; available: {available}")]
    AdapterNotFound { selector: String, available: String },

    #[error("requesting a device from adapter {adapter:?} failed: {detail}")]
    RequestDevice { adapter: String, detail: String },

    #[error("{op}: tensors live on different devices ({left} and {right})")]
    DeviceMismatch { op: &'static str, left: String, right: String },

    #[error("the GPU device was lost: {0}")]
    DeviceLost(String),

    #[error("out of GPU memory: {0}")]
    OutOfMemory(String),

    #[error("GPU error (a bug in kiln, please report it): {0}")]
    Gpu(String),

    #[error("kiln generated a shader that does not compile (a bug in kiln): {message}\n--- WGSL ---\n{wgsl}")]
    Shader { message: String, wgsl: String },

    #[error("{what} is not available: {detail}")]
    Unavailable { what: &'static str, detail: String },

    #[error("kiln generated a CUDA kernel that {compiler} rejects (a bug in kiln): {log}\n--- CUDA C++ ---\n{code}")]
    CudaCompile { compiler: &'static str, log: String, code: String },

    #[error("readback failed: {0}")]
    Readback(String),

    /// A file (checkpoint, data set) that cannot be read, written or parsed.
    #[error("{op}: {path}: {detail}")]
    File { op: &'static str, path: String, detail: String },

    /// An error from one part of a tree (a layer of a model), with that
    /// part's path: `Linear at `layers.0`: expects input [.., 2], got ...`.
    #[error("{}", within_message(path, source))]
    Within { path: String, source: Box<KilnError> },
}

fn within_message(path: &str, source: &KilnError) -> String {
    match source {
        KilnError::Shape { op, detail } | KilnError::DType { op, detail } | KilnError::Invalid { op, detail } => {
            format!("{op} at `{path}`: {detail}")
        }
        other => format!("at `{path}`: {other}"),
    }
}

impl KilnError {
    /// The same error, naming `op` instead of the primitive it came from:
    /// composite ops (softmax, mean, stack, ...) report the op the user
    /// called. Errors that name no op, or a file, are kept as they are.
    pub fn in_op(self, op: &'static str) -> KilnError {
        match self {
            KilnError::Shape { detail, .. } => KilnError::Shape { op, detail },
            KilnError::DType { detail, .. } => KilnError::DType { op, detail },
            KilnError::Axis { axis, rank, .. } => KilnError::Axis { op, axis, rank },
            KilnError::Invalid { detail, .. } => KilnError::Invalid { op, detail },
            KilnError::DeviceMismatch { left, right, .. } => KilnError::DeviceMismatch { op, left, right },
            other => other,
        }
    }

    /// The same error, from the part of a tree at `segment` (`layers.0`);
    /// a path already named goes under it (`blocks.1` then `mlp.fc`).
    pub fn within(self, segment: &str) -> KilnError {
        match self {
            KilnError::Within { path, source } => KilnError::Within { path: format!("{segment}.{path}"), source },
            other => KilnError::Within { path: segment.to_string(), source: Box::new(other) },
        }
    }

    /// The error itself, without the tree paths [`KilnError::within`] added.
    pub fn innermost(&self) -> &KilnError {
        match self {
            KilnError::Within { source, .. } => source.innermost(),
            other => other,
        }
    }
}

/// The error of a matmul whose contracted axes differ: `a`'s last (`k`)
/// against `b`'s second-to-last (each operand as the user gave it).
pub fn matmul_misaligned(op: &'static str, a: &[usize], b: &[usize], k_a: usize, k_b: usize) -> KilnError {
    KilnError::Shape { op, detail: format!("shapes {a:?} and {b:?} are not aligned (k = {k_a} vs {k_b})") }
}

/// The error of an op given operands of two dtypes, each with its own shape
/// (before any broadcast).
pub fn dtype_mismatch(op: &'static str, a: (DType, &[usize]), b: (DType, &[usize])) -> KilnError {
    KilnError::DType { op, detail: format!("dtypes {} {:?} and {} {:?} differ; cast one first", a.0, a.1, b.0, b.1) }
}

/// Shorthand used by the shape checks: `shape_err("add", format!(...))`.
pub(crate) fn shape_err<T>(op: &'static str, detail: String) -> Result<T> {
    Err(KilnError::Shape { op, detail })
}

pub(crate) fn dtype_err<T>(op: &'static str, detail: String) -> Result<T> {
    Err(KilnError::DType { op, detail })
}
