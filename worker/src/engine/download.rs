//! Blob → local, for objects of more than one range. Ranges are fetched in parallel and
//! streamed to their place in a temp file, and their bytes are hashed as they arrive, in
//! order, with no second read of what was written.
//!
//! A range that arrives ahead of the hashing point keeps its bytes in memory until the hasher
//! gets to it, so how far ahead ranges may run is bounded by the memory budget: each range
//! holds its length of it until hashed. Ranges take their share in order, so the range the
//! hasher waits for always has its share, and the ranges after it can only wait for it, never
//! starve it.

use crate::hash::Md5;
use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::OwnedSemaphorePermit;

use super::{check_md5, Engine, Job};
use crate::error::{Result, StoreError};
use crate::stats::Stats;
use crate::storage::{Meta, Upload, UploadPlan};

/// Bytes gathered before one write: large enough that a write is one system call per MiB,
/// small enough to keep a range's memory close to what has arrived.
const WRITE_BUFFER: usize = 1 << 20;

/// One range for the hasher: its pieces as they arrive, and its share of the memory budget,
/// given back once hashed.
type ForHasher = (UnboundedReceiver<Vec<Bytes>>, OwnedSemaphorePermit);

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn download(
        &self,
        job: &Job,
        up: Box<dyn Upload>,
        plan: UploadPlan,
        mut meta: Meta,
        expected_md5: Option<[u8; 16]>,
        need_hash: bool,
        version: Option<&str>,
    ) -> Result<()> {
        let (to_hasher, ranges) = std::sync::mpsc::channel::<ForHasher>();
        // On a thread of its own: MD5 is CPU work, kept off the runtime's threads.
        let hasher = need_hash.then(|| {
            tokio::task::spawn_blocking(move || {
                let mut h = Md5::new();
                for (mut pieces, share) in ranges {
                    while let Some(batch) = pieces.blocking_recv() {
                        batch.iter().for_each(|p| h.update(p));
                    }
                    drop(share);
                }
                h.finalize()
            })
        });
        let fetched: Result<Option<Meta>> = async {
            let (ceiling, blocks) = (self.depth.ceiling().max(1), plan.blocks());
            let mut running = FuturesUnordered::new();
            let mut found: Option<Meta> = None;
            let mut i = 0;
            while i < blocks || !running.is_empty() {
                if i == blocks || running.len() == ceiling {
                    if let Some(m) = running.next().await {
                        found = found.or(m?);
                    }
                    continue;
                }
                // One range at a time takes its share of memory, in order (see above), while
                // the ranges in flight go on.
                let reserve = self.reserve(plan.block_len(i));
                tokio::pin!(reserve);
                let share = loop {
                    tokio::select! {
                        share = &mut reserve => break share,
                        Some(m) = running.next() => found = found.or(m?),
                    }
                };
                let (hash_tx, share) = if need_hash {
                    let (tx, rx) = unbounded_channel();
                    let _ = to_hasher.send((rx, share));
                    (Some(tx), None)
                } else {
                    (None, Some(share))
                };
                running.push(self.fetch_range(job, &*up, &plan, i, version, hash_tx, share));
                i += 1;
            }
            Ok(found)
        }
        .await;
        // Every range has been handed over: the hasher ends once it has hashed them all.
        drop(to_hasher);
        let digest = match hasher {
            Some(h) => Some(
                h.await
                    .map_err(|e| StoreError::Invalid(format!("hashing thread failed: {e}")))?,
            ),
            None => None,
        };
        match fetched {
            Ok(m) => {
                if let Some(m) = m {
                    meta.complete_from(m);
                }
            }
            Err(e) => {
                up.abort(e.discards_staged()).await;
                return Err(e);
            }
        }
        if let Err(e) = check_md5(expected_md5.or(meta.md5), digest) {
            up.abort(true).await;
            return Err(e);
        }
        up.commit(&self.kept(meta)).await
    }

    /// Fetches range `i` into its place, handing its bytes to the hasher as they come; a range
    /// an earlier attempt finished (the journal says so) is read back for the hasher instead.
    #[allow(clippy::too_many_arguments)]
    async fn fetch_range(
        &self,
        job: &Job,
        up: &dyn Upload,
        plan: &UploadPlan,
        i: u64,
        version: Option<&str>,
        hash_tx: Option<UnboundedSender<Vec<Bytes>>>,
        _share: Option<OwnedSemaphorePermit>,
    ) -> Result<Option<Meta>> {
        let len = plan.block_len(i);
        if up.staged(i) {
            Stats::add(&self.stats.blocks_reused, 1);
            Stats::add(&self.stats.bytes_skipped, len);
            if let Some(tx) = hash_tx {
                let data = up.read_back(i).await?.expect("piecewise stores read back");
                let _ = tx.send(vec![data]);
            }
            return Ok(None);
        }
        let mut permit = self.depth.acquire().await;
        let (m, mut body) = self
            .src
            .read_stream(&job.src.path, i * plan.block_size, len, version)
            .await?;
        // Each range's response says whether the file was sparse at the source (one version:
        // every range reads at one ETag).
        let sparse = m
            .as_ref()
            .and_then(|m| m.sparse.clone())
            .filter(|_| self.opts.preserve.sparse);
        let mut pieces: Vec<Bytes> = Vec::new();
        let (mut gathered, mut written) = (0usize, 0u64);
        loop {
            let next = body.next().await.transpose()?;
            if let Some(c) = &next {
                if let Some(t) = &self.throttle {
                    t.take(c.len() as u64).await;
                }
                Stats::add(&self.stats.bytes_copied, c.len() as u64);
                gathered += c.len();
            }
            let end = next.is_none();
            pieces.extend(next);
            if gathered >= WRITE_BUFFER || (end && gathered > 0) {
                let batch = std::mem::take(&mut pieces);
                if let Some(tx) = &hash_tx {
                    let _ = tx.send(batch.clone());
                }
                up.write_at(i, written, batch, sparse.as_ref()).await?;
                written += gathered as u64;
                gathered = 0;
            }
            if end {
                break;
            }
        }
        if written != len {
            return Err(StoreError::ShortRead(format!(
                "short read: got {written} of {len} bytes"
            )));
        }
        up.finish_block(i).await?;
        Stats::add(&self.stats.blocks_sent, 1);
        permit.done(len);
        Ok(m)
    }
}
