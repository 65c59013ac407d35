//! A dependency-free progress display for `edgevlm engines build`.
//!
//! A TensorRT build is one blocking ONNX Runtime call that can take minutes on a Jetson, so the bar
//! shows the step and a ticking elapsed time from a helper thread while the step runs. When stderr
//! is not a terminal (systemd, CI) it prints one line per step instead.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Step-by-step progress on stderr.
#[derive(Debug)]
pub struct Progress {
    total: usize,
    done: usize,
    tty: bool,
    enabled: bool,
    started: Instant,
}

impl Progress {
    /// Progress of `total` steps drawn on stderr.
    pub fn stderr(total: usize) -> Progress {
        Progress {
            total: total.max(1),
            done: 0,
            tty: std::io::stderr().is_terminal(),
            enabled: true,
            started: Instant::now(),
        }
    }

    /// Progress that prints nothing (library callers, tests).
    pub fn hidden(total: usize) -> Progress {
        Progress {
            enabled: false,
            ..Progress::stderr(total)
        }
    }

    /// Steps finished.
    pub fn done(&self) -> usize {
        self.done
    }

    /// Runs one step, showing `label` while it runs; returns its result and duration.
    pub fn step<T, E>(
        &mut self,
        label: &str,
        work: impl FnOnce() -> Result<T, E>,
    ) -> (Result<T, E>, Duration) {
        let index = self.done + 1;
        let t0 = Instant::now();
        let result = if self.enabled && self.tty {
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        self.draw(index, label, t0.elapsed());
                        std::thread::sleep(Duration::from_millis(200));
                    }
                });
                let r = work();
                stop.store(true, Ordering::Relaxed);
                r
            })
        } else {
            if self.enabled {
                eprintln!("[{index}/{}] {label} …", self.total);
            }
            work()
        };
        let took = t0.elapsed();
        let outcome = if result.is_ok() {
            self.done = index;
            ""
        } else {
            " failed after"
        };
        if self.enabled {
            if self.tty {
                self.draw(index, label, took);
                eprintln!("{}", if outcome.is_empty() { "" } else { " failed" });
            } else {
                eprintln!(
                    "[{index}/{}] {label}:{outcome} {:.1} s",
                    self.total,
                    took.as_secs_f64()
                );
            }
        }
        (result, took)
    }

    /// Total time since the progress started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn draw(&self, index: usize, label: &str, elapsed: Duration) {
        const WIDTH: usize = 24;
        let filled = WIDTH * (index - 1) / self.total;
        let bar: String = (0..WIDTH)
            .map(|i| match i.cmp(&filled) {
                std::cmp::Ordering::Less => '=',
                std::cmp::Ordering::Equal => '>',
                std::cmp::Ordering::Greater => ' ',
            })
            .collect();
        let secs = elapsed.as_secs();
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r[{bar}] {index}/{} {label} {}:{:02}\x1b[K",
            self.total,
            secs / 60,
            secs % 60
        );
        let _ = err.flush();
    }
}
