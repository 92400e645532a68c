use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use futures::{StreamExt, TryStreamExt};
use md5::{Digest, Md5};
use serde_json::json;

use super::{default_concurrency, entries_of, object_destination, open, open_options, parse_location, read_manifest, resolve, Root};
use crate::cli::Common;
use crate::error::StoreError;
use crate::manifest::{md5_hex, Entry, Kind};
use crate::stats::Stats;
use crate::storage::{self, Store};

#[derive(Args, Debug)]
pub struct VerifyArgs {
    pub source: String,
    pub dest: String,
    /// Check only the entries of this manifest (then nothing is reported missing on the source)
    #[arg(long, value_name = "MANIFEST")]
    pub files_from: Option<PathBuf>,
    /// Compare MD5 too: Content-MD5 on blobs, computed for local files
    #[arg(long)]
    pub checksum: bool,
    /// With --checksum: hash the bytes of blobs that have no Content-MD5
    #[arg(long, requires = "checksum")]
    pub download: bool,
    /// List identical files too (`= path`)
    #[arg(long)]
    pub all: bool,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Status {
    Same,
    Differ,
    MissingOnDst,
    MissingOnSrc,
    Error,
}

impl Status {
    /// The marks of `rclone check --combined`: `+` only in the source, `-` only in the destination.
    fn mark(self) -> char {
        match self {
            Status::Same => '=',
            Status::Differ => '*',
            Status::MissingOnDst => '+',
            Status::MissingOnSrc => '-',
            Status::Error => '!',
        }
    }
    fn name(self) -> &'static str {
        match self {
            Status::Same => "same",
            Status::Differ => "differ",
            Status::MissingOnDst => "missing_on_dst",
            Status::MissingOnSrc => "missing_on_src",
            Status::Error => "error",
        }
    }
}

/// The MD5 of an object: known from the listing, computed for local files, or downloaded.
async fn md5_of(store: &Arc<dyn Store>, e: &Entry, download: bool) -> Result<[u8; 16], String> {
    if let Some(m) = e.md5 {
        return Ok(m);
    }
    if let Some(local) = store.as_local() {
        let (local, rel) = (local.clone(), e.path.clone());
        return tokio::task::spawn_blocking(move || local.md5(&rel).map_err(|err| format!("{}: {err}", local.full_path(&rel).display())))
            .await
            .map_err(|err| err.to_string())?;
    }
    if !download {
        return Err(format!("no Content-MD5 on {} (rerun with --download to hash its bytes)", e.display_path()));
    }
    const BLOCK: u64 = 8 << 20;
    let size = e.size();
    let mut h = Md5::new();
    let blocks = size.div_ceil(BLOCK);
    // Every range from the one version: a blob rewritten meanwhile fails, never hashes a mix.
    let version = match blocks > 1 {
        true => store.version(&e.path).await.map_err(|err| err.to_string())?.map(|(v, _)| v),
        false => None,
    };
    let version = &version;
    let mut stream = futures::stream::iter(0..blocks)
        .map(|i| {
            let store = store.clone();
            let path = e.path.clone();
            async move { store.read(&path, i * BLOCK, (size - i * BLOCK).min(BLOCK), version.as_deref()).await }
        })
        .buffered(4);
    while let Some(chunk) = stream.try_next().await.map_err(|err: StoreError| err.to_string())? {
        h.update(&chunk.data);
    }
    Ok(h.finalize().into())
}

async fn compare(src: &Arc<dyn Store>, dst: &Arc<dyn Store>, s: &Entry, d: &Entry, args: &VerifyArgs) -> (Status, String) {
    if s.kind != d.kind {
        return (Status::Differ, format!("{} on source, {} on destination", s.kind.name(), d.kind.name()));
    }
    if s.size != d.size {
        return (Status::Differ, format!("size {} != {}", s.size(), d.size()));
    }
    if s.kind == Kind::Symlink {
        // Same length says little about a link: compare where it points.
        if let (Some(sl), Some(dl)) = (src.as_local(), dst.as_local()) {
            let (a, b) = (sl.readlink(&s.path), dl.readlink(&d.path));
            return match (a, b) {
                (Ok(a), Ok(b)) if a == b => (Status::Same, String::new()),
                (Ok(a), Ok(b)) => (Status::Differ, format!("symlink to {} != {}", crate::manifest::escape_path(&a), crate::manifest::escape_path(&b))),
                (Err(e), _) | (_, Err(e)) => (Status::Error, e.to_string()),
            };
        }
    }
    if !args.checksum || s.kind != Kind::File {
        return (Status::Same, String::new());
    }
    let (a, b) = tokio::join!(md5_of(src, s, args.download), md5_of(dst, d, args.download));
    match (a, b) {
        (Ok(a), Ok(b)) if a == b => (Status::Same, String::new()),
        (Ok(a), Ok(b)) => (Status::Differ, format!("md5 {} != {}", md5_hex(&a), md5_hex(&b))),
        (Err(e), _) | (_, Err(e)) => (Status::Error, e),
    }
}

