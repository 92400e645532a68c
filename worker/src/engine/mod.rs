//! The copy engine. Files run in parallel; what they keep in flight — requests to Blob
//! storage, or files being copied between filesystems — is bounded by one `Depth` (adaptive
//! unless fixed), and the bytes they hold in memory by one budget. Per file, blocks are read in
//! order so one MD5 covers the whole object, and sent out of order.
//!
//! - local → local: `local.rs` (plain threads, the kernel's copy path, batched commits);
//! - Blob → local: `download.rs` (ranges streamed to disk, hashed as they arrive);
//! - anything → Blob: here (`transfer`).

mod blob_attrs;
mod download;
mod local;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use crate::hash::{self, Md5};
use bytes::Bytes;
use futures::stream::{FuturesOrdered, FuturesUnordered};
use futures::{FutureExt, StreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::depth::{Depth, Permit};
use crate::error::{Result, StoreError};
use crate::manifest::{Entry, Kind};
use crate::preserve::Preserve;
use crate::same::{self, Compare, Verdict};
use crate::stats::Stats;
use crate::storage::filesystem::{Filesystem, Quirks};
use crate::storage::{
    Capabilities, Meta, ObjectVersion, Props, Store, StoredXattrs, Upload, UploadPlan,
};
use crate::throttle::Throttle;

#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub compare: Compare,
    /// Files in progress at once (blob transfers; local copies take theirs from the depth).
    pub parallel_files: usize,
    pub block_size: u64,
    pub put_md5: bool,
    pub max_bandwidth: Option<u64>,
    /// Bytes of blocks and ranges held in memory at once, all files together.
    pub memory: u64,
    /// A copy of a whole tree: the destination root gets the source root's owner, mode and
    /// mtime at the end.
    pub finish_root: bool,
    /// Let the destination copy files itself where it can (`storage::can_copy`).
    pub server_copy: bool,
    pub preserve: Preserve,
}

/// One file to consider: where it is in the source, and where it goes.
#[derive(Clone, Debug)]
pub struct Job {
    pub src: Entry,
    pub dst_path: Vec<u8>,
}

/// What a listing of the destination says is there, by path. A path that is not in it is not
/// at the destination: it is copied without asking the destination again.
pub type Index = HashMap<Vec<u8>, Entry>;

pub struct Engine {
    pub src: Arc<dyn Store>,
    pub dst: Arc<dyn Store>,
    pub opts: EngineOptions,
    pub stats: Arc<Stats>,
    pub depth: Arc<Depth>,
    /// `opts.memory` in KiB permits.
    memory: Arc<Semaphore>,
    throttle: Option<Throttle>,
    dst_index: Option<Index>,
    /// Each end's filesystem, where it is one (`Store::posix`): asked once, here.
    src_fs: Option<Arc<dyn Filesystem>>,
    dst_fs: Option<Arc<dyn Filesystem>>,
    quirks: Quirks,
}

enum Outcome {
    Copied,
    ServerCopied,
    Skipped,
    /// The bytes were the same: only mode, owner, times or attributes were set.
    MetaUpdated,
    Ignored(&'static str),
}

impl Engine {
    pub fn new(
        src: Arc<dyn Store>,
        dst: Arc<dyn Store>,
        opts: EngineOptions,
        stats: Arc<Stats>,
        depth: Arc<Depth>,
        dst_index: Option<Index>,
    ) -> Self {
        // Never less than two blocks: one block must always fit, and one more keeps reading
        // overlapped with sending.
        let memory = opts.memory.max(2 * opts.block_size.max(DOWNLOAD_RANGE));
        Engine {
            memory: Arc::new(Semaphore::new(memory.div_ceil(1024) as usize)),
            opts: EngineOptions { memory, ..opts },
            throttle: opts.max_bandwidth.map(Throttle::new),
            src_fs: src.posix(),
            dst_fs: dst.posix(),
            src,
            dst,
            stats,
            depth,
            dst_index,
            quirks: Quirks::default(),
        }
    }

    /// Both ends are filesystems, which the local → local engine drives itself (the kernel's
    /// copy path, staging directories, commits batched behind one flush).
    fn both_local(&self) -> bool {
        self.src_fs.is_some() && self.dst_fs.is_some()
    }

    fn src_can(&self) -> Capabilities {
        self.src.capabilities()
    }

