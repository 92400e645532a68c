//! System-call helpers of the local store, and what a `stat` says in the manifest's terms.

use std::fs::{self, File};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use bytes::Bytes;

use super::beneath::{self, fd};
use super::leftover::temp_name;
use crate::error::StoreError;
use crate::manifest::{Entry, Kind, Mtime};
use crate::storage::Meta;

/// `linkat` of `from` in `from_dir` as `to` in `to_dir`: the entry itself, never a symlink's
/// target.
pub(super) fn link_at(
    from_dir: std::os::fd::BorrowedFd,
    from: &[u8],
    to_dir: std::os::fd::BorrowedFd,
    to: &[u8],
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (a, b) = (std::ffi::CString::new(from)?, std::ffi::CString::new(to)?);
    // SAFETY: valid descriptors and C strings; no flags: a symlink is linked, not followed.
    if unsafe {
        libc::linkat(
            from_dir.as_raw_fd(),
            a.as_ptr(),
            to_dir.as_raw_fd(),
            b.as_ptr(),
            0,
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Links an unnamed file in under `name`; a name taken meanwhile is replaced as any existing
/// file is, through a temp name renamed over it.
pub(super) fn link_in(f: &File, dir: &OwnedFd, name: &[u8]) -> std::io::Result<()> {
    match link_unnamed(f, dir, name) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let tmp = temp_name(name, "partial");
            super::leftover::clear_temp(dir, &tmp)?;
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
    let rc = unsafe {
        libc::linkat(
            f.as_raw_fd(),
            c"".as_ptr(),
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
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
    if unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc.as_ptr(),
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `statfs` magic numbers of filesystems reached over a network (linux/magic.h and the
/// filesystems' own headers): NFS, SMB/CIFS (three generations), FUSE (blobfuse, sshfs, the
/// project's latencyfs), Lustre, GPFS, CephFS, AFS, 9p, BeeGFS.
const REMOTE_MAGIC: [i64; 11] = [
    0x6969, 0x517B, 0xFF534D42, 0xFE534D42, 0x65735546, 0x0BD00BD0, 0x47504653, 0x00C36400,
    0x5346414F, 0x01021997, 0x19830326,
];

/// Whether `root` sits on a filesystem where each metadata call is a network round trip
/// (NFS, SMB, Lustre, FUSE, ...): such a tree needs many more calls in flight to hide the
/// latency. A root that does not exist yet is judged by its nearest existing parent.
pub(crate) fn is_remote(root: &Path) -> bool {
    let mut p = root;
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

fn fs_magic(p: &Path) -> Option<i64> {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs is plain data; a valid C string and a pointer to it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0).then_some(st.f_type as i64)
}

/// Creates the temp file standing in for a final name: `O_EXCL | O_NOFOLLOW`, so it is a new
/// regular file of ours, never an existing file or a symlink planted under the temp name, with
/// `mode` and ferry's mark (`leftover::MARK`, cleared when its final mode is set). A leftover of
/// a killed run is removed first; a user's file of that name is refused, never removed.
pub(super) fn create_temp(dir: &OwnedFd, tmp: &[u8], mode: u32) -> std::io::Result<File> {
    // Read and write: a download's hasher reads blocks back from it.
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    let mode = mode | super::leftover::MARK;
    match beneath::open_at(fd(dir), tmp, flags, mode) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            super::leftover::clear_temp(dir, tmp)?;
            beneath::open_at(fd(dir), tmp, flags, mode).map(File::from)
        }
        r => r.map(File::from),
    }
}

pub(super) fn md5_reader(mut f: File) -> std::io::Result<[u8; 16]> {
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
pub(super) fn stamp(md: &fs::Metadata) -> String {
    format!(
        "{}:{}:{}:{}.{}:{}.{}",
        md.dev(),
        md.ino(),
        md.len(),
        md.mtime(),
        md.mtime_nsec(),
        md.ctime(),
        md.ctime_nsec()
    )
}

/// Fails when a file changed between two looks at it.
pub(super) fn unchanged(before: &str, now: &fs::Metadata) -> std::io::Result<()> {
    if stamp(now) != before {
        return Err(std::io::Error::other(
            "the source changed while being copied (size, mtime or ctime moved); not committed",
        ));
    }
    Ok(())
}

/// A change seen while reading is an integrity failure: retrying cannot help, and the partial
/// state built from the old bytes must go.
pub(super) fn changed(e: StoreError) -> StoreError {
    match e {
        StoreError::Io { path, source }
            if matches!(
                source.kind(),
                std::io::ErrorKind::Other | std::io::ErrorKind::NotADirectory
            ) =>
        {
            StoreError::Integrity(format!("{path}: {source}"))
        }
        e => e,
    }
}

pub(crate) fn meta_of(md: &fs::Metadata) -> Meta {
    Meta {
        mtime: Some(Mtime {
            secs: md.mtime(),
            nanos: md.mtime_nsec() as u32,
        }),
        mode: Some(md.mode() & 0o7777),
        uid: Some(md.uid()),
        gid: Some(md.gid()),
        md5: None,
        sparse: None,
    }
}

/// The manifest's kind of a file type; None for a type Linux does not have.
pub(super) fn kind_of(ft: fs::FileType) -> Option<Kind> {
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

/// What a symlink's `md5` is, in a local listing as in Blob (whose symlink blob holds the
/// target, and so has its MD5 as Content-MD5): the MD5 of its target, so that two listings tell
/// a retargeted link whatever its length and mtime.
pub(crate) fn link_md5(target: &[u8]) -> [u8; 16] {
    crate::hash::digest(target)
}

/// `entry_of`, and a symlink's target digest from `target`, which is asked for only for a
/// symlink. A target that cannot be read leaves it unknown (the size and mtime rules then apply).
pub(crate) fn entry_with_target(
    rel: Vec<u8>,
    md: &fs::Metadata,
    target: impl FnOnce() -> std::io::Result<Vec<u8>>,
) -> Option<Entry> {
    let mut e = entry_of(rel, md)?;
    if e.kind == Kind::Symlink {
        e.md5 = target().ok().map(|t| link_md5(&t));
    }
    Some(e)
}

pub(crate) fn entry_of(rel: Vec<u8>, md: &fs::Metadata) -> Option<Entry> {
    let kind = kind_of(md.file_type())?;
    let size = if kind == Kind::File || kind == Kind::Symlink {
        md.len()
    } else {
        0
    };
    Some(Entry {
        path: rel,
        kind,
        size: Some(size),
        mtime: Some(Mtime {
            secs: md.mtime(),
            nanos: md.mtime_nsec() as u32,
        }),
        md5: None,
        mode: Some(md.mode() & 0o7777),
        owner: Some((md.uid(), md.gid())),
        link: (kind == Kind::File && md.nlink() > 1).then(|| (md.dev(), md.ino())),
        xattrs: None,
    })
}

/// The `times` argument of futimens/utimensat that sets the mtime and leaves the atime.
pub(super) fn mtime_times(m: Mtime) -> [libc::timespec; 2] {
    [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: m.secs as libc::time_t,
            tv_nsec: m.nanos as _,
        },
    ]
}

/// Sets owner, mode and times on an open file. Ownership needs root; as anyone else it is
/// kept only where it already matches, as rsync does.
pub(super) fn apply_meta_fd(f: &File, meta: &Meta) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    if let (Some(uid), Some(gid)) = (meta.uid, meta.gid) {
        // SAFETY: fd is a valid open descriptor for the duration of the call.
        chowned(unsafe { libc::fchown(fd, uid, gid) })?;
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

/// The result of a chown: a refusal (EPERM: only root gives a file away) is no error, and the
/// owner is then kept only where it already matches, as rsync keeps it.
pub(super) fn chowned(rc: libc::c_int) -> std::io::Result<()> {
    match rc {
        0 => Ok(()),
        _ => match std::io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EPERM) => Ok(()),
            e => Err(e),
        },
    }
}

/// Owner and times of a symlink (never its target), by name in its directory.
pub(super) fn apply_link_meta(dir: &OwnedFd, name: &[u8], meta: &Meta) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let c = std::ffi::CString::new(name)?;
    let d = dir.as_raw_fd();
    if let (Some(uid), Some(gid)) = (meta.uid, meta.gid) {
        // SAFETY: valid descriptor and C string.
        chowned(unsafe { libc::fchownat(d, c.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })?;
    }
    if let Some(m) = meta.mtime {
        let times = mtime_times(m);
        // SAFETY: valid descriptor, C string and a two-element array.
        if unsafe { libc::utimensat(d, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) } != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

pub(super) fn read_exact_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(std::io::Error::other(
                    "the source is shorter than listed (changed while being copied?)",
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes `pieces` one after another at `offset`, in as few `pwritev` calls as the kernel
/// allows: the pieces go to disk from where they arrived, without being gathered first.
pub(super) fn write_all_vectored_at(
    f: &File,
    pieces: &[Bytes],
    mut offset: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut rest: Vec<&[u8]> = pieces
        .iter()
        .map(|p| &p[..])
        .filter(|p| !p.is_empty())
        .collect();
    let mut first = 0;
    while first < rest.len() {
        let iov: Vec<libc::iovec> = rest[first..]
            .iter()
            .take(1024)
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut _,
                iov_len: p.len(),
            })
            .collect();
        // SAFETY: valid fd; the iovecs point into slices that outlive the call.
        let n = unsafe {
            libc::pwritev(
                f.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                offset as libc::off_t,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "pwritev wrote nothing",
            ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_are_short() {
        // Bounded length whatever the name.
        let long = "n".repeat(250);
        assert!(temp_name(long.as_bytes(), "journal").len() < 40);
    }
}
