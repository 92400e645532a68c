//! `ferry lease STATE acquire|renew|release --id ID`: the Blob lease that keeps one pass at a
//! time on a migration whose carried state is in Blob storage (docs/pipeline.md, one pass at a
//! time). The pipelines' lock holder (workflow/scripts/ferry_lock.py) takes it beside the run
//! directory's lock file and renews it while its engine runs.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use clap::Args;

use super::{open_options, parse_location, print_json};
use crate::commands::args::Common;
use crate::documents::lease::{Action, LeaseDoc};
use crate::location::Location;
use crate::stats::Stats;
use crate::storage::azure::lease::{Lease, LEASE_SECONDS};
use crate::storage::azure::AzureStore;

/// The blob under the state's prefix that the lease is on.
const LOCK: &[u8] = b"lock";

#[derive(Args, Debug)]
pub struct LeaseArgs {
    /// The carried state's location (a Blob prefix)
    pub state: String,
    pub action: Action,
    /// The lease's id, chosen by the taker (a GUID), the same for its renewals and release
    #[arg(long, value_name = "GUID")]
    pub id: String,
    /// With acquire: who takes it (text, e.g. JSON naming pass, host, pid), kept in the lock
    /// blob for a refused pass to name
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub holder: String,
    #[command(flatten)]
    pub common: Common,
}

/// Exit 0: done; 3: another id holds the lease (or, to renew or release, this one no longer).
pub async fn run(args: LeaseArgs) -> anyhow::Result<ExitCode> {
    let opts = open_options(&args.common, 1, Arc::new(Stats::default()));
    let loc = parse_location(&args.state)?;
    let Location::Blob(at) = &loc else {
        anyhow::bail!(
            "{loc} is not in Blob storage: a lease is for a Blob state; a local one is kept by the run directory's lock"
        );
    };
    // A lease is Blob storage's alone: the store is made as one, not found behind the trait.
    let blob = AzureStore::new(at.clone(), &opts).with_context(|| format!("cannot open {loc}"))?;
    let got = match args.action {
        Action::Acquire => {
            let holder = Bytes::from(args.holder.clone().into_bytes());
            blob.lease_acquire(LOCK, &args.id, holder).await?
        }
        Action::Renew => blob.lease_renew(LOCK, &args.id).await?,
        Action::Release => blob.lease_release(LOCK, &args.id).await?,
    };
    let (held, holder) = match got {
        Lease::Held => (true, None),
        Lease::Refused(said) => (false, Some(String::from_utf8_lossy(&said).into_owned())),
    };
    print_json(&LeaseDoc {
        version: Default::default(),
        command: "lease",
        action: args.action,
        held,
        holder,
        seconds: LEASE_SECONDS,
    });
    Ok(ExitCode::from(if held { 0 } else { 3 }))
}
