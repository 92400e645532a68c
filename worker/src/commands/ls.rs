use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio::sync::mpsc;

use super::{default_concurrency, open, open_options, parse_location, resolve, Root};
use crate::carried::Decision;
use crate::cli::{Format, LsArgs};
use crate::location::Location;
use crate::manifest::{self, Entry};
use crate::stats::Stats;
use crate::storage::OpenOptions;

pub async fn run(args: LsArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let stats = Arc::new(Stats::default());
    let opts = crate::storage::OpenOptions {
        xattrs: crate::xattrs::Wanted::of(&args.preserve.preserve),
        ..open_options(&args.common, default_concurrency(), stats.clone())
    };
    let loc = parse_location(&args.location)?;
    let filter = super::build_filter(&args.filters)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut line = String::new();
    let mut entries = 0u64;
    let mut emit = |e: &Entry, out: &mut dyn Write| -> std::io::Result<()> {
        entries += 1;
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
    let carried = match &args.carried.state {
        Some(state) => Some(carried_or_fresh(&args, state, &loc, &opts).await?),
        None => None,
    };
    if let Some(Decision::Carried { listing, .. }) = &carried {
        // Entries as the last pass left them: the filters apply as to a fresh listing.
        for e in manifest::Reader::open(listing)? {
            let e = e.map_err(anyhow::Error::msg)?;
            if filter.matches(&e.path) {
                emit(&e, &mut out)?;
            }
        }
    } else {
        match resolve(&loc, &opts, true).await? {
            Root::Object { entry, name, .. } => emit(
                &Entry {
                    path: name,
                    ..entry
                },
                &mut out,
            )?,
            Root::Tree(loc) => {
                let store = open(&loc, &opts)?;
                let (tx, mut rx) = mpsc::channel(4096);
                let lister = tokio::spawn(async move { store.list(args.recursive, tx).await });
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
    out.flush()?;
    drop(out);
    if let Some(path) = &args.summary {
        let summary = crate::documents::LsSummary {
            version: Default::default(),
            command: "ls",
            entries,
            seconds: super::seconds(started),
            requests: stats.requests.counts(),
            carried: carried.as_ref().map(|c| c.summary()),
        };
        crate::jsonfile::replace(path, &summary)
            .with_context(|| format!("cannot write the summary {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the carried state of `loc` stands for a fresh listing this pass (it is taken either
/// way: from now on this pass writes the destination).
async fn carried_or_fresh(
    args: &LsArgs,
    state: &str,
    loc: &Location,
    opts: &OpenOptions,
) -> anyhow::Result<Decision> {
    anyhow::ensure!(
        args.recursive,
        "--carried stands for a recursive listing: pass --recursive"
    );
    let pass = args.carried.pass.as_deref().unwrap_or_default();
    let state = super::state_of(state, loc, opts)?;
    let dest = open(loc, opts)?;
    let decision = if args.fresh {
        state.take(pass).await?;
        Decision::Fresh("a fresh listing was asked for".into())
    } else {
        state
            .decide(&dest, pass, args.probe, args.sorting.scratch.as_deref())
            .await?
    };
    match &decision {
        Decision::Carried { doc, probed, .. } => eprintln!(
            "ferry ls: {} as {} left it ({} entries; {probed} probed, all as carried)",
            dest.describe(),
            doc.written_by,
            doc.entries
        ),
        Decision::Fresh(why) => eprintln!("ferry ls: listing {} fresh: {why}", dest.describe()),
    }
    Ok(decision)
}
