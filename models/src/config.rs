//! `config.json` of the architectures kiln runs, with `transformers`'
//! defaults for what a file leaves out.

use crate::Folder;
use kiln::{KilnError, Result};
use serde_json::{Map, Value};

/// What `config.json` describes.
#[derive(Clone, Debug, PartialEq)]
pub enum Architecture {
    /// `model_type: "gpt2"`.
    Gpt2(Gpt2Config),
    /// `model_type: "llama"`.
    Llama(LlamaConfig),
}

/// GPT-2's shape (`GPT2Config`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gpt2Config {
    /// Tokens in the vocabulary (`vocab_size`).
    pub vocab: usize,
    /// Learned positions, the longest window (`n_positions`).
    pub positions: usize,
    /// Embedding width (`n_embd`).
    pub width: usize,
    /// Transformer blocks (`n_layer`).
    pub layers: usize,
    /// Attention heads (`n_head`).
    pub heads: usize,
    /// The MLP's hidden width (`n_inner`, else 4 · width).
    pub inner: usize,
    /// Layer norms' epsilon (`layer_norm_epsilon`).
    pub eps: f64,
}

/// Llama's shape (`LlamaConfig`).
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Tokens in the vocabulary (`vocab_size`).
    pub vocab: usize,
    /// Residual width (`hidden_size`).
    pub hidden: usize,
    /// The SwiGLU MLP's width (`intermediate_size`).
    pub intermediate: usize,
    /// Decoder layers (`num_hidden_layers`).
    pub layers: usize,
    /// Query heads (`num_attention_heads`).
    pub heads: usize,
    /// Key and value heads (`num_key_value_heads`; fewer than `heads` is
    /// grouped-query attention).
    pub kv_heads: usize,
    /// Width of one head (`head_dim`, else hidden / heads).
    pub head_dim: usize,
    /// RMS norms' epsilon (`rms_norm_eps`).
    pub eps: f64,
    /// Rotary position embedding.
    pub rope: RopeConfig,
    /// Whether the output layer is the token table (`tie_word_embeddings`).
    pub tied: bool,
    /// Whether q, k, v and o carry biases (`attention_bias`).
    pub attention_bias: bool,
    /// Whether the MLP's projections carry biases (`mlp_bias`).
    pub mlp_bias: bool,
}

/// Rotary embeddings: base frequency and an optional rescaling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeConfig {
    /// The base of the frequencies (`rope_theta`, 10000 by default).
    pub theta: f64,
    /// Llama 3's rescaling of the low frequencies (`rope_type: "llama3"`).
    pub llama3: Option<Llama3Scaling>,
}

/// Llama 3's frequency rescaling (`rope_scaling` with `rope_type: "llama3"`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Scaling {
    /// How much longer the context became (`factor`).
    pub factor: f64,
    /// Wavelengths past `original / low_freq_factor` are divided by `factor`.
    pub low_freq_factor: f64,
    /// Wavelengths below `original / high_freq_factor` are kept.
    pub high_freq_factor: f64,
    /// The context trained before rescaling (`original_max_position_embeddings`).
    pub original: f64,
}

/// The architecture the folder's `config.json` describes.
pub fn read(folder: &Folder) -> Result<Architecture> {
    let path = folder.path("config.json");
    let file = |detail: String| KilnError::File { op: "config.json", path: path.display().to_string(), detail };
    let text = folder.read_text("config.json", "config.json")?;
    let json: Value = serde_json::from_str(&text).map_err(|e| file(format!("not JSON: {e}")))?;
    let Some(fields) = json.as_object() else { return Err(file("is not a JSON object".into())) };
    let c = Fields { fields, file: &file };
    match c.string("model_type")? {
        "gpt2" => gpt2(&c).map(Architecture::Gpt2),
        "llama" => llama(&c).map(Architecture::Llama),
        other => Err(file(format!("model_type `{other}` is not one kiln runs (gpt2, llama)"))),
    }
}

/// A config's fields, with errors naming the file.
struct Fields<'a> {
    fields: &'a Map<String, Value>,
    file: &'a dyn Fn(String) -> KilnError,
}

