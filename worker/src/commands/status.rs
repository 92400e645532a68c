//! `ferry status RUN_DIR`: how far a pipeline phase is, read from what its jobs leave in the run
//! directory (workflow/scripts/run_dir.json; docs/pipeline.md, "Run directory"): the plan's partitions, each job's report, a
//! failed job's report under failed/, and the progress file every copy and verify job rewrites
//! every few seconds. Never the engines' internals, so it reads a Snakemake run as a Nextflow
//! one, running, finished or killed.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use serde_json::{json, Value};

use crate::run_dir::{Kind, LAYOUT};
use crate::units::human_bytes;

/// A progress file not rewritten for this long belongs to a job that is no longer running
/// (jobs rewrite theirs every two seconds; a loaded shared filesystem may lag by a few).
const STALE: f64 = 30.0;

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// A phase's run directory: <outdir>/<run_name>/<phase>[-pass<N>]
    pub run_dir: PathBuf,
    /// Print the status as JSON
    #[arg(long)]
    pub json: bool,
    /// Refresh every SECONDS (in place on a terminal) until the phase has ended
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
    pub watch: Option<f64>,
}

pub fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    if !args.run_dir.is_dir() {
        anyhow::bail!("{}: no such run directory", args.run_dir.display());
    }
    let Some(every) = args.watch else {
        show(&status(&args.run_dir, now()), args.json, false);
        return Ok(ExitCode::SUCCESS);
    };
    let redraw = !args.json && std::io::stdout().is_terminal();
    loop {
        let st = status(&args.run_dir, now());
        show(&st, args.json, redraw);
        if st["state"] != "running" {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_secs_f64(every.max(0.2)));
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn read(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn num(v: &Value, path: &[&str]) -> f64 {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
}

/// The job wrote its progress on this machine and its process is no more: killed, without
/// waiting for its file to go stale.
fn gone_here(progress: &Value) -> bool {
    let (Some(host), Some(pid)) = (progress["host"].as_str(), progress["pid"].as_u64()) else {
        return false;
    };
    // A killed process may linger a moment as a zombie, state Z, until it is reaped.
    let alive = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    });
    host == crate::progress::hostname() && !alive
}

/// One partition of a step: where it stands and how much of it is done.
fn partition(dir: &Path, step: &str, spec: &Value, at: f64) -> Value {
    let id = spec["id"].as_str().unwrap_or_default();
    let (files, bytes) = (num(spec, &["files"]), num(spec, &["bytes"]));
    let record = |kind| LAYOUT.record(dir, step, kind, id);
    let done = record(Kind::Out).and_then(|p| read(&p));
    let failed = record(Kind::Failed).is_some_and(|p| p.exists());
    let progress = record(Kind::Progress).and_then(|p| read(&p));
    let (state, files_done, bytes_done, rate) = match (&done, &progress) {
        (Some(_), _) => ("done", files, bytes, 0.0),
        (None, _) if failed => ("failed", 0.0, 0.0, 0.0),
        (None, Some(p)) => {
            let fresh = at - num(p, &["updated"]) < STALE && p["finished"] != true && !gone_here(p);
            let state = if fresh { "running" } else { "stopped" };
            let rate = if fresh {
                num(p, &["bytes_per_second"])
            } else {
                0.0
            };
            (
                state,
                num(p, &["files", "done"]),
                num(p, &["bytes", "done"]),
                rate,
            )
        }
        (None, None) => ("pending", 0.0, 0.0, 0.0),
    };
    let left = (bytes - bytes_done).max(0.0);
    json!({
        "id": id, "state": state, "files": files, "bytes": bytes,
        "files_done": files_done, "bytes_done": bytes_done, "bytes_per_second": rate,
        "eta_seconds": if rate > 0.0 { Some(left / rate) } else { None },
    })
}

fn tally(parts: &[Value]) -> Value {
    let count = |s: &str| parts.iter().filter(|p| p["state"] == s).count();
    json!({
        "planned": parts.len(), "done": count("done"), "running": count("running"),
        "failed": count("failed"), "stopped": count("stopped"), "pending": count("pending"),
    })
}

/// The whole phase at time `at`, as `--json` prints it.
pub fn status(dir: &Path, at: f64) -> Value {
    let report = read(&dir.join(&LAYOUT.report.json));
    let incomplete = read(&dir.join(&LAYOUT.incomplete_report.json));
    let Some(plan) = read(&dir.join(&LAYOUT.plan)) else {
        let listing = dir
            .join(&LAYOUT.listing_dir)
            .read_dir()
            .map(|mut d| d.next().is_some())
            .unwrap_or(false);
        let state = if incomplete.is_some() {
            "incomplete"
        } else if listing {
            "planning"
        } else {
            "listing"
        };
        return json!({"run_dir": dir, "state": state, "plan": null});
    };
    let parts = |key: &str, step: &str| -> Vec<Value> {
        plan[key]
            .as_array()
            .map(|a| a.iter().map(|s| partition(dir, step, s, at)).collect())
            .unwrap_or_default()
    };
    let copy = parts("copy_partitions", "copy");
    let verify = parts("verify_partitions", "verify");
    let all = || copy.iter().chain(&verify);
    let sum = |key: &str| copy.iter().map(|p| num(p, &[key])).sum::<f64>();
    let (bytes, bytes_done, rate) = (
        sum("bytes"),
        sum("bytes_done"),
        all().map(|p| num(p, &["bytes_per_second"])).sum::<f64>(),
    );
    let running = all().any(|p| p["state"] == "running");
    let state = match (&report, &incomplete) {
        (Some(r), _) if r["status"] == "complete" => "complete",
        _ if running => "running",
        (_, Some(_)) => "incomplete",
        _ if all().all(|p| p["state"] == "done") => "finishing",
        _ => "stopped",
    };
    let slowest = all()
        .filter(|p| p["state"] == "running")
        .max_by(|a, b| num(a, &["eta_seconds"]).total_cmp(&num(b, &["eta_seconds"])))
        .map(|p| p["id"].clone());
    let eta = (rate > 0.0).then(|| (bytes - bytes_done).max(0.0) / rate);
    json!({
        "run_dir": dir, "state": state, "phase": plan["phase"],
        "copy": tally(&copy), "verify": tally(&verify),
        "files": {"planned": sum("files"), "done": sum("files_done")},
        "bytes": {"planned": bytes, "done": bytes_done},
        "bytes_per_second": rate, "eta_seconds": eta, "slowest_running": slowest,
        "partitions": {"copy": copy, "verify": verify},
    })
}

