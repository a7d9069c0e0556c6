//! Running the gradient cases: the CPU reference's gradients against
//! central finite differences (f64), and every adapter's gradients against
//! the reference's. Gradients are vjps with a fixed random cotangent, so
//! every output element counts.

use crate::browser::Browser;
use crate::grad_cases::{Check, GradCase, cotangent};
use crate::report::cell;
use crate::{Outcome, Tol, compare};
use kiln::core::interp::HostArray;
use kiln::prelude::*;

/// Central differences with step `H` in f64: truncation ~H², rounding ~ε/H.
const H: f64 = 1e-6;
/// How close the reference's gradients must be to finite differences.
pub const FD_TOL: Tol = Tol { abs: 1e-6, rel: 1e-5 };

pub struct GradRow {
    pub op: &'static str,
    pub detail: String,
    /// Reference vs finite differences (`None`: not applicable).
    pub fd: Option<Outcome>,
    /// Each adapter vs the reference.
    pub outcomes: Vec<Outcome>,
}

/// The gradients of `Σ w · f(x)` with respect to each input `x`, lazy.
pub fn vjp_of(case: &GradCase, x: &Vec<Tensor>) -> Result<Vec<Tensor>> {
    let (out, pullback) = vjp(|x: &Vec<Tensor>| (case.f)(x), x)?;
    pullback.pullback(&cotangent(out.device(), out.shape(), out.dtype())?)
}

/// The gradients of `Σ w · f(x)` with respect to each input, on `dev`.
pub async fn gradients(case: &GradCase, dev: &Device) -> Result<Vec<HostArray>> {
    let grads = vjp_of(case, &case.primals(dev)?)?;
    Tensor::realize_all(&grads.iter().collect::<Vec<_>>()).await?;
    let mut out = Vec::new();
    for g in &grads {
        out.push(g.to_host().await?);
    }
    Ok(out)
}

/// `Σ w · f(x)` on the reference for host values of the inputs.
async fn objective(case: &GradCase, cpu: &Device, values: &[HostArray]) -> Result<f64> {
    let x = values.iter().map(|v| Tensor::from_f64(cpu, &v.data, &v.shape, v.dtype)).collect::<Result<Vec<_>>>()?;
    let out = (case.f)(&x)?;
    let w = cotangent(cpu, out.shape(), out.dtype())?.to_host().await?;
    Ok(out.to_host().await?.data.iter().zip(&w.data).map(|(a, b)| a * b).sum())
}

pub async fn finite_differences(case: &GradCase, cpu: &Device) -> Result<Vec<Vec<f64>>> {
    let mut values = Vec::new();
    for p in case.primals(cpu)? {
        values.push(p.to_host().await?);
    }
    let mut out = Vec::new();
    for i in 0..values.len() {
        let mut g = Vec::new();
        for j in 0..values[i].data.len() {
            let x = values[i].data[j];
            values[i].data[j] = x + H;
            let up = objective(case, cpu, &values).await?;
            values[i].data[j] = x - H;
            let down = objective(case, cpu, &values).await?;
            values[i].data[j] = x;
            g.push((up - down) / (2.0 * H));
        }
        out.push(g);
    }
    Ok(out)
}

/// Compare per leaf; the outcome is the worst leaf's.
pub fn check(got: &[HostArray], want: &[Vec<f64>], how: Check) -> Outcome {
    let mut worst = Outcome { max_abs_err: 0.0, passed: true, failure: None };
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let o = match how {
            Check::Elementwise(tol) => compare(&g.data, w, tol),
            Check::MaxRelative(limit) => {
                let diff = g.data.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
                let scale = w.iter().map(|v| v.abs()).fold(0.0, f64::max);
                let rel = if scale > 0.0 { diff / scale } else { diff };
                let ok = rel <= limit;
                let failure = (!ok).then(|| format!("max |g − r| / max |r| = {rel:.2e} over {limit:.0e}"));
                Outcome { max_abs_err: rel, passed: ok, failure }
            }
        };
        if let Some(f) = &o.failure {
            worst.failure.get_or_insert(format!("input {i}: {f}"));
            worst.passed = false;
        }
        worst.max_abs_err = worst.max_abs_err.max(o.max_abs_err);
    }
    worst
}

/// The reference's gradients of one case, one flat vector per input.
pub async fn reference(case: &GradCase, cpu: &Device) -> Result<Vec<Vec<f64>>> {
    Ok(gradients(case, cpu).await?.into_iter().map(|h| h.data).collect())
}

