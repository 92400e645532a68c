//! One storage trait with a local-filesystem and an Azure Blob implementation behind it.
//! Paths handed to a store are relative to its root, '/'-separated raw bytes.

pub mod azure;
pub mod beneath;
pub mod bufpool;
pub mod filesystem;
mod local;
pub mod metadata;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use tokio::sync::mpsc;

use crate::keyspace::Cuts;
use crate::preserve::Preserve;

use filesystem::{on_thread, Filesystem};
/// For constructing one directly (a test's store); everything else goes through `open`.
pub use local::LocalStore;

use crate::error::{Result, StoreError};
use crate::location::Location;
use crate::manifest::{Entry, Kind, Mtime};
use crate::retry::RetryPolicy;
use crate::stats::Stats;

/// What ferry keeps about an object beyond its bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub mtime: Option<Mtime>,
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub md5: Option<[u8; 16]>,
    /// Where a sparse file had data at the source (what a blob records of it, `ferry_sparse`);
    /// None: a dense file, or not known.
    pub sparse: Option<crate::sparse::Sparse>,
}

impl Meta {
    /// The POSIX attributes alone: no MD5, no hole layout.
    pub fn posix(mtime: Option<Mtime>, mode: Option<u32>, owner: Option<(u32, u32)>) -> Meta {
        Meta {
            mtime,
            mode,
            uid: owner.map(|o| o.0),
            gid: owner.map(|o| o.1),
            md5: None,
            sparse: None,
        }
    }

    /// What of this metadata a copy keeps: the one place metadata is filtered by `--preserve`.
    pub fn kept(self, preserve: &Preserve) -> Meta {
        Meta {
            mtime: self.mtime.filter(|_| preserve.times),
            mode: self.mode.filter(|_| preserve.mode),
            uid: self.uid.filter(|_| preserve.owner),
            gid: self.gid.filter(|_| preserve.owner),
            md5: self.md5,
            sparse: self.sparse.filter(|_| preserve.sparse),
        }
    }

    /// The metadata a listed entry gives (what of it a copy keeps: `Meta::kept`).
    pub fn of_entry(e: &Entry) -> Meta {
        Meta::posix(e.mtime, e.mode, e.owner)
    }

    /// Fills in what the listing did not know from what a read returned.
    pub fn complete_from(&mut self, from_read: Meta) {
        self.mtime = self.mtime.or(from_read.mtime);
        self.mode = self.mode.or(from_read.mode);
        if self.uid.is_none() || self.gid.is_none() {
            (self.uid, self.gid) = (from_read.uid, from_read.gid);
        }
        self.md5 = self.md5.or(from_read.md5);
        self.sparse = self.sparse.take().or(from_read.sparse);
    }
}

/// What a store keeps about an object besides its bytes and POSIX attributes: its user
/// metadata and content properties, kept when it is copied to a store that has them too
/// (`Capabilities::props`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Props {
    /// Every user metadata key (`x-ms-meta-*` in Blob storage), keys lowercased.
    pub metadata: HashMap<String, String>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_language: Option<String>,
    pub content_disposition: Option<String>,
    pub cache_control: Option<String>,
    /// Its access tier, where one was set on it (not inferred from the account's default).
    pub tier: Option<String>,
    /// Its index tags, as `x-ms-tags` takes them: `key=value&...`, form-encoded.
    pub tags: Option<String>,
}

/// What the stored extended attributes of an object become when its metadata is set, in a
/// store that keeps them in its metadata (`metadata::xattrs`): None leaves them as they are,
/// Some(None) removes them, Some(Some(v)) stores `v`.
pub type StoredXattrs = Option<Option<String>>;