impl Fields<'_> {
    fn string(&self, key: &str) -> Result<&str> {
        self.fields.get(key).and_then(Value::as_str).ok_or_else(|| (self.file)(format!("`{key}` is missing")))
    }

    /// A count: required where `default` is `None`.
    fn count(&self, key: &str, default: Option<usize>) -> Result<usize> {
        match self.fields.get(key) {
            None | Some(Value::Null) => default.ok_or_else(|| (self.file)(format!("`{key}` is missing"))),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| (self.file)(format!("`{key}` is {v}, not a positive integer"))),
        }
    }

    fn number(&self, key: &str, default: f64) -> Result<f64> {
        match self.fields.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| (self.file)(format!("`{key}` is {v}, not a number"))),
        }
    }

    fn flag(&self, key: &str, default: bool) -> bool {
        self.fields.get(key).and_then(Value::as_bool).unwrap_or(default)
    }
}

fn gpt2(c: &Fields) -> Result<Gpt2Config> {
    let width = c.count("n_embd", Some(768))?;
    let config = Gpt2Config {
        vocab: c.count("vocab_size", Some(50257))?,
        positions: c.count("n_positions", Some(1024))?,
        width,
        layers: c.count("n_layer", Some(12))?,
        heads: c.count("n_head", Some(12))?,
        inner: c.count("n_inner", Some(4 * width))?,
        eps: c.number("layer_norm_epsilon", 1e-5)?,
    };
    if !config.width.is_multiple_of(config.heads) {
        return Err((c.file)(format!("n_embd {} does not split into {} heads", config.width, config.heads)));
    }
    if c.flag("scale_attn_by_inverse_layer_idx", false) || !c.flag("scale_attn_weights", true) {
        return Err((c.file)("attention scaled other than by 1/√head_dim is not one kiln runs".into()));
    }
    let activation = c.fields.get("activation_function").and_then(Value::as_str).unwrap_or("gelu_new");
    if !matches!(activation, "gelu_new" | "gelu_pytorch_tanh") {
        return Err((c.file)(format!("activation_function `{activation}` is not one kiln runs (gelu_new)")));
    }
    Ok(config)
}

fn llama(c: &Fields) -> Result<LlamaConfig> {
    let hidden = c.count("hidden_size", None)?;
    let heads = c.count("num_attention_heads", None)?;
    let kv_heads = c.count("num_key_value_heads", Some(heads))?;
    if !hidden.is_multiple_of(heads) && c.fields.get("head_dim").is_none() {
        return Err((c.file)(format!("hidden_size {hidden} does not split into {heads} heads")));
    }
    if !heads.is_multiple_of(kv_heads) {
        return Err((c.file)(format!("{heads} attention heads do not share {kv_heads} key/value heads evenly")));
    }
    let activation = c.fields.get("hidden_act").and_then(Value::as_str).unwrap_or("silu");
    if activation != "silu" {
        return Err((c.file)(format!("hidden_act `{activation}` is not one kiln runs (silu)")));
    }
    Ok(LlamaConfig {
        vocab: c.count("vocab_size", None)?,
        hidden,
        intermediate: c.count("intermediate_size", None)?,
        layers: c.count("num_hidden_layers", None)?,
        heads,
        kv_heads,
        head_dim: c.count("head_dim", Some(hidden / heads))?,
        eps: c.number("rms_norm_eps", 1e-6)?,
        rope: rope(c)?,
        tied: c.flag("tie_word_embeddings", false),
        attention_bias: c.flag("attention_bias", false),
        mlp_bias: c.flag("mlp_bias", false),
    })
}

/// `rope_theta` with `rope_scaling` (transformers 4), or `rope_parameters`
/// (transformers 5, which holds the theta too).
fn rope(c: &Fields) -> Result<RopeConfig> {
    let parameters = c.fields.get("rope_parameters").and_then(Value::as_object);
    let scaling = parameters.or_else(|| c.fields.get("rope_scaling").and_then(Value::as_object));
    let theta = match parameters.and_then(|p| p.get("rope_theta")).and_then(Value::as_f64) {
        Some(theta) => theta,
        None => c.number("rope_theta", 10000.0)?,
    };
    let Some(scaling) = scaling else { return Ok(RopeConfig { theta, llama3: None }) };
    let kind = scaling.get("rope_type").or_else(|| scaling.get("type")).and_then(Value::as_str).unwrap_or("default");
    let s = Fields { fields: scaling, file: c.file };
    let llama3 = match kind {
        "default" => None,
        "llama3" => Some(Llama3Scaling {
            factor: s.number("factor", 8.0)?,
            low_freq_factor: s.number("low_freq_factor", 1.0)?,
            high_freq_factor: s.number("high_freq_factor", 4.0)?,
            original: s.count("original_max_position_embeddings", Some(8192))? as f64,
        }),
        other => return Err((c.file)(format!("rope_type `{other}` is not one kiln runs (default, llama3)"))),
    };
    Ok(RopeConfig { theta, llama3 })
}
