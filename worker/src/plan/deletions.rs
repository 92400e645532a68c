//! What a final pass deletes, decided in one walk over the two joined, path-sorted listings
//! (the plan's join, or prune's own when it lists): the destination's files and symlinks that
//! the source lacks, in path order; the directories that leaves empty, each after those inside
//! it; and the directories that stay whose mtime must be the source's once the deletions are
//! done. Spilled to scratch files as found, so memory stays at a path's depth.

use std::io;
use std::path::Path;

use crate::manifest::{Entry, Kind};
use crate::sorted::sort::Spill;
use crate::sorted::Pair;

/// What goes, in the order it goes, counted before anything is deleted so that --max-delete can
/// refuse first.
pub struct Deletions {
    pub files: Spill,
    pub file_count: u64,
    pub dirs: Spill,
    pub dir_count: u64,
    /// The destination's entries, directories included, for --max-delete's percentage.
    pub dest_entries: u64,
    /// The directories that stay and lose an entry, or whose mtime is not the source's already
    /// (the parts of a pipeline write into one directory in no order), as the source lists
    /// them: each gets the source's mtime once the deletions are done.
    pub touched: Spill,
}

/// The walk: fed every pair of the join, in path order.
pub struct Decide {
    files: Spill,
    file_count: u64,
    dirs: EmptiedDirs,
    touched: TouchedDirs,
    dest_entries: u64,
    planned: bool,
}

impl Decide {
    /// `planned`: the destination's listing is the one its pass planned against, so the
    /// directories the source has and it lacks were made since, by the pass's copies, and take
    /// the source's mtime too; and its directories' mtimes predate the pass's writes.
    pub fn new(scratch: &Path, planned: bool) -> io::Result<Decide> {
        Ok(Decide {
            files: Spill::create(scratch.join("delete-files"))?,
            file_count: 0,
            dirs: EmptiedDirs::new(Spill::create(scratch.join("delete-dirs"))?),
            touched: TouchedDirs::new(Spill::create(scratch.join("touched-dirs"))?),
            dest_entries: 0,
            planned,
        })
    }

    pub fn visit(&mut self, pair: &Pair) -> io::Result<()> {
        let (d, kept) = match pair {
            Pair::Source(s) => {
                if self.planned {
                    // Made by the pass: so was its directory's new mtime.
                    self.touched.advance(Some(&s.path))?;
                    self.touched.lose(&s.path);
                    if s.kind == Kind::Dir {
                        self.touched.open(s.clone(), true);
                    }
                }
                return Ok(());
            }
            Pair::Both(s, d) => {
                self.touched.advance(Some(&d.path))?;
                if self.planned && rewritten(s, d) {
                    self.touched.lose(&s.path);
                }
                if s.kind == Kind::Dir && (d.kind == Kind::Dir || self.planned) {
                    // A planned listing's directory mtimes are as a verify saw them, before
                    // later parts wrote into them: each is looked at when the time comes.
                    let differs = s.mtime.is_some() && s.mtime != d.mtime;
                    self.touched.open(s.clone(), differs || self.planned);
                }
                (d, true)
            }
            Pair::Dest(d) => {
                self.touched.advance(Some(&d.path))?;
                self.touched.lose(&d.path);
                (d, false)
            }
        };
        self.dirs.advance(Some(&d.path))?;
        self.dest_entries += 1;
        match (kept, d.kind) {
            (true, _) => self.dirs.keep(&d.path),
            (false, Kind::Dir) => self.dirs.open(d.clone()),
            (false, _) => {
                self.files.push(d)?;
                self.file_count += 1;
            }
        }
        Ok(())
    }

    pub fn finish(self) -> io::Result<Deletions> {
        let (dirs, dir_count) = self.dirs.finish()?;
        Ok(Deletions {
            files: self.files,
            file_count: self.file_count,
            dirs,
            dir_count,
            dest_entries: self.dest_entries,
            touched: self.touched.finish()?,
        })
    }
}

/// The destination directories that a prune leaves empty: those the source lacks with nothing
/// under them that the source keeps. Found in the one pass over the sorted destination: in
/// byte order the entries under a directory `d` ("d/…") come after it as one unbroken range
/// (siblings such as "d.x" or "d-x" may come between `d` and that range, never inside it), so
/// `d` is decided as soon as the walk leaves its range. The directories still undecided are
/// byte prefixes of the current path, so they are at most one per byte of a path, in practice
/// its depth, whatever the size of the tree. Decided ones go to a spill file, each after those
/// inside it (an inner range closes first), the order in which they must be removed.
struct EmptiedDirs {
    /// Undecided directories, and whether something kept lies under each.
    open: OpenDirs,
    out: Spill,
    count: u64,
}

impl EmptiedDirs {
    fn new(out: Spill) -> Self {
        EmptiedDirs {
            open: OpenDirs::default(),
            out,
            count: 0,
        }
    }

