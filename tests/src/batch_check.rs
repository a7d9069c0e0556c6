//! The batching check: every conformance case under `vmap`. A case's graph
//! is replayed as a function of the realized inputs it reads; each input is
//! batched as two examples: itself, and a second drawn from its own key
//! (`resampled`: its elements picked at random with repeats, so within
//! every op's domain, yet with other sums, maxima and means), and
//! `vmap` of the replay must equal the two replays stacked, on the CPU
//! reference and on every adapter; then again with only the first input
//! batched and the others shared by both examples. Cases without inputs
//! (creation ops) have nothing to batch.

use crate::browser::Browser;
use crate::{Case, Outcome, Tol, compare};
use kiln::core::Prim;
use kiln::core::ir::Node;
use kiln::prelude::*;
use std::collections::HashMap;

pub struct BatchRow {
    pub op: &'static str,
    pub detail: String,
    /// The CPU reference, then each adapter; `None` without inputs.
    pub outcomes: Vec<Option<Outcome>>,
}

/// The realized nodes `out` is computed from, each once, in the order of
/// the arguments that first reach them (so a case's first input is its
/// first operand's: `x` of `x.matmul(w)`).
fn inputs_of(out: &Node) -> Vec<Node> {
    let mut found = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![out.clone()];
    while let Some(n) = stack.pop() {
        if !seen.insert(n.id()) {
            continue;
        }
        match n.realized_value() {
            Some(_) => found.push(n),
            None => stack.extend(n.inputs().into_iter().rev()),
        }
    }
    found
}

/// `out`'s graph rebuilt over `with` in place of `inputs`.
fn replay(out: &Node, inputs: &[Node], with: &[Node]) -> Result<Node> {
    let mut built: HashMap<u64, Node> = inputs.iter().zip(with).map(|(i, w)| (i.id(), w.clone())).collect();
    for n in Node::topo_unrealized(std::slice::from_ref(out)) {
        let args = n.inputs().iter().map(|i| built.get(&i.id()).cloned().unwrap_or_else(|| i.clone())).collect();
        built.insert(n.id(), Node::new(n.prim().clone(), args)?);
    }
    Ok(built.get(&out.id()).cloned().unwrap_or_else(|| out.clone()))
}

/// A second example for input `x`, drawn with its own `key`: each element
/// one of `x`'s, picked uniformly with repeats. Every value is one the case
/// accepts (a positive log input, an index in range), while its sums,
/// extremes and order differ from `x`'s, which a reversal or permutation
/// would keep.
pub(crate) fn resampled(x: &Node, key: u64, dev: &Device) -> Result<Node> {
    let n = x.shape().iter().product::<usize>();
    let mut rng = crate::rng::Rng::new(key);
    let picks: Vec<i32> = (0..n).map(|_| (rng.next_u64() % n.max(1) as u64) as i32).collect();
    let picks = Tensor::from_slice(dev, &picks, &[n])?;
    let flat = Node::new(Prim::Reshape { shape: vec![n] }, vec![x.clone()])?;
    let drawn = Node::new(Prim::Gather { axis: 0 }, vec![flat, picks.node().clone()])?;
    Node::new(Prim::Reshape { shape: x.shape().to_vec() }, vec![drawn])
}

/// The key of the second example of input `i`: one per input.
pub(crate) fn example_key(i: usize) -> u64 {
    0x5EED_0000 + i as u64
}

/// The case batched on `dev`: `vmap` of its replay against the replays
/// stacked (`None` for a case without inputs), first with every input
/// batched, then (for cases of several inputs) with only the first batched
/// and the others shared (`in_axes` `None`), the path a batching rule takes
/// for a weight every example uses. The two compute in different kernels,
/// so each may round as the case's tolerance allows against the
/// reference: twice that between them.
pub async fn check(case: &Case, dev: &Device) -> Option<Outcome> {
    let all = batched(case, dev, false).await?;
    if !all.passed {
        return Some(all);
    }
    Some(match batched(case, dev, true).await {
        Some(shared) => Outcome {
            max_abs_err: all.max_abs_err.max(shared.max_abs_err),
            passed: shared.passed,
            failure: shared.failure.map(|f| format!("with only the first input batched: {f}")),
        },
        None => all,
    })
}

