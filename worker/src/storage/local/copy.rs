//! local → local: the kernel's copy path (copy_file_range), ownership, mode, times and
//! symlinks kept as `rsync -lptgoD --numeric-ids` keeps them. Each file costs a handful of
//! system calls, and on NFS each metadata call is a round trip: this path decides small-file
//! speed, so it avoids every call it can.
//!
//! A file is first *staged* — written in full, metadata set — where no reader can take it for
//! the real thing, then *committed* under its final name:
//! - an unnamed `O_TMPFILE` linked in place with `linkat` when the final name is known to be
//!   free (local filesystems: no temp name to create and rename);
//! - else a temp name (`.ferry-<hash>.partial`), renamed over the final name (NFS, FUSE, and
//!   any name that already exists).
//!
//! Staging and committing are apart so that many staged files can share one flush to disk.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use super::beneath::{self, fd};
use super::leftover::temp_name;
use super::posix::{
    apply_link_meta, apply_meta_fd, chowned, create_temp, kind_of, link_in, meta_of, mtime_times,
    stamp, unchanged,
};
use super::{Inherits, LocalStore};
use crate::manifest::{Kind, Mtime};
use crate::preserve::Preserve;
use crate::sparse::Sparse;
use crate::storage::filesystem::{EntryCopy, Filesystem};
use crate::storage::Meta;
use crate::xattrs::{self, On, Refused, Wanted};

/// Process credentials and umask, read once: they decide which metadata calls are no-ops.
pub struct Identity {
    euid: u32,
    egid: u32,
    umask: u32,
}

impl Identity {
    /// The owner of an entry this process makes in a directory passing on `inherits`.
    pub fn made_owner(&self, inherits: Inherits) -> (u32, u32) {
        (self.euid, inherits.group.unwrap_or(self.egid))
    }

    pub fn current() -> Identity {
        // SAFETY: plain libc calls without pointers; umask is restored at once.
        unsafe {
            let m = libc::umask(0o022);
            libc::umask(m);
            Identity {
                euid: libc::geteuid(),
                egid: libc::getegid(),
                umask: m as u32,
            }
        }
    }
}

/// What this run has learnt the filesystems refuse, so each refusal costs one call, not one
/// per file.
#[derive(Default)]
pub struct Quirks {
    /// copy_file_range across filesystems (EXDEV) or where unsupported.
    no_copy_range: AtomicBool,
}

/// A file written in full, with its metadata, not yet under its final name.
pub struct Staged {
    dir: Arc<OwnedFd>,
    name: Vec<u8>,
    as_: StagedAs,
    pub bytes: u64,
    /// Attributes the destination would not hold.
    pub refused: Refused,
    /// On disk already (see `TempIn::Staging`): nothing to wait for before the commit.
    pub synced: bool,
}

enum StagedAs {
    /// Under a temp name in this directory (the final one, or a staging one), open, still
    /// carrying ferry's mark: its final mode, the last field, is set at the commit, just before
    /// the rename, so that a run killed with files staged leaves leftovers a later run knows
    /// for its own.
    Temp(Arc<OwnedFd>, Vec<u8>, File, u32),
    /// Open, without a name.
    Unnamed(File),
}

/// Where a temp name goes when there is no unnamed file: beside the final name, or in a
/// staging directory (one of a few the run's threads share). The second is for a directory
/// receiving many files on a network filesystem: a create in a directory holds that
/// directory's lock across its round trips, so a thousand creates in one directory wait on
/// each other whatever the depth; created elsewhere, only the rename into place holds it.
/// Those renames go one at a time, so a staged file that waited for a batch's flush would wait
/// again behind every other thread's, long enough for the client to forget its name (one more
/// LOOKUP under the lock): where the run is durable such a file is flushed on its own instead
/// (an fsync, a round trip outside the lock) and renamed at once.
pub enum TempIn<'a> {
    Final,
    Staging(&'a Arc<OwnedFd>),
}

