use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio::sync::mpsc;

use super::{default_concurrency, open, open_options, parse_location, resolve, Root};
use crate::cli::{Format, LsArgs};
use crate::manifest::{self, Entry};
use crate::stats::Stats;

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
    out.flush()?;
    drop(out);
    if let Some(path) = &args.summary {
        let summary = crate::documents::LsSummary {
            version: Default::default(),
            command: "ls",
            entries,
            seconds: super::seconds(started),
            requests: stats.requests.counts(),
        };
        crate::jsonfile::replace(path, &summary)
            .with_context(|| format!("cannot write the summary {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
