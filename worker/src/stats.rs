//! Counters shared by the engine, the stores' retry loops and the progress display.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

#[derive(Default)]
pub struct Stats {
    pub files_total: AtomicU64,
    pub files_copied: AtomicU64,
    pub files_skipped: AtomicU64,
    pub files_failed: AtomicU64,
    pub files_ignored: AtomicU64,
    /// Files, directories and nodes whose bytes were the same and whose metadata was set.
    pub meta_updated: AtomicU64,
    /// Entries of another kind removed from the destination to make way (a type change).
    pub replaced: AtomicU64,
    /// Of `files_copied`, those the service copied itself (Copy Blob); the rest were streamed.
    pub files_server_copied: AtomicU64,
    pub bytes_total: AtomicU64,
    /// Set once `files_total` and `bytes_total` are the whole run's: before, a progress file
    /// says the totals are unknown rather than showing a total that is still growing.
    totals_known: AtomicBool,
    pub bytes_copied: AtomicU64,
    pub bytes_skipped: AtomicU64,
    /// Of `bytes_copied`, those of server-side copies.
    pub bytes_server_copied: AtomicU64,
    /// verify: files judged the same, and the bytes of every source file judged whatever the
    /// verdict (those not the same count under `files_failed`), so that a verify's progress
    /// reads like a copy's.
    pub files_verified: AtomicU64,
    pub bytes_verified: AtomicU64,
    pub blocks_sent: AtomicU64,
    pub blocks_reused: AtomicU64,
    pub retries_total: AtomicU64,
    /// Retries the far side asked for by being slow or saying so (429, 503, timeouts): the
    /// adaptive depth backs off on these.
    pub throttled: AtomicU64,
    /// Every HTTP request sent to Blob storage, by kind.
    pub requests: Requests,
    retries: Mutex<BTreeMap<String, u64>>,
    failures: Mutex<Vec<(String, String)>>,
    ignored: Mutex<Vec<(String, String)>>,
    ignored_by_reason: Mutex<BTreeMap<String, u64>>,
    /// Attributes the destination cannot hold, by kind ("xattrs", "hard link"...): the entry
    /// was written without them.
    not_kept: Mutex<BTreeMap<String, u64>>,
}

/// Ignored entries are listed in the summary up to this many; the count is always exact.
const IGNORED_LISTED: usize = 100;