/// What a store holds beyond bytes, and how it takes them: the engine asks these, never
/// which backend it has. A filesystem has all of the first group and none of the second;
/// Blob storage the reverse.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Directories exist in their own right: made by writing into them, their mtime moved by
    /// it (so given theirs after their entries), and a file in a directory's way removed before
    /// its entries go in. Without, a directory is a name prefix, kept by a folder stub.
    pub directories: bool,
    /// Holds hard links (names of one object).
    pub hard_links: bool,
    /// Holds fifos and device nodes.
    pub specials: bool,
    /// Holds extended attributes and ACLs of its own (`Filesystem::read_xattrs`).
    pub xattrs: bool,
    /// Holds holes in a file (`Filesystem::sparse_layout`).
    pub holes: bool,
    /// A look at one object is a system call, not a request: a copy looks at a source object
    /// just before reading it rather than trusting its listing, and reads a small one whole
    /// with one open (`Filesystem::read_small`).
    pub cheap_looks: bool,
    /// Uploads take a block in pieces as its bytes arrive (`Upload::write_at`), each a system
    /// call rather than a request: a download's ranges can be large, and a write holds no
    /// slot of the depth (which counts requests).
    pub piecewise: bool,
    /// Keeps an MD5 with each object (a Content-MD5): the store's promise about its bytes,
    /// which a copy checks what it reads against; `--put-md5` gives every upload one, and
    /// block uploads take each block's MD5 (block IDs, the service's check on arrival).
    pub md5: bool,
    /// Keeps user metadata and content properties (`Props`), and records extended attributes
    /// and a sparse file's layout in that metadata (`metadata`).
    pub props: bool,
    /// How many deletions `Store::delete_many` sends in one request: past 1, a caller that
    /// has many to make gains by handing over that many at once (Blob Batch: 256).
    pub delete_batch: usize,
}

/// An object's version as one look gives it (`Store::version`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectVersion {
    /// Changes whenever the object's bytes may have (an ETag; a local file's inode, size,
    /// mtime and ctime).
    pub token: String,
    pub size: u64,
    pub props: Option<Props>,
}

/// One ranged read. Stores that learn metadata from the read itself (Azure's GET headers) fill
/// `meta`, so downloads from a manifest need no extra HEAD per blob.
pub struct Chunk {
    pub data: Bytes,
    pub meta: Option<Meta>,
}

/// How a multi-block upload is laid out. `fingerprint` names the source version: a local
/// download's journal of finished ranges is reused only for the same version. (Blob uploads
/// need no fingerprint: their block IDs are derived from each block's own bytes.)
#[derive(Clone, Debug)]
pub struct UploadPlan {
    pub size: u64,
    pub block_size: u64,
    pub fingerprint: String,
}

impl UploadPlan {
    pub fn blocks(&self) -> u64 {
        self.size.div_ceil(self.block_size).max(1)
    }
    pub fn block_len(&self, idx: u64) -> u64 {
        (self.size - idx * self.block_size).min(self.block_size)
    }
}

/// A resumable write of one object in blocks: nothing is visible under the final name until
/// `commit` succeeds.
#[async_trait]
pub trait Upload: Send + Sync {
    /// True if this block is known, before reading the source, to have survived from an earlier
    /// attempt at the same version (a local download's journal).
    fn staged(&self, idx: u64) -> bool;
    /// Writes one block, given its MD5 where the caller has it. Ok(false): a block with these
    /// very bytes was already staged by an earlier attempt, so nothing was sent.
    async fn put_block(&self, idx: u64, data: Bytes, md5: Option<[u8; 16]>) -> Result<bool>;
    /// Writes `data`, pieces in order, at `offset_in_block` of block `idx`; with `sparse`, zero
    /// blocks where the source had holes are left holes (`sparse::runs`).
    async fn write_at(
        &self,
        _idx: u64,
        _offset_in_block: u64,
        _data: Vec<Bytes>,
        _sparse: Option<&crate::sparse::Sparse>,
    ) -> Result<()> {
        Err(StoreError::Invalid(
            "this store takes whole blocks only".into(),
        ))
    }
    async fn finish_block(&self, _idx: u64) -> Result<()> {
        Err(StoreError::Invalid(
            "this store takes whole blocks only".into(),
        ))
    }
    /// Keep a source object's metadata and content properties at commit, where the store
    /// has them (`Capabilities::props`).
    fn keep_props(&self, _props: &Props) {}
    /// The bytes of a staged block, where the store can give them back cheaply.
    async fn read_back(&self, idx: u64) -> Result<Option<Bytes>>;
    async fn commit(self: Box<Self>, meta: &Meta) -> Result<()>;
    /// Gives up. With `discard`, staged state is removed too (it is known to be bad).
    async fn abort(self: Box<Self>, discard: bool);
}

