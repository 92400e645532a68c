//! Extended attributes and POSIX ACLs between local trees. ACLs are attributes too
//! (`system.posix_acl_access`, `system.posix_acl_default`): one path carries both, and only
//! the names `--preserve` keeps are read, compared or written.
//!
//! A listing asks each entry for its names (one `llistxattr`) and reads the values only of the
//! names present, so an entry without attributes costs one call; a filesystem that has none at
//! all (EOPNOTSUPP) is asked once per run.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

use crate::preserve::Preserve;

/// Which attributes are carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    /// `user.*`, and `trusted.*`/`security.*` where `privileged`.
    pub xattrs: bool,
    /// `system.posix_acl_access` and `system.posix_acl_default`.
    pub acls: bool,
    /// Root: the kernel lets only CAP_SYS_ADMIN read and write `trusted.*`, and a copy of
    /// `security.*` written as anyone else would be refused or mean something else.
    pub privileged: bool,
}

/// What an attribute's name makes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Xattr,
    Acl,
}

impl Class {
    /// How `Stats::not_kept` counts an attribute of this class that was refused.
    pub fn not_kept(self) -> &'static str {
        match self {
            Class::Xattr => "xattrs",
            Class::Acl => "acls",
        }
    }
}

impl Wanted {
    pub const NONE: Wanted = Wanted {
        xattrs: false,
        acls: false,
        privileged: false,
    };

    pub fn of(p: &Preserve) -> Wanted {
        // SAFETY: no arguments, no failure.
        Wanted::as_user(p, unsafe { libc::geteuid() })
    }

    /// What `p` keeps, for a process of effective user `euid` (`trusted.*` and `security.*`
    /// only as root).
    pub fn as_user(p: &Preserve, euid: u32) -> Wanted {
        Wanted {
            xattrs: p.xattrs,
            acls: p.acls,
            privileged: euid == 0,
        }
    }

    pub fn any(self) -> bool {
        self.xattrs || self.acls
    }

    /// Whether `name` is carried, and as what.
    pub fn keeps(self, name: &[u8]) -> Option<Class> {
        if name == b"system.posix_acl_access" || name == b"system.posix_acl_default" {
            return self.acls.then_some(Class::Acl);
        }
        let kept = name.starts_with(b"user.")
            || (self.privileged
                && (name.starts_with(b"trusted.") || name.starts_with(b"security.")));
        (self.xattrs && kept).then_some(Class::Xattr)
    }
}

/// Where the attributes are read or written.
pub enum On<'a> {
    /// An open file or directory (not `O_PATH`).
    Fd(RawFd),
    /// A path whose last component is not followed (a listing's full path).
    Path(&'a CString),
    /// A path whose last component is followed: `/proc/self/fd/N` of an `O_PATH` handle,
    /// which names that very inode, a symlink's own included.
    Follow(&'a CString),
}

fn check(rc: isize) -> io::Result<usize> {
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as usize)
}

/// Calls `f` with a buffer until the answer fits: the size asked for first, then what the
/// kernel says it needs (ERANGE means it grew meanwhile).
fn sized(mut f: impl FnMut(&mut [u8]) -> io::Result<usize>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    loop {
        match f(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => {
                let need = f(&mut [])?;
                buf.resize(need.max(buf.len() * 2), 0);
            }
            Err(e) => return Err(e),
        }
    }
}

fn list_raw(on: &On) -> io::Result<Vec<u8>> {
    sized(|buf| {
        let (p, n) = (buf.as_mut_ptr() as *mut libc::c_char, buf.len());
        // SAFETY: valid fd or C string, and a buffer of n bytes (null with n = 0 asks the size).
        check(unsafe {
            match on {
                On::Fd(fd) => {
                    libc::flistxattr(*fd, if n == 0 { std::ptr::null_mut() } else { p }, n)
                }
                On::Path(c) => {
                    libc::llistxattr(c.as_ptr(), if n == 0 { std::ptr::null_mut() } else { p }, n)
                }
                On::Follow(c) => {
                    libc::listxattr(c.as_ptr(), if n == 0 { std::ptr::null_mut() } else { p }, n)
                }
            }
        })
    })
}

