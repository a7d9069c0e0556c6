//! The "browser (WebGPU)" column of docs/CONFORMANCE.md: the conformance
//! page's results, saved by the web end-to-end test (web/e2e) as
//! docs/conformance-browser.tsv: a line `adapter<TAB>label`, then one line
//! per case `op<TAB>detail<TAB>passed (0/1)<TAB>max abs err<TAB>failure`
//! (gradient cases have op `gradient: <op>`, batching checks `vmap: <op>`,
//! per-example gradient checks `vmap(grad): <op>`).

use crate::Outcome;
use std::collections::HashMap;

#[derive(Debug)]
pub struct Browser {
    pub label: String,
    cells: HashMap<(String, String), Outcome>,
}

impl Browser {
    pub fn parse(tsv: &str) -> Result<Browser, String> {
        let mut lines = tsv.lines();
        let label = match lines.next().and_then(|l| l.split_once('\t')) {
            Some(("adapter", label)) => label.to_string(),
            _ => return Err("the first line must be `adapter<TAB>label`".into()),
        };
        let mut cells = HashMap::new();
        for (i, line) in lines.enumerate().filter(|(_, l)| !l.is_empty()) {
            let f: Vec<&str> = line.split('\t').collect();
            let [op, detail, passed, err, failure] = f[..] else {
                return Err(format!("line {}: {} fields, want 5", i + 2, f.len()));
            };
            let max_abs_err =
                if err.is_empty() { f64::NAN } else { err.parse().map_err(|e| format!("line {}: {e}", i + 2))? };
            let outcome = Outcome {
                max_abs_err,
                passed: passed == "1",
                failure: (!failure.is_empty()).then(|| failure.to_string()),
            };
            cells.insert((op.to_string(), detail.to_string()), outcome);
        }
        Ok(Browser { label, cells })
    }

    pub fn get(&self, op: &str, detail: &str) -> Option<&Outcome> {
        self.cells.get(&(op.to_string(), detail.to_string()))
    }

    /// (passed, failed) over the op and gradient cases the browser ran
    /// (not the batching checks).
    pub fn counts(&self) -> (usize, usize) {
        self.counts_of(|op| !op.starts_with("vmap"))
    }

    /// (passed, failed) over the cases whose op `which` picks.
    pub fn counts_of(&self, which: impl Fn(&str) -> bool) -> (usize, usize) {
        let of: Vec<&Outcome> = self.cells.iter().filter(|((op, _), _)| which(op)).map(|(_, o)| o).collect();
        let passed = of.iter().filter(|o| o.passed).count();
        (passed, of.len() - passed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_e2e_file_and_rejects_a_bad_one() {
        let b = Browser::parse("adapter\tgoogle swiftshader\nadd\tf32 [7]\t1\t0\t\nexp\tf32 [3]\t0\t\tGPU error\n")
            .unwrap();
        assert_eq!(b.label, "google swiftshader");
        assert_eq!(b.counts(), (1, 1));
        assert!(b.get("add", "f32 [7]").unwrap().passed);
        assert_eq!(b.get("exp", "f32 [3]").unwrap().failure.as_deref(), Some("GPU error"));
        assert!(b.get("add", "f32 [8]").is_none());
        assert!(Browser::parse("add\tf32").is_err());
        assert!(Browser::parse("adapter\tx\nadd\tf32\t1\n").unwrap_err().contains("line 2: 3 fields"));
    }
}
