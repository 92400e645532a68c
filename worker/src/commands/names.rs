//! `ferry names` (hidden): a manifest's entries as a script that writes beside the worker needs
//! them. The replication's broadcast (workflow/scripts/replicate_bcast.py) writes files into a
//! destination the worker also writes, so it must open the very names the worker would: the raw
//! bytes behind each escaped path, and the temp and journal names a download leaves behind. Both
//! rules stay here, in one place, instead of being written again in Python.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::manifest::{self, Kind};
use crate::storage::local::temp_name;

#[derive(Args, Debug)]
pub struct NamesArgs {
    /// A manifest (`ferry ls` output)
    pub manifest: PathBuf,
}

/// The last component of a '/'-separated path: temp files live beside the final name, in its
/// directory.
fn file_name(path: &[u8]) -> &[u8] {
    path.rsplit(|&b| b == b'/').next().unwrap_or(path)
}

/// One record per entry, in manifest order, four fields each ended by NUL (the one byte no path
/// holds): the entry's manifest line (canonical v2, no newline), its path as raw bytes, and for
/// a regular file the names, in its directory, of the temp file a copy writes it under and of a
/// download's journal (empty for other types). docs/worker.md, "names".
pub fn run(args: NamesArgs) -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut line = String::new();
    for entry in super::manifest_entries(&args.manifest)? {
        let e = entry.map_err(anyhow::Error::msg)?;
        line.clear();
        manifest::format_tsv(&e, &mut line);
        let file = e.kind == Kind::File;
        for field in [
            line.trim_end_matches('\n').as_bytes(),
            &e.path,
            &if file {
                temp_name(file_name(&e.path), "partial")
            } else {
                Vec::new()
            },
            &if file {
                temp_name(file_name(&e.path), "journal")
            } else {
                Vec::new()
            },
        ] {
            out.write_all(field)?;
            out.write_all(b"\0")?;
        }
    }
    out.flush().context("writing the names")?;
    Ok(ExitCode::SUCCESS)
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
