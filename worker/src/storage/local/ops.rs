//! The local tree as a `Filesystem` (`storage::filesystem`): blocking calls, each through the
//! store's directory handles, never through a symlink below the root.

use std::fs::{self, File};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use super::beneath::{self, fd};
use super::beneath::{remove_tree_at, umask};
use super::copy::{self, DirNow, Quirks, Staged, TempIn};
use super::leftover::{staging_name, temp_name};
use super::posix::{
    apply_link_meta, changed, chowned, kind_of, link_at, md5_reader, meta_of, mtime_times,
    read_exact_at, stamp, unchanged,
};
use super::LocalStore;
use crate::error::{Result, StoreError};
use crate::manifest::Kind;
use crate::storage::filesystem::{EntryCopy, Filesystem};
use crate::storage::Meta;
use crate::storage::Sweep;
use crate::xattrs::{self, Wanted};

impl Filesystem for LocalStore {
    fn path(&self, rel: &[u8]) -> PathBuf {
        self.full_path(rel)
    }

    fn lstat(&self, rel: &[u8]) -> std::io::Result<Option<fs::Metadata>> {
        let r = self
            .parent(rel, false)
            .and_then(|(dir, name)| beneath::lstat_at(fd(&dir), name));
        match r {
            Ok(md) => Ok(Some(md)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn open_file(&self, rel: &[u8]) -> std::io::Result<File> {
        let (dir, name) = self.parent(rel, false)?;
        match beneath::open_at(fd(&dir), name, libc::O_RDONLY, 0) {
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(std::io::Error::other(
                "is a symlink now, not a file (not followed)",
            )),
            r => Ok(File::from(r?)),
        }
    }

    fn readlink(&self, rel: &[u8]) -> std::io::Result<Vec<u8>> {
        let (dir, name) = self.parent(rel, false)?;
        beneath::readlink_at(fd(&dir), name)
    }

    fn md5(&self, rel: &[u8]) -> std::io::Result<[u8; 16]> {
        let (dir, name) = self.parent(rel, false)?;
        match beneath::open_at(fd(&dir), name, libc::O_RDONLY, 0) {
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Ok(super::posix::link_md5(
                &beneath::readlink_at(fd(&dir), name)?,
            )),
            r => md5_reader(File::from(r?)),
        }
    }

    fn read_small(&self, rel: &[u8], limit: u64) -> Result<Option<(Bytes, Meta)>> {
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
        // Read with the file, for a store that keeps no holes: a dense file costs no call.
        let sparse = crate::sparse::Sparse::of_file(&f, &md).map_err(&io)?;
        let data = crate::storage::bufpool::filled(md.len() as usize, |buf| {
            read_exact_at(&f, buf, 0).map_err(&io)
        })
        .map_err(changed)?;
        f.metadata()
            .and_then(|now| unchanged(&before, &now))
            .map_err(&io)
            .map_err(changed)?;
        Ok(Some((
            data,
            Meta {
                sparse,
                ..meta_of(&md)
            },
        )))
    }

    fn read_xattrs(&self, rel: &[u8], wanted: Wanted) -> std::io::Result<Option<xattrs::Attrs>> {
        let h = self.handle(rel)?;
        let r = xattrs::read(
            &xattrs::On::Follow(&xattrs::proc_path(std::os::fd::AsRawFd::as_raw_fd(&h))),
            wanted,
        );
        if let Ok(None) = r {
            self.xattrs.found_none();
        }
        r
    }

    fn no_xattrs_here(&self) -> bool {
        self.xattrs.none_here()
    }

    fn is_remote(&self) -> bool {
        *self
            .remote
            .get_or_init(|| super::posix::is_remote(&self.root))
    }

    fn fsync(&self) -> bool {
        self.fsync
    }

    fn make_dir(&self, rel: &[u8]) -> std::io::Result<bool> {
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

    fn remove_all(&self, rel: &[u8]) -> std::io::Result<()> {
        let (dir, name) = self.parent(rel, false)?;
        self.forget_dir(rel);
        match remove_tree_at(&dir, name) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    fn hard_link(&self, from: &[u8], to: &[u8], absent: bool) -> std::io::Result<()> {
        let (fdir, fname) = self.parent(from, false)?;
        let (tdir, tname) = self.parent(to, true)?;
        if absent {
            match link_at(fd(&fdir), fname, fd(&tdir), tname) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                r => return r,
            }
        }
        let tmp = temp_name(tname, "partial");
        super::leftover::clear_temp(&tdir, &tmp)?;
        link_at(fd(&fdir), fname, fd(&tdir), &tmp)?;
        let r = beneath::rename_at(fd(&tdir), &tmp, tname);
        if r.is_err() {
            let _ = beneath::unlink_at(fd(&tdir), &tmp, false);
        }
        r
    }

    fn set_meta(&self, rel: &[u8], kind: Kind, meta: &Meta) -> std::io::Result<bool> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let (dir, name) = self.parent(rel, false)?;
        let f = File::from(beneath::open_at(fd(&dir), name, libc::O_PATH, 0)?);
        let md = f.metadata()?;
        if kind_of(md.file_type()) != Some(kind) {
            return Err(std::io::Error::other(format!(
                "is no longer a {} (changed meanwhile)",
                kind.name()
            )));
        }
        // Only an owner that differs: a chown to the same owner still makes the kernel remove
        // the file's capability and set-id bits.
        let owner = match (meta.uid, meta.gid) {
            (Some(uid), Some(gid)) if (uid, gid) != (md.uid(), md.gid()) => Some((uid, gid)),
            _ => None,
        };
        if kind == Kind::Symlink {
            return apply_link_meta(
                &dir,
                name,
                &Meta {
                    mode: None,
                    uid: owner.map(|o| o.0),
                    gid: owner.map(|o| o.1),
                    ..meta.clone()
                },
            )
            .map(|_| owner.is_some());
        }
        // An `O_PATH` handle takes neither fchmod nor futimens: its /proc name does, and
        // names this very inode, whatever happens to the path meanwhile.
        let proc = crate::xattrs::proc_path(f.as_raw_fd());
        if let Some((uid, gid)) = owner {
            // SAFETY: valid descriptor and an empty C string with AT_EMPTY_PATH.
            chowned(unsafe {
                libc::fchownat(f.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH)
            })?;
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
        Ok(owner.is_some())
    }

    fn write_xattrs(
        &self,
        rel: &[u8],
        want: &xattrs::Attrs,
        wanted: Wanted,
    ) -> std::io::Result<xattrs::Refused> {
        let h = self.handle(rel)?;
        let on = xattrs::On::Follow(&xattrs::proc_path(std::os::fd::AsRawFd::as_raw_fd(&h)));
        match xattrs::read(&on, wanted)? {
            Some(now) => xattrs::apply(&on, want, Some(&now), wanted),
            // Holds none at all: every one wanted is refused.
            None => Ok(xattrs::Refused::all(want, wanted)),
        }
    }

    fn staging_dir(&self, k: usize) -> std::io::Result<Arc<OwnedFd>> {
        let name = staging_name(k);
        super::leftover::make_staging_dir(self.root_fd(true)?, &name)?;
        self.dir(&name, false)
    }

    fn remove_staging_dir(&self, k: usize) {
        let name = staging_name(k);
        self.forget_dir(&name);
        if let Some(root) = self.root_fd.get() {
            let _ = beneath::unlink_at(fd(root), &name, true);
        }
    }

    fn sync(&self) -> std::io::Result<()> {
        self.flush(std::time::Duration::ZERO)
    }

    fn inherits(&self, rel: &[u8]) -> std::io::Result<super::Inherits> {
        self.inherits_of(rel)
    }

    fn dir_device(&self, rel: &[u8]) -> std::io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        File::from(self.dir(rel, true)?.try_clone()?)
            .metadata()
            .map(|m| m.dev())
    }

    fn stage_file(
        &self,
        entry: &EntryCopy,
        quirks: &Quirks,
        absent: bool,
        temp_in: TempIn,
    ) -> std::io::Result<Staged> {
        copy::stage_file(entry, self, quirks, absent, temp_in)
    }

    fn copy_symlink(&self, entry: &EntryCopy) -> std::io::Result<xattrs::Refused> {
        copy::copy_symlink(entry, self)
    }

    fn make_node(&self, entry: &EntryCopy) -> std::io::Result<xattrs::Refused> {
        copy::make_node(entry, self)
    }

    fn make_symlink(&self, rel: &[u8], target: &[u8], meta: &Meta) -> std::io::Result<()> {
        copy::make_symlink(self, rel, target, meta)
    }

    fn finish_dir(&self, rel: &[u8], want: &Meta, known: Option<DirNow>) -> std::io::Result<()> {
        copy::finish_dir(self, rel, want, known)
    }

    fn finish_root(&self, want: &Meta) -> std::io::Result<()> {
        copy::finish_root(self, want)
    }

    fn default_mode(&self) -> u32 {
        0o666 & !umask()
    }

    fn looks_beat_listing(&self, dir: &[u8], wanted: usize) -> bool {
        // A directory's size in bytes over this errs low as a count of its entries on ext4,
        // XFS, btrfs and tmpfs alike (and on NFS exports of them): the estimate leans to listing.
        const BYTES_PER_ENTRY: u64 = 32;
        // A listed entry costs a stat, a look walks to its parent too; over NFS a look is a
        // round trip, and a READDIRPLUS page brings a hundred and more entries (tools/latencyfs:
        // ~150).
        const LISTED_PER_LOOK: u64 = 4;
        const LISTED_PER_LOOK_REMOTE: u64 = 200;
        // By name: a size is all it reads, and the listing that may follow opens the
        // directory safely itself.
        let md = fs::symlink_metadata(self.full_path(dir))
            .ok()
            .filter(fs::Metadata::is_dir);
        let entries = md.map_or(0, |md| md.len() / BYTES_PER_ENTRY);
        let wanted = wanted as u64;
        // Where even a local disk's looks lose, the filesystem is not asked what it is.
        wanted <= entries / LISTED_PER_LOOK
            && (!self.is_remote() || wanted <= entries / LISTED_PER_LOOK_REMOTE)
    }

    fn sparse_layout(&self, rel: &[u8]) -> std::io::Result<Option<crate::sparse::Sparse>> {
        // By name, as the upload that follows reads it.
        let f = File::open(self.full_path(rel))?;
        let md = f.metadata()?;
        crate::sparse::Sparse::of_file(&f, &md)
    }

    fn read_link(&self, rel: &[u8]) -> std::io::Result<(Vec<u8>, Meta)> {
        let md = self
            .lstat(rel)?
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
        if !md.file_type().is_symlink() {
            return Err(std::io::Error::other("no longer a symlink"));
        }
        Ok((self.readlink(rel)?, meta_of(&md)))
    }

    fn sweep_leftovers(&self, dry_run: bool) -> Sweep {
        self.sweep(dry_run)
    }
}
