//! README's quickstart (`examples/quickstart.rs`; tests/tests/readme.rs
//! checks that README shows it as it is) trains: run as a user runs it
//! (the binary `cargo test` builds beside the tests), its loss falls and
//! its accuracy on the spirals passes 95%, with nothing on stderr (no
//! `XDG_RUNTIME_DIR` message where that variable is unset).

use std::path::PathBuf;
use std::process::Command;

fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps/<test>");
    let binary = dir.join("examples").join(format!("quickstart{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.exists(),
        "{} is missing: cargo test builds it (or cargo build --example quickstart)",
        binary.display()
    );
    binary
}

/// The number after `label` on a line of `out`.
fn figure(line: &str, label: &str) -> f32 {
    let at = line.find(label).unwrap_or_else(|| panic!("no `{label}` in {line:?}")) + label.len();
    line[at..].trim().trim_end_matches('%').parse().unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

#[test]
fn the_quickstart_trains_quietly() {
    let out = Command::new(example_binary()).env_remove("XDG_RUNTIME_DIR").output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "quickstart failed: {stderr}");
    assert_eq!(stderr, "", "quickstart wrote to stderr");
    let lines: Vec<&str> = stdout.lines().collect();
    eprintln!("{stdout}");
    assert!(lines[0].starts_with("adapter: "), "{stdout}");
    let losses: Vec<f32> = lines.iter().filter(|l| l.starts_with("step ")).map(|l| figure(l, "loss")).collect();
    assert_eq!(losses.len(), 5, "{stdout}");
    assert!(losses[4] < losses[0] / 10.0, "the loss falls tenfold: {losses:?}");
    let accuracy = figure(lines.last().unwrap(), "accuracy:");
    assert!(accuracy > 95.0, "accuracy {accuracy}%");
}
