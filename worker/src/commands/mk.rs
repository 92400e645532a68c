use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use super::args::{CarriedArgs, Common};
use super::{open, open_options, parse_location, parse_roots};
use crate::documents::Subject;
use crate::stats::Stats;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct MkArgs {
    pub location: String,
    /// The source a copy into LOCATION will read: refused, before anything is made, where the
    /// two overlap or the source is not there or cannot be read (the pipelines make their
    /// destination so)
    #[arg(long, value_name = "SOURCE")]
    pub source: Option<String>,
    /// Write a JSON summary (created, seconds, requests by kind) to FILE
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    #[command(flatten)]
    pub carried: CarriedArgs,
    #[command(flatten)]
    pub common: Common,
}

pub async fn run(args: MkArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let stats = Arc::new(Stats::default());
    let opts = open_options(&args.common, 1, stats.clone());
    let loc = match &args.source {
        Some(src) => parse_roots(src, &args.location)?.1,
        None => parse_location(&args.location)?,
    };
    // A destination made for a source that is not there is the first thing an operator's
    // mistyped source would leave behind (the pipeline's baseline makes it as the source is
    // listed): the source is checked first, as the pre-flight checks it.
    if let Some(src) = &args.source {
        let found = super::check::end(Subject::Source, src, &opts).await;
        if found.problem.is_some() {
            anyhow::bail!("{}: {} was not made", found.message, loc);
        }
    }
    let store = open(&loc, &opts)?;
    // The pass about to write the destination leaves the carried state out of date.
    super::take_state(&args.carried, &loc, &opts).await?;
    let created = store.create_root().await?;
    if created {
        eprintln!("created {}", store.describe());
    } else {
        eprintln!("{} already exists", store.describe());
    }
    if let Some(path) = &args.summary {
        let summary = crate::documents::MkSummary {
            version: Default::default(),
            command: "mk",
            created,
            seconds: super::seconds(started),
            requests: stats.requests.counts(),
        };
        crate::jsonfile::replace(path, &summary)
            .with_context(|| format!("cannot write the summary {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
