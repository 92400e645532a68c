//! The carried state's document (`dest.json` at the state location, carried.rs) and `ferry
//! carry --json`'s (commands/carry.rs).

use serde::{Deserialize, Serialize};

use super::{Requests, Version};

/// `dest.json` at the state location: what the carried listing describes and who wrote it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct StateDoc {
    pub version: u32,
    /// The destination the listing describes, as ferry names it in messages (no secrets).
    pub dest: String,
    /// The pass that left it (its run directory's name).
    pub written_by: String,
    pub entries: u64,
    /// The pass that planned against it (or otherwise began to write the destination): from
    /// then on the listing is out of date until that pass leaves a new one.
    pub taken_by: Option<String>,
    /// Paths of the listing at about even entry counts apart (escaped as in a manifest): where
    /// the next pass cuts its listing over several list jobs (crate::shard).
    #[serde(default)]
    pub quantiles: Vec<String>,
}

/// What `merge` was given and wrote.
#[derive(Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Merged {
    pub entries: u64,
    pub observed: u64,
    pub deleted: u64,
    /// Kept in the state's document (`StateDoc::quantiles`), not repeated here.
    #[serde(skip)]
    pub quantiles: Vec<String>,
}

/// `ferry carry --json`.
#[derive(Serialize, schemars::JsonSchema)]
pub struct CarryDoc {
    pub version: Version,
    pub command: &'static str,
    pub state: String,
    #[serde(flatten)]
    pub merged: Merged,
    pub doc: StateDoc,
    pub seconds: f64,
    pub requests: Requests,
}
