//! The JSON documents the worker prints (`--json`) or writes (`--summary`, `--progress-file`,
//! plan.json), one type each. Each carries `version`; their JSON Schema, generated from these
//! types (`ferry schema`), is checked in as workflow/scripts/worker-documents.schema.json, which
//! the pipeline's scripts validate every document against (ferry_docs.py): a renamed or missing
//! key is an error there, not a silent 0. A test fails while the checked-in schema is stale.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub mod carry;
pub mod lease;
pub mod plan;
pub mod shards;
pub mod verify;

/// The documents' version: raised when a document changes in a way an old reader would misread.
pub const VERSION: u32 = 1;

/// `"version": 1` in every document; reading another version is an error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Version;

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_u32(VERSION)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        match u32::deserialize(de)? {
            VERSION => Ok(Version),
            other => Err(serde::de::Error::custom(format!(
                "document version {other}, this worker reads {VERSION}"
            ))),
        }
    }
}

impl JsonSchema for Version {
    fn schema_name() -> Cow<'static, str> {
        "Version".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "integer", "const": VERSION})
    }
}

/// Blob requests sent, by kind (crate::stats::RequestKind): each attempt of a retried request
/// counts, as each is billed.
#[derive(Serialize, Deserialize, JsonSchema, Default, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Requests {
    pub list_pages: u64,
    pub puts: u64,
    pub blocks: u64,
    pub block_lists: u64,
    pub gets: u64,
    pub heads: u64,
    pub deletes: u64,
    pub batches: u64,
    pub copies: u64,
    pub others: u64,
}