/// The leftovers of earlier runs a pass removed from a store (`sweep_leftovers`), and
/// those it could not remove, with why.
#[derive(Default, Debug)]
pub struct Sweep {
    pub removed: Vec<Vec<u8>>,
    pub failed: Vec<(Vec<u8>, String)>,
}

#[async_trait]
pub trait Store: Send + Sync {
    /// For messages: a URL or path without secrets.
    fn describe(&self) -> String;

    /// Streams every entry under the root. An `Err` sent (or returned) means the listing is
    /// incomplete, and callers must not treat absent entries as deleted.
    async fn list(&self, recursive: bool, tx: mpsc::Sender<Result<Entry>>) -> Result<()>;

    /// The entries directly in directory (or prefix) `dir`, `""` for the root; None when it
    /// does not exist. Paths are relative to the root, like a listing's.
    async fn list_dir(&self, dir: &[u8]) -> Result<Option<Vec<Entry>>>;

    /// Streams the entries of a recursive listing that fall in range `k` of `cuts` (one list
    /// job's share, crate::shard): over all the ranges, the whole listing, each entry once.
    async fn list_range(
        &self,
        cuts: &Cuts,
        k: usize,
        tx: mpsc::Sender<Result<Entry>>,
    ) -> Result<()> {
        let range = cuts.range(k);
        let (all_tx, mut all) = mpsc::channel(1024);
        let (listed, ()) = tokio::join!(self.list(true, all_tx), async move {
            while let Some(e) = all.recv().await {
                let keep = e.as_ref().map_or(true, |e| range.contains(&e.path));
                if keep && tx.send(e).await.is_err() {
                    break;
                }
            }
        });
        listed
    }

    /// Up to about `max` of the entries directly in `dir` (a first page), for a shallow look at
    /// a tree's shape; never a complete listing.
    async fn list_dir_sample(&self, dir: &[u8], max: usize) -> Result<Sample> {
        let mut entries = self.list_dir(dir).await?.unwrap_or_default();
        let more = entries.len() > max;
        entries.truncate(max);
        Ok(Sample { entries, more })
    }

    async fn head(&self, path: &[u8]) -> Result<Option<(Entry, Meta)>>;

    /// The object's version from one look, with its `Props` where `props` asks for them and
    /// the store keeps them (`Capabilities::props`); None if the object is absent.
    async fn version(&self, path: &[u8], props: bool) -> Result<Option<ObjectVersion>>;

    /// What this store holds and how it takes it (see `Capabilities`).
    fn capabilities(&self) -> Capabilities;

    /// The service this store is in, where that service copies objects itself
    /// (`server_copy`); None where every byte passes through ferry.
    fn service(&self) -> Option<Service> {
        None
    }

    /// What this store can do as a filesystem, where it is one (`filesystem::Filesystem`): a
    /// capability the caller asks for, never the store's own type.
    fn posix(&self) -> Option<Arc<dyn Filesystem>> {
        None
    }

    /// Whether the root exists now. A store whose root is only a name (a prefix) says true:
    /// a missing container shows as `RootNotFound` when it is listed.
    async fn root_exists(&self) -> Result<bool> {
        Ok(true)
    }

    /// The root's own mode, owner and mtime; None where the store keeps none.
    async fn root_meta(&self) -> Result<Option<Meta>>;

    /// Gives the root the attributes `meta` names (what a copy of a whole tree ends with).
    async fn set_root_meta(&self, meta: &Meta) -> Result<()>;

    /// Puts on disk (or wherever the store keeps it) everything written so far, where writes
    /// are not durable as they return (a filesystem's shared flush at the end of a copy).
    async fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// `len` bytes at `offset`. With `version`, the bytes must come from that version of the
    /// object: a changed object is an `Integrity` error, never a mix of old and new bytes.
    async fn read(
        &self,
        path: &[u8],
        offset: u64,
        len: u64,
        version: Option<&str>,
    ) -> Result<Chunk>;

    /// Like `read`, but the bytes arrive as they come, so a large range never sits in memory
    /// whole. Stores that can resume a broken body do so inside the stream.
    async fn read_stream(
        &self,
        path: &[u8],
        offset: u64,
        len: u64,
        version: Option<&str>,
    ) -> Result<(Option<Meta>, BoxStream<'static, Result<Bytes>>)> {
        let chunk = self.read(path, offset, len, version).await?;
        Ok((
            chunk.meta,
            Box::pin(futures::stream::once(async move { Ok(chunk.data) })),
        ))
    }

