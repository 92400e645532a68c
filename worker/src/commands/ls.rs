use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use tokio::sync::mpsc;

use super::{default_concurrency, open, open_options, parse_location, resolve, Root};
use crate::carried::Decision;

use super::args::{CarriedArgs, CarriedChoice, Common, Filters, ListShard, PreserveArgs, Sorting};
use crate::keyspace::Cuts;
use crate::manifest::{self, Entry};
use crate::shard::ShardsDoc;
use crate::stats::Stats;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Tsv,
    Jsonl,
}

#[derive(Args, Debug)]
pub struct LsArgs {
    pub location: String,
    /// Descend into directories / prefixes
    #[arg(short, long)]
    pub recursive: bool,
    #[arg(long, value_enum, default_value = "tsv")]
    pub format: Format,
    /// Also write a JSON summary (entries, seconds, requests by kind) to FILE: the listing has
    /// stdout
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    #[command(flatten)]
    pub preserve: PreserveArgs,
    #[command(flatten)]
    pub filters: Filters,
    #[command(flatten)]
    pub carried: CarriedArgs,
    #[command(flatten)]
    pub choice: CarriedChoice,
    #[command(flatten)]
    pub shard: ListShard,
    #[command(flatten)]
    pub sorting: Sorting,
    #[command(flatten)]
    pub common: Common,
}

/// One list job of several (`--shards`, `--shard K`): its cuts, K, and the shards document.
fn list_shard(args: &LsArgs) -> anyhow::Result<Option<(Cuts, usize, ShardsDoc)>> {
    Ok(match (&args.shard.shards, args.shard.shard) {
        (Some(path), Some(k)) => {
            anyhow::ensure!(
                args.recursive,
                "--shard lists a range of a recursive listing: pass --recursive"
            );
            let doc = ShardsDoc::read(path)?;
            if k > doc.jobs {
                bail!(
                    "--shard {k}: {} cuts the listing into {} ranges",
                    path.display(),
                    doc.jobs
                );
            }
            Some((doc.cuts()?, k as usize, doc))
        }
        _ => None,
    })
}

/// The destination's carried state (--carried): used or not, decided here, or as `ferry shard`
/// decided it for every list job (`doc`).
async fn carried_decision(
    args: &LsArgs,
    loc: &crate::location::Location,
    opts: &crate::storage::OpenOptions,
    doc: Option<&ShardsDoc>,
) -> anyhow::Result<Option<Decision>> {
    let pass = args.carried.pass.as_deref().unwrap_or_default();
    let scratch = args.sorting.scratch.as_deref();
    Ok(match (&args.carried.state, doc) {
        (None, _) => None,
        (Some(state), None) => {
            anyhow::ensure!(
                args.recursive,
                "--carried stands for a recursive listing: pass --recursive"
            );
            let choice = &args.choice;
            Some(
                super::carried_or_fresh(
                    state,
                    pass,
                    loc,
                    opts,
                    choice.probe,
                    choice.fresh,
                    scratch,
                )
                .await?,
            )
        }
        (Some(state), Some(doc)) => {
            Some(super::carried_as_decided(doc, state, pass, loc, opts, scratch).await?)
        }
    })
}

/// `--summary`'s document.
fn write_summary(
    path: &std::path::Path,
    entries: u64,
    started: Instant,
    stats: &Stats,
    carried: Option<&Decision>,
    shard: Option<&(Cuts, usize, ShardsDoc)>,
) -> anyhow::Result<()> {
    let summary = crate::documents::LsSummary {
        version: Default::default(),
        command: "ls",
        entries,
        seconds: super::seconds(started),
        requests: stats.requests.counts(),
        carried: carried.map(|c| c.summary()),
        shard: shard.map(|(_, k, doc)| crate::documents::ShardOf {
            index: *k as u32,
            of: doc.jobs,
        }),
    };
    crate::jsonfile::replace(path, &summary)
        .with_context(|| format!("cannot write the summary {}", path.display()))?;
    Ok(())
}

pub async fn run(args: LsArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let stats = Arc::new(Stats::default());
    let opts = crate::storage::OpenOptions {
        xattrs: crate::xattrs::Wanted::of(&args.preserve.preserve),
        ..open_options(&args.common, default_concurrency(), stats.clone())
    };
    let loc = parse_location(&args.location)?;
    let filter = super::build_filter(&args.filters)?;
    // One list job of several: its range, and the decision `ferry shard` made for all of them.
    let shard = list_shard(&args)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut line = String::new();
    let mut tally = manifest::Tally::default();
    let mut emit = |e: &Entry, out: &mut dyn Write| -> std::io::Result<()> {
        tally.add(e);
        match args.format {
            Format::Tsv => {
                line.clear();
                manifest::format_tsv(e, &mut line);
                out.write_all(line.as_bytes())
            }
            Format::Jsonl => writeln!(out, "{}", manifest::format_jsonl(e)),
        }
    };
    if args.format == Format::Tsv {
        writeln!(out, "{}", manifest::HEADER)?;
    }
    let carried = carried_decision(&args, &loc, &opts, shard.as_ref().map(|s| &s.2)).await?;
    let range = shard.as_ref().map(|(cuts, k, _)| cuts.range(*k));
    if let Some(Decision::Carried { listing, .. }) = &carried {
        // Entries as the last pass left them: the filters (and the job's range) apply as to a
        // fresh listing.
        for e in manifest::Reader::open_whole(listing)? {
            let e = e.map_err(anyhow::Error::msg)?;
            if filter.matches(&e.path) && range.as_ref().is_none_or(|r| r.contains(&e.path)) {
                emit(&e, &mut out)?;
            }
        }
    } else {
        // A pass's destination (--carried) may hold nothing yet: a Blob prefix with nothing
        // under it is then an empty destination, not a missing source.
        let root = match (&loc, args.carried.state.is_some()) {
            (crate::location::Location::Blob(_), true) => Root::Tree(loc.clone()),
            _ => resolve(&loc, &opts, true).await?,
        };
        match root {
            Root::Object { entry, name, .. } => {
                // One object is one range's: the first.
                if shard.as_ref().is_none_or(|(_, k, _)| *k == 1) {
                    emit(
                        &Entry {
                            path: name,
                            ..entry
                        },
                        &mut out,
                    )?
                }
            }
            Root::Tree(loc) => {
                let store = open(&loc, &opts)?;
                let (tx, mut rx) = mpsc::channel(4096);
                let recursive = args.recursive;
                let part: Option<(Cuts, usize)> = shard.as_ref().map(|(c, k, _)| (c.clone(), *k));
                let lister = tokio::spawn(async move {
                    match part {
                        Some((cuts, k)) => store.list_range(&cuts, k, tx).await,
                        None => store.list(recursive, tx).await,
                    }
                });
                // Entries are written as they arrive: constant memory whatever the tree's size.
                while let Some(item) = rx.recv().await {
                    let e = item?;
                    if filter.matches(&e.path) {
                        emit(&e, &mut out)?;
                    }
                }
                lister.await??;
            }
        }
    }
    // Only a listing that got here is whole: any error above left the manifest without it.
    if args.format == Format::Tsv {
        out.write_all(tally.end_line().as_bytes())?;
    }
    out.flush()?;
    drop(out);
    if let Some(path) = &args.summary {
        let (carried, shard) = (carried.as_ref(), shard.as_ref());
        write_summary(path, tally.entries, started, &stats, carried, shard)?;
    }
    Ok(ExitCode::SUCCESS)
}