/// One case's gradients on `device` against the reference's.
pub async fn check_device(case: &GradCase, want: &Result<Vec<Vec<f64>>>, device: &Device) -> Outcome {
    match (want, gradients(case, device).await) {
        (Err(e), _) => Outcome::failed(format!("reference failed: {e}")),
        (_, Err(e)) => Outcome::failed(e.to_string()),
        (Ok(w), Ok(g)) => check(&g, w, case.check),
    }
}

/// Run every gradient case whose op contains `filter`.
#[cfg(not(target_arch = "wasm32"))]
pub async fn run(found: &[crate::adapters::Found], filter: Option<&str>) -> Vec<GradRow> {
    let cpu = Device::cpu();
    let cases: Vec<GradCase> =
        crate::grad_cases::all().into_iter().filter(|c| filter.is_none_or(|f| c.op.contains(f))).collect();
    let (mut wants, mut fds) = (Vec::with_capacity(cases.len()), Vec::with_capacity(cases.len()));
    for case in &cases {
        let want = reference(case, &cpu).await;
        fds.push(match (&want, case.fd) {
            (_, false) => None,
            (Err(e), true) => Some(Outcome::failed(format!("reference failed: {e}"))),
            (Ok(w), true) => Some(match finite_differences(case, &cpu).await {
                Ok(fd) => {
                    let as_host: Vec<HostArray> = w
                        .iter()
                        .map(|g| HostArray { dtype: DType::F32, shape: vec![g.len()], data: g.clone() })
                        .collect();
                    check(&as_host, &fd, Check::Elementwise(FD_TOL))
                }
                Err(e) => Outcome::failed(format!("finite differences failed: {e}")),
            }),
        });
        wants.push(want);
    }
    let devices: Vec<&Device> = found.iter().map(|f| &f.device).collect();
    let columns = crate::adapters::at_once(&devices, |device| {
        cases
            .iter()
            .zip(&wants)
            .map(|(case, want)| pollster::block_on(check_device(case, want, device)))
            .collect::<Vec<_>>()
    });
    cases
        .into_iter()
        .zip(fds)
        .enumerate()
        .map(|(i, (case, fd))| GradRow {
            op: case.op,
            detail: case.detail,
            fd,
            outcomes: crate::adapters::row(&columns, i),
        })
        .collect()
}

pub fn failures(rows: &[GradRow], adapters: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for r in rows {
        if let Some(f) = r.fd.as_ref().and_then(|o| o.failure.as_ref()) {
            out.push(format!("grad {} [{}] finite differences: {f}", r.op, r.detail));
        }
        for (name, o) in adapters.iter().zip(&r.outcomes) {
            if let Some(f) = &o.failure {
                out.push(format!("grad {} [{}] on {name}: {f}", r.op, r.detail));
            }
        }
    }
    out
}

/// The "Gradients" section of docs/CONFORMANCE.md (with the browser's
/// column, whose rows are named "gradient: op", when given).
pub fn markdown(rows: &[GradRow], adapters: &[String], browser: Option<&Browser>) -> String {
    let checks = rows.iter().map(|r| r.fd.is_some() as usize + r.outcomes.len()).sum::<usize>();
    let passed = rows.iter().flat_map(|r| r.fd.iter().chain(&r.outcomes)).filter(|o| o.passed).count();
    let mut s = String::from("\n## Gradients\n\n");
    s += &format!(
        "Reverse-mode gradients (`vjp` with a fixed random cotangent `w`, i.e. the gradient of `Σ w · f(x)`). \
         Column *finite differences*: the CPU reference's gradients against central differences in f64 (step \
         {H:e}), each element within {:e} + {:e} · |fd|. Adapter columns: each adapter's gradients against the \
         reference's, elementwise within 1e-5 + 1e-4 · |ref| unless the case says otherwise; the MLP 784-256-10 \
         row shows, per parameter, max |g − r| / max |r| (limit 1e-4). Each cell shows the largest error over the \
         case's inputs; — means not applicable.\n\n{passed} of {checks} gradient checks passed ({} cases).\n\n",
        FD_TOL.abs,
        FD_TOL.rel,
        rows.len()
    );
    s += "| op | case | finite differences |";
    let mut line = String::from("|---|---|---|");
    for a in adapters {
        s += &format!(" {a} |");
        line += "---|";
    }
    if browser.is_some() {
        s += " browser (WebGPU) |";
        line += "---|";
    }
    s += &format!("\n{line}\n");
    for r in rows {
        s += &format!("| {} | {} | {} |", r.op, r.detail, r.fd.as_ref().map_or("—".into(), cell));
        for o in &r.outcomes {
            s += &format!(" {} |", cell(o));
        }
        if let Some(b) = browser {
            s += &b
                .get(&format!("gradient: {}", r.op), &r.detail)
                .map_or(" – |".to_string(), |o| format!(" {} |", cell(o)));
        }
        s += "\n";
    }
    s
}
