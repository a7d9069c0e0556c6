//! Integer weight formats: a weight matrix `[n, k]` (one row per output
//! channel) stored as signed `bits`-bit integers packed little-endian into
//! u32 words along k, with one scale per `group` consecutive k of a row
//! (the last group of a row may be partial). Scales may be any float
//! dtype; kiln's `quantize` makes f16 (two bytes per group, as common
//! formats store them). A weight is `scale · q`, `q` in `[-(2^(bits-1) - 1), 2^(bits-1) - 1]`
//! (symmetric: the most negative code is never written).

use crate::error::{KilnError, Result};
use std::fmt;

/// Bits per weight and the k span of one scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantFormat {
    /// 8 or 4.
    pub bits: u32,
    /// k values per scale; `None`: one scale per output channel (all of k).
    pub group: Option<usize>,
}

impl QuantFormat {
    /// int8 with one scale per output channel.
    pub const INT8: QuantFormat = QuantFormat { bits: 8, group: None };

    /// int4, eight per u32, one scale per `group` k values.
    pub fn int4(group: usize) -> QuantFormat {
        QuantFormat { bits: 4, group: Some(group) }
    }

    /// Values per u32 word (0 for no bits or more than 32, widths that
    /// [`QuantFormat::check_bits`] refuses).
    pub fn per_word(self) -> usize {
        32usize.checked_div(self.bits as usize).unwrap_or(0)
    }

    /// The largest code magnitude (127 or 7).
    pub fn max_code(self) -> i32 {
        (1 << (self.bits - 1)) - 1
    }

    /// Whether a row of `k` weights fills whole words.
    pub fn packs(self, k: usize) -> bool {
        k > 0 && k.is_multiple_of(self.per_word())
    }

    /// The k values one scale covers in a row of `k`.
    pub fn group_len(self, k: usize) -> usize {
        self.group.unwrap_or(k)
    }

    /// Scales per row of `k`: the last group may be partial.
    pub fn groups(self, k: usize) -> usize {
        k.div_ceil(self.group_len(k).max(1))
    }

    /// Refuses a width kiln does not pack (the fields are public).
    pub fn check_bits(self, op: &'static str) -> Result<()> {
        if self.bits != 8 && self.bits != 4 {
            return Err(KilnError::Invalid { op, detail: format!("{} bits per weight; kiln packs 8 or 4", self.bits) });
        }
        Ok(())
    }

    /// `[n, k / per_word]` u32 words and `[n, ⌈k / group⌉]` scales,
    /// checked: k splits into whole words, and a group into whole words (so
    /// a word never straddles two scales).
    pub fn shapes(self, op: &'static str, n: usize, k: usize) -> Result<([usize; 2], [usize; 2])> {
        let bad = |detail: String| Err(KilnError::Shape { op, detail });
        self.check_bits(op)?;
        let (per_word, group) = (self.per_word(), self.group_len(k));
        if !self.packs(k) {
            return bad(format!("k = {k} is not a positive multiple of {per_word} ({self} packs {per_word} per word)"));
        }
        if group == 0 || !group.is_multiple_of(per_word) {
            return bad(format!("{self}: a group of {group} is not a whole number of words of {per_word}"));
        }
        Ok(([n, k / per_word], [n, self.groups(k)]))
    }

    /// Checks that `codes` and `scales` hold a weight `[n, k]` in this
    /// format ([`QuantFormat::shapes`]); the error names `x`, the product's
    /// left side, where there is one.
    pub fn check_weight(
        self,
        op: &'static str,
        (n, k): (usize, usize),
        (codes, scales): (&[usize], &[usize]),
        x: Option<&[usize]>,
    ) -> Result<()> {
        let (want_codes, want_scales) = self.shapes(op, n, k)?;
        if codes == want_codes && scales == want_scales {
            return Ok(());
        }
        let x = x.map(|x| format!("x {x:?} in ")).unwrap_or_default();
        Err(KilnError::Shape {
            op,
            detail: format!(
                "{x}{self} needs codes {want_codes:?} and scales {want_scales:?}, got {codes:?} and {scales:?}"
            ),
        })
    }

    /// Code `j` (0-based along k) of a word, sign-extended.
    pub fn code(self, word: u32, j: usize) -> i32 {
        let b = self.bits;
        ((word << (32 - b * (j as u32 + 1))) as i32) >> (32 - b)
    }

    /// `codes` (each within ±`max_code`) packed into one word, first code in
    /// the low bits.
    pub fn pack(self, codes: &[i32]) -> u32 {
        let mask = (1u32 << self.bits) - 1;
        codes.iter().enumerate().fold(0, |w, (j, &c)| w | ((c as u32 & mask) << (self.bits * j as u32)))
    }
}

impl QuantFormat {
    /// A short name that [`QuantFormat::from_spec`] reads back: `int8`
    /// (one scale per output channel) or `int4/32` (groups of 32).
    pub fn spec(self) -> String {
        match self.group {
            None => format!("int{}", self.bits),
            Some(g) => format!("int{}/{g}", self.bits),
        }
    }

    /// The format [`QuantFormat::spec`] names; `None` for anything else
    /// (bits other than 8 or 4, a group of 0).
    pub fn from_spec(spec: &str) -> Option<QuantFormat> {
        let (bits, group) = match spec.split_once('/') {
            Some((bits, g)) => (bits, Some(g.parse::<usize>().ok().filter(|&g| g > 0)?)),
            None => (spec, None),
        };
        let bits = match bits {
            "int8" => 8,
            "int4" => 4,
            _ => return None,
        };
        Some(QuantFormat { bits, group })
    }
}

impl fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.group {
            None => write!(f, "int{} per channel", self.bits),
            Some(g) => write!(f, "int{} in groups of {g}", self.bits),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_a_word_with_their_signs() {
        for format in [QuantFormat::INT8, QuantFormat::int4(32)] {
            let m = format.max_code();
            let codes: Vec<i32> =
                (0..format.per_word() as i32).map(|j| if j % 2 == 0 { -m + j } else { m - j }).collect();
            let word = format.pack(&codes);
            let back: Vec<i32> = (0..codes.len()).map(|j| format.code(word, j)).collect();
            assert_eq!(back, codes, "{format}");
        }
    }

    #[test]
    fn specs_read_back() {
        for format in
            [QuantFormat::INT8, QuantFormat::int4(32), QuantFormat::int4(128), QuantFormat { bits: 4, group: None }]
        {
            assert_eq!(QuantFormat::from_spec(&format.spec()), Some(format), "{format}");
        }
        for bad in ["int2", "int4/0", "int4/x", "int8/", "float"] {
            assert_eq!(QuantFormat::from_spec(bad), None, "{bad}");
        }
    }

    #[test]
    fn shapes_reject_partial_words_and_groups_of_partial_words() {
        assert_eq!(QuantFormat::INT8.shapes("t", 3, 8).unwrap(), ([3, 2], [3, 1]));
        assert_eq!(QuantFormat::int4(32).shapes("t", 3, 64).unwrap(), ([3, 8], [3, 2]));
        assert_eq!(QuantFormat::int4(32).shapes("t", 3, 80).unwrap(), ([3, 10], [3, 3]), "a partial last group");
        assert!(QuantFormat::INT8.shapes("t", 3, 6).is_err());
        assert!(QuantFormat::int4(32).shapes("t", 3, 36).is_err());
        assert!(QuantFormat::int4(12).shapes("t", 3, 24).is_err());
        assert!(QuantFormat { bits: 2, group: None }.shapes("t", 3, 32).is_err());
    }
}
