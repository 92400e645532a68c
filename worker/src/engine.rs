//! The copy engine. Files run in parallel (`parallel_files`); blocks of all files share one
//! in-flight budget (`concurrency`), which also bounds memory to about concurrency × block size.
//! Per file, blocks are read in order so one MD5 covers the whole object, and sent out of order.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::{FutureExt, StreamExt, TryStreamExt};
use md5::{Digest, Md5};
use tokio::sync::Semaphore;

use crate::error::{Result, StoreError};
use crate::localcopy;
use crate::manifest::{Entry, Kind};
use crate::stats::Stats;
use crate::storage::{Meta, Store, UploadPlan};
use crate::throttle::Throttle;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compare {
    /// Skip when sizes match.
    Size,
    /// Skip when size and modification time match (rsync's quick check).
    SizeMtime,
    /// Skip when content MD5 matches (hashes local files; uses Content-MD5 on blobs).
    Md5,
    /// Always copy.
    None,
}

#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub compare: Compare,
    pub concurrency: usize,
    pub parallel_files: usize,
    pub block_size: u64,
    pub put_md5: bool,
    pub max_bandwidth: Option<u64>,
    /// Let the destination copy files itself where it can (`Store::can_copy_from`).
    pub server_copy: bool,
}

/// One file to consider: where it is in the source, and where it goes.
#[derive(Clone, Debug)]
pub struct Job {
    pub src: Entry,
    pub dst_path: Vec<u8>,
}

pub struct Engine {
    pub src: Arc<dyn Store>,
    pub dst: Arc<dyn Store>,
    pub opts: EngineOptions,
    pub stats: Arc<Stats>,
    inflight: Arc<Semaphore>,
    throttle: Option<Throttle>,
    /// The destination's listing, when it is a blob store (a HEAD per file would cost more).
    dst_index: Option<HashMap<Vec<u8>, Entry>>,
}

enum Outcome {
    Copied,
    ServerCopied,
    Skipped,
    Ignored(&'static str),
}

impl Engine {
    pub fn new(src: Arc<dyn Store>, dst: Arc<dyn Store>, opts: EngineOptions, stats: Arc<Stats>, dst_index: Option<HashMap<Vec<u8>, Entry>>) -> Self {
        Engine {
            inflight: Arc::new(Semaphore::new(opts.concurrency.max(1))),
            throttle: opts.max_bandwidth.map(Throttle::new),
            src,
            dst,
            opts,
            stats,
            dst_index,
        }
    }

    fn both_local(&self) -> bool {
        self.src.local_root().is_some() && self.dst.local_root().is_some()
    }

    /// Runs every job; per-file failures are recorded in the stats, never abort the others. A
    /// panic in one file's work fails that file (it is a bug, but one file's bug must not lose
    /// the outcomes of the others, nor end with exit 0).
    pub async fn run(self: &Arc<Self>, jobs: Vec<Job>) {
        let (dirs, files): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(|j| j.src.kind == Kind::Dir);
        if self.both_local() {
            let me = self.clone();
            let rt = tokio::runtime::Handle::current();
            if let Err(e) = tokio::task::spawn_blocking(move || me.run_local(&files, &rt)).await {
                self.stats.failed(self.dst.describe(), format!("internal error: the copy threads failed: {e}"));
            }
            self.finish_dirs(dirs).await;
        } else {
            futures::stream::iter(files)
                .for_each_concurrent(self.opts.parallel_files.max(1), |job| {
                    let me = self.clone();
                    async move {
                        let outcome = std::panic::AssertUnwindSafe(me.one(&job)).catch_unwind().await.unwrap_or_else(|p| Err(panicked(p)));
                        me.record(&job, outcome);
                    }
                })
                .await;
        }
        if let Some(local) = self.dst.as_local() {
            let local = local.clone();
            match tokio::task::spawn_blocking(move || local.sync()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => self.stats.failed(self.dst.describe(), format!("cannot flush the destination to disk: {e}")),
                Err(e) => self.stats.failed(self.dst.describe(), format!("internal error: {e}")),
            }
        }
    }

    fn record(&self, job: &Job, outcome: Result<Outcome>) {
        match outcome {
            Ok(Outcome::Copied) => Stats::add(&self.stats.files_copied, 1),
            Ok(Outcome::ServerCopied) => self.stats.server_copied(job.src.size()),
            Ok(Outcome::Skipped) => {
                Stats::add(&self.stats.files_skipped, 1);
                Stats::add(&self.stats.bytes_skipped, job.src.size());
            }
            Ok(Outcome::Ignored(why)) => self.stats.ignored(job.src.display_path(), why),
            Err(e) => self.stats.failed(job.src.display_path(), e.to_string()),
        }
    }

