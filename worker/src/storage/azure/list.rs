//! A recursive listing of a container cut into key ranges as it goes, up to `--list-concurrency`
//! List Blobs requests in flight, and put back together in the service's order: the same entries,
//! in the same order, as one sequential stream gives.
//!
//! A range is `[lo, hi)` in the container's key order. Its first page is asked for with
//! `startFrom=lo` (service version 2026-02-06 on; Azurite 3.37); once a page of it is full, the
//! rest of the range is cut at boundaries estimated from the page (`boundaries`), and every piece
//! is a range of its own, listed at once and cut again in turn. The first page goes out with a
//! probe of `startFrom` (a service ignoring it is listed as one stream): a container of one page
//! costs one round trip; from the first full page on, the cut is what saves round trips.
//! Coverage never depends on the estimate: the pieces are contiguous, the first continues
//! from the page's marker, the last ends at the parent's `hi`. So a flat container of hashed names
//! and a deep tree are both cut, and a tree of tiny directories costs what any tree of its size
//! does: ranges follow keys, not directories.
//!
//! The order is kept by a tree of channels: a range sends its pages, then one receiver per piece,
//! in key order; the reader drains them depth first. A range listed ahead of the reader goes on
//! until its channel holds `AHEAD` pages, and at most twice `concurrency` ranges live at once:
//! what the listing holds in memory is bounded by those two. A range ends with
//! `Piece::End`: a channel closed without it is a task that died, and fails the listing instead
//! of shortening it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{mpsc, Semaphore};

use super::xml::{BlobItem, ListPage};
use super::Inner;
use crate::error::{Result, StoreError};
use crate::keyspace::{Scale, SAFE};
use crate::manifest::Entry;

/// What a lister asks of the service: one page of the names under the store's root, from a
/// marker or from a key; and what a listed blob is as an entry.
#[async_trait]
pub(super) trait Pages: Send + Sync + 'static {
    fn prefix(&self) -> &str;
    async fn page(
        &self,
        marker: Option<&str>,
        start_from: Option<&str>,
        max: u32,
    ) -> Result<ListPage>;
    fn entry(&self, blob: BlobItem) -> Option<Result<Entry>>;
}

#[async_trait]
impl Pages for Inner {
    fn prefix(&self) -> &str {
        &self.root
    }

    async fn page(
        &self,
        marker: Option<&str>,
        start_from: Option<&str>,
        max: u32,
    ) -> Result<ListPage> {
        self.list_page(true, &self.root, marker, start_from, max)
            .await
    }

    fn entry(&self, blob: BlobItem) -> Option<Result<Entry>> {
        self.entry_of(blob)
    }
}

/// What one range hands the reader, in key order.
enum Piece {
    /// In order, with the names that stand for no path (`names.rs`) as errors where they fall.
    Entries(Vec<Result<Entry>>),
    /// A piece of the range's remainder: drained whole before the next item.
    Range(mpsc::Receiver<Result<Piece>>),
    /// The range is listed. One listed to its last page, not cut, tells where a stream goes on
    /// from there: where the listing resumes should the next range stop before its first page.
    End(Option<Rest>),
    /// The range stopped short, the service ignoring `startFrom`: the listing goes on as one
    /// stream from `rest` (from the last range's end when this one sent no request yet),
    /// skipping names before `lo`.
    Stopped {
        lo: Option<String>,
        rest: Option<Rest>,
    },
}

/// Where a stream goes on from: a page's names not handed on yet, then the page's marker (None:
/// the container's end).
struct Rest {
    tail: Vec<BlobItem>,
    marker: Option<String>,
}

/// The `startFrom` of the probe sent beside the first page: past nearly every name (below the
/// characters whose order the service and a byte order may disagree on), so that a service
/// ignoring it answers with a name before it.
const PROBE: char = '\u{d7ff}';

/// Pages a range lists ahead of the reader before it waits.
const AHEAD: usize = 2;

