//! Timing: each figure is the median of several repetitions after a
//! warm-up, with the spread (min and max) beside it, and one JSON line.

use std::time::Instant;

/// How many timed repetitions (after one warm-up) each figure takes.
#[derive(Debug, Clone, Copy)]
pub struct Reps(pub usize);

/// Seconds per repetition: median, min, max.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

pub fn time<E>(reps: Reps, mut run: impl FnMut() -> Result<(), E>) -> Result<Timing, E> {
    run()?;
    let t = (0..reps.0.max(1)).map(|_| seconds(&mut run)).collect::<Result<_, E>>()?;
    Ok(Timing::of(t))
}

fn seconds<E>(run: &mut impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    let start = Instant::now();
    run()?;
    Ok(start.elapsed().as_secs_f64())
}

impl Timing {
    pub fn of(mut t: Vec<f64>) -> Timing {
        t.sort_by(f64::total_cmp);
        Timing { median: t[t.len() / 2], min: t[0], max: t[t.len() - 1] }
    }
}

/// A figure timed in pairs with its ceiling's microkernel.
#[derive(Debug, Clone, Copy)]
pub struct Paired {
    /// The figure's repetitions.
    pub timing: Timing,
    /// The ceiling's repetitions, each next to one of the figure's.
    pub ceiling: Timing,
    /// The median over the pairs of the ceiling's time over the figure's.
    time_ratio: f64,
}

impl Paired {
    /// The figure's rate over the ceiling's, when the figure does `work` in
    /// a repetition and the ceiling `ceiling_work` (in the same unit).
    pub fn fraction(&self, work: f64, ceiling_work: f64) -> f64 {
        self.time_ratio * work / ceiling_work
    }
}

/// Time `run` and `ceiling` in pairs, back to back and in alternating
/// order, after a warm-up of each. This machine's speed changes by up to
/// 2× within a run; a ceiling timed just before a figure's repetitions
/// could catch the other speed, a pair rarely does.
pub fn time_paired<E>(
    reps: Reps,
    mut ceiling: impl FnMut() -> Result<(), E>,
    mut run: impl FnMut() -> Result<(), E>,
) -> Result<Paired, E> {
    ceiling()?;
    run()?;
    let (mut c, mut r) = (Vec::new(), Vec::new());
    for i in 0..reps.0.max(1) {
        if i % 2 == 0 {
            c.push(seconds(&mut ceiling)?);
            r.push(seconds(&mut run)?);
        } else {
            r.push(seconds(&mut run)?);
            c.push(seconds(&mut ceiling)?);
        }
    }
    let ratios = c.iter().zip(&r).map(|(c, r)| c / r).collect();
    Ok(Paired { timing: Timing::of(r), ceiling: Timing::of(c), time_ratio: Timing::of(ratios).median })
}

/// One figure: a rate or a duration, with its spread in the same unit.
#[derive(Debug, Clone)]
pub struct Record {
    pub bench: String,
    pub adapter: String,
    pub median: f64,
    pub unit: String,
    /// (low, high) in `unit`.
    pub spread: (f64, f64),
    pub ceiling_fraction: Option<f64>,
    /// Free-form detail, e.g. the matmul config the tuner chose.
    pub note: String,
    /// Whether the generated page lists the note (what the figure alone
    /// does not say: kernels per step, a weight product's GFLOP/s); every
    /// note goes to the JSON lines.
    pub note_on_page: bool,
}

impl Record {
    /// A rate of `work` units per second from a timing (a faster run is a
    /// higher rate, so the spread flips).
    pub fn rate(bench: &str, adapter: &str, t: Timing, work: f64, unit: &'static str) -> Record {
        Record {
            bench: bench.into(),
            adapter: adapter.into(),
            median: work / t.median,
            unit: unit.into(),
            spread: (work / t.max, work / t.min),
            ceiling_fraction: None,
            note: String::new(),
            note_on_page: false,
        }
    }

    /// A duration in `unit` (`scale` units per second).
    pub fn duration(bench: &str, adapter: &str, t: Timing, scale: f64, unit: &'static str) -> Record {
        Record {
            bench: bench.into(),
            adapter: adapter.into(),
            median: t.median * scale,
            unit: unit.into(),
            spread: (t.min * scale, t.max * scale),
            ceiling_fraction: None,
            note: String::new(),
            note_on_page: false,
        }
    }

