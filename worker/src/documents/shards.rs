//! `ferry shard`'s document (the run directory's listing/shards.json; shard.rs reads it).

use serde::{Deserialize, Serialize};

use super::{CarriedSummary, Version};

/// `ferry shard`'s document (the run directory's listing/shards.json).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShardsDoc {
    pub version: Version,
    /// List jobs per side: ranges of the key space.
    pub jobs: u32,
    /// The `jobs - 1` paths where one range ends and the next begins, escaped as in a manifest,
    /// in order (equal neighbours make an empty range).
    pub cuts: Vec<String>,
    /// What balanced the ranges.
    pub basis: Basis,
    /// The destination's carried-or-fresh decision, made once for every list job of it; null
    /// when the destination is not listed (a baseline) or not carried.
    pub carried: Option<CarriedSummary>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// The entry counts of the listing the last pass carried.
    Carried,
    /// A shallow scan of the source: the first levels' entries, counted.
    Scan,
}