/// Where a job of a pipeline phase stands: one vocabulary for `ferry status`, the report,
/// the history and report.html.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Not started (or not reached: an earlier step failed).
    Pending,
    /// Its progress file is being rewritten.
    Running,
    /// It left its report: it ended well.
    Done,
    /// It ended in failure (its report, if any, under failed/).
    Failed,
    /// It started and was stopped (killed) before it ended.
    Stopped,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathError {
    pub path: String,
    pub error: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathReason {
    pub path: String,
    pub reason: String,
}

// ---- ferry copy --json

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CopyFiles {
    pub total: u64,
    pub copied: u64,
    pub skipped: u64,
    pub failed: u64,
    pub ignored: u64,
    pub server_copied: u64,
    pub metadata_only: u64,
    /// Entries of another type replaced (a directory where the source has a file...).
    pub replaced: u64,
    /// The destination entries those replacements delete: each replaced entry and everything
    /// under it.
    pub removed: u64,
    /// Destination files newer than their source's, which the copy does not replace without
    /// --overwrite-newer (a real run is refused, writing nothing).
    #[serde(default)]
    pub newer_at_dest: u64,
}

/// An entry of another type a copy replaces, and what goes with it.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Replaced {
    pub path: String,
    /// Its kind at the destination: "dir", "file", "symlink"...
    pub was: String,
    /// It and everything under it.
    pub entries: u64,
    pub bytes: u64,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CopyBytes {
    pub total: u64,
    pub copied: u64,
    pub skipped: u64,
    pub server_copied: u64,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Blocks {
    pub sent: u64,
    pub reused: u64,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Retries {
    pub total: u64,
    /// By HTTP status or error class.
    pub by_status: BTreeMap<String, u64>,
}

// How the copy paces its requests (depth.rs): a fixed limit, or one moved by the rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Fixed,
    Adaptive,
}

/// One finished trial, for the JSON report: when (seconds since start), at which limit, and the
/// rate measured (bytes per second, requests counted as `OP_BYTES` each).
#[derive(Clone, Copy, Debug, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub at: f64,
    pub limit: usize,
    pub rate: f64,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub mode: Mode,
    pub initial: usize,
    #[serde(rename = "final")]
    pub last: usize,
    pub peak: usize,
    pub min: usize,
    pub max: usize,
    pub throttled: u64,
    pub trace: Vec<Step>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CopyDoc {
    pub version: Version,
    pub command: &'static str,
    pub source: String,
    pub dest: String,
    pub dry_run: bool,
    pub files: CopyFiles,
    pub bytes: CopyBytes,
    pub blocks: Blocks,
    pub retries: Retries,
    pub requests: Requests,
    /// How many requests the copy kept in flight, and how the limit moved.
    pub concurrency: Report,
    pub failures: Vec<PathError>,
    pub ignored: Vec<PathReason>,
    pub ignored_by_reason: BTreeMap<String, u64>,
    /// What of the source's metadata the destination could not keep, by kind.
    pub not_kept: BTreeMap<String, u64>,
    /// The entries of another type replaced (or, in a dry run, to be).
    pub replacements: Vec<Replaced>,
    /// The destination's entries the copy knows of (its listing): what --max-delete's share of
    /// the replacements' deletions is of.
    pub dest_entries: u64,
    /// Why nothing was copied: the replacements' deletions past --max-delete.
    pub refused: Option<String>,
    /// A dry run's note that a real run would be refused.
    pub warning: Option<String>,
    /// The deletion log of the replacements; null when nothing was replaced.
    pub log: Option<String>,
    /// ferry's own temp files of earlier runs that this pass removed (a dry run: would remove),
    /// and their paths (docs/worker.md, "Resume").
    pub leftovers_removed: u64,
    pub leftovers: Vec<String>,
    pub seconds: f64,
}

// ---- ferry prune --json, ferry rm --json

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PruneDoc {
    pub version: Version,
    pub command: &'static str,
    pub dry_run: bool,
    pub deleted: u64,
    pub would_delete: u64,
    pub dirs: u64,
    /// The directories deleted (`deleted` counts files and symlinks).
    pub dirs_deleted: u64,
    /// The destination's entries, directories included: what --max-delete's share is of.
    pub dest_entries: u64,
    pub failed: u64,
    pub failures: Vec<PathError>,
    /// Why nothing was deleted; null when prune ran.
    pub refused: Option<String>,
    /// Set when the deletions exceed prune's limit (a dry run says so instead of refusing).
    pub warning: Option<String>,
    /// The deletion list; null when prune was refused.
    pub log: Option<String>,
    /// ferry's own temp files of earlier runs removed (a dry run: would remove), and their
    /// paths: not deletions of the source's absence, so not logged or counted against
    /// --max-delete.
    pub leftovers_removed: u64,
    pub leftovers: Vec<String>,
    pub requests: Requests,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RmDoc {
    pub version: Version,
    pub command: &'static str,
    pub dry_run: bool,
    pub deleted: u64,
    pub would_delete: u64,
    pub failed: u64,
    pub failures: Vec<PathError>,
    pub requests: Requests,
}

// ---- ferry ls --summary, ferry mk --summary

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LsSummary {
    pub version: Version,
    pub command: &'static str,
    pub entries: u64,
    pub seconds: f64,
    pub requests: Requests,
    /// With --carried: whether the carried destination state was used, or why not; null
    /// without --carried.
    pub carried: Option<CarriedSummary>,
    /// With --shards: which of the list jobs' ranges this listing is; null for a whole listing.
    pub shard: Option<ShardOf>,
}

/// One list job's range among several (crate::shard).
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShardOf {
    /// From 1.
    pub index: u32,
    pub of: u32,
}

/// Whether a pass planned against the destination's carried state (crate::carried).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CarriedSummary {
    pub used: bool,
    /// The pass that left the state used; null when none was used.
    pub written_by: Option<String>,
    /// Carried entries looked up on the destination before use.
    pub probed: u64,
    /// Why the destination was listed afresh; null when the state was used.
    pub reason: Option<String>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MkSummary {
    pub version: Version,
    pub command: &'static str,
    pub created: bool,
    pub seconds: f64,
    pub requests: Requests,
}

// ---- ferry check

/// What a pre-flight check looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Subject {
    Source,
    Dest,
    /// The carried state's location (`--state`).
    State,
}

impl Subject {
    pub fn name(self) -> &'static str {
        match self {
            Subject::Source => "source",
            Subject::Dest => "dest",
            Subject::State => "state",
        }
    }
}

/// Why a pre-flight check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// Not a location ferry can take (an invalid container name, an unknown scheme).
    Invalid,
    /// Does not exist (a source's directory or container).
    Missing,
    NotADirectory,
    /// Exists, and cannot be read.
    Unreadable,
    /// Cannot be written nor made (a local destination or state).
    NotWritable,
    /// The storage refused the credentials (401, 403), or none could be found.
    Credentials,
    /// The storage did not answer as it should (host unknown, connection refused, 5xx).
    Unreachable,
    /// Inside another end of the migration.
    Overlap,
}

/// One check of `ferry check`; `problem` is null when it passed.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckResult {
    pub subject: Subject,
    /// The location as given, without its SAS.
    pub location: String,
    pub problem: Option<Problem>,
    /// What was found, for a person.
    pub message: String,
}

/// `ferry check --json`: the pre-flight, every check whether it passed or not.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckDoc {
    pub version: Version,
    pub command: &'static str,
    /// Every check passed.
    pub ok: bool,
    pub checks: Vec<CheckResult>,
}

// ---- --progress-file

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Count {
    pub done: u64,
    /// Unknown (null) until the job has counted all it has to do.
    pub total: Option<u64>,
}

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileCount {
    pub done: u64,
    pub failed: u64,
    pub total: Option<u64>,
}

