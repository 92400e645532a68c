use std::process::ExitCode;
use std::sync::Arc;

use futures::StreamExt;

use super::args::{Common, Filters};
use super::{default_concurrency, open, open_options, parse_location, resolve, Root};
use crate::manifest::{Entry, Kind};
use crate::stats::Stats;
use crate::storage::{self, Store};
use clap::Args;

#[derive(Args, Debug)]
pub struct RmArgs {
    pub location: String,
    #[arg(short, long)]
    pub recursive: bool,
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub filters: Filters,
    #[command(flatten)]
    pub common: Common,
}

pub async fn run(args: RmArgs) -> anyhow::Result<ExitCode> {
    let concurrency = default_concurrency();
    let stats = Arc::new(Stats::default());
    let opts = open_options(&args.common, concurrency, stats.clone());
    let loc = parse_location(&args.location)?;
    let filter = super::build_filter(&args.filters)?;
    let (store, mut entries): (Arc<dyn Store>, Vec<Entry>) =
        match resolve(&loc, &opts, false).await? {
            Root::Object { parent, entry, .. } => (open(&parent, &opts)?, vec![entry]),
            Root::Tree(loc) => {
                if !args.recursive {
                    anyhow::bail!(
                    "{loc} is a directory or prefix: pass --recursive to delete what is under it"
                );
                }
                let store = open(&loc, &opts)?;
                let entries = storage::list_all(&store, true).await?;
                (store, entries)
            }
        };
    entries.retain(|e| filter.matches(&e.path));
    // Files first, then directories deepest first, so each directory is empty when its turn comes.
    let (mut dirs, files): (Vec<Entry>, Vec<Entry>) =
        entries.into_iter().partition(|e| e.kind == Kind::Dir);
    dirs.sort_by_key(|d| std::cmp::Reverse(d.path.len()));
    let deleted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let would_delete = (files.len() + dirs.len()) as u64;
    if args.dry_run {
        for e in files.iter().chain(&dirs) {
            if !args.json {
                println!("would delete\t{}", e.display_path());
            }
        }
    } else {
        let del = |e: Entry| {
            let store = store.clone();
            let stats = stats.clone();
            let deleted = deleted.clone();
            async move {
                match store.delete(&e.path).await {
                    Ok(()) => {
                        deleted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Err(err) => stats.failed(e.display_path(), err.to_string()),
                }
            }
        };
        futures::stream::iter(files)
            .for_each_concurrent(concurrency * 2, del)
            .await;
        for d in dirs {
            del(d).await;
        }
    }
    let n_deleted = deleted.load(std::sync::atomic::Ordering::Relaxed);
    let failed = Stats::get(&stats.files_failed);
    if args.json {
        let failures = stats.failures().into_iter();
        super::print_json(&crate::documents::RmDoc {
            version: Default::default(),
            command: "rm",
            dry_run: args.dry_run,
            deleted: n_deleted,
            would_delete,
            failed,
            failures: failures
                .map(|(path, error)| crate::documents::PathError { path, error })
                .collect(),
            requests: stats.requests.counts(),
        });
    } else if args.dry_run {
        eprintln!("would delete {would_delete} (listed above)");
    } else {
        eprintln!("deleted {n_deleted}, failed {failed}");
        for (p, e) in stats.failures() {
            eprintln!("failed: {p}: {e}");
        }
    }
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
