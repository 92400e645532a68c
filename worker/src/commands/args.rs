//! Argument groups shared by several verbs, each defined once (every verb's own arguments are in
//! its module).

use std::path::PathBuf;

use clap::Args;

use crate::preserve::Preserve;
use crate::storage::azure::auth::AuthMode;

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
