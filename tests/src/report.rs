//! Running the whole suite and writing docs/CONFORMANCE.md.

use crate::batch_check::{self, BatchRow};
use crate::browser::Browser;
use crate::grad_check::{self, GradRow};
use crate::{Case, Outcome, Tol, compare};
use crate::{batch_grad_check, vmap_checks};
use kiln::core::interp::HostArray;
use kiln::prelude::*;

pub struct Run {
    pub validation: String,
    pub adapters: Vec<(String, kiln::DeviceInfo)>,
    pub skipped: Vec<String>,
    /// (op, case detail, one outcome per adapter)
    pub rows: Vec<(&'static str, String, Vec<Outcome>)>,
    /// Gradient checks: finite differences on the reference, then each adapter.
    pub grads: Vec<GradRow>,
    /// Every case under vmap: the CPU reference, then each adapter.
    pub batching: Vec<BatchRow>,
    /// Every gradient case under vmap (per-example gradients): the CPU
    /// reference, then each adapter.
    pub batched_grads: Vec<BatchRow>,
    /// `vmap` against a loop and composed with the other transforms: the
    /// CPU reference, then each adapter.
    pub compositions: Vec<BatchRow>,
    /// Validation-layer messages, by adapter.
    pub messages: Vec<(String, Vec<String>)>,
    /// Every WGSL source compiled on any adapter.
    pub sources: Vec<String>,
    /// The sources each adapter compiled, by label.
    pub sources_by_adapter: Vec<(String, Vec<String>)>,
}

impl Run {
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (op, detail, outcomes) in &self.rows {
            for ((name, _), o) in self.adapters.iter().zip(outcomes) {
                if let Some(f) = &o.failure {
                    out.push(format!("{op} [{detail}] on {name}: {f}"));
                }
            }
        }
        out.extend(grad_check::failures(&self.grads, &self.adapter_labels()));
        out.extend(batch_check::failures("vmap", &self.batching, &self.batching_columns()));
        out.extend(batch_check::failures("vmap(grad)", &self.batched_grads, &self.batching_columns()));
        out.extend(batch_check::failures("vmap composition", &self.compositions, &self.batching_columns()));
        out
    }

    /// The batching check's columns: the CPU reference, then the adapters.
    pub fn batching_columns(&self) -> Vec<String> {
        std::iter::once("CPU reference".to_string()).chain(self.adapter_labels()).collect()
    }

    pub fn adapter_labels(&self) -> Vec<String> {
        self.adapters.iter().map(|(l, _)| l.clone()).collect()
    }

    /// (passed, failed) over the gradient checks.
    pub fn grad_counts(&self) -> (usize, usize) {
        let all: Vec<&Outcome> = self.grads.iter().flat_map(|r| r.fd.iter().chain(&r.outcomes)).collect();
        let passed = all.iter().filter(|o| o.passed).count();
        (passed, all.len() - passed)
    }

    pub fn counts(&self) -> (usize, usize) {
        let all: Vec<&Outcome> = self.rows.iter().flat_map(|r| &r.2).collect();
        let passed = all.iter().filter(|o| o.passed).count();
        (passed, all.len() - passed)
    }
}

/// The case's value on the CPU reference.
pub async fn reference(case: &Case, cpu: &Device) -> Result<HostArray> {
    (case.build)(cpu)?.to_host().await
}

/// The case on `device` against the reference's value `want`.
pub async fn check(case: &Case, want: &Result<HostArray>, device: &Device) -> Outcome {
    let fail = |msg: String| Outcome { max_abs_err: f64::NAN, passed: false, failure: Some(msg) };
    let want = match want {
        Ok(w) => w,
        Err(e) => return fail(format!("reference failed: {e}")),
    };
    let got = match (case.build)(device) {
        Ok(t) => t.to_host().await,
        Err(e) => Err(e),
    };
    match got {
        Err(e) => fail(e.to_string()),
        Ok(g) if g.shape != want.shape || g.dtype != want.dtype => {
            fail(format!("got {} {:?}, want {} {:?}", g.dtype, g.shape, want.dtype, want.shape))
        }
        Ok(g) => compare(&g.data, &want.data, case.tol),
    }
}

