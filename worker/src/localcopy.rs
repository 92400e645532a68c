//! local → local: the kernel's copy path (copy_file_range), ownership, mode, times and
//! symlinks kept as `rsync -lptgoD --numeric-ids` keeps them. Each file costs about nine
//! system calls; this path decides small-file speed, so it avoids every one it can.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use crate::storage::beneath::{self, fd};
use crate::storage::local::{apply_link_meta, apply_meta_fd, create_temp, meta_of, mtime_times, stamp, temp_name, unchanged, LocalStore};
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
pub fn copy_file(src: &LocalStore, dst: &LocalStore, src_rel: &[u8], dst_rel: &[u8], id: &Identity) -> io::Result<u64> {
    let input = src.open_file(src_rel)?;
    let md = input.metadata()?;
    if !md.is_file() {
        return Err(io::Error::other("no longer a regular file"));
    }
    let before = stamp(&md);
    let meta = meta_of(&md);
    let mode = md.mode() & 0o7777;
    let (dir, name) = dst.parent(dst_rel, true)?;
    let tmp = temp_name(name, "partial");
    // Created with its final permission bits where the umask allows, saving a chmod.
    let out = create_temp(&dir, &tmp, mode & 0o777)?;
    let result = (|| {
        copy_range(&input, &out, md.len())?;
        // Grown, shrunk or rewritten meanwhile: the copy matches no version of the file.
        unchanged(&before, &input.metadata()?)?;
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
        dst.commit_temp(&dir, &tmp, name, &out)
    })();
    if result.is_err() {
        let _ = beneath::unlink_at(fd(&dir), &tmp, false);
    }
    result.map(|_| md.len())
}

pub fn copy_symlink(src: &LocalStore, dst: &LocalStore, src_rel: &[u8], dst_rel: &[u8]) -> io::Result<()> {
    let md = src.lstat(src_rel)?.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    let target = src.readlink(src_rel)?;
    let (dir, name) = dst.parent(dst_rel, true)?;
    let tmp = temp_name(name, "partial");
    let _ = beneath::unlink_at(fd(&dir), &tmp, false);
    beneath::symlink_at(&target, fd(&dir), &tmp)?;
    let meta = Meta { mode: None, ..meta_of(&md) };
    let result = apply_link_meta(&dir, &tmp, &meta).and_then(|_| beneath::rename_at(fd(&dir), &tmp, name));
    if result.is_err() {
        let _ = beneath::unlink_at(fd(&dir), &tmp, false);
    }
    result
}

/// Directories get their metadata after their contents are written, which would otherwise
/// bump their mtimes again. The metadata goes on the directory opened without following a
/// symlink: one standing in its place is refused, its target left alone.
pub fn finish_dir(dst: &LocalStore, rel: &[u8], meta: &Meta) -> io::Result<()> {
    let (parent, name) = dst.parent(rel, true)?;
    beneath::mkdir_at(fd(&parent), name)?;
    let dir = beneath::open_at(fd(&parent), name, libc::O_RDONLY | libc::O_DIRECTORY, 0).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR) => io::Error::other("a symlink or a file stands where the directory should be (not followed)"),
        _ => e,
    })?;
    apply_meta_fd(&File::from(dir), meta)
}
