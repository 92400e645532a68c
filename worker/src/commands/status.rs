//! `ferry status RUN_DIR`: how far a pipeline phase is, read from what its jobs leave in the run
//! directory (workflow/scripts/run_dir.json; docs/pipeline.md, "Run directory"): the plan's partitions, each job's report, a
//! failed job's report under failed/, and the progress file every copy and verify job rewrites
//! every few seconds. Never the engines' internals, so it reads a Snakemake run as a Nextflow
//! one, running, finished or killed.

use crate::plan::PartRow;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::documents::{
    Amount, EngineState, JobState, PartitionStatus, PhaseState, PlanProgress, ProgressDoc,
    SideListing, StatusDoc, StepPartitions, Tally,
};

use crate::run_dir::{Kind, LAYOUT};
use crate::shard::ShardsDoc;
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
    let dir = pass_dir(&args.run_dir)?;
    let Some(every) = args.watch else {
        show(&status(&dir, now()), args.json, false);
        return Ok(ExitCode::SUCCESS);
    };
    let redraw = !args.json && std::io::stdout().is_terminal();
    loop {
        let st = status(&dir, now());
        show(&st, args.json, redraw);
        if ended(&st) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_secs_f64(every.max(0.2)));
    }
}

/// Whether a watched pass has ended: its report written, or its engine gone. A run directory
/// without an engine's marker or lock is judged by its records alone, as before the markers.
fn ended(st: &StatusDoc) -> bool {
    match st.engine {
        _ if matches!(st.state, PhaseState::Complete | PhaseState::Incomplete) => true,
        EngineState::Running => false,
        EngineState::Ended => true,
        EngineState::Unknown => st.state != PhaseState::Running,
    }
}

/// The pass to show: `dir` itself, or, for a migration's folder (the run root, which holds its
/// phases' run directories and migration.json, history.jsonl, lock.json), its latest pass: the
/// one holding the lock, else the one whose engine started last.
fn pass_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    let root = &LAYOUT.run_root;
    let is_root = [&root.migration, &root.history, &root.lock]
        .into_iter()
        .any(|name| dir.join(name).is_file());
    if !is_root {
        return Ok(dir.to_path_buf());
    }
    let locked = read::<Holder>(&dir.join(&root.lock))
        .and_then(|h| h.pass)
        .map(|pass| dir.join(pass))
        .filter(|p| p.is_dir());
    let started = || {
        std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .filter_map(|e| {
                let marker = read::<Marker>(&e.path().join(&LAYOUT.run_started))?;
                Some((marker.started, e.path()))
            })
            .max()
            .map(|(_, path)| path)
    };
    locked.or_else(started).ok_or_else(|| {
        anyhow::anyhow!(
            "{}: a migration's folder with no pass started yet; run a phase first",
            dir.display()
        )
    })
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn read<T: DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// What status reads of plan.json: the partitions (the plan's own rows).
#[derive(Deserialize)]
struct Plan {
    phase: String,
    copy_partitions: Vec<PartRow>,
    verify_partitions: Vec<PartRow>,
    prune_partitions: Vec<PartRow>,
}

/// What status reads of a report: whether the phase is complete.
#[derive(Deserialize)]
struct Report {
    status: String,
}

/// The start time (in clock ticks since boot, /proc/PID/stat's field 22) of process `pid` on
/// this machine, None when it is not running. A killed process may linger a moment as a
/// zombie, state Z, until it is reaped: it runs no more.
fn process_start(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    (fields.first() != Some(&"Z")).then(|| fields.get(19).map(|s| s.to_string()))?
}

/// The job wrote its progress on this machine and its process is no more: killed, without
/// waiting for its file to go stale.
fn gone_here(progress: &ProgressDoc) -> bool {
    progress.host == crate::progress::hostname() && process_start(progress.pid).is_none()
}

/// The engine of a pass, as its lock (ferry_lock.py) names it.
#[derive(Deserialize)]
struct Holder {
    host: String,
    pid: u32,
    pid_start: Option<String>,
    pass: Option<String>,
    heartbeat: Option<f64>,
}

