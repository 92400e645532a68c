//! Local filesystem (and NFS mounts): parallel walks, pread/pwrite blocks, temp-name + rename.
//! Every entry is reached through `beneath`, never through a symlink below the root.
//!
//! What the rest of ferry sees is the `Store` trait and, for the local → local engine, the
//! `Filesystem` capability (`Store::posix`); the handles, caches and POSIX calls stay in here.
//! - `store`: the `Store` implementation; `upload`: resumable downloads into a file;
//! - `ops`: `Filesystem`; `copy`: local → local staging and committing of files, links, nodes
//!   and directories;
//! - `walk`: parallel listings; `flush`: shared `syncfs`; `limits`: the open-files limit;
//! - `inherit`: what a new entry takes from its directory (group, default ACL);
//! - `posix`: system-call helpers and the mapping from `stat` to the manifest.

mod copy;
mod flush;
mod inherit;
mod leftover;
mod limits;
mod ops;
mod posix;
mod store;
mod upload;
mod walk;

use std::ffi::OsStr;
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use super::beneath::{self, fd};
use super::check_relative;
use crate::error::StoreError;
use crate::xattrs::Wanted;

pub use copy::{DirNow, Identity, Quirks, Staged, TempIn};
pub use inherit::Inherits;
pub(crate) use leftover::temp_name;
pub(crate) use limits::open_files_limit;
pub use limits::raise_open_files_limit;
pub(crate) use posix::{entry_of, entry_with_target, is_remote, meta_of};
use walk::XattrLister;

/// Cheap to clone: blocking work takes its own handle to another thread.
#[derive(Clone)]
pub struct LocalStore {
    root: PathBuf,
    /// Opened on first use: a destination root may not exist until the first write makes it.
    root_fd: Arc<OnceLock<Arc<OwnedFd>>>,
    dirs: Arc<DirCache>,
    /// fsync each file before its rename, and the filesystem once at the end (`--no-fsync`).
    fsync: bool,
    flushes: Arc<flush::Flushes>,
    /// Learnt on the first refusal: the filesystem has no `O_TMPFILE` (NFS, FUSE, some others).
    no_tmpfile: Arc<AtomicBool>,
    /// What listings read of each entry's extended attributes (`Entry.xattrs`).
    xattrs: XattrLister,
    /// Whether each metadata call is a round trip (`Filesystem::is_remote`): asked of the kernel
    /// once.
    remote: Arc<OnceLock<bool>>,
    /// ferry's own temp files of earlier runs that listings met (`leftover`), and those removed
    /// on the way (`clear_leftovers_in`).
    leftovers: Arc<leftover::Met>,
    swept: Arc<leftover::Met>,
    /// When this run opened the store: a leftover nothing wrote to since is a dead run's.
    started: std::time::SystemTime,
}

/// Directories below the root, each opened once and shared by every thread. They are opened
/// `O_PATH`: the kernel resolves the name but never opens the directory itself, which on FUSE
/// and NFS would cost a round trip (OPENDIR, RELEASEDIR) for every file in it. A handle keeps
/// the directory it was opened on, so a directory swapped for a symlink meanwhile is never
/// followed either.
#[derive(Default)]
struct InheritsCell {
    known: OnceLock<Inherits>,
    asking: Mutex<()>,
}

#[derive(Default)]
struct DirCache {
    fds: Mutex<std::collections::HashMap<Vec<u8>, Arc<OwnedFd>>>,
    opening_root: Mutex<()>,
    /// What each directory written into passes on to the entries made in it, asked by the first
    /// thread to need it while the others bound for it wait; read without a lock once known
    /// (every file written looks it up).
    inherits: RwLock<std::collections::HashMap<Vec<u8>, Arc<InheritsCell>>>,
}

impl LocalStore {
    pub fn new(root: PathBuf, fsync: bool) -> Self {
        LocalStore {
            root,
            root_fd: Arc::new(OnceLock::new()),
            dirs: Arc::default(),
            fsync,
            flushes: Arc::default(),
            no_tmpfile: Arc::default(),
            xattrs: XattrLister::default(),
            remote: Arc::default(),
            leftovers: Arc::default(),
            swept: Arc::default(),
            started: std::time::SystemTime::now(),
        }
    }

    /// Listings of this store read the attributes `wanted` names (`--preserve`).
    pub fn with_xattrs(mut self, wanted: Wanted) -> Self {
        self.xattrs = XattrLister::new(wanted);
        self
    }

    /// For messages.
    fn full_path(&self, rel: &[u8]) -> PathBuf {
        self.root.join(OsStr::from_bytes(rel))
    }

