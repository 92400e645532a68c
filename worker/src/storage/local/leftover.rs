//! ferry's own temp files, told from a user's files that merely look like them, and the
//! leftovers of killed or failed runs, removed by a later pass.
//!
//! A temp file of ferry's has its exact generated name (`temp_name`: `.ferry-<16 hex>.partial`
//! or `.journal`; `staging_name`: `.ferry-stage-<k>.partial`, a directory at the root) *and*
//! the mark ferry gives it in the very call that creates it: the sticky bit. Anything else of
//! that name (a directory, a symlink, a file without the mark) is the user's, and is listed,
//! copied and verified like any other entry.
//!
//! Why the sticky bit and not an extended attribute (`user.ferry.temp`): tmpfs before Linux 6.6,
//! NFS before 4.2 (and 4.2 servers without xattr support) and most FUSE servers hold no user
//! attributes, so the mark would be missing exactly where temp names are used most (no
//! `O_TMPFILE` there); and on NFS an attribute costs a round trip to set and another to take
//! off before the rename. The mode travels in the create request itself on every filesystem
//! (NFSv3 and v4, tmpfs, ext4, xfs, FUSE), its clearing is one chmod where the final mode
//! needs none (a SETATTR on NFS, the price of the rule), Linux gives S_ISVTX no meaning on a
//! regular file and lets its owner set it, and a file that both is named `.ferry-<16 hex>.partial`
//! and carries it is as good as never the user's. The mark goes when the file's final mode is set
//! (`clear_mark`), before its rename: a committed file never has it unless its source has.

use std::fs::Metadata;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime};

use super::beneath::{self, fd, remove_tree_at, umask};
use crate::storage::fnv1a;

/// The mark of a temp file (and staging directory) ferry made.
pub(super) const MARK: u32 = libc::S_ISVTX;

/// How long before this run began nothing may have written to a leftover (and nothing since)
/// for a pass to remove it: a file another process is staging (a batch waits about a second,
/// and then for its flush) is never taken for a leftover.
const QUIET: Duration = Duration::from_secs(5);

fn is_hex16(s: &[u8]) -> bool {
    s.len() == 16 && s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// Name of the temp file that stands in for the final name `name` until it is complete.
pub(crate) fn temp_name(name: &[u8], suffix: &str) -> Vec<u8> {
    format!(".ferry-{:016x}.{suffix}", fnv1a(name)).into_bytes()
}

/// The name of the `k`th staging directory at the root.
pub(super) fn staging_name(k: usize) -> Vec<u8> {
    format!(".ferry-stage-{k}.partial").into_bytes()
}

/// `temp_name`'s exact form.
fn is_temp_name(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b".ferry-") else {
        return false;
    };
    [&b".partial"[..], b".journal"]
        .iter()
        .any(|suffix| rest.strip_suffix(*suffix).is_some_and(is_hex16))
}

/// `staging_name`'s exact form.
fn is_staging_name(name: &[u8]) -> bool {
    name.strip_prefix(b".ferry-stage-")
        .and_then(|r| r.strip_suffix(b".partial"))
        .is_some_and(|k| !k.is_empty() && k.iter().all(u8::is_ascii_digit))
}

/// Whether `name` (in the root when `at_root`), whose `lstat` is `md`, is a temp file or
/// staging directory ferry made: its exact generated name, the right type, and the mark.
pub(super) fn is_own(name: &[u8], md: &Metadata, at_root: bool) -> bool {
    md.mode() & MARK != 0
        && ((md.is_file() && is_temp_name(name))
            || (at_root && md.is_dir() && is_staging_name(name)))
}

/// Opens `name` in `dir` with `flags` only if it is a temp file of ferry's (an earlier
/// attempt's partial file or journal); None for anything else, or nothing.
pub(super) fn open_own(dir: &OwnedFd, name: &[u8], flags: libc::c_int) -> Option<std::fs::File> {
    let f = std::fs::File::from(beneath::open_at(fd(dir), name, flags, 0).ok()?);
    f.metadata()
        .is_ok_and(|md| is_own(name, &md, false))
        .then_some(f)
}

