//! `ferry verify --json`'s document (commands/verify.rs fills it).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Requests, Version};

/// `--json`'s document, keys in the order they have always been printed in.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub version: Version,
    /// Every entry the same: the one answer to "did the verify pass?" that the pipeline reads
    /// (prune's guard, the report), the same as the exit status 0.
    pub passed: bool,
    pub checksum: bool,
    /// What was compared of each file present on both sides, for a reader to say ("2271
    /// same" by sizes reads otherwise like by MD5s).
    pub compared: Vec<Compared>,
    pub command: &'static str,
    pub dest: String,
    pub differ: usize,
    /// The entries not the same (all of them with --all).
    #[schemars(with = "Vec<Row>")]
    pub entries: Entries,
    pub error: usize,
    pub missing_on_dst: usize,
    pub missing_on_src: usize,
    pub requests: Requests,
    pub same: usize,
    pub seconds: f64,
    pub source: String,
}

/// One thing verify compares of an entry present on both sides. A symlink's target is compared
/// whatever is asked.
#[derive(Serialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Compared {
    /// Always.
    Size,
    /// `--checksum`: Content-MD5 of blobs, computed for local files (`--download`: blobs
    /// without one hashed).
    Md5,
    /// `--metadata`: mtime, and what --preserve keeps (mode, owner, attributes, ACLs).
    Metadata,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Same,
    Differ,
    MissingOnDst,
    MissingOnSrc,
    Error,
}

/// One line of the report.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Row {
    // Fields in the order of the JSON's keys (alphabetical, as they have always been printed).
    pub path: String,
    pub reason: String,
    pub status: Status,
}

/// The rows to list, read back from the scratch file as they are written out.
pub enum Entries {
    Memory(Vec<Row>),
    File(PathBuf),
}

impl Serialize for Entries {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut seq = ser.serialize_seq(None)?;
        match self {
            Entries::Memory(rows) => {
                for row in rows {
                    seq.serialize_element(row)?;
                }
            }
            Entries::File(path) => {
                let file = File::open(path).map_err(S::Error::custom)?;
                for line in BufReader::with_capacity(1 << 20, file).lines() {
                    let row: Row = serde_json::from_str(&line.map_err(S::Error::custom)?)
                        .map_err(S::Error::custom)?;
                    seq.serialize_element(&row)?;
                }
            }
        }
        seq.end()
    }
}
