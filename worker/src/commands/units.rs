//! `ferry units` (hidden): sizes and rates read by the worker's rules (`units.rs`), for scripts
//! that need the numbers themselves (the replication's chunk size and bandwidth caps) and must
//! not read `64MiB` or `500Mbps` by rules of their own.

use std::process::ExitCode;

use clap::Args;

use crate::documents::UnitsDoc;

#[derive(Args, Debug)]
pub struct UnitsArgs {
    /// A size (`8MiB`, `8M` binary, `8MB` decimal, plain bytes); repeatable
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_size)]
    pub size: Vec<u64>,
    /// A rate (`500Mbps` bits, `100MB/s` and `64MiB/s` bytes, a plain number of bytes a second);
    /// repeatable
    #[arg(long, value_name = "RATE", value_parser = crate::units::parse_rate)]
    pub rate: Vec<u64>,
}

/// The values in the order given, as a `units` document; a value the rules refuse is a usage
/// error (exit 2) naming it, before anything is printed.
pub fn run(args: UnitsArgs) -> anyhow::Result<ExitCode> {
    super::print_json(&UnitsDoc {
        version: Default::default(),
        sizes: args.size,
        rates: args.rate,
    });
    Ok(ExitCode::SUCCESS)
}
