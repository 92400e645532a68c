//! `Filesystem`: what only a filesystem can do — hard links, fifos and devices, extended
//! attributes by handle, ownership, holes, staging and committing files behind one flush —
//! beside the `Store` trait every backend has. A store that is a filesystem offers it
//! (`Store::posix`); the local → local engine is built with both ends' when both have one,
//! and drives them through this trait alone. Each method is blocking (a system call or a
//! few): callers run it on a thread that may block (`on_thread`).

use std::fs::{self, File};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use super::{blocking, Meta, Sweep};
use crate::error::{Result, StoreError};
use crate::manifest::Kind;
use crate::preserve::Preserve;
use crate::sparse::Sparse;
use crate::xattrs::{self, Wanted};

/// The words of the trait: what a staged file, a directory's known state and the process's
/// identity are to the engine, and the mapping from `stat` to a manifest entry. Defined with
/// the one implementation, opaque where they hold its handles.
pub(crate) use super::local::{
    entry_of, entry_with_target, is_remote, meta_of, open_files_limit, raise_open_files_limit,
    temp_name, DirNow, Identity, Inherits, Quirks, Staged, TempIn,
};

/// An entry of another tree to make in this one: where it is there, where it goes here, and
/// what of it to keep. `src_xattrs`: the digest of its attributes where its listing read them
/// (an entry listed without any costs no call).
#[derive(Clone, Copy)]
pub struct EntryCopy<'a> {
    pub src: &'a dyn Filesystem,
    pub src_rel: &'a [u8],
    pub dst_rel: &'a [u8],
    pub src_xattrs: Option<u64>,
    pub id: &'a Identity,
    pub keep: &'a Preserve,
}

