//! What a new entry takes from the directory it is made in, besides what it is made with: the
//! directory's group (a set-gid directory, or any directory of a `grpid` mount) and its default
//! ACL (as the entry's access ACL, a directory's default ACL too, and the mode masked by it
//! instead of by the umask). A first write must undo what the source does not have, so it
//! needs to know; each directory is asked once a run (an fstat and a getxattr), never each file.

use std::collections::HashSet;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use crate::xattrs;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inherits {
    /// The group a new entry gets where it is the directory's, not the process's.
    pub group: Option<u32>,
    /// A new directory gets the set-gid bit (the directory has it).
    pub setgid: bool,
    /// The directory has a default ACL.
    pub default_acl: bool,
}

impl Inherits {
    /// What directory `dir` passes on. `no_xattrs`: the filesystem is known to hold none.
    pub(super) fn of(dir: &OwnedFd, no_xattrs: bool) -> std::io::Result<Inherits> {
        let md = File::from(dir.try_clone()?).metadata()?;
        let setgid = md.mode() & libc::S_ISGID != 0;
        let default_acl = !no_xattrs
            && xattrs::present(
                &xattrs::On::Follow(&xattrs::proc_path(dir.as_raw_fd())),
                c"system.posix_acl_default",
            )?;
        Ok(Inherits {
            group: (setgid || grpid_devices().contains(&md.dev())).then_some(md.gid()),
            setgid,
            default_acl,
        })
    }
}

/// The devices mounted with `grpid` (or its old name `bsdgroups`: ext2/3/4, XFS), where every
/// new entry gets its directory's group; read once a process from /proc/self/mountinfo.
fn grpid_devices() -> &'static HashSet<u64> {
    static DEVS: std::sync::OnceLock<HashSet<u64>> = std::sync::OnceLock::new();
    DEVS.get_or_init(|| {
        std::fs::read_to_string("/proc/self/mountinfo")
            .map(|t| t.lines().filter_map(grpid_device).collect())
            .unwrap_or_default()
    })
}

/// The device of one mountinfo line, if its superblock options hold `grpid`: `36 35 98:0 /
/// /mnt rw - ext4 /dev/sda1 rw,grpid`.
fn grpid_device(line: &str) -> Option<u64> {
    let (mount, sb) = line.split_once(" - ")?;
    let options = sb.split(' ').nth(2)?;
    if !options.split(',').any(|o| o == "grpid" || o == "bsdgroups") {
        return None;
    }
    let (major, minor) = mount.split(' ').nth(2)?.split_once(':')?;
    Some(libc::makedev(major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpid_mounts_are_found_by_their_superblock_options() {
        assert_eq!(
            grpid_device("42 27 7:0 / /tmp/tm rw,relatime - ext4 /dev/loop0 rw,grpid"),
            Some(libc::makedev(7, 0))
        );
        assert_eq!(
            grpid_device("42 27 8:1 / /x rw shared:1 - xfs /dev/sda1 rw,bsdgroups,noquota"),
            Some(libc::makedev(8, 1))
        );
        assert_eq!(
            grpid_device("42 27 8:1 / /grpid rw - ext4 /dev/sda1 rw,nogrpid"),
            None
        );
    }

    #[test]
    fn a_set_gid_directory_passes_its_group_on() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let open = |p: &std::path::Path| OwnedFd::from(File::open(p).unwrap());
        let plain = Inherits::of(&open(t.path()), false).unwrap();
        assert!(!plain.setgid && !plain.default_acl);
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o2755)).unwrap();
        let gid = std::fs::metadata(t.path()).unwrap().gid();
        let sgid = Inherits::of(&open(t.path()), false).unwrap();
        assert_eq!((sgid.group, sgid.setgid), (Some(gid), true));
    }
}