    /// local → local on plain threads pulling from a shared index: per-file work is a handful
    /// of system calls, and handing each file to an async pool would cost more than that.
    fn run_local(&self, files: &[Job], rt: &tokio::runtime::Handle) {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let id = localcopy::Identity::current();
        std::thread::scope(|s| {
            for _ in 0..self.opts.parallel_files.clamp(1, files.len().max(1)) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(job) = files.get(i) else { break };
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.one_local(job, &id, rt))).unwrap_or_else(|p| Err(panicked(p)));
                    self.record(job, outcome);
                });
            }
        });
    }

    fn one_local(&self, job: &Job, id: &localcopy::Identity, rt: &tokio::runtime::Handle) -> Result<Outcome> {
        let (Some(src), Some(dst)) = (self.src.as_local(), self.dst.as_local()) else { unreachable!("both local") };
        #[cfg(test)]
        if job.src.path == b"panic-here" {
            panic!("a test asked for a panic");
        }
        let src_err = |e| StoreError::io(src.full_path(&job.src.path).display().to_string(), e);
        let dst_err = |e| StoreError::io(dst.full_path(&job.dst_path).display().to_string(), e);
        if self.opts.compare != Compare::None {
            if let Some(md) = dst.lstat(&job.dst_path).map_err(dst_err)? {
                if let Some(d) = crate::storage::local::entry_of(job.dst_path.clone(), &md) {
                    let differs = match differs_by_metadata(self.opts.compare, &job.src, &d) {
                        Some(x) => x,
                        None => src.md5(&job.src.path).map_err(src_err)? != dst.md5(&job.dst_path).map_err(dst_err)?,
                    };
                    if !differs {
                        return Ok(Outcome::Skipped);
                    }
                }
            }
        }
        let n = match job.src.kind {
            Kind::Symlink => localcopy::copy_symlink(src, dst, &job.src.path, &job.dst_path).map(|_| 0),
            _ => localcopy::copy_file(src, dst, &job.src.path, &job.dst_path, id),
        }
        .map_err(src_err)?;
        if let Some(t) = &self.throttle {
            rt.block_on(t.take(n));
        }
        Stats::add(&self.stats.bytes_copied, n);
        Ok(Outcome::Copied)
    }

    async fn finish_dirs(&self, mut dirs: Vec<Job>) {
        let (Some(src), Some(dst)) = (self.src.as_local(), self.dst.as_local()) else { return };
        // Deepest first, so setting a parent's mtime comes after its children are done.
        dirs.sort_by(|a, b| b.dst_path.len().cmp(&a.dst_path.len()));
        let (src, dst) = (src.clone(), dst.clone());
        let stats = self.stats.clone();
        let done = tokio::task::spawn_blocking(move || {
            for d in dirs {
                let r = src
                    .lstat(&d.src.path)
                    .and_then(|md| md.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound)))
                    .and_then(|md| localcopy::finish_dir(&dst, &d.dst_path, &crate::storage::local::meta_of(&md)));
                if let Err(e) = r {
                    stats.failed(d.src.display_path(), format!("directory: {e}"));
                }
            }
        })
        .await;
        if let Err(e) = done {
            self.stats.failed(self.dst.describe(), format!("internal error while setting directory metadata: {e}"));
        }
    }

    async fn one(&self, job: &Job) -> Result<Outcome> {
        let dst_is_blob = self.dst.local_root().is_none();
        if job.src.kind == Kind::Symlink && (dst_is_blob || self.src.local_root().is_none()) {
            return Ok(Outcome::Ignored("symlink (blob storage has no symlinks)"));
        }
        if !self.needs_copy(job).await? {
            return Ok(Outcome::Skipped);
        }
        if self.server_side(job) {
            return self.dst.copy_from(&*self.src, &job.src, &job.dst_path).await.map(|_| Outcome::ServerCopied);
        }
        self.transfer(job).await.map(|_| Outcome::Copied)
    }

    /// Whether the destination copies this file itself. Only with a Content-MD5 to carry over:
    /// without one, the streamed copy computes it, and the blob gets one like every upload.
    pub fn server_side(&self, job: &Job) -> bool {
        self.opts.server_copy && (job.src.md5.is_some() || !self.opts.put_md5)
    }

    async fn local_md5(&self, store: &Arc<dyn Store>, path: &[u8]) -> Result<Option<[u8; 16]>> {
        let Some(local) = store.as_local() else { return Ok(None) };
        let (local, rel) = (local.clone(), path.to_vec());
        tokio::task::spawn_blocking(move || local.md5(&rel).map(Some).map_err(|e| StoreError::io(local.full_path(&rel).display().to_string(), e)))
            .await
            .map_err(|e| StoreError::Invalid(e.to_string()))?
    }

    pub async fn needs_copy(&self, job: &Job) -> Result<bool> {
        if self.opts.compare == Compare::None {
            return Ok(true);
        }
        let existing = match &self.dst_index {
            Some(idx) => idx.get(&job.dst_path).cloned(),
            None => self.dst.head(&job.dst_path).await?.map(|(e, _)| e),
        };
        let Some(d) = existing else { return Ok(true) };
        if let Some(decided) = differs_by_metadata(self.opts.compare, &job.src, &d) {
            return Ok(decided);
        }
        let sm = match job.src.md5 {
            Some(m) => Some(m),
            None => self.local_md5(&self.src, &job.src.path).await?,
        };
        let dm = match d.md5 {
            Some(m) => Some(m),
            None => self.local_md5(&self.dst, &job.dst_path).await?,
        };
        // Unknown on either side: copying is the only way to be sure.
        Ok(!matches!((sm, dm), (Some(a), Some(b)) if a == b))
    }

    /// The generic path: blocks read from the source, written to the destination. Every read
    /// of a multi-block object names the version seen at its start, so bytes of two versions
    /// are never combined: a local source that changes while read, or a blob rewritten while
    /// downloaded, fails the file instead.
    async fn transfer(&self, job: &Job) -> Result<()> {
        let path = &job.src.path;
        let local_src = self.src.local_root().is_some();
        let bs = self.opts.block_size;
        // Local sources: stat now for mode and the current size; blob sources carry both in
        // the listing and in each GET's headers.
        let (version, size, mut meta) = if local_src {
            let (version, now) = self.src.version(path).await?.ok_or_else(|| StoreError::NotFound("vanished from the source".into()))?;
            match self.src.head(path).await? {
                Some((e, m)) if e.kind == Kind::File && e.size() == now => (Some(version), now, Meta { uid: None, gid: None, ..m }),
                Some((e, _)) if e.kind == Kind::File => return Err(StoreError::Integrity("the source changed while being copied; not committed".into())),
                Some(_) => return Err(StoreError::Invalid("no longer a regular file".into())),
                None => return Err(StoreError::NotFound("vanished from the source".into())),
            }
        } else {
            let size = job.src.size();
            // One GET is one version; only a download in several ranges needs the ETag.
            let ranges = if self.dst.local_root().is_some() { size.div_ceil(bs.max(DOWNLOAD_RANGE)) } else { size.div_ceil(bs) };
            let version = match ranges > 1 {
                true => match self.src.version(path).await? {
                    Some((v, now)) if now == size => Some(v),
                    Some(_) => return Err(StoreError::Integrity("the blob changed since it was listed (size differs); not copied".into())),
                    None => return Err(StoreError::NotFound("vanished from the source".into())),
                },
                false => None,
            };
            (version, size, Meta { mtime: job.src.mtime, md5: job.src.md5, ..Meta::default() })
        };
        let version = version.as_deref();
        let expected_md5 = job.src.md5.filter(|_| !local_src);
        let need_hash = (self.opts.put_md5 && self.dst.local_root().is_none()) || expected_md5.is_some();

        if size <= bs {
            let permit = self.inflight.acquire().await.expect("semaphore open");
            let chunk = self.src.read(path, 0, size, version).await?;
            if let Some(t) = &self.throttle {
                t.take(size).await;
            }
            if let Some(m) = chunk.meta {
                merge(&mut meta, m);
            }
            let digest: Option<[u8; 16]> = need_hash.then(|| Md5::digest(&chunk.data).into());
            check_md5(expected_md5.or(meta.md5.filter(|_| !local_src)), digest)?;
            meta.md5 = digest.filter(|_| self.opts.put_md5);
            self.dst.put(&job.dst_path, chunk.data, &meta).await?;
            drop(permit);
            Stats::add(&self.stats.blocks_sent, 1);
            Stats::add(&self.stats.bytes_copied, size);
            return Ok(());
        }

        // A download's journal of finished ranges is reused only for this very version.
        let fingerprint = format!(
            "{}:{}:{}:{}",
            size,
            job.src.mtime.map(|m| m.to_string()).unwrap_or_default(),
            job.src.md5.map(|m| crate::manifest::md5_hex(&m)).unwrap_or_default(),
            version.unwrap_or_default().replace(' ', "_")
        );
        // Local destinations take bytes as they arrive, so their ranges can be large: fewer
        // requests, and memory stays at one write buffer per request whatever the range.
        let streamed = self.dst.local_root().is_some();
        let plan = UploadPlan { size, block_size: if streamed { bs.max(DOWNLOAD_RANGE) } else { bs }, fingerprint };
        let up = self.dst.start_upload(&job.dst_path, &plan).await?;
        if up.piecewise() {
            return self.download(job, up, plan, meta, expected_md5, need_hash, version).await;
        }
        let mut hasher = Md5::new();
        let mut first_meta: Option<Meta> = None;
        let result: Result<()> = {
            let up_ref = &*up;
            let plan = &plan;
            futures::stream::iter(0..plan.blocks())
                .map(|i| async move {
                    let permit = self.inflight.clone().acquire_owned().await.expect("semaphore open");
                    let len = plan.block_len(i);
                    // Every block is read, even one an earlier attempt staged: only its bytes
                    // can tell whether the staged copy is still the source's.
                    let chunk = self.src.read(path, i * bs, len, version).await?;
                    if let Some(t) = &self.throttle {
                        t.take(len).await;
                    }
                    Ok::<_, StoreError>((i, chunk.data, permit, chunk.meta))
                })
                .buffered(self.opts.concurrency.max(1))
                .map_ok(|(i, data, permit, m): (u64, Bytes, _, Option<Meta>)| {
                    if need_hash {
                        hasher.update(&data);
                    }
                    if first_meta.is_none() {
                        first_meta = m;
                    }
                    async move {
                        let n = data.len() as u64;
                        if up_ref.put_block(i, data).await? {
                            Stats::add(&self.stats.blocks_sent, 1);
                            Stats::add(&self.stats.bytes_copied, n);
                        } else {
                            Stats::add(&self.stats.blocks_reused, 1);
                            Stats::add(&self.stats.bytes_skipped, n);
                        }
                        drop(permit);
                        Ok(())
                    }
                })
                .try_buffer_unordered(self.opts.concurrency.max(1))
                .try_for_each(|_| async { Ok(()) })
                .await
        };
        if let Err(e) = result {
            up.abort(matches!(e, StoreError::Integrity(_))).await;
            return Err(e);
        }
        if let Some(m) = first_meta {
            merge(&mut meta, m);
        }
        let digest: Option<[u8; 16]> = need_hash.then(|| hasher.finalize().into());
        if let Err(e) = check_md5(expected_md5.or(meta.md5.filter(|_| !local_src)), digest) {
            up.abort(true).await;
            return Err(e);
        }
        meta.md5 = digest.filter(|_| self.opts.put_md5);
        up.commit(&meta).await
    }
}

