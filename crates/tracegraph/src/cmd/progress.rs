//! A small progress bar on stderr while a large trace is read (only when stderr is a terminal).

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// Files smaller than this load without a bar.
pub(crate) const MIN_BYTES: u64 = 16 << 20;

/// Counts the bytes read through it and redraws the bar at most every 100 ms.
pub(crate) struct ProgressReader<R> {
    inner: R,
    total: u64,
    read: u64,
    show: bool,
    name: String,
    last: Instant,
    since_check: u64,
}

impl<R: Read> ProgressReader<R> {
    pub(crate) fn new(inner: R, total: u64, show: bool, name: &str) -> Self {
        ProgressReader {
            inner,
            total,
            read: 0,
            show,
            name: name.to_string(),
            last: Instant::now(),
            since_check: 0,
        }
    }

    fn draw(&self) {
        let frac = if self.total == 0 {
            1.0
        } else {
            (self.read as f64 / self.total as f64).min(1.0)
        };
        let width = 30usize;
        let filled = (frac * width as f64) as usize;
        let mut bar = String::with_capacity(width);
        for i in 0..width {
            bar.push(if i < filled { '#' } else { '-' });
        }
        let mut err = io::stderr().lock();
        let _ = write!(
            err,
            "\rreading {} [{bar}] {:>3.0}% ({:.0}/{:.0} MiB)",
            self.name,
            frac * 100.0,
            self.read as f64 / 1048576.0,
            self.total as f64 / 1048576.0
        );
        let _ = err.flush();
    }
}

impl<R: Read> Read for ProgressReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.show {
            self.since_check += n as u64;
            if self.since_check >= 1 << 20 {
                self.since_check = 0;
                if self.last.elapsed() >= Duration::from_millis(100) {
                    self.last = Instant::now();
                    self.draw();
                }
            }
        }
        Ok(n)
    }
}

/// Erases the bar's line.
pub(crate) fn clear(shown: bool) {
    if shown {
        let mut err = io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K");
        let _ = err.flush();
    }
}
