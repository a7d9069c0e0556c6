//! The one line a first run on an adapter prints when kiln starts tuning
//! its matmul kernels (a few seconds, once: the choices are cached), so
//! that the pause before the first steps is explained. kiln says it
//! through the `log` crate; this logger prints only that.

use std::sync::atomic::{AtomicBool, Ordering};

struct FirstTuningLine {
    printed: AtomicBool,
}

impl log::Log for FirstTuningLine {
    fn enabled(&self, meta: &log::Metadata) -> bool {
        meta.target() == "kiln::tune" && meta.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) && !self.printed.swap(true, Ordering::Relaxed) {
            println!("{}", record.args());
        }
    }

    fn flush(&self) {}
}

static LOGGER: FirstTuningLine = FirstTuningLine { printed: AtomicBool::new(false) };

pub fn print_first_tuning_line() {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}