    pub fn fraction(mut self, fraction: f64) -> Record {
        self.ceiling_fraction = Some(fraction);
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Record {
        self.note = note.into();
        self
    }

    /// The note, listed on the generated page too.
    pub fn page_note(mut self, note: impl Into<String>) -> Record {
        self.note_on_page = true;
        self.note(note)
    }

    pub fn json(&self) -> String {
        let num = |v: f64| if v.is_finite() { format!("{v:.6}") } else { "null".into() };
        let frac = self.ceiling_fraction.map_or("null".into(), num);
        format!(
            "{{\"bench\":{},\"adapter\":{},\"median\":{},\"unit\":{},\"spread\":[{},{}],\"ceiling_fraction\":{},\"note\":{},\"note_on_page\":{}}}",
            quote(&self.bench),
            quote(&self.adapter),
            num(self.median),
            quote(&self.unit),
            num(self.spread.0),
            num(self.spread.1),
            frac,
            quote(&self.note),
            self.note_on_page
        )
    }

    /// A record from one of [`Record::json`]'s lines (or another tool's in
    /// the same form, such as scripts/torch-yardstick.py's).
    pub fn from_json(line: &str) -> Result<Record, String> {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON ({e}): {line}"))?;
        let text = |key: &str| v[key].as_str().map(String::from).ok_or_else(|| format!("no string `{key}` in {line}"));
        let number = |x: &serde_json::Value| x.as_f64().ok_or_else(|| format!("a figure of {line} is not a number"));
        let median = number(&v["median"])?;
        let spread = match v["spread"].as_array().map(Vec::as_slice) {
            Some([low, high]) => (number(low)?, number(high)?),
            _ => (median, median),
        };
        Ok(Record {
            bench: text("bench")?,
            adapter: text("adapter")?,
            median,
            unit: text("unit")?,
            spread,
            ceiling_fraction: v["ceiling_fraction"].as_f64(),
            note: v["note"].as_str().unwrap_or_default().into(),
            note_on_page: v["note_on_page"].as_bool().unwrap_or(false),
        })
    }

    pub fn line(&self) -> String {
        let frac = self.ceiling_fraction.map_or(String::new(), |f| format!("  ({f:.3} of ceiling)"));
        let note = if self.note.is_empty() { String::new() } else { format!("  [{}]", self.note) };
        format!(
            "  {:<28} {:>10.2} {:<7} ({:.2}–{:.2}){frac}{note}",
            self.bench, self.median, self.unit, self.spread.0, self.spread.1
        )
    }
}

/// A JSON string literal (serde_json escapes it).
pub fn quote(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn pairs_alternate_which_goes_first() {
        let calls = RefCell::new(String::new());
        let log = |c: char| {
            calls.borrow_mut().push(c);
            Ok::<(), ()>(())
        };
        let p = time_paired(Reps(4), || log('c'), || log('r')).unwrap();
        // A warm-up of each, then ceiling-first and figure-first in turn.
        assert_eq!(*calls.borrow(), ["cr", "cr", "rc", "cr", "rc"].concat());
        assert!(p.timing.min <= p.timing.median && p.timing.median <= p.timing.max);
        assert_eq!(p.fraction(2.0, 1.0), 2.0 * p.fraction(1.0, 1.0));
    }

    #[test]
    fn records_come_back_from_their_json_lines() {
        let t = Timing { median: 0.002, min: 0.001, max: 0.004 };
        let r = Record::rate("softmax \"rows\"", "GPU (CUDA)", t, 8.0, "GB/s").fraction(0.5).page_note("3 kernels");
        let back = Record::from_json(&r.json()).unwrap();
        assert_eq!(back.json(), r.json());
        let torch = r#"{"bench": "mlp train step (batch 64)", "adapter": "PyTorch", "median": 0.5, "unit": "ms"}"#;
        let t = Record::from_json(torch).unwrap();
        assert_eq!((t.spread, t.ceiling_fraction, t.note.as_str()), ((0.5, 0.5), None, ""));
        let e = Record::from_json(r#"{"bench": "x", "adapter": "a", "unit": "ms"}"#).unwrap_err();
        assert!(e.contains("is not a number"), "{e}");
    }

    #[test]
    fn a_failing_figure_stops_the_pairs() {
        let mut runs = 0;
        let failing = || {
            runs += 1;
            if runs == 2 { Err("second run failed") } else { Ok(()) }
        };
        assert_eq!(time_paired(Reps(5), || Ok(()), failing).unwrap_err(), "second run failed");
        assert_eq!(runs, 2);
    }
}
