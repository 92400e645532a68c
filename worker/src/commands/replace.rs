//! What a copy's type changes delete. Where the source now has a file or a symlink and the
//! destination a directory (or the reverse), the copy removes the old entry and everything
//! under it: a deletion like prune's, so it is found before anything is written, shown by a
//! dry run, counted in the summary, judged by --max-delete and written to a deletion log.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::engine::{Index, Job};
use crate::manifest::{Entry, Kind, Writer};
use crate::storage::Store;

/// One entry of another kind in a job's way, and what goes with it.
pub struct Replacement {
    /// The destination's entry at the job's path.
    pub old: Entry,
    /// Everything under it (a directory's whole subtree), in no particular order.
    pub under: Vec<Entry>,
}

impl Replacement {
    /// Entries removed: the old one and those under it.
    pub fn entries(&self) -> u64 {
        1 + self.under.len() as u64
    }

    pub fn bytes(&self) -> u64 {
        self.old.size() + self.under.iter().map(Entry::size).sum::<u64>()
    }

    /// "directory data (500 entries under it, 2.0 KiB)" or "file notes.txt (12 B)".
    pub fn describe(&self) -> String {
        let what = match self.old.kind {
            Kind::Dir => "directory",
            Kind::Symlink => "symlink",
            Kind::File => "file",
            _ => "node",
        };
        let size = crate::units::human_bytes(self.bytes());
        match self.old.kind {
            Kind::Dir => format!(
                "{what} {} ({} entries under it, {size})",
                self.old.display_path(),
                self.under.len()
            ),
            _ => format!("{what} {} ({size})", self.old.display_path()),
        }
    }
}

/// Whether the destination holds `e` as an entry of its own: in Blob storage a prefix without
/// a folder stub (no mtime) is only the shape of the names under it, nothing that is deleted.
fn real(dst: &Arc<dyn Store>, e: &Entry) -> bool {
    e.kind != Kind::Dir || e.mtime.is_some() || dst.capabilities().directories
}

/// The jobs that replace an entry of another kind, by the destination's listing (None: none
/// was taken, and nothing is compared or replaced), with each replaced directory's subtree
/// listed.
pub async fn find(
    dst: &Arc<dyn Store>,
    jobs: &[Job],
    index: Option<&Index>,
) -> anyhow::Result<Vec<Replacement>> {
    let Some(index) = index else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for job in jobs {
        let Some(old) = index.get(&job.dst_path).filter(|e| real(dst, e)) else {
            continue;
        };
        if old.kind == job.src.kind {
            continue;
        }
        let under = match old.kind {
            Kind::Dir => subtree(dst, &old.path).await?,
            _ => Vec::new(),
        };
        found.push(Replacement {
            old: old.clone(),
            under,
        });
    }
    Ok(found)
}

/// Everything under directory `dir`, a level at a time. A listing that fails stops the copy:
/// what a replacement deletes must be known before it is judged.
async fn subtree(dst: &Arc<dyn Store>, dir: &[u8]) -> anyhow::Result<Vec<Entry>> {
    let (mut out, mut todo) = (Vec::new(), vec![dir.to_vec()]);
    while let Some(d) = todo.pop() {
        let listed = dst.list_dir(&d).await.map_err(|e| {
            anyhow::anyhow!(
                "cannot list {}/{}, which a type change would replace: {e}",
                dst.describe(),
                crate::manifest::escape_path(&d)
            )
        })?;
        for e in listed.unwrap_or_default() {
            if e.kind == Kind::Dir {
                todo.push(e.path.clone());
            }
            if real(dst, &e) {
                out.push(e);
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The destination's entries a copy knows of, for --max-delete's share: its listing, and what
/// the replaced directories hold beyond it (a part's listing holds only the directories it
/// writes into).
pub fn known_entries(dst: &Arc<dyn Store>, index: &Index, found: &[Replacement]) -> u64 {
    let listed = index.values().filter(|e| real(dst, e)).count() as u64;
    let beyond = found
        .iter()
        .flat_map(|r| &r.under)
        .filter(|e| !index.contains_key(&e.path))
        .count() as u64;
    listed + beyond
}

/// The deletion log of a copy's replacements: each replaced entry after what was under it.
pub struct Log {
    pub path: PathBuf,
    writer: Writer<BufWriter<std::fs::File>>,
}

impl Log {
    pub fn create(asked: Option<&Path>) -> anyhow::Result<Log> {
        let path = match asked {
            Some(p) => p.to_path_buf(),
            None => super::prune::default_log("copy")?,
        };
        let writer = super::prune::create_log(&path)?;
        Ok(Log { path, writer })
    }

    pub fn write(&mut self, r: &Replacement) -> std::io::Result<()> {
        // Innermost first, as they go.
        for e in r.under.iter().rev() {
            self.writer.write(e)?;
        }
        self.writer.write(&r.old)
    }

    pub fn finish(self) -> std::io::Result<()> {
        self.writer.finish()?;
        Ok(())
    }
}

/// Whether the copy removed what `r` replaces: the old kind no longer stands at its path (a
/// look that fails counts as removed: the log rather says too much than too little).
pub async fn done(dst: &Arc<dyn Store>, r: &Replacement) -> bool {
    !matches!(dst.head(&r.old.path).await, Ok(Some((now, _))) if now.kind == r.old.kind)
}
