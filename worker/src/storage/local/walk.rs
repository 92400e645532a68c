//! Listings: a parallel walk of the whole tree, and one directory at a time.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};

use tokio::sync::mpsc;

use super::leftover::{self, Met};
use super::posix::entry_with_target;
use super::LocalStore;
use crate::error::{Result, StoreError};
use crate::keyspace::Range;
use crate::manifest::{Entry, Kind};
use crate::xattrs::{self, Wanted};

/// Reads the digest of an entry's kept attributes for a listing. A filesystem that answers
/// that it has none (EOPNOTSUPP: FUSE mounts whose server has no xattr handlers, NFS before
/// 4.2 without ACLs) is asked once, not once per entry: a round trip each on a network
/// filesystem, for nothing.
#[derive(Clone, Default)]
pub(super) struct XattrLister {
    wanted: Wanted,
    none_here: Arc<AtomicBool>,
}

impl XattrLister {
    pub(super) fn new(wanted: Wanted) -> Self {
        XattrLister {
            wanted,
            none_here: Arc::default(),
        }
    }

    /// Whether this run learnt that the filesystem holds no attributes at all.
    pub(super) fn none_here(&self) -> bool {
        self.none_here.load(Relaxed)
    }

    /// Notes that the filesystem answered it holds no attributes at all.
    pub(super) fn found_none(&self) {
        self.none_here.store(true, Relaxed);
    }

    /// None: not read (not kept, or the filesystem holds none), which compares as unknown.
    pub(super) fn digest(&self, full: &Path) -> Option<u64> {
        if !self.wanted.any() || self.none_here.load(Relaxed) {
            return None;
        }
        let c = xattrs::c_path(full).ok()?;
        match xattrs::read(&xattrs::On::Path(&c), self.wanted) {
            Ok(Some(a)) => Some(xattrs::digest(&a)),
            Ok(None) => {
                self.found_none();
                None
            }
            // Unreadable (permission): unknown, as for an entry the listing could not stat.
            Err(_) => None,
        }
    }
}