/// The engine's marker that a run of the phase began (ferry_history.start).
#[derive(Deserialize)]
struct Marker {
    host: String,
    pid: u32,
    pid_start: Option<String>,
    started: String,
}

/// The engine process `pid` runs on this machine, the same process it was when it started (a
/// pid the kernel gave again later is another process).
fn alive_here(host: &str, pid: u32, pid_start: Option<&str>) -> bool {
    host == crate::progress::hostname()
        && process_start(pid).is_some_and(|now| pid_start.is_none_or(|then| then == now))
}

/// The run directory's name, `<phase>[-pass<N>]`, and its run root (its parent).
fn named(dir: &Path) -> (String, PathBuf) {
    let full = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let name = full
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let root = full.parent().map(Path::to_path_buf).unwrap_or_default();
    (name.to_string(), root)
}

/// Whether the pass's engine still runs: the migration's lock, while it names this pass, says
/// so (its process here, its heartbeat from elsewhere); else the pass's own marker, whose
/// engine gave the lock back when it ended.
fn engine(dir: &Path, at: f64) -> EngineState {
    let (name, root) = named(dir);
    let lock = read::<Holder>(&root.join(&LAYOUT.run_root.lock));
    if let Some(h) = lock.filter(|h| h.pass.as_deref() == Some(name.as_str())) {
        let live = if h.host == crate::progress::hostname() {
            alive_here(&h.host, h.pid, h.pid_start.as_deref())
        } else {
            h.heartbeat
                .is_some_and(|beat| at - beat < LAYOUT.run_root.lock_stale_after_seconds)
        };
        return if live {
            EngineState::Running
        } else {
            EngineState::Ended
        };
    }
    match read::<Marker>(&dir.join(&LAYOUT.run_started)) {
        None => EngineState::Unknown,
        Some(m) if alive_here(&m.host, m.pid, m.pid_start.as_deref()) => EngineState::Running,
        Some(_) => EngineState::Ended,
    }
}

/// One partition of a step: where it stands and how much of it is done.
fn partition(dir: &Path, step: &str, spec: &PartRow, at: f64) -> PartitionStatus {
    let record = |kind| LAYOUT.record(dir, step, kind, &spec.id);
    let done = record(Kind::Out).is_some_and(|p| read::<serde_json::Value>(&p).is_some());
    let failed = record(Kind::Failed).is_some_and(|p| p.exists());
    let progress = record(Kind::Progress).and_then(|p| read::<ProgressDoc>(&p));
    let (state, files_done, bytes_done, rate) = match &progress {
        _ if done => (JobState::Done, spec.files, spec.bytes, 0),
        _ if failed => (JobState::Failed, 0, 0, 0),
        Some(p) => {
            let fresh = at - p.updated < STALE && !p.finished && !gone_here(p);
            let state = if fresh {
                JobState::Running
            } else {
                JobState::Stopped
            };
            let rate = if fresh { p.bytes_per_second } else { 0 };
            (state, p.files.done, p.bytes.done, rate)
        }
        None => (JobState::Pending, 0, 0, 0),
    };
    let left = spec.bytes.saturating_sub(bytes_done);
    PartitionStatus {
        id: spec.id.clone(),
        state,
        node: progress.and_then(|p| p.node),
        files: spec.files,
        bytes: spec.bytes,
        files_done,
        bytes_done,
        bytes_per_second: rate,
        eta_seconds: (rate > 0).then(|| left as f64 / rate as f64),
    }
}

fn tally(parts: &[PartitionStatus]) -> Tally {
    let mut t = Tally {
        planned: parts.len() as u64,
        ..Tally::default()
    };
    for p in parts {
        *match p.state {
            JobState::Pending => &mut t.pending,
            JobState::Running => &mut t.running,
            JobState::Done => &mut t.done,
            JobState::Failed => &mut t.failed,
            JobState::Stopped => &mut t.stopped,
        } += 1;
    }
    t
}

