//! A live progress line on stderr: bytes, rate, ETA, files and retries.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::stats::Stats;

pub struct Progress {
    bar: ProgressBar,
    task: tokio::task::JoinHandle<()>,
}

/// On when forced, off when suppressed, else on only if stderr is a terminal.
pub fn wanted(force_on: bool, force_off: bool) -> bool {
    !force_off && (force_on || std::io::stderr().is_terminal())
}

impl Progress {
    pub fn start(stats: Arc<Stats>) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(Stats::get(&stats.bytes_total)), ProgressDrawTarget::stderr_with_hz(4));
        bar.set_style(
            ProgressStyle::with_template("{spinner} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}")
                .expect("static template"),
        );
        let b = bar.clone();
        let task = tokio::spawn(async move {
            loop {
                let done = Stats::get(&stats.bytes_copied) + Stats::get(&stats.bytes_skipped);
                b.set_position(done);
                let files = Stats::get(&stats.files_copied) + Stats::get(&stats.files_skipped) + Stats::get(&stats.files_failed) + Stats::get(&stats.files_ignored);
                let mut msg = format!("files {files}/{}", Stats::get(&stats.files_total));
                let failed = Stats::get(&stats.files_failed);
                if failed > 0 {
                    msg.push_str(&format!(" failed {failed}"));
                }
                let retries = stats.retry_brief();
                if !retries.is_empty() {
                    msg.push_str(&format!(" [retry {retries}]"));
                }
                b.set_message(msg);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Progress { bar, task }
    }

    pub fn finish(self) {
        self.task.abort();
        self.bar.finish_and_clear();
    }
}
