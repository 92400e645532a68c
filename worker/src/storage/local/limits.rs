//! The open-files limit, and the share of it the directory caches may hold.

use std::sync::OnceLock;

/// Directory handles kept open at most by one store; the cache starts over when full. Each is
/// a descriptor, and a tree may hold millions of directories: an eighth of the open-files
/// limit each, so both sides of a copy and the files in flight fit under it.
pub(super) fn dir_cache_max() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| (open_files_limit() / 8).clamp(16, 4096) as usize)
}

/// The soft limit on open files (after `raise_open_files_limit`).
pub fn open_files_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
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
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid rlimit, read then written back with only the soft limit raised.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}
