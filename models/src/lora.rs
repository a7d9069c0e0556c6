//! LoRA adapters for a loaded model: a low-rank update beside each chosen
//! projection, the base weights frozen (float, or int8/int4 as QLoRA
//! does), saved and loaded in PEFT's layout (`adapter_config.json` and
//! `adapter_model.safetensors`), so that adapters move between kiln and
//! Hugging Face's `peft` both ways.

use crate::Model;
use crate::llama::Projection;
use crate::weights::Weights;
use kiln::prelude::*;
use kiln_nn::{Dense, Lora};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// The adapter's weights' file in a PEFT adapter folder.
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";
/// The adapter's settings' file in a PEFT adapter folder.
pub const ADAPTER_CONFIG: &str = "adapter_config.json";
/// What PEFT puts before a module's path in the weights' names.
const PEFT_PREFIX: &str = "base_model.model.";

/// Which projections get an adapter, and its size.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    /// The rank r of each update.
    pub rank: usize,
    /// The update is scaled by `alpha / rank`.
    pub alpha: f64,
    /// Module names, as PEFT's `target_modules`: a projection is adapted
    /// when its path (`transformer.h.0.attn.c_attn`) is one of them or ends
    /// in `.` and one of them (`c_attn`). Empty: every projection of every
    /// block (the token table and the head stay as they are).
    pub targets: Vec<String>,
}

impl LoraConfig {
    /// Rank `rank` on every block projection, `alpha = rank` (scale 1).
    pub fn new(rank: usize) -> LoraConfig {
        LoraConfig { rank, alpha: rank as f64, targets: Vec::new() }
    }

    /// The same adapters on only the projections `targets` name.
    pub fn targeting(self, targets: &[&str]) -> LoraConfig {
        LoraConfig { targets: targets.iter().map(|t| t.to_string()).collect(), ..self }
    }

    fn selects(&self, path: &str) -> bool {
        self.targets.is_empty() || self.targets.iter().any(|t| names_module(t, path))
    }
}

/// Whether PEFT's target `target` names the module at `path`: the whole
/// path, or its last components.
fn names_module(target: &str, path: &str) -> bool {
    path == target || path.ends_with(&format!(".{target}"))
}

/// A model's adapters, by the path of the projection each belongs to. As
/// a tree, its leaves are only the adapters' (`a` and `b` of each), so
/// `value_and_grad` over it trains them and leaves the model frozen.
#[derive(Tree, Clone, Debug)]
pub struct Adapters {
    /// Each adapted projection's update, by its module path.
    pub loras: BTreeMap<String, Lora>,
    #[tree(skip)]
    config: LoraConfig,
}

/// One projection of a model, float or quantized, that an adapter can
/// sit beside.
pub(crate) enum Site<'a> {
    /// GPT-2's (kiln-nn's) projections, `[in, out]`.
    Dense(&'a mut Dense),
    /// Llama's, stored `[out, in]`.
    Projection(&'a mut Projection),
}

impl Site<'_> {
    fn sides(&self) -> (usize, usize) {
        match self {
            Site::Dense(d) => (d.inputs(), d.outputs()),
            Site::Projection(p) => (p.inputs(), p.outputs()),
        }
    }

    fn merge(&mut self) -> Result<()> {
        match self {
            Site::Dense(d) => **d = d.merged()?,
            Site::Projection(p) => **p = p.merged()?,
        }
        Ok(())
    }

    fn adapt(&mut self, lora: &Lora) -> Result<()> {
        match self {
            Site::Dense(d) => **d = d.adapted(lora.clone())?,
            Site::Projection(p) => **p = p.adapted(lora.clone())?,
        }
        Ok(())
    }
}

fn invalid(op: &'static str, detail: String) -> KilnError {
    KilnError::Invalid { op, detail }
}

impl Adapters {
    /// Fresh adapters for `model` (`b` zero, so the model is unchanged
    /// until trained), `a` drawn from `key`. Errors if the rank is 0 or
    /// too large, or a target names no projection of the model.
    pub fn new(model: &Model, config: LoraConfig, key: Key) -> Result<Adapters> {
        let device = model.device();
        let mut model = model.clone();
        let sites = model.sites();
        let names: Vec<&str> = sites.iter().map(|(p, _)| p.as_str()).collect();
        if let Some(target) = config.targets.iter().find(|t| !names.iter().any(|p| names_module(t, p))) {
            let last: std::collections::BTreeSet<&str> = names.iter().filter_map(|p| p.rsplit('.').next()).collect();
            let have = last.into_iter().collect::<Vec<_>>().join(", ");
            return Err(invalid("Adapters::new", format!("target `{target}` names no projection (there are {have})")));
        }
        let mut loras = BTreeMap::new();
        for (i, (path, site)) in sites.iter().enumerate().filter(|(_, (p, _))| config.selects(p)) {
            let (inputs, outputs) = site.sides();
            let lora = Lora::new(&device, key.fold_in(i as u32), inputs, outputs, config.rank, config.alpha)
                .map_err(|e| e.within(path))?;
            loras.insert(path.clone(), lora);
        }
        Ok(Adapters { loras, config })
    }

