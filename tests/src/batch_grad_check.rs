//! The batching check of gradients, `vmap(grad)`: every gradient case's
//! vjp (with `grad_check`'s fixed cotangent) under `vmap` over two examples,
//! the case's inputs and a second drawn from each input's own key, against the
//! two examples' vjps stacked, on the CPU reference and every adapter.
//! These are per-example gradients through every differentiable op's
//! backward rule and that rule's batching.

use crate::Outcome;
use crate::batch_check::{BatchRow, example_key, resampled};
use crate::grad_cases::{Check, GradCase};
use crate::grad_check::{self, vjp_of};
use kiln::prelude::*;

/// What the browser's results name a case's `vmap(grad)` check by: this, then the op.
pub const BROWSER_PREFIX: &str = "vmap(grad): ";

/// The case's per-example gradients on `dev`: `vmap` of its vjp against
/// the vjps of the two examples stacked, each within twice the case's
/// tolerance (the two compute in different kernels).
pub async fn check(case: &GradCase, dev: &Device) -> Outcome {
    let pair = || -> Result<(Vec<Tensor>, Vec<Tensor>)> {
        let first = case.primals(dev)?;
        let second: Vec<Tensor> = first
            .iter()
            .enumerate()
            .map(|(i, x)| Ok(Tensor::from_node(resampled(x.node(), example_key(i), dev)?, dev.clone())))
            .collect::<Result<_>>()?;
        let stacked = |a: &[Tensor], b: &[Tensor]| -> Result<Vec<Tensor>> {
            a.iter().zip(b).map(|(a, b)| Tensor::stack(&[a, b], 0)).collect()
        };
        let grads = |x: &Vec<Tensor>| vjp_of(case, x);
        let got = kiln::vmap(grads, vec![Some(0)], vec![0])(&stacked(&first, &second)?)?;
        let want = stacked(&vjp_of(case, &first)?, &vjp_of(case, &second)?)?;
        Ok((got, want))
    };
    let (got, want) = match pair() {
        Ok(p) => p,
        Err(e) => return Outcome::failed(e.to_string()),
    };
    let (mut got_host, mut want_host) = (Vec::new(), Vec::new());
    for (g, w) in got.iter().zip(&want) {
        match (g.to_host().await, w.to_host().await) {
            (Err(e), _) | (_, Err(e)) => return Outcome::failed(e.to_string()),
            (Ok(g), Ok(w)) if g.shape != w.shape => {
                return Outcome::failed(format!(
                    "vmap gave a gradient of {:?}, the stacked vjps {:?}",
                    g.shape, w.shape
                ));
            }
            (Ok(g), Ok(w)) => {
                got_host.push(g);
                want_host.push(w.data);
            }
        }
    }
    grad_check::check(&got_host, &want_host, doubled(case.check))
}

fn doubled(check: Check) -> Check {
    match check {
        Check::Elementwise(tol) => Check::Elementwise(tol.doubled()),
        Check::MaxRelative(limit) => Check::MaxRelative(2.0 * limit),
    }
}

/// Every gradient case (whose op contains `filter`) batched, on the CPU
/// reference and each adapter.
#[cfg(not(target_arch = "wasm32"))]
pub async fn run(found: &[crate::adapters::Found], filter: Option<&str>) -> Vec<BatchRow> {
    let cases: Vec<GradCase> =
        crate::grad_cases::all().into_iter().filter(|c| filter.is_none_or(|f| c.op.contains(f))).collect();
    let name = |c: &GradCase| (c.op, c.detail.clone());
    crate::batch_check::rows_on(found, &cases, name, |case, device| Some(pollster::block_on(check(case, device))))
}

/// The "Per-example gradients (vmap of grad)" section of docs/CONFORMANCE.md.
pub fn markdown(rows: &[BatchRow], columns: &[String], browser: Option<&crate::browser::Browser>) -> String {
    let about = "Every gradient case above under `kiln::vmap`, i.e. `vmap(grad)`: its inputs batched as two \
                 examples (each input, and a second drawn from its own key), `vmap` of the case's vjp (the same \
                 fixed cotangent) against the two examples' vjps stacked, on the same device, within twice the \
                 case's gradient tolerance.";
    crate::batch_check::section("Per-example gradients (vmap of grad)", about, BROWSER_PREFIX, rows, columns, browser)
}
