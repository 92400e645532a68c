//! `ferry lease`'s document (commands/lease.rs).

use clap::ValueEnum;
use serde::Serialize;

use super::Version;

#[derive(Clone, Copy, Debug, ValueEnum, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Acquire,
    Renew,
    Release,
}

/// `ferry lease` prints one of these on stdout.
#[derive(Serialize, schemars::JsonSchema)]
pub struct LeaseDoc {
    pub version: Version,
    pub command: &'static str,
    pub action: Action,
    /// The lease is this id's (taken, renewed; or, for release, given back).
    pub held: bool,
    /// What the lock blob says of the lease's holder, when another id holds it.
    pub holder: Option<String>,
    /// How long a lease lasts unless renewed.
    pub seconds: u32,
}