/// Copies `size` bytes of `input` into `out`. With `sparse`, only the data the filesystem
/// says the source holds (SEEK_DATA/SEEK_HOLE, never a scan for zeros) is written, and the
/// file sized with ftruncate, so a hole at either end or between stays a hole.
fn copy_data(
    input: &File,
    out: &File,
    md: &std::fs::Metadata,
    quirks: &Quirks,
    sparse: bool,
) -> io::Result<()> {
    let size = md.len();
    // A dense file, the common case, costs no lseek (`Sparse::of_file`), which on NFS 4.2
    // and FUSE is a round trip each.
    let layout = if sparse {
        Sparse::of_file(input, md)?
    } else {
        None
    };
    let Some(Sparse::Extents(extents)) = layout else {
        return copy_segment(input, out, 0, size, quirks);
    };
    for (start, len) in extents {
        copy_segment(input, out, start, len, quirks)?;
    }
    // A trailing hole: the size without the bytes.
    out.set_len(size)
}

/// Copies `len` bytes at `offset` of `input` to the same offset of `out`: by the kernel where
/// it can, else by reads and writes.
fn copy_segment(
    input: &File,
    out: &File,
    offset: u64,
    len: u64,
    quirks: &Quirks,
) -> io::Result<()> {
    if quirks.no_copy_range.load(Relaxed) {
        return copy_rw(input, out, offset, len);
    }
    let (mut off_in, mut off_out) = (offset as libc::loff_t, offset as libc::loff_t);
    let end = offset + len;
    while (off_in as u64) < end {
        let left = end - off_in as u64;
        // SAFETY: valid fds and offsets the kernel advances.
        let n = unsafe {
            libc::copy_file_range(
                input.as_raw_fd(),
                &mut off_in,
                out.as_raw_fd(),
                &mut off_out,
                left as usize,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                // Across filesystems, or a kernel or filesystem without it: plain reads and
                // writes from where we are, for this file and every later one.
                Some(
                    libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP | libc::EPERM,
                ) => {
                    quirks.no_copy_range.store(true, Relaxed);
                    copy_rw(input, out, off_in as u64, left)
                }
                Some(libc::EINTR) => continue,
                _ => Err(e),
            };
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "file shrank while being copied",
            ));
        }
    }
    Ok(())
}

fn copy_rw(input: &File, out: &File, mut offset: u64, mut left: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; (left.min(1 << 20)) as usize];
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = input.read_at(&mut buf[..want], offset)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "file shrank while being copied",
            ));
        }
        out.write_all_at(&buf[..n], offset)?;
        offset += n as u64;
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

