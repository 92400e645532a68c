//! Local filesystem (and NFS mounts): parallel walks, pread/pwrite blocks, temp-name + rename.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::{check_relative, fnv1a, Chunk, Meta, Store, Upload, UploadPlan};
use crate::error::{Result, StoreError};
use crate::manifest::{Entry, Kind, Mtime};

pub struct LocalStore {
    root: PathBuf,
}

/// Temp and journal files carry this prefix; listings skip them so a half-written file is
/// never seen, under its own name or any other.
pub const PARTIAL_PREFIX: &[u8] = b".ferry-";

pub fn is_partial_name(name: &[u8]) -> bool {
    name.starts_with(PARTIAL_PREFIX) && (name.ends_with(b".partial") || name.ends_with(b".journal"))
}

impl LocalStore {
    pub fn new(root: PathBuf) -> Self {
        LocalStore { root }
    }

    pub fn full_path(&self, rel: &[u8]) -> Result<PathBuf> {
        check_relative(rel)?;
        Ok(self.root.join(OsStr::from_bytes(rel)))
    }
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

pub fn entry_of(rel: Vec<u8>, md: &fs::Metadata) -> Option<Entry> {
    let ft = md.file_type();
    let kind = if ft.is_file() {
        Kind::File
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_dir() {
        Kind::Dir
    } else {
        // Devices, fifos and sockets are not data to migrate.
        return None;
    };
    let size = if kind == Kind::Dir { 0 } else { md.len() };
    Some(Entry { path: rel, kind, size: Some(size), mtime: Some(Mtime { secs: md.mtime(), nanos: md.mtime_nsec() as u32 }), md5: None })
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

/// Owner and times of a path without following a final symlink (for symlinks and dirs).
pub fn apply_meta_path(path: &Path, meta: &Meta, follow: bool) -> std::io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    if let (Some(uid), Some(gid)) = (meta.uid, meta.gid) {
        let rc = unsafe { libc::fchownat(libc::AT_FDCWD, c.as_ptr(), uid, gid, flags) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EPERM) {
                return Err(e);
            }
        }
    }
    if follow {
        if let Some(mode) = meta.mode {
            let rc = unsafe { libc::chmod(c.as_ptr(), mode as libc::mode_t) };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    if let Some(m) = meta.mtime {
        let times = mtime_times(m);
        let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), flags) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Name of the temp file that stands in for `final_path` until it is complete.
pub fn temp_path(final_path: &Path, suffix: &str) -> PathBuf {
    let name = final_path.file_name().map(|n| n.as_bytes()).unwrap_or(b"");
    let tmp = format!(".ferry-{:016x}.{suffix}", fnv1a(name));
    final_path.with_file_name(tmp)
}

pub fn ensure_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => fs::create_dir_all(p),
        _ => Ok(()),
    }
}

/// Parallel directory walk. Threads share a stack of directories; results stream to `tx`.
pub fn walk(root: &Path, recursive: bool, threads: usize, tx: &mpsc::Sender<Result<Entry>>) -> Result<()> {
    let md = fs::symlink_metadata(root).map_err(|e| StoreError::io(root.display().to_string(), e))?;
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
                Err(e) => return Err(StoreError::io(de.path().display().to_string(), e)),
            };
            if let Some(entry) = entry_of(child.clone(), &md) {
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
                let res = work(&rel);
                let mut q = state.lock().unwrap();
                q.busy -= 1;
                match res {
                    Ok(sub) => q.dirs.extend(sub),
                    Err(e) => {
                        q.failed = true;
                        let _ = tx.blocking_send(Err(e));
                    }
                }
                cv.notify_all();
            });
        }
    });
    Ok(())
}

pub fn walk_threads() -> usize {
    // Listing is latency-bound on NFS, not CPU-bound: more threads than cores pays off.
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(4, 16) * 2
}

fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> impl std::future::Future<Output = Result<T>> {
    async move { tokio::task::spawn_blocking(f).await.map_err(|e| StoreError::Invalid(format!("worker thread failed: {e}")))? }
}

fn read_exact_at(f: &File, buf: &mut [u8], offset: u64, what: &str) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(StoreError::Integrity(format!(
                    "{what}: file is shorter than listed (changed while copying?)"
                )))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(StoreError::io(what, e)),
        }
    }
    Ok(())
}

#[async_trait]
impl Store for LocalStore {
    fn describe(&self) -> String {
        self.root.display().to_string()
    }

    async fn list(&self, recursive: bool, tx: mpsc::Sender<Result<Entry>>) -> Result<()> {
        let root = self.root.clone();
        blocking(move || walk(&root, recursive, walk_threads(), &tx)).await
    }

    async fn head(&self, path: &[u8]) -> Result<Option<(Entry, Meta)>> {
        let full = self.full_path(path)?;
        let rel = path.to_vec();
        blocking(move || match fs::symlink_metadata(&full) {
            Ok(md) => Ok(entry_of(rel, &md).map(|e| (e, meta_of(&md)))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io(full.display().to_string(), e)),
        })
        .await
    }

    async fn read(&self, path: &[u8], offset: u64, len: u64) -> Result<Chunk> {
        let full = self.full_path(path)?;
        blocking(move || {
            let what = full.display().to_string();
            let f = File::open(&full).map_err(|e| StoreError::io(&what, e))?;
            let data = super::bufpool::filled(len as usize, |buf| read_exact_at(&f, buf, offset, &what))?;
            Ok(Chunk { data, meta: None })
        })
        .await
    }

    async fn put(&self, path: &[u8], data: Bytes, meta: &Meta) -> Result<()> {
        let full = self.full_path(path)?;
        let meta = meta.clone();
        blocking(move || {
            let what = full.display().to_string();
            let tmp = temp_path(&full, "partial");
            let io = |e| StoreError::io(&what, e);
            ensure_parent(&full).map_err(io)?;
            let mut f = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp).map_err(io)?;
            let res = f.write_all(&data).and_then(|_| apply_meta_fd(&f, &meta)).and_then(|_| fs::rename(&tmp, &full));
            if res.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            res.map_err(io)
        })
        .await
    }

    async fn start_upload(&self, path: &[u8], plan: &UploadPlan) -> Result<Box<dyn Upload>> {
        let full = self.full_path(path)?;
        let plan = plan.clone();
        let up = blocking(move || LocalUpload::open(full, plan)).await?;
        Ok(Box::new(up))
    }

    async fn delete(&self, path: &[u8]) -> Result<()> {
        let full = self.full_path(path)?;
        blocking(move || {
            let md = match fs::symlink_metadata(&full) {
                Ok(md) => md,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(StoreError::io(full.display().to_string(), e)),
            };
            // remove_file on a symlink removes the link, never its target.
            let r = if md.is_dir() { fs::remove_dir(&full) } else { fs::remove_file(&full) };
            r.map_err(|e| StoreError::io(full.display().to_string(), e))
        })
        .await
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
}

/// A download in progress: blocks land in a temp file; a journal records which are complete,
/// so a killed run resumes instead of starting over.
struct LocalUpload {
    final_path: PathBuf,
    tmp: PathBuf,
    journal_path: PathBuf,
    file: std::sync::Arc<File>,
    journal: Mutex<File>,
    staged: Vec<bool>,
    plan: UploadPlan,
}