    /// Decides every directory whose range ends before `path` (None: the walk's end); called
    /// with every destination path, in order.
    fn advance(&mut self, path: Option<&[u8]>) -> io::Result<()> {
        while let Some((dir, occupied)) = self.open.left_behind(path) {
            if !occupied {
                self.out.push(&dir)?;
                self.count += 1;
            }
        }
        Ok(())
    }

    /// A destination directory the source lacks: it goes unless something kept is under it.
    fn open(&mut self, dir: Entry) {
        self.open.0.push((dir, false));
    }

    /// A destination entry the source has: the directories it is in stay.
    fn keep(&mut self, path: &[u8]) {
        for (dir, occupied) in self.open.0.iter_mut() {
            if under(&dir.path, path) {
                *occupied = true;
            }
        }
    }

    fn finish(mut self) -> io::Result<(Spill, u64)> {
        self.advance(None)?;
        Ok((self.out, self.count))
    }
}

/// The directories whose range the walk is still in, outermost first (byte prefixes of the
/// current path: at most its depth), each with what the walk noted of it.
#[derive(Default)]
struct OpenDirs(Vec<(Entry, bool)>);

impl OpenDirs {
    /// The innermost whose range ends before `path`, taken out; with None, the innermost.
    fn left_behind(&mut self, path: Option<&[u8]>) -> Option<(Entry, bool)> {
        match (self.0.last(), path) {
            (Some((dir, _)), Some(path)) if in_range(&dir.path, path) => None,
            _ => self.0.pop(),
        }
    }
}

/// The kept directories whose mtime must be set, found in the same pass as `EmptiedDirs`:
/// the kept directories holding the current path are open, each noting whether its mtime
/// differs or an entry directly in it goes; one is decided when the walk leaves its range.
struct TouchedDirs {
    open: OpenDirs,
    out: Spill,
}

impl TouchedDirs {
    fn new(out: Spill) -> Self {
        TouchedDirs {
            open: OpenDirs::default(),
            out,
        }
    }

    fn advance(&mut self, path: Option<&[u8]>) -> io::Result<()> {
        while let Some((dir, lost)) = self.open.left_behind(path) {
            if lost {
                self.out.push(&dir)?;
            }
        }
        Ok(())
    }

    /// A directory both sides have, as the source lists it; `differs`: not with its mtime.
    fn open(&mut self, dir: Entry, differs: bool) {
        self.open.0.push((dir, differs));
    }

    /// `path` goes: its directory's mtime moves (the root's is set wherever it differs).
    fn lose(&mut self, path: &[u8]) {
        let parent = crate::storage::beneath::split(path).0;
        // Not always the innermost: `a/b` is still open at `a/b.txt`, which sorts before `a/b/x`.
        if let Some((_, lost)) = self.open.0.iter_mut().rev().find(|(d, _)| d.path == parent) {
            *lost = true;
        }
    }

    fn finish(mut self) -> io::Result<Spill> {
        self.advance(None)?;
        Ok(self.out)
    }
}

/// Whether the pass that planned against `d` wrote `s`'s name (so moved its directory's mtime):
/// where they differ at all, the pass copied it or left it to the copy to decide.
fn rewritten(s: &Entry, d: &Entry) -> bool {
    s.kind != d.kind || (s.kind != Kind::Dir && (s.size != d.size || s.mtime != d.mtime))
}

/// Whether `path` is inside directory `dir`.
pub fn under(dir: &[u8], path: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/'
}