    fn dst_can(&self) -> Capabilities {
        self.dst.capabilities()
    }

    /// Runs every job; per-file failures are recorded in the stats, never abort the others. A
    /// panic in one file's work fails that file (it is a bug, but one file's bug must not lose
    /// the outcomes of the others, nor end with exit 0).
    pub async fn run(self: &Arc<Self>, jobs: Vec<Job>) {
        if self.both_local() {
            local::run(self, jobs).await;
        } else {
            let (dirs, files): (Vec<Job>, Vec<Job>) =
                jobs.into_iter().partition(|j| j.src.kind == Kind::Dir);
            // Where a directory is a folder stub it goes first: one that replaces a blob of
            // another type removes what stands under its name, which must not be what this run
            // uploads. Where directories are real it goes last, so that writing its entries does
            // not move its mtime.
            let stubs = !self.dst_can().directories;
            if stubs {
                self.dirs(dirs.clone(), false).await;
            } else {
                self.clear_way(&dirs).await;
            }
            let files: Arc<Vec<Job>> = Arc::new(files);
            // A fixed set of tasks, each taking the next file when done with one: handing each
            // file out from here would wake this thread once a file.
            let next = Arc::new(AtomicUsize::new(0));
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..self.opts.parallel_files.max(1).min(files.len()) {
                let (me, files, next) = (self.clone(), files.clone(), next.clone());
                tasks.spawn(async move {
                    while let Some(job) = files.get(next.fetch_add(1, Relaxed)) {
                        let outcome = std::panic::AssertUnwindSafe(me.one(job))
                            .catch_unwind()
                            .await
                            .unwrap_or_else(|p| Err(panicked(p)));
                        me.record(job, outcome);
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
            if !stubs {
                self.dirs(dirs, true).await;
            }
            if self.opts.finish_root {
                self.finish_root_through_blob().await;
            }
        }
        if let Err(e) = self.dst.flush().await {
            self.stats.failed(
                self.dst.describe(),
                format!("cannot flush the destination to disk: {e}"),
            );
        }
    }

    /// Directories a level at a time, the levels shallowest first or, with `deepest_first`,
    /// deepest first; those of one level in parallel.
    async fn dirs(&self, mut dirs: Vec<Job>, deepest_first: bool) {
        let depth = |j: &Job| j.dst_path.iter().filter(|&&b| b == b'/').count();
        dirs.sort_by_key(|j| depth(j));
        if deepest_first {
            dirs.reverse();
        }
        for level in dirs.chunk_by(|a, b| depth(a) == depth(b)) {
            futures::stream::iter(level)
                .for_each_concurrent(self.opts.parallel_files.max(1), |job| async move {
                    let outcome = std::panic::AssertUnwindSafe(self.one_dir(job))
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|p| Err(panicked(p)));
                    match outcome {
                        Ok(Outcome::MetaUpdated) => Stats::add(&self.stats.meta_updated, 1),
                        Ok(_) => {}
                        Err(e) => self.stats.failed(job.src.display_path(), e.to_string()),
                    }
                })
                .await;
        }
    }

    /// The destination root gets the source root's mode, owner and mtime, as `cp -a` and
    /// `rsync -a src/` give it (`Store::root_meta`: in Blob storage, a folder stub or the
    /// container's metadata).
    async fn finish_root_through_blob(&self) {
        let done: Result<()> = async {
            let Some(meta) = self
                .src
                .root_meta()
                .await?
                .map(|m| m.kept(&self.opts.preserve))
            else {
                return Ok(());
            };
            self.dst.set_root_meta(&meta).await
        }
        .await;
        match done {
            Ok(()) => {}
            // A credential that may write blobs but not the container's metadata (a SAS for
            // blobs): the files are all there, the top directory's attributes are not kept.
            Err(e) if e.is_denied() => {
                eprintln!("ferry: the top directory's attributes not kept: {e}");
                self.stats.not_kept("top directory");
            }
            Err(e) => self
                .stats
                .failed(self.dst.describe(), format!("the top directory: {e}")),
        }
    }

    /// Removes what stands where a local directory goes (a file, a symlink), before the
    /// files go in: removed after, it would take them along.
    async fn clear_way(&self, dirs: &[Job]) {
        for job in dirs {
            let cleared = match self.decide(job).await {
                Ok(Verdict::TypeChanged) => self
                    .dst
                    .remove_all(&job.dst_path)
                    .await
                    .map(|_| Stats::add(&self.stats.replaced, 1)),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = cleared {
                self.stats.failed(job.src.display_path(), e.to_string());
            }
        }
    }

    /// One directory: a directory with the source's metadata where directories are real
    /// (whatever stood in its way went first: `clear_way`), else a folder stub (so an empty one
    /// is kept, with its metadata).
    async fn one_dir(&self, job: &Job) -> Result<Outcome> {
        let verdict = self.decide(job).await?;
        let meta = Meta::of_entry(&job.src).kept(&self.opts.preserve);
        if self.dst_can().directories {
            // Looked at again whatever the listing said: the files just written into it moved
            // its mtime. Only what differs is set.
            self.dst
                .put_node(&job.dst_path, Kind::Dir, Bytes::new(), &meta, None)
                .await?;
            self.attrs_from_blob(job).await?;
            return Ok(if verdict == Verdict::MetaOnly {
                Outcome::MetaUpdated
            } else {
                Outcome::Copied
            });
        }
        if verdict == Verdict::TypeChanged {
            self.dst.remove_all(&job.dst_path).await?;
            Stats::add(&self.stats.replaced, 1);
        }
        let attrs = self.attrs_for_update(job).await?;
        let dst = &self.dst;
        let outcome = match verdict {
            Verdict::Same => return Ok(Outcome::Skipped),
            Verdict::MetaOnly => match dst
                .set_meta(&job.dst_path, Kind::Dir, &meta, attrs.clone())
                .await
            {
                // The stub went since it was looked at: it is made again.
                Err(StoreError::NotFound(_)) => Outcome::MetaUpdated,
                r => return r.map(|_| Outcome::MetaUpdated),
            },
            _ => Outcome::Copied,
        };
        dst.put_node(
            &job.dst_path,
            Kind::Dir,
            Bytes::new(),
            &meta,
            attr_props(attrs).as_ref(),
        )
        .await
        .map(|_| outcome)
    }

    /// A symlink: its target, never followed, written as a symlink in a local tree and as a
    /// blob holding the target (marked `is_symlink`, as azcopy and blobfuse2 do) in Blob
    /// storage.
    async fn symlink(&self, job: &Job) -> Result<()> {
        let (target, meta) = crate::storage::read_link(&*self.src, &job.src).await?;
        let meta = self.kept(Meta { md5: None, ..meta });
        if target.is_empty() || target.contains(&0) {
            return Err(StoreError::Invalid(
                "a symlink's target must be non-empty and hold no NUL byte".into(),
            ));
        }
        Stats::add(&self.stats.bytes_copied, target.len() as u64);
        let md5 = (self.opts.put_md5 && self.dst_can().md5).then(|| hash::digest(&target));
        let props = attr_props(self.attrs_for_blob(job).await?);
        self.dst
            .put_node(
                &job.dst_path,
                Kind::Symlink,
                Bytes::from(target),
                &Meta { md5, ..meta },
                props.as_ref(),
            )
            .await
    }

    fn record(&self, job: &Job, outcome: Result<Outcome>) {
        match outcome {
            Ok(Outcome::Copied) => Stats::add(&self.stats.files_copied, 1),
            Ok(Outcome::ServerCopied) => self.stats.server_copied(job.src.size()),
            Ok(Outcome::Skipped) => {
                Stats::add(&self.stats.files_skipped, 1);
                Stats::add(&self.stats.bytes_skipped, job.src.size());
            }
            Ok(Outcome::MetaUpdated) => {
                Stats::add(&self.stats.files_skipped, 1);
                Stats::add(&self.stats.bytes_skipped, job.src.size());
                Stats::add(&self.stats.meta_updated, 1);
            }
            Ok(Outcome::Ignored(why)) => self.stats.ignored(job.src.display_path(), why),
            Err(e) => self.stats.failed(job.src.display_path(), e.to_string()),
        }
    }

    /// Bytes of the memory budget, held until the permit is dropped.
    async fn reserve(&self, bytes: u64) -> OwnedSemaphorePermit {
        let kib = bytes
            .div_ceil(1024)
            .clamp(1, self.opts.memory.div_ceil(1024)) as u32;
        self.memory
            .clone()
            .acquire_many_owned(kib)
            .await
            .expect("the memory budget is never closed")
    }

    async fn one(&self, job: &Job) -> Result<Outcome> {
        if job.src.kind.is_special() {
            return Ok(Outcome::Ignored(special_not_held(job.src.kind)));
        }
        if !self.dst_can().hard_links && job.src.link.is_some() && self.opts.preserve.links {
            // Each name becomes a blob of its own, as azcopy's `--hardlinks follow` makes them.
            self.stats.not_kept("hard link");
        }
        match self.decide(job).await? {
            Verdict::Same => return Ok(Outcome::Skipped),
            Verdict::MetaOnly => {
                let meta = Meta::of_entry(&job.src).kept(&self.opts.preserve);
                let attrs = self.attrs_for_update(job).await?;
                self.dst
                    .set_meta(&job.dst_path, job.src.kind, &meta, attrs)
                    .await?;
                self.attrs_from_blob(job).await?;
                return Ok(Outcome::MetaUpdated);
            }
            Verdict::TypeChanged => {
                self.refuse_shadowed(job).await?;
                self.dst.remove_all(&job.dst_path).await?;
                Stats::add(&self.stats.replaced, 1);
            }
            _ => {}
        }
        if job.src.kind == Kind::Symlink {
            self.symlink(job).await?;
            self.attrs_from_blob(job).await?;
            return Ok(Outcome::Copied);
        }
        if self.server_side(job) {
            return crate::storage::server_copy(&*self.src, &*self.dst, &job.src, &job.dst_path)
                .await
                .map(|_| Outcome::ServerCopied);
        }
        self.transfer(job).await?;
        self.attrs_from_blob(job).await?;
        Ok(Outcome::Copied)
    }

    /// An object of a source without directories that also has names beneath it is not copied
    /// over what stands at its name in a tree (the directory wins: `crate::shadowed`); asked
    /// only where a type changed, so a plan's part that holds the object alone is held too.
    async fn refuse_shadowed(&self, job: &Job) -> Result<()> {
        if self.src_can().directories || !self.dst_can().directories {
            return Ok(());
        }
        let sample = self.src.list_dir_sample(&job.src.path, 1).await?;
        match sample.entries.first() {
            Some(beneath) => Err(StoreError::Invalid(crate::shadowed::message(
                &job.src.path,
                &beneath.path,
            ))),
            None => Ok(()),
        }
    }

    /// What of `meta` the destination gets: what `--preserve` keeps. A file whose source says
    /// nothing of its mode gets the mode any new file gets there (`Filesystem::default_mode`), not
    /// the private one its temp file was made with.
    pub(super) fn kept(&self, meta: Meta) -> Meta {
        let kept = meta.kept(&self.opts.preserve);
        Meta {
            mode: kept
                .mode
                .or(self.dst_fs.as_ref().map(|fs| fs.default_mode())),
            ..kept
        }
    }

    /// Whether the destination copies this file itself. Only with a Content-MD5 to carry over:
    /// without one, the streamed copy computes it, and the blob gets one like every upload.
    pub fn server_side(&self, job: &Job) -> bool {
        self.opts.server_copy && (job.src.md5.is_some() || !self.opts.put_md5)
    }

    /// What the destination has at this job's path: from the listing when there is one, else
    /// by asking (a single object).
    async fn existing(&self, job: &Job) -> Result<Option<Entry>> {
        let found = match &self.dst_index {
            Some(idx) => idx.get(&job.dst_path).cloned(),
            None => self.dst.head(&job.dst_path).await?.map(|(e, _)| e),
        };
        // Where directories are folder stubs, a prefix with no stub (a level listing names it,
        // without the mtime every stub has) is no directory yet, as the plan's recursive
        // listing and a HEAD have it: whether a part writing beneath it ran first must not
        // change what this job does or counts.
        let stubless =
            |e: &Entry| e.kind == Kind::Dir && e.mtime.is_none() && !self.dst_can().directories;
        Ok(found.filter(|e| !stubless(e)))
    }

    /// What this job needs, by the one rule (`same::classify`), with what the listings leave
    /// undecided settled by content hashes under `--compare md5`, else by copying.
    pub async fn decide(&self, job: &Job) -> Result<Verdict> {
        // Nothing compared and nothing listed: the destination is not asked.
        if self.opts.compare == Compare::None && self.dst_index.is_none() {
            return Ok(Verdict::New);
        }
        let existing = self.existing(job).await?;
        let verdict = same::classify(&job.src, existing.as_ref(), self.opts.compare, self.attrs());
        let (Verdict::Undecided, Compare::Md5, Some(d)) = (verdict, self.opts.compare, &existing)
        else {
            return Ok(settled(verdict));
        };
        let sm = match job.src.md5 {
            Some(m) => Some(m),
            None => crate::storage::content_md5(&*self.src, &job.src.path).await?,
        };
        let dm = match d.md5 {
            Some(m) => Some(m),
            None => crate::storage::content_md5(&*self.dst, &job.dst_path).await?,
        };
        Ok(same::by_hashes(&job.src, d, sm, dm, self.attrs()))
    }

    /// The attributes compared: `--preserve`'s, and a directory's mtime where the destination
    /// keeps directories as folder stubs, which keep it apart from what they hold.
    fn attrs(&self) -> same::Attrs {
        let attrs = self.opts.preserve.attrs();
        same::Attrs {
            dir_times: attrs.times && !self.dst_can().directories,
            ..attrs
        }
    }

    /// The generic path: blocks read from the source, written to the destination. Every read
    /// of a multi-block object names the version seen at its start, so bytes of two versions
    /// are never combined: a local source that changes while read, or a blob rewritten while
    /// downloaded, fails the file instead.
    async fn transfer(&self, job: &Job) -> Result<()> {
        // Into Blob storage, a local file's attributes go as metadata, as a source blob's do.
        let attrs = attr_props(self.attrs_for_blob(job).await?);
        if self.copy_small_now(job, attrs.as_ref()).await? {
            return Ok(());
        }
        let props = self.source_props(job).await?;
        let (version, size, meta) = match self.looks_now() {
            Some(_) => self.version_looked_at(job).await?,
            None => self.version_listed(job, props.as_ref()).await?,
        };
        let version = version.as_deref();
        let props = props.map(|(_, p)| p).or(attrs);
        if size <= self.opts.block_size {
            return self.copy_whole(job, size, version, meta, props).await;
        }
        self.copy_blocks(job, size, version, meta, props).await
    }

    /// The source's filesystem, where a source looked at cheaply is looked at now (a local
    /// file: its mode and current size); one that is not is taken as listed, each read
    /// carrying its metadata.
    fn looks_now(&self) -> Option<&Arc<dyn Filesystem>> {
        self.src_fs.as_ref().filter(|_| self.src_can().cheap_looks)
    }

    /// A file of one block from a source looked at now, read whole with one open and written:
    /// true where that was done (false: it has grown past a block since listed).
    async fn copy_small_now(&self, job: &Job, attrs: Option<&Props>) -> Result<bool> {
        let bs = self.opts.block_size;
        let Some(fs) = self.looks_now().filter(|_| job.src.size() <= bs) else {
            return Ok(false);
        };
        let _mem = self.reserve(job.src.size()).await;
        let mut permit = self.depth.acquire().await;
        let (fs, rel) = (fs.clone(), job.src.path.clone());
        let small = crate::storage::blocking(move || fs.read_small(&rel, bs)).await?;
        let Some((data, meta)) = small else {
            return Ok(false);
        };
        let n = data.len() as u64;
        self.put_small(job, data, meta, attrs).await?;
        permit.done(n);
        Ok(true)
    }

    /// Blob to blob: the source's metadata and content properties go along, taken with the
    /// ETag its bytes are then read at, so that both are of one version.
    async fn source_props(&self, job: &Job) -> Result<Option<(String, Props)>> {
        if !(self.src_can().props && self.dst_can().props) {
            return Ok(None);
        }
        match self.src.version(&job.src.path, true).await? {
            Some(v) if v.size == job.src.size() => Ok(Some((v.token, v.props.unwrap_or_default()))),
            Some(_) => Err(changed_since_listed()),
            None => Err(vanished()),
        }
    }

    /// A source looked at now: its version, size and metadata from a stat taken now.
    async fn version_looked_at(&self, job: &Job) -> Result<(Option<String>, u64, Meta)> {
        let path = &job.src.path;
        let ObjectVersion {
            token: version,
            size: now,
            ..
        } = self.src.version(path, false).await?.ok_or_else(vanished)?;
        match self.src.head(path).await? {
            Some((e, m)) if e.kind == Kind::File && e.size() == now => Ok((Some(version), now, m)),
            Some((e, _)) if e.kind == Kind::File => Err(StoreError::Integrity(
                "the source changed while being copied; not committed".into(),
            )),
            Some(_) => Err(StoreError::Invalid("no longer a regular file".into())),
            None => Err(vanished()),
        }
    }

    /// A source taken as listed (blob sources carry size and metadata in the listing and in
    /// each GET's headers): the version its reads must name, where there is more than one.
    async fn version_listed(
        &self,
        job: &Job,
        props: Option<&(String, Props)>,
    ) -> Result<(Option<String>, u64, Meta)> {
        let (size, bs) = (job.src.size(), self.opts.block_size);
        // One GET is one version; only a download in several ranges needs the ETag.
        let ranges = if self.dst_can().piecewise {
            size.div_ceil(bs.max(DOWNLOAD_RANGE))
        } else {
            size.div_ceil(bs)
        };
        let version = match (ranges > 1, props) {
            (_, Some((v, _))) => Some(v.clone()),
            (true, None) => match self.src.version(&job.src.path, false).await? {
                Some(v) if v.size == size => Some(v.token),
                Some(_) => return Err(changed_since_listed()),
                None => return Err(vanished()),
            },
            (false, None) => None,
        };
        let meta = Meta {
            md5: job.src.md5,
            ..Meta::of_entry(&job.src)
        };
        Ok((version, size, meta))
    }

    /// An object of one block: read whole, written whole.
    async fn copy_whole(
        &self,
        job: &Job,
        size: u64,
        version: Option<&str>,
        mut meta: Meta,
        props: Option<Props>,
    ) -> Result<()> {
        let _mem = self.reserve(size).await;
        let mut permit = self.depth.acquire().await;
        let chunk = self.src.read(&job.src.path, 0, size, version).await?;
        if let Some(m) = chunk.meta {
            meta.complete_from(m);
        }
        // The depth counts requests: a local write, and the flush it waits for, is not one.
        if self.dst_can().piecewise {
            permit.done(size);
            drop(permit);
            return self.put_small(job, chunk.data, meta, None).await;
        }
        self.put_small(job, chunk.data, meta, props.as_ref())
            .await?;
        permit.done(size);
        Ok(())
    }

    /// An object of several blocks: a download streamed into a local file, or an upload of
    /// blocks into Blob storage.
    async fn copy_blocks(
        &self,
        job: &Job,
        size: u64,
        version: Option<&str>,
        mut meta: Meta,
        props: Option<Props>,
    ) -> Result<()> {
        let bs = self.opts.block_size;
        // Local destinations take bytes as they arrive, so their ranges can be large: fewer
        // requests, and memory stays bounded by the budget whatever the range.
        let streamed = self.dst_can().piecewise;
        let plan = UploadPlan {
            size,
            block_size: if streamed { bs.max(DOWNLOAD_RANGE) } else { bs },
            fingerprint: fingerprint(job, size, version),
        };
        let up = self.dst.start_upload(&job.dst_path, &plan).await?;
        if let Some(p) = &props {
            up.keep_props(p);
        }
        let expected_md5 = job.src.md5.filter(|_| self.src_can().md5);
        let need_hash = (self.opts.put_md5 && self.dst_can().md5) || expected_md5.is_some();
        if streamed {
            return self
                .download(job, up, plan, meta, expected_md5, need_hash, version)
                .await;
        }
        // A blob has no holes: where the file had data goes in its metadata instead.
        if let Some(s) = self.sparse_of(job).await? {
            meta.sparse = blob_attrs::sparse_within(Some(s), props.as_ref());
        }
        self.upload(job, up, plan, meta, expected_md5, need_hash, version)
            .await
    }

    /// One request's worth: hashed, checked against what the source promised, written whole.
    async fn put_small(
        &self,
        job: &Job,
        data: Bytes,
        mut meta: Meta,
        props: Option<&Props>,
    ) -> Result<()> {
        let promised = self.src_can().md5;
        let size = data.len() as u64;
        if let Some(t) = &self.throttle {
            t.take(size).await;
        }
        let expected_md5 = job.src.md5.filter(|_| promised);
        let need_hash = (self.opts.put_md5 && self.dst_can().md5) || expected_md5.is_some();
        let digest: Option<[u8; 16]> = need_hash.then(|| hash::digest(&data));
        check_md5(expected_md5.or(meta.md5.filter(|_| promised)), digest)?;
        meta.md5 = digest.filter(|_| self.opts.put_md5);
        if self.dst_can().props {
            meta.sparse = blob_attrs::sparse_within(meta.sparse.take(), props);
        }
        match props.filter(|_| self.dst_can().props) {
            Some(p) => {
                self.dst
                    .put_node(&job.dst_path, Kind::File, data, &self.kept(meta), Some(p))
                    .await?
            }
            None => self.dst.put(&job.dst_path, data, &self.kept(meta)).await?,
        }
        Stats::add(&self.stats.blocks_sent, 1);
        Stats::add(&self.stats.bytes_copied, size);
        Ok(())
    }

    /// Blocks to Blob storage: read in order (one MD5 over the whole object), sent out of
    /// order, each holding its bytes of the memory budget and a slot of the depth.
    #[allow(clippy::too_many_arguments)]
    async fn upload(
        &self,
        job: &Job,
        up: Box<dyn crate::storage::Upload>,
        plan: UploadPlan,
        mut meta: Meta,
        expected_md5: Option<[u8; 16]>,
        need_hash: bool,
        version: Option<&str>,
    ) -> Result<()> {
        let path = &job.src.path;
        let promised = self.src_can().md5;
        let mut hasher = Md5::new();
        let mut first_meta: Option<Meta> = None;
        let ahead = self.depth.ceiling().max(1);
        // A blob's block ID and its transactional check need the block's own MD5: taken in the
        // object's pass, the two cost little more than one.
        let block_md5 = self.dst_can().md5;
        // Up to `ahead` blocks are read, in order, while up to `ahead` read ones are sent.
        let result: Result<()> = async {
            let mut reading = FuturesOrdered::new();
            let mut sending = FuturesUnordered::new();
            let mut next = 0;
            loop {
                while next < plan.blocks() && reading.len() < ahead {
                    reading.push_back(self.read_block(path, &plan, next, version));
                    next += 1;
                }
                tokio::select! {
                    Some(read) = reading.next(), if sending.len() < ahead => {
                        let (i, data, permit, mem, m) = read?;
                        let md5 = match (need_hash, block_md5) {
                            (true, true) => Some(hasher.update_block(&data)),
                            (false, true) => Some(hash::digest(&data)),
                            (true, false) => {
                                hasher.update(&data);
                                None
                            }
                            (false, false) => None,
                        };
                        if first_meta.is_none() {
                            first_meta = m;
                        }
                        sending.push(self.send_block(&*up, i, data, md5, permit, mem));
                    }
                    Some(sent) = sending.next() => sent?,
                    else => return Ok(()),
                }
            }
        }
        .await;
        if let Err(e) = result {
            up.abort(e.discards_staged()).await;
            return Err(e);
        }
        if let Some(m) = first_meta {
            meta.complete_from(m);
        }
        let digest: Option<[u8; 16]> = need_hash.then(|| hasher.finalize());
        if let Err(e) = check_md5(expected_md5.or(meta.md5.filter(|_| promised)), digest) {
            up.abort(true).await;
            return Err(e);
        }
        meta.md5 = digest.filter(|_| self.opts.put_md5);
        up.commit(&self.kept(meta)).await
    }

    /// Block `i` of an upload, read whole, holding its share of memory and a slot of the depth.
    async fn read_block(
        &self,
        path: &[u8],
        plan: &UploadPlan,
        i: u64,
        version: Option<&str>,
    ) -> Result<(u64, Bytes, Permit<'_>, OwnedSemaphorePermit, Option<Meta>)> {
        let len = plan.block_len(i);
        let mem = self.reserve(len).await;
        let permit = self.depth.acquire().await;
        // Every block is read, even one an earlier attempt staged: only its bytes can tell
        // whether the staged copy is still the source's.
        let chunk = self
            .src
            .read(path, i * plan.block_size, len, version)
            .await?;
        if let Some(t) = &self.throttle {
            t.take(len).await;
        }
        Ok((i, chunk.data, permit, mem, chunk.meta))
    }

    async fn send_block(
        &self,
        up: &dyn Upload,
        i: u64,
        data: Bytes,
        md5: Option<[u8; 16]>,
        mut permit: Permit<'_>,
        mem: OwnedSemaphorePermit,
    ) -> Result<()> {
        let n = data.len() as u64;
        if up.put_block(i, data, md5).await? {
            Stats::add(&self.stats.blocks_sent, 1);
            Stats::add(&self.stats.bytes_copied, n);
        } else {
            Stats::add(&self.stats.blocks_reused, 1);
            Stats::add(&self.stats.bytes_skipped, n);
        }
        permit.done(n);
        drop((permit, mem));
        Ok(())
    }
}

/// Smallest range a download asks for: fewer, larger requests move more bytes per second, and
/// eight of them fit the default memory budget (a range is held until it is hashed).
pub const DOWNLOAD_RANGE: u64 = 8 << 20;

/// A copy acts on every verdict: what the listings leave undecided is copied.
fn settled(v: Verdict) -> Verdict {
    match v {
        Verdict::Undecided => Verdict::Changed,
        v => v,
    }
}

/// A blob's metadata beyond ferry's POSIX keys: the `ferry_xattrs` value, where there is one.
fn attr_props(value: StoredXattrs) -> Option<Props> {
    value.flatten().map(|v| Props {
        metadata: [(crate::storage::metadata::xattrs::KEY.to_string(), v)].into(),
        ..Default::default()
    })
}

/// Why a fifo, socket or device node is not copied to this destination.
pub fn special_not_held(kind: Kind) -> &'static str {
    match kind {
        Kind::Socket => {
            "socket (made by the program that listens on it; never copied, as cp -a and rsync do)"
        }
        Kind::Fifo => "fifo (blob storage holds none)",
        _ => "device node (blob storage holds none)",
    }
}

fn panicked(p: Box<dyn std::any::Any + Send>) -> StoreError {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    StoreError::Invalid(format!(
        "internal error (a bug in ferry; please report it): {what}"
    ))
}

/// What a download's journal of finished ranges is kept for: reused only for this very
/// version of the source.
fn fingerprint(job: &Job, size: u64, version: Option<&str>) -> String {
    format!(
        "{}:{}:{}:{}",
        size,
        job.src.mtime.map(|m| m.to_string()).unwrap_or_default(),
        job.src
            .md5
            .map(|m| crate::manifest::md5_hex(&m))
            .unwrap_or_default(),
        version.unwrap_or_default().replace(' ', "_")
    )
}

fn vanished() -> StoreError {
    StoreError::NotFound("vanished from the source".into())
}

fn changed_since_listed() -> StoreError {
    StoreError::Integrity("the blob changed since it was listed (size differs); not copied".into())
}

fn check_md5(expected: Option<[u8; 16]>, got: Option<[u8; 16]>) -> Result<()> {
    match (expected, got) {
        (Some(e), Some(g)) if e != g => Err(StoreError::Integrity(format!(
            "MD5 mismatch: source says {}, received bytes hash to {}",
            crate::manifest::md5_hex(&e),
            crate::manifest::md5_hex(&g)
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStore;

    pub(super) fn options(compare: Compare) -> EngineOptions {
        EngineOptions {
            compare,
            parallel_files: 2,
            block_size: 1 << 20,
            put_md5: false,
            max_bandwidth: None,
            memory: 64 << 20,
            finish_root: false,
            server_copy: false,
            preserve: Preserve::ALL,
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_panic_in_one_local_copy_fails_that_file_and_keeps_the_others() {
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("src"), t.path().join("dst"));
        std::fs::create_dir(&src).unwrap();
        for n in ["ok.txt", "panic-here"] {
            std::fs::write(src.join(n), n).unwrap();
        }
        let stats = Arc::new(Stats::default());
        let depth = Arc::new(Depth::fixed(2));
        let engine = Arc::new(Engine::new(
            Arc::new(LocalStore::new(src, true)),
            Arc::new(LocalStore::new(dst.clone(), true)),
            options(Compare::None),
            stats.clone(),
            depth,
            None,
        ));
        let jobs = ["ok.txt", "panic-here"].map(|n| Job {
            src: Entry::file(n, n.len() as u64),
            dst_path: n.as_bytes().to_vec(),
        });
        engine.run(jobs.to_vec()).await;
        assert_eq!(
            (
                Stats::get(&stats.files_copied),
                Stats::get(&stats.files_failed)
            ),
            (1, 1)
        );
        let failures = stats.failures();
        assert_eq!(failures[0].0, "panic-here");
        assert!(failures[0].1.contains("internal error"), "{failures:?}");
        assert_eq!(std::fs::read(dst.join("ok.txt")).unwrap(), b"ok.txt");
        assert!(!dst.join("panic-here").exists());
    }
}
