//! `ferry names` (hidden): a manifest's entries as a script that writes beside the worker needs
//! them. The replication's broadcast (workflow/scripts/replicate_bcast.py) writes files into a
//! destination the worker also writes, so it must open the very names the worker would: the raw
//! bytes behind each escaped path, and the temp and journal names a download leaves behind. It
//! must also know which files a destination already holds, by the rule a copy skips them by
//! (`same.rs`). Each rule stays here, in one place, instead of being written again in Python:
//! the script reads no column of a manifest itself.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;

use super::{default_concurrency, open, open_options, parse_location};
use crate::commands::args::Common;
use crate::location::Location;
use crate::manifest::{self, md5_hex, Entry, Kind};
use crate::same::{self, Attrs, Compare, Verdict};
use crate::stats::Stats;
use crate::storage::filesystem::temp_name;
use crate::storage::{self, Store};

#[derive(Args, Debug)]
pub struct NamesArgs {
    /// A manifest (`ferry ls` output)
    pub manifest: PathBuf,
    /// Say of each file whether this destination already holds it (a copy would skip it)
    #[arg(long, value_name = "DEST")]
    pub held: Option<String>,
    /// With --held: how a held file is told from a changed one, as `copy --compare`
    #[arg(long, value_enum, default_value = "size-mtime", requires = "held")]
    pub compare: Compare,
    #[command(flatten)]
    pub common: Common,
}

/// The last component of a '/'-separated path: temp files live beside the final name, in its
/// directory.
fn file_name(path: &[u8]) -> &[u8] {
    path.rsplit(|&b| b == b'/').next().unwrap_or(path)
}

/// One record per entry, in manifest order, eight fields each ended by NUL (the one byte no path
/// holds): the entry's manifest line (canonical v2, no newline), its path as raw bytes, for a
/// regular file the names, in its directory, of the temp file a copy writes it under and of a
/// download's journal, its type's name, its size and MD5 (hex) where known, and with --held
/// whether the destination holds the file (`1` or `0`). docs/worker.md, "names".
pub async fn run(args: NamesArgs) -> anyhow::Result<ExitCode> {
    let entries = super::manifest_entries(&args.manifest, false)?
        .collect::<Result<Vec<Entry>, String>>()
        .map_err(anyhow::Error::msg)?;
    let held = match &args.held {
        Some(dest) => Some(holdings(&entries, dest, args.compare, &args.common).await?),
        None => None,
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut line = String::new();
    for (i, e) in entries.iter().enumerate() {
        line.clear();
        manifest::format_tsv(e, &mut line);
        let file = e.kind == Kind::File;
        let temp = |suffix| match file {
            true => temp_name(file_name(&e.path), suffix),
            false => Vec::new(),
        };
        let held = match (&held, file) {
            (Some(h), true) => {
                if h[i] {
                    "1"
                } else {
                    "0"
                }
            }
            _ => "",
        };
        for field in [
            line.trim_end_matches('\n').as_bytes(),
            &e.path,
            &temp("partial"),
            &temp("journal"),
            e.kind.name().as_bytes(),
            e.size.map(|s| s.to_string()).unwrap_or_default().as_bytes(),
            e.md5.as_ref().map(md5_hex).unwrap_or_default().as_bytes(),
            held.as_bytes(),
        ] {
            out.write_all(field)?;
            out.write_all(b"\0")?;
        }
    }
    out.flush().context("writing the names")?;
    Ok(ExitCode::SUCCESS)
}

/// Whether `dest` holds each of `entries` (files only; other kinds are false): what stands at
/// its name, looked up a directory at a time, judged by the copy's rule for the bytes alone —
/// the replication sets no owner nor attributes, and takes mode and mtime with the bytes. An
/// undecided verdict under `--compare md5` hashes the destination's file against the listed
/// MD5, as a copy would; a file the listing gives no MD5 for is then not held.
async fn holdings(
    entries: &[Entry],
    dest: &str,
    compare: Compare,
    common: &Common,
) -> anyhow::Result<Vec<bool>> {
    let loc = parse_location(dest)?;
    if let Location::Local(root) = &loc {
        if !root.is_dir() {
            return Ok(vec![false; entries.len()]);
        }
    }
    let concurrency = default_concurrency();
    let store = open(
        &loc,
        &open_options(common, concurrency, Arc::new(Stats::default())),
    )?;
    let files: Vec<&[u8]> = entries
        .iter()
        .filter(|e| e.kind == Kind::File)
        .map(|e| &e.path[..])
        .collect();
    let (found, failed) = storage::index_paths(&store, &files, concurrency).await;
    if let Some((dir, err)) = failed.into_iter().next() {
        anyhow::bail!(
            "cannot list {}/{}: {err}",
            store.describe(),
            manifest::escape_path(&dir)
        );
    }
    let verdicts: Vec<anyhow::Result<bool>> = futures::stream::iter(entries)
        .map(|e| held(&store, e, found.get(&e.path), compare))
        .buffered(concurrency)
        .collect()
        .await;
    verdicts.into_iter().collect()
}

async fn held(
    store: &Arc<dyn Store>,
    src: &Entry,
    dst: Option<&Entry>,
    compare: Compare,
) -> anyhow::Result<bool> {
    if src.kind != Kind::File {
        return Ok(false);
    }
    Ok(match same::classify(src, dst, compare, Attrs::NONE) {
        Verdict::Undecided if compare == Compare::Md5 && src.md5.is_some() => {
            let dst = dst.expect("an undecided verdict has a destination entry");
            let digest = match dst.md5 {
                Some(m) => Some(m),
                None => crate::storage::content_md5(&**store, &dst.path)
                    .await
                    .with_context(|| format!("hashing {}", dst.display_path()))?,
            };
            same::by_hashes(src, dst, src.md5, digest, Attrs::NONE) == Verdict::Same
        }
        v => !v.rewrites(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_of_the_last_component() {
        assert_eq!(file_name(b"a/b/c.txt"), b"c.txt");
        assert_eq!(file_name(b"top"), b"top");
    }
}
