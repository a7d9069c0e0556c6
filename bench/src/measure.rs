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
    let mut t: Vec<f64> = Vec::with_capacity(reps.0);
    for _ in 0..reps.0.max(1) {
        let start = Instant::now();
        run()?;
        t.push(start.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    Ok(Timing { median: t[t.len() / 2], min: t[0], max: t[t.len() - 1] })
}

/// One figure: a rate or a duration, with its spread in the same unit.
#[derive(Debug, Clone)]
pub struct Record {
    pub bench: String,
    pub adapter: String,
    pub median: f64,
    pub unit: &'static str,
    /// (low, high) in `unit`.
    pub spread: (f64, f64),
    pub ceiling_fraction: Option<f64>,
    /// Free-form detail, e.g. the matmul config the tuner chose.
    pub note: String,
}

impl Record {
    /// A rate of `work` units per second from a timing (a faster run is a
    /// higher rate, so the spread flips).
    pub fn rate(bench: &str, adapter: &str, t: Timing, work: f64, unit: &'static str) -> Record {
        Record {
            bench: bench.into(),
            adapter: adapter.into(),
            median: work / t.median,
            unit,
            spread: (work / t.max, work / t.min),
            ceiling_fraction: None,
            note: String::new(),
        }
    }

    /// A duration in `unit` (`scale` units per second).
    pub fn duration(bench: &str, adapter: &str, t: Timing, scale: f64, unit: &'static str) -> Record {
        Record {
            bench: bench.into(),
            adapter: adapter.into(),
            median: t.median * scale,
            unit,
            spread: (t.min * scale, t.max * scale),
            ceiling_fraction: None,
            note: String::new(),
        }
    }

    pub fn of(mut self, ceiling: f64) -> Record {
        self.ceiling_fraction = Some(self.median / ceiling);
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Record {
        self.note = note.into();
        self
    }

    pub fn json(&self) -> String {
        let num = |v: f64| if v.is_finite() { format!("{v:.6}") } else { "null".into() };
        let frac = self.ceiling_fraction.map_or("null".into(), num);
        format!(
            "{{\"bench\":{},\"adapter\":{},\"median\":{},\"unit\":{},\"spread\":[{},{}],\"ceiling_fraction\":{},\"note\":{}}}",
            quote(&self.bench),
            quote(&self.adapter),
            num(self.median),
            quote(self.unit),
            num(self.spread.0),
            num(self.spread.1),
            frac,
            quote(&self.note)
        )
    }

    pub fn line(&self) -> String {
        let frac = self.ceiling_fraction.map_or(String::new(), |f| format!("  ({f:.2} of ceiling)"));
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
