//! Local filesystem (and NFS mounts): parallel walks, pread/pwrite blocks, temp-name + rename.
//! Every entry is reached through `beneath`, never through a symlink below the root.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::beneath::{self, fd};
use super::{check_relative, fnv1a, Chunk, Meta, Store, Upload, UploadPlan};
use crate::error::{Result, StoreError};
use crate::manifest::{Entry, Kind, Mtime};
use crate::xattrs::{self, Wanted};

/// Cheap to clone: blocking work takes its own handle to another thread.
#[derive(Clone)]
pub struct LocalStore {
    root: PathBuf,
    /// Opened on first use: a destination root may not exist until the first write makes it.
    root_fd: Arc<OnceLock<Arc<OwnedFd>>>,
    dirs: Arc<DirCache>,
    /// fsync each file before its rename, and the filesystem once at the end (`--no-fsync`).
    fsync: bool,
    flushes: Arc<Flushes>,
    /// Learnt on the first refusal: the filesystem has no `O_TMPFILE` (NFS, FUSE, some others).
    no_tmpfile: Arc<AtomicBool>,
    /// What listings read of each entry's extended attributes (`Entry.xattrs`).
    xattrs: XattrLister,
}

/// Reads the digest of an entry's kept attributes for a listing. A filesystem that answers
/// that it has none (EOPNOTSUPP: FUSE mounts whose server has no xattr handlers, NFS before
/// 4.2 without ACLs) is asked once, not once per entry: a round trip each on a network
/// filesystem, for nothing.
#[derive(Clone, Default)]
pub struct XattrLister {
    wanted: Wanted,
    none_here: Arc<AtomicBool>,
}

impl XattrLister {
    /// Whether this run learnt that the filesystem holds no attributes at all.
    pub fn none_here(&self) -> bool {
        self.none_here.load(Relaxed)
    }

    /// None: not read (not kept, or the filesystem holds none), which compares as unknown.
    pub fn digest(&self, full: &Path) -> Option<u64> {
        if !self.wanted.any() || self.none_here.load(Relaxed) {
            return None;
        }
        let c = xattrs::c_path(full).ok()?;
        match xattrs::read(&xattrs::On::Path(&c), self.wanted) {
            Ok(Some(a)) => Some(xattrs::digest(&a)),
            Ok(None) => {
                self.none_here.store(true, Relaxed);
                None
            }
            // Unreadable (permission): unknown, as for an entry the listing could not stat.
            Err(_) => None,
        }
    }
}

/// How long a lone file's flush waits for more to join it (see `sync_one`).
const FLUSH_GATHERING: Duration = Duration::from_millis(5);

/// One `syncfs` shared by every thread that needs its files on disk while it runs: files
/// written meanwhile cost one flush between them, not one each.
#[derive(Default)]
struct Flushes {
    state: Mutex<FlushState>,
    finished: Condvar,
}

#[derive(Default)]
struct FlushState {
    started: u64,
    done: u64,
    running: bool,
    /// When the next flush starts, however few have joined it.
    gathering_until: Option<Instant>,
    /// A failed flush fails every later one: the filesystem lost writes it had accepted.
    failed: Option<(std::io::ErrorKind, String)>,
}

/// Directories below the root, each opened once and shared by every thread. They are opened
/// `O_PATH`: the kernel resolves the name but never opens the directory itself, which on FUSE
/// and NFS would cost a round trip (OPENDIR, RELEASEDIR) for every file in it. A handle keeps
/// the directory it was opened on, so a directory swapped for a symlink meanwhile is never
/// followed either.
#[derive(Default)]
struct DirCache {
    fds: Mutex<std::collections::HashMap<Vec<u8>, Arc<OwnedFd>>>,
    opening_root: Mutex<()>,
}

/// Directory handles kept open at most by one store; the cache starts over when full. Each is
/// a descriptor, and a tree may hold millions of directories: an eighth of the open-files
/// limit each, so both sides of a copy and the files in flight fit under it.
fn dir_cache_max() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| (open_files_limit() / 8).clamp(16, 4096) as usize)
}

/// The soft limit on open files (after `raise_open_files_limit`).
pub fn open_files_limit() -> u64 {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: r is a valid rlimit to fill.
    match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } {
        0 => r.rlim_cur,
        _ => 1024,
    }
}

/// Raises the soft limit on open files to the hard one, as the Go runtime does for every
/// program: the usual soft limit, 1,024, is a fraction of what directory handles and 256
/// files in flight (two descriptors each) can hold at once.
pub fn raise_open_files_limit() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: r is a valid rlimit, read then written back with only the soft limit raised.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Temp and journal files carry this prefix; listings skip them so a half-written file is
/// never seen, under its own name or any other.
pub const PARTIAL_PREFIX: &[u8] = b".ferry-";

pub fn is_partial_name(name: &[u8]) -> bool {
    name.starts_with(PARTIAL_PREFIX) && (name.ends_with(b".partial") || name.ends_with(b".journal"))
}

impl LocalStore {
    pub fn new(root: PathBuf, fsync: bool) -> Self {
        LocalStore { root, root_fd: Arc::new(OnceLock::new()), dirs: Arc::default(), fsync, flushes: Arc::default(), no_tmpfile: Arc::default(), xattrs: XattrLister::default() }
    }

    /// Listings of this store read the attributes `wanted` names (`--preserve`).
    pub fn with_xattrs(mut self, wanted: Wanted) -> Self {
        self.xattrs = XattrLister { wanted, none_here: Arc::default() };
        self
    }

    pub fn xattrs(&self) -> &XattrLister {
        &self.xattrs
    }

    pub fn fsync(&self) -> bool {
        self.fsync
    }

