//! A text as character ids: its vocabulary (the distinct characters,
//! sorted), and a training split and a validation split (its last part).

use kiln::KilnError;
use kiln::prelude::*;
use std::path::Path;

/// The characters a model reads and writes, id = position.
#[derive(Clone, Debug, PartialEq)]
pub struct Vocab {
    chars: Vec<char>,
}

impl Vocab {
    /// The distinct characters of `text`, sorted.
    pub fn of(text: &str) -> Vocab {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        Vocab { chars }
    }

    /// A vocabulary from its characters in id order (as `as_string` gives).
    pub fn from_chars(chars: &str) -> Result<Vocab> {
        let vocab = Vocab { chars: chars.chars().collect() };
        if vocab.chars.is_empty() || Vocab::of(chars) != vocab {
            return Err(KilnError::Invalid {
                op: "Vocab",
                detail: format!("{chars:?} is not a list of distinct sorted characters"),
            });
        }
        Ok(vocab)
    }

    /// Characters in the vocabulary.
    pub fn len(&self) -> usize {
        self.chars.len()
    }

    /// Whether it has no characters.
    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    /// The characters in id order, as one string.
    pub fn as_string(&self) -> String {
        self.chars.iter().collect()
    }

    /// Ids of `text`; a character outside the vocabulary is an error naming it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        text.chars()
            .enumerate()
            .map(|(at, c)| {
                self.chars.binary_search(&c).map(|i| i as u32).map_err(|_| KilnError::Invalid {
                    op: "Vocab::encode",
                    detail: format!("character {c:?} at {at} is not in the vocabulary {:?}", self.as_string()),
                })
            })
            .collect()
    }

    /// The text of `ids` (ids past the vocabulary are an error).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        ids.iter()
            .map(|&i| {
                self.chars.get(i as usize).copied().ok_or_else(|| KilnError::Invalid {
                    op: "Vocab::decode",
                    detail: format!("id {i} is past the vocabulary of {}", self.len()),
                })
            })
            .collect()
    }
}

/// A text split for training: `train` then `valid` (the last
/// `valid_fraction` of the characters).
pub struct Corpus {
    /// The text's characters.
    pub vocab: Vocab,
    /// Ids of the training part (the start of the text).
    pub train: Vec<u32>,
    /// Ids of the validation part (the end of the text).
    pub valid: Vec<u32>,
}

impl Corpus {
    /// `text` with its last `valid_fraction` (in [0, 1)) kept for validation;
    /// errors on a text under 2 characters.
    pub fn from_text(text: &str, valid_fraction: f64) -> Result<Corpus> {
        let vocab = Vocab::of(text);
        let ids = vocab.encode(text)?;
        if !(0.0..1.0).contains(&valid_fraction) || ids.len() < 2 {
            return Err(KilnError::Invalid {
                op: "Corpus",
                detail: format!("a text of {} characters cannot keep {valid_fraction} for validation", ids.len()),
            });
        }
        let split = ids.len() - (ids.len() as f64 * valid_fraction) as usize;
        Ok(Corpus { vocab, train: ids[..split].to_vec(), valid: ids[split..].to_vec() })
    }

    /// A UTF-8 text file, the last 10% for validation.
    pub fn load(path: impl AsRef<Path>) -> Result<Corpus> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| KilnError::Invalid {
            op: "Corpus::load",
            detail: format!("cannot read {}: {e}", path.display()),
        })?;
        Corpus::from_text(&text, 0.1)
    }
}