/// The sides a phase lists: the source, and the destination in every phase but the baseline
/// (which makes it instead). The phase is the run directory's name, `<phase>[-pass<N>]`.
fn listed_sides(dir: &Path) -> &'static [&'static str] {
    let (name, _) = named(dir);
    match name
        .split_once("-pass")
        .map_or(name.as_str(), |(phase, _)| phase)
    {
        "baseline" => &["source"],
        _ => &["source", "dest"],
    }
}

/// How many list jobs of each side have written their listing. A list job writes its listing
/// whole when it ends well (under a temporary name until then), so a listing there is a job done.
/// With list.jobs > 1 the shard step's document says how many jobs each side has; until it is
/// written, while that step runs (its log there), the number is not known yet.
fn listing(dir: &Path) -> Vec<SideListing> {
    let shards_path = LAYOUT.record(dir, "shard", Kind::Out, "");
    let shards = shards_path.as_deref().and_then(|p| ShardsDoc::read(p).ok());
    let cutting = shards.is_none()
        && [Kind::Out, Kind::Log].into_iter().any(|k| {
            LAYOUT
                .record(dir, "shard", k, "")
                .is_some_and(|p| p.exists())
        });
    listed_sides(dir)
        .iter()
        .map(|side| {
            let step = &LAYOUT.steps[&format!("list_{side}")];
            let files = match (&shards, &step.sharded) {
                (Some(doc), Some(sharded)) => {
                    doc.files(&dir.join(&sharded.out)).unwrap_or_default()
                }
                _ => step.out.iter().map(|out| dir.join(out)).collect(),
            };
            SideListing {
                side: side.to_string(),
                jobs: (!cutting).then_some(files.len() as u32),
                done: files.iter().filter(|f| f.is_file()).count() as u32,
            }
        })
        .collect()
}

/// The whole phase at time `at`, as `--json` prints it.
pub fn status(dir: &Path, at: f64) -> StatusDoc {
    let complete =
        read::<Report>(&dir.join(&LAYOUT.report.json)).is_some_and(|r| r.status == "complete");
    let incomplete = dir.join(&LAYOUT.incomplete_report.json).is_file();
    let engine = engine(dir, at);
    let live = engine == EngineState::Running;
    let doc = |state, listing, progress| StatusDoc {
        version: Default::default(),
        run_dir: dir.display().to_string(),
        state,
        engine,
        listing,
        progress,
    };
    let Some(plan) = read::<Plan>(&dir.join(LAYOUT.plan())) else {
        let sides = listing(dir);
        let listed = sides.iter().all(|s| s.jobs == Some(s.done));
        let state = if complete {
            PhaseState::Complete
        } else if incomplete && !live {
            PhaseState::Incomplete
        } else if engine == EngineState::Ended {
            PhaseState::Stopped
        } else if listed {
            PhaseState::Planning
        } else {
            PhaseState::Listing
        };
        return doc(state, Some(sides), None);
    };
    let parts = |specs: &[PartRow], step| -> Vec<PartitionStatus> {
        specs.iter().map(|s| partition(dir, step, s, at)).collect()
    };
    let copy = parts(&plan.copy_partitions, "copy");
    let verify = parts(&plan.verify_partitions, "verify");
    let prune = parts(&plan.prune_partitions, "prune");
    let all = || copy.iter().chain(&verify).chain(&prune);
    let (bytes, bytes_done) = (
        copy.iter().map(|p| p.bytes).sum::<u64>(),
        copy.iter().map(|p| p.bytes_done).sum::<u64>(),
    );
    let rate = all().map(|p| p.bytes_per_second).sum::<u64>();
    let running = all().any(|p| p.state == JobState::Running);
    let all_done = all().all(|p| p.state == JobState::Done);
    // A live engine with no job running has jobs queued or is between two steps: running.
    let state = match () {
        _ if complete => PhaseState::Complete,
        _ if running => PhaseState::Running,
        _ if live && all_done => PhaseState::Finishing,
        _ if live => PhaseState::Running,
        _ if incomplete => PhaseState::Incomplete,
        _ if all_done && engine == EngineState::Unknown => PhaseState::Finishing,
        _ => PhaseState::Stopped,
    };
    let slowest = all()
        .filter(|p| p.state == JobState::Running)
        .max_by(|a, b| {
            a.eta_seconds
                .unwrap_or(0.0)
                .total_cmp(&b.eta_seconds.unwrap_or(0.0))
        })
        .map(|p| p.id.clone());
    let progress = PlanProgress {
        phase: plan.phase,
        copy: tally(&copy),
        verify: tally(&verify),
        prune: tally(&prune),
        files: Amount {
            planned: copy.iter().map(|p| p.files).sum(),
            done: copy.iter().map(|p| p.files_done).sum(),
        },
        bytes: Amount {
            planned: bytes,
            done: bytes_done,
        },
        bytes_per_second: rate,
        eta_seconds: (rate > 0).then(|| bytes.saturating_sub(bytes_done) as f64 / rate as f64),
        slowest_running: slowest,
        partitions: StepPartitions {
            copy,
            verify,
            prune,
        },
    };
    doc(state, None, Some(progress))
}