    /// Writes a node of `kind` whole: a file's bytes, a symlink with target `data`, or a
    /// directory (`data` empty) with metadata `meta`: one that exists is given what of `meta`
    /// differs. `props`: what a store with `Capabilities::props` keeps beside. A kind the store
    /// does not hold is `Unsupported`.
    async fn put_node(
        &self,
        path: &[u8],
        kind: Kind,
        data: Bytes,
        meta: &Meta,
        props: Option<&Props>,
    ) -> Result<()>;

    /// Writes a whole file at once (small files).
    async fn put(&self, path: &[u8], data: Bytes, meta: &Meta) -> Result<()> {
        self.put_node(path, Kind::File, data, meta, None).await
    }

    async fn start_upload(&self, path: &[u8], plan: &UploadPlan) -> Result<Box<dyn Upload>>;

    async fn delete(&self, path: &[u8]) -> Result<()>;

    /// Deletes every path, as `delete` would (an absent one counts as deleted); the results in
    /// the order of `paths`.
    async fn delete_many(&self, paths: &[Vec<u8>]) -> Vec<Result<()>> {
        let mut out = Vec::with_capacity(paths.len());
        for p in paths {
            out.push(self.delete(p).await);
        }
        out
    }

    /// Removes whatever stands at `path`, a directory with everything below it included,
    /// never following a symlink: the old entry of a type change between passes.
    async fn remove_all(&self, path: &[u8]) -> Result<()> {
        self.delete(path).await
    }

    /// Sets the metadata of the entry at `path` (of kind `kind`) without writing its bytes: a
    /// chmod, chown or touch at the source between passes; in a store that keeps extended
    /// attributes in its metadata, `xattrs` too (see `StoredXattrs`).
    async fn set_meta(
        &self,
        path: &[u8],
        kind: Kind,
        meta: &Meta,
        xattrs: StoredXattrs,
    ) -> Result<()>;

    /// Creates the container (or directory). Ok(false) if it already existed.
    async fn create_root(&self) -> Result<bool>;
}

/// A store's place in a service that copies objects itself: what a destination there needs of
/// a source (Blob: the account, and the source blobs' signed URLs). Opaque outside its backend.
#[derive(Clone)]
pub enum Service {
    Blob(azure::Account),
}

/// Whether `dst` can copy objects of `src` without their bytes passing through ferry (Blob:
/// the same account at the same endpoint).
pub fn can_copy(src: &dyn Store, dst: &dyn Store) -> bool {
    match (src.service(), dst.service()) {
        (Some(Service::Blob(s)), Some(Service::Blob(d))) => s.same_account(&d),
        _ => false,
    }
}

/// Copies `entry` of `src` to `dst_path` of `dst`, server-side, where `can_copy` allows it.
/// The result holds what streaming would give: the source's bytes and Content-MD5 and
/// ferry's metadata, or nothing at all when the source changed meanwhile or the copy failed.
pub async fn server_copy(
    src: &dyn Store,
    dst: &dyn Store,
    entry: &Entry,
    dst_path: &[u8],
) -> Result<()> {
    match (src.service(), dst.service()) {
        (Some(Service::Blob(s)), Some(Service::Blob(d))) if s.same_account(&d) => {
            d.copy_from(&s, entry, dst_path).await
        }
        _ => Err(StoreError::Unsupported(format!(
            "server-side copy from {} into {}",
            src.describe(),
            dst.describe()
        ))),
    }
}