/// Parallel directory walk. Threads share a stack of directories; results stream to `tx`.
/// ferry's own temp files are left out, and noted in `met`.
pub(super) fn walk(
    root: &Path,
    recursive: bool,
    range: &Range,
    threads: usize,
    (xattrs, met): (&XattrLister, &Met),
    tx: &mpsc::Sender<Result<Entry>>,
) -> Result<()> {
    // The root itself is followed if it is a symlink: it is what the user named (`cp -H`).
    let md = fs::metadata(root).map_err(|e| StoreError::io(root.display().to_string(), e))?;
    if !md.is_dir() {
        return Err(StoreError::Invalid(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    let walk = Walk {
        root,
        recursive,
        range,
        xattrs,
        met,
        tx,
    };
    share_out(threads, tx, |rel| walk.dir(rel));
    Ok(())
}

/// What every thread of one walk reads.
struct Walk<'a> {
    root: &'a Path,
    recursive: bool,
    range: &'a Range,
    xattrs: &'a XattrLister,
    met: &'a Met,
    tx: &'a mpsc::Sender<Result<Entry>>,
}

impl Walk<'_> {
    /// Sends the entries of one directory (`rel` under the root) that are in the range, and
    /// returns its subdirectories to walk; none once nobody listens.
    fn dir(&self, rel: &[u8]) -> Result<Vec<Vec<u8>>> {
        let (range, tx) = (self.range, self.tx);
        let dir = if rel.is_empty() {
            self.root.to_path_buf()
        } else {
            self.root.join(OsStr::from_bytes(rel))
        };
        let rd = fs::read_dir(&dir).map_err(|e| StoreError::io(dir.display().to_string(), e))?;
        let mut subdirs = Vec::new();
        for de in rd {
            let de = de.map_err(|e| StoreError::io(dir.display().to_string(), e))?;
            let name = de.file_name();
            let name = name.as_bytes();
            let mut child = Vec::with_capacity(rel.len() + 1 + name.len());
            if !rel.is_empty() {
                child.extend_from_slice(rel);
                child.push(b'/');
            }
            child.extend_from_slice(name);
            // Outside the range, and nothing of the range below it: not even a stat.
            let listed = range.contains(&child);
            if !listed && !range.meets_subtree(&child) {
                continue;
            }
            let md = match de.metadata() {
                Ok(md) => md,
                // Vanished between readdir and stat: a live source; it simply isn't there now.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                // One entry that cannot be read is reported; its siblings are still listed.
                Err(e) => {
                    if tx
                        .blocking_send(Err(StoreError::io(de.path().display().to_string(), e)))
                        .is_err()
                    {
                        return Ok(Vec::new());
                    }
                    continue;
                }
            };
            if leftover::is_own(name, &md, rel.is_empty()) {
                self.met.note(child);
                continue;
            }
            if let Some(mut entry) = entry_with_target(child.clone(), &md, || read_link(&de.path()))
            {
                entry.xattrs = self.xattrs.digest(&de.path());
                if entry.kind == Kind::Dir && self.recursive && range.meets_subtree(&child) {
                    subdirs.push(child);
                }
                if listed && tx.blocking_send(Ok(entry)).is_err() {
                    return Ok(Vec::new());
                }
            }
        }
        Ok(subdirs)
    }
}

/// Runs `work` on every directory from the root down, on `threads` threads sharing a stack of
/// directories: each call returns the directories to walk next.
fn share_out(
    threads: usize,
    tx: &mpsc::Sender<Result<Entry>>,
    work: impl Fn(&[u8]) -> Result<Vec<Vec<u8>>> + Sync,
) {
    struct Queue {
        dirs: Vec<Vec<u8>>,
        busy: usize,
        failed: bool,
    }
    let state = Mutex::new(Queue {
        dirs: vec![Vec::new()],
        busy: 0,
        failed: false,
    });
    let cv = Condvar::new();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let rel = {
                    let mut q = state.lock().unwrap();
                    loop {
                        if q.failed {
                            return;
                        }
                        if let Some(d) = q.dirs.pop() {
                            q.busy += 1;
                            break d;
                        }
                        if q.busy == 0 {
                            cv.notify_all();
                            return;
                        }
                        q = cv.wait(q).unwrap();
                    }
                };
                // A directory that cannot be read (permission denied, say) is reported and the
                // walk goes on: the listing is then incomplete, which callers see as an error
                // (prune refuses; copy copies the rest and exits 1). Sent outside the lock.
                let (sub, gone) = match work(&rel) {
                    Ok(sub) => (sub, false),
                    Err(e) => (Vec::new(), tx.blocking_send(Err(e)).is_err()),
                };
                let mut q = state.lock().unwrap();
                q.busy -= 1;
                q.dirs.extend(sub);
                // Nobody listens any more: stop.
                q.failed |= gone;
                drop(q);
                cv.notify_all();
            });
        }
    });
}

/// Threads for a walk. Listing is latency-bound where each directory page is a round trip (NFS,
/// FUSE): there, many directories read at once hide the latency, as many files copied at once
/// do. Elsewhere twice the cores, clamped to 8…32.
pub(super) fn walk_threads(remote: bool) -> usize {
    if remote {
        return 64;
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(4, 16)
        * 2
}

impl LocalStore {
    /// The entries of one directory (not below it); None when it does not exist. On NFS and
    /// FUSE the attributes come with the directory pages, so this costs a request per page,
    /// not per entry.
    pub(super) fn list_dir(&self, rel: &[u8]) -> std::io::Result<Option<Vec<Entry>>> {
        let dir = self.full_path(rel);
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for de in rd {
            let de = de?;
            let name = de.file_name();
            let md = match de.metadata() {
                Ok(md) => md,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let path = if rel.is_empty() {
                name.as_bytes().to_vec()
            } else {
                [rel, b"/", name.as_bytes()].concat()
            };
            if leftover::is_own(name.as_bytes(), &md, rel.is_empty()) {
                self.leftovers.note(path);
                continue;
            }
            out.extend(
                entry_with_target(path, &md, || read_link(&de.path())).map(|e| Entry {
                    xattrs: self.xattrs.digest(&de.path()),
                    ..e
                }),
            );
        }
        Ok(Some(out))
    }
}

fn read_link(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::os::unix::ffi::OsStringExt;
    fs::read_link(path).map(|t| t.into_os_string().into_vec())
}