impl Engine {
    /// Ranges stream into the destination in `WRITE_BUFFER` pieces. A follower hashes blocks
    /// back from the destination as the contiguous finished prefix grows, so the MD5 check
    /// overlaps the transfer instead of re-reading the file at the end.
    #[allow(clippy::too_many_arguments)]
    async fn download(&self, job: &Job, up: Box<dyn crate::storage::Upload>, plan: UploadPlan, mut meta: Meta, expected_md5: Option<[u8; 16]>, need_hash: bool, version: Option<&str>) -> Result<()> {
        let path = &job.src.path;
        let up_ref = &*up;
        let plan = &plan;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
        let fetching = async move {
            let first_meta = futures::stream::iter(0..plan.blocks())
                .map(|i| {
                    let tx = tx.clone();
                    async move {
                        let _permit = self.inflight.acquire().await.expect("semaphore open");
                        let len = plan.block_len(i);
                        if up_ref.staged(i) {
                            Stats::add(&self.stats.blocks_reused, 1);
                            Stats::add(&self.stats.bytes_skipped, len);
                            let _ = tx.send(i);
                            return Ok(None);
                        }
                        let (m, mut body) = self.src.read_stream(path, i * plan.block_size, len, version).await?;
                        let mut buf = bytes::BytesMut::with_capacity(WRITE_BUFFER.min(len as usize));
                        let mut written = 0u64;
                        while let Some(c) = body.next().await {
                            let c = c?;
                            if let Some(t) = &self.throttle {
                                t.take(c.len() as u64).await;
                            }
                            Stats::add(&self.stats.bytes_copied, c.len() as u64);
                            buf.extend_from_slice(&c);
                            if buf.len() >= WRITE_BUFFER {
                                let piece = buf.split().freeze();
                                let n = piece.len() as u64;
                                up_ref.write_at(i, written, piece).await?;
                                written += n;
                            }
                        }
                        if !buf.is_empty() {
                            let n = buf.len() as u64;
                            up_ref.write_at(i, written, buf.freeze()).await?;
                            written += n;
                        }
                        if written != len {
                            return Err(StoreError::Integrity(format!("short read: got {written} of {len} bytes")));
                        }
                        up_ref.finish_block(i).await?;
                        Stats::add(&self.stats.blocks_sent, 1);
                        let _ = tx.send(i);
                        Ok::<_, StoreError>(m)
                    }
                })
                .buffer_unordered(self.opts.concurrency.max(1))
                .try_fold(None, |acc: Option<Meta>, m| async move { Ok(acc.or(m)) })
                .await;
            // Every sender is gone once the blocks are done: the follower then sees the end.
            drop(tx);
            first_meta
        };
        let hashing = async move {
            let mut h = Md5::new();
            let mut done = std::collections::BTreeSet::new();
            let mut next = 0u64;
            while let Some(i) = rx.recv().await {
                if !need_hash {
                    continue;
                }
                done.insert(i);
                while done.remove(&next) {
                    let data = up_ref.read_back(next).await?.expect("piecewise stores read back");
                    h.update(&data);
                    next += 1;
                }
            }
            Ok::<_, StoreError>((need_hash && next == plan.blocks()).then(|| h.finalize().into()))
        };
        let (fetched, hashed) = tokio::join!(fetching, hashing);
        let digest: Option<[u8; 16]> = match (fetched, hashed) {
            (Ok(m), Ok(d)) => {
                if let Some(m) = m {
                    merge(&mut meta, m);
                }
                d
            }
            (Err(e), _) | (_, Err(e)) => {
                up.abort(matches!(e, StoreError::Integrity(_))).await;
                return Err(e);
            }
        };
        if let Err(e) = check_md5(expected_md5.or(meta.md5), digest) {
            up.abort(true).await;
            return Err(e);
        }
        up.commit(&meta).await
    }
}