/// Where a store reads its settings from: the process environment, or a test's table.
pub type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Everything a store needs besides its location.
#[derive(Clone)]
pub struct OpenOptions {
    pub auth: crate::storage::azure::auth::AuthMode,
    pub retry: RetryPolicy,
    pub stats: Arc<Stats>,
    pub concurrency: usize,
    /// Send a Content-MD5 with every block, for the service to check on arrival.
    pub block_md5: bool,
    pub io_timeout: std::time::Duration,
    /// Local destinations: fsync files before their rename and the filesystem at the end.
    pub fsync: bool,
    /// How long a server-side copy may stay pending; None: the store's default.
    pub copy_wait: Option<std::time::Duration>,
    /// Local listings: the extended attributes and ACLs whose digest each entry carries.
    pub xattrs: crate::xattrs::Wanted,
    /// The keys Blob destinations store POSIX attributes under, beside rclone's.
    pub posix_style: azure::posix::PosixStyle,
    /// Uploads get a Content-Type guessed from their name.
    pub guess_mime: bool,
    /// Blob → blob: the source's access tier and index tags go along.
    pub keep_tier: bool,
    pub keep_tags: bool,
    /// Blob: List Blobs requests one recursive listing keeps in flight; 1 is one stream.
    pub list_concurrency: usize,
    /// Blob: entries asked for per List Blobs page (the service's maximum is 5,000).
    pub list_page: u32,
    pub env: Env,
}

/// A first look into a directory (`Store::list_dir_sample`).
pub struct Sample {
    /// In the store's listing order: by name where the store lists in order (Blob), else as
    /// the store keeps them.
    pub entries: Vec<Entry>,
    /// Entries were left out.
    pub more: bool,
}

pub fn open(loc: &Location, opts: &OpenOptions) -> Result<Arc<dyn Store>> {
    match loc {
        Location::Local(p) => Ok(Arc::new(
            LocalStore::new(p.clone(), opts.fsync).with_xattrs(opts.xattrs),
        )),
        Location::Blob(b) => Ok(Arc::new(azure::AzureStore::new(b.clone(), opts)?)),
    }
}

/// Collects a whole listing, failing if any part of it failed.
pub async fn list_all(store: &Arc<dyn Store>, recursive: bool) -> Result<Vec<Entry>> {
    let (entries, mut errors) = list_partial(store, recursive).await;
    match errors.is_empty() {
        true => Ok(entries),
        false => Err(errors.swap_remove(0)),
    }
}

/// Collects what a listing yields and, apart, every error it met: a copy can move what was
/// listed and report the rest (a prune must not: it uses `list_all`).
pub async fn list_partial(
    store: &Arc<dyn Store>,
    recursive: bool,
) -> (Vec<Entry>, Vec<StoreError>) {
    let (tx, mut rx) = mpsc::channel(1024);
    let s = store.clone();
    let task = tokio::spawn(async move { s.list(recursive, tx).await });
    let mut out = Vec::new();
    let mut errors = Vec::new();
    while let Some(item) = rx.recv().await {
        match item {
            Ok(e) => out.push(e),
            Err(e) => errors.push(e),
        }
    }
    match task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => errors.push(e),
        Err(e) => errors.push(StoreError::Invalid(format!("listing task failed: {e}"))),
    }
    (out, errors)
}

/// Whether looking up `wanted` paths of `dir` one by one costs less than listing it, where
/// that is known without listing it (a filesystem's directory size); false where only a
/// listing tells.
async fn looks_beat_listing(store: &Arc<dyn Store>, dir: &[u8], wanted: usize) -> bool {
    let Some(fs) = store.posix() else {
        return false;
    };
    let dir = dir.to_vec();
    blocking(move || Ok(fs.looks_beat_listing(&dir, wanted)))
        .await
        .unwrap_or(false)
}