struct Lister {
    pages: Arc<dyn Pages>,
    /// The full names' common start: the store's root.
    prefix: String,
    requests: Semaphore,
    /// Ranges alive; cutting stops at `max_live`, which bounds the pages held in memory.
    live: AtomicUsize,
    max_live: usize,
    /// Cleared for good when the service turns out to ignore `startFrom`.
    cutting: AtomicBool,
    /// Set when a range's first page shows `startFrom` ignored: every range stops at its next
    /// request, and the reader finishes the listing as one stream.
    stopped: AtomicBool,
    /// Whether the service ignores `startFrom`, asked beside the first page; awaited by the
    /// first cut.
    probe: tokio::sync::Mutex<Option<tokio::task::JoinHandle<bool>>>,
    page: u32,
}

/// Decrements the live count however a range task ends.
struct Alive(Arc<Lister>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Every entry under the store's root whose full name lies in `[lo, hi)` (None: unbounded), in
/// the service's order, listed with up to `concurrency` requests in flight.
pub(super) async fn list(
    pages: Arc<dyn Pages>,
    concurrency: usize,
    page: u32,
    (lo, hi): (Option<String>, Option<String>),
    out: &mpsc::Sender<Result<Entry>>,
) -> Result<()> {
    // A range from a key shows on its first page whether `startFrom` is honoured; a listing
    // from the start asks beside its first page, before cutting anything.
    let probe =
        (concurrency > 1 && lo.is_none()).then(|| tokio::spawn(ignores_start_from(pages.clone())));
    let lister = Arc::new(Lister {
        prefix: pages.prefix().to_string(),
        pages,
        requests: Semaphore::new(concurrency.max(1)),
        live: AtomicUsize::new(0),
        max_live: concurrency.max(1) * 2,
        cutting: AtomicBool::new(concurrency > 1),
        stopped: AtomicBool::new(false),
        probe: tokio::sync::Mutex::new(probe),
        page,
    });
    let listed = lister.drain(lo, hi, out).await;
    // A listing done before its probe answered (one page) waits for it, so that every request
    // sent is counted in what the listing reports.
    if let Some(probe) = lister.probe.lock().await.take() {
        match listed {
            Ok(()) => drop(probe.await),
            Err(_) => probe.abort(),
        }
    }
    listed
}

impl Lister {
    /// The ranges' pieces, depth first: the listing in the service's order.
    async fn drain(
        self: &Arc<Self>,
        lo: Option<String>,
        hi: Option<String>,
        out: &mpsc::Sender<Result<Entry>>,
    ) -> Result<()> {
        let mut stack = vec![self.spawn(lo, None, hi.clone())];
        // Where the last range listed to its end stopped reading: a stopped range goes on from it.
        let mut last_end: Option<Rest> = None;
        while let Some(top) = stack.last_mut() {
            match top.recv().await {
                Some(Ok(Piece::Entries(entries))) => {
                    for e in entries {
                        if out.send(e).await.is_err() {
                            // The reader has gone: dropping the stack ends every range at its next send.
                            return Ok(());
                        }
                    }
                }
                Some(Ok(Piece::Range(rx))) => stack.push(rx),
                Some(Ok(Piece::End(rest))) => {
                    stack.pop();
                    last_end = rest.or(last_end);
                }
                Some(Ok(Piece::Stopped { lo, rest })) => {
                    // Everything before this range is out: the ranges after it are dropped, and one
                    // stream lists the rest from the furthest point read.
                    drop(stack);
                    let rest = rest.or(last_end).ok_or_else(|| {
                        StoreError::Invalid(
                            "a listing range stopped with nowhere to go on from".into(),
                        )
                    })?;
                    return self.stream(lo, rest, hi, out).await;
                }
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(StoreError::Invalid(
                        "a listing task ended before its range was listed".into(),
                    ))
                }
            }
        }
        Ok(())
    }
}

/// True when the service answers a `startFrom` past nearly every name with a name before it:
/// it lists from the start whatever the key (an older service version, Azurite 3.35). False
/// when it honours it, or cannot tell (the names all lie past the probe, or the probe failed):
/// then a range's first page still tells, later.
async fn ignores_start_from(pages: Arc<dyn Pages>) -> bool {
    let key = format!("{}{PROBE}", pages.prefix());
    match pages.page(None, Some(&key), 1).await {
        Ok(page) => page.blobs.first().is_some_and(|b| b.name < key),
        Err(_) => false,
    }
}