/// Smallest range a download asks for: on the emulator and on Azure alike, fewer, larger
/// requests move more bytes per second.
const DOWNLOAD_RANGE: u64 = 16 << 20;
const WRITE_BUFFER: usize = 1 << 20;

/// Whether the destination entry differs from the source by what the listings say; None
/// when only content hashes can tell (`--compare md5` without both MD5s known).
pub fn differs_by_metadata(compare: Compare, s: &Entry, d: &Entry) -> Option<bool> {
    if compare == Compare::None || d.kind != s.kind || d.size != s.size {
        return Some(true);
    }
    match compare {
        Compare::Size | Compare::None => Some(false),
        Compare::SizeMtime => Some(d.mtime != s.mtime),
        Compare::Md5 => match (s.md5, d.md5) {
            (Some(a), Some(b)) => Some(a != b),
            _ => None,
        },
    }
}

fn panicked(p: Box<dyn std::any::Any + Send>) -> StoreError {
    let what = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default();
    StoreError::Invalid(format!("internal error (a bug in ferry; please report it): {what}"))
}

/// Fills in what the listing did not know from what the read returned.
fn merge(meta: &mut Meta, from_read: Meta) {
    meta.mtime = meta.mtime.or(from_read.mtime);
    meta.mode = meta.mode.or(from_read.mode);
    meta.md5 = meta.md5.or(from_read.md5);
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
    use crate::storage::local::LocalStore;

    #[tokio::test(flavor = "multi_thread")]
    async fn a_panic_in_one_local_copy_fails_that_file_and_keeps_the_others() {
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("src"), t.path().join("dst"));
        std::fs::create_dir(&src).unwrap();
        for n in ["ok.txt", "panic-here"] {
            std::fs::write(src.join(n), n).unwrap();
        }
        let stats = Arc::new(Stats::default());
        let opts = EngineOptions { compare: Compare::None, concurrency: 2, parallel_files: 2, block_size: 1 << 20, put_md5: false, max_bandwidth: None, server_copy: false };
        let engine = Arc::new(Engine::new(Arc::new(LocalStore::new(src, true)), Arc::new(LocalStore::new(dst.clone(), true)), opts, stats.clone(), None));
        let jobs = ["ok.txt", "panic-here"].map(|n| Job { src: Entry::file(n, n.len() as u64), dst_path: n.as_bytes().to_vec() });
        engine.run(jobs.to_vec()).await;
        assert_eq!((Stats::get(&stats.files_copied), Stats::get(&stats.files_failed)), (1, 1));
        let failures = stats.failures();
        assert_eq!(failures[0].0, "panic-here");
        assert!(failures[0].1.contains("internal error"), "{failures:?}");
        assert_eq!(std::fs::read(dst.join("ok.txt")).unwrap(), b"ok.txt");
        assert!(!dst.join("panic-here").exists());
    }
}
