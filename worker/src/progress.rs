//! Progress on stderr: a live bar on a terminal; when forced on elsewhere (a log being tailed,
//! a Slurm job's output), a plain line every few seconds.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::stats::Stats;
use crate::units::human_bytes;

pub struct Progress {
    bar: Option<ProgressBar>,
    task: tokio::task::JoinHandle<()>,
}

/// On when forced, off when suppressed, else on only if stderr is a terminal.
pub fn wanted(force_on: bool, force_off: bool) -> bool {
    !force_off && (force_on || std::io::stderr().is_terminal())
}

const LOG_EVERY: Duration = Duration::from_secs(5);

/// Files done and the rest of the status after the byte counts.
fn status(stats: &Stats) -> String {
    let g = Stats::get;
    let files = g(&stats.files_copied) + g(&stats.files_skipped) + g(&stats.files_failed) + g(&stats.files_ignored);
    let mut msg = format!("files {files}/{}", g(&stats.files_total));
    let failed = g(&stats.files_failed);
    if failed > 0 {
        msg.push_str(&format!(" failed {failed}"));
    }
    let retries = stats.retry_brief();
    if !retries.is_empty() {
        msg.push_str(&format!(" [retry {retries}]"));
    }
    msg
}

fn done_bytes(stats: &Stats) -> u64 {
    Stats::get(&stats.bytes_copied) + Stats::get(&stats.bytes_skipped)
}

impl Progress {
    pub fn start(stats: Arc<Stats>) -> Progress {
        if !std::io::stderr().is_terminal() {
            let task = tokio::spawn(async move {
                let started = Instant::now();
                let mut last = (started, done_bytes(&stats));
                loop {
                    tokio::time::sleep(LOG_EVERY).await;
                    let now = (Instant::now(), done_bytes(&stats));
                    let rate = (now.1 - last.1) as f64 / (now.0 - last.0).as_secs_f64();
                    let left = Stats::get(&stats.bytes_total).saturating_sub(now.1);
                    let eta = if rate > 0.0 { format!("{:.0}s", left as f64 / rate) } else { "?".into() };
                    eprintln!(
                        "ferry: {}/{} {}/s ETA {eta} {} ({:.0}s)",
                        human_bytes(now.1),
                        human_bytes(Stats::get(&stats.bytes_total)),
                        human_bytes(rate as u64),
                        status(&stats),
                        started.elapsed().as_secs_f64()
                    );
                    last = now;
                }
            });
            return Progress { bar: None, task };
        }
        let bar = ProgressBar::with_draw_target(Some(Stats::get(&stats.bytes_total)), ProgressDrawTarget::stderr_with_hz(4));
        bar.set_style(
            ProgressStyle::with_template("{spinner} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}")
                .expect("static template"),
        );
        let b = bar.clone();
        let task = tokio::spawn(async move {
            loop {
                b.set_position(done_bytes(&stats));
                b.set_message(status(&stats));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Progress { bar: Some(bar), task }
    }

    pub fn finish(self) {
        self.task.abort();
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}