impl Lister {
    fn spawn(
        self: &Arc<Self>,
        lo: Option<String>,
        marker: Option<String>,
        hi: Option<String>,
    ) -> mpsc::Receiver<Result<Piece>> {
        let (tx, rx) = mpsc::channel(AHEAD);
        self.live.fetch_add(1, Ordering::SeqCst);
        let alive = Alive(self.clone());
        tokio::spawn(async move {
            let lister = alive.0.clone();
            if let Err(e) = lister.range(lo, marker, hi, &tx).await {
                let _ = tx.send(Err(e)).await;
            }
            drop(alive);
        });
        rx
    }

    /// Lists `[lo, hi)`, from `marker` if given (a continuation), else from `lo`.
    async fn range(
        self: &Arc<Self>,
        lo: Option<String>,
        mut marker: Option<String>,
        hi: Option<String>,
        tx: &mpsc::Sender<Result<Piece>>,
    ) -> Result<()> {
        let mut start_from = if marker.is_none() { lo.clone() } else { None };
        let mut seen = 0;
        loop {
            if self.stopped.load(Ordering::SeqCst) {
                let rest = marker.map(|m| Rest {
                    tail: Vec::new(),
                    marker: Some(m),
                });
                let _ = tx.send(Ok(Piece::Stopped { lo, rest })).await;
                return Ok(());
            }
            seen += 1;
            let page = {
                let _permit = self.requests.acquire().await.expect("never closed");
                self.pages
                    .page(marker.as_deref(), start_from.as_deref(), self.page)
                    .await?
            };
            let mut blobs = page.blobs;
            if let Some(lo) = &lo {
                if blobs.first().is_some_and(|b| b.name.as_str() < lo.as_str()) {
                    // An older service, or an emulator, that lists from the start: what lies
                    // before `lo` is another range's, on this page and the next ones. Every
                    // range stops, and the listing goes on as one stream.
                    self.cutting.store(false, Ordering::SeqCst);
                    self.stopped.store(true, Ordering::SeqCst);
                    blobs.retain(|b| b.name.as_str() >= lo.as_str());
                }
            }
            let mut ended = page.next_marker.is_none();
            let mut tail = Vec::new();
            if let Some(hi) = &hi {
                if let Some(at) = blobs.iter().position(|b| b.name.as_str() >= hi.as_str()) {
                    tail = blobs.split_off(at);
                    ended = true;
                }
            }
            let cut = match (&page.next_marker, ended) {
                (Some(_), false) => self.cut(&blobs, hi.as_deref(), seen).await,
                _ => Vec::new(),
            };
            let entries: Vec<Result<Entry>> = blobs
                .into_iter()
                .filter_map(|b| self.pages.entry(b))
                .collect();
            if !entries.is_empty() && tx.send(Ok(Piece::Entries(entries))).await.is_err() {
                return Ok(());
            }
            if ended {
                let rest = Rest {
                    tail,
                    marker: page.next_marker,
                };
                let _ = tx.send(Ok(Piece::End(Some(rest)))).await;
                return Ok(());
            }
            marker = page.next_marker;
            start_from = None;
            if !cut.is_empty() {
                // The remainder as pieces: [marker, b1), [b1, b2), …, [bn, hi).
                let mut pieces = vec![self.spawn(None, marker.take(), Some(cut[0].clone()))];
                for (i, b) in cut.iter().enumerate() {
                    pieces.push(self.spawn(
                        Some(b.clone()),
                        None,
                        cut.get(i + 1).cloned().or_else(|| hi.clone()),
                    ));
                }
                for rx in pieces {
                    if tx.send(Ok(Piece::Range(rx))).await.is_err() {
                        return Ok(());
                    }
                }
                let _ = tx.send(Ok(Piece::End(None))).await;
                return Ok(());
            }
        }
    }

