//! Listings sorted by path on disk, and the merge-join of two of them: how `plan`, `prune` and
//! `verify` compare a source with a destination of tens of millions of entries in the memory of
//! one sort run. Each listing is sorted externally (`sort`), by the raw bytes of its paths; the
//! join walks the two sorted streams together by that same byte order.

pub mod sort;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::error::StoreError;
use crate::manifest::Entry;
use crate::storage::Store;
use sort::{Order, Runs, Sorter};

/// Why a listing could not be sorted. A failed listing is kept apart from a failed spill: a
/// prune must refuse on the first (the listing is incomplete) and report the second as the
/// local error it is.
#[derive(Debug, thiserror::Error)]
pub enum SortError {
    #[error("{0}")]
    Listing(String),
    #[error("cannot spill a sorted run into {dir}: {source}")]
    Spill { dir: PathBuf, source: io::Error },
}

fn spill_failed(dir: &Path) -> impl Fn(io::Error) -> SortError + '_ {
    move |source| SortError::Spill {
        dir: dir.to_path_buf(),
        source,
    }
}

/// A listing being sorted by path into runs under a scratch directory.
pub struct PathSort<'a> {
    sorter: Sorter,
    scratch: &'a Path,
}

impl<'a> PathSort<'a> {
    pub fn new(scratch: &'a Path, stem: &str, budget: usize) -> Self {
        PathSort {
            sorter: Sorter::new(Order::Path, budget, scratch.to_path_buf(), stem),
            scratch,
        }
    }

    /// An `Err` entry fails the whole as a failed listing.
    pub fn push(&mut self, entry: Result<Entry, String>) -> Result<(), SortError> {
        self.sorter
            .push(&entry.map_err(SortError::Listing)?)
            .map_err(spill_failed(self.scratch))
    }

    pub fn finish(self) -> Result<Runs, SortError> {
        self.sorter.finish().map_err(spill_failed(self.scratch))
    }
}

/// Sorts entries by path into runs under `scratch`; the first `Err` entry ends it as a failed
/// listing.
pub fn sort_entries(
    entries: impl Iterator<Item = Result<Entry, String>>,
    scratch: &Path,
    stem: &str,
    budget: usize,
) -> Result<Runs, SortError> {
    let mut sort = PathSort::new(scratch, stem, budget);
    for e in entries {
        sort.push(e)?;
    }
    sort.finish()
}

/// Sorts a fresh listing of `store` by path into runs under `scratch`, as it streams in. Any
/// error the listing meets fails the whole: an incomplete listing must never pass for a
/// complete one.
pub async fn sort_store(
    store: &Arc<dyn Store>,
    scratch: &Path,
    stem: &str,
    budget: usize,
) -> Result<Runs, SortError> {
    let (tx, mut rx) = mpsc::channel(1024);
    let s = store.clone();
    let task = tokio::spawn(async move { s.list(true, tx).await });
    let mut sort = PathSort::new(scratch, stem, budget);
    let mut failed: Option<StoreError> = None;
    while let Some(item) = rx.recv().await {
        match item {
            Ok(e) => sort.push(Ok(e))?,
            Err(e) => {
                failed = Some(e);
                // Dropping the receiver stops the walk: nothing after a failure is used.
                break;
            }
        }
    }
    drop(rx);
    let ended = match task.await {
        Ok(r) => r,
        Err(e) => Err(StoreError::Invalid(format!("listing task failed: {e}"))),
    };
    if let Some(e) = failed.or(ended.err()) {
        return Err(SortError::Listing(e.to_string()));
    }
    sort.finish()
}

/// Which side of a join an entry came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Source,
    Destination,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Source => "source",
            Side::Destination => "destination",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// A listing that names one path twice is broken, and which of the two to believe cannot
    /// be decided here.
    #[error("the {} listing names {path:?} more than once", .side.name())]
    Duplicate { side: Side, path: String },
    #[error("cannot read back the sorted {} listing: {source}", .side.name())]
    Read { side: Side, source: io::Error },
}

/// One path of the merge-join: on one side or both.
pub enum Pair {
    Source(Entry),
    Dest(Entry),
    Both(Entry, Entry),
}

/// One sorted stream of a join, one entry ahead.
struct Cursor<I> {
    inner: I,
    head: Option<Entry>,
    side: Side,
}

impl<I: Iterator<Item = io::Result<Entry>>> Cursor<I> {
    fn new(mut inner: I, side: Side) -> Result<Self, JoinError> {
        let head = inner
            .next()
            .transpose()
            .map_err(|source| JoinError::Read { side, source })?;
        Ok(Cursor { inner, head, side })
    }

