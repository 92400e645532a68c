use std::process::ExitCode;

use super::args::Common;
use super::{env, parse_location};
use crate::location::Location;
use crate::storage::azure::auth;
use clap::Args;

#[derive(Args, Debug)]
pub struct EnvArgs {
    /// A location, to show the account and credential that would serve it
    pub location: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// Variables ferry reads; values of the secret ones are never printed, only whether they are set.
const VARS: &[(&str, bool)] = &[
    ("AZURE_STORAGE_ACCOUNT", false),
    ("AZURE_STORAGE_KEY", true),
    ("AZURE_STORAGE_SAS_TOKEN", true),
    ("AZURE_STORAGE_BLOB_ENDPOINT", false),
    ("AZURE_CLIENT_ID", false),
    ("AZURE_TENANT_ID", false),
    ("AZURE_FEDERATED_TOKEN_FILE", false),
    ("AZURE_AUTHORITY_HOST", false),
    ("FERRY_IMDS_ENDPOINT", false),
    ("FERRY_AUTH", false),
    ("FERRY_CONCURRENCY", false),
    ("FERRY_PARALLEL_FILES", false),
    ("FERRY_MAX_RETRIES", false),
];

pub async fn run(args: EnvArgs) -> anyhow::Result<ExitCode> {
    let env = env();
    let (account, url_sas) = match args.location.as_deref().map(parse_location).transpose()? {
        Some(Location::Blob(b)) => (b.account.clone(), b.sas.is_some()),
        Some(Location::Local(_)) => {
            println!("local path: no credentials needed");
            return Ok(ExitCode::SUCCESS);
        }
        None => (env("AZURE_STORAGE_ACCOUNT").unwrap_or_default(), false),
    };
    let choice = auth::choose(args.common.auth, url_sas, &account, &*env)?;
    println!("credential: {} ({})", choice.mode.name(), choice.detail);
    for (k, secret) in VARS {
        match env(k) {
            Some(v) if *secret => println!("{k}=<set, {} characters>", v.len()),
            Some(v) => println!("{k}={v}"),
            None => println!("{k} (unset)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
