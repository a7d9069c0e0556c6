//! Text to token ids and back with Hugging Face's `tokenizers` crate: a
//! folder's `tokenizer.json`, or GPT-2's own `vocab.json` and `merges.txt`
//! (byte-level BPE).

use crate::Folder;
use kiln::{KilnError, Result};
use std::collections::HashMap;
use std::path::Path;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::BPE;

/// A model's tokenizer.
#[derive(Clone)]
pub struct Tokenizer(tokenizers::Tokenizer);

fn err(source: &str, detail: String) -> KilnError {
    KilnError::File { op: "tokenizer", path: source.to_string(), detail }
}

impl Tokenizer {
    /// The tokenizer of model folder `dir`: its `tokenizer.json`, else its
    /// `vocab.json` with `merges.txt`.
    pub fn from_folder(dir: &Path) -> Result<Tokenizer> {
        Tokenizer::load(&Folder::dir(dir))
    }

    /// [`Tokenizer::from_folder`] of a folder on disk or in memory.
    pub fn load(folder: &Folder) -> Result<Tokenizer> {
        let read = |name: &str| folder.read_text("tokenizer", name);
        if folder.has("tokenizer.json") {
            return Tokenizer::from_json(
                &read("tokenizer.json")?,
                &folder.path("tokenizer.json").display().to_string(),
            );
        }
        Tokenizer::from_vocab_and_merges(
            &read("vocab.json")?,
            &read("merges.txt")?,
            &folder.path("").display().to_string(),
        )
    }

    /// A `tokenizer.json`'s text; `source` names it in errors.
    pub fn from_json(json: &str, source: &str) -> Result<Tokenizer> {
        json.parse().map(Tokenizer).map_err(|e| err(source, format!("not a tokenizer.json: {e}")))
    }

    /// GPT-2's byte-level BPE from `vocab.json` and `merges.txt` texts.
    pub fn from_vocab_and_merges(vocab: &str, merges: &str, source: &str) -> Result<Tokenizer> {
        let vocab: HashMap<String, u32> =
            serde_json::from_str(vocab).map_err(|e| err(source, format!("vocab.json: {e}")))?;
        let merges = merges
            .lines()
            .filter(|l| !l.starts_with("#version") && !l.trim().is_empty())
            .map(|l| match l.split_once(' ') {
                Some((a, b)) => Ok((a.to_string(), b.to_string())),
                None => Err(err(source, format!("merges.txt: `{l}` is not a pair"))),
            })
            .collect::<Result<Vec<_>>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab.into_iter().collect::<tokenizers::models::bpe::Vocab>(), merges)
            .build()
            .map_err(|e| err(source, e.to_string()))?;
        let mut tokenizer = tokenizers::Tokenizer::new(bpe);
        tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        tokenizer.with_decoder(Some(ByteLevel::default()));
        Ok(Tokenizer(tokenizer))
    }

    /// The ids of `text` (no special tokens added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self.0.encode(text, false).map_err(|e| err("<tokenizer>", format!("encoding {text:?}: {e}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.0.decode(ids, false).map_err(|e| err("<tokenizer>", format!("decoding {} ids: {e}", ids.len())))
    }

    /// Tokens in the vocabulary, special ones included.
    pub fn vocab_size(&self) -> usize {
        self.0.get_vocab_size(true)
    }
}