/// Run every case (whose op contains `filter`, if given) on every adapter,
/// the adapters at once.
#[cfg(not(target_arch = "wasm32"))]
pub async fn run(filter: Option<&str>) -> Run {
    let validation = crate::validation::setup();
    let (found, skipped) = crate::adapters::discover().await;
    // Default matmul configs, not timed choices, so that the kernels are
    // the same in every run (the golden check); every config has its own
    // test (`matmul_family`).
    for f in &found {
        f.device.set_matmul_tuning(Some(false));
    }
    let cpu = Device::cpu();
    let cases: Vec<Case> =
        crate::cases::all().into_iter().filter(|c| filter.is_none_or(|f| c.op.contains(f))).collect();
    let mut wants = Vec::with_capacity(cases.len());
    for case in &cases {
        wants.push(reference(case, &cpu).await);
    }
    let devices: Vec<&Device> = found.iter().map(|f| &f.device).collect();
    let columns = crate::adapters::at_once(&devices, |device| {
        cases.iter().zip(&wants).map(|(case, want)| pollster::block_on(check(case, want, device))).collect::<Vec<_>>()
    });
    let rows =
        cases.iter().enumerate().map(|(i, c)| (c.op, c.detail.clone(), crate::adapters::row(&columns, i))).collect();
    let grads = grad_check::run(&found, filter).await;
    let sources_by_adapter: Vec<(String, Vec<String>)> =
        found.iter().map(|f| (f.label.clone(), f.device.compiled_sources())).collect();
    let mut sources: Vec<String> = sources_by_adapter.iter().flat_map(|(_, s)| s.iter().cloned()).collect();
    sources.sort();
    sources.dedup();
    // After the kernels are collected: the golden sets stay those of the
    // cases and gradients.
    let batching = batch_check::run(&found, filter).await;
    let batched_grads = batch_grad_check::run(&found, filter).await;
    let compositions = match filter {
        None => vmap_checks::run(&found),
        Some(_) => Vec::new(),
    };
    let messages = crate::validation::take_messages();
    Run {
        validation,
        adapters: found.iter().map(|f| (f.label.clone(), f.device.info())).collect(),
        skipped,
        rows,
        grads,
        batching,
        batched_grads,
        compositions,
        messages: if messages.is_empty() { vec![] } else { vec![("any adapter".into(), messages)] },
        sources,
        sources_by_adapter,
    }
}

/// One op's cases as one cell: passed if all passed, the largest error.
pub(crate) fn worst_of(outcomes: &[&Outcome]) -> Outcome {
    let passed = outcomes.iter().all(|o| o.passed);
    let worst = outcomes.iter().map(|o| o.max_abs_err).fold(0.0f64, |m, e| if e.is_nan() { m } else { m.max(e) });
    Outcome { max_abs_err: worst, passed, failure: None }
}

pub(crate) fn cell(o: &Outcome) -> String {
    match (o.passed, o.max_abs_err.is_nan()) {
        (true, _) => format!("✓ {:.1e}", o.max_abs_err),
        (false, true) => "✗ error".into(),
        (false, false) => format!("✗ {:.1e}", o.max_abs_err),
    }
}

/// The tolerances every case is held to, from the constants the cases use.
fn tolerances() -> String {
    let t = |tol: Tol| format!("{:e} + {:e} · |reference|", tol.abs, tol.rel);
    format!(
        "\nTolerances, each element within abs + rel · |reference|: results stored as f16 {}, as bf16 {}; \
         f32 arithmetic {}, transcendentals {}; integers and bool exact. Ops that round many times (long \
         sums, matmuls) loosen these case by case (`tests/src/cases.rs`). f16 is computed in f16 on \
         adapters with `shader-f16` and in f32 elsewhere (the f16 column above), within the same \
         tolerances.\n",
        t(Tol::F16),
        t(Tol::BF16),
        t(Tol::F32),
        t(Tol::MATH)
    )
}

