//! The progress line: shown on stderr for large files, only when stderr is a terminal.

use std::{
    io::{self, IsTerminal},
    time::{Duration, Instant},
};

/// A progress line on stderr for large files, only when stderr is a terminal.
pub(super) struct Progress {
    name: String,
    size: Option<u64>,
    on: bool,
    shown: bool,
    start: Instant,
    last: Instant,
}

impl Progress {
    const MIN_SIZE: u64 = 64 << 20;

    pub(super) fn new(name: &str, size: Option<u64>, wanted: bool) -> Self {
        let big = size.is_none_or(|s| s >= Self::MIN_SIZE);
        let now = Instant::now();
        Self {
            name: name.to_string(),
            size,
            on: wanted && big && io::stderr().is_terminal(),
            shown: false,
            start: now,
            last: now,
        }
    }

    pub(super) fn tick(&mut self, offset: u64, frames: u64) {
        if !self.on || self.last.elapsed() < Duration::from_millis(250) {
            return;
        }
        self.last = Instant::now();
        self.shown = true;
        let mb = offset as f64 / 1e6;
        let rate = frames as f64 / self.start.elapsed().as_secs_f64().max(1e-9) / 1e6;
        match self.size {
            Some(size) if size > 0 => eprint!(
                "\r\x1b[Kreplay: {} {:5.1}% ({mb:.0} of {:.0} MB, {frames} frames, {rate:.1} M frames/s)",
                self.name,
                offset as f64 * 100.0 / size as f64,
                size as f64 / 1e6
            ),
            _ => eprint!(
                "\r\x1b[Kreplay: {} {mb:.0} MB, {frames} frames, {rate:.1} M frames/s",
                self.name
            ),
        }
    }

    pub(super) fn finish(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
        }
    }
}