    /// For messages.
    pub fn full_path(&self, rel: &[u8]) -> PathBuf {
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
    pub fn dir(&self, rel: &[u8], create: bool) -> std::io::Result<Arc<OwnedFd>> {
        let root = self.root_fd(create)?;
        if rel.is_empty() {
            return Ok(root.clone());
        }
        if let Some(d) = self.dirs.fds.lock().unwrap().get(rel) {
            return Ok(d.clone());
        }
        let d = Arc::new(beneath::open_dir(fd(root), rel, create)?);
        let mut fds = self.dirs.fds.lock().unwrap();
        if fds.len() >= dir_cache_max() {
            fds.clear();
        }
        fds.insert(rel.to_vec(), d.clone());
        Ok(d)
    }

    /// Makes directory `rel`, whose parent exists or is made: one exclusive create, where
    /// `dir(rel, true)` would first look for it (a wasted round trip for a directory the
    /// listing showed missing). True if this call made it; an existing one is fine.
    pub fn make_dir(&self, rel: &[u8]) -> std::io::Result<bool> {
        let (parent, name) = self.parent(rel, true)?;
        let made = match beneath::mkdir_new(fd(&parent), name) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            r => r.map(|_| true)?,
        };
        // Something else may stand there: a file or symlink the source has since replaced
        // with this directory, which `dir` replaces.
        self.dir(rel, !made)?;
        Ok(made)
    }

    /// A staging directory for temp files (see `localcopy::TempIn`), one of the few a run's
    /// threads share: under the root, named so that listings skip it. The names are the same in
    /// every run and every process: a temp name is unique to its final name, so processes
    /// copying disjoint parts of a tree may share them, and a re-run finds (and replaces) what
    /// a killed one left there.
    pub fn staging_dir(&self, k: usize) -> std::io::Result<Arc<OwnedFd>> {
        let name = staging_name(k);
        beneath::mkdir_at(fd(self.root_fd(true)?), &name)?;
        self.dir(&name, false)
    }

    /// Removes a staging directory once the run is done (left alone while another process
    /// still has a file in it).
    pub fn remove_staging_dir(&self, k: usize) {
        let name = staging_name(k);
        self.forget_dir(&name);
        if let Some(root) = self.root_fd.get() {
            let _ = beneath::unlink_at(fd(root), &name, true);
        }
    }

    /// Drops a directory's handle, once it is deleted: a new directory of that name is a
    /// different one.
    pub fn forget_dir(&self, rel: &[u8]) {
        let mut fds = self.dirs.fds.lock().unwrap();
        fds.retain(|k, _| !(k.starts_with(rel) && (k.len() == rel.len() || k[rel.len()] == b'/')));
    }