fn percent(done: f64, of: f64) -> String {
    if of > 0.0 {
        format!("{:.1}%", 100.0 * done / of)
    } else {
        "-".into()
    }
}

fn text(st: &StatusDoc) -> String {
    let state = serde_json::to_value(st.state).unwrap_or_default();
    let mut out = format!(
        "ferry status {}: {}\n",
        st.run_dir,
        state.as_str().unwrap_or_default()
    );
    match st.engine {
        EngineState::Running => out += "  engine: running\n",
        EngineState::Ended => out += "  engine: ended\n",
        EngineState::Unknown => {}
    }
    for side in st.listing.iter().flatten() {
        let jobs = side.jobs.map_or("?".into(), |n| n.to_string());
        out += &format!(
            "  {} listing: {} of {jobs} list jobs done\n",
            side.side, side.done
        );
    }
    let Some(p) = &st.progress else {
        return out;
    };
    let steps = [
        ("copy", &p.copy),
        ("verify", &p.verify),
        ("prune", &p.prune),
    ];
    // A pass that deletes nothing has no prune partitions to speak of.
    for (step, t) in steps
        .into_iter()
        .filter(|(step, t)| *step != "prune" || t.planned > 0)
    {
        out += &format!(
            "  {step} partitions: {} done, {} running, {} failed, {} stopped, {} pending (of {})\n",
            t.done, t.running, t.failed, t.stopped, t.pending, t.planned
        );
    }
    let (fd, fp) = (p.files.done, p.files.planned);
    let (bd, bp) = (p.bytes.done, p.bytes.planned);
    out += &format!(
        "  copied: {fd} of {fp} files ({}), {} of {} ({})\n",
        percent(fd as f64, fp as f64),
        human_bytes(bd),
        human_bytes(bp),
        percent(bd as f64, bp as f64)
    );
    let eta = p
        .eta_seconds
        .map_or("unknown".into(), |s| format!("{s:.0} s"));
    out += &format!(
        "  throughput: {}/s, ETA {eta}\n",
        human_bytes(p.bytes_per_second)
    );
    if let Some(id) = &p.slowest_running {
        out += &format!("  slowest running partition: {id}\n");
    }
    out + &nodes(&p.partitions)
}

/// Which Slurm node each copy and verify job runs or ran on, one line per node.
fn nodes(parts: &StepPartitions) -> String {
    let mut by_node = std::collections::BTreeMap::<&str, Vec<String>>::new();
    for (step, list) in [("copy", &parts.copy), ("verify", &parts.verify)] {
        for p in list {
            if let Some(node) = &p.node {
                by_node
                    .entry(node)
                    .or_default()
                    .push(format!("{step} {}", p.id));
            }
        }
    }
    by_node
        .into_iter()
        .map(|(node, jobs)| format!("  on {node}: {}\n", jobs.join(", ")))
        .collect()
}