fn get(on: &On, name: &CString) -> io::Result<Vec<u8>> {
    sized(|buf| {
        let (p, n) = (buf.as_mut_ptr() as *mut libc::c_void, buf.len());
        let p = if n == 0 { std::ptr::null_mut() } else { p };
        // SAFETY: as in list_raw.
        check(unsafe {
            match on {
                On::Fd(fd) => libc::fgetxattr(*fd, name.as_ptr(), p, n),
                On::Path(c) => libc::lgetxattr(c.as_ptr(), name.as_ptr(), p, n),
                On::Follow(c) => libc::getxattr(c.as_ptr(), name.as_ptr(), p, n),
            }
        })
    })
}

fn set(on: &On, name: &CString, value: &[u8]) -> io::Result<()> {
    let (v, n) = (value.as_ptr() as *const libc::c_void, value.len());
    // SAFETY: valid fd or C strings, and a value of n bytes.
    check(unsafe {
        (match on {
            On::Fd(fd) => libc::fsetxattr(*fd, name.as_ptr(), v, n, 0),
            On::Path(c) => libc::lsetxattr(c.as_ptr(), name.as_ptr(), v, n, 0),
            On::Follow(c) => libc::setxattr(c.as_ptr(), name.as_ptr(), v, n, 0),
        }) as isize
    })
    .map(drop)
}

fn remove(on: &On, name: &CString) -> io::Result<()> {
    // SAFETY: valid fd or C strings.
    check(unsafe {
        (match on {
            On::Fd(fd) => libc::fremovexattr(*fd, name.as_ptr()),
            On::Path(c) => libc::lremovexattr(c.as_ptr(), name.as_ptr()),
            On::Follow(c) => libc::removexattr(c.as_ptr(), name.as_ptr()),
        }) as isize
    })
    .map(drop)
}

/// Whether the entry holds attribute `name`; false where the filesystem holds none.
pub fn present(on: &On, name: &std::ffi::CStr) -> io::Result<bool> {
    // SAFETY: valid fd or C strings; a null buffer of size 0 asks for the size only.
    let rc = unsafe {
        let none = std::ptr::null_mut();
        match on {
            On::Fd(fd) => libc::fgetxattr(*fd, name.as_ptr(), none, 0),
            On::Path(c) => libc::lgetxattr(c.as_ptr(), name.as_ptr(), none, 0),
            On::Follow(c) => libc::getxattr(c.as_ptr(), name.as_ptr(), none, 0),
        }
    };
    match check(rc) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) || unsupported(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The filesystem (or this kind of inode) holds no attributes of this kind.
pub fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS))
}

/// The kept attributes of one entry, sorted by name; None where the filesystem has none.
pub type Attrs = Vec<(CString, Vec<u8>)>;

pub fn read(on: &On, wanted: Wanted) -> io::Result<Option<Attrs>> {
    let names = match list_raw(on) {
        Ok(n) => n,
        Err(e) if unsupported(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for name in names
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty() && wanted.keeps(n).is_some())
    {
        let name = CString::new(name).expect("split at NUL");
        match get(on, &name) {
            Ok(v) => out.push((name, v)),
            // Removed between the two calls: it is not there.
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
            Err(e) => return Err(e),
        }
    }
    out.sort();
    Ok(Some(out))
}

/// The attribute holding a file capability, which the kernel removes on every chown of the file
/// (and on a write to it).
pub const CAPABILITY: &[u8] = b"security.capability";

/// What `Entry.xattrs` holds: a digest of the kept names and values, the same on two entries
/// exactly when their attributes are (an entry without any has the digest of nothing). Its
/// lowest bit says whether the entry holds a capability (`holds_capability`), so that what a
/// chown takes away is put back where the listing says there is one, and nowhere else.
pub fn digest(attrs: &Attrs) -> u64 {
    let mut h = crate::hash::Md5::new();
    for (name, value) in attrs {
        let name = name.as_bytes();
        h.update(&(name.len() as u64).to_le_bytes());
        h.update(name);
        h.update(&(value.len() as u64).to_le_bytes());
        h.update(value);
    }
    let d = u64::from_le_bytes(h.finalize()[..8].try_into().expect("8 bytes"));
    let cap = attrs.iter().any(|(name, _)| name.as_bytes() == CAPABILITY);
    (d & !1) | cap as u64
}

/// Whether an entry of digest `d` holds a capability (`security.capability`).
pub fn holds_capability(d: u64) -> bool {
    d & 1 == 1
}

/// The digest of an entry without attributes.
pub fn empty_digest() -> u64 {
    static EMPTY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *EMPTY.get_or_init(|| digest(&Vec::new()))
}

/// Per class, whether the destination refused an attribute of it (each counted once an entry).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub xattrs: bool,
    pub acls: bool,
}