    /// The rest of the listing as one stream, once the service is known to ignore `startFrom`:
    /// `rest`, then page after page from its marker, names in `[lo, hi)`.
    async fn stream(
        &self,
        lo: Option<String>,
        rest: Rest,
        hi: Option<String>,
        out: &mpsc::Sender<Result<Entry>>,
    ) -> Result<()> {
        let Rest {
            tail: mut blobs,
            mut marker,
        } = rest;
        loop {
            if let Some(lo) = &lo {
                blobs.retain(|b| b.name.as_str() >= lo.as_str());
            }
            let mut ended = marker.is_none();
            if let Some(hi) = &hi {
                if let Some(at) = blobs.iter().position(|b| b.name.as_str() >= hi.as_str()) {
                    blobs.truncate(at);
                    ended = true;
                }
            }
            for e in blobs.into_iter().filter_map(|b| self.pages.entry(b)) {
                if out.send(e).await.is_err() {
                    return Ok(());
                }
            }
            if ended {
                return Ok(());
            }
            let page = self.pages.page(marker.as_deref(), None, self.page).await?;
            (blobs, marker) = (page.blobs, page.next_marker);
        }
    }

    /// Where to cut what follows a full page, as many pieces as the live ranges allow.
    /// `seen`: the pages this range has listed, the evidence of how far an open remainder goes.
    async fn cut(&self, page: &[BlobItem], hi: Option<&str>, seen: usize) -> Vec<String> {
        // The first cut waits for the probe: a service ignoring `startFrom` is listed as one
        // stream from the start, no piece sent to it.
        let mut probe = self.probe.lock().await;
        if let Some(asked) = probe.take() {
            if asked.await.unwrap_or(false) {
                self.cutting.store(false, Ordering::SeqCst);
            }
        }
        drop(probe);
        if !self.cutting.load(Ordering::SeqCst) {
            return Vec::new();
        }
        let room = self
            .max_live
            .saturating_sub(self.live.load(Ordering::SeqCst));
        match (page.first(), page.last()) {
            (Some(first), Some(last)) if room > 1 => boundaries(
                &self.prefix,
                page.iter().map(|b| b.name.as_str()),
                &first.name,
                &last.name,
                hi,
                room - 1,
                seen,
            ),
            _ => Vec::new(),
        }
    }
}