/// What a copy or verify job rewrites every few seconds while it runs.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProgressDoc {
    pub version: Version,
    pub command: String,
    pub pid: u32,
    pub host: String,
    /// The Slurm node the job runs on (SLURMD_NODENAME), null outside Slurm (and in a file an
    /// older worker wrote).
    #[serde(default)]
    pub node: Option<String>,
    /// Seconds since the epoch.
    pub started: f64,
    pub updated: f64,
    pub finished: bool,
    pub files: FileCount,
    pub bytes: Count,
    pub bytes_per_second: u64,
    pub requests: Requests,
}

// ---- ferry partition --json (and each summary.json `ferry partition` and `ferry plan` write)

/// One part of a set: its file (`part-NNNNN.tsv`) and what it holds.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartSummary {
    pub index: usize,
    pub file: String,
    pub files: u64,
    pub bytes: u64,
}

/// A set of parts: how it was cut, its totals and each part (docs/worker.md, "partition").
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartitionDoc {
    pub version: Version,
    /// `parts`, `max-files`, `max-bytes` or `max-files-bytes`.
    pub mode: String,
    pub parts: usize,
    pub files: u64,
    pub bytes: u64,
    /// (largest part / mean − 1) × 100, to two decimals.
    pub imbalance_pct: f64,
    pub dirs: u64,
    /// `dirs.tsv` when there are directory entries.
    pub dirs_file: Option<String>,
    pub partitions: Vec<PartSummary>,
}

// ---- ferry status --json

/// Where a phase stands as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PhaseState {
    /// No plan yet, and a list job of some side not yet done.
    Listing,
    /// Every list job's listing written, no plan yet.
    Planning,
    /// A partition's job is running, or its engine is (jobs queued, or between two steps).
    Running,
    /// Every partition done, the report not yet written.
    Finishing,
    /// Nothing running, not finished, and its engine gone: killed, or its jobs failed and the
    /// engine gave up.
    Stopped,
    /// The report says incomplete.
    Incomplete,
    /// It ended, incomplete, with failures (a job failed, or the engine ended in error): the
    /// migration's history says so of a run (ferry_history.py); `ferry status`, which sees no
    /// engine's exit, says `incomplete` or `stopped` of it.
    // Never made here: the word is in this enum so that the one vocabulary holds it.
    #[allow(dead_code)]
    Failed,
    /// The report says complete.
    Complete,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PartitionStatus {
    pub id: String,
    pub state: JobState,
    /// The Slurm node its job runs or ran on, from its progress file.
    pub node: Option<String>,
    pub files: u64,
    pub bytes: u64,
    pub files_done: u64,
    pub bytes_done: u64,
    pub bytes_per_second: u64,
    pub eta_seconds: Option<f64>,
}

/// How many partitions of a step are in each state.
#[derive(Serialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct Tally {
    pub planned: u64,
    pub pending: u64,
    pub running: u64,
    pub done: u64,
    pub failed: u64,
    pub stopped: u64,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Amount {
    pub planned: u64,
    pub done: u64,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepPartitions {
    pub copy: Vec<PartitionStatus>,
    pub verify: Vec<PartitionStatus>,
    /// The final pass's deletions, cut as the plan cut them (plan/prune/part-ID.tsv).
    pub prune: Vec<PartitionStatus>,
}

/// The phase's progress, once it has a plan.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanProgress {
    pub phase: String,
    pub copy: Tally,
    pub verify: Tally,
    pub prune: Tally,
    pub files: Amount,
    pub bytes: Amount,
    pub bytes_per_second: u64,
    pub eta_seconds: Option<f64>,
    pub slowest_running: Option<String>,
    pub partitions: StepPartitions,
}

/// One side's list jobs before the plan.
#[derive(Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SideListing {
    /// `source` or `dest` (the destination is listed in every phase but the baseline).
    pub side: String,
    /// The side's list jobs: listing/shards.json's `jobs` once the shard step has cut the key
    /// space, 1 without a shard step; null while the shard step is still cutting it.
    pub jobs: Option<u32>,
    /// Those whose listing is written (a list job writes it whole, when it ends well).
    pub done: u32,
}

/// Whether the engine that runs the pass is still there: its run_started.json marker and the
/// migration's lock (ferry_lock.py) say so, the records cannot (a job queued or a pass between
/// two steps leaves nothing to read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EngineState {
    /// Its lock is held for this pass by a live engine (on this host: its process; on another:
    /// a heartbeat younger than ferry_lock.py's STALE_AFTER), or its marker's process runs here.
    Running,
    /// Its engine process is gone, or its lock was given back.
    Ended,
    /// No marker and no lock of this pass: a run directory made without an engine.
    Unknown,
}

#[derive(Serialize, JsonSchema)]
pub struct StatusDoc {
    pub version: Version,
    pub run_dir: String,
    pub state: PhaseState,
    pub engine: EngineState,
    /// How far each listed side is; null once the plan is made.
    pub listing: Option<Vec<SideListing>>,
    /// Null before the plan is made.
    pub progress: Option<PlanProgress>,
}