/// The case built afresh (realizing a graph drops what it was built
/// from, so each variant replays a new one), then [`versus_stacked`] with
/// every input batched, or with only the first when `share_rest` (`None`
/// then for a case of one input, and for any case without inputs).
async fn batched(case: &Case, dev: &Device, share_rest: bool) -> Option<Outcome> {
    let out = match (case.build)(dev) {
        Ok(t) => t,
        Err(e) => return Some(Outcome::failed(e.to_string())),
    };
    let inputs = inputs_of(out.node());
    let batched = match (share_rest, inputs.len()) {
        (_, 0) | (true, 1) => return None,
        (true, _) => 1,
        (false, all) => all,
    };
    Some(versus_stacked(&out, &inputs, batched, dev, case.tol.doubled()).await)
}

/// `vmap` of `out`'s replay with its first `batched` inputs batched (each
/// as itself and an example drawn from its own key) and the rest shared,
/// against the two replays stacked.
async fn versus_stacked(out: &Tensor, inputs: &[Node], batched: usize, dev: &Device, tol: Tol) -> Outcome {
    let pair = || -> Result<(Tensor, Tensor)> {
        let tensor = |n: Node| Tensor::from_node(n, dev.clone());
        let mut second = inputs.to_vec();
        for (i, x) in second[..batched].iter_mut().enumerate() {
            *x = resampled(x, example_key(i), dev)?;
        }
        let args = inputs[..batched]
            .iter()
            .zip(&second)
            .map(|(a, b)| Tensor::stack(&[&tensor(a.clone()), &tensor(b.clone())], 0))
            .chain(inputs[batched..].iter().map(|x| Ok(tensor(x.clone()))))
            .collect::<Result<Vec<_>>>()?;
        let f = |xs: &Vec<Tensor>| {
            let with: Vec<Node> = xs.iter().map(|x| x.node().clone()).collect();
            Ok(vec![tensor(replay(out.node(), inputs, &with)?)])
        };
        let axes = (0..inputs.len()).map(|i| (i < batched).then_some(0)).collect();
        let got = kiln::vmap(f, axes, vec![0])(&args)?.remove(0);
        let want = Tensor::stack(&[out, &tensor(replay(out.node(), inputs, &second)?)], 0)?;
        Ok((got, want))
    };
    let (got, want) = match pair() {
        Ok(p) => p,
        Err(e) => return Outcome::failed(e.to_string()),
    };
    let host = |t: Tensor| async move { t.to_host().await };
    match (host(got).await, host(want).await) {
        (Err(e), _) | (_, Err(e)) => Outcome::failed(e.to_string()),
        (Ok(g), Ok(w)) if g.shape != w.shape || g.dtype != w.dtype => Outcome::failed(format!(
            "vmap gave {} {:?}, the stacked replays {} {:?}",
            g.dtype, g.shape, w.dtype, w.shape
        )),
        (Ok(g), Ok(w)) => compare(&g.data, &w.data, tol),
    }
}

/// Every case (whose op contains `filter`) batched, on the CPU reference and each adapter.
#[cfg(not(target_arch = "wasm32"))]
pub async fn run(found: &[crate::adapters::Found], filter: Option<&str>) -> Vec<BatchRow> {
    let cases: Vec<Case> =
        crate::cases::all().into_iter().filter(|c| filter.is_none_or(|f| c.op.contains(f))).collect();
    rows_on(found, &cases, |c| (c.op, c.detail.clone()), |case, device| pollster::block_on(check(case, device)))
}

/// `check` of every case on the CPU reference and each adapter, the
/// devices at once: one row per case, named by `name`.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn rows_on<C: Sync>(
    found: &[crate::adapters::Found],
    cases: &[C],
    name: impl Fn(&C) -> (&'static str, String),
    check: impl Fn(&C, &Device) -> Option<Outcome> + Sync,
) -> Vec<BatchRow> {
    let cpu = Device::cpu();
    let devices: Vec<&Device> = std::iter::once(&cpu).chain(found.iter().map(|f| &f.device)).collect();
    let columns =
        crate::adapters::at_once(&devices, |device| cases.iter().map(|case| check(case, device)).collect::<Vec<_>>());
    cases
        .iter()
        .enumerate()
        .map(|(i, case)| {
            let (op, detail) = name(case);
            BatchRow { op, detail, outcomes: crate::adapters::row(&columns, i) }
        })
        .collect()
}

