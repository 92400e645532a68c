//! `ferry expand` (hidden): a run-directory pattern with its placeholders filled by the worker's
//! rule (`run_dir::expand`, run_dir.json's `placeholders`), so a test can hold the worker to the
//! same rule as the scripts and the Nextflow pipeline.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

#[derive(Args, Debug)]
pub struct ExpandArgs {
    /// The pattern, e.g. `copy/part-{part}.json`
    pub pattern: String,
    /// A placeholder's value; repeatable
    #[arg(value_name = "NAME=VALUE")]
    pub values: Vec<String>,
}

/// Prints the expansion; a placeholder without a value is an error (exit 2) naming it.
pub fn run(args: ExpandArgs) -> anyhow::Result<ExitCode> {
    let mut values = Vec::new();
    for pair in &args.values {
        let (name, value) = pair
            .split_once('=')
            .with_context(|| format!("{pair:?} is not NAME=VALUE"))?;
        values.push((name, value));
    }
    println!("{}", crate::run_dir::expand(&args.pattern, &values)?);
    Ok(ExitCode::SUCCESS)
}
