use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use super::{open, open_options, parse_location, state_of};
use crate::carried::Decision;
use crate::commands::args::{CarriedArgs, CarriedChoice, Common, Sorting};
use crate::shard::{self, Basis, ShardsDoc};
use crate::stats::Stats;

#[derive(Args, Debug)]
pub struct ShardArgs {
    /// The source the list jobs list
    pub source: String,
    /// The destination they list too (every phase but the baseline)
    pub dest: Option<String>,
    /// List jobs per side
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,
    /// Where to write the document (the list jobs', plan's, prune's and carry's --shards)
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    #[command(flatten)]
    pub carried: CarriedArgs,
    #[command(flatten)]
    pub choice: CarriedChoice,
    #[command(flatten)]
    pub sorting: Sorting,
    #[command(flatten)]
    pub common: Common,
}

pub async fn run(args: ShardArgs) -> anyhow::Result<ExitCode> {
    let stats = Arc::new(Stats::default());
    let opts = open_options(&args.common, 16, stats.clone());
    let source = open(&parse_location(&args.source)?, &opts)?;
    let jobs = args.jobs as usize;
    let mut carried = None;
    let mut cuts = None;
    if let Some(state_at) = &args.carried.state {
        let dest = args
            .dest
            .as_deref()
            .context("--carried decides for the destination: give DEST")?;
        let dest_loc = parse_location(dest)?;
        let pass = args.carried.pass.as_deref().unwrap_or_default();
        let decision = super::carried_or_fresh(
            state_at,
            pass,
            &dest_loc,
            &opts,
            args.choice.probe,
            args.choice.fresh,
            args.sorting.scratch.as_deref(),
        )
        .await?;
        carried = Some(decision.summary());
        // The destination as the last pass left it is the source as it was then: its entry
        // counts balance both sides, whether or not the listing itself is used this pass.
        // A fresh decision hands back no document: read once more only then.
        let dest_name = open(&dest_loc, &opts)?.describe();
        let doc = match decision {
            Decision::Carried { doc, .. } => Some(doc),
            Decision::Fresh(_) => state_of(state_at, &dest_loc, &opts)?.doc().await?,
        };
        if let Some(doc) = doc.filter(|d| d.dest == dest_name && !d.quantiles.is_empty()) {
            cuts = Some((
                shard::cuts_from_quantiles(&doc.quantiles, jobs)?,
                Basis::Carried,
            ));
        }
    }
    let (cuts, basis) = match cuts {
        Some(c) => c,
        None => (shard::scan(&source, jobs).await?, Basis::Scan),
    };
    let doc = ShardsDoc {
        version: Default::default(),
        jobs: args.jobs,
        cuts: cuts
            .keys()
            .iter()
            .map(|k| crate::manifest::escape_path(k))
            .collect(),
        basis,
        carried,
    };
    crate::jsonfile::replace(&args.out, &doc)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    eprintln!(
        "ferry shard: {} list jobs per side, cut by {} ({} List requests)",
        args.jobs,
        match basis {
            Basis::Carried => "the carried listing's entry counts",
            Basis::Scan => "a shallow scan of the source",
        },
        stats.requests.counts().list_pages
    );
    Ok(ExitCode::SUCCESS)
}