/// Writes one regular file where no reader takes it for complete. `absent`: the listing of
/// the destination showed the final name free, so the file may be linked into place
/// unnamed rather than renamed over it.
/// `keep`: what `--preserve` carries beyond the bytes (without `mode`, the file gets the
/// source's permission bits less the umask, as `cp` without `-p` gives it).
/// `src_xattrs`: the digest of the source's attributes where its listing read them (an entry
/// listed without any costs no call here).
pub(super) fn stage_file(
    entry: &EntryCopy,
    dst: &LocalStore,
    quirks: &Quirks,
    absent: bool,
    temp_in: TempIn,
) -> io::Result<Staged> {
    let EntryCopy {
        src,
        src_rel,
        dst_rel,
        src_xattrs,
        id,
        keep,
    } = *entry;
    let input = src.open_file(src_rel)?;
    let md = input.metadata()?;
    if !md.is_file() {
        return Err(io::Error::other("no longer a regular file"));
    }
    let before = stamp(&md);
    let meta = meta_of(&md);
    let mode = md.mode() & 0o7777;
    let (dir, name) = dst.parent(dst_rel, true)?;
    let synced = matches!(temp_in, TempIn::Staging(_)) && dst.fsync;
    // What the file gets from the directory it is made in (a staging directory is made in the
    // root, and has what the root passes on).
    let made_in = match temp_in {
        TempIn::Final => beneath::split(dst_rel).0,
        TempIn::Staging(_) => b"",
    };
    let inherits = dst.inherits_of(made_in)?;
    let (out, as_) = create_out(dst, &dir, name, mode, absent, temp_in)?;
    let mut refused = Refused::default();
    let named = as_.is_some();
    let written = (|| {
        copy_data(&input, &out, &md, quirks, keep.sparse)?;
        // Grown, shrunk or rewritten meanwhile: the copy matches no version of the file.
        unchanged(&before, &input.metadata()?)?;
        let chown = keep.owner && (md.uid(), md.gid()) != id.made_owner(inherits);
        if chown {
            // SAFETY: valid fd.
            chowned(unsafe { libc::fchown(out.as_raw_fd(), md.uid(), md.gid()) })?;
        }
        // After chown (which drops security.capability) and before chmod: an access ACL sets
        // the group bits from its mask, which a set-id bit then goes on top of.
        let wanted = Wanted::as_user(keep, id.euid);
        refused = set_first_attrs(&out, &input, src, src_xattrs, wanted, inherits)?;
        // chown clears set-id bits, the umask may have cleared others, and a default ACL of
        // the directory masks the mode instead of the umask.
        // A temp name's file keeps ferry's mark (`leftover`) until its commit sets its mode.
        if keep.mode
            && !named
            && (chown || mode & !0o777 != 0 || mode & id.umask != 0 || inherits.default_acl)
        {
            // SAFETY: valid fd.
            if unsafe { libc::fchmod(out.as_raw_fd(), mode as libc::mode_t) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if keep.times {
            set_times(&out, &meta)?;
        }
        if synced {
            out.sync_all()?;
        }
        Ok(())
    })();
    let staged = Staged {
        dir,
        name: name.to_vec(),
        as_: match as_ {
            Some((at, tmp)) => StagedAs::Temp(at, tmp, out, final_mode(mode, keep, id)),
            None => StagedAs::Unnamed(out),
        },
        bytes: md.len(),
        synced,
        refused,
    };
    match written {
        Ok(()) => Ok(staged),
        Err(e) => {
            staged.discard();
            Err(e)
        }
    }
}

/// A temp name, and the directory it is in.
type TempAt = (Arc<OwnedFd>, Vec<u8>);

/// The file a staged copy is written to: unnamed in the final directory where the final name
/// is free (`absent`) and the filesystem can, else under a temp name (returned with the
/// directory holding it). Created with its final permission bits where the umask allows,
/// saving a chmod.
fn create_out(
    dst: &LocalStore,
    dir: &Arc<OwnedFd>,
    name: &[u8],
    mode: u32,
    absent: bool,
    temp_in: TempIn,
) -> io::Result<(File, Option<TempAt>)> {
    if let Some(f) = absent
        .then(|| dst.open_unnamed(dir, mode & 0o777))
        .transpose()?
        .flatten()
    {
        return Ok((f, None));
    }
    let tmp = temp_name(name, "partial");
    let at = match temp_in {
        TempIn::Final => dir.clone(),
        TempIn::Staging(d) => d.clone(),
    };
    let out = create_temp(&at, &tmp, mode & 0o777)?;
    Ok((out, Some((at, tmp))))
}

/// The mode a file staged under a temp name gets at its commit: the source's where `--preserve`
/// keeps it, else its permission bits less the umask, as `cp` without `-p` gives it.
fn final_mode(mode: u32, keep: &Preserve, id: &Identity) -> u32 {
    match keep.mode {
        true => mode,
        false => mode & 0o777 & !id.umask,
    }
}

/// Gives a new file `out` the kept attributes of the source (`input`, `src_xattrs` as for
/// `stage_file`) and no others: where the directory it was made in has a default ACL, the
/// ACLs it inherited from it go where the source has none.
fn set_first_attrs(
    out: &File,
    input: &File,
    src: &dyn Filesystem,
    src_xattrs: Option<u64>,
    wanted: Wanted,
    inherits: Inherits,
) -> io::Result<Refused> {
    let inherited = match inherits.default_acl && wanted.acls {
        true => xattrs::read(
            &On::Fd(out.as_raw_fd()),
            Wanted {
                xattrs: false,
                ..wanted
            },
        )?,
        false => None,
    };
    let want =
        match wanted.any() && src_xattrs != Some(xattrs::empty_digest()) && !src.no_xattrs_here() {
            true => xattrs::read(&On::Fd(input.as_raw_fd()), wanted)?,
            false => None,
        };
    if want.is_none() && inherited.is_none() {
        return Ok(Refused::default());
    }
    xattrs::apply(
        &On::Fd(out.as_raw_fd()),
        &want.unwrap_or_default(),
        inherited.as_ref(),
        wanted,
    )
}

impl Staged {
    /// Puts the file under its final name. Its bytes must be on disk first where that is
    /// wanted (`synced`, or the caller flushes the filesystem once for a batch).
    pub fn commit(self) -> io::Result<()> {
        let Staged { dir, name, as_, .. } = self;
        match as_ {
            StagedAs::Temp(at, tmp, out, mode) => {
                // SAFETY: valid fd.
                let r = match unsafe { libc::fchmod(out.as_raw_fd(), mode as libc::mode_t) } {
                    0 => beneath::rename_between(fd(&at), &tmp, fd(&dir), &name),
                    _ => Err(io::Error::last_os_error()),
                };
                if r.is_err() {
                    let _ = beneath::unlink_at(fd(&at), &tmp, false);
                }
                r
            }
            StagedAs::Unnamed(f) => link_in(&f, &dir, &name),
        }
    }

    /// Gives up on the file: a temp name is removed; an unnamed file vanishes on close.
    pub fn discard(self) {
        if let StagedAs::Temp(at, tmp, ..) = &self.as_ {
            let _ = beneath::unlink_at(fd(at), tmp, false);
        }
    }
}

/// A symlink, with its owner, mtime and the attributes the kernel lets one hold (`trusted.*`
/// and `security.*`, as root; `src_xattrs` as for `stage_file`).
pub(super) fn copy_symlink(entry: &EntryCopy, dst: &LocalStore) -> io::Result<Refused> {
    let EntryCopy {
        src,
        src_rel,
        dst_rel,
        src_xattrs,
        id,
        keep,
    } = *entry;
    let md = src
        .lstat(src_rel)?
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    let target = src.readlink(src_rel)?;
    let (dir, name) = dst.parent(dst_rel, true)?;
    let meta = Meta {
        mode: None,
        ..meta_of(&md).kept(keep)
    };
    let wanted = Wanted::as_user(keep, id.euid);
    symlink_into_place(&dir, name, &target, |tmp| {
        let mut refused = Refused::default();
        // Owner first: chown drops security.capability, which a symlink may hold.
        apply_link_meta(
            &dir,
            tmp,
            &Meta {
                mtime: None,
                ..meta.clone()
            },
        )?;
        if wanted.any() && src_xattrs != Some(xattrs::empty_digest()) && !src.no_xattrs_here() {
            if let Some(want) = src.read_xattrs(src_rel, wanted)?.filter(|w| !w.is_empty()) {
                let link = beneath::open_at(fd(&dir), tmp, libc::O_PATH, 0)?;
                refused = xattrs::apply(
                    &On::Follow(&xattrs::proc_path(link.as_raw_fd())),
                    &want,
                    None,
                    wanted,
                )?;
            }
        }
        apply_link_meta(
            &dir,
            tmp,
            &Meta {
                mtime: meta.mtime,
                ..Meta::default()
            },
        )?;
        Ok(refused)
    })
}

/// Makes symlink `rel` pointing at `target` (as written), with the owner and mtime of `meta`.
pub(super) fn make_symlink(
    dst: &LocalStore,
    rel: &[u8],
    target: &[u8],
    meta: &Meta,
) -> io::Result<()> {
    let (dir, name) = dst.parent(rel, true)?;
    symlink_into_place(&dir, name, target, |tmp| {
        apply_link_meta(
            &dir,
            tmp,
            &Meta {
                mode: None,
                ..meta.clone()
            },
        )
    })
}

/// Makes a symlink to `target` under a temp name in `dir`, lets `finish` set what it keeps
/// (given the temp name), then renames it to `name`: a reader never sees a half-made link, and
/// a failure leaves nothing under the temp name.
fn symlink_into_place<T>(
    dir: &OwnedFd,
    name: &[u8],
    target: &[u8],
    finish: impl FnOnce(&[u8]) -> io::Result<T>,
) -> io::Result<T> {
    let tmp = temp_name(name, "partial");
    super::leftover::clear_temp(dir, &tmp)?;
    beneath::symlink_at(target, fd(dir), &tmp)?;
    let r = finish(&tmp).and_then(|v| beneath::rename_at(fd(dir), &tmp, name).map(|_| v));
    if r.is_err() {
        let _ = beneath::unlink_at(fd(dir), &tmp, false);
    }
    r
}

/// Makes a fifo or device node like the source's (its type, device number, owner, mode, times
/// and attributes) under a temp name, then renames it into place, as a file is committed:
/// whoever opens the name finds the finished node or the old entry. `src_xattrs` as for
/// `stage_file`.
pub(super) fn make_node(entry: &EntryCopy, dst: &LocalStore) -> io::Result<Refused> {
    let EntryCopy {
        src,
        src_rel,
        dst_rel,
        src_xattrs,
        id,
        keep,
    } = *entry;
    // The device number is not in the listing: the node's own lstat gives it, and the rest.
    let md = src
        .lstat(src_rel)?
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    if !matches!(
        kind_of(md.file_type()),
        Some(Kind::Fifo | Kind::CharDev | Kind::BlockDev)
    ) {
        return Err(io::Error::other("no longer a fifo or device node"));
    }
    let (dir, name) = dst.parent(dst_rel, true)?;
    let inherits = dst.inherits_of(beneath::split(dst_rel).0)?;
    let tmp = temp_name(name, "partial");
    super::leftover::clear_temp(&dir, &tmp)?;
    let mode = md.mode() & 0o7777;
    mknod_at(&dir, &tmp, &md)?;
    let made = (|| {
        let chown = keep.owner && (md.uid(), md.gid()) != id.made_owner(inherits);
        if chown {
            apply_link_meta(
                &dir,
                &tmp,
                &Meta {
                    uid: Some(md.uid()),
                    gid: Some(md.gid()),
                    ..Meta::default()
                },
            )?;
        }
        // Opened as a path, never as a fifo (which would wait for a writer) nor a device.
        let node = beneath::open_at(fd(&dir), &tmp, libc::O_PATH, 0)?;
        let on_node = xattrs::proc_path(node.as_raw_fd());
        let wanted = Wanted::as_user(keep, id.euid);
        let refused = set_node_attrs(&on_node, src, src_rel, src_xattrs, wanted, inherits)?;
        if keep.mode
            && (chown || mode & !0o777 != 0 || mode & id.umask != 0 || inherits.default_acl)
        {
            // SAFETY: a valid C string naming the node just made.
            if unsafe { libc::chmod(on_node.as_ptr(), mode as libc::mode_t) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if keep.times {
            apply_link_meta(
                &dir,
                &tmp,
                &Meta {
                    mtime: meta_of(&md).mtime,
                    ..Meta::default()
                },
            )?;
        }
        beneath::rename_at(fd(&dir), &tmp, name)?;
        Ok(refused)
    })();
    if made.is_err() {
        let _ = beneath::unlink_at(fd(&dir), &tmp, false);
    }
    made
}

/// Makes a node of the source's type, device number and permission bits (less the umask)
/// named `tmp` in `dir`.
fn mknod_at(dir: &OwnedFd, tmp: &[u8], md: &std::fs::Metadata) -> io::Result<()> {
    let c = std::ffi::CString::new(tmp.to_vec())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a valid directory descriptor and C string; mknodat creates, never follows.
    if unsafe {
        libc::mknodat(
            fd(dir).as_raw_fd(),
            c.as_ptr(),
            (md.mode() & libc::S_IFMT) | (md.mode() & 0o777),
            md.rdev(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Gives a node just made (`on_node`, its /proc path) the kept attributes of the source
/// (`src_xattrs` as for `stage_file`). As for a file: the ACLs inherited from a default ACL
/// go where the source has none.
fn set_node_attrs(
    on_node: &std::ffi::CString,
    src: &dyn Filesystem,
    src_rel: &[u8],
    src_xattrs: Option<u64>,
    wanted: Wanted,
    inherits: Inherits,
) -> io::Result<Refused> {
    let inherited = match inherits.default_acl && wanted.acls {
        true => xattrs::read(
            &On::Follow(on_node),
            Wanted {
                xattrs: false,
                ..wanted
            },
        )?,
        false => None,
    };
    let want = match wanted.any() && src_xattrs != Some(xattrs::empty_digest()) {
        true => src.read_xattrs(src_rel, wanted)?,
        false => None,
    };
    if want.is_none() && inherited.is_none() {
        return Ok(Refused::default());
    }
    xattrs::apply(
        &On::Follow(on_node),
        &want.unwrap_or_default(),
        inherited.as_ref(),
        wanted,
    )
}

/// A destination directory's metadata as known without asking: from the listing, or from
/// having made it this run. `mtime` is None when this run changed its entries (the mtime
/// moved).
pub struct DirNow {
    /// None where not known (a directory made under a default ACL has the mode it allows).
    pub mode: Option<u32>,
    pub owner: (u32, u32),
    pub mtime: Option<Mtime>,
}

impl DirNow {
    /// What `mkdir` gives a directory made by this process in a directory passing on `parent`.
    pub fn made(id: &Identity, parent: Inherits) -> DirNow {
        let setgid = if parent.setgid { libc::S_ISGID } else { 0 };
        DirNow {
            mode: (!parent.default_acl).then_some((0o777 & !id.umask) | setgid),
            owner: id.made_owner(parent),
            mtime: None,
        }
    }
}

/// Gives a directory the source's owner, mode and mtime, after its contents are written
/// (which would otherwise bump its mtime again), changing only what differs: an unchanged
/// tree costs no call here. What differs comes from `known` where given, else from a stat.
/// Nothing is done through a symlink standing where the directory should be: owner and times
/// are set on the name without following it, and the mode on the directory opened with
/// `O_NOFOLLOW`.
pub(super) fn finish_dir(
    dst: &LocalStore,
    rel: &[u8],
    want: &Meta,
    known: Option<DirNow>,
) -> io::Result<()> {
    let (parent, name) = dst.parent(rel, true)?;
    let refused = |e: io::Error| match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR) => io::Error::other(
            "a symlink or a file stands where the directory should be (not followed)",
        ),
        _ => e,
    };
    let todo = match known {
        Some(now) => to_change(now, want),
        None => {
            // Looked at before any mkdir: an exclusive create makes NFS and FUSE clients ask
            // the server about the name again, even when they know it.
            let md = match beneath::lstat_at(fd(&parent), name) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    beneath::mkdir_at(fd(&parent), name)?;
                    beneath::lstat_at(fd(&parent), name)
                }
                r => r,
            }
            .map_err(refused)?;
            if !md.is_dir() {
                return Err(refused(io::Error::from_raw_os_error(libc::ENOTDIR)));
            }
            let mtime = Some(Mtime {
                secs: md.mtime(),
                nanos: md.mtime_nsec() as u32,
            });
            to_change(
                DirNow {
                    mode: Some(md.mode() & 0o7777),
                    owner: (md.uid(), md.gid()),
                    mtime,
                },
                want,
            )
        }
    };
    let Some(todo) = todo else { return Ok(()) };
    if let Some((uid, gid)) = todo.owner {
        apply_link_meta(
            &parent,
            name,
            &Meta {
                uid: Some(uid),
                gid: Some(gid),
                ..Meta::default()
            },
        )?;
    }
    if let Some(mode) = todo.mode {
        let dir = File::from(
            beneath::open_at(fd(&parent), name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .map_err(refused)?,
        );
        apply_meta_fd(
            &dir,
            &Meta {
                mode: Some(mode),
                ..Meta::default()
            },
        )?;
    }
    if todo.mtime.is_some() {
        apply_link_meta(
            &parent,
            name,
            &Meta {
                mtime: todo.mtime,
                ..Meta::default()
            },
        )?;
    }
    Ok(())
}

/// The destination root: its metadata from the source root, as `cp -a` and `rsync -a src/`
/// give it.
pub(super) fn finish_root(dst: &LocalStore, want: &Meta) -> io::Result<()> {
    let root = File::from(dst.dir(b"", true)?.try_clone()?);
    let md = root.metadata()?;
    let now = DirNow {
        mode: Some(md.mode() & 0o7777),
        owner: (md.uid(), md.gid()),
        mtime: Some(Mtime {
            secs: md.mtime(),
            nanos: md.mtime_nsec() as u32,
        }),
    };
    match to_change(now, want) {
        Some(todo) => apply_meta_fd(&root, &Meta::posix(todo.mtime, todo.mode, todo.owner)),
        None => Ok(()),
    }
}

/// The part of `want` a directory in state `now` does not already have.
struct Change {
    owner: Option<(u32, u32)>,
    mode: Option<u32>,
    mtime: Option<Mtime>,
}

fn to_change(now: DirNow, want: &Meta) -> Option<Change> {
    let owner = match (want.uid, want.gid) {
        (Some(u), Some(g)) if (u, g) != now.owner => Some((u, g)),
        _ => None,
    };
    // chown clears set-id bits: the mode goes on again after it.
    let mode = want
        .mode
        .filter(|&m| Some(m) != now.mode || owner.is_some());
    let mtime = want.mtime.filter(|&m| now.mtime != Some(m));
    (owner.is_some() || mode.is_some() || mtime.is_some()).then_some(Change { owner, mode, mtime })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, LocalStore, LocalStore) {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("src/d")).unwrap();
        std::fs::write(t.path().join("src/d/f"), b"hello").unwrap();
        let src = LocalStore::new(t.path().join("src"), false);
        let dst = LocalStore::new(t.path().join("dst"), false);
        (t, src, dst)
    }

    #[test]
    fn a_staged_file_is_invisible_until_committed() {
        let (t, src, dst) = tree();
        let quirks = Quirks::default();
        for (absent, name) in [(true, "f1"), (false, "f2")] {
            let to = format!("d/{name}");
            let staged = stage_file(
                &EntryCopy {
                    src: &src,
                    src_rel: b"d/f",
                    dst_rel: to.as_bytes(),
                    src_xattrs: None,
                    id: &Identity::current(),
                    keep: &Preserve::ALL,
                },
                &dst,
                &quirks,
                absent,
                TempIn::Final,
            )
            .unwrap();
            assert!(!t.path().join("dst").join(&to).exists());
            staged.commit().unwrap();
            assert_eq!(
                std::fs::read(t.path().join("dst").join(&to)).unwrap(),
                b"hello"
            );
        }
        let mut names: Vec<_> = std::fs::read_dir(t.path().join("dst/d"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["f1", "f2"], "no temp name left behind");
    }

    #[test]
    fn an_unnamed_file_replaces_a_name_taken_since_the_listing() {
        let (t, src, dst) = tree();
        let staged = stage_file(
            &EntryCopy {
                src: &src,
                src_rel: b"d/f",
                dst_rel: b"d/f",
                src_xattrs: None,
                id: &Identity::current(),
                keep: &Preserve::ALL,
            },
            &dst,
            &Quirks::default(),
            true,
            TempIn::Final,
        )
        .unwrap();
        std::fs::write(t.path().join("dst/d/f"), b"someone else").unwrap();
        staged.commit().unwrap();
        assert_eq!(std::fs::read(t.path().join("dst/d/f")).unwrap(), b"hello");
    }

    #[test]
    fn a_discarded_file_leaves_nothing() {
        let (t, src, dst) = tree();
        for absent in [true, false] {
            let staged = stage_file(
                &EntryCopy {
                    src: &src,
                    src_rel: b"d/f",
                    dst_rel: b"d/f",
                    src_xattrs: None,
                    id: &Identity::current(),
                    keep: &Preserve::ALL,
                },
                &dst,
                &Quirks::default(),
                absent,
                TempIn::Final,
            )
            .unwrap();
            staged.discard();
            assert_eq!(
                std::fs::read_dir(t.path().join("dst/d")).unwrap().count(),
                0
            );
        }
    }

    #[test]
    fn finishing_a_directory_changes_only_what_differs() {
        let (t, src, dst) = tree();
        let md = std::fs::metadata(t.path().join("src/d")).unwrap();
        let meta = meta_of(&md);
        finish_dir(&dst, b"d", &meta, None).unwrap();
        let got = std::fs::metadata(t.path().join("dst/d")).unwrap();
        assert_eq!(
            (got.mtime(), got.mtime_nsec(), got.mode()),
            (md.mtime(), md.mtime_nsec(), md.mode())
        );
        let now = DirNow {
            mode: Some(got.mode() & 0o7777),
            owner: (got.uid(), got.gid()),
            mtime: Some(Mtime {
                secs: got.mtime(),
                nanos: got.mtime_nsec() as u32,
            }),
        };
        assert!(to_change(now, &meta).is_none());
        let _ = src;
    }
}
