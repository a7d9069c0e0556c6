//! Hugging Face models at the sizes people use: GPT-2 small (124M) and
//! TinyLlama's 1.1B shape, written with random weights in the layout
//! `save_pretrained` gives (config.json and model.safetensors, the same
//! tensor names and shapes), then loaded by kiln-models like a download.
//! Their token tables (154 MB and 262 MB in f32) are past the 128 MiB one
//! binding holds on lavapipe and in browsers.

use safetensors::{Dtype, View};
use std::borrow::Cow;
use std::path::Path;

/// A model shape to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HfShape {
    /// `gpt2` on the Hub: 12 layers of width 768, 50,257 tokens.
    Gpt2Small,
    /// `TinyLlama/TinyLlama-1.1B-Chat-v1.0`: 22 layers of width 2048,
    /// grouped queries (32 heads, 4 key/value heads), 32,000 tokens.
    TinyLlama,
}

impl HfShape {
    /// The shape named `name` (`gpt2-124m`, `tinyllama-1.1b`).
    pub fn from_name(name: &str) -> Option<HfShape> {
        match name {
            "gpt2-124m" => Some(HfShape::Gpt2Small),
            "tinyllama-1.1b" => Some(HfShape::TinyLlama),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            HfShape::Gpt2Small => "gpt2-124m",
            HfShape::TinyLlama => "tinyllama-1.1b",
        }
    }

    fn config(self, dtype: &str) -> String {
        match self {
            HfShape::Gpt2Small => format!(
                r#"{{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 50257,
  "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": null,
  "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new", "tie_word_embeddings": true,
  "torch_dtype": "{dtype}"}}"#
            ),
            HfShape::TinyLlama => format!(
                r#"{{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
  "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
  "num_key_value_heads": 4, "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "hidden_act": "silu", "tie_word_embeddings": false, "torch_dtype": "{dtype}"}}"#
            ),
        }
    }

    /// Every tensor's name and shape, as transformers saves them.
    fn tensors(self) -> Vec<(String, Vec<usize>)> {
        let mut out = Vec::new();
        let mut add = |name: String, shape: &[usize]| out.push((name, shape.to_vec()));
        match self {
            HfShape::Gpt2Small => {
                let (v, p, w) = (50257, 1024, 768);
                add("transformer.wte.weight".into(), &[v, w]);
                add("transformer.wpe.weight".into(), &[p, w]);
                for i in 0..12 {
                    let at = |name: &str| format!("transformer.h.{i}.{name}");
                    for norm in ["ln_1", "ln_2"] {
                        add(at(&format!("{norm}.weight")), &[w]);
                        add(at(&format!("{norm}.bias")), &[w]);
                    }
                    for (name, inputs, outputs) in [
                        ("attn.c_attn", w, 3 * w),
                        ("attn.c_proj", w, w),
                        ("mlp.c_fc", w, 4 * w),
                        ("mlp.c_proj", 4 * w, w),
                    ] {
                        add(at(&format!("{name}.weight")), &[inputs, outputs]);
                        add(at(&format!("{name}.bias")), &[outputs]);
                    }
                }
                add("transformer.ln_f.weight".into(), &[w]);
                add("transformer.ln_f.bias".into(), &[w]);
            }
            HfShape::TinyLlama => {
                let (v, h, kv, m) = (32000, 2048, 256, 5632);
                add("model.embed_tokens.weight".into(), &[v, h]);
                for i in 0..22 {
                    let at = |name: &str| format!("model.layers.{i}.{name}.weight");
                    add(at("input_layernorm"), &[h]);
                    add(at("post_attention_layernorm"), &[h]);
                    for (name, shape) in [
                        ("self_attn.q_proj", [h, h]),
                        ("self_attn.k_proj", [kv, h]),
                        ("self_attn.v_proj", [kv, h]),
                        ("self_attn.o_proj", [h, h]),
                        ("mlp.gate_proj", [m, h]),
                        ("mlp.up_proj", [m, h]),
                        ("mlp.down_proj", [h, m]),
                    ] {
                        add(at(name), &shape);
                    }
                }
                add("model.norm.weight".into(), &[h]);
                add("lm_head.weight".into(), &[v, h]);
            }
        }
        out
    }
}

/// One tensor's random values, made when the writer asks for its bytes:
/// norms' weights 1 and biases 0, other weights uniform with a standard
/// deviation of 0.02 (GPT-2's and Llama's initializer range).
struct RandomTensor {
    shape: Vec<usize>,
    dtype: Dtype,
    fill: Fill,
    seed: u64,
}

enum Fill {
    Ones,
    Zeros,
    Uniform,
}

impl View for RandomTensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        let n: usize = self.shape.iter().product();
        // A splitmix64 stream: uniform on ±0.02·√3 (standard deviation 0.02).
        let mut state = self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let half_width = 0.02 * 3f32.sqrt();
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32 * 2.0 * half_width - half_width
        };
        let values = (0..n).map(|_| match self.fill {
            Fill::Ones => 1.0,
            Fill::Zeros => 0.0,
            Fill::Uniform => next(),
        });
        let bytes: Vec<u8> = match self.dtype {
            Dtype::F16 => values.flat_map(|v| half::f16::from_f32(v).to_le_bytes()).collect(),
            Dtype::BF16 => values.flat_map(|v| half::bf16::from_f32(v).to_le_bytes()).collect(),
            _ => values.flat_map(f32::to_le_bytes).collect(),
        };
        Cow::Owned(bytes)
    }

    fn data_len(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.bitsize() / 8
    }
}

/// Write `shape` with random weights stored as `dtype` (`f32`, `f16` or
/// `bf16`) into folder `dir`: config.json and model.safetensors.
pub fn write(shape: HfShape, dtype: &str, dir: &Path) -> std::io::Result<()> {
    let (stored, torch) = match dtype {
        "f32" => (Dtype::F32, "float32"),
        "f16" => (Dtype::F16, "float16"),
        "bf16" => (Dtype::BF16, "bfloat16"),
        other => return Err(std::io::Error::other(format!("dtype `{other}` is not f32, f16 or bf16"))),
    };
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("config.json"), shape.config(torch))?;
    let tensors = shape.tensors().into_iter().enumerate().map(|(i, (name, dims))| {
        let fill = if name.contains("norm") || name.contains("ln_") {
            if name.ends_with("bias") { Fill::Zeros } else { Fill::Ones }
        } else if name.ends_with("bias") {
            Fill::Zeros
        } else {
            Fill::Uniform
        };
        (name, RandomTensor { shape: dims, dtype: stored, fill, seed: i as u64 + 1 })
    });
    safetensors::serialize_to_file(tensors, None, &dir.join("model.safetensors")).map_err(std::io::Error::other)
}