    fn io_err(&self, rel: &[u8]) -> impl Fn(std::io::Error) -> StoreError + '_ {
        let what = self.full_path(rel).display().to_string();
        move |e| StoreError::io(what.clone(), e)
    }

    fn root_fd(&self, create: bool) -> std::io::Result<&Arc<OwnedFd>> {
        if let Some(fd) = self.root_fd.get() {
            return Ok(fd);
        }
        // Opened once, whoever comes first: each open is a round trip on NFS.
        let _first = self.dirs.opening_root.lock().unwrap();
        if self.root_fd.get().is_none() {
            if create {
                fs::create_dir_all(&self.root)?;
            }
            let _ = self.root_fd.set(Arc::new(beneath::open_root(&self.root)?));
        }
        Ok(self.root_fd.get().expect("set above"))
    }

    /// The directory `rel` (made, with its parents, when `create`), never through a symlink
    /// below the root.
    fn dir(&self, rel: &[u8], create: bool) -> std::io::Result<Arc<OwnedFd>> {
        let root = self.root_fd(create)?;
        if rel.is_empty() {
            return Ok(root.clone());
        }
        if let Some(d) = self.dirs.fds.lock().unwrap().get(rel) {
            return Ok(d.clone());
        }
        let d = Arc::new(beneath::open_dir(fd(root), rel, create)?);
        let mut fds = self.dirs.fds.lock().unwrap();
        if fds.len() >= limits::dir_cache_max() {
            fds.clear();
        }
        fds.insert(rel.to_vec(), d.clone());
        Ok(d)
    }

    /// Drops a directory's handle, once it is deleted: a new directory of that name is a
    /// different one.
    fn forget_dir(&self, rel: &[u8]) {
        let below = |k: &[u8]| k.starts_with(rel) && (k.len() == rel.len() || k[rel.len()] == b'/');
        self.dirs.fds.lock().unwrap().retain(|k, _| !below(k));
        self.dirs.inherits.write().unwrap().retain(|k, _| !below(k));
    }

    /// What directory `rel` (made where missing) passes on to the entries made in it, asked
    /// once a run.
    fn inherits_of(&self, rel: &[u8]) -> std::io::Result<Inherits> {
        let known = self.dirs.inherits.read().unwrap().get(rel).cloned();
        let cell = match known {
            Some(c) => c,
            None => {
                let mut all = self.dirs.inherits.write().unwrap();
                all.entry(rel.to_vec()).or_default().clone()
            }
        };
        if let Some(i) = cell.known.get() {
            return Ok(*i);
        }
        let _asking = cell.asking.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = cell.known.get() {
            return Ok(*i);
        }
        let i = Inherits::of(&*self.dir(rel, true)?, self.xattrs.none_here())?;
        Ok(*cell.known.get_or_init(|| i))
    }

    /// The directory holding `rel` (made when `create`), opened without following a symlink
    /// below the root, and `rel`'s final name.
    fn parent<'a>(&self, rel: &'a [u8], create: bool) -> std::io::Result<(Arc<OwnedFd>, &'a [u8])> {
        check_relative(rel)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let (dir, name) = beneath::split(rel);
        Ok((self.dir(dir, create)?, name))
    }

    /// An `O_PATH` handle on `rel` itself (a symlink's own inode), or on the root for an
    /// empty `rel`.
    fn handle(&self, rel: &[u8]) -> std::io::Result<OwnedFd> {
        if rel.is_empty() {
            return self.root_fd(false)?.try_clone();
        }
        let (dir, name) = self.parent(rel, false)?;
        beneath::open_at(fd(&dir), name, libc::O_PATH, 0)
    }

    /// Removes the leftovers of earlier runs that this store's listings met and nothing has
    /// written to since well before this run began (`leftover::judge`); with `dry_run`, only
    /// names them.
    /// A partial file that this run resumed is gone with its commit, or was written to.
    fn sweep(&self, dry_run: bool) -> super::Sweep {
        let mut out = super::Sweep {
            removed: self.swept.take(),
            ..Default::default()
        };
        for rel in self.leftovers.take() {
            let (dir, name) = match self.parent(&rel, false) {
                Ok(p) => p,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    out.failed.push((rel.clone(), e.to_string()));
                    continue;
                }
            };
            let at_root = !rel.contains(&b'/');
            if leftover::judge(&dir, name, at_root, self.started) != leftover::Verdict::Stale {
                continue;
            }
            let removed = match dry_run {
                true => Ok(()),
                false => leftover::remove(&dir, name),
            };
            match removed {
                Ok(()) => out.removed.push(rel),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => out.failed.push((rel, e.to_string())),
            }
        }
        out
    }

    /// Removes the stale leftovers of ferry's in directory `rel` (`leftover::judge`), which
    /// alone may keep it from being removed; each is reported by the next `sweep`.
    fn clear_leftovers_in(&self, rel: &[u8]) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let dir = self.dir(rel, false)?;
        // Listed through its handle: never a path resolved again.
        for de in fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
            let name = de?.file_name();
            let name = name.as_bytes();
            if leftover::judge(&dir, name, rel.is_empty(), self.started) == leftover::Verdict::Stale
            {
                leftover::remove(&dir, name)?;
                self.swept.note([rel, b"/", name].concat());
            }
        }
        Ok(())
    }

    /// Puts a finished temp file in place: its bytes on disk first (unless `--no-fsync`), so a
    /// crash never leaves a file under its final name with less than its content.
    fn commit_temp(
        &self,
        dir: &OwnedFd,
        tmp: &[u8],
        name: &[u8],
        file: &fs::File,
    ) -> std::io::Result<()> {
        if self.fsync {
            file.sync_all()?;
        }
        beneath::rename_at(fd(dir), tmp, name)
    }

    /// An unnamed file in `dir`, or None where the filesystem has no `O_TMPFILE`.
    fn open_unnamed(&self, dir: &OwnedFd, mode: u32) -> std::io::Result<Option<fs::File>> {
        if self.no_tmpfile.load(Relaxed) {
            return Ok(None);
        }
        match beneath::open_at(fd(dir), b".", libc::O_TMPFILE | libc::O_RDWR, mode) {
            Ok(f) => Ok(Some(fs::File::from(f))),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL | libc::ENOENT)
                ) =>
            {
                self.no_tmpfile.store(true, Relaxed);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_relative_paths_are_refused() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b..c")).unwrap();
        let s = LocalStore::new(t.path().to_path_buf(), false);
        for bad in [
            &b"../etc/passwd"[..],
            b"a/../../b",
            b"/abs",
            b"a//b",
            b"./a",
            b"",
        ] {
            assert!(s.parent(bad, false).is_err(), "{bad:?}");
        }
        assert!(s.parent(b"a/b..c/.d", false).is_ok());
    }
}
