use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;

use super::{open, open_options, parse_location, print_json, state_of};
use crate::carried;
use crate::commands::args::{Common, Sorting};
use crate::documents::carry::CarryDoc;
use crate::sorted::Scratch;
use crate::stats::Stats;

#[derive(Args, Debug)]
pub struct CarryArgs {
    /// The destination the state describes
    pub dest: String,
    /// Where to leave it (a directory or Blob prefix outside the destination)
    #[arg(long, value_name = "STATE")]
    pub state: String,
    /// The pass leaving it (its run directory's name)
    #[arg(long, value_name = "NAME")]
    pub pass: String,
    /// The destination listing the pass planned against (none: a baseline, which listed nothing)
    #[arg(long, value_name = "MANIFEST")]
    pub listing: Option<PathBuf>,
    /// The listing's list jobs (`ferry shard`'s document): --listing names their files with
    /// {shard}
    #[arg(long, value_name = "FILE", requires = "listing")]
    pub shards: Option<PathBuf>,
    /// What a verify of the pass saw on the destination (`ferry verify --observed`); one per
    /// verify, covering every path the pass wrote
    #[arg(long, value_name = "MANIFEST", num_args = 0..)]
    pub observed: Vec<PathBuf>,
    /// What the pass's prune deleted (its --log); one per prune job
    #[arg(long, value_name = "MANIFEST", num_args = 0..)]
    pub deleted: Vec<PathBuf>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sorting: Sorting,
    #[command(flatten)]
    pub common: Common,
}

pub async fn run(args: CarryArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let stats = Arc::new(Stats::default());
    let opts = open_options(&args.common, 4, stats.clone());
    let dest_loc = parse_location(&args.dest)?;
    let dest = open(&dest_loc, &opts)?;
    let state = state_of(&args.state, &dest_loc, &opts)?;
    let scratch = Scratch::new(args.sorting.scratch.as_deref())?;
    let out = scratch.path().join("carried.tsv");
    let listing = match &args.listing {
        Some(l) => crate::shard::listing_files(l, args.shards.as_deref())?,
        None => Vec::new(),
    };
    let merged = carried::merge(
        &listing,
        &args.observed,
        &args.deleted,
        &out,
        scratch.path(),
        args.sorting.memory.budget(),
    )?;
    let doc = state
        .leave(&dest.describe(), &args.pass, &out, &merged)
        .await?;
    eprintln!(
        "ferry carry: {} entries of {} left at {} ({} seen by verifies, {} deleted)",
        merged.entries,
        dest.describe(),
        state.describe(),
        merged.observed,
        merged.deleted
    );
    if args.json {
        print_json(&serde_json::to_value(CarryDoc {
            version: Default::default(),
            command: "carry",
            state: state.describe(),
            merged,
            doc,
            seconds: super::seconds(started),
            requests: stats.requests.counts(),
        })?);
    }
    Ok(ExitCode::SUCCESS)
}