/// A local tree as the local → local engine works on it: by relative path, never through a
/// symlink below the root. Its operations on two trees take the other one as `src`.
pub trait Filesystem: Send + Sync {
    /// Where `rel` is, for messages.
    fn path(&self, rel: &[u8]) -> PathBuf;
    /// `lstat` of `rel`; None when it (or a directory on its way) does not exist.
    fn lstat(&self, rel: &[u8]) -> std::io::Result<Option<fs::Metadata>>;
    /// Opens a regular file for reading; a symlink in its place is refused, not followed.
    fn open_file(&self, rel: &[u8]) -> std::io::Result<File>;
    /// The target of symlink `rel`, as written.
    fn readlink(&self, rel: &[u8]) -> std::io::Result<Vec<u8>>;
    /// The MD5 of regular file `rel`'s bytes; of a symlink, of its target (`posix::link_md5`).
    fn md5(&self, rel: &[u8]) -> std::io::Result<[u8; 16]>;
    /// A whole small file with one open: its bytes and metadata (its data extents too, where it
    /// has holes), the same before and after the read (else it changed while read). None when
    /// it is now larger than `limit`.
    fn read_small(&self, rel: &[u8], limit: u64) -> Result<Option<(Bytes, Meta)>>;
    /// The kept attributes of `rel` (`root` for the root itself), never through a symlink
    /// below the root; None where the filesystem holds none.
    fn read_xattrs(&self, rel: &[u8], wanted: Wanted) -> std::io::Result<Option<xattrs::Attrs>>;
    /// This run learnt that the filesystem holds no extended attributes at all.
    fn no_xattrs_here(&self) -> bool;
    /// Whether the root sits on a filesystem where each metadata call is a network round trip
    /// (NFS, SMB, Lustre, FUSE, ...): such a tree needs many more calls in flight to hide the
    /// latency. A root that does not exist yet is judged by its nearest existing parent.
    fn is_remote(&self) -> bool;
    /// Whether files are flushed to disk before they get their name (not `--no-fsync`).
    fn fsync(&self) -> bool;
    /// Makes directory `rel`, whose parent exists or is made: one exclusive create, where
    /// opening it with its parents made would first look for it (a wasted round trip for a directory the
    /// listing showed missing). True if this call made it; an existing one is fine.
    fn make_dir(&self, rel: &[u8]) -> std::io::Result<bool>;
    /// Removes `rel` and, for a directory, everything below it, never following a symlink.
    fn remove_all(&self, rel: &[u8]) -> std::io::Result<()>;
    /// Gives the file at `from` a second name, `to` (made with its parents as needed), never
    /// following a symlink. `absent`: the listing showed `to` free; otherwise, or where it was
    /// taken meanwhile, the link is made under a temp name and renamed over it, so `to` is
    /// never missing.
    fn hard_link(&self, from: &[u8], to: &[u8], absent: bool) -> std::io::Result<()>;
    /// Sets owner, mode and times of `rel` in place (a symlink's own owner and times, never its
    /// target's), checking first that it still is of kind `kind`. True where the owner changed:
    /// the kernel has then removed the file's capability, if it had one.
    fn set_meta(&self, rel: &[u8], kind: Kind, meta: &Meta) -> std::io::Result<bool>;
    /// Makes the kept attributes of `rel` those of `want`, setting the new and removing the
    /// gone.
    fn write_xattrs(
        &self,
        rel: &[u8],
        want: &xattrs::Attrs,
        wanted: Wanted,
    ) -> std::io::Result<xattrs::Refused>;
    /// A staging directory for temp files (see `copy::TempIn`), one of the few a run's
    /// threads share: under the root, named so that listings skip it. The names are the same in
    /// every run and every process: a temp name is unique to its final name, so processes
    /// copying disjoint parts of a tree may share them, and a re-run finds (and replaces) what
    /// a killed one left there.
    fn staging_dir(&self, k: usize) -> std::io::Result<Arc<OwnedFd>>;
    /// Removes a staging directory once the run is done (left alone while another process
    /// still has a file in it).
    fn remove_staging_dir(&self, k: usize);
    /// Puts on disk everything written to this filesystem before the call, with a `syncfs`
    /// (not an fsync per file or directory) that is shared: a caller joins the next flush to
    /// start, and the threads waiting with it return together when it ends.
    fn sync(&self) -> std::io::Result<()>;
    /// What directory `rel` (made, with its parents, where missing) passes on to the entries
    /// made in it (`Inherits`).
    fn inherits(&self, rel: &[u8]) -> std::io::Result<Inherits>;
    /// The device directory `rel` (made, with its parents, where missing) is on.
    fn dir_device(&self, rel: &[u8]) -> std::io::Result<u64>;
    /// Stages a file of another tree here (`copy::stage_file`).
    fn stage_file(
        &self,
        entry: &EntryCopy,
        quirks: &Quirks,
        absent: bool,
        temp_in: TempIn,
    ) -> std::io::Result<Staged>;
    /// Copies a symlink of another tree here (`copy::copy_symlink`).
    fn copy_symlink(&self, entry: &EntryCopy) -> std::io::Result<xattrs::Refused>;
    /// Makes here a fifo or device node like one of another tree (`copy::make_node`).
    fn make_node(&self, entry: &EntryCopy) -> std::io::Result<xattrs::Refused>;
    /// Makes symlink `rel` pointing at `target` (`copy::make_symlink`).
    fn make_symlink(&self, rel: &[u8], target: &[u8], meta: &Meta) -> std::io::Result<()>;
    /// Gives directory `rel` the metadata `want` (`copy::finish_dir`).
    fn finish_dir(&self, rel: &[u8], want: &Meta, known: Option<DirNow>) -> std::io::Result<()>;
    /// Gives the root the metadata `want` (`copy::finish_root`).
    fn finish_root(&self, want: &Meta) -> std::io::Result<()>;
    /// The mode a file written without one gets: 0666 less the umask.
    fn default_mode(&self) -> u32;
    /// Whether looking up `wanted` paths of directory `dir` one by one costs less than listing
    /// it (`storage::index_paths`), judged without listing it.
    fn looks_beat_listing(&self, dir: &[u8], wanted: usize) -> bool;
    /// Where file `rel` holds data, if it has holes; None for a dense one. An open and an
    /// fstat; SEEK_DATA/SEEK_HOLE only for a sparse file.
    fn sparse_layout(&self, rel: &[u8]) -> std::io::Result<Option<Sparse>>;
    /// Symlink `rel`'s target and metadata, checked still to be a symlink.
    fn read_link(&self, rel: &[u8]) -> std::io::Result<(Vec<u8>, Meta)>;
    /// Removes ferry's own temp files of earlier runs that this tree's listings met and nothing
    /// has written to since well before this run began (a killed download whose source went,
    /// say); with `dry_run`, only names them.
    fn sweep_leftovers(&self, dry_run: bool) -> Sweep;
}

/// An error of `fs` at `rel`, named by its path (as the store's own errors are).
pub fn io_err<'a>(
    fs: &'a dyn Filesystem,
    rel: &'a [u8],
) -> impl Fn(std::io::Error) -> StoreError + 'a {
    move |e| StoreError::io(fs.path(rel).display().to_string(), e)
}

/// Runs `f` on `fs` on a thread that may block, its io error named by `rel`'s path.
pub async fn on_thread<T: Send + 'static>(
    fs: &Arc<dyn Filesystem>,
    rel: &[u8],
    f: impl FnOnce(&dyn Filesystem, &[u8]) -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    let (fs, rel) = (fs.clone(), rel.to_vec());
    blocking(move || f(&*fs, &rel).map_err(io_err(&*fs, &rel))).await
}