/// The Markdown of docs/CONFORMANCE.md, with a browser column when the web
/// e2e test's results are given.
pub fn markdown(run: &Run, browser: Option<&Browser>, command: &str) -> String {
    let mut s = String::from("# Conformance\n\n");
    s += &format!(
        "Every op on every adapter found, against kiln's CPU reference interpreter (f64). Each cell shows \
         pass (✓) or fail (✗) and the largest absolute difference from the reference over the op's \
         cases. Regenerate with `{command}`.\n\n"
    );
    s += &format!(
        "{}.\n\n## Adapters\n\n| adapter | backend | type | driver | f16 |\n|---|---|---|---|---|\n",
        run.validation
    );
    for (label, info) in &run.adapters {
        let (backend, kind, path) = (&info.backend, &info.device_type, info.f16_path());
        s += &format!("| {label} | {backend} | {kind} | {} {} | {path} |\n", info.driver, info.driver_info);
    }
    for skip in &run.skipped {
        s += &format!("\nSkipped: {skip}.\n");
    }
    let (passed, failed) = run.counts();
    s += &format!("\n{passed} passed, {failed} failed ({} cases × {} adapters).\n", run.rows.len(), run.adapters.len());
    s += &tolerances();
    if let Some(b) = browser {
        let (bp, bf) = b.counts();
        s += &format!(
            "\nbrowser (WebGPU): {bp} passed, {bf} failed over the op and gradient cases on {} in headless \
             Chromium, against the CPU reference compiled to wasm; from docs/conformance-browser.tsv, which \
             `bash scripts/test` (the web e2e test) writes.\n",
            b.label
        );
    }
    let header = |first: &str| {
        let mut h = format!("| {first} |");
        let mut line = String::from("|---|");
        if first == "op" {
            h += " cases |";
            line += "---|";
        }
        for (label, _) in &run.adapters {
            h += &format!(" {label} |");
            line += "---|";
        }
        if browser.is_some() {
            h += " browser (WebGPU) |";
            line += "---|";
        }
        format!("{h}\n{line}\n")
    };
    s += "\n## By op\n\n";
    s += &header("op");
    // One row per op, in order of first appearance: an op's cases need not
    // be adjacent (the dtype cases of `neg`, `abs` and `relu` come later).
    let mut ops: Vec<&str> = Vec::new();
    for (op, _, _) in &run.rows {
        if !ops.contains(op) {
            ops.push(op);
        }
    }
    for op in ops {
        let rows: Vec<_> = run.rows.iter().filter(|r| r.0 == op).collect();
        s += &format!("| {op} | {} |", rows.len());
        for a in 0..run.adapters.len() {
            let outcomes: Vec<&Outcome> = rows.iter().map(|r| &r.2[a]).collect();
            s += &format!(" {} |", cell(&worst_of(&outcomes)));
        }
        if let Some(b) = browser {
            let got: Option<Vec<&Outcome>> = rows.iter().map(|r| b.get(r.0, &r.1)).collect();
            s += &match got {
                None => " – |".to_string(),
                Some(got) => format!(" {} |", cell(&worst_of(&got))),
            };
        }
        s += "\n";
    }
    s += "\n## Every case\n\n";
    s += &header("case");
    for (op, detail, outcomes) in &run.rows {
        s += &format!("| {op}: {detail} |");
        for o in outcomes {
            s += &format!(" {} |", cell(o));
        }
        if let Some(b) = browser {
            s += &b.get(op, detail).map_or(" – |".to_string(), |o| format!(" {} |", cell(o)));
        }
        s += "\n";
    }
    s += &grad_check::markdown(&run.grads, &run.adapter_labels(), browser);
    s += &batch_check::markdown(&run.batching, &run.batching_columns(), browser);
    s += &batch_grad_check::markdown(&run.batched_grads, &run.batching_columns(), browser);
    s += &vmap_checks::markdown(&run.compositions, &run.batching_columns(), browser);
    let failures = run.failures();
    if !failures.is_empty() {
        s += "\n## Failures\n\n";
        for f in failures {
            s += &format!("- {}\n", f.replace('|', "\\|"));
        }
    }
    s
}