impl Refused {
    fn note(&mut self, class: Class) {
        match class {
            Class::Xattr => self.xattrs = true,
            Class::Acl => self.acls = true,
        }
    }

    /// Every class `want` holds, refused: a destination without attributes.
    pub fn all(want: &Attrs, wanted: Wanted) -> Refused {
        let mut r = Refused::default();
        for (name, _) in want {
            if let Some(class) = wanted.keeps(name.as_bytes()) {
                r.note(class);
            }
        }
        r
    }

    /// The kinds refused, for `Stats::not_kept`.
    pub fn kinds(self) -> impl Iterator<Item = &'static str> {
        [(self.xattrs, Class::Xattr), (self.acls, Class::Acl)]
            .into_iter()
            .filter(|(r, _)| *r)
            .map(|(_, c)| c.not_kept())
    }
}

/// Makes the kept attributes of `to` equal to `want`: sets those missing or different and, when
/// `now` (what `to` holds, read by the caller) is given, removes those `want` lacks. A
/// destination that cannot hold one is noted in the answer, never an error: the entry is written
/// without it. It cannot when the filesystem has no support (or not on this kind of inode), may
/// not be asked (EPERM), or has no room for this value: ENOSPC and E2BIG where a value outgrows
/// what one inode holds (a 60 KiB value on ext4 without `ea_inode`), ERANGE past a name's or
/// value's limit.
pub fn apply(to: &On, want: &Attrs, now: Option<&Attrs>, wanted: Wanted) -> io::Result<Refused> {
    let mut refused = Refused::default();
    let refusal = |e: &io::Error| {
        unsupported(e)
            || matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::ENOSPC | libc::E2BIG | libc::ERANGE)
            )
    };
    for (name, value) in want {
        if now.is_some_and(|n| n.iter().any(|(k, v)| k == name && v == value)) {
            continue;
        }
        match set(to, name, value) {
            Ok(()) => {}
            Err(e) if refusal(&e) => {
                refused.note(wanted.keeps(name.as_bytes()).unwrap_or(Class::Xattr))
            }
            Err(e) => return Err(e),
        }
    }
    for (name, _) in now.into_iter().flatten() {
        if want.iter().any(|(k, _)| k == name) {
            continue;
        }
        match remove(to, name) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
            Err(e) if refusal(&e) => {
                refused.note(wanted.keeps(name.as_bytes()).unwrap_or(Class::Xattr))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(refused)
}

/// A path as a C string, for the calls above.
pub fn c_path(p: &std::path::Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// `/proc/self/fd/N`: the inode an `O_PATH` handle holds, by a name that follows to it.
pub fn proc_path(fd: RawFd) -> CString {
    CString::new(format!("/proc/self/fd/{fd}")).expect("no NUL")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_kept_follow_the_choice() {
        let all = Wanted {
            xattrs: true,
            acls: true,
            privileged: false,
        };
        assert_eq!(all.keeps(b"user.x"), Some(Class::Xattr));
        assert_eq!(all.keeps(b"trusted.x"), None, "not as an ordinary user");
        assert_eq!(
            Wanted {
                privileged: true,
                ..all
            }
            .keeps(b"security.capability"),
            Some(Class::Xattr)
        );
        assert_eq!(all.keeps(b"system.posix_acl_default"), Some(Class::Acl));
        assert_eq!(all.keeps(b"system.nfs4_acl"), None);
        assert_eq!(
            Wanted { acls: false, ..all }.keeps(b"system.posix_acl_access"),
            None
        );
        assert_eq!(
            Wanted {
                xattrs: false,
                ..all
            }
            .keeps(b"user.x"),
            None
        );
    }

    #[test]
    fn the_digest_tells_names_and_values_apart() {
        let a = |n: &str, v: &[u8]| (CString::new(n).unwrap(), v.to_vec());
        let d = digest(&vec![a("user.a", b"bc")]);
        assert_ne!(d, digest(&vec![a("user.ab", b"c")]));
        assert_ne!(d, digest(&vec![a("user.a", b"bd")]));
        assert_ne!(d, empty_digest());
        assert_eq!(d, digest(&vec![a("user.a", b"bc")]));
        assert!(!holds_capability(d) && !holds_capability(empty_digest()));
        assert!(holds_capability(digest(&vec![
            a("security.capability", b"\x01"),
            a("user.a", b"bc")
        ])));
    }
}