    fn take(&mut self) -> Result<Entry, JoinError> {
        let e = self.head.take().expect("taken only when present");
        self.head = self
            .inner
            .next()
            .transpose()
            .map_err(|source| JoinError::Read {
                side: self.side,
                source,
            })?;
        if self.head.as_ref().is_some_and(|n| n.path == e.path) {
            return Err(JoinError::Duplicate {
                side: self.side,
                path: e.display_path(),
            });
        }
        Ok(e)
    }
}

/// Walks two path-sorted streams together, yielding each path once with what each side has.
/// Both streams must be in the byte order of their paths, as `Order::Path` sorts them.
pub struct Join<S, D> {
    src: Cursor<S>,
    dst: Cursor<D>,
    failed: bool,
}

impl<S: Iterator<Item = io::Result<Entry>>, D: Iterator<Item = io::Result<Entry>>> Join<S, D> {
    pub fn new(src: S, dst: D) -> Result<Self, JoinError> {
        Ok(Join {
            src: Cursor::new(src, Side::Source)?,
            dst: Cursor::new(dst, Side::Destination)?,
            failed: false,
        })
    }

    fn step(&mut self) -> Option<Result<Pair, JoinError>> {
        use std::cmp::Ordering::*;
        let order = match (&self.src.head, &self.dst.head) {
            (None, None) => return None,
            (Some(_), None) => Less,
            (None, Some(_)) => Greater,
            (Some(s), Some(d)) => s.path.cmp(&d.path),
        };
        Some(match order {
            Less => self.src.take().map(Pair::Source),
            Greater => self.dst.take().map(Pair::Dest),
            Equal => self
                .src
                .take()
                .and_then(|s| Ok(Pair::Both(s, self.dst.take()?))),
        })
    }
}

impl<S: Iterator<Item = io::Result<Entry>>, D: Iterator<Item = io::Result<Entry>>> Iterator
    for Join<S, D>
{
    type Item = Result<Pair, JoinError>;

    /// Ends after the first error: what follows a broken stream is not to be trusted.
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.step();
        self.failed = matches!(item, Some(Err(_)));
        item
    }
}

/// Walks two path-sorted streams together, handing each pair to `visit`.
pub fn join(
    src: impl Iterator<Item = io::Result<Entry>>,
    dst: impl Iterator<Item = io::Result<Entry>>,
    mut visit: impl FnMut(Pair) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for pair in Join::new(src, dst)? {
        visit(pair?)?;
    }
    Ok(())
}

/// A private directory for sorted runs and spill files, removed with its contents when dropped:
/// on success, on an error, on a refusal, and on SIGINT, SIGTERM or SIGHUP (see
/// `commands::interruptible`). Only a SIGKILL leaves it behind.
pub struct Scratch(tempfile::TempDir);