pub async fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let concurrency = default_concurrency();
    let opts = open_options(&args.common, concurrency, Arc::new(Stats::default()));
    let src_loc = parse_location(&args.source)?;
    let dst_loc = parse_location(&args.dest)?;
    let mut rows: Vec<(Status, String, String)> = Vec::new();
    let (src, dst, src_entries, rename) = match resolve(&src_loc, &opts, true).await? {
        Root::Object { parent, entry, name } => {
            let (dp, name) = object_destination(&dst_loc, &name);
            (open(&parent, &opts)?, open(&dp, &opts)?, vec![entry], Some(name))
        }
        Root::Tree(loc) => {
            let src = open(&loc, &opts)?;
            let entries = match args.files_from.as_deref() {
                // A partition: both sides are looked at fresh (the manifest may predate the
                // copy), in the directories it names only.
                Some(m) => {
                    let listed = read_manifest(m)?;
                    let paths: Vec<&[u8]> = listed.iter().filter(|e| e.kind != Kind::Dir).map(|e| &e.path[..]).collect();
                    let (mut found, failed) = storage::index_paths(&src, &paths, concurrency).await;
                    rows.extend(unlisted(&paths, &failed, "source"));
                    // A path gone from the source is left out: it shows as missing on the
                    // destination only if the destination still lacks it.
                    paths.iter().filter_map(|p| found.remove(*p)).collect()
                }
                None => entries_of(&src, None, true).await?,
            };
            (src, open(&dst_loc, &opts)?, entries, None)
        }
    };
    let dst_index: HashMap<Vec<u8>, Entry> = match (&rename, &args.files_from) {
        (Some(name), _) => dst.head(name).await?.map(|(e, _)| (src_entries[0].path.clone(), e)).into_iter().collect(),
        (None, Some(_)) => {
            let paths: Vec<&[u8]> = src_entries.iter().map(|e| &e.path[..]).collect();
            let (found, failed) = storage::index_paths(&dst, &paths, concurrency).await;
            rows.extend(unlisted(&paths, &failed, "destination"));
            found
        }
        (None, None) => storage::list_all(&dst, true).await?.into_iter().map(|e| (e.path.clone(), e)).collect(),
    };
    // Paths already judged (their directory could not be listed) are not judged again.
    let judged: std::collections::HashSet<String> = rows.iter().map(|r| r.1.clone()).collect();
    let src_entries = src_entries.into_iter().filter(|e| judged.is_empty() || !judged.contains(&e.display_path())).collect();
    finish(&args, &src, &dst, src_entries, dst_index, rows, rename, started).await
}

/// Rows for the paths in directories whose listing failed: not known, so neither same nor
/// missing.
fn unlisted(paths: &[&[u8]], failed: &[(Vec<u8>, StoreError)], side: &str) -> Vec<(Status, String, String)> {
    if failed.is_empty() {
        return Vec::new();
    }
    let why: HashMap<&[u8], String> = failed.iter().map(|(d, e)| (&d[..], format!("cannot list the {side}: {e}"))).collect();
    paths.iter().filter_map(|p| why.get(crate::storage::beneath::split(p).0).map(|w| (Status::Error, crate::manifest::escape_path(p), w.clone()))).collect()
}

#[allow(clippy::too_many_arguments)]
async fn finish(args: &VerifyArgs, src: &Arc<dyn Store>, dst: &Arc<dyn Store>, src_entries: Vec<Entry>, mut dst_index: HashMap<Vec<u8>, Entry>, mut rows: Vec<(Status, String, String)>, rename: Option<Vec<u8>>, started: Instant) -> anyhow::Result<ExitCode> {
    let concurrency = default_concurrency();
    let mut pairs = Vec::new();
    // Blob storage has no directories or symlinks; copy ignores them, so verify does too.
    let blob_side = src.local_root().is_none() || dst.local_root().is_none();
    for s in src_entries.into_iter().filter(|e| e.kind != Kind::Dir && !(blob_side && e.kind == Kind::Symlink)) {
        match dst_index.remove(&s.path) {
            Some(d) => pairs.push((s, d)),
            None => rows.push((Status::MissingOnDst, s.display_path(), String::new())),
        }
    }
    if args.files_from.is_none() && rename.is_none() {
        for d in dst_index.into_values().filter(|e| e.kind != Kind::Dir) {
            rows.push((Status::MissingOnSrc, d.display_path(), String::new()));
        }
    }
    let compared: Vec<(Status, String, String)> = futures::stream::iter(pairs)
        .map(|(s, d)| {
            let (src, dst) = (src.clone(), dst.clone());
            async move {
                let (st, why) = compare(&src, &dst, &s, &d, args).await;
                (st, s.display_path(), why)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    rows.extend(compared);
    rows.sort_by(|a, b| a.1.cmp(&b.1));

    let count = |st: Status| rows.iter().filter(|r| r.0 == st).count();
    let bad = rows.iter().filter(|r| r.0 != Status::Same).count();
    if args.json {
        let entries: Vec<_> = rows.iter().filter(|r| r.0 != Status::Same || args.all).map(|(st, p, why)| json!({"status": st.name(), "path": p, "reason": why})).collect();
        super::print_json(&json!({
            "command": "verify",
            "source": src.describe(),
            "dest": dst.describe(),
            "checksum": args.checksum,
            "same": count(Status::Same),
            "differ": count(Status::Differ),
            "missing_on_dst": count(Status::MissingOnDst),
            "missing_on_src": count(Status::MissingOnSrc),
            "error": count(Status::Error),
            "entries": entries,
            "seconds": (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        }));
    } else {
        for (st, p, why) in rows.iter().filter(|r| r.0 != Status::Same || args.all) {
            if why.is_empty() {
                println!("{} {p}", st.mark());
            } else {
                println!("{} {p}\t{why}", st.mark());
            }
        }
        eprintln!(
            "{} same, {} differ, {} missing on destination, {} missing on source, {} errors",
            count(Status::Same),
            count(Status::Differ),
            count(Status::MissingOnDst),
            count(Status::MissingOnSrc),
            count(Status::Error)
        );
    }
    Ok(if bad > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
