use std::process::ExitCode;
use std::sync::Arc;

use super::{open, open_options, parse_location, parse_roots};
use crate::cli::MkArgs;
use crate::stats::Stats;

pub async fn run(args: MkArgs) -> anyhow::Result<ExitCode> {
    let opts = open_options(&args.common, 1, Arc::new(Stats::default()));
    let loc = match &args.source {
        Some(src) => parse_roots(src, &args.location)?.1,
        None => parse_location(&args.location)?,
    };
    let store = open(&loc, &opts)?;
    if store.create_root().await? {
        eprintln!("created {}", store.describe());
    } else {
        eprintln!("{} already exists", store.describe());
    }
    Ok(ExitCode::SUCCESS)
}