/// `ferry units`: sizes and rates in bytes and bytes a second, in the order asked for.
#[derive(Serialize, JsonSchema)]
pub struct UnitsDoc {
    pub version: Version,
    pub sizes: Vec<u64>,
    pub rates: Vec<u64>,
}

/// Every document, by the name the pipeline's scripts read it under, with its schema.
pub fn schemas() -> serde_json::Value {
    let mut all = serde_json::Map::new();
    let mut add = |name: &str, schema: Schema| {
        let mut value = schema.to_value();
        closed(&mut value);
        all.insert(name.into(), value);
    };
    add("copy", schemars::schema_for!(CopyDoc));
    add("verify", schemars::schema_for!(verify::Summary));
    add("prune", schemars::schema_for!(PruneDoc));
    add("rm", schemars::schema_for!(RmDoc));
    add("plan", schemars::schema_for!(plan::PlanDoc));
    add("ls_summary", schemars::schema_for!(LsSummary));
    add("shards", schemars::schema_for!(shards::ShardsDoc));
    add("mk_summary", schemars::schema_for!(MkSummary));
    add("check", schemars::schema_for!(CheckDoc));
    add("progress", schemars::schema_for!(ProgressDoc));
    add("status", schemars::schema_for!(StatusDoc));
    add("carry", schemars::schema_for!(carry::CarryDoc));
    add("units", schemars::schema_for!(UnitsDoc));
    add("partition", schemars::schema_for!(PartitionDoc));
    add("lease", schemars::schema_for!(lease::LeaseDoc));
    serde_json::json!({
        "about": "The worker's JSON documents, generated from worker/src/documents.rs by `ferry schema`; do not edit.",
        "version": VERSION,
        "documents": all,
        "states": {
            "job": words(schemars::schema_for!(JobState)),
            "phase": words(schemars::schema_for!(PhaseState)),
            "engine": words(schemars::schema_for!(EngineState)),
        },
    })
}

/// The words of a state enum, in its order: the one vocabulary the pipeline's Python and Groovy
/// read from the generated schema (`states`), never a copy of their own.
fn words(schema: Schema) -> Vec<String> {
    let value = schema.to_value();
    let consts = match (value.get("enum"), value.get("oneOf")) {
        (Some(serde_json::Value::Array(words)), _) => words.clone(),
        // Variants with a doc comment come as {const, description}, the others as an enum.
        (_, Some(serde_json::Value::Array(each))) => each
            .iter()
            .flat_map(|v| match (v.get("const"), v.get("enum")) {
                (Some(word), _) => vec![word.clone()],
                (_, Some(serde_json::Value::Array(words))) => words.clone(),
                _ => Vec::new(),
            })
            .collect(),
        _ => Vec::new(),
    };
    consts
        .iter()
        .filter_map(|w| w.as_str().map(String::from))
        .collect()
}

/// Every object of a document has every key it names, null where an Option is None (none of
/// these types skips a key), and no other key: so a reader is told of a key renamed or dropped,
/// whichever side it is on.
fn closed(schema: &mut serde_json::Value) {
    use serde_json::Value;
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = map.get("properties") {
                let keys = props.keys().cloned().map(Value::String).collect();
                map.insert("required".into(), Value::Array(keys));
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            map.values_mut().for_each(closed);
        }
        Value::Array(items) => items.iter_mut().for_each(closed),
        _ => {}
    }
}

/// `ferry schema`: the schemas, as checked in.
pub fn schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&schemas()).expect("a schema serialises");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECKED_IN: &str = include_str!("../../workflow/scripts/worker-documents.schema.json");

    #[test]
    fn the_checked_in_schema_is_the_one_the_types_make() {
        assert!(
            CHECKED_IN == schema_text(),
            "workflow/scripts/worker-documents.schema.json is stale: regenerate it with \
             `make worker-schema`"
        );
    }

    #[test]
    fn every_state_is_in_the_states_vocabulary() {
        let all = schemas();
        let phase = &all["states"]["phase"];
        assert_eq!(
            phase,
            &serde_json::json!([
                "listing",
                "planning",
                "running",
                "finishing",
                "stopped",
                "incomplete",
                "failed",
                "complete"
            ])
        );
        assert_eq!(all["states"]["job"].as_array().map(Vec::len), Some(5));
        assert_eq!(all["states"]["engine"].as_array().map(Vec::len), Some(3));
    }

    #[test]
    fn a_version_other_than_this_one_is_refused() {
        assert!(serde_json::from_str::<Version>("1").is_ok());
        assert!(serde_json::from_str::<Version>("2").is_err());
    }
}
