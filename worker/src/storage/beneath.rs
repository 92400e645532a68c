//! Paths below a local root, resolved without following a symlink anywhere below it: a
//! destination holding `shadow -> /elsewhere` must not let `shadow/x` land in `/elsewhere`, and
//! a source holding `out -> /etc` must not let a manifest's `out/passwd` be read.
//!
//! The directory holding an entry is opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! (Linux 5.6+): one system call, checked by the kernel, no window for a swap between check and
//! use. Missing directories (and kernels without openat2) take a walk one component at a time
//! with `O_NOFOLLOW | O_DIRECTORY`. The entry itself is then used by name relative to that
//! directory descriptor (`openat`, `renameat`, `unlinkat`, …), so no later call resolves a path
//! again.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cstr(b: &[u8]) -> io::Result<CString> {
    CString::new(b)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name holds a NUL byte"))
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Opens a root directory. The root itself may be a symlink: it is what the user named.
pub fn open_root(path: &Path) -> io::Result<OwnedFd> {
    let c = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: a valid C string; the returned descriptor is owned from here on.
    let fd = check(unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`.
pub fn open_at(dir: BorrowedFd, name: &[u8], flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: valid descriptor and C string; the result is owned from here on.
    let fd = check(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    })?;
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn openat2_beneath(dir: RawFd, path: &[u8], flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = cstr(path)?;
    // SAFETY: open_how is plain data; zeroed is a valid value for it.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS;
    // SAFETY: valid descriptor, C string and struct with its size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// What a failed step means to a user: a symlink (or a file) stands where a directory should.
fn explain(e: io::Error, rel: &[u8]) -> io::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR | libc::EXDEV) => io::Error::new(
            io::ErrorKind::NotADirectory,
            format!(
                "{}: a symlink or a non-directory stands on the way; ferry never follows symlinks below a root",
                crate::manifest::escape_path(rel)
            ),
        ),
        _ => e,
    }
}

/// The directory `rel` (a checked relative path, '/'-separated, no `.`/`..`/empty components)
/// below `root`, never through a symlink. With `create`, missing directories are made, and a
/// symlink or other non-directory standing on the way is replaced by one: `create` is asked
/// only by a copy writing below `rel`, so the source has a directory there now (a type change
/// between passes). The link itself is removed, never followed.
///
/// The handle is `O_PATH`: good for every `*at` call below it, and free of the directory open
/// that a network filesystem answers with a round trip.
pub fn open_dir(root: BorrowedFd, rel: &[u8], create: bool) -> io::Result<OwnedFd> {
    if rel.is_empty() {
        return root.try_clone_to_owned();
    }
    let flags = libc::O_PATH | libc::O_DIRECTORY;
    match openat2_beneath(root.as_raw_fd(), rel, flags) {
        Ok(fd) => return Ok(fd),
        Err(e)
            if e.raw_os_error() == Some(libc::ENOSYS)
                || (create && (e.kind() == io::ErrorKind::NotFound || in_the_way(&e))) => {}
        Err(e) => return Err(explain(e, rel)),
    }
    let mut dir = root.try_clone_to_owned()?;
    let mut done = 0;
    for comp in rel.split(|&b| b == b'/') {
        done += comp.len() + 1;
        let sofar = &rel[..(done - 1).min(rel.len())];
        let next = match open_at(fd(&dir), comp, flags, 0) {
            Err(e) if create && in_the_way(&e) => {
                // Another process copying a part of the same tree may have replaced it first.
                match unlink_at(fd(&dir), comp, false) {
                    Err(e) if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EISDIR)) => {
                        return Err(explain(e, sofar))
                    }
                    _ => {}
                }
                mkdir_at(fd(&dir), comp)?;
                open_at(fd(&dir), comp, flags, 0)
            }
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
                let c = cstr(comp)?;
                // SAFETY: valid descriptor and C string.
                if unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o777) } != 0 {
                    let e = io::Error::last_os_error();
                    // Another thread made it meanwhile: fine.
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        return Err(explain(e, sofar));
                    }
                }
                open_at(fd(&dir), comp, flags, 0)
            }
            r => r,
        };
        dir = next.map_err(|e| explain(e, sofar))?;
    }
    Ok(dir)
}

/// A symlink (ELOOP under `O_NOFOLLOW`) or a non-directory (ENOTDIR) where a directory was asked.
fn in_the_way(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR))
}

pub fn fd(f: &OwnedFd) -> BorrowedFd<'_> {
    use std::os::fd::AsFd;
    f.as_fd()
}

/// `rel` split into its directory part and final name.
pub fn split(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&[], rel),
    }
}

/// The metadata of `name` in `dir` without following it (an `O_PATH` open and `fstat`).
pub fn lstat_at(dir: BorrowedFd, name: &[u8]) -> io::Result<std::fs::Metadata> {
    let f = File::from(open_at(dir, name, libc::O_PATH, 0)?);
    f.metadata()
}

pub fn rename_at(dir: BorrowedFd, from: &[u8], to: &[u8]) -> io::Result<()> {
    rename_between(dir, from, dir, to)
}

pub fn rename_between(
    from_dir: BorrowedFd,
    from: &[u8],
    to_dir: BorrowedFd,
    to: &[u8],
) -> io::Result<()> {
    let (a, b) = (cstr(from)?, cstr(to)?);
    // SAFETY: valid descriptors and C strings.
    check(unsafe {
        libc::renameat(
            from_dir.as_raw_fd(),
            a.as_ptr(),
            to_dir.as_raw_fd(),
            b.as_ptr(),
        )
    })
    .map(drop)
}

pub fn unlink_at(dir: BorrowedFd, name: &[u8], is_dir: bool) -> io::Result<()> {
    let c = cstr(name)?;
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), flags) }).map(drop)
}

pub fn readlink_at(dir: BorrowedFd, name: &[u8]) -> io::Result<Vec<u8>> {
    let c = cstr(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: valid descriptor, C string and buffer of the given length.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

pub fn symlink_at(target: &[u8], dir: BorrowedFd, name: &[u8]) -> io::Result<()> {
    let (t, c) = (cstr(target)?, cstr(name)?);
    // SAFETY: valid descriptor and C strings.
    check(unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), c.as_ptr()) }).map(drop)
}

/// `mkdirat`; an existing entry of that name is fine (whatever it is: later calls that need a
/// directory find out).
pub fn mkdir_at(dir: BorrowedFd, name: &[u8]) -> io::Result<()> {
    match mkdir_new(dir, name) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

/// `mkdirat`, failing with `AlreadyExists` if the name is taken.
pub fn mkdir_new(dir: BorrowedFd, name: &[u8]) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: valid descriptor and C string.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o777) }).map(drop)
}

/// Flushes the filesystem holding `dir`: every rename and directory entry made before it is
/// on disk once it returns.
pub fn sync_fs(dir: BorrowedFd) -> io::Result<()> {
    // SAFETY: valid descriptor.
    check(unsafe { libc::syncfs(dir.as_raw_fd()) }).map(drop)
}

/// Removes `name` in `dir`: a file or symlink at once, a directory after everything in it.
pub(crate) fn remove_tree_at(dir: &OwnedFd, name: &[u8]) -> std::io::Result<()> {
    match unlink_at(fd(dir), name, false) {
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {}
        r => return r,
    }
    let sub = open_at(fd(dir), name, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    {
        use std::os::fd::AsRawFd;
        // The directory opened above, listed through its handle: never a path resolved again.
        for de in std::fs::read_dir(format!("/proc/self/fd/{}", sub.as_raw_fd()))? {
            remove_tree_at(&sub, de?.file_name().as_bytes())?;
        }
    }
    unlink_at(fd(dir), name, true)
}

/// This process's umask, read where reading it changes nothing: `umask(2)` can only be asked
/// by setting it, and other threads create files meanwhile.
pub(crate) fn umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("Umask:")
                        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
                })
            })
            .unwrap_or(0o022)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_below_the_root_are_never_followed() {
        let t = tempfile::tempdir().unwrap();
        let (root, elsewhere) = (t.path().join("root"), t.path().join("elsewhere"));
        std::fs::create_dir_all(root.join("real/deeper")).unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("shadow")).unwrap();
        std::os::unix::fs::symlink("real", root.join("rel-link")).unwrap();
        std::fs::write(root.join("file"), b"x").unwrap();
        let r = open_root(&root).unwrap();
        let r = fd(&r);
        assert!(open_dir(r, b"real/deeper", false).is_ok());
        for bad in [
            &b"shadow"[..],
            b"shadow/new/dirs",
            b"rel-link",
            b"rel-link/deeper",
            b"file",
            b"file/x",
        ] {
            let err = open_dir(r, bad, false).unwrap_err();
            assert!(
                err.to_string().contains("never follows symlinks"),
                "{bad:?}: {err}"
            );
        }
        // A copy writing below them (create) replaces the link or file with a directory: the
        // link itself goes, and nothing is made through it.
        for bad in [&b"shadow/new/dirs"[..], b"rel-link/deeper", b"file/x"] {
            assert!(open_dir(r, bad, true).is_ok(), "{bad:?}");
            let first = bad.split(|&b| b == b'/').next().unwrap();
            let md =
                std::fs::symlink_metadata(root.join(std::str::from_utf8(first).unwrap())).unwrap();
            assert!(md.is_dir(), "{bad:?} replaced by a real directory");
        }
        assert!(
            std::fs::read_dir(&elsewhere).unwrap().next().is_none(),
            "nothing may be created through the link"
        );
        assert!(
            root.join("real/deeper").is_dir(),
            "the link's target is left alone"
        );
        assert!(open_dir(r, b"made/on/demand", true).is_ok());
        assert!(root.join("made/on/demand").is_dir());
        assert_eq!(
            open_dir(r, b"absent", false).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