/// Whether `path`, which sorts after `dir`, is still within the range of `dir` and what is
/// under it: `dir` itself followed by a byte up to '/'. Past that no path can be under `dir`.
fn in_range(dir: &[u8], path: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] <= b'/'
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sorted::sort::Runs;

    /// `paths` sorted into runs of a few entries each, so that merges are exercised.
    fn sorted(paths: &[&str], scratch: &Path, stem: &str) -> Runs {
        crate::sorted::sort_entries(paths.iter().map(|p| Ok(entry(p))), scratch, stem, 150).unwrap()
    }

    fn entry(path: &str) -> Entry {
        let (path, kind) = match path.strip_suffix('/') {
            Some(dir) => (dir, Kind::Dir),
            None => (path, Kind::File),
        };
        Entry {
            path: path.as_bytes().to_vec(),
            kind,
            size: Some(1),
            ..Default::default()
        }
    }

    fn decide(s: &Runs, d: &Runs, scratch: &Path) -> Deletions {
        let mut walk = Decide::new(scratch, false).unwrap();
        crate::sorted::join(s.merge().unwrap(), d.merge().unwrap(), |p| {
            Ok(walk.visit(&p)?)
        })
        .unwrap();
        walk.finish().unwrap()
    }

    /// Plans a prune of `dst` (directories end in '/') against `src`, through sorts of a few
    /// entries per run; returns the files and the directories in the order they would go.
    fn plan(src: &[&str], dst: &[&str]) -> (Vec<String>, Vec<String>, u64) {
        let scratch = tempfile::tempdir().unwrap();
        let sort = |paths: &[&str], stem: &str| sorted(paths, scratch.path(), stem);
        let (s, d) = (sort(src, "s"), sort(dst, "d"));
        let mut plan = decide(&s, &d, scratch.path());
        let read = |spill: &mut Spill| {
            spill
                .read()
                .unwrap()
                .map(|e| e.unwrap().display_path())
                .collect::<Vec<_>>()
        };
        let (files, dirs) = (read(&mut plan.files), read(&mut plan.dirs));
        assert_eq!(
            (plan.file_count, plan.dir_count),
            (files.len() as u64, dirs.len() as u64)
        );
        (files, dirs, plan.dest_entries)
    }

    #[test]
    fn deletes_what_the_source_lacks_and_the_directories_left_empty() {
        let (files, dirs, dest_entries) = plan(
            &["keep/", "keep/k", "top"],
            &[
                "keep/",
                "keep/k",
                "keep/extra",
                "top",
                "gone/",
                "gone/a/",
                "gone/a/b",
                "gone/c",
                "empty/",
            ],
        );
        assert_eq!(files, ["gone/a/b", "gone/c", "keep/extra"]);
        assert_eq!(dirs, ["empty", "gone/a", "gone"]);
        // Directories count too: "keep", "gone", "gone/a" and "empty" beside the five files.
        assert_eq!(dest_entries, 9);
    }

    #[test]
    fn the_directories_that_stay_and_lose_an_entry_are_found() {
        let scratch = tempfile::tempdir().unwrap();
        let sort = |paths: &[&str], stem: &str| sorted(paths, scratch.path(), stem);
        let src = ["a/", "a/k", "a/b/", "a/b/k", "a.b/", "c/", "c/k", "k"];
        let dst = [
            "a/",
            "a/k",
            "a/x",
            "a/b/",
            "a/b/k",
            "a/b/gone/",
            "a/b/gone/y",
            "a.b/",
            "a.b/z",
            "c/",
            "c/k",
            "k",
        ];
        let (s, d) = (sort(&src, "s"), sort(&dst, "d"));
        let mut plan = decide(&s, &d, scratch.path());
        let touched: Vec<String> = plan
            .touched
            .read()
            .unwrap()
            .map(|e| e.unwrap().display_path())
            .collect();
        // "a/b/gone" goes whole: only "a/b", where it was, moves; "c" loses nothing.
        assert_eq!(touched, ["a.b", "a/b", "a"]);
    }

    #[test]
    fn siblings_sorting_between_a_directory_and_its_children() {
        // "a.b" and "a-b" sort after "a" but before "a/…"; "a/b.c" between "a/b" and "a/b/…".
        // A kept file under "a/b" must keep "a" and "a/b", and nothing else.
        let (files, dirs, _) = plan(
            &["a.b", "a/b/k"],
            &[
                "a/", "a-b/", "a-b/x", "a.b", "a.b.d/", "a/b/", "a/b.c", "a/b/k", "a/b/z/", "a0/",
                "a0/y",
            ],
        );
        assert_eq!(files, ["a-b/x", "a/b.c", "a0/y"]);
        assert_eq!(dirs, ["a-b", "a.b.d", "a/b/z", "a0"]);
    }

    #[test]
    fn nested_directories_go_innermost_first() {
        let (files, dirs, _) = plan(
            &["k"],
            &["g/", "g.x", "g/h/", "g/h.y", "g/h/i/", "g/h/i/j", "k", "z/"],
        );
        assert_eq!(files, ["g.x", "g/h.y", "g/h/i/j"]);
        assert_eq!(dirs, ["g/h/i", "g/h", "g", "z"]);
    }

    #[test]
    fn a_directory_the_source_has_stays_even_empty_and_manifests_without_directories_keep_theirs() {
        // The source names d/ itself: kept though empty. The source names only files (a
        // manifest of files): their directories stay because of what is under them.
        let (files, dirs, _) = plan(
            &["d/", "m/n/f"],
            &["d/", "d/x", "m/", "m/n/", "m/n/f", "m/o/"],
        );
        assert_eq!(files, ["d/x"]);
        assert_eq!(dirs, ["m/o"]);
    }

    #[test]
    fn escaped_names_join_by_their_bytes() {
        // "\t" (0x09) sorts before '-' and '/', "\\" (0x5c) after them: the escaped text would
        // sort otherwise.
        let (files, dirs, _) = plan(
            &["d/\\", "d\tx"],
            &["d/", "d/\\", "d/\t", "d\tx", "d\\/", "d\\/y"],
        );
        assert_eq!(files, ["d/\\t", "d\\\\/y"]);
        assert_eq!(dirs, ["d\\\\"]);
    }

    #[test]
    fn ranges() {
        assert!(in_range(b"a", b"a/b") && in_range(b"a", b"a.b") && in_range(b"a", b"a\t"));
        assert!(!in_range(b"a", b"a0") && !in_range(b"a", b"b") && !in_range(b"a/b", b"a/c"));
    }
}
