//! local → local: the kernel's copy path (copy_file_range), ownership, mode, times and
//! symlinks kept as `rsync -lptgoD --numeric-ids` keeps them. Each file costs about nine
//! system calls; this path decides small-file speed, so it avoids every one it can.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::storage::local::{apply_meta_path, ensure_parent, meta_of, mtime_times, temp_path};
use crate::storage::Meta;

/// Process credentials and umask, read once: they decide which metadata calls are no-ops.
pub struct Identity {
    euid: u32,
    egid: u32,
    umask: u32,
}

impl Identity {
    pub fn current() -> Identity {
        // SAFETY: plain libc calls without pointers; umask is restored at once.
        unsafe {
            let m = libc::umask(0o022);
            libc::umask(m);
            Identity { euid: libc::geteuid(), egid: libc::getegid(), umask: m as u32 }
        }
    }
}

fn open_temp(tmp: &Path, mode: u32) -> io::Result<File> {
    let open = || OpenOptions::new().write(true).create(true).truncate(true).mode(mode).custom_flags(libc::O_NOFOLLOW).open(tmp);
    match open() {
        // The parent is created only when missing: one failed open is cheaper than a mkdir per file.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            ensure_parent(tmp)?;
            open()
        }
        r => r,
    }
}

fn copy_range(input: &File, out: &File, size: u64) -> io::Result<()> {
    let mut left = size;
    while left > 0 {
        // SAFETY: valid fds; null offsets use and advance the file positions.
        let n = unsafe { libc::copy_file_range(input.as_raw_fd(), std::ptr::null_mut(), out.as_raw_fd(), std::ptr::null_mut(), left as usize, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                // Filesystems or kernels without it: plain reads and writes from where we are.
                Some(libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP | libc::EPERM) => copy_rw(input, out, left),
                Some(libc::EINTR) => continue,
                _ => Err(e),
            };
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being copied"));
        }
        left -= n as u64;
    }
    Ok(())
}

fn copy_rw(mut input: &File, mut out: &File, mut left: u64) -> io::Result<()> {
    let mut buf = vec![0u8; (left.min(1 << 20)) as usize];
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = input.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being copied"));
        }
        out.write_all(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}

fn set_times(f: &File, meta: &Meta) -> io::Result<()> {
    let Some(m) = meta.mtime else { return Ok(()) };
    let times = mtime_times(m);
    // SAFETY: valid fd and a two-element array as futimens requires.
    if unsafe { libc::futimens(f.as_raw_fd(), times.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Copies one regular file through a temp name. Returns the bytes copied.
pub fn copy_file(src: &Path, dst: &Path, id: &Identity) -> io::Result<u64> {
    let input = File::open(src)?;
    let md = input.metadata()?;
    if !md.is_file() {
        return Err(io::Error::other("no longer a regular file"));
    }
    let meta = meta_of(&md);
    let mode = md.mode() & 0o7777;
    let tmp = temp_path(dst, "partial");
    // Created with its final permission bits where the umask allows, saving a chmod.
    let out = open_temp(&tmp, mode & 0o777)?;
    let result = (|| {
        copy_range(&input, &out, md.len())?;
        let chown = md.uid() != id.euid || md.gid() != id.egid;
        if chown {
            // SAFETY: valid fd.
            if unsafe { libc::fchown(out.as_raw_fd(), md.uid(), md.gid()) } != 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EPERM) {
                    return Err(e);
                }
            }
        }
        // chown clears set-id bits, and the umask may have cleared others.
        if chown || mode & !0o777 != 0 || mode & id.umask != 0 {
            // SAFETY: valid fd.
            if unsafe { libc::fchmod(out.as_raw_fd(), mode as libc::mode_t) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        set_times(&out, &meta)?;
        drop(out);
        fs::rename(&tmp, dst)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|_| md.len())
}

pub fn copy_symlink(src: &Path, dst: &Path) -> io::Result<()> {
    let md = fs::symlink_metadata(src)?;
    let target = fs::read_link(src)?;
    let tmp = temp_path(dst, "partial");
    let _ = fs::remove_file(&tmp);
    if let Err(e) = std::os::unix::fs::symlink(&target, &tmp) {
        if e.kind() != io::ErrorKind::NotFound {
            return Err(e);
        }
        ensure_parent(&tmp)?;
        std::os::unix::fs::symlink(&target, &tmp)?;
    }
    let meta = Meta { mode: None, ..meta_of(&md) };
    let result = apply_meta_path(&tmp, &meta, false).and_then(|_| fs::rename(&tmp, dst));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Directories get their metadata after their contents are written, which would otherwise
/// bump their mtimes again.
pub fn finish_dir(dst: &Path, meta: &Meta) -> io::Result<()> {
    fs::create_dir_all(dst)?;
    apply_meta_path(dst, meta, true)
}
