//! Run the conformance suite on every adapter and rewrite docs/CONFORMANCE.md.
//! Usage: `conformance [OP_FILTER] [--no-write] [--out PATH]`: a filter or
//! `--no-write` leaves the page alone; `--out` writes it to PATH instead (a
//! binary run away from its checkout, as on a GPU machine without one).

use kiln_conformance::browser::Browser;

fn main() {
    let (mut filter, mut out, mut write) = (None, None, true);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--no-write" => write = false,
            "--out" => match args.next() {
                Some(path) => out = Some(std::path::PathBuf::from(path)),
                None => {
                    eprintln!("error: --out needs a path");
                    std::process::exit(2);
                }
            },
            _ => filter = Some(arg),
        }
    }
    let filter = filter.as_deref();
    let run = pollster::block_on(kiln_conformance::report::run(filter));
    let failures = run.failures();
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    for (_, msgs) in &run.messages {
        for m in msgs {
            eprintln!("VALIDATION {m}");
        }
    }
    let (passed, failed) = run.counts();
    if filter.is_none() && (out.is_some() || write) {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
        let path = out.unwrap_or_else(|| docs.join("CONFORMANCE.md"));
        // The browser column, when the web e2e test has saved its results.
        let browser = match std::fs::read_to_string(docs.join("conformance-browser.tsv")) {
            Ok(tsv) => Some(Browser::parse(&tsv).unwrap_or_else(|e| panic!("docs/conformance-browser.tsv: {e}"))),
            Err(_) => None,
        };
        let md = kiln_conformance::report::markdown(
            &run,
            browser.as_ref(),
            "cargo run --release -p kiln-conformance --bin conformance",
        );
        if let Err(e) = std::fs::write(&path, md) {
            eprintln!("error: writing {}: {e}", path.display());
            std::process::exit(2);
        }
        println!("wrote {}", path.display());
    }
    for skip in &run.skipped {
        println!("skipped adapter: {skip}");
    }
    let (grad_passed, grad_failed) = run.grad_counts();
    println!("gradients: {grad_passed} passed, {grad_failed} failed");
    let (batch_passed, batch_failed) = kiln_conformance::batch_check::counts(&run.batching);
    println!("batching: {batch_passed} passed, {batch_failed} failed");
    let (vg_passed, vg_failed) = kiln_conformance::batch_check::counts(&run.batched_grads);
    println!("per-example gradients (vmap of grad): {vg_passed} passed, {vg_failed} failed");
    let (vc_passed, vc_failed) = kiln_conformance::batch_check::counts(&run.compositions);
    println!("vmap compositions: {vc_passed} passed, {vc_failed} failed");
    println!("{passed} passed, {failed} failed");
    let any_failed = failed > 0 || grad_failed > 0 || batch_failed > 0 || vg_failed > 0 || vc_failed > 0;
    if any_failed || !run.messages.is_empty() {
        std::process::exit(1);
    }
}
