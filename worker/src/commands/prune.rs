use std::collections::HashSet;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use serde_json::json;

use super::{default_concurrency, open, open_options, parse_location, read_manifest};
use crate::cli::Common;
use crate::manifest::{Entry, Kind, Writer};
use crate::stats::Stats;
use crate::storage;

#[derive(Args, Debug)]
pub struct PruneArgs {
    pub source: String,
    pub dest: String,
    /// The source as a manifest instead of a fresh listing (e.g. the pipeline's own listing)
    #[arg(long, value_name = "MANIFEST")]
    pub files_from: Option<PathBuf>,
    /// List what would be deleted; delete nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Refuse if more than this would go: a count (1000) or a share of the destination (10%)
    #[arg(long, default_value = "50%", value_parser = parse_limit)]
    pub max_delete: Limit,
    /// Delete even past --max-delete, or when the source is empty
    #[arg(long)]
    pub force: bool,
    /// Where to write the list of deletions, in manifest format (default:
    /// $XDG_STATE_HOME/ferry/prune-<time>.tsv, i.e. ~/.local/state/ferry/ unless set)
    #[arg(long)]
    pub log: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Clone, Copy, Debug)]
pub enum Limit {
    Count(u64),
    Percent(f64),
}

fn parse_limit(s: &str) -> Result<Limit, String> {
    match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok().filter(|p| (0.0..=100.0).contains(p)).map(Limit::Percent).ok_or_else(|| format!("bad percentage {s:?}")),
        None => s.trim().parse().map(Limit::Count).map_err(|_| format!("--max-delete takes a count or a percentage, got {s:?}")),
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Count(c) => write!(f, "{c}"),
            Limit::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Limit {
    fn allows(self, n: u64, of: u64) -> bool {
        match self {
            Limit::Count(c) => n <= c,
            Limit::Percent(p) => of == 0 || (n as f64) <= of as f64 * p / 100.0,
        }
    }
}

/// Where a prune keeps its record of deletions when not told: the user's state directory, never
/// the current one (which may be a job's scratch space, or the tree being pruned).
fn default_log() -> anyhow::Result<PathBuf> {
    let state = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).context("neither --log, XDG_STATE_HOME nor HOME is set: say where the deletion log goes with --log")?;
            PathBuf::from(home).join(".local/state")
        }
    };
    let dir = state.join("ferry");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {} for the deletion log (or pass --log)", dir.display()))?;
    Ok(dir.join(format!("prune-{}.tsv", unix_now())))
}

