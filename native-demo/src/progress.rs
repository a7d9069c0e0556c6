//! Progress for a terminal and for a log. On a terminal, a progress bar
//! (on stderr) with lines printed above it; without one (output to a file,
//! a pipe, CI, `nohup`), where the bar hides itself, plain lines: the same
//! lines, and a status line every few seconds. Lines always go to stdout,
//! so `native-demo > log` keeps them.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How often the status line is printed without a terminal.
const STATUS_EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    bar: Option<ProgressBar>,
    total: u64,
    last_status: Instant,
}

impl Progress {
    /// Progress over `total` steps, `done` of them already taken.
    pub fn new(total: u64, done: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total).with_position(done);
            let style = ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed_precise}] {msg}");
            bar.set_style(style.expect("a valid template"));
            bar
        });
        Progress { bar, total, last_status: Instant::now() }
    }

    /// A line that stays (an epoch's results, a notice).
    pub fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| println!("{text}")),
            None => println!("{text}"),
        }
    }

    /// The current step and status: the bar's message on a terminal, else
    /// a line every [`STATUS_EVERY`].
    pub fn status(&mut self, step: u64, text: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(step);
                bar.set_message(text.to_string());
            }
            None if self.last_status.elapsed() >= STATUS_EVERY || step == self.total => {
                self.last_status = Instant::now();
                println!("step {step}/{}: {text}", self.total);
            }
            None => {}
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}
