use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use super::{complete_entries, default_concurrency, entries_of, object_destination, open, open_options, parse_location, resolve, Root};
use crate::cli::CopyArgs;
use crate::engine::{Compare, Engine, EngineOptions, Job};
use crate::filter;
use crate::manifest::{Entry, Kind};
use crate::progress::{self, Progress};
use crate::stats::Stats;
use crate::storage::{self, OpenOptions, Store};
use crate::units::human_bytes;

pub async fn run(args: CopyArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let stats = Arc::new(Stats::default());
    let concurrency = args.transfer.concurrency.unwrap_or_else(default_concurrency).max(1);
    let parallel_files = args.transfer.parallel_files.unwrap_or(concurrency * 2).max(1);
    let opts = OpenOptions { copy_wait: args.server_copy_timeout.map(Duration::from_secs), ..open_options(&args.common, concurrency, stats.clone()) };
    let src_loc = parse_location(&args.source)?;
    let dst_loc = parse_location(&args.dest)?;
    let filter = super::build_filter(&args.filters)?;

    let (src, dst, mut entries, rename) = match resolve(&src_loc, &opts).await? {
        Root::Object { parent, entry } => {
            if args.files_from.is_some() {
                anyhow::bail!("--files-from needs a directory or prefix as SOURCE, not a single file");
            }
            let (dst_parent, dst_name) = object_destination(&dst_loc, &entry.path);
            (open(&parent, &opts)?, open(&dst_parent, &opts)?, vec![entry], Some(dst_name))
        }
        Root::Tree(loc) => {
            let src = open(&loc, &opts)?;
            let entries = match args.files_from.as_deref() {
                Some(m) => entries_of(&src, Some(m), args.recursive).await?,
                None => {
                    // What could be listed is copied; what could not (an unreadable directory,
                    // say) is reported as failed, so the run ends with exit 1, not 0.
                    let (entries, errors) = storage::list_partial(&src, args.recursive).await;
                    if entries.is_empty() && !errors.is_empty() {
                        let e = anyhow::Error::from(errors.into_iter().next().expect("not empty"));
                        return Err(e.context(format!("listing {} failed", src.describe())));
                    }
                    for e in errors {
                        stats.failed(src.describe(), format!("listing: {e}"));
                    }
                    entries
                }
            };
            (src, open(&dst_loc, &opts)?, entries, None)
        }
    };
    let both_local = src.local_root().is_some() && dst.local_root().is_some();
    entries.retain(|e| filter.matches(&e.path) && (e.kind != Kind::Dir || both_local));
    complete_entries(&src, &mut entries, concurrency).await?;
    if let Some(s) = args.shard {
        entries = filter::shard(entries, s);
    }
    // Largest first: the long transfers start early instead of straggling at the end.
    entries.sort_by(|a, b| b.size().cmp(&a.size()).then_with(|| a.path.cmp(&b.path)));
    Stats::add(&stats.files_total, entries.iter().filter(|e| e.kind != Kind::Dir).count() as u64);
    Stats::add(&stats.bytes_total, entries.iter().map(Entry::size).sum());

    // One object is checked with a HEAD; a tree against one listing of the destination.
    let dst_index = if args.compare != Compare::None && dst.local_root().is_none() && rename.is_none() {
        Some(index_of(&dst).await?)
    } else {
        None
    };
    let jobs: Vec<Job> = entries.into_iter().map(|e| Job { dst_path: rename.clone().unwrap_or_else(|| e.path.clone()), src: e }).collect();
    let engine = Arc::new(Engine::new(
        src.clone(),
        dst.clone(),
        EngineOptions {
            compare: args.compare,
            concurrency,
            parallel_files,
            block_size: args.transfer.block_size,
            put_md5: args.put_md5,
            max_bandwidth: args.transfer.max_bandwidth,
            server_copy: args.server_copy && dst.can_copy_from(&*src),
        },
        stats.clone(),
        dst_index,
    ));

    if args.dry_run {
        dry_run(&engine, jobs, &stats, args.json).await;
    } else {
        let bar = progress::wanted(args.progress, args.no_progress).then(|| Progress::start(stats.clone()));
        engine.run(jobs).await;
        if let Some(b) = bar {
            b.finish();
        }
    }
    // Every file ends copied, skipped, failed or ignored; one without an outcome is a bug, and
    // must not end in exit 0.
    let g = Stats::get;
    let accounted = g(&stats.files_copied) + g(&stats.files_skipped) + g(&stats.files_failed) + g(&stats.files_ignored);
    if accounted < g(&stats.files_total) {
        stats.failed(dst.describe(), format!("internal error: {} files have no outcome", g(&stats.files_total) - accounted));
    }
    report(&args, &src, &dst, &stats, started.elapsed().as_secs_f64());
    Ok(if Stats::get(&stats.files_failed) > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The destination's listing by path. A missing container is an error here, before any
/// transfer starts, rather than one failure per file.
async fn index_of(dst: &Arc<dyn Store>) -> anyhow::Result<HashMap<Vec<u8>, Entry>> {
    match storage::list_all(dst, true).await {
        Ok(listed) => Ok(listed.into_iter().map(|e| (e.path.clone(), e)).collect()),
        Err(e) if e.to_string().contains("ContainerNotFound") => {
            anyhow::bail!("the container of {} does not exist: create it with `ferry mk` ({e})", dst.describe())
        }
        Err(e) => Err(anyhow::Error::from(e).context(format!("cannot list the destination {}", dst.describe()))),
    }
}

async fn dry_run(engine: &Arc<Engine>, jobs: Vec<Job>, stats: &Stats, json: bool) {
    let decisions: Vec<(Job, anyhow::Result<bool>)> = futures::stream::iter(jobs)
        .map(|j| {
            let e = engine.clone();
            async move {
                let r = if j.src.kind == Kind::Dir { Ok(false) } else { e.needs_copy(&j).await.map_err(anyhow::Error::from) };
                (j, r)
            }
        })
        .buffered(engine.opts.parallel_files)
        .collect()
        .await;
    for (j, r) in decisions {
        match r {
            Ok(true) => {
                if engine.server_side(&j) {
                    stats.server_copied(j.src.size());
                } else {
                    Stats::add(&stats.files_copied, 1);
                    Stats::add(&stats.bytes_copied, j.src.size());
                }
                if !json {
                    println!("would copy\t{}\t{}", j.src.display_path(), j.src.size());
                }
            }
            Ok(false) if j.src.kind == Kind::Dir => {}
            Ok(false) => {
                Stats::add(&stats.files_skipped, 1);
                Stats::add(&stats.bytes_skipped, j.src.size());
            }
            Err(e) => stats.failed(j.src.display_path(), format!("{e:#}")),
        }
    }
}

fn report(args: &CopyArgs, src: &Arc<dyn Store>, dst: &Arc<dyn Store>, stats: &Stats, seconds: f64) {
    let g = Stats::get;
    if args.json {
        let failures: Vec<_> = stats.failures().into_iter().map(|(p, e)| json!({"path": p, "error": e})).collect();
        let ignored: Vec<_> = stats.ignored_list().into_iter().map(|(p, why)| json!({"path": p, "reason": why})).collect();
        super::print_json(&json!({
            "command": "copy",
            "source": src.describe(),
            "dest": dst.describe(),
            "dry_run": args.dry_run,
            "files": {"total": g(&stats.files_total), "copied": g(&stats.files_copied), "skipped": g(&stats.files_skipped),
                      "failed": g(&stats.files_failed), "ignored": g(&stats.files_ignored), "server_copied": g(&stats.files_server_copied)},
            "bytes": {"total": g(&stats.bytes_total), "copied": g(&stats.bytes_copied), "skipped": g(&stats.bytes_skipped),
                      "server_copied": g(&stats.bytes_server_copied)},
            "blocks": {"sent": g(&stats.blocks_sent), "reused": g(&stats.blocks_reused)},
            "retries": {"total": g(&stats.retries_total), "by_status": stats.retries_by_status()},
            "failures": failures,
            "ignored": ignored,
            "seconds": (seconds * 1000.0).round() / 1000.0,
        }));
        return;
    }
    let verb = if args.dry_run { "would copy" } else { "copied" };
    let server = match g(&stats.files_server_copied) {
        0 => String::new(),
        n => format!(", {n} server-side"),
    };
    eprintln!(
        "{verb} {} files ({}{server}), skipped {} ({}), failed {}, ignored {} in {:.2}s{}",
        g(&stats.files_copied),
        human_bytes(g(&stats.bytes_copied)),
        g(&stats.files_skipped),
        human_bytes(g(&stats.bytes_skipped)),
        g(&stats.files_failed),
        g(&stats.files_ignored),
        seconds,
        if g(&stats.retries_total) > 0 { format!(", retries {}", stats.retry_brief()) } else { String::new() }
    );
    for (p, e) in stats.failures() {
        eprintln!("failed: {p}: {e}");
    }
    for (p, why) in stats.ignored_list() {
        eprintln!("ignored: {p}: {why}");
    }
}