pub async fn run(args: PruneArgs) -> anyhow::Result<ExitCode> {
    let concurrency = default_concurrency();
    let stats = Arc::new(Stats::default());
    let opts = open_options(&args.common, concurrency, stats.clone());
    let src = open(&parse_location(&args.source)?, &opts)?;
    let dst = open(&parse_location(&args.dest)?, &opts)?;
    let log_path = match args.log.clone() {
        Some(p) => p,
        None => default_log()?,
    };

    let refuse = |why: String| -> anyhow::Result<ExitCode> {
        if args.json {
            super::print_json(&json!({"command": "prune", "dry_run": args.dry_run, "deleted": 0, "would_delete": 0, "refused": why, "log": null}));
        }
        eprintln!("prune refused, nothing deleted: {why}");
        Ok(ExitCode::from(1))
    };

    // A source we could not read completely must never be mistaken for one that lost files.
    let source = match &args.files_from {
        Some(m) => read_manifest(m),
        None => storage::list_all(&src, true).await.map_err(anyhow::Error::from),
    };
    let source = match source {
        Ok(s) => s,
        Err(e) => return refuse(format!("the source listing failed ({e:#})")),
    };
    if source.is_empty() && !args.force {
        return refuse(format!("the source {} lists no entries; pass --force if it really is empty", src.describe()));
    }
    let keep: HashSet<Vec<u8>> = source.into_iter().map(|e| e.path).collect();
    let dest = match storage::list_all(&dst, true).await {
        Ok(d) => d,
        Err(e) => return refuse(format!("the destination listing failed ({e})")),
    };
    let dest_files = dest.iter().filter(|e| e.kind != Kind::Dir).count() as u64;
    let (files, dirs) = plan(dest, &keep);
    let n = files.len() as u64;
    let over_limit = (!args.force && !args.max_delete.allows(n, dest_files)).then(|| {
        format!("{n} of {dest_files} destination files would be deleted, more than --max-delete {} allows", args.max_delete)
    });
    if let (Some(why), false) = (&over_limit, args.dry_run) {
        return refuse(format!("{why}; review with --dry-run, then pass --force or raise --max-delete"));
    }

    let mut log = Writer::new(BufWriter::new(std::fs::File::create(&log_path).with_context(|| format!("cannot write {}", log_path.display()))?))?;
    let mut deleted = 0u64;
    if args.dry_run {
        for e in files.iter().chain(&dirs) {
            log.write(e)?;
        }
    } else {
        let mut results = futures::stream::iter(files.clone())
            .map(|e| {
                let dst = dst.clone();
                async move {
                    let r = dst.delete(&e.path).await;
                    (e, r)
                }
            })
            .buffer_unordered(concurrency * 2);
        // The log holds what was deleted, written as it happens: a run cut short still says
        // what it did.
        while let Some((e, r)) = results.next().await {
            match r {
                Ok(()) => {
                    deleted += 1;
                    log.write(&e)?;
                }
                Err(err) => stats.failed(e.display_path(), err.to_string()),
            }
        }
        for d in &dirs {
            // A directory still holding something (a file whose deletion failed, or one that
            // appeared since the listing) stays, and is reported: the destination is not what
            // the source says it should be.
            match dst.delete(&d.path).await {
                Ok(()) => log.write(d)?,
                Err(err) => stats.failed(d.display_path(), format!("directory not deleted: {err}")),
            }
        }
    }
    log.finish()?;
    let failed = Stats::get(&stats.files_failed);
    if args.json {
        let failures: Vec<_> = stats.failures().into_iter().map(|(p, e)| json!({"path": p, "error": e})).collect();
        super::print_json(&json!({
            "command": "prune", "dry_run": args.dry_run, "deleted": deleted, "would_delete": n,
            "dirs": dirs.len(), "failed": failed, "failures": failures, "refused": null,
            "warning": over_limit, "log": log_path.display().to_string(),
        }));
    } else if args.dry_run {
        for e in files.iter().chain(&dirs) {
            println!("would delete\t{}", e.display_path());
        }
        eprintln!("would delete {n} of {dest_files} destination files and {} directories; list in {}", dirs.len(), log_path.display());
        if let Some(why) = &over_limit {
            eprintln!("note: a real run would be refused: {why}");
        }
    } else {
        eprintln!("deleted {deleted} of {dest_files} destination files, failed {failed}; list in {}", log_path.display());
        for (p, e) in stats.failures() {
            eprintln!("failed: {p}: {e}");
        }
    }
    Ok(if failed > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// What goes: destination entries the source lacks, and the directories (local destinations
/// only) that hold nothing the source keeps, deepest first.
fn plan(dest: Vec<Entry>, keep: &HashSet<Vec<u8>>) -> (Vec<Entry>, Vec<Entry>) {
    let mut occupied: HashSet<&[u8]> = HashSet::new();
    for e in dest.iter().filter(|e| keep.contains(&e.path)) {
        let mut p = &e.path[..];
        while let Some(slash) = p.iter().rposition(|&b| b == b'/') {
            p = &p[..slash];
            if !occupied.insert(p) {
                break;
            }
        }
    }
    let (mut dirs, files): (Vec<Entry>, Vec<Entry>) = dest
        .iter()
        .filter(|e| !keep.contains(&e.path) && !(e.kind == Kind::Dir && occupied.contains(&e.path[..])))
        .cloned()
        .partition(|e| e.kind == Kind::Dir);
    dirs.sort_by(|a, b| b.path.len().cmp(&a.path.len()).then_with(|| a.path.cmp(&b.path)));
    (files, dirs)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
