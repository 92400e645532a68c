//! One storage trait with a local-filesystem and an Azure Blob implementation behind it.
//! Paths handed to a store are relative to its root, '/'-separated raw bytes.

pub mod azure;
pub mod beneath;
pub mod bufpool;
pub mod local;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use tokio::sync::mpsc;

use crate::shard::Cuts;

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
    /// Whether a block can be written in pieces (`write_at`, then `finish_block`): true for
    /// local files, where a download then needs no block-sized buffer.
    fn piecewise(&self) -> bool {
        false
    }
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
    /// Blob destinations: keep a source blob's metadata and content properties at commit.
    fn keep_props(&self, _props: &azure::BlobProps) {}
    /// The bytes of a staged block, where the store can give them back cheaply.
    async fn read_back(&self, idx: u64) -> Result<Option<Bytes>>;
    async fn commit(self: Box<Self>, meta: &Meta) -> Result<()>;
    /// Gives up. With `discard`, staged state is removed too (it is known to be bad).
    async fn abort(self: Box<Self>, discard: bool);
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
    async fn list_dir_sample(&self, dir: &[u8], max: usize) -> Result<Vec<Entry>> {
        let mut entries = self.list_dir(dir).await?.unwrap_or_default();
        entries.truncate(max);
        Ok(entries)
    }

    async fn head(&self, path: &[u8]) -> Result<Option<(Entry, Meta)>>;

    /// A token that changes whenever the object's bytes may have (an ETag; a local file's
    /// inode, size, mtime and ctime), and the size it goes with. None if the object is absent.
    async fn version(&self, _path: &[u8]) -> Result<Option<(String, u64)>> {
        Ok(None)
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

    /// Writes a whole object at once (small files).
    async fn put(&self, path: &[u8], data: Bytes, meta: &Meta) -> Result<()>;

    async fn start_upload(&self, path: &[u8], plan: &UploadPlan) -> Result<Box<dyn Upload>>;

    async fn delete(&self, path: &[u8]) -> Result<()>;

    /// How many deletions `delete_many` sends in one request: past 1, a caller that has many to
    /// make gains by handing over that many at once (Blob Batch: 256).
    fn delete_batch(&self) -> usize {
        1
    }

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
    /// chmod, chown or touch at the source between passes.
    async fn set_meta(&self, _path: &[u8], _kind: Kind, _meta: &Meta) -> Result<()> {
        Err(StoreError::Unsupported(format!(
            "setting metadata alone in {}",
            self.describe()
        )))
    }

    /// Creates the container (or directory). Ok(false) if it already existed.
    async fn create_root(&self) -> Result<bool>;

    /// Whether `copy_from` can copy objects of `src` here without their bytes passing through
    /// ferry (Azure: the same account at the same endpoint).
    fn can_copy_from(&self, _src: &dyn Store) -> bool {
        false
    }

    /// Copies `entry` of `src` to `dst_path` here, server-side, where `can_copy_from` allows it.
    /// The result must hold what streaming would give: the source's bytes and Content-MD5 and
    /// ferry's metadata, or nothing at all when the source changed meanwhile or the copy failed.
    async fn copy_from(&self, _src: &dyn Store, _entry: &Entry, _dst_path: &[u8]) -> Result<()> {
        Err(StoreError::Unsupported(format!(
            "server-side copy into {}",
            self.describe()
        )))
    }

    /// Set for local stores, so local→local copies can use the kernel's copy path.
    fn local_root(&self) -> Option<&std::path::Path> {
        None
    }

    /// What the local → local engine needs of a local tree beyond this trait.
    fn local(&self) -> Option<&dyn local::LocalFs> {
        None
    }

    fn as_azure(&self) -> Option<&azure::AzureStore> {
        None
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

pub fn open(loc: &Location, opts: &OpenOptions) -> Result<Arc<dyn Store>> {
    match loc {
        Location::Local(p) => Ok(Arc::new(
            local::LocalStore::new(p.clone(), opts.fsync).with_xattrs(opts.xattrs),
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

/// What `store` holds at each of `paths`, learnt by listing each directory they are in once:
/// for a partition of a tree, about its share of one listing, never the whole tree nor a
/// request per path. A directory with only a few of the paths is asked about those paths
/// instead, which costs less than listing it. Paths absent from the result are not there.
/// Directories whose listing failed come back apart, with the error.
pub async fn index_paths(
    store: &Arc<dyn Store>,
    paths: &[&[u8]],
    parallel: usize,
) -> (HashMap<Vec<u8>, Entry>, Vec<(Vec<u8>, StoreError)>) {
    use futures::StreamExt;
    // Below this many wanted paths in a directory, one look each is cheaper than a listing
    // (an open, at least one page and a close on NFS).
    const LOOKS: usize = 4;
    let mut by_dir: HashMap<&[u8], Vec<&[u8]>> = HashMap::new();
    for p in paths {
        by_dir.entry(beneath::split(p).0).or_default().push(p);
    }
    let results: Vec<(Vec<u8>, Result<Vec<Entry>>)> = futures::stream::iter(by_dir)
        .map(|(dir, wanted)| async move {
            let found = if wanted.len() < LOOKS {
                let mut out = Vec::new();
                for p in &wanted {
                    match store.head(p).await {
                        Ok(Some((e, _))) => out.push(e),
                        Ok(None) => {}
                        Err(e) => return (dir.to_vec(), Err(e)),
                    }
                }
                Ok(out)
            } else {
                let wanted: std::collections::HashSet<&[u8]> = wanted.into_iter().collect();
                store.list_dir(dir).await.map(|l| {
                    l.unwrap_or_default()
                        .into_iter()
                        .filter(|e| wanted.contains(&e.path[..]))
                        .collect()
                })
            };
            (dir.to_vec(), found)
        })
        .buffer_unordered(parallel.max(1))
        .collect()
        .await;
    let mut index = HashMap::new();
    let mut failed = Vec::new();
    for (dir, r) in results {
        match r {
            Ok(entries) => index.extend(entries.into_iter().map(|e| (e.path.clone(), e))),
            Err(e) => failed.push((dir, e)),
        }
    }
    (index, failed)
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
