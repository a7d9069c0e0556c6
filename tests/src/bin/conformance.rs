//! Run the conformance suite on every adapter and rewrite docs/CONFORMANCE.md.
//! Usage: `conformance [OP_FILTER] [--no-write]`.

use kiln_conformance::browser::Browser;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filter = args.iter().find(|a| !a.starts_with("--")).map(String::as_str);
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
    if filter.is_none() && !args.iter().any(|a| a == "--no-write") {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
        let path = docs.join("CONFORMANCE.md");
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
        std::fs::write(&path, md).expect("write docs/CONFORMANCE.md");
        println!("wrote {}", path.display());
    }
    for skip in &run.skipped {
        println!("skipped adapter: {skip}");
    }
    let (grad_passed, grad_failed) = run.grad_counts();
    println!("gradients: {grad_passed} passed, {grad_failed} failed");
    let (batch_passed, batch_failed) = kiln_conformance::batch_check::counts(&run.batching);
    println!("batching: {batch_passed} passed, {batch_failed} failed");
    println!("{passed} passed, {failed} failed");
    if failed > 0 || grad_failed > 0 || batch_failed > 0 || !run.messages.is_empty() {
        std::process::exit(1);
    }
}