    /// The rank, scale and targets these adapters were made with.
    pub fn config(&self) -> &LoraConfig {
        &self.config
    }

    /// Trainable numbers: `r · (in + out)` per adapted projection.
    pub fn parameters(&self) -> usize {
        self.loras.values().map(|l| l.a.numel() + l.b.numel()).sum()
    }

    /// Writes `dir/adapter_config.json` and `dir/adapter_model.safetensors`
    /// as PEFT does (`base_model.model.<path>.lora_A.weight` `[r, in]`,
    /// `lora_B.weight` `[out, r]`, f32), creating `dir` if needed.
    pub async fn save(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        let file_err = |path: &Path, e: String| KilnError::File {
            op: "Adapters::save",
            path: path.display().to_string(),
            detail: e,
        };
        std::fs::create_dir_all(dir).map_err(|e| file_err(dir, format!("cannot create: {e}")))?;
        let (config, weights) = self.to_bytes().await?;
        for (name, bytes) in [(ADAPTER_CONFIG, config.into_bytes()), (ADAPTER_WEIGHTS, weights)] {
            let path = dir.join(name);
            std::fs::write(&path, bytes).map_err(|e| file_err(&path, format!("cannot write: {e}")))?;
        }
        Ok(())
    }

    /// The two files [`Adapters::save`] writes: `adapter_config.json`'s
    /// text and `adapter_model.safetensors`' bytes.
    pub async fn to_bytes(&self) -> Result<(String, Vec<u8>)> {
        let mut tensors = Vec::new();
        for (path, lora) in &self.loras {
            for (side, t) in [("lora_A", &lora.a), ("lora_B", &lora.b)] {
                let values = t.cast(DType::F32)?.to_vec::<f32>().await?;
                tensors.push((format!("{PEFT_PREFIX}{path}.{side}.weight"), t.shape().to_vec(), values));
            }
        }
        let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
            .iter()
            .map(|(name, shape, values)| {
                let view = safetensors::tensor::TensorView::new(
                    safetensors::Dtype::F32,
                    shape.clone(),
                    bytemuck::cast_slice(values),
                );
                view.map(|v| (name.clone(), v))
            })
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| invalid("Adapters::save", format!("cannot lay out the adapters: {e}")))?;
        let metadata = Some(std::collections::HashMap::from([("format".to_string(), "pt".to_string())]));
        let weights = safetensors::serialize(views, metadata)
            .map_err(|e| invalid("Adapters::save", format!("cannot serialize the adapters: {e}")))?;
        let modules: std::collections::BTreeSet<&str> = match self.config.targets.is_empty() {
            true => self.loras.keys().filter_map(|p| p.rsplit('.').next()).collect(),
            false => self.config.targets.iter().map(String::as_str).collect(),
        };
        let config = json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "r": self.config.rank,
            "lora_alpha": self.config.alpha,
            "lora_dropout": 0.0,
            "bias": "none",
            "target_modules": modules,
            // GPT-2's Conv1D stores weights [in, out]; PEFT marks it.
            "fan_in_fan_out": self.loras.keys().any(|p| p.starts_with("transformer.")),
            "use_rslora": false,
            "use_dora": false,
            "inference_mode": true,
        });
        Ok((serde_json::to_string_pretty(&config).expect("a JSON value prints") + "\n", weights))
    }

    /// The adapters in PEFT folder `dir` for `model`: every tensor must
    /// belong to one of its projections, with that projection's sides and
    /// the rank of `adapter_config.json`.
    pub fn load(dir: impl AsRef<Path>, model: &Model) -> Result<Adapters> {
        let dir = dir.as_ref();
        let config_path = dir.join(ADAPTER_CONFIG);
        let text = std::fs::read_to_string(&config_path).map_err(|e| KilnError::File {
            op: "Adapters::load",
            path: config_path.display().to_string(),
            detail: format!("cannot read: {e}"),
        })?;
        let weights = Weights::open_file(&dir.join(ADAPTER_WEIGHTS))?;
        Adapters::from_parts(&text, &config_path.display().to_string(), weights, model)
    }

    /// [`Adapters::load`] from the two files' contents (a browser's).
    pub fn from_bytes(config: &str, weights: Vec<u8>, model: &Model) -> Result<Adapters> {
        let weights = Weights::from_bytes(Path::new(ADAPTER_WEIGHTS), std::sync::Arc::new(weights))?;
        Adapters::from_parts(config, ADAPTER_CONFIG, weights, model)
    }

    fn from_parts(text: &str, source: &str, mut weights: Weights, model: &Model) -> Result<Adapters> {
        let config = peft_config(text, source)?;
        let device = model.device();
        let mut model = model.clone();
        let mut loras = BTreeMap::new();
        for (path, site) in model.sites() {
            let name = |side: &str| format!("{PEFT_PREFIX}{path}.{side}.weight");
            if !weights.contains(&name("lora_A")) {
                continue;
            }
            let (inputs, outputs) = site.sides();
            let a = weights.take(&name("lora_A"), &[config.rank, inputs], &device)?;
            let b = weights.take(&name("lora_B"), &[outputs, config.rank], &device)?;
            let scale = config.alpha / config.rank as f64;
            loras.insert(path, Lora { a: a.cast(DType::F32)?, b: b.cast(DType::F32)?, scale });
        }
        weights.finish()?;
        Ok(Adapters { loras, config })
    }
}