/// Up to `want` keys in `(last, hi)`, increasing, spaced so that each gap holds about as many
/// keys as the page `first..=last` did, were the names spread as they are on that page (names
/// read as numbers: `crate::keyspace`).
pub(crate) fn boundaries<'a>(
    prefix: &str,
    names: impl Iterator<Item = &'a str>,
    first: &str,
    last: &str,
    hi: Option<&str>,
    want: usize,
    seen: usize,
) -> Vec<String> {
    let Some(scale) = Scale::new(prefix, names, first, last) else {
        return Vec::new();
    };
    let (at, stem) = (scale.at(), scale.stem());
    let (from, to) = (scale.value(first), scale.value(last));
    let width = to - from;
    if width <= 0.0 {
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::new();
    let push = |key: String, out: &mut Vec<String>| {
        let after = out.last().map_or(last, String::as_str);
        if key.as_str() > after && hi.is_none_or(|h| key.as_str() < h) && out.len() < want {
            out.push(key);
        }
    };
    // A remainder of known end within reach of the page's spread (up to twice as many pages as
    // there are pieces to give) is shared out evenly, each piece four fifths of a page or more:
    // short of a page, so that the names' unevenness seldom leaves a piece a second round trip.
    // The end is known below `hi`, or when the page's names differ from their first character
    // on (a flat container of hashed names): then the key space's end is the remainder's.
    // A `hi` outside `stem` lies past every value here.
    let end = hi
        .filter(|h| h.starts_with(stem))
        .map_or(1.0, |h| scale.value(h));
    let known_end = end < 1.0 || at == prefix.len();
    if known_end && end - to <= 2.0 * want as f64 * width {
        let step = (0.8 * width).max((end - to) / (want + 1) as f64);
        let mut x = to + step;
        while x < end && out.len() < want {
            push(scale.key(x), &mut out);
            x += step;
        }
        return out;
    }
    // Else its names may be anywhere in it (a tree's directories cluster): pieces of a page next
    // to this one, then of two, four, eight… pages while under `stem`, then the ends of the
    // subtrees `last` is in, deepest first, at every second, fourth, eighth… shallower
    // character. Few requests go to empty pieces, and what lies beside the page (the other
    // projects of a wide tree) lands in a piece that cuts itself again once its own first page
    // tells how its names spread. No more pieces than twice the pages seen: a range that has
    // shown little is not cut into many.
    let want = want.min(2 * seen);
    let mut step = width;
    let mut x = to + step;
    while x < end && out.len() < want * 3 / 4 {
        push(scale.key(x), &mut out);
        if out.len() >= want / 8 {
            step *= 2.0;
        }
        x += step;
    }
    let starts: Vec<usize> = last[..at + 1]
        .char_indices()
        .map(|(i, _)| i)
        .filter(|&i| i >= prefix.len())
        .collect();
    let mut back = 1;
    while back <= starts.len() {
        let i = starts[starts.len() - back];
        let c = last[i..].chars().next().expect("a character starts here");
        if let Some(next) = char::from_u32(c as u32 + 1).filter(|n| *n < SAFE) {
            push(format!("{}{next}", &last[..i]), &mut out);
        }
        back *= 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    /// A container of `names` as the service pages it: every page costs `latency` of (paused,
    /// virtual) time, and is counted.
    struct Fake {
        names: Vec<String>,
        latency: Duration,
        requests: AtomicU64,
        start_from: StartFrom,
    }

    /// How the fake service takes `startFrom`.
    #[derive(Clone, Copy, PartialEq)]
    enum StartFrom {
        Honoured,
        Ignored,
        /// Ignored, but for the probe's key: the probe cannot tell, a range's first page does.
        IgnoredButProbe,
    }

    #[async_trait]
    impl Pages for Fake {
        fn prefix(&self) -> &str {
            ""
        }

        async fn page(
            &self,
            marker: Option<&str>,
            start_from: Option<&str>,
            max: u32,
        ) -> Result<ListPage> {
            self.requests.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.latency).await;
            let start_from = start_from.filter(|s| match self.start_from {
                StartFrom::Honoured => true,
                StartFrom::Ignored => false,
                StartFrom::IgnoredButProbe => s.ends_with(PROBE),
            });
            let from = match (marker, start_from) {
                (Some(m), _) => self.names.partition_point(|n| n.as_str() <= m),
                (None, Some(s)) => self.names.partition_point(|n| n.as_str() < s),
                (None, None) => 0,
            };
            let to = (from + max as usize).min(self.names.len());
            let blobs: Vec<BlobItem> = self.names[from..to]
                .iter()
                .map(|n| BlobItem {
                    name: n.clone(),
                    ..Default::default()
                })
                .collect();
            let next_marker = (to < self.names.len()).then(|| self.names[to - 1].clone());
            Ok(ListPage {
                blobs,
                prefixes: Vec::new(),
                next_marker,
            })
        }

        fn entry(&self, blob: BlobItem) -> Option<Result<Entry>> {
            Some(Ok(Entry {
                path: blob.name.into_bytes(),
                ..Default::default()
            }))
        }
    }

    /// Lists `names` (sorted here) with `concurrency` requests in flight and pages of `page`:
    /// checks the order, and gives the requests sent and the virtual seconds taken.
    async fn run(names: Vec<String>, concurrency: usize, page: u32) -> (u64, f64) {
        run_on(names, concurrency, page, StartFrom::Honoured).await
    }

    async fn run_on(
        mut names: Vec<String>,
        concurrency: usize,
        page: u32,
        start_from: StartFrom,
    ) -> (u64, f64) {
        names.sort();
        let fake = Arc::new(Fake {
            names: names.clone(),
            latency: Duration::from_secs(1),
            requests: AtomicU64::new(0),
            start_from,
        });
        let (tx, mut rx) = mpsc::channel::<Result<Entry>>(1024);
        let started = tokio::time::Instant::now();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(e) = rx.recv().await {
                got.push(String::from_utf8(e.unwrap().path).unwrap());
            }
            got
        });
        list(fake.clone(), concurrency, page, (None, None), &tx)
            .await
            .unwrap();
        drop(tx);
        let got = reader.await.unwrap();
        assert!(
            got == names,
            "listed {} names, not the {} in order",
            got.len(),
            names.len()
        );
        (
            fake.requests.load(Ordering::SeqCst),
            started.elapsed().as_secs_f64(),
        )
    }

    fn deep(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                format!(
                    "proj{}/d{:05}/sub{}/f{i:07}.dat",
                    i % 4,
                    i / 160,
                    (i / 40) % 4
                )
            })
            .collect()
    }

    fn hashed(n: usize) -> Vec<String> {
        (0..n as u64)
            .map(|i| {
                format!(
                    "{:016x}",
                    i.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17)
                )
            })
            .collect()
    }

    fn tiny(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("t/{:07}/f{}", i / 2, i % 2))
            .collect()
    }

    /// 1 s a page, 5,000 names a page, 16 in flight; deterministic (one thread, virtual time).
    /// What the listing benchmark measures against Azurite at a distance, here at 10^6 names too;
    /// Azurite's own time, which the pieces share one thread for, is not modelled.
    #[tokio::test(start_paused = true)]
    async fn ranges_beat_one_stream_at_a_bounded_cost() {
        let layouts = [
            ("deep", deep(25_000)),
            ("hashed", hashed(25_000)),
            ("tiny", tiny(25_000)),
            ("deep", deep(10_000)),
            ("hashed", hashed(10_000)),
            ("tiny", tiny(10_000)),
            ("deep", deep(50_000)),
            ("hashed", hashed(50_000)),
            ("tiny", tiny(50_000)),
            ("tiny", tiny(1_000_000)),
            ("deep", deep(1_000_000)),
            ("hashed", hashed(1_000_000)),
        ];
        for (name, names) in layouts {
            let n = names.len();
            let pages = n.div_ceil(5000) as u64;
            let (one, one_s) = run(names.clone(), 1, 5000).await;
            let (many, many_s) = run(names, 16, 5000).await;
            eprintln!("{name} {n}: one stream {one} requests {one_s:.0} s; 16 in flight {many} requests {many_s:.0} s ({:.2}x)", many_s / one_s);
            assert_eq!(one, pages, "one stream is a request a page");
            assert!(many_s <= one_s, "{name} {n}: slower than one stream");
            if n >= 1_000_000 {
                assert!(
                    many_s <= 0.25 * one_s && many <= 2 * pages,
                    "{name} {n}: {many} requests, {many_s} s"
                );
            } else {
                // Pieces past the last name cost a request each: a handful more than one
                // stream, never one per directory (a tiny tree of 25,000 has 12,500).
                assert!(
                    many <= 5 * pages,
                    "{name} {n}: {many} requests where one stream sends {pages}"
                );
            }
            if name == "hashed" && n / 5000 <= 16 {
                // Names spread over the whole key space: the first page, then the rest at once.
                assert!(many_s <= 2.0, "{name} {n}: {many_s} s");
            }
        }
    }

    /// A service that ignores `startFrom`: the probe beside the first page tells, and the
    /// listing is one stream and the probe; when the probe cannot tell, the first range's first
    /// page does, every range stops, and one stream goes on from the furthest marker: the
    /// stream's pages and the one round of pieces already sent, no name twice, none lost.
    #[tokio::test(start_paused = true)]
    async fn a_service_ignoring_start_from_is_listed_as_one_stream() {
        for (name, names) in [
            ("deep", deep(50_000)),
            ("hashed", hashed(50_000)),
            ("tiny", tiny(50_000)),
            ("hashed", hashed(4_999)),
        ] {
            let pages = names.len().div_ceil(5000) as u64;
            let (one, one_s) = run(names.clone(), 1, 5000).await;
            assert_eq!(one, pages);
            let (probed, probed_s) = run_on(names.clone(), 16, 5000, StartFrom::Ignored).await;
            assert!(probed <= one + 1, "{name}: {probed} requests against {one}");
            assert!(probed_s <= one_s, "{name}: {probed_s} s against {one_s}");
            let (late, late_s) = run_on(names.clone(), 16, 5000, StartFrom::IgnoredButProbe).await;
            eprintln!("{name}: one stream {one} requests {one_s:.0} s; probed {probed}, {probed_s:.0} s; found late {late}, {late_s:.0} s");
            assert!(
                late <= one + 1 + 32,
                "{name}: {late} requests against {one}"
            );
            assert!(late_s <= one_s + 1.0, "{name}: {late_s} s against {one_s}");
        }
    }

    /// Ranges from keys (a list job's) on a service ignoring `startFrom`: each is its own
    /// names, put together the whole container.
    #[tokio::test(start_paused = true)]
    async fn bounded_ranges_on_a_service_ignoring_start_from() {
        let mut names = deep(30_000);
        names.sort();
        let fake = Arc::new(Fake {
            names: names.clone(),
            latency: Duration::from_secs(1),
            requests: AtomicU64::new(0),
            start_from: StartFrom::Ignored,
        });
        let keys = [
            None,
            Some("proj1/".to_string()),
            Some("proj2/d001".to_string()),
            None,
        ];
        let mut got = Vec::new();
        for w in keys.windows(2) {
            let (tx, mut rx) = mpsc::channel::<Result<Entry>>(100_000);
            list(fake.clone(), 16, 5000, (w[0].clone(), w[1].clone()), &tx)
                .await
                .unwrap();
            drop(tx);
            while let Some(e) = rx.recv().await {
                got.push(String::from_utf8(e.unwrap().path).unwrap());
            }
        }
        assert!(
            got == names,
            "{} names, not the {} in order",
            got.len(),
            names.len()
        );
    }

    fn cut(prefix: &str, page: &[String], hi: Option<&str>, want: usize) -> Vec<String> {
        boundaries(
            prefix,
            page.iter().map(String::as_str),
            &page[0],
            page.last().unwrap(),
            hi,
            want,
            want,
        )
    }

    #[test]
    fn hashed_names_are_cut_across_the_alphabet() {
        // The first page of 16^4 hex names in order: 0000..0fff.
        let page: Vec<String> = (0..0x1000).map(|i| format!("{i:04x}")).collect();
        let b = cut("", &page, None, 20);
        // Pieces of a page next to it (1…, 2…), then of two, four… pages up to the top (…, f…).
        assert!(b.len() >= 4, "{b:?}");
        assert!(
            b[0] > *page.last().unwrap() && b[0].starts_with('1'),
            "{b:?}"
        );
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert!(b.last().unwrap().as_str() >= "f", "{b:?}");
    }

    #[test]
    fn a_deep_tree_is_cut_after_the_page_at_the_level_that_moves() {
        let page: Vec<String> = (0..100)
            .flat_map(|d| (0..50).map(move |f| format!("data/d{d:05}/f{f:03}")))
            .collect();
        let b = cut("data/", &page, None, 8);
        // A few pieces next to the page, then the ends of the subtrees it is in: what follows
        // data/d00, and what follows data/d (other directories beside it).
        assert!(b.len() >= 4, "{b:?}");
        assert!(b.iter().all(|k| k.as_str() > "data/d00099/f049"), "{b:?}");
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert!(
            b.contains(&"data/d01".to_string()) && b.contains(&"data/e".to_string()),
            "{b:?}"
        );
    }

    #[test]
    fn boundaries_stay_below_hi_and_below_u_e000() {
        let page: Vec<String> = (0..300).map(|i| format!("ü/é{i:03}")).collect();
        let b = cut("ü/", &page, Some("ü/é9"), 50);
        assert!(!b.is_empty());
        assert!(
            b.iter()
                .all(|k| k.as_str() < "ü/é9" && k.as_str() > "ü/é299"),
            "{b:?}"
        );
        assert!(b.iter().all(|k| k.chars().all(|c| c < '\u{e000}')), "{b:?}");
    }

    #[test]
    fn a_bounded_remainder_is_shared_out_evenly() {
        // 40 names a page out of d0000..d9999: the rest up to d0200 is four pages, five pieces
        // of four fifths of a page.
        let page: Vec<String> = (0..40).map(|i| format!("d{i:04}")).collect();
        let b = cut("", &page, Some("d0200"), 10);
        assert!((4..=5).contains(&b.len()), "{b:?}");
        let at = |k: &str| format!("{:0<4}", &k[1..])[..4].parse::<u32>().unwrap();
        let mut from = 39;
        for k in &b {
            assert!((20..=60).contains(&(at(k) - from)) && at(k) < 200, "{b:?}");
            from = at(k);
        }
    }

    #[test]
    fn nothing_is_cut_from_a_page_that_does_not_spread() {
        let page = vec!["same".to_string(), "same".to_string()];
        assert!(cut("", &page, None, 4).is_empty());
        let one_char: Vec<String> = vec!["a".into(), "aa".into(), "aaa".into()];
        assert!(cut("", &one_char, None, 4)
            .iter()
            .all(|k| k.as_str() > "aaa"));
    }
}