/// Removes what stands at a temp name before ferry makes its own there: a leftover of ferry's
/// (or a link or node of a killed run's), never a user's regular file or directory, which is
/// refused by name.
pub(super) fn clear_temp(dir: &OwnedFd, name: &[u8]) -> std::io::Result<()> {
    let md = match beneath::lstat_at(fd(dir), name) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    };
    if (md.is_file() || md.is_dir()) && !is_own(name, &md, false) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "an entry not made by ferry stands at its temp name {}: rename or move it",
                String::from_utf8_lossy(name)
            ),
        ));
    }
    match beneath::unlink_at(fd(dir), name, false) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// Makes the staging directory `name` in the root, with ferry's mark; one of a killed run's
/// is taken over, a user's directory of that name never (refused: the run then stages
/// nothing there).
pub(super) fn make_staging_dir(root: &OwnedFd, name: &[u8]) -> std::io::Result<()> {
    match beneath::mkdir_new(fd(root), name) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return match beneath::lstat_at(fd(root), name)? {
                md if is_own(name, &md, true) => Ok(()),
                _ => Err(e),
            }
        }
        r => r?,
    }
    let c = std::ffi::CString::new(name)?;
    // SAFETY: a valid descriptor and C string; the directory was just made, by this process.
    let rc = unsafe { libc::fchmodat(root.as_raw_fd(), c.as_ptr(), (0o700 | MARK) as _, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Gives a temp file made with mode `mode` (and the mark) that mode alone, where nothing sets
/// its final mode before the rename.
pub(super) fn clear_mark(f: &std::fs::File, mode: u32) -> std::io::Result<()> {
    let mode = mode & 0o7777 & !umask() & !MARK;
    // SAFETY: a valid descriptor.
    if unsafe { libc::fchmod(f.as_raw_fd(), mode as libc::mode_t) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether a process holds the lock a download keeps on its journal while it runs (`lock`).
fn locked(dir: &OwnedFd, journal: &[u8]) -> bool {
    let Ok(j) = beneath::open_at(fd(dir), journal, libc::O_RDONLY, 0) else {
        return false;
    };
    // SAFETY: flock is plain data.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_WRLCK as _;
    l.l_whence = libc::SEEK_SET as _;
    // SAFETY: a valid descriptor and flock.
    let rc = unsafe { libc::fcntl(j.as_raw_fd(), libc::F_OFD_GETLK, &mut l) };
    rc == 0 && l.l_type != libc::F_UNLCK as libc::c_short
}

/// Takes the lock that tells a later pass this journal's download is alive (`locked`); held
/// until the journal's descriptor closes. Best effort: a filesystem without locks has the
/// quiet time alone to go by.
pub(super) fn lock(journal: &std::fs::File) {
    // SAFETY: flock is plain data.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = libc::F_WRLCK as _;
    l.l_whence = libc::SEEK_SET as _;
    // SAFETY: a valid descriptor and flock.
    let _ = unsafe { libc::fcntl(journal.as_raw_fd(), libc::F_OFD_SETLK, &l) };
}

/// The leftovers a store's listings met (paths from its root), which they leave out of what
/// they list: a pass that wrote into the store then removes those nothing wrote to meanwhile.
#[derive(Default)]
pub(super) struct Met(std::sync::Mutex<Vec<Vec<u8>>>);

impl Met {
    pub(super) fn note(&self, rel: Vec<u8>) {
        self.0.lock().unwrap().push(rel);
    }

    /// Everything met so far, each once, in path order.
    pub(super) fn take(&self) -> Vec<Vec<u8>> {
        let mut all = std::mem::take(&mut *self.0.lock().unwrap());
        all.sort();
        all.dedup();
        all
    }
}

/// What a pass does with a leftover it met.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Gone already (committed or removed meanwhile), or no longer ferry's.
    Gone,
    /// Written since shortly before this run began, or by a download still running: kept.
    Live,
    /// Nothing has written to it since well before this run began: removed.
    Stale,
}

/// Judges the leftover `name` in `dir` (in the root when `at_root`) for a run begun at
/// `started`.
pub(super) fn judge(dir: &OwnedFd, name: &[u8], at_root: bool, started: SystemTime) -> Verdict {
    let Ok(md) = beneath::lstat_at(fd(dir), name) else {
        return Verdict::Gone;
    };
    if !is_own(name, &md, at_root) {
        return Verdict::Gone;
    }
    let changed = SystemTime::UNIX_EPOCH
        + Duration::new(
            md.ctime().max(0) as u64,
            md.ctime_nsec().clamp(0, 999_999_999) as u32,
        );
    if changed >= started.checked_sub(QUIET).unwrap_or(SystemTime::UNIX_EPOCH) {
        return Verdict::Live;
    }
    let journal = journal_of(name);
    if journal.as_deref().is_some_and(|j| locked(dir, j)) {
        return Verdict::Live;
    }
    Verdict::Stale
}

/// The journal beside a partial file or journal `name` (the same hash).
fn journal_of(name: &[u8]) -> Option<Vec<u8>> {
    is_temp_name(name).then(|| [&name[..name.len() - b".partial".len()], b".journal"].concat())
}

/// Removes a stale leftover: a file, or a staging directory and what a killed run left in it.
pub(super) fn remove(dir: &OwnedFd, name: &[u8]) -> std::io::Result<()> {
    remove_tree_at(dir, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn only_the_generated_names_are_temp_names() {
        assert!(is_temp_name(&temp_name(b"some file", "partial")));
        assert!(is_temp_name(&temp_name(b"some file", "journal")));
        assert!(is_staging_name(&staging_name(3)));
        for name in [
            &b".ferry-data.partial"[..],
            b".ferry-notes.txt",
            b".ferry-0123456789ABCDEF.partial",
            b".ferry-0123456789abcdef0.partial",
            b".ferry-0123456789abcdef.partial.x",
            b".ferry-stage-.partial",
            b".ferry-stage-x.partial",
        ] {
            assert!(!is_temp_name(name) && !is_staging_name(name), "{name:?}");
        }
        assert_eq!(
            journal_of(b".ferry-0123456789abcdef.partial").unwrap(),
            b".ferry-0123456789abcdef.journal"
        );
    }

    #[test]
    fn only_a_marked_regular_file_of_that_name_is_ferrys() {
        use std::os::unix::fs::{symlink, OpenOptionsExt};
        let dir = tempfile::tempdir().unwrap();
        let name = temp_name(b"f", "partial");
        let at = |n: &[u8]| dir.path().join(std::ffi::OsStr::from_bytes(n));
        let lstat = |n: &[u8]| std::fs::symlink_metadata(at(n)).unwrap();
        std::fs::write(at(&name), b"user's").unwrap();
        assert!(!is_own(&name, &lstat(&name), false), "no mark");
        let root = beneath::open_root(dir.path()).unwrap();
        let refused = clear_temp(&root, &name).unwrap_err();
        assert!(
            refused.to_string().contains("not made by ferry"),
            "{refused}"
        );
        std::fs::remove_file(at(&name)).unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600 | MARK)
            .open(at(&name))
            .unwrap();
        assert!(is_own(&name, &lstat(&name), false));
        clear_mark(&f, 0o600).unwrap();
        assert!(!is_own(&name, &lstat(&name), false), "cleared");
        let other = temp_name(b"g", "partial");
        symlink("x", at(&other)).unwrap();
        assert!(!is_own(&other, &lstat(&other), false), "a symlink");
        let stage = staging_name(0);
        make_staging_dir(&root, &stage).unwrap();
        assert!(is_own(&stage, &lstat(&stage), true));
        assert!(!is_own(&stage, &lstat(&stage), false), "only at the root");
    }
}
