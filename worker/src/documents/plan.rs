//! plan.json: `ferry plan`'s document (plan/mod.rs makes it), field for field as the
//! pipelines' report reads it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Version;

#[derive(Serialize, Deserialize, JsonSchema, Default, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct Totals {
    pub files: u64,
    pub bytes: u64,
}

#[derive(Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct SourceCounts {
    pub files: u64,
    pub bytes: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub symlinks_not_migrated: u64,
    /// Fifos, sockets and device nodes.
    pub specials: u64,
}

#[derive(Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct ToCopy {
    pub files: u64,
    pub bytes: u64,
    pub new: u64,
    pub changed: u64,
    pub undecided: u64,
    /// Entries whose bytes are the same and whose mode, owner, times or extended attributes
    /// are not: only those are set (no bytes sent). Counted apart from `files`.
    pub metadata_only: u64,
    /// Entries of another kind at the destination (a directory where a file is now...),
    /// removed and written anew. Counted in `files` too.
    pub type_changed: u64,
    /// Files and symlinks where the destination has a directory, left out of a baseline's or
    /// an incremental's copy (in none of the counts above): replacing the directory deletes
    /// everything under it, which waits for the final pass, whose plan lists it among the
    /// deletions.
    #[serde(default)]
    pub deferred: u64,
    /// Directories (and nodes) to make or whose metadata to set.
    pub dirs: u64,
    /// Names planned, though the same at the destination, because another name of their
    /// hard-link group is copied: the copy job links them to it. Not in `files`.
    pub linked: u64,
}

/// What was asked, in the shape of the pipelines' `partition` config.
#[derive(Serialize, Deserialize, JsonSchema, Clone)]
#[serde(deny_unknown_fields)]
pub struct Partitioning {
    pub tool: String,
    pub mode: String,
    pub parts: Option<usize>,
    pub max_files: Option<u64>,
    pub max_bytes: Option<u64>,
}

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartRow {
    pub id: String,
    pub files: u64,
    pub bytes: u64,
}

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanDoc {
    pub version: Version,
    pub phase: String,
    pub compare: String,
    pub source: SourceCounts,
    pub dest: Option<Totals>,
    /// The destination's directories (`dest` counts files and symlinks): with `dest.files`,
    /// what prune's --max-delete share is of.
    #[serde(default)]
    pub dest_dirs: u64,
    pub to_copy: ToCopy,
    pub unchanged: u64,
    pub extra_on_dest: Totals,
    pub partitioning: Partitioning,
    pub copy_partitions: Vec<PartRow>,
    pub verify_partitions: Vec<PartRow>,
    pub verify_scope: String,
    /// The files of `extra_on_dest` cut into parts in path order (prune/part-ID.tsv), for
    /// prune jobs to delete at once; none when there is nothing to delete.
    pub prune_partitions: Vec<PartRow>,
    /// The destination's directories the deletions would leave empty (prune/dirs.tsv).
    pub prune_dirs: u64,
    /// Files planned for copying whose destination file is newer (newer.rs): `ferry plan`
    /// refuses them without --overwrite-newer.
    #[serde(default)]
    pub newer_at_dest: Newer,
    /// Files to delete newer than everything at the source (newer.rs): the prune refuses them
    /// without --force.
    #[serde(default)]
    pub newer_deletions: Newer,
}

/// The entries a guard found: how many, and the first three paths.
#[derive(Serialize, Deserialize, JsonSchema, Default, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct Newer {
    pub count: u64,
    pub examples: Vec<String>,
}