impl Scratch {
    /// In `parent`, or the system's temporary directory ($TMPDIR, else /tmp).
    pub fn new(parent: Option<&Path>) -> io::Result<Scratch> {
        let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let dir = tempfile::Builder::new()
            .prefix("ferry-scratch-")
            .tempdir_in(&parent)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot create a scratch directory in {}: {e}",
                        parent.display()
                    ),
                )
            })?;
        Ok(Scratch(dir))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Kind;

    fn f(path: &[u8]) -> Entry {
        Entry {
            path: path.to_vec(),
            kind: Kind::File,
            size: Some(1),
            ..Default::default()
        }
    }

    fn stream(paths: &[&[u8]]) -> impl Iterator<Item = io::Result<Entry>> {
        paths
            .iter()
            .map(|p| Ok(f(p)))
            .collect::<Vec<_>>()
            .into_iter()
    }

    fn describe(src: &[&[u8]], dst: &[&[u8]]) -> Result<Vec<String>, JoinError> {
        Join::new(stream(src), stream(dst))?
            .map(|p| {
                Ok(match p? {
                    Pair::Source(s) => format!("<{}", s.display_path()),
                    Pair::Dest(d) => format!(">{}", d.display_path()),
                    Pair::Both(s, _) => format!("={}", s.display_path()),
                })
            })
            .collect()
    }

    /// Sorts paths as a listing is sorted before a join: through the external sort, in runs of
    /// a few entries each.
    fn sorted(paths: &[&[u8]]) -> Vec<Vec<u8>> {
        let dir = tempfile::tempdir().unwrap();
        let runs =
            sort_entries(paths.iter().rev().map(|p| Ok(f(p))), dir.path(), "t", 100).unwrap();
        assert!(runs.count() > 1, "the test means to merge several runs");
        runs.merge().unwrap().map(|e| e.unwrap().path).collect()
    }

    #[test]
    fn join_pairs_by_path() {
        assert_eq!(
            describe(&[b"a", b"b", b"d"], &[b"b", b"c", b"d", b"e"]).unwrap(),
            ["<a", "=b", ">c", "=d", ">e"]
        );
        assert_eq!(describe(&[], &[b"x"]).unwrap(), [">x"]);
        assert_eq!(describe(&[b"x"], &[]).unwrap(), ["<x"]);
        assert!(describe(&[], &[]).unwrap().is_empty());
    }

    #[test]
    fn join_refuses_duplicates_and_stops() {
        let err = describe(&[b"a", b"b", b"b"], &[]).unwrap_err();
        assert!(
            matches!(&err, JoinError::Duplicate { side: Side::Source, path } if path == "b"),
            "{err}"
        );
        let err = describe(&[b"a"], &[b"a", b"a"]).unwrap_err().to_string();
        assert!(
            err.contains("destination") && err.contains("\"a\""),
            "{err}"
        );
        let mut j = Join::new(stream(&[b"a", b"a", b"z"]), stream(&[])).unwrap();
        assert!(j.next().unwrap().is_err());
        assert!(j.next().is_none(), "nothing after an error");
    }

    #[test]
    fn join_passes_read_errors_on() {
        let broken = vec![Ok(f(b"a")), Err(io::Error::other("disk gone"))].into_iter();
        let err = join(broken, stream(&[b"b"]), |_| Ok(()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("disk gone"), "{err}");
    }

    #[test]
    fn the_sort_gives_the_byte_order_the_join_expects() {
        // '-' < '.' < '/' < '0' in bytes: a directory's children ("a/…") sort after siblings
        // such as "a-b" and "a.b", and before "a0". Escaped names ("\t", "\n", "\\", bytes that
        // are not UTF-8) sort by their raw bytes, not by their escaped text.
        let paths: [&[u8]; 12] = [
            b"a", b"a-b", b"a.b", b"a/b", b"a/b/c", b"a/b.c", b"a/b0", b"a0", b"a\t", b"a\\",
            b"a\xff", b"b",
        ];
        let mut want: Vec<Vec<u8>> = paths.iter().map(|p| p.to_vec()).collect();
        want.sort();
        assert_eq!(sorted(&paths), want);
        assert_eq!(want[0], b"a", "a prefix sorts before what extends it");
        let pos = |p: &[u8]| want.iter().position(|w| w == p).unwrap();
        assert!(
            pos(b"a.b") < pos(b"a/b")
                && pos(b"a/b.c") < pos(b"a/b/c")
                && pos(b"a/b/c") < pos(b"a/b0")
                && pos(b"a/b0") < pos(b"a0")
        );
        assert!(
            pos(b"a\t") < pos(b"a-b") && pos(b"a\\") > pos(b"a0") && pos(b"a\xff") > pos(b"a\\")
        );
    }

    #[test]
    fn sorted_sides_join_across_interleaved_directories() {
        // The source has the directory "a" with children and the siblings "a-b", "a.b" that sort
        // between "a" and "a/…"; the destination has the same names with others mixed in. Every
        // name must meet its twin, whatever was listed first.
        let src: [&[u8]; 6] = [b"a/x", b"a.b", b"a", b"a-b", b"a/b/c", b"a\tb"];
        let dst: [&[u8]; 8] = [
            b"a/b/c", b"a", b"a/b", b"a.b/y", b"a.b", b"a-b", b"a/x", b"a\\tb",
        ];
        let (s, d) = (sorted(&src), sorted(&dst));
        let got = describe(
            &s.iter().map(|p| &p[..]).collect::<Vec<_>>(),
            &d.iter().map(|p| &p[..]).collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(
            got,
            ["=a", "<a\\tb", "=a-b", "=a.b", ">a.b/y", ">a/b", "=a/b/c", "=a/x", ">a\\\\tb"]
        );
    }

    #[test]
    fn a_failed_entry_fails_the_sort_as_a_listing() {
        let dir = tempfile::tempdir().unwrap();
        let entries = vec![
            Ok(f(b"a")),
            Err("line 2: bad size".to_string()),
            Ok(f(b"b")),
        ];
        let err = sort_entries(entries.into_iter(), dir.path(), "t", 1)
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(&err, SortError::Listing(m) if m.contains("line 2")),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "the runs of a failed sort are removed"
        );
    }

    #[test]
    fn scratch_is_removed_with_its_contents() {
        let parent = tempfile::tempdir().unwrap();
        let s = Scratch::new(Some(parent.path())).unwrap();
        std::fs::write(s.path().join("run"), b"x").unwrap();
        assert!(s.path().starts_with(parent.path()));
        drop(s);
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
        assert!(Scratch::new(Some(&parent.path().join("missing"))).is_err());
    }
}