/// What `store` holds at each of `paths`, learnt by listing each directory they are in once:
/// for a partition of a tree, about its share of one listing, never the whole tree nor a
/// request per path. Where the paths are few against what their directory holds (fewer than
/// `LOOKS`, or where `looks_beat_listing`), each is looked up instead: a final pass's
/// few changed files in large directories cost a look each, not the directories. Paths absent
/// from the result are not there. Directories whose listing (or a look in them) failed come
/// back apart, with the first error.
pub async fn index_paths(
    store: &Arc<dyn Store>,
    paths: &[&[u8]],
    parallel: usize,
) -> (HashMap<Vec<u8>, Entry>, Vec<(Vec<u8>, StoreError)>) {
    use futures::StreamExt;
    // Below this many wanted paths in a directory, one look each is cheaper than a listing
    // (an open, at least one page and a close on NFS).
    const LOOKS: usize = 4;
    let parallel = parallel.max(1);
    let mut by_dir: HashMap<&[u8], Vec<&[u8]>> = HashMap::new();
    for p in paths {
        by_dir.entry(beneath::split(p).0).or_default().push(p);
    }
    enum Ask<'a> {
        Look(&'a [u8], &'a [u8]),
        List(&'a [u8], std::collections::HashSet<&'a [u8]>),
    }
    let asks: Vec<Vec<Ask>> = futures::stream::iter(by_dir)
        .map(|(dir, wanted)| async move {
            match wanted.len() < LOOKS || looks_beat_listing(store, dir, wanted.len()).await {
                true => wanted.into_iter().map(|p| Ask::Look(dir, p)).collect(),
                false => vec![Ask::List(dir, wanted.into_iter().collect())],
            }
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    let results: Vec<(&[u8], Result<Vec<Entry>>)> =
        futures::stream::iter(asks.into_iter().flatten())
            .map(|ask| async move {
                match ask {
                    Ask::Look(dir, p) => (
                        dir,
                        store
                            .head(p)
                            .await
                            .map(|h| h.map(|(e, _)| e).into_iter().collect()),
                    ),
                    Ask::List(dir, wanted) => (
                        dir,
                        store.list_dir(dir).await.map(|l| {
                            l.unwrap_or_default()
                                .into_iter()
                                .filter(|e| wanted.contains(&e.path[..]))
                                .collect()
                        }),
                    ),
                }
            })
            .buffer_unordered(parallel)
            .collect()
            .await;
    let mut index = HashMap::new();
    let mut failed: HashMap<&[u8], StoreError> = HashMap::new();
    for (dir, r) in results {
        match r {
            Ok(entries) => index.extend(entries.into_iter().map(|e| (e.path.clone(), e))),
            Err(e) => {
                failed.entry(dir).or_insert(e);
            }
        }
    }
    let failed = failed.into_iter().map(|(d, e)| (d.to_vec(), e)).collect();
    (index, failed)
}

/// A symlink's target and metadata: read from the link where the store is a filesystem, else
/// from the object that holds the target as its bytes (as azcopy and blobfuse2 keep one), its
/// listed metadata completed by the read's.
pub async fn read_link(store: &dyn Store, entry: &Entry) -> Result<(Vec<u8>, Meta)> {
    if let Some(fs) = store.posix() {
        let (rel, what) = (entry.path.clone(), entry.display_path());
        return blocking(move || fs.read_link(&rel).map_err(|e| StoreError::io(what, e))).await;
    }
    let chunk = store.read(&entry.path, 0, entry.size(), None).await?;
    let mut meta = Meta::of_entry(entry);
    if let Some(m) = chunk.meta {
        meta.complete_from(m);
    }
    Ok((chunk.data.to_vec(), meta))
}

/// The MD5 of an object's bytes where the store can take it without a transfer (a local
/// file, read here); None where it cannot (a download is the caller's choice).
pub async fn content_md5(store: &dyn Store, path: &[u8]) -> Result<Option<[u8; 16]>> {
    match store.posix() {
        Some(fs) => on_thread(&fs, path, |fs, rel| fs.md5(rel).map(Some)).await,
        None => Ok(None),
    }
}

/// Removes ferry's own temp files of earlier runs from a store that is a filesystem
/// (`Filesystem::sweep_leftovers`). Blob storage has none: uncommitted blocks expire.
pub async fn sweep_leftovers(store: &dyn Store, dry_run: bool) -> Sweep {
    match store.posix() {
        Some(fs) => blocking(move || Ok(fs.sweep_leftovers(dry_run)))
            .await
            .unwrap_or_default(),
        None => Sweep::default(),
    }
}

/// Rejects relative paths that could escape a root: empty, `.` or `..` components, or a
/// leading `/`. Blob names may hold such things; a local tree never does.
pub fn check_relative(path: &[u8]) -> Result<()> {
    if path.is_empty()
        || path
            .split(|&b| b == b'/')
            .any(|c| c.is_empty() || c == b"." || c == b"..")
    {
        return Err(StoreError::Invalid(format!(
            "unsafe path {:?}: empty, '.' or '..' components are not copied",
            crate::manifest::escape_path(path)
        )));
    }
    Ok(())
}

/// Runs blocking work (system calls) on a thread that may block.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Invalid(format!("worker thread failed: {e}")))?
}

/// Stable across runs and builds (unlike std's hasher), for temp names and block IDs.
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

#[cfg(test)]
pub mod conformance;
