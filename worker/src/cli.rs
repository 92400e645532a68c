//! Command-line surface (clap derive). Names follow azcopy where they fit.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::filter::Shard;
use crate::preserve::Preserve;
use crate::same::Compare;
use crate::storage::azure::auth::AuthMode;

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
    Check(crate::commands::check::CheckArgs),
    /// Split a manifest into parts, fpart-style
    Partition(crate::commands::partition::PartitionArgs),
    /// Compare the listings and write what a pipeline phase copies, verifies and would delete
    Plan(crate::commands::plan::PlanArgs),
    /// Compare source and destination (presence, size, optionally MD5)
    Verify(crate::commands::verify::VerifyArgs),
    /// Delete from the destination what the source no longer has (the final pass)
    Prune(crate::commands::prune::PruneArgs),
    /// Leave the destination's state, as a pass left it, for the next pass to plan against
    Carry(crate::commands::carry::CarryArgs),
    /// Cut a pass's listing over several list jobs: the key space into ranges balanced by the
    /// carried listing or a shallow scan, and the destination's carried-or-fresh decision made once
    Shard(crate::commands::shard::ShardArgs),
    /// How far a pipeline phase is: partitions done, running, failed, pending; throughput, ETA
    Status(crate::commands::status::StatusArgs),
    /// One pass at a time on a migration whose carried state is in Blob: a lease on the state
    Lease(crate::commands::lease::LeaseArgs),
    /// For scripts: a manifest's entries with their raw paths and temp names, NUL-separated
    #[command(hide = true)]
    Names(crate::commands::names::NamesArgs),
    /// For scripts: sizes and rates read by the worker's rules, as JSON
    #[command(hide = true)]
    Units(crate::commands::units::UnitsArgs),
    /// For tests: a run-directory pattern with its placeholders filled by the worker's rule
    #[command(hide = true)]
    Expand(crate::commands::expand::ExpandArgs),
    /// For the repository: the JSON Schema of every document the worker prints or writes
    #[command(hide = true)]
    Schema,
}

#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Credential source (default: first that applies; see `ferry env`)
    #[arg(
        long,
        value_enum,
        env = "FERRY_AUTH",
        default_value = "auto",
        global = true
    )]
    pub auth: AuthMode,
    /// Retries per request for 429, 5xx, resets and truncated bodies
    #[arg(long, env = "FERRY_MAX_RETRIES", default_value_t = 5, global = true)]
    pub max_retries: u32,
    /// Do not send a Content-MD5 with each uploaded block (the whole-blob MD5 is separate: --no-put-md5)
    #[arg(long = "no-block-md5", action = clap::ArgAction::SetFalse, global = true)]
    pub block_md5: bool,
    /// Give up on a response that delivers nothing for this many seconds
    #[arg(long, env = "FERRY_IO_TIMEOUT", default_value_t = 60, global = true)]
    pub io_timeout: u64,
    /// Do not fsync local files before their rename (nor the filesystem at the end): faster on
    /// many small files, but a power loss may then lose or empty the last files written
    #[arg(long = "no-fsync", action = clap::ArgAction::SetFalse, global = true)]
    pub fsync: bool,
    /// List Blobs requests in flight while one recursive listing of a container is cut into key
    /// ranges; 1 lists it as one sequential stream
    #[arg(
        long,
        env = "FERRY_LIST_CONCURRENCY",
        default_value_t = 16,
        global = true
    )]
    pub list_concurrency: usize,
    /// Entries per List Blobs page (hidden: the tests shrink it to cut small containers)
    #[arg(
        long,
        env = "FERRY_LIST_PAGE_SIZE",
        default_value_t = 5000,
        global = true,
        hide = true
    )]
    pub list_page_size: u32,
}

/// Where and in how much memory `prune` and `verify` sort their listings (docs/worker.md).
#[derive(Args, Debug, Clone)]
pub struct Sorting {
    /// Directory for the sorted listings (about their size on disk); a private directory is made
    /// in it and removed at the end [default: $TMPDIR, else /tmp]
    #[arg(long, value_name = "DIR", env = "FERRY_SCRATCH")]
    pub scratch: Option<PathBuf>,
    #[command(flatten)]
    pub memory: SortMemory,
}

/// The memory one sort of a listing holds before it spills a run to disk: one budget, the same
/// for every verb that sorts (`plan`, `partition`, `prune`, `verify`), passed down to each
/// sort. Hidden: the tests shrink it to force spills.
#[derive(Args, Debug, Clone, Copy)]
pub struct SortMemory {
    /// Memory for sorting a listing before a run is spilled to disk [default: 64MiB]
    #[arg(long = "sort-memory", env = "FERRY_SORT_MEMORY", value_parser = crate::units::parse_size, hide = true)]
    bytes: Option<u64>,
}