impl Stats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Relaxed)
    }

    /// The totals are final from now on.
    pub fn totals_final(&self) {
        self.totals_known.store(true, Relaxed);
    }

    pub fn totals_known(&self) -> bool {
        self.totals_known.load(Relaxed)
    }

    /// Files with an outcome, whatever it was (failures included), and the bytes of those
    /// copied, skipped or judged: what a progress report counts as done.
    pub fn done(&self) -> (u64, u64) {
        let g = Stats::get;
        let files = g(&self.files_copied)
            + g(&self.files_skipped)
            + g(&self.files_failed)
            + g(&self.files_ignored)
            + g(&self.files_verified);
        (
            files,
            g(&self.bytes_copied) + g(&self.bytes_skipped) + g(&self.bytes_verified),
        )
    }

    /// One file the service copied itself: copied, and counted apart.
    pub fn server_copied(&self, bytes: u64) {
        Stats::add(&self.files_copied, 1);
        Stats::add(&self.bytes_copied, bytes);
        Stats::add(&self.files_server_copied, 1);
        Stats::add(&self.bytes_server_copied, bytes);
    }

    pub fn retried(&self, label: &str) {
        self.retries_total.fetch_add(1, Relaxed);
        if matches!(label, "429" | "503" | "timeout") {
            self.throttled.fetch_add(1, Relaxed);
        }
        *self
            .retries
            .lock()
            .unwrap()
            .entry(label.to_string())
            .or_default() += 1;
    }

    pub fn failed(&self, path: String, error: String) {
        self.files_failed.fetch_add(1, Relaxed);
        self.failures.lock().unwrap().push((path, error));
    }

    pub fn ignored(&self, path: String, why: &str) {
        self.files_ignored.fetch_add(1, Relaxed);
        *self
            .ignored_by_reason
            .lock()
            .unwrap()
            .entry(why.to_string())
            .or_default() += 1;
        let mut v = self.ignored.lock().unwrap();
        if v.len() < IGNORED_LISTED {
            v.push((path, why.to_string()));
        }
    }

    pub fn ignored_by_reason(&self) -> BTreeMap<String, u64> {
        self.ignored_by_reason.lock().unwrap().clone()
    }

    pub fn not_kept(&self, what: &str) {
        *self
            .not_kept
            .lock()
            .unwrap()
            .entry(what.to_string())
            .or_default() += 1;
    }

    pub fn not_kept_by_kind(&self) -> BTreeMap<String, u64> {
        self.not_kept.lock().unwrap().clone()
    }

    pub fn ignored_list(&self) -> Vec<(String, String)> {
        self.ignored.lock().unwrap().clone()
    }

    pub fn retries_by_status(&self) -> BTreeMap<String, u64> {
        self.retries.lock().unwrap().clone()
    }

    pub fn failures(&self) -> Vec<(String, String)> {
        self.failures.lock().unwrap().clone()
    }

    /// A short retry summary for the progress line, e.g. "503x12 429x2".
    pub fn retry_brief(&self) -> String {
        self.retries
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}x{v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// What a request to Blob storage does, as its cost and a migration's projection see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// List Blobs, one per page.
    ListPages,
    /// Put Blob: a whole blob in one request.
    Puts,
    /// Put Block, Put Block From URL.
    Blocks,
    /// Put Block List.
    BlockLists,
    /// Get Blob, whole or a range.
    Gets,
    /// Get Blob Properties, Get Container Properties.
    Heads,
    /// Delete Blob.
    Deletes,
    /// Blob Batch: up to 256 Delete Blob in one request.
    Batches,
    /// Copy Blob, Put Blob From URL.
    Copies,
    /// Everything else: metadata, properties, tags, tiers, block lists read, containers made.
    Others,
}

impl RequestKind {
    pub const ALL: [RequestKind; 10] = [
        RequestKind::ListPages,
        RequestKind::Puts,
        RequestKind::Blocks,
        RequestKind::BlockLists,
        RequestKind::Gets,
        RequestKind::Heads,
        RequestKind::Deletes,
        RequestKind::Batches,
        RequestKind::Copies,
        RequestKind::Others,
    ];
}

/// Requests sent, by kind: each attempt of a retried request counts, as each is billed.
#[derive(Default)]
pub struct Requests([AtomicU64; RequestKind::ALL.len()]);

impl Requests {
    pub fn sent(&self, kind: RequestKind) {
        self.0[kind as usize].fetch_add(1, Relaxed);
    }

    pub fn get(&self, kind: RequestKind) -> u64 {
        self.0[kind as usize].load(Relaxed)
    }

    /// Every kind's count, zeros included, so a pipeline sums reports without asking which
    /// keys there are.
    pub fn counts(&self) -> crate::documents::Requests {
        use RequestKind::*;
        let g = |k| self.get(k);
        crate::documents::Requests {
            list_pages: g(ListPages),
            puts: g(Puts),
            blocks: g(Blocks),
            block_lists: g(BlockLists),
            gets: g(Gets),
            heads: g(Heads),
            deletes: g(Deletes),
            batches: g(Batches),
            copies: g(Copies),
            others: g(Others),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_report_every_kind() {
        let r = Requests::default();
        r.sent(RequestKind::Blocks);
        r.sent(RequestKind::Blocks);
        r.sent(RequestKind::Others);
        let v = serde_json::to_value(r.counts()).unwrap();
        let o = v.as_object().unwrap();
        assert_eq!(o.len(), RequestKind::ALL.len());
        assert_eq!(o["blocks"], 2);
        assert_eq!(o["others"], 1);
        assert_eq!(o["list_pages"], 0);
    }
}