    /// The directory holding `rel` (made when `create`), opened without following a symlink
    /// below the root, and `rel`'s final name.
    pub fn parent<'a>(&self, rel: &'a [u8], create: bool) -> std::io::Result<(Arc<OwnedFd>, &'a [u8])> {
        check_relative(rel).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let (dir, name) = beneath::split(rel);
        Ok((self.dir(dir, create)?, name))
    }

    /// Removes `rel` and, for a directory, everything below it, never following a symlink.
    pub fn remove_all(&self, rel: &[u8]) -> std::io::Result<()> {
        let (dir, name) = self.parent(rel, false)?;
        self.forget_dir(rel);
        match remove_tree_at(&dir, name) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    /// Sets owner, mode and times of `rel` in place (a symlink's own owner and times, never its
    /// target's), checking first that it still is of kind `kind`.
    pub fn set_meta(&self, rel: &[u8], kind: Kind, meta: &Meta) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let (dir, name) = self.parent(rel, false)?;
        let f = File::from(beneath::open_at(fd(&dir), name, libc::O_PATH, 0)?);
        if kind_of(f.metadata()?.file_type()) != Some(kind) {
            return Err(std::io::Error::other(format!("is no longer a {} (changed meanwhile)", kind.name())));
        }
        if kind == Kind::Symlink {
            return apply_link_meta(&dir, name, &Meta { mode: None, ..meta.clone() });
        }
        // An `O_PATH` handle takes neither fchmod nor futimens: its /proc name does, and
        // names this very inode, whatever happens to the path meanwhile.
        let proc = crate::xattrs::proc_path(f.as_raw_fd());
        if let (Some(uid), Some(gid)) = (meta.uid, meta.gid) {
            // SAFETY: valid descriptor and an empty C string with AT_EMPTY_PATH.
            if unsafe { libc::fchownat(f.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EPERM) {
                    return Err(e);
                }
            }
        }
        if let Some(mode) = meta.mode {
            // SAFETY: a valid C string. After chown, which clears set-id bits.
            if unsafe { libc::chmod(proc.as_ptr(), mode as libc::mode_t) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        if let Some(m) = meta.mtime {
            let times = mtime_times(m);
            // SAFETY: a valid C string and a two-element array.
            if unsafe { libc::utimensat(libc::AT_FDCWD, proc.as_ptr(), times.as_ptr(), 0) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// The kept attributes of `rel` (`root` for the root itself), never through a symlink
    /// below the root; None where the filesystem holds none.
    pub fn read_xattrs(&self, rel: &[u8], wanted: Wanted) -> std::io::Result<Option<xattrs::Attrs>> {
        let h = self.handle(rel)?;
        let r = xattrs::read(&xattrs::On::Follow(&xattrs::proc_path(std::os::fd::AsRawFd::as_raw_fd(&h))), wanted);
        if let Ok(None) = r {
            self.xattrs.none_here.store(true, Relaxed);
        }
        r
    }

    /// Makes the kept attributes of `rel` those of `want`, setting the new and removing the
    /// gone.
    pub fn write_xattrs(&self, rel: &[u8], want: &xattrs::Attrs, wanted: Wanted) -> std::io::Result<xattrs::Refused> {
        let h = self.handle(rel)?;
        let on = xattrs::On::Follow(&xattrs::proc_path(std::os::fd::AsRawFd::as_raw_fd(&h)));
        match xattrs::read(&on, wanted)? {
            Some(now) => xattrs::apply(&on, want, Some(&now), wanted),
            // Holds none at all: every one wanted is refused.
            None => Ok(xattrs::Refused::all(want, wanted)),
        }
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

    /// Gives the file at `from` a second name, `to` (made with its parents as needed), never
    /// following a symlink. `absent`: the listing showed `to` free; otherwise, or where it was
    /// taken meanwhile, the link is made under a temp name and renamed over it, so `to` is
    /// never missing.
    pub fn hard_link(&self, from: &[u8], to: &[u8], absent: bool) -> std::io::Result<()> {
        let (fdir, fname) = self.parent(from, false)?;
        let (tdir, tname) = self.parent(to, true)?;
        if absent {
            match link_at(fd(&fdir), fname, fd(&tdir), tname) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                r => return r,
            }
        }
        let tmp = temp_name(tname, "partial");
        let _ = beneath::unlink_at(fd(&tdir), &tmp, false);
        link_at(fd(&fdir), fname, fd(&tdir), &tmp)?;
        let r = beneath::rename_at(fd(&tdir), &tmp, tname);
        if r.is_err() {
            let _ = beneath::unlink_at(fd(&tdir), &tmp, false);
        }
        r
    }

    /// `lstat` of `rel`; None when it (or a directory on its way) does not exist.
    pub fn lstat(&self, rel: &[u8]) -> std::io::Result<Option<fs::Metadata>> {
        let r = self.parent(rel, false).and_then(|(dir, name)| beneath::lstat_at(fd(&dir), name));
        match r {
            Ok(md) => Ok(Some(md)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens a regular file for reading; a symlink in its place is refused, not followed.
    pub fn open_file(&self, rel: &[u8]) -> std::io::Result<File> {
        let (dir, name) = self.parent(rel, false)?;
        match beneath::open_at(fd(&dir), name, libc::O_RDONLY, 0) {
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(std::io::Error::other("is a symlink now, not a file (not followed)")),
            r => Ok(File::from(r?)),
        }
    }

    pub fn md5(&self, rel: &[u8]) -> std::io::Result<[u8; 16]> {
        md5_reader(self.open_file(rel)?)
    }

    /// A whole small file with one open: its bytes and metadata, the same before and after the
    /// read (else it changed while read). None when it is now larger than `limit`.
    pub fn read_small(&self, rel: &[u8], limit: u64) -> Result<Option<(Bytes, Meta)>> {
        let io = self.io_err(rel);
        let f = self.open_file(rel).map_err(&io)?;
        let md = f.metadata().map_err(&io)?;
        if !md.is_file() {
            return Err(StoreError::Invalid("no longer a regular file".into()));
        }
        if md.len() > limit {
            return Ok(None);
        }
        let before = stamp(&md);
        let data = super::bufpool::filled(md.len() as usize, |buf| read_exact_at(&f, buf, 0).map_err(&io)).map_err(changed)?;
        f.metadata().and_then(|now| unchanged(&before, &now)).map_err(&io).map_err(changed)?;
        Ok(Some((data, meta_of(&md))))
    }

    /// The entries of one directory (not below it); None when it does not exist. On NFS and
    /// FUSE the attributes come with the directory pages, so this costs a request per page,
    /// not per entry.
    pub fn list_dir(&self, rel: &[u8]) -> std::io::Result<Option<Vec<Entry>>> {
        let dir = self.full_path(rel);
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for de in rd {
            let de = de?;
            let name = de.file_name();
            if is_partial_name(name.as_bytes()) {
                continue;
            }
            let md = match de.metadata() {
                Ok(md) => md,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let path = if rel.is_empty() { name.as_bytes().to_vec() } else { [rel, b"/", name.as_bytes()].concat() };
            out.extend(entry_of(path, &md).map(|e| Entry { xattrs: self.xattrs.digest(&de.path()), ..e }));
        }
        Ok(Some(out))
    }

    /// Whether the root sits on a filesystem where each metadata call is a network round trip
    /// (NFS, SMB, Lustre, FUSE, ...): such a tree needs many more calls in flight to hide the
    /// latency. A root that does not exist yet is judged by its nearest existing parent.
    pub fn is_remote(&self) -> bool {
        let mut p: &Path = &self.root;
        loop {
            if let Some(kind) = fs_magic(p) {
                return REMOTE_MAGIC.contains(&kind);
            }
            match p.parent() {
                Some(up) if !up.as_os_str().is_empty() => p = up,
                _ => return false,
            }
        }
    }

    pub fn readlink(&self, rel: &[u8]) -> std::io::Result<Vec<u8>> {
        let (dir, name) = self.parent(rel, false)?;
        beneath::readlink_at(fd(&dir), name)
    }

    /// Puts a finished temp file in place: its bytes on disk first (unless `--no-fsync`), so a
    /// crash never leaves a file under its final name with less than its content.
    pub fn commit_temp(&self, dir: &OwnedFd, tmp: &[u8], name: &[u8], file: &File) -> std::io::Result<()> {
        if self.fsync {
            file.sync_all()?;
        }
        beneath::rename_at(fd(dir), tmp, name)
    }

    /// Puts on disk everything written to this filesystem before the call, with a `syncfs`
    /// (not an fsync per file or directory) that is shared: a caller joins the next flush to
    /// start, and the threads waiting with it return together when it ends.
    pub fn sync(&self) -> std::io::Result<()> {
        self.flush(Duration::ZERO)
    }

    /// `sync` for a caller with one file: its flush waits a moment for others to join.
    /// Files arrive one by one from the network, each a fraction of a millisecond after the
    /// last, and a flush takes about as long: started at once, nearly every file would have
    /// a flush of its own (1,230 for 2,000 files of 16 KiB; 128 with this wait).
    fn sync_one(&self) -> std::io::Result<()> {
        self.flush(FLUSH_GATHERING)
    }

    fn flush(&self, gathering: Duration) -> std::io::Result<()> {
        let root = match (self.fsync, self.root_fd.get()) {
            (true, Some(root)) => root,
            _ => return Ok(()),
        };
        let fl = &self.flushes;
        let mut st = fl.state.lock().unwrap();
        // A flush already running may have missed what this caller wrote: it needs the next.
        let wanted = st.started + 1;
        loop {
            if let Some((kind, msg)) = &st.failed {
                return Err(std::io::Error::new(*kind, msg.clone()));
            }
            if st.done >= wanted {
                return Ok(());
            }
            if st.running {
                st = fl.finished.wait(st).unwrap();
                continue;
            }
            let now = Instant::now();
            let until = *st.gathering_until.get_or_insert(now + gathering);
            if now < until && !gathering.is_zero() {
                st = fl.finished.wait_timeout(st, until - now).unwrap().0;
                continue;
            }
            st.gathering_until = None;
            st.running = true;
            st.started += 1;
            let this = st.started;
            drop(st);
            let r = beneath::sync_fs(fd(root));
            st = fl.state.lock().unwrap();
            st.running = false;
            st.done = this;
            if let Err(e) = r {
                st.failed = Some((e.kind(), e.to_string()));
            }
            fl.finished.notify_all();
        }
    }

    /// An unnamed file in `dir`, or None where the filesystem has no `O_TMPFILE`.
    pub fn open_unnamed(&self, dir: &OwnedFd, mode: u32) -> std::io::Result<Option<File>> {
        if self.no_tmpfile.load(Relaxed) {
            return Ok(None);
        }
        match beneath::open_at(fd(dir), b".", libc::O_TMPFILE | libc::O_RDWR, mode) {
            Ok(f) => Ok(Some(File::from(f))),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL | libc::ENOENT)) => {
                self.no_tmpfile.store(true, Relaxed);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// Removes `name` in `dir`: a file or symlink at once, a directory after everything in it.
fn remove_tree_at(dir: &OwnedFd, name: &[u8]) -> std::io::Result<()> {
    match beneath::unlink_at(fd(dir), name, false) {
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {}
        r => return r,
    }
    let sub = beneath::open_at(fd(dir), name, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    {
        use std::os::fd::AsRawFd;
        // The directory opened above, listed through its handle: never a path resolved again.
        for de in fs::read_dir(format!("/proc/self/fd/{}", sub.as_raw_fd()))? {
            remove_tree_at(&sub, de?.file_name().as_bytes())?;
        }
    }
    beneath::unlink_at(fd(dir), name, true)
}

/// `linkat` of `from` in `from_dir` as `to` in `to_dir`: the entry itself, never a symlink's
/// target.
fn link_at(from_dir: std::os::fd::BorrowedFd, from: &[u8], to_dir: std::os::fd::BorrowedFd, to: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (a, b) = (std::ffi::CString::new(from)?, std::ffi::CString::new(to)?);
    // SAFETY: valid descriptors and C strings; no flags: a symlink is linked, not followed.
    if unsafe { libc::linkat(from_dir.as_raw_fd(), a.as_ptr(), to_dir.as_raw_fd(), b.as_ptr(), 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Links an unnamed file in under `name`; a name taken meanwhile is replaced as any existing
/// file is, through a temp name renamed over it.
pub fn link_in(f: &File, dir: &OwnedFd, name: &[u8]) -> std::io::Result<()> {
    match link_unnamed(f, dir, name) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let tmp = temp_name(name, "partial");
            let _ = beneath::unlink_at(fd(dir), &tmp, false);
            link_unnamed(f, dir, &tmp)?;
            let r = beneath::rename_at(fd(dir), &tmp, name);
            if r.is_err() {
                let _ = beneath::unlink_at(fd(dir), &tmp, false);
            }
            r
        }
        r => r,
    }
}

fn link_unnamed(f: &File, dir: &OwnedFd, name: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let c = std::ffi::CString::new(name)?;
    // SAFETY: valid descriptors and C strings.
    let rc = unsafe { libc::linkat(f.as_raw_fd(), c"".as_ptr(), dir.as_raw_fd(), c.as_ptr(), libc::AT_EMPTY_PATH) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH on older kernels; /proc names the same file.
    if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EPERM)) {
        return Err(e);
    }
    let proc = crate::xattrs::proc_path(f.as_raw_fd());
    // SAFETY: valid descriptor and C strings.
    if unsafe { libc::linkat(libc::AT_FDCWD, proc.as_ptr(), dir.as_raw_fd(), c.as_ptr(), libc::AT_SYMLINK_FOLLOW) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `statfs` magic numbers of filesystems reached over a network (linux/magic.h and the
/// filesystems' own headers): NFS, SMB/CIFS (three generations), FUSE (blobfuse, sshfs, the
/// project's latencyfs), Lustre, GPFS, CephFS, AFS, 9p, BeeGFS.
const REMOTE_MAGIC: [i64; 11] = [0x6969, 0x517B, 0xFF534D42, 0xFE534D42, 0x65735546, 0x0BD00BD0, 0x47504653, 0x00C36400, 0x5346414F, 0x01021997, 0x19830326];

fn fs_magic(p: &Path) -> Option<i64> {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs is plain data; a valid C string and a pointer to it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0).then_some(st.f_type as i64)
}

/// Creates the temp file standing in for a final name: `O_EXCL | O_NOFOLLOW`, so it is a new
/// regular file of ours, never an existing file or a symlink planted under the temp name. A
/// leftover of a killed run is removed first.
pub fn create_temp(dir: &OwnedFd, tmp: &[u8], mode: u32) -> std::io::Result<File> {
    // Read and write: a download's hasher reads blocks back from it.
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    match beneath::open_at(fd(dir), tmp, flags, mode) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            beneath::unlink_at(fd(dir), tmp, false)?;
            beneath::open_at(fd(dir), tmp, flags, mode).map(File::from)
        }
        r => r.map(File::from),
    }
}

pub fn md5_reader(mut f: File) -> std::io::Result<[u8; 16]> {
    use crate::hash::Md5;
    thread_local! {
        // One read buffer per thread, for every file it hashes: a fresh MiB per file would be
        // zeroed each time (or faulted in), which for small files costs more than hashing them.
        static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 1 << 20]);
    }
    let mut h = Md5::new();
    BUF.with_borrow_mut(|buf| loop {
        let n = f.read(buf)?;
        if n == 0 {
            return Ok(h.finalize());
        }
        h.update(&buf[..n]);
    })
}

/// What identifies the bytes of a local file at a moment: if any part moves, they may have.
/// ctime catches an in-place rewrite that put the old size and mtime back.
pub fn stamp(md: &fs::Metadata) -> String {
    format!("{}:{}:{}:{}.{}:{}.{}", md.dev(), md.ino(), md.len(), md.mtime(), md.mtime_nsec(), md.ctime(), md.ctime_nsec())
}

/// Fails when a file changed between two looks at it.
pub fn unchanged(before: &str, now: &fs::Metadata) -> std::io::Result<()> {
    if stamp(now) != before {
        return Err(std::io::Error::other("the source changed while being copied (size, mtime or ctime moved); not committed"));
    }
    Ok(())
}

pub fn meta_of(md: &fs::Metadata) -> Meta {
    Meta {
        mtime: Some(Mtime { secs: md.mtime(), nanos: md.mtime_nsec() as u32 }),
        mode: Some(md.mode() & 0o7777),
        uid: Some(md.uid()),
        gid: Some(md.gid()),
        md5: None,
    }
}

/// The manifest's kind of a file type; None for a type Linux does not have.
pub fn kind_of(ft: fs::FileType) -> Option<Kind> {
    use std::os::unix::fs::FileTypeExt;
    let kinds = [
        (ft.is_file(), Kind::File),
        (ft.is_symlink(), Kind::Symlink),
        (ft.is_dir(), Kind::Dir),
        (ft.is_fifo(), Kind::Fifo),
        (ft.is_socket(), Kind::Socket),
        (ft.is_char_device(), Kind::CharDev),
        (ft.is_block_device(), Kind::BlockDev),
    ];
    kinds.into_iter().find_map(|(is, kind)| is.then_some(kind))
}

pub fn entry_of(rel: Vec<u8>, md: &fs::Metadata) -> Option<Entry> {
    let kind = kind_of(md.file_type())?;
    let size = if kind == Kind::File || kind == Kind::Symlink { md.len() } else { 0 };
    Some(Entry {
        path: rel,
        kind,
        size: Some(size),
        mtime: Some(Mtime { secs: md.mtime(), nanos: md.mtime_nsec() as u32 }),
        md5: None,
        mode: Some(md.mode() & 0o7777),
        owner: Some((md.uid(), md.gid())),
        link: (kind == Kind::File && md.nlink() > 1).then(|| (md.dev(), md.ino())),
        xattrs: None,
    })
}

/// The `times` argument of futimens/utimensat that sets the mtime and leaves the atime.
pub fn mtime_times(m: Mtime) -> [libc::timespec; 2] {
    [
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        libc::timespec { tv_sec: m.secs as libc::time_t, tv_nsec: m.nanos as _ },
    ]
}

/// Sets owner, mode and times on an open file. Ownership needs root; as anyone else it is
/// kept only where it already matches, as rsync does.
pub fn apply_meta_fd(f: &File, meta: &Meta) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    if let (Some(uid), Some(gid)) = (meta.uid, meta.gid) {
        // SAFETY: fd is a valid open descriptor for the duration of the call.
        let rc = unsafe { libc::fchown(fd, uid, gid) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EPERM) {
                return Err(e);
            }
        }
    }
    if let Some(mode) = meta.mode {
        // After chown: chown clears set-id bits.
        let rc = unsafe { libc::fchmod(fd, mode as libc::mode_t) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    if let Some(m) = meta.mtime {
        let times = mtime_times(m);
        let rc = unsafe { libc::futimens(fd, times.as_ptr()) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Owner and times of a symlink (never its target), by name in its directory.
pub fn apply_link_meta(dir: &OwnedFd, name: &[u8], meta: &Meta) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let c = std::ffi::CString::new(name)?;
    let d = dir.as_raw_fd();
    if let (Some(uid), Some(gid)) = (meta.uid, meta.gid) {
        // SAFETY: valid descriptor and C string.
        if unsafe { libc::fchownat(d, c.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EPERM) {
                return Err(e);
            }
        }
    }
    if let Some(m) = meta.mtime {
        let times = mtime_times(m);
        // SAFETY: valid descriptor, C string and a two-element array.
        if unsafe { libc::utimensat(d, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn staging_name(k: usize) -> Vec<u8> {
    format!(".ferry-stage-{k}.partial").into_bytes()
}

/// Name of the temp file that stands in for the final name `name` until it is complete.
pub fn temp_name(name: &[u8], suffix: &str) -> Vec<u8> {
    format!(".ferry-{:016x}.{suffix}", fnv1a(name)).into_bytes()
}

/// Parallel directory walk. Threads share a stack of directories; results stream to `tx`.
pub fn walk(root: &Path, recursive: bool, threads: usize, xattrs: &XattrLister, tx: &mpsc::Sender<Result<Entry>>) -> Result<()> {
    // The root itself is followed if it is a symlink: it is what the user named (`cp -H`).
    let md = fs::metadata(root).map_err(|e| StoreError::io(root.display().to_string(), e))?;
    if !md.is_dir() {
        return Err(StoreError::Invalid(format!("{} is not a directory", root.display())));
    }
    struct Queue {
        dirs: Vec<Vec<u8>>,
        busy: usize,
        failed: bool,
    }
    let state = Mutex::new(Queue { dirs: vec![Vec::new()], busy: 0, failed: false });
    let cv = Condvar::new();
    let work = |rel: &[u8]| -> Result<Vec<Vec<u8>>> {
        let dir = if rel.is_empty() { root.to_path_buf() } else { root.join(OsStr::from_bytes(rel)) };
        let rd = fs::read_dir(&dir).map_err(|e| StoreError::io(dir.display().to_string(), e))?;
        let mut subdirs = Vec::new();
        for de in rd {
            let de = de.map_err(|e| StoreError::io(dir.display().to_string(), e))?;
            let name = de.file_name();
            let name = name.as_bytes();
            if is_partial_name(name) {
                continue;
            }
            let mut child = Vec::with_capacity(rel.len() + 1 + name.len());
            if !rel.is_empty() {
                child.extend_from_slice(rel);
                child.push(b'/');
            }
            child.extend_from_slice(name);
            let md = match de.metadata() {
                Ok(md) => md,
                // Vanished between readdir and stat: a live source; it simply isn't there now.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                // One entry that cannot be read is reported; its siblings are still listed.
                Err(e) => {
                    if tx.blocking_send(Err(StoreError::io(de.path().display().to_string(), e))).is_err() {
                        return Ok(Vec::new());
                    }
                    continue;
                }
            };
            if let Some(mut entry) = entry_of(child.clone(), &md) {
                entry.xattrs = xattrs.digest(&de.path());
                if entry.kind == Kind::Dir && recursive {
                    subdirs.push(child);
                }
                if tx.blocking_send(Ok(entry)).is_err() {
                    return Ok(Vec::new());
                }
            }
        }
        Ok(subdirs)
    };
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
    Ok(())
}

/// Threads for a walk. Listing is latency-bound where each directory page is a round trip (NFS,
/// FUSE): there, many directories read at once hide the latency, as many files copied at once
/// do. Elsewhere twice the cores, clamped to 8…32.
pub fn walk_threads(remote: bool) -> usize {
    if remote {
        return 64;
    }
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(4, 16) * 2
}

fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> impl std::future::Future<Output = Result<T>> {
    async move { tokio::task::spawn_blocking(f).await.map_err(|e| StoreError::Invalid(format!("worker thread failed: {e}")))? }
}

fn read_exact_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => return Err(std::io::Error::other("the source is shorter than listed (changed while being copied?)")),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes `pieces` one after another at `offset`, in as few `pwritev` calls as the kernel
/// allows: the pieces go to disk from where they arrived, without being gathered first.
fn write_all_vectored_at(f: &File, pieces: &[Bytes], mut offset: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut rest: Vec<&[u8]> = pieces.iter().map(|p| &p[..]).filter(|p| !p.is_empty()).collect();
    let mut first = 0;
    while first < rest.len() {
        let iov: Vec<libc::iovec> = rest[first..].iter().take(1024).map(|p| libc::iovec { iov_base: p.as_ptr() as *mut _, iov_len: p.len() }).collect();
        // SAFETY: valid fd; the iovecs point into slices that outlive the call.
        let n = unsafe { libc::pwritev(f.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int, offset as libc::off_t) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "pwritev wrote nothing"));
        }
        offset += n as u64;
        let mut n = n as usize;
        while n > 0 {
            let p = rest[first];
            if n >= p.len() {
                n -= p.len();
                first += 1;
            } else {
                rest[first] = &p[n..];
                n = 0;
            }
        }
    }
    Ok(())
}

/// A change seen while reading is an integrity failure: retrying cannot help, and the partial
/// state built from the old bytes must go.
fn changed(e: StoreError) -> StoreError {
    match e {
        StoreError::Io { path, source } if source.kind() == std::io::ErrorKind::Other => StoreError::Integrity(format!("{path}: {source}")),
        e => e,
    }
}

#[async_trait]
impl Store for LocalStore {
    fn describe(&self) -> String {
        self.root.display().to_string()
    }

    async fn list(&self, recursive: bool, tx: mpsc::Sender<Result<Entry>>) -> Result<()> {
        let (root, threads, xattrs) = (self.root.clone(), walk_threads(self.is_remote()), self.xattrs.clone());
        blocking(move || walk(&root, recursive, threads, &xattrs, &tx)).await
    }

    async fn list_dir(&self, dir: &[u8]) -> Result<Option<Vec<Entry>>> {
        let (me, rel) = (self.clone(), dir.to_vec());
        blocking(move || me.list_dir(&rel).map_err(me.io_err(&rel))).await
    }

    async fn head(&self, path: &[u8]) -> Result<Option<(Entry, Meta)>> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || {
            let md = me.lstat(&rel).map_err(me.io_err(&rel))?;
            Ok(md.and_then(|md| entry_of(rel.clone(), &md).map(|e| (e, meta_of(&md)))))
        })
        .await
    }

    async fn version(&self, path: &[u8]) -> Result<Option<(String, u64)>> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || Ok(me.lstat(&rel).map_err(me.io_err(&rel))?.map(|md| (stamp(&md), md.len())))).await
    }

    async fn read(&self, path: &[u8], offset: u64, len: u64, version: Option<&str>) -> Result<Chunk> {
        let (me, rel, version) = (self.clone(), path.to_vec(), version.map(str::to_string));
        blocking(move || {
            let io = me.io_err(&rel);
            let f = me.open_file(&rel).map_err(&io)?;
            let check = |f: &File| match &version {
                Some(v) => f.metadata().and_then(|md| unchanged(v, &md)),
                None => Ok(()),
            };
            check(&f).map_err(&io).map_err(changed)?;
            let data = super::bufpool::filled(len as usize, |buf| read_exact_at(&f, buf, offset).map_err(&io))?;
            // After the read too: a write during it would otherwise go unseen.
            check(&f).map_err(&io).map_err(changed)?;
            Ok(Chunk { data, meta: None })
        })
        .await
    }

    async fn put(&self, path: &[u8], data: Bytes, meta: &Meta) -> Result<()> {
        let (me, rel, meta) = (self.clone(), path.to_vec(), meta.clone());
        blocking(move || {
            let (dir, name) = me.parent(&rel, true).map_err(me.io_err(&rel))?;
            let written = |mut f: &File| {
                f.write_all(&data)?;
                apply_meta_fd(f, &meta)
            };
            // Unnamed until complete where the filesystem allows; its bytes reach the disk in a
            // flush shared with the files written beside it, before it gets its name.
            if let Some(f) = me.open_unnamed(&dir, 0o600).map_err(me.io_err(&rel))? {
                return written(&f).and_then(|_| me.sync_one()).and_then(|_| link_in(&f, &dir, name)).map_err(me.io_err(&rel));
            }
            let tmp = temp_name(name, "partial");
            let res = create_temp(&dir, &tmp, 0o600).and_then(|f| {
                written(&f)?;
                me.sync_one()?;
                beneath::rename_at(fd(&dir), &tmp, name)
            });
            if res.is_err() {
                let _ = beneath::unlink_at(fd(&dir), &tmp, false);
            }
            res.map_err(me.io_err(&rel))
        })
        .await
    }

    async fn start_upload(&self, path: &[u8], plan: &UploadPlan) -> Result<Box<dyn Upload>> {
        let (me, rel, plan) = (self.clone(), path.to_vec(), plan.clone());
        let up = blocking(move || LocalUpload::open(me, rel, plan)).await?;
        Ok(Box::new(up))
    }

    async fn delete(&self, path: &[u8]) -> Result<()> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || {
            let r = me.parent(&rel, false).and_then(|(dir, name)| {
                // unlink removes a symlink itself, never its target; a directory says EISDIR.
                match beneath::unlink_at(fd(&dir), name, false) {
                    Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
                        me.forget_dir(&rel);
                        beneath::unlink_at(fd(&dir), name, true)
                    }
                    r => r,
                }
            });
            match r {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                r => r.map_err(me.io_err(&rel)),
            }
        })
        .await
    }

    async fn remove_all(&self, path: &[u8]) -> Result<()> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || me.remove_all(&rel).map_err(me.io_err(&rel))).await
    }

    async fn set_meta(&self, path: &[u8], kind: Kind, meta: &Meta) -> Result<()> {
        let (me, rel, meta) = (self.clone(), path.to_vec(), meta.clone());
        blocking(move || me.set_meta(&rel, kind, &meta).map_err(me.io_err(&rel))).await
    }

    async fn create_root(&self) -> Result<bool> {
        let root = self.root.clone();
        blocking(move || {
            let existed = root.is_dir();
            fs::create_dir_all(&root).map_err(|e| StoreError::io(root.display().to_string(), e))?;
            Ok(!existed)
        })
        .await
    }

    fn local_root(&self) -> Option<&Path> {
        Some(&self.root)
    }

    fn as_local(&self) -> Option<&LocalStore> {
        Some(self)
    }
}

/// A download in progress: blocks land in a temp file; a journal records which are complete,
/// so a killed run resumes instead of starting over.
struct LocalUpload {
    store: LocalStore,
    rel: Vec<u8>,
    dir: Arc<OwnedFd>,
    tmp: Vec<u8>,
    journal_name: Vec<u8>,
    file: Arc<File>,
    journal: Mutex<File>,
    staged: Vec<bool>,
    plan: UploadPlan,
}

impl LocalUpload {
    fn open(store: LocalStore, rel: Vec<u8>, plan: UploadPlan) -> Result<Self> {
        let what = store.full_path(&rel).display().to_string();
        let io = |e| StoreError::io(what.clone(), e);
        let (dir, name) = store.parent(&rel, true).map_err(&io)?;
        let tmp = temp_name(name, "partial");
        let journal_name = temp_name(name, "journal");
        let header = format!("{} {} {}\n", plan.fingerprint, plan.size, plan.block_size);
        let nblocks = plan.blocks() as usize;
        let mut staged = vec![false; nblocks];
        let mut previous = String::new();
        let had_journal = beneath::open_at(fd(&dir), &journal_name, libc::O_RDONLY, 0)
            .and_then(|j| File::from(j).read_to_string(&mut previous))
            .is_ok();
        // The partial file of an earlier run, only if it is still a regular file of ours.
        let old = beneath::open_at(fd(&dir), &tmp, libc::O_RDWR, 0).map(File::from).ok().filter(|f| f.metadata().is_ok_and(|m| m.is_file()));
        let (file, journal) = match old {
            Some(f) if had_journal && previous.starts_with(&header) => {
                for line in previous[header.len()..].lines() {
                    if let Some(i) = line.trim().parse::<usize>().ok().filter(|&i| i < nblocks) {
                        staged[i] = true;
                    }
                }
                (f, File::from(beneath::open_at(fd(&dir), &journal_name, libc::O_WRONLY | libc::O_APPEND, 0).map_err(&io)?))
            }
            _ => {
                let mut j = create_temp(&dir, &journal_name, 0o600).map_err(&io)?;
                j.write_all(header.as_bytes()).map_err(&io)?;
                (create_temp(&dir, &tmp, 0o600).map_err(&io)?, j)
            }
        };
        file.set_len(plan.size).map_err(&io)?;
        Ok(LocalUpload { store, rel, dir, tmp, journal_name, file: Arc::new(file), journal: Mutex::new(journal), staged, plan })
    }

    fn io_err(&self) -> impl Fn(std::io::Error) -> StoreError + '_ {
        self.store.io_err(&self.rel)
    }
}

#[async_trait]
impl Upload for LocalUpload {
    fn staged(&self, idx: u64) -> bool {
        self.staged.get(idx as usize).copied().unwrap_or(false)
    }

    async fn put_block(&self, idx: u64, data: Bytes, _md5: Option<[u8; 16]>) -> Result<bool> {
        self.write_at(idx, 0, vec![data]).await?;
        self.finish_block(idx).await?;
        Ok(true)
    }

    fn piecewise(&self) -> bool {
        true
    }

    async fn write_at(&self, idx: u64, offset_in_block: u64, data: Vec<Bytes>) -> Result<()> {
        let file = self.file.clone();
        let offset = idx * self.plan.block_size + offset_in_block;
        let what = self.store.full_path(&self.rel).display().to_string();
        blocking(move || write_all_vectored_at(&file, &data, offset).map_err(|e| StoreError::io(what, e))).await
    }

    async fn finish_block(&self, idx: u64) -> Result<()> {
        // Journal after the data: a kill in between costs one block, never a hole.
        let mut j = self.journal.lock().unwrap();
        writeln!(j, "{idx}").map_err(self.io_err())
    }

    async fn read_back(&self, idx: u64) -> Result<Option<Bytes>> {
        let file = self.file.clone();
        let offset = idx * self.plan.block_size;
        let len = self.plan.block_len(idx) as usize;
        let what = self.store.full_path(&self.rel).display().to_string();
        blocking(move || Ok(Some(super::bufpool::filled(len, |buf| read_exact_at(&file, buf, offset).map_err(|e| StoreError::io(&what, e)))?)))
            .await
    }

    async fn commit(self: Box<Self>, meta: &Meta) -> Result<()> {
        let meta = meta.clone();
        blocking(move || {
            let io = self.io_err();
            let (_, name) = beneath::split(&self.rel);
            apply_meta_fd(&self.file, &meta).map_err(&io)?;
            self.store.commit_temp(&self.dir, &self.tmp, name, &self.file).map_err(&io)?;
            let _ = beneath::unlink_at(fd(&self.dir), &self.journal_name, false);
            Ok(())
        })
        .await
    }

    async fn abort(self: Box<Self>, discard: bool) {
        if discard {
            let _ = beneath::unlink_at(fd(&self.dir), &self.tmp, false);
            let _ = beneath::unlink_at(fd(&self.dir), &self.journal_name, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_names_are_recognised() {
        let t = temp_name(b"some file", "partial");
        assert!(is_partial_name(&t));
        assert!(!is_partial_name(b".ferry-notes.txt"));
        // Bounded length whatever the name.
        let long = "n".repeat(250);
        assert!(temp_name(long.as_bytes(), "journal").len() < 40);
    }

    #[test]
    fn unsafe_relative_paths_are_refused() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b..c")).unwrap();
        let s = LocalStore::new(t.path().to_path_buf(), false);
        for bad in [&b"../etc/passwd"[..], b"a/../../b", b"/abs", b"a//b", b"./a", b""] {
            assert!(s.parent(bad, false).is_err(), "{bad:?}");
        }
        assert!(s.parent(b"a/b..c/.d", false).is_ok());
    }

    /// Durable puts from many tasks at once share flushes, and each lands whole under its
    /// name, a new one or one it replaces, with no temp name left behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_durable_puts_land_whole() {
        let t = tempfile::tempdir().unwrap();
        let s = LocalStore::new(t.path().to_path_buf(), true);
        std::fs::create_dir(t.path().join("d")).unwrap();
        std::fs::write(t.path().join("d/f3"), b"old and longer than the new bytes").unwrap();
        let meta = Meta { mtime: Some(Mtime { secs: 1_600_000_000, nanos: 5 }), mode: Some(0o640), ..Meta::default() };
        let puts = (0..32).map(|i| {
            let (s, meta) = (s.clone(), meta.clone());
            tokio::spawn(async move { s.put(format!("d/f{i}").as_bytes(), Bytes::from(format!("file {i}")), &meta).await })
        });
        for p in futures::future::join_all(puts).await {
            p.unwrap().unwrap();
        }
        let fl = s.flushes.state.lock().unwrap();
        assert!(fl.done >= 1 && fl.done == fl.started && fl.failed.is_none());
        let names: Vec<String> = std::fs::read_dir(t.path().join("d")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names.len(), 32, "{names:?}");
        for i in 0..32 {
            let p = t.path().join(format!("d/f{i}"));
            assert_eq!(std::fs::read(&p).unwrap(), format!("file {i}").as_bytes());
            let md = std::fs::metadata(&p).unwrap();
            assert_eq!((md.mode() & 0o7777, md.mtime(), md.mtime_nsec()), (0o640, 1_600_000_000, 5));
        }
    }
}
