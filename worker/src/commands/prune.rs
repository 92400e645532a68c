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
    /// Where to write the list of deletions, in manifest format (default: ferry-prune-<time>.tsv)
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

impl Limit {
    fn allows(self, n: u64, of: u64) -> bool {
        match self {
            Limit::Count(c) => n <= c,
            Limit::Percent(p) => of == 0 || (n as f64) <= of as f64 * p / 100.0,
        }
    }
}

pub async fn run(args: PruneArgs) -> anyhow::Result<ExitCode> {
    let concurrency = default_concurrency();
    let stats = Arc::new(Stats::default());
    let opts = open_options(&args.common, concurrency, stats.clone());
    let src = open(&parse_location(&args.source)?, &opts)?;
    let dst = open(&parse_location(&args.dest)?, &opts)?;
    let log_path = args.log.clone().unwrap_or_else(|| PathBuf::from(format!("ferry-prune-{}.tsv", unix_now())));

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
    let (mut dirs, files): (Vec<Entry>, Vec<Entry>) = dest.into_iter().filter(|e| !keep.contains(&e.path)).partition(|e| e.kind == Kind::Dir);
    let n = files.len() as u64;
    if !args.force && !args.max_delete.allows(n, dest_files) {
        return refuse(format!("{n} of {dest_files} destination files would be deleted, more than --max-delete {:?} allows; review with --dry-run, then pass --force or raise --max-delete", args.max_delete));
    }

    let mut log = Writer::new(BufWriter::new(std::fs::File::create(&log_path).with_context(|| format!("cannot write {}", log_path.display()))?))?;
    for e in &files {
        log.write(e)?;
    }
    let mut deleted = 0u64;
    if !args.dry_run {
        let results: Vec<(Entry, Result<(), crate::error::StoreError>)> = futures::stream::iter(files.clone())
            .map(|e| {
                let dst = dst.clone();
                async move {
                    let r = dst.delete(&e.path).await;
                    (e, r)
                }
            })
            .buffer_unordered(concurrency * 2)
            .collect()
            .await;
        for (e, r) in results {
            match r {
                Ok(()) => deleted += 1,
                Err(err) => stats.failed(e.display_path(), err.to_string()),
            }
        }
        // Emptied directories go after their contents, deepest first; a directory that still
        // holds something the source has is left alone.
        if dst.local_root().is_some() {
            dirs.sort_by(|a, b| b.path.len().cmp(&a.path.len()));
            for d in dirs {
                if dst.delete(&d.path).await.is_ok() {
                    log.write(&d)?;
                }
            }
        }
    }
    log.finish()?;
    let failed = Stats::get(&stats.files_failed);
    if args.json {
        let failures: Vec<_> = stats.failures().into_iter().map(|(p, e)| json!({"path": p, "error": e})).collect();
        super::print_json(&json!({
            "command": "prune", "dry_run": args.dry_run, "deleted": deleted, "would_delete": n,
            "failed": failed, "failures": failures, "refused": null, "log": log_path.display().to_string(),
        }));
    } else if args.dry_run {
        for e in &files {
            println!("would delete\t{}", e.display_path());
        }
        eprintln!("would delete {n} of {dest_files} destination files; list in {}", log_path.display());
    } else {
        eprintln!("deleted {deleted} of {dest_files} destination files, failed {failed}; list in {}", log_path.display());
    }
    Ok(if failed > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