fn percent(done: f64, of: f64) -> String {
    if of > 0.0 {
        format!("{:.1}%", 100.0 * done / of)
    } else {
        "-".into()
    }
}

fn text(st: &Value) -> String {
    let mut out = format!(
        "ferry status {}: {}\n",
        st["run_dir"].as_str().unwrap_or_default(),
        st["state"].as_str().unwrap_or_default()
    );
    if st.get("copy").is_none() {
        return out;
    }
    for step in ["copy", "verify"] {
        let t = &st[step];
        out += &format!(
            "  {step} partitions: {} done, {} running, {} failed, {} stopped, {} pending (of {})\n",
            t["done"], t["running"], t["failed"], t["stopped"], t["pending"], t["planned"]
        );
    }
    let (fd, fp) = (num(st, &["files", "done"]), num(st, &["files", "planned"]));
    let (bd, bp) = (num(st, &["bytes", "done"]), num(st, &["bytes", "planned"]));
    out += &format!(
        "  copied: {} of {} files ({}), {} of {} ({})\n",
        fd as u64,
        fp as u64,
        percent(fd, fp),
        human_bytes(bd as u64),
        human_bytes(bp as u64),
        percent(bd, bp)
    );
    let eta = st["eta_seconds"]
        .as_f64()
        .map_or("unknown".into(), |s| format!("{s:.0} s"));
    out += &format!(
        "  throughput: {}/s, ETA {eta}\n",
        human_bytes(num(st, &["bytes_per_second"]) as u64)
    );
    if let Some(id) = st["slowest_running"].as_str() {
        out += &format!("  slowest running partition: {id}\n");
    }
    out
}

fn show(st: &Value, as_json: bool, redraw: bool) {
    let mut stdout = std::io::stdout().lock();
    let body = if as_json { format!("{st}\n") } else { text(st) };
    // Home and clear, so a watched status stays in place instead of scrolling.
    let _ = write!(
        stdout,
        "{}{body}",
        if redraw { "\x1b[H\x1b[2J" } else { "" }
    );
    let _ = stdout.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, v: Value) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, v.to_string()).unwrap();
    }

    #[test]
    fn partitions_done_running_stopped_failed_and_pending() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let part = |id: &str| json!({"id": id, "files": 10, "bytes": 1000});
        write(
            dir,
            "plan/plan.json",
            json!({"phase": "incremental",
            "copy_partitions": [part("0"), part("1"), part("2"), part("3"), part("4")], "verify_partitions": []}),
        );
        write(dir, "copy/part-0.json", json!({"files": {"copied": 10}}));
        write(
            dir,
            "progress/copy-part-1.json",
            json!({"updated": 995.0, "finished": false,
            "files": {"done": 4}, "bytes": {"done": 400}, "bytes_per_second": 60.0}),
        );
        write(
            dir,
            "progress/copy-part-2.json",
            json!({"updated": 900.0, "finished": false,
            "files": {"done": 2}, "bytes": {"done": 200}, "bytes_per_second": 50.0}),
        );
        write(dir, "failed/copy-part-3.json", json!({}));
        let st = status(dir, 1000.0);
        let states: Vec<_> = st["partitions"]["copy"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["state"].clone())
            .collect();
        assert_eq!(states, ["done", "running", "stopped", "failed", "pending"]);
        assert_eq!(st["state"], "running");
        assert_eq!(st["copy"]["done"], 1);
        assert_eq!(num(&st, &["bytes", "done"]), 1600.0);
        assert_eq!(num(&st, &["bytes_per_second"]), 60.0);
        assert_eq!(num(&st, &["eta_seconds"]), (5000.0 - 1600.0) / 60.0);
        assert_eq!(st["slowest_running"], "1");
        // Later, nothing has been rewritten: the run was stopped (killed), not running.
        assert_eq!(status(dir, 2000.0)["state"], "stopped");
    }

    #[test]
    fn before_the_plan_and_after_the_report() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(status(tmp.path(), 0.0)["state"], "listing");
        write(tmp.path(), "listing/source.tsv", json!(null));
        assert_eq!(status(tmp.path(), 0.0)["state"], "planning");
        write(
            tmp.path(),
            "plan/plan.json",
            json!({"copy_partitions": [], "verify_partitions": []}),
        );
        write(tmp.path(), "report.json", json!({"status": "complete"}));
        assert_eq!(status(tmp.path(), 0.0)["state"], "complete");
    }
}
