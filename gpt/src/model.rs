//! The model: token and position embeddings, pre-norm transformer blocks,
//! a final layer norm, and the token table reused as the output layer.

use kiln::prelude::*;
use kiln::{Key, KilnError};
use kiln_nn::{Block, Embedding, KvCache, LayerNorm, QuantizedTree, codes_under};

/// The shape of a model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GptConfig {
    /// Characters the model reads and predicts.
    pub vocab: usize,
    /// The most positions the model reads at once.
    pub context: usize,
    /// Embedding width.
    pub width: usize,
    /// Attention heads per layer; must divide `width`.
    pub heads: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Positions from ALiBi's distance penalty in every attention layer
    /// instead of a learned `[context, width]` table.
    pub alibi: bool,
}

impl GptConfig {
    /// The demo's model: 4 layers of width 128 with 4 heads over 128
    /// characters, ALiBi positions (about 0.8M parameters for a
    /// 62-character vocabulary).
    pub fn small(vocab: usize) -> GptConfig {
        GptConfig { vocab, context: 128, width: 128, heads: 4, layers: 4, alibi: true }
    }

    /// Errors unless `vocab`, `context`, `heads` and `layers` are positive and
    /// `heads` divides `width`.
    pub fn check(&self) -> Result<()> {
        let GptConfig { vocab, context, width, heads, layers, .. } = *self;
        if vocab == 0 || context == 0 || width == 0 || layers == 0 || heads == 0 || !width.is_multiple_of(heads) {
            return Err(KilnError::Invalid { op: "GptConfig", detail: format!("{self:?} has no model") });
        }
        Ok(())
    }
}

/// A character-level GPT of a `GptConfig`.
#[derive(Tree, Clone, Debug)]
pub struct Gpt {
    /// `[vocab, width]`, also the output layer.
    pub tokens: Embedding,
    /// `[context, width]`, unless the attention layers use ALiBi.
    pub positions: Option<Embedding>,
    /// The transformer blocks, input first.
    pub blocks: Vec<Block>,
    /// The final layer norm, before the output layer.
    pub norm: LayerNorm,
    #[tree(skip)]
    config: GptConfig,
}

impl QuantizedTree for Gpt {
    fn code_formats(&self) -> Vec<(String, QuantFormat)> {
        codes_under("blocks", &self.blocks)
    }
}

impl Gpt {
    /// Embeddings N(0, 0.02), as GPT-2.
    pub fn new(dev: &Device, key: Key, config: GptConfig) -> Result<Gpt> {
        config.check()?;
        let GptConfig { vocab, context, width, heads, layers, alibi } = config;
        let table = |key: Key, rows| -> Result<Embedding> {
            Ok(Embedding { weight: kiln_nn::init::normal(dev, key, &[rows, width], 0.02)? })
        };
        Ok(Gpt {
            tokens: table(key.fold_in(0), vocab)?,
            positions: (!alibi).then(|| table(key.fold_in(1), context)).transpose()?,
            blocks: (0..layers)
                .map(|i| {
                    let mut block = Block::new(dev, key.fold_in(2 + i as u32), width, heads, layers)?;
                    block.attention.alibi = alibi;
                    Ok(block)
                })
                .collect::<Result<_>>()?,
            norm: LayerNorm::new(dev, width)?,
            config,
        })
    }

    /// The shape it was built with.
    pub fn config(&self) -> GptConfig {
        self.config
    }

    /// The model for inference with the blocks' projections in integer
    /// `format` (the weights that grow with width and depth). The token
    /// table, read as rows and reused as the output layer, and the norms
    /// stay f32.
    pub fn quantize(&self, format: QuantFormat) -> Result<Gpt> {
        let blocks = self.blocks.iter().map(|b| b.quantize(format)).collect::<Result<_>>()?;
        Ok(Gpt { blocks, ..self.clone() })
    }

    /// Elements in all leaves (for a float model, the parameter count).
    pub fn parameters(&self) -> usize {
        self.leaves().iter().map(|t| t.numel()).sum()
    }

    /// Logits `[B, T, vocab]` of the next character after each position of
    /// `ids` (`[B, T]`, i32, `T ≤ context`).
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let context = self.config().context;
        if ids.rank() != 2 || ids.shape()[1] > context || !ids.dtype().is_int() {
            return Err(KilnError::Shape {
                op: "Gpt",
                detail: format!("takes i32 ids [batch, ≤ {context}], got {} ids {:?}", ids.dtype(), ids.shape()),
            });
        }
        let mut x = self.tokens.forward(ids)?;
        if let Some(table) = &self.positions {
            let at = Tensor::arange(ids.device(), 0.0, ids.shape()[1] as f64, 1.0, DType::I32)?;
            x = x.add(&table.forward(&at)?)?;
        }
        for (i, block) in self.blocks.iter().enumerate() {
            x = block.forward(&x, None).map_err(|e| e.within(&format!("blocks.{i}")))?;
        }
        self.tokens.attend(&self.norm.forward(&x)?)
    }

    /// Mean cross-entropy (nats) of predicting `targets` from `ids`, both `[B, T]`.
    pub fn loss(&self, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let logits = self.forward(ids)?;
        let vocab = logits.shape()[2] as isize;
        kiln_nn::loss::cross_entropy(&logits.reshape(&[-1, vocab])?, &targets.reshape(&[-1])?)
    }

    /// Empty caches for generating `batch` sequences.
    pub fn caches(&self, batch: usize) -> Result<Vec<KvCache>> {
        let dev = self.tokens.weight.device();
        self.blocks.iter().map(|b| KvCache::new(&b.attention, dev, batch, self.config().context)).collect()
    }

    /// One position: `ids` `[B, 1]` at position `pos` (i32 scalar tensor)
    /// with the caches of the positions before it; logits `[B, vocab]` and
    /// the caches with this position written.
    pub fn step(&self, ids: &Tensor, caches: &[KvCache], pos: &Tensor) -> Result<(Tensor, Vec<KvCache>)> {
        if ids.rank() != 2 || ids.shape()[1] != 1 || caches.len() != self.blocks.len() {
            return Err(KilnError::Shape {
                op: "Gpt::step",
                detail: format!(
                    "takes ids [batch, 1] and {} caches, got ids {:?} and {} caches",
                    self.blocks.len(),
                    ids.shape(),
                    caches.len()
                ),
            });
        }
        let mut x = self.tokens.forward(ids)?;
        if let Some(table) = &self.positions {
            x = x.add(&table.weight.index_select(0, &pos.reshape(&[1])?)?)?;
        }
        let mut written = Vec::with_capacity(caches.len());
        for (block, cache) in self.blocks.iter().zip(caches) {
            let (y, cache) = block.forward_cached(&x, cache, pos)?;
            x = y;
            written.push(cache);
        }
        let logits = self.tokens.attend(&self.norm.forward(&x)?)?;
        Ok((logits.reshape(&[ids.shape()[0] as isize, -1])?, written))
    }
}
