//! Progress on stderr: a live bar on a terminal; when forced on elsewhere (a log being tailed,
//! a Slurm job's output), a plain line every few seconds. And for other processes (a pipeline's
//! live status), the same counts in a JSON file rewritten every few seconds.

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::documents::{Count, FileCount, ProgressDoc};

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
    let mut msg = format!("files {}/{}", stats.done().0, g(&stats.files_total));
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
    stats.done().1
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
                    let eta = if rate > 0.0 {
                        format!("{:.0}s", left as f64 / rate)
                    } else {
                        "?".into()
                    };
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
        let bar = ProgressBar::with_draw_target(
            Some(Stats::get(&stats.bytes_total)),
            ProgressDrawTarget::stderr_with_hz(4),
        );
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
            )
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
        Progress {
            bar: Some(bar),
            task,
        }
    }

    pub fn finish(self) {
        self.task.abort();
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

/// How often `--progress-file` is rewritten while the command runs.
const FILE_EVERY: Duration = Duration::from_secs(2);

/// The span `bytes_per_second` is measured over: long enough to smooth the bursts of large
/// blocks, short enough to show a slowdown within a status refresh or two.
const RATE_OVER: Duration = Duration::from_secs(10);

/// `--progress-file`: the counts of `Stats` as JSON (docs/worker.md, "Progress file"), written
/// at once, every `FILE_EVERY`, and a last time with `finished: true` by `finish`. Dropped
/// without `finish` (the command stopped on an error), it writes nothing more, so the file
/// says unfinished as a killed run's does.
pub struct ProgressFile {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl ProgressFile {
    pub fn start(path: PathBuf, command: &'static str, stats: Arc<Stats>) -> ProgressFile {
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let started = epoch(SystemTime::now());
            let mut rate = Rate::default();
            let mut failing = false;
            let mut first = true;
            loop {
                let finished = match first {
                    true => false,
                    false => tokio::select! {
                        _ = tokio::time::sleep(FILE_EVERY) => false,
                        r = &mut stopped => match r {
                            Ok(()) => true,
                            Err(_) => return,
                        },
                    },
                };
                first = false;
                let done = stats.done();
                let per_second = rate.add(Instant::now(), done.1);
                let doc = snapshot(command, &stats, done, started, finished, per_second);
                let p = path.clone();
                let written =
                    tokio::task::spawn_blocking(move || crate::jsonfile::replace(&p, &doc)).await;
                match written {
                    Ok(Ok(())) => failing = false,
                    // Once per run of failures: a full disk must not fill the job's log too.
                    Ok(Err(e)) if !failing => {
                        failing = true;
                        eprintln!(
                            "ferry: warning: cannot write the progress file {}: {e}",
                            path.display()
                        );
                    }
                    _ => {}
                }
                if finished {
                    return;
                }
            }
        });
        ProgressFile {
            stop: Some(stop),
            task,
        }
    }

    /// Writes the last state, `finished: true`, and returns once it is written (or failed to be).
    pub async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for ProgressFile {
    fn drop(&mut self) {
        if self.stop.is_some() {
            self.task.abort();
        }
    }
}

fn epoch(t: SystemTime) -> f64 {
    let s = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    (s * 1000.0).round() / 1000.0
}

/// This machine's name: with the pid, it lets `ferry status` on the same machine tell a job
/// that was killed from one that is only slow to rewrite its file.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is what gethostname is given.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    }
}

/// The progress file's document.
fn snapshot(
    command: &str,
    stats: &Stats,
    (files, bytes): (u64, u64),
    started: f64,
    finished: bool,
    bytes_per_second: f64,
) -> ProgressDoc {
    let g = Stats::get;
    let known = stats.totals_known();
    let total = |n: u64| known.then_some(n);
    ProgressDoc {
        version: Default::default(),
        command: command.to_string(),
        pid: std::process::id(),
        host: hostname(),
        node: std::env::var("SLURMD_NODENAME").ok(),
        started,
        updated: epoch(SystemTime::now()),
        finished,
        files: FileCount {
            done: files,
            failed: g(&stats.files_failed),
            total: total(g(&stats.files_total)),
        },
        bytes: Count {
            done: bytes,
            total: total(g(&stats.bytes_total)),
        },
        bytes_per_second: bytes_per_second.round() as u64,
        requests: stats.requests.counts(),
    }
}

/// Bytes per second over the last `RATE_OVER`, from samples of the bytes done.
#[derive(Default)]
struct Rate {
    samples: VecDeque<(Instant, u64)>,
}

impl Rate {
    /// Adds a sample and gives the rate since the newest sample at least `RATE_OVER` old (or
    /// the oldest, early on); 0 from a single sample.
    fn add(&mut self, at: Instant, bytes: u64) -> f64 {
        self.samples.push_back((at, bytes));
        while self.samples.len() > 2 && at.duration_since(self.samples[1].0) >= RATE_OVER {
            self.samples.pop_front();
        }
        let (t0, b0) = self.samples[0];
        let span = at.duration_since(t0).as_secs_f64();
        if span > 0.0 {
            bytes.saturating_sub(b0) as f64 / span
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_that_of_the_last_ten_seconds() {
        let t = Instant::now();
        let at = |s: u64| t + Duration::from_secs(s);
        let mut r = Rate::default();
        assert_eq!(r.add(at(0), 0), 0.0);
        assert_eq!(r.add(at(2), 200), 100.0);
        // A fast start, then 10 bytes a second: after the window has passed, the start no
        // longer counts.
        let mut bytes = 200;
        for s in (4..=20).step_by(2) {
            bytes += 20;
            r.add(at(s), bytes);
        }
        assert_eq!(r.add(at(22), bytes + 20), 10.0);
        assert!(r.samples.len() <= 7, "{} samples kept", r.samples.len());
    }

    #[test]
    fn totals_are_null_until_known() {
        let stats = Stats::default();
        Stats::add(&stats.files_total, 3);
        Stats::add(&stats.files_copied, 1);
        Stats::add(&stats.bytes_copied, 10);
        let v =
            serde_json::to_value(snapshot("copy", &stats, stats.done(), 1.0, false, 0.0)).unwrap();
        assert!(
            v["files"]["total"].is_null() && v["bytes"]["total"].is_null(),
            "{v}"
        );
        assert_eq!(v["files"]["done"], 1);
        stats.totals_final();
        let v =
            serde_json::to_value(snapshot("copy", &stats, stats.done(), 1.0, true, 0.0)).unwrap();
        assert_eq!(v["files"]["total"], 3);
        assert_eq!(v["finished"], true);
        assert_eq!(
            v["requests"].as_object().unwrap().len(),
            crate::stats::RequestKind::ALL.len()
        );
    }

    #[tokio::test]
    async fn the_file_is_written_at_once_and_finished_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("progress.json");
        let stats = Arc::new(Stats::default());
        let p = ProgressFile::start(path.clone(), "copy", stats.clone());
        let read = || -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
        };
        for _ in 0..200 {
            if path.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(read()["finished"], false);
        Stats::add(&stats.files_copied, 2);
        p.finish().await;
        let v = read();
        assert_eq!(v["finished"], true);
        assert_eq!(v["files"]["done"], 2);
        assert_eq!(v["pid"], std::process::id());
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_written_does_not_fail_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let p = ProgressFile::start(
            dir.path().join("no/such/dir/progress.json"),
            "copy",
            Arc::new(Stats::default()),
        );
        p.finish().await;
    }
}
