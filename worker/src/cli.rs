//! The command line's top: one variant per verb (clap derive), each verb's arguments in its
//! module under commands/ (shared groups in commands/args.rs). Names follow azcopy where they fit.

use clap::{Parser, Subcommand};

use crate::commands::{
    carry::CarryArgs, check::CheckArgs, copy::CopyArgs, env::EnvArgs, expand::ExpandArgs,
    lease::LeaseArgs, ls::LsArgs, mk::MkArgs, names::NamesArgs, partition::PartitionArgs,
    plan::PlanArgs, prune::PruneArgs, rm::RmArgs, shard::ShardArgs, status::StatusArgs,
    units::UnitsArgs, verify::VerifyArgs,
};

#[derive(Parser, Debug)]
#[command(
    name = "ferry",
    version,
    about = "Moves trees between local filesystems and Azure Blob Storage, fast and without losing a byte"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// List a location as a manifest (streaming; the format every other step reads)
    Ls(LsArgs),
    /// Copy files and blobs; skips what the destination already has
    Copy(CopyArgs),
    /// Delete files or blobs
    Rm(RmArgs),
    /// Create a container (or directory)
    Mk(MkArgs),
    /// Show which credential source would be used (never the secret)
    Env(EnvArgs),
    /// Pre-flight: whether a migration's source, destination and state can be used, without
    /// listing them (exit 1 when a check fails)
    Check(CheckArgs),
    /// Split a manifest into parts, fpart-style
    Partition(PartitionArgs),
    /// Compare the listings and write what a pipeline phase copies, verifies and would delete
    Plan(PlanArgs),
    /// Compare source and destination (presence, size, optionally MD5)
    Verify(VerifyArgs),
    /// Delete from the destination what the source no longer has (the final pass)
    Prune(PruneArgs),
    /// Leave the destination's state, as a pass left it, for the next pass to plan against
    Carry(CarryArgs),
    /// Cut a pass's listing over several list jobs: the key space into ranges balanced by the
    /// carried listing or a shallow scan, and the destination's carried-or-fresh decision made once
    Shard(ShardArgs),
    /// How far a pipeline phase is: partitions done, running, failed, pending; throughput, ETA
    Status(StatusArgs),
    /// One pass at a time on a migration whose carried state is in Blob: a lease on the state
    Lease(LeaseArgs),
    /// For scripts: a manifest's entries with their raw paths and temp names, NUL-separated
    #[command(hide = true)]
    Names(NamesArgs),
    /// For scripts: sizes and rates read by the worker's rules, as JSON
    #[command(hide = true)]
    Units(UnitsArgs),
    /// For tests: a run-directory pattern with its placeholders filled by the worker's rule
    #[command(hide = true)]
    Expand(ExpandArgs),
    /// For the repository: the JSON Schema of every document the worker prints or writes
    #[command(hide = true)]
    Schema,
}