impl SortMemory {
    const DEFAULT: u64 = 64 << 20;

    pub fn budget(&self) -> usize {
        self.bytes.unwrap_or(Self::DEFAULT).max(1) as usize
    }

    /// The budget from `env`, an older name of this knob, where none was given.
    pub fn or_env(self, env: &str) -> anyhow::Result<SortMemory> {
        match (self.bytes, std::env::var(env)) {
            (None, Ok(v)) => Ok(SortMemory {
                bytes: Some(
                    crate::units::parse_size(&v).map_err(|e| anyhow::anyhow!("{env}={v}: {e}"))?,
                ),
            }),
            _ => Ok(self),
        }
    }
}

#[derive(Args, Debug, Clone, Default)]
pub struct Filters {
    /// Only paths matching this glob (repeatable; a pattern without '/' matches at any depth)
    #[arg(long = "include", value_name = "GLOB")]
    pub include: Vec<String>,
    /// Skip paths matching this glob (repeatable)
    #[arg(long = "exclude", value_name = "GLOB")]
    pub exclude: Vec<String>,
}

/// `--preserve`, defined once for every verb that lists, compares or writes metadata.
#[derive(Args, Debug, Clone)]
pub struct PreserveArgs {
    /// What is kept and compared beyond the bytes: all (what `cp -a` keeps, and holes), none,
    /// or a comma list of mode, owner, times, links, xattrs, acls, sparse, specials; `no-NAME`
    /// takes one away (`all,no-xattrs`)
    #[arg(long, value_name = "LIST", env = "FERRY_PRESERVE", default_value = "all", value_parser = crate::preserve::parse)]
    pub preserve: Preserve,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Tsv,
    Jsonl,
}

#[derive(Args, Debug)]
pub struct LsArgs {
    pub location: String,
    /// Descend into directories / prefixes
    #[arg(short, long)]
    pub recursive: bool,
    #[arg(long, value_enum, default_value = "tsv")]
    pub format: Format,
    /// Also write a JSON summary (entries, seconds, requests by kind) to FILE: the listing has
    /// stdout
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    #[command(flatten)]
    pub preserve: PreserveArgs,
    #[command(flatten)]
    pub filters: Filters,
    #[command(flatten)]
    pub carried: CarriedArgs,
    #[command(flatten)]
    pub choice: CarriedChoice,
    #[command(flatten)]
    pub shard: ListShard,
    #[command(flatten)]
    pub sorting: Sorting,
    #[command(flatten)]
    pub common: Common,
}

/// Whether the carried state stands for a listing of the destination this pass (`ls`, `shard`).
#[derive(Args, Debug, Clone)]
pub struct CarriedChoice {
    /// With --carried: how many carried files and links to look up on the destination before
    /// the carried listing stands for a fresh one
    #[arg(long, value_name = "N", default_value_t = 64, requires = "state")]
    pub probe: usize,
    /// With --carried: list afresh all the same
    #[arg(long, requires = "state")]
    pub fresh: bool,
}

/// One list job of several (`ferry shard`): its range of the key space.
#[derive(Args, Debug, Clone)]
pub struct ListShard {
    /// The document `ferry shard` wrote: the key space cut into ranges, and the destination's
    /// carried-or-fresh decision, made once for all the list jobs
    #[arg(long, value_name = "FILE", requires = "shard")]
    pub shards: Option<PathBuf>,
    /// Which range this job lists, from 1
    #[arg(long, value_name = "K", requires = "shards", value_parser = clap::value_parser!(u32).range(1..))]
    pub shard: Option<u32>,
}

/// The destination's state carried from pass to pass (docs/scale.md).
#[derive(Args, Debug, Clone)]
pub struct CarriedArgs {
    /// Where this destination's carried state is kept (a directory or Blob prefix outside it):
    /// `ls` lists from it when it is current; `mk`, `copy` and `prune` mark it out of date for
    /// the pass before their first write
    #[arg(long = "carried", value_name = "STATE", requires = "pass")]
    pub state: Option<String>,
    /// The pass taking the carried state (its run directory's name)
    #[arg(long, value_name = "NAME", requires = "state")]
    pub pass: Option<String>,
}

fn parse_block_size(s: &str) -> Result<u64, String> {
    let n = crate::units::parse_size(s)?;
    // Azure's limits: blocks up to 4000 MiB; below 64 KiB the request overhead dominates.
    if !(64 * 1024..=4000 * 1024 * 1024).contains(&n) {
        return Err(format!("block size {s} is outside 64KiB..4000MiB"));
    }
    Ok(n)
}