fn show(st: &StatusDoc, as_json: bool, redraw: bool) {
    let mut stdout = std::io::stdout().lock();
    let body = if as_json {
        format!(
            "{}\n",
            serde_json::to_string(st).expect("documents always serialise")
        )
    } else {
        text(st)
    };
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
    use serde_json::{json, Value};

    fn write(dir: &Path, rel: &str, v: Value) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, v.to_string()).unwrap();
    }

    /// A progress file as a copy job on another machine writes it.
    fn progress(updated: f64, files: u64, bytes: u64, rate: u64) -> Value {
        serde_json::to_value(ProgressDoc {
            version: Default::default(),
            command: "copy".into(),
            pid: 1,
            host: "another-machine".into(),
            node: Some("node2".into()),
            started: 0.0,
            updated,
            finished: false,
            files: crate::documents::FileCount {
                done: files,
                failed: 0,
                total: None,
            },
            bytes: crate::documents::Count {
                done: bytes,
                total: None,
            },
            bytes_per_second: rate,
            requests: Default::default(),
        })
        .unwrap()
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
            "copy_partitions": [part("0"), part("1"), part("2"), part("3"), part("4")], "verify_partitions": [],
            "prune_partitions": [part("00001"), part("00002")]}),
        );
        write(dir, "copy/part-0.json", json!({"files": {"copied": 10}}));
        write(
            dir,
            "progress/copy-part-1.json",
            progress(995.0, 4, 400, 60),
        );
        write(
            dir,
            "progress/copy-part-2.json",
            progress(900.0, 2, 200, 50),
        );
        write(dir, "failed/copy-part-3.json", json!({}));
        write(dir, "prune/part-00001.json", json!({"deleted": 10}));
        let st = status(dir, 1000.0);
        let p = st.progress.as_ref().unwrap();
        let states: Vec<_> = p.partitions.copy.iter().map(|p| p.state).collect();
        use JobState::*;
        assert_eq!(states, [Done, Running, Stopped, Failed, Pending]);
        assert_eq!(st.state, PhaseState::Running);
        assert_eq!(p.copy.done, 1);
        assert_eq!(p.bytes.done, 1600);
        assert_eq!(p.bytes_per_second, 60);
        assert_eq!(p.eta_seconds, Some((5000.0 - 1600.0) / 60.0));
        assert_eq!(p.slowest_running.as_deref(), Some("1"));
        let pruned: Vec<_> = p.partitions.prune.iter().map(|p| p.state).collect();
        assert_eq!(pruned, [Done, Pending]);
        assert_eq!((p.prune.planned, p.prune.done), (2, 1));
        assert!(text(&st).contains(
            "prune partitions: 1 done, 0 running, 0 failed, 0 stopped, 1 pending (of 2)"
        ));
        // Each job's node, from its progress file (a done job's progress stays, naming it too).
        assert_eq!(p.partitions.copy[1].node.as_deref(), Some("node2"));
        assert!(text(&st).contains("  on node2: copy 1, copy 2\n"));
        // Counts are integers in the document, never floats.
        let doc = serde_json::to_value(&st).unwrap();
        assert_eq!(doc["progress"]["files"]["planned"], json!(50));
        assert!(doc["progress"]["partitions"]["copy"][4]["files_done"].is_u64());
        // Later, nothing has been rewritten: the run was stopped (killed), not running.
        assert_eq!(status(dir, 2000.0).state, PhaseState::Stopped);
    }

    #[test]
    fn before_the_plan_and_after_the_report() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(status(tmp.path(), 0.0).state, PhaseState::Listing);
        write(tmp.path(), "listing/source.tsv", json!(null));
        // Not the baseline (by its name): the destination is listed too, and planning waits.
        assert_eq!(status(tmp.path(), 0.0).state, PhaseState::Listing);
        write(tmp.path(), "listing/dest.tsv", json!(null));
        assert_eq!(status(tmp.path(), 0.0).state, PhaseState::Planning);
        write(
            tmp.path(),
            "plan/plan.json",
            json!({"phase": "baseline", "copy_partitions": [], "verify_partitions": [],
                "prune_partitions": []}),
        );
        write(tmp.path(), "report.json", json!({"status": "complete"}));
        assert_eq!(status(tmp.path(), 0.0).state, PhaseState::Complete);
    }
}