/// The settings kiln reads from `adapter_config.json`; an error for a
/// variant it does not compute (DoRA, rsLoRA, per-module ranks).
fn peft_config(text: &str, source: &str) -> Result<LoraConfig> {
    let err = |detail: String| KilnError::File { op: "Adapters::load", path: source.to_string(), detail };
    let json: Value = serde_json::from_str(text).map_err(|e| err(format!("not JSON: {e}")))?;
    if json.get("peft_type").and_then(Value::as_str) != Some("LORA") {
        return Err(err(format!("peft_type is {}, not \"LORA\"", json.get("peft_type").unwrap_or(&Value::Null))));
    }
    // Variants that change what the adapter computes or where (an empty
    // map, null or false is the plain LoRA that kiln computes).
    let unsupported = ["use_dora", "use_rslora", "lora_bias", "use_qalora", "rank_pattern", "alpha_pattern"]
        .into_iter()
        .chain(["modules_to_save", "layers_to_transform", "trainable_token_indices", "exclude_modules"])
        .find(|key| match json.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Object(m)) => !m.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        });
    if let Some(key) = unsupported {
        return Err(err(format!("`{key}` is set; kiln computes plain LoRA, one rank for every module")));
    }
    if json.get("bias").and_then(Value::as_str).is_some_and(|b| b != "none") {
        return Err(err("trains biases (`bias` is not \"none\"); kiln's adapters have none".into()));
    }
    let rank = json.get("r").and_then(Value::as_u64).filter(|&r| r > 0);
    let alpha = json.get("lora_alpha").and_then(Value::as_f64);
    let (Some(rank), Some(alpha)) = (rank, alpha) else {
        return Err(err("needs a positive integer `r` and a number `lora_alpha`".into()));
    };
    let targets = match json.get("target_modules") {
        Some(Value::Array(names)) => names.iter().filter_map(|n| n.as_str().map(str::to_string)).collect(),
        Some(Value::String(name)) => vec![name.clone()],
        _ => Vec::new(),
    };
    Ok(LoraConfig { rank: rank as usize, alpha, targets })
}

impl Model {
    /// The model with `adapters`' updates beside their projections (the
    /// base weights shared, not copied). Errors if an adapter names no
    /// projection of this model or does not fit it.
    pub fn with_lora(&self, adapters: &Adapters) -> Result<Model> {
        let mut model = self.clone();
        let mut used = 0;
        for (path, mut site) in model.sites() {
            if let Some(lora) = adapters.loras.get(&path) {
                site.adapt(lora).map_err(|e| e.within(&path))?;
                used += 1;
            }
        }
        if used < adapters.loras.len() {
            let mut this = self.clone();
            let paths: Vec<String> = this.sites().into_iter().map(|(p, _)| p).collect();
            let stray = adapters.loras.keys().find(|k| !paths.contains(k)).expect("an adapter went unused");
            return Err(invalid("Model::with_lora", format!("adapter `{stray}` names no projection of this model")));
        }
        Ok(model)
    }

    /// The model with each adapter over float weights added into them
    /// (PEFT's `merge_and_unload`): the adapted model's outputs, to
    /// rounding, at the base model's cost. Adapters over int8 or int4
    /// weights stay beside them.
    pub fn merge_lora(&self) -> Result<Model> {
        let mut model = self.clone();
        for (path, mut site) in model.sites() {
            site.merge().map_err(|e| e.within(&path))?;
        }
        Ok(model)
    }

    /// Each block projection by its module path in transformers.
    pub(crate) fn sites(&mut self) -> Vec<(String, Site<'_>)> {
        match self {
            Model::Gpt2(m) => m.sites().into_iter().map(|(p, d)| (p, Site::Dense(d))).collect(),
            Model::Llama(m) => m.sites().into_iter().map(|(p, d)| (p, Site::Projection(d))).collect(),
        }
    }
}