#[derive(Args, Debug)]
pub struct CopyArgs {
    pub source: String,
    pub dest: String,
    /// Descend into directories / prefixes
    #[arg(short, long)]
    pub recursive: bool,
    /// Copy only the entries of this manifest (paths relative to SOURCE)
    #[arg(long, value_name = "MANIFEST")]
    pub files_from: Option<PathBuf>,
    /// When a destination file counts as already there
    #[arg(long, value_enum, default_value = "size-mtime")]
    pub compare: Compare,
    /// Do not set Content-MD5 on uploaded blobs
    #[arg(long = "no-put-md5", action = clap::ArgAction::SetFalse)]
    pub put_md5: bool,
    /// Between blobs of one account, stream the bytes through ferry instead of letting the
    /// service copy them (Copy Blob)
    #[arg(long = "no-server-copy", action = clap::ArgAction::SetFalse)]
    pub server_copy: bool,
    /// Abort a server-side copy still pending after this many seconds [default: 3600]
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub server_copy_timeout: Option<u64>,
    /// The keys Blob destinations keep POSIX attributes under, beside rclone's (`mtime`, `mode`,
    /// `uid`, `gid`): azcopy's `--preserve-posix-properties` ones (standard), or those of its
    /// `--posix-properties-style amlfs`, which Azure Managed Lustre imports (amlfs)
    #[arg(
        long,
        value_enum,
        env = "FERRY_POSIX_STYLE",
        default_value = "standard"
    )]
    pub posix_style: crate::storage::azure::posix::PosixStyle,
    /// Upload every blob as application/octet-stream instead of a Content-Type guessed from
    /// its extension (blob → blob keeps the source's either way)
    #[arg(long = "no-guess-mime-type", action = clap::ArgAction::SetFalse)]
    pub guess_mime: bool,
    /// Blob → blob: give each copy the source blob's access tier, where one was set on it
    /// (else the destination account's default applies)
    #[arg(long)]
    pub keep_tier: bool,
    /// Blob → blob: give each copy the source blob's index tags (a request more per tagged blob)
    #[arg(long)]
    pub keep_tags: bool,
    /// This process's share of the listing: INDEX/COUNT (same LPT split as `ferry partition`)
    #[arg(long)]
    pub shard: Option<Shard>,
    /// Show what would be copied; change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Refuse if the entries of another type this copy replaces (a directory where the source
    /// now has a file, with everything under it) are more than this: a count (1000) or a share of
    /// the destination's entries (10%). Default: 50% for a whole tree; a part of a planned pass
    /// (--files-from, --shard) is judged by the plan's prune unless this is given
    #[arg(long, value_parser = crate::commands::prune::parse_limit)]
    pub max_delete: Option<crate::commands::prune::Limit>,
    /// Replace even past --max-delete
    #[arg(long)]
    pub force: bool,
    /// Replace destination files whose mtime is later than their source's (refused otherwise,
    /// nothing copied: the sign of swapped SOURCE and DEST); for restoring older versions
    #[arg(long)]
    pub overwrite_newer: bool,
    /// Where to write the list of entries the replacements delete, in manifest format
    /// (default: $XDG_STATE_HOME/ferry/copy-<time>-<pid>-….tsv; written only when something
    /// is replaced)
    #[arg(long, value_name = "PATH")]
    pub log: Option<PathBuf>,
    /// Print one JSON summary on stdout
    #[arg(long)]
    pub json: bool,
    /// Keep PATH rewritten with the run's progress as JSON (every 2 seconds and at the end), for
    /// a pipeline's live status
    #[arg(long, value_name = "PATH")]
    pub progress_file: Option<PathBuf>,
    /// Force the progress bar on (default: on when stderr is a terminal)
    #[arg(long, overrides_with = "no_progress")]
    pub progress: bool,
    #[arg(long)]
    pub no_progress: bool,
    /// Requests in flight across all files, fixed (default: adapts, starting from clamp(CPUs, 8, 96))
    #[arg(long, env = "FERRY_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// Files transferred at once (default: 2 × concurrency)
    #[arg(long, env = "FERRY_PARALLEL_FILES")]
    pub parallel_files: Option<usize>,
    /// Block size for uploads and ranged downloads (e.g. 4MiB, 16M)
    #[arg(long, default_value = "4MiB", value_parser = parse_block_size)]
    pub block_size: u64,
    /// Cap on aggregate throughput: 500Mbps, 1Gbps (bits) or 100MB/s, 64MiB/s (bytes)
    #[arg(long, value_parser = crate::units::parse_rate)]
    pub max_bandwidth: Option<u64>,
    #[command(flatten)]
    pub preserve: PreserveArgs,
    #[command(flatten)]
    pub filters: Filters,
    #[command(flatten)]
    pub carried: CarriedArgs,
    #[command(flatten)]
    pub common: Common,
}

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

#[derive(Args, Debug)]
pub struct EnvArgs {
    /// A location, to show the account and credential that would serve it
    pub location: Option<String>,
    #[command(flatten)]
    pub common: Common,
}