/// Each failed check, named by `kind` ("vmap", "vmap(grad)"), the case and the column.
pub fn failures(kind: &str, rows: &[BatchRow], columns: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for r in rows {
        for (name, o) in columns.iter().zip(&r.outcomes) {
            if let Some(f) = o.as_ref().and_then(|o| o.failure.as_ref()) {
                out.push(format!("{kind} {} [{}] on {name}: {f}", r.op, r.detail));
            }
        }
    }
    out
}

/// (passed, failed) over the batching checks.
pub fn counts(rows: &[BatchRow]) -> (usize, usize) {
    let all: Vec<&Outcome> = rows.iter().flat_map(|r| r.outcomes.iter().flatten()).collect();
    let passed = all.iter().filter(|o| o.passed).count();
    (passed, all.len() - passed)
}

/// What the browser's results name a case's batching check by: this, then the op.
pub const BROWSER_PREFIX: &str = "vmap: ";

/// The op the browser's results name a case's batching check by.
pub fn browser_op(op: &str) -> String {
    format!("{BROWSER_PREFIX}{op}")
}

/// The "Batching (vmap)" section of docs/CONFORMANCE.md: one row per op,
/// with the browser's column where its results are at hand.
pub fn markdown(rows: &[BatchRow], columns: &[String], browser: Option<&Browser>) -> String {
    let about = "Every case above under `kiln::vmap`: its inputs batched as two examples (each input, and a \
                 second drawn from its own key: its elements picked at random with repeats), `vmap` of the case against the case on each example stacked, on the \
                 same device, each element within twice the case's tolerance; then, for cases of several inputs, \
                 the same with only the first operand batched and the others shared by both examples (`in_axes` \
                 `None`: the path of a weight every example reads). Creation cases read no input (—).";
    section("Batching (vmap)", about, BROWSER_PREFIX, rows, columns, browser)
}

/// A section of docs/CONFORMANCE.md over batching rows: `title`, `about`,
/// the counts, and one row per op, with the browser's column (its results
/// named `prefix` and the op) where they are at hand.
pub fn section(
    title: &str,
    about: &str,
    prefix: &str,
    rows: &[BatchRow],
    columns: &[String],
    browser: Option<&Browser>,
) -> String {
    let (passed, failed) = counts(rows);
    let mut s = format!("\n## {title}\n\n");
    s += &format!(
        "{about}\n\n{passed} passed, {failed} failed{}.\n\n| op | cases |",
        browser.map_or(String::new(), |b| {
            let (bp, bf) = b.counts_of(|op| op.starts_with(prefix));
            format!(" natively; in the browser (WebGPU on {}), {bp} passed, {bf} failed", b.label)
        })
    );
    let mut line = String::from("|---|---|");
    for c in columns.iter().map(String::as_str).chain(browser.map(|_| "browser (WebGPU)")) {
        s += &format!(" {c} |");
        line += "---|";
    }
    s += &format!("\n{line}\n");
    let mut ops: Vec<&str> = Vec::new();
    for r in rows {
        if !ops.contains(&r.op) {
            ops.push(r.op);
        }
    }
    // The worst of a column's outcomes, or — when none ran.
    let column = |outcomes: Vec<&Outcome>| match outcomes.is_empty() {
        true => " — |".to_string(),
        false => format!(" {} |", crate::report::cell(&crate::report::worst_of(&outcomes))),
    };
    for op in ops {
        let of: Vec<&BatchRow> = rows.iter().filter(|r| r.op == op).collect();
        s += &format!("| {op} | {} |", of.len());
        for c in 0..columns.len() {
            s += &column(of.iter().filter_map(|r| r.outcomes[c].as_ref()).collect());
        }
        if let Some(b) = browser {
            s += &column(of.iter().filter_map(|r| b.get(&format!("{prefix}{}", r.op), &r.detail)).collect());
        }
        s += "\n";
    }
    s
}