impl LocalUpload {
    fn open(final_path: PathBuf, plan: UploadPlan) -> Result<Self> {
        let what = final_path.display().to_string();
        let io = |e| StoreError::io(&what, e);
        ensure_parent(&final_path).map_err(io)?;
        let tmp = temp_path(&final_path, "partial");
        let journal_path = temp_path(&final_path, "journal");
        let header = format!("{} {} {}\n", plan.fingerprint, plan.size, plan.block_size);
        let nblocks = plan.blocks() as usize;
        let mut staged = vec![false; nblocks];
        let previous = fs::read_to_string(&journal_path).ok();
        let resumable = previous.as_deref().is_some_and(|j| j.starts_with(&header)) && tmp.exists();
        if resumable {
            for line in previous.as_deref().unwrap_or_default()[header.len()..].lines() {
                if let Ok(i) = line.trim().parse::<usize>() {
                    if i < nblocks {
                        staged[i] = true;
                    }
                }
            }
        } else {
            let _ = fs::remove_file(&tmp);
            fs::write(&journal_path, &header).map_err(io)?;
        }
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(&tmp).map_err(io)?;
        file.set_len(plan.size).map_err(io)?;
        let journal = OpenOptions::new().append(true).open(&journal_path).map_err(io)?;
        Ok(LocalUpload { final_path, tmp, journal_path, file: std::sync::Arc::new(file), journal: Mutex::new(journal), staged, plan })
    }
}

#[async_trait]
impl Upload for LocalUpload {
    fn staged(&self, idx: u64) -> bool {
        self.staged.get(idx as usize).copied().unwrap_or(false)
    }

    async fn put_block(&self, idx: u64, data: Bytes) -> Result<()> {
        self.write_at(idx, 0, data).await?;
        self.finish_block(idx).await
    }

    fn piecewise(&self) -> bool {
        true
    }

    async fn write_at(&self, idx: u64, offset_in_block: u64, data: Bytes) -> Result<()> {
        let file = self.file.clone();
        let offset = idx * self.plan.block_size + offset_in_block;
        let what = self.final_path.display().to_string();
        blocking(move || file.write_all_at(&data, offset).map_err(|e| StoreError::io(what, e))).await
    }

    async fn finish_block(&self, idx: u64) -> Result<()> {
        // Journal after the data: a kill in between costs one block, never a hole.
        let mut j = self.journal.lock().unwrap();
        writeln!(j, "{idx}").map_err(|e| StoreError::io(self.journal_path.display().to_string(), e))
    }

    async fn read_back(&self, idx: u64) -> Result<Option<Bytes>> {
        let file = self.file.clone();
        let offset = idx * self.plan.block_size;
        let len = self.plan.block_len(idx) as usize;
        let what = self.final_path.display().to_string();
        blocking(move || Ok(Some(super::bufpool::filled(len, |buf| read_exact_at(&file, buf, offset, &what))?)))
        .await
    }

    async fn commit(self: Box<Self>, meta: &Meta) -> Result<()> {
        let meta = meta.clone();
        blocking(move || {
            let what = self.final_path.display().to_string();
            let io = |e| StoreError::io(&what, e);
            apply_meta_fd(&self.file, &meta).map_err(io)?;
            fs::rename(&self.tmp, &self.final_path).map_err(io)?;
            let _ = fs::remove_file(&self.journal_path);
            Ok(())
        })
        .await
    }

    async fn abort(self: Box<Self>, discard: bool) {
        if discard {
            let _ = fs::remove_file(&self.tmp);
            let _ = fs::remove_file(&self.journal_path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_names_are_recognised() {
        let t = temp_path(Path::new("/x/some file"), "partial");
        assert!(is_partial_name(t.file_name().unwrap().as_bytes()));
        assert!(!is_partial_name(b".ferry-notes.txt"));
        // Bounded length whatever the name.
        let long = "n".repeat(250);
        assert!(temp_path(Path::new(&long), "journal").as_os_str().len() < 40);
    }

    #[test]
    fn unsafe_relative_paths_are_refused() {
        let s = LocalStore::new(PathBuf::from("/tmp/root"));
        for bad in [&b"../etc/passwd"[..], b"a/../../b", b"/abs", b"a//b", b"./a", b""] {
            assert!(s.full_path(bad).is_err(), "{bad:?}");
        }
        assert!(s.full_path(b"a/b..c/.d").is_ok());
    }
}
