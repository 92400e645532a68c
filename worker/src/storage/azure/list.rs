//! A recursive listing of a container cut into ranges as it goes, up to `--list-concurrency`
//! List Blobs requests in flight, and put back together in the service's order: the same entries,
//! in the same order, as one sequential stream gives.
//!
//! A range is the names under a prefix (the store's root, or a directory below it) in
//! `[lo, hi)` of the container's key order. A whole listing's first page goes out with two
//! requests beside it: a probe of `startFrom` (service version 2026-02-06 on; Azurite 3.37; a
//! service ignoring it is never cut by key) and the top level listed with the delimiter `/`.
//! Once a page of a range is full, the rest of the range is cut, and every piece is a range of
//! its own, listed at once and cut again in turn:
//!
//! - by the level below the range's prefix, when the range asked for it beside its first page
//!   and it came whole in one page (a tree's directories; a flat container of hashed names is
//!   just the first page again). Few prefixes past the page (fewer than the requests in flight):
//!   each is a range listed with `prefix=` (which the service ends exactly at the prefix's end,
//!   and which a service ignoring `startFrom` honours), asking for its own level below in turn;
//!   the blobs of the level are entries in their place; the prefix the page ends in goes on
//!   from the page's marker, asked under the prefix the marker came from (a marker is opaque,
//!   the service's, for the listing that returned it) up to the prefix's end. Many prefixes: they are grouped into ranges of about a page,
//!   weighed by how many of them the page held, listed with `startFrom` at a prefix.
//! - else by keys estimated from the page (`boundaries`), listed with `startFrom`.
//!
//! Coverage never depends on an estimate: the pieces are contiguous, the first continues from
//! the page's marker, the last ends at the parent's end. A level's names are used only in an
//! order both the service and a byte order agree on (below U+E000).
//!
//! The order is kept by a tree of channels: a range sends its pages, then its pieces (receivers,
//! and the level's blobs), in key order; the reader drains them depth first. A range listed
//! ahead of the reader goes on until its channel holds `AHEAD` pages, and at most twice
//! `concurrency` ranges live at once: what the listing holds in memory is bounded by those two
//! (and a level: one page). A range ends with `Piece::End`: a channel closed without it is a
//! task that died, and fails the listing instead of shortening it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;

use super::xml::{BlobItem, ListPage};
use super::Inner;
use crate::error::{Result, StoreError};
use crate::keyspace::{Scale, SAFE};
use crate::manifest::Entry;

/// What a lister asks of the service: one page of the names under a prefix, from a marker or
/// from a key; one page of a level; and what a listed blob is as an entry.
#[async_trait]
pub(super) trait Pages: Send + Sync + 'static {
    /// The store's root: every name listed starts with it.
    fn prefix(&self) -> &str;
    async fn page(
        &self,
        prefix: &str,
        marker: Option<&str>,
        start_from: Option<&str>,
        max: u32,
    ) -> Result<ListPage>;
    /// The first page of the level under `prefix`, listed with the delimiter `/`.
    async fn level(&self, prefix: &str, max: u32) -> Result<ListPage>;
    fn entry(&self, blob: BlobItem) -> Option<Result<Entry>>;
}

#[async_trait]
impl Pages for Inner {
    fn prefix(&self) -> &str {
        &self.root
    }

    async fn page(
        &self,
        prefix: &str,
        marker: Option<&str>,
        start_from: Option<&str>,
        max: u32,
    ) -> Result<ListPage> {
        self.list_page(true, prefix, marker, start_from, max).await
    }

    async fn level(&self, prefix: &str, max: u32) -> Result<ListPage> {
        self.list_page(false, prefix, None, None, max).await
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

/// Where a stream of the whole root goes on from: a page's names not handed on yet, then the
/// page's marker (None: the container's end).
struct Rest {
    tail: Vec<BlobItem>,
    marker: Option<String>,
}

/// A range to list: the names under `prefix` in `[lo, hi)` (None: unbounded), from `marker` if
/// given, else from `lo`.
#[derive(Clone, Default)]
struct Span {
    prefix: String,
    lo: Option<String>,
    hi: Option<String>,
    marker: Option<String>,
    /// The directory the range lies in when it is asked under a wider `prefix` (going on from
    /// a marker that listing returned): the pieces cut from it by key are asked under this.
    within: Option<String>,
    /// Whether the level under `prefix` is asked for beside the first page: the level above
    /// was narrow.
    level: bool,
}

impl Span {
    /// Everything under `prefix`, a directory (ending in '/').
    fn under(prefix: &str, level: bool) -> Span {
        Span {
            prefix: prefix.to_string(),
            lo: Some(prefix.to_string()),
            hi: Some(end_of(prefix)),
            marker: None,
            within: None,
            level,
        }
    }
}

/// What follows a full page of a range, in key order: ranges, and blobs of a level.
enum Part {
    Span(Span),
    Blobs(Vec<BlobItem>),
}

/// The first key past every name under `prefix` (ending in '/'): '0' follows '/'.
fn end_of(prefix: &str) -> String {
    format!("{}0", prefix.strip_suffix('/').unwrap_or(prefix))
}

/// The `startFrom` of the probe sent beside the first page: past nearly every name (below the
/// characters whose order the service and a byte order may disagree on), so that a service
/// ignoring it answers with a name before it.
const PROBE: char = '\u{d7ff}';

/// Pages a range lists ahead of the reader before it waits.
const AHEAD: usize = 2;

/// A range of the many-prefix kind holds about this share of a page: short of one, so that the
/// names' unevenness seldom leaves it a second round trip.
const FILL: f64 = 0.8;

struct Lister {
    pages: Arc<dyn Pages>,
    /// The full names' common start: the store's root.
    prefix: String,
    requests: Semaphore,
    concurrency: usize,
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
    probe: tokio::sync::Mutex<Option<JoinHandle<bool>>>,
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
    // from the start asks beside its first page, before cutting anything. A whole listing asks
    // for the top level there too.
    let probe =
        (concurrency > 1 && lo.is_none()).then(|| tokio::spawn(ignores_start_from(pages.clone())));
    let root = Span {
        prefix: pages.prefix().to_string(),
        level: concurrency > 1 && lo.is_none() && hi.is_none(),
        lo,
        hi,
        marker: None,
        within: None,
    };
    let lister = Arc::new(Lister {
        prefix: pages.prefix().to_string(),
        pages,
        requests: Semaphore::new(concurrency.max(1)),
        concurrency: concurrency.max(1),
        live: AtomicUsize::new(0),
        max_live: concurrency.max(1) * 2,
        cutting: AtomicBool::new(concurrency > 1),
        stopped: AtomicBool::new(false),
        probe: tokio::sync::Mutex::new(probe),
        page,
    });
    let listed = lister.drain(root, out).await;
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
    async fn drain(self: &Arc<Self>, root: Span, out: &mpsc::Sender<Result<Entry>>) -> Result<()> {
        let hi = root.hi.clone();
        let mut stack = vec![self.spawn(root)];
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
                    return self.stream(lo, rest.or(last_end), hi, out).await;
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
    match pages.page(pages.prefix(), None, Some(&key), 1).await {
        Ok(page) => page.blobs.first().is_some_and(|b| b.name < key),
        Err(_) => false,
    }
}

impl Lister {
    fn spawn(self: &Arc<Self>, span: Span) -> mpsc::Receiver<Result<Piece>> {
        let (tx, rx) = mpsc::channel(AHEAD);
        self.live.fetch_add(1, Ordering::SeqCst);
        let alive = Alive(self.clone());
        tokio::spawn(async move {
            let lister = alive.0.clone();
            if let Err(e) = lister.range(span, &tx).await {
                let _ = tx.send(Err(e)).await;
            }
            drop(alive);
        });
        rx
    }

    /// The level under `prefix`, asked in a request of its own (one of the `concurrency`).
    fn ask_level(self: &Arc<Self>, prefix: &str) -> JoinHandle<Result<ListPage>> {
        let (lister, prefix) = (self.clone(), prefix.to_string());
        tokio::spawn(async move {
            let _permit = lister.requests.acquire().await.expect("never closed");
            lister.pages.level(&prefix, lister.page).await
        })
    }

    /// Lists `span`, page after page, until it ends or is cut.
    async fn range(self: &Arc<Self>, span: Span, tx: &mpsc::Sender<Result<Piece>>) -> Result<()> {
        let Span {
            prefix,
            lo,
            hi,
            mut marker,
            within,
            level,
        } = span;
        // A range from its prefix's start needs no key: the prefix starts it.
        let mut start_from = lo
            .clone()
            .filter(|lo| marker.is_none() && lo.as_str() > prefix.as_str());
        let mut level = level.then(|| self.ask_level(&prefix));
        let mut seen = 0;
        loop {
            // A range under a directory lists itself to its end even then: its marker serves
            // its own listing only, not a stream of the whole root.
            if self.stopped.load(Ordering::SeqCst) && prefix == self.prefix {
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
                    .page(&prefix, marker.as_deref(), start_from.as_deref(), self.page)
                    .await?
            };
            // Asked beside the first page; awaited whether used or not, so that every request
            // sent is counted in what the listing reports.
            let below = match level.take() {
                Some(asked) => asked.await.ok().and_then(Result::ok),
                None => None,
            };
            let (blobs, tail, ended) = self.within(
                page.blobs,
                lo.as_deref(),
                hi.as_deref(),
                page.next_marker.is_none(),
            );
            let parts = match (&page.next_marker, ended) {
                (Some(m), false) => {
                    let within = within.as_deref().unwrap_or(&prefix);
                    self.cut((&prefix, within), &blobs, m, hi.as_deref(), seen, below)
                        .await
                }
                _ => Vec::new(),
            };
            if !self.send_blobs(blobs, tx).await {
                return Ok(());
            }
            if ended {
                // A range under a directory tells nothing of where a stream of the whole root
                // goes on: its marker is its own listing's.
                let rest = (prefix == self.prefix).then_some(Rest {
                    tail,
                    marker: page.next_marker,
                });
                let _ = tx.send(Ok(Piece::End(rest))).await;
                return Ok(());
            }
            marker = page.next_marker;
            start_from = None;
            if !parts.is_empty() {
                // Every piece is listing before the first is handed on.
                let pieces: Vec<Piece> = parts
                    .into_iter()
                    .map(|part| match part {
                        Part::Span(span) => Piece::Range(self.spawn(span)),
                        Part::Blobs(blobs) => Piece::Entries(self.entries(blobs)),
                    })
                    .collect();
                for piece in pieces {
                    if tx.send(Ok(piece)).await.is_err() {
                        return Ok(());
                    }
                }
                let _ = tx.send(Ok(Piece::End(None))).await;
                return Ok(());
            }
        }
    }

    /// A page's names in `[lo, hi)`, the names past `hi`, and whether the range has ended (at
    /// `hi`, or at the listing's end: `last`). Names before `lo` show a service ignoring
    /// `startFrom`: they are another range's, on this page and the next ones. Every range
    /// stops, and the listing goes on as one stream.
    fn within(
        &self,
        mut blobs: Vec<BlobItem>,
        lo: Option<&str>,
        hi: Option<&str>,
        last: bool,
    ) -> (Vec<BlobItem>, Vec<BlobItem>, bool) {
        if let Some(lo) = lo {
            if blobs.first().is_some_and(|b| b.name.as_str() < lo) {
                self.cutting.store(false, Ordering::SeqCst);
                self.stopped.store(true, Ordering::SeqCst);
                blobs.retain(|b| b.name.as_str() >= lo);
            }
        }
        let mut tail = Vec::new();
        let mut ended = last;
        if let Some(hi) = hi {
            if let Some(at) = blobs.iter().position(|b| b.name.as_str() >= hi) {
                tail = blobs.split_off(at);
                ended = true;
            }
        }
        (blobs, tail, ended)
    }

    fn entries(&self, blobs: Vec<BlobItem>) -> Vec<Result<Entry>> {
        blobs
            .into_iter()
            .filter_map(|b| self.pages.entry(b))
            .collect()
    }

    /// Hands `blobs` on as entries; false when the reader has gone.
    async fn send_blobs(&self, blobs: Vec<BlobItem>, tx: &mpsc::Sender<Result<Piece>>) -> bool {
        let entries = self.entries(blobs);
        entries.is_empty() || tx.send(Ok(Piece::Entries(entries))).await.is_ok()
    }

    /// The rest of the listing as one stream, once the service is known to ignore `startFrom`:
    /// `rest` (None: the container's start), then page after page from its marker, names in
    /// `[lo, hi)`.
    async fn stream(
        &self,
        lo: Option<String>,
        rest: Option<Rest>,
        hi: Option<String>,
        out: &mpsc::Sender<Result<Entry>>,
    ) -> Result<()> {
        let Rest {
            tail: mut blobs,
            mut marker,
        } = match rest {
            Some(rest) => rest,
            None => {
                let page = self.pages.page(&self.prefix, None, None, self.page).await?;
                Rest {
                    tail: page.blobs,
                    marker: page.next_marker,
                }
            }
        };
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
            let page = self
                .pages
                .page(&self.prefix, marker.as_deref(), None, self.page)
                .await?;
            (blobs, marker) = (page.blobs, page.next_marker);
        }
    }

    /// How to cut what follows a full page of a range under `prefix`, from `marker` to `hi`:
    /// by the level below `prefix` when it came whole, else by estimated keys (pieces asked
    /// under `within`, the range's own directory), as many pieces as the live ranges allow.
    /// `seen`: the pages this range has listed, the evidence of how far an open remainder goes.
    /// Empty: the range goes on as it is.
    async fn cut(
        &self,
        (prefix, within): (&str, &str),
        page: &[BlobItem],
        marker: &str,
        hi: Option<&str>,
        seen: usize,
        below: Option<ListPage>,
    ) -> Vec<Part> {
        // The first cut waits for the probe: a service ignoring `startFrom` is never cut by
        // key, no piece from a key sent to it.
        let mut probe = self.probe.lock().await;
        if let Some(asked) = probe.take() {
            if asked.await.unwrap_or(false) {
                self.cutting.store(false, Ordering::SeqCst);
            }
        }
        drop(probe);
        let room = self
            .max_live
            .saturating_sub(self.live.load(Ordering::SeqCst));
        if room <= 1 || page.is_empty() {
            return Vec::new();
        }
        let by_level = below
            .and_then(|b| level_items(prefix, b))
            .and_then(|level| self.by_level(prefix, page, marker, hi, level, room - 1));
        match by_level {
            Some(parts) if !parts.is_empty() => return parts,
            _ => {}
        }
        self.by_keys((prefix, within), page, marker, hi, room - 1, seen)
    }

    /// The rest of a range under `prefix` from `marker` to `hi`, cut at up to `want` keys
    /// estimated from `page`, listed from those keys under `within`; empty when not cutting by
    /// key.
    fn by_keys(
        &self,
        (prefix, within): (&str, &str),
        page: &[BlobItem],
        marker: &str,
        hi: Option<&str>,
        want: usize,
        seen: usize,
    ) -> Vec<Part> {
        if !self.cutting.load(Ordering::SeqCst) {
            return Vec::new();
        }
        let (first, last) = (&page[0].name, &page[page.len() - 1].name);
        let names = page.iter().map(|b| b.name.as_str());
        let keys = boundaries(within, names, first, last, hi, want, seen);
        spans((prefix, within), marker, keys, hi)
    }

    /// The rest of a range under `prefix` from `marker` to `hi`, cut by the level below
    /// `prefix`; None when the level does not hold the page's last name, or (many prefixes)
    /// when not cutting by key. A level not whole (its first page) serves the many-prefix cut:
    /// its last range goes on to `hi`, past what the level showed.
    fn by_level(
        &self,
        prefix: &str,
        page: &[BlobItem],
        marker: &str,
        hi: Option<&str>,
        (items, whole): (Vec<Item>, bool),
        want: usize,
    ) -> Option<Vec<Part>> {
        let last = &page[page.len() - 1].name;
        let at = holder(prefix, &items, last)?;
        let after = &items[at + 1..];
        let dirs = after.iter().filter(|i| matches!(i, Item::Dir(_))).count();
        if whole && dirs < self.concurrency && dirs < want {
            return Some(self.narrow(prefix, page, marker, &items[at], after, want - dirs));
        }
        if !self.cutting.load(Ordering::SeqCst) {
            return None;
        }
        let first = holder(prefix, &items, &page[0].name).unwrap_or(at);
        // Names an item, as the page had them: its items were listed whole, but the last.
        let each = page.len() as f64 / (at + 1 - first) as f64;
        let per = ((FILL * self.page as f64 / each).floor() as usize)
            .max(1)
            .max(after.len().div_ceil(want));
        let keys = after
            .iter()
            .step_by(per)
            .skip(1)
            .map(|i| i.name().to_string())
            .collect();
        Some(spans((prefix, prefix), marker, keys, hi))
    }

    /// The rest of a range under `prefix` whose level has few prefixes past its page: the
    /// directory the page ends in goes on from `marker` (cut by key from the page when cutting),
    /// and each item after it is a range of its own (asking for its own level) or, a blob, an
    /// entry.
    fn narrow(
        &self,
        prefix: &str,
        page: &[BlobItem],
        marker: &str,
        holder: &Item,
        after: &[Item],
        want: usize,
    ) -> Vec<Part> {
        let mut parts = Vec::new();
        if let Item::Dir(dir) = holder {
            let own: Vec<BlobItem> = page
                .iter()
                .filter(|b| b.name.starts_with(dir.as_str()))
                .cloned()
                .collect();
            let end = end_of(dir);
            parts = self.by_keys((prefix, dir), &own, marker, Some(&end), want, 1);
            if parts.is_empty() {
                // Its own level is not asked: the page has shown it wide more often than not
                // (a directory a file or two), a request for nothing.
                parts.push(Part::Span(going_on((prefix, dir), marker, Some(&end))));
            }
        }
        for item in after {
            match (item, parts.last_mut()) {
                (Item::Blob(b), Some(Part::Blobs(run))) => run.push(b.clone()),
                (Item::Blob(b), _) => parts.push(Part::Blobs(vec![b.clone()])),
                (Item::Dir(dir), _) => parts.push(Part::Span(Span::under(dir, true))),
            }
        }
        parts
    }
}

/// The rest of a range under `prefix`, from `marker` to `hi`, cut at `keys` (increasing):
/// `[marker, k1), [k1, k2), …, [kn, hi)`, each listed from its key under `within`. The first
/// goes on from the marker under `prefix`: a marker is the service's, opaque, good for the
/// listing that returned it. No keys, no pieces: the range goes on as it is.
fn spans(
    (prefix, within): (&str, &str),
    marker: &str,
    keys: Vec<String>,
    hi: Option<&str>,
) -> Vec<Part> {
    if keys.is_empty() {
        return Vec::new();
    }
    let mut parts = Vec::with_capacity(keys.len() + 1);
    parts.push(Part::Span(going_on(
        (prefix, within),
        marker,
        Some(&keys[0]),
    )));
    for (i, from) in keys.iter().enumerate() {
        parts.push(Part::Span(Span {
            prefix: within.to_string(),
            lo: Some(from.clone()),
            hi: keys.get(i + 1).cloned().or(hi.map(str::to_string)),
            marker: None,
            within: None,
            level: false,
        }));
    }
    parts
}

/// A range under `within` going on from `marker` (of a listing under `prefix`, where the marker
/// came from) up to `hi`.
fn going_on((prefix, within): (&str, &str), marker: &str, hi: Option<&str>) -> Span {
    Span {
        prefix: prefix.to_string(),
        lo: None,
        hi: hi.map(str::to_string),
        marker: Some(marker.to_string()),
        within: (prefix != within).then(|| within.to_string()),
        level: false,
    }
}

/// One item of a level: a blob there, or a directory (a prefix, ending in '/').
enum Item {
    Blob(BlobItem),
    Dir(String),
}

impl Item {
    fn name(&self) -> &str {
        match self {
            Item::Blob(b) => &b.name,
            Item::Dir(d) => d,
        }
    }
}

/// A level's first page, its blobs and directories in key order, and whether that is the whole
/// level; None when it is empty, or has a name whose order the service and a byte order may
/// disagree on.
fn level_items(prefix: &str, page: ListPage) -> Option<(Vec<Item>, bool)> {
    let whole = page.next_marker.is_none();
    let mut items: Vec<Item> = page.blobs.into_iter().map(Item::Blob).collect();
    items.extend(page.prefixes.into_iter().map(Item::Dir));
    items.sort_by(|a, b| a.name().cmp(b.name()));
    let safe = items.iter().all(|i| {
        i.name()
            .strip_prefix(prefix)
            .is_some_and(|rel| !rel.is_empty() && rel.chars().all(|c| c < SAFE))
    });
    (safe && !items.is_empty()).then_some((items, whole))
}

/// Where in `items` (a level under `prefix`) the name `name` is: its blob, or its directory.
fn holder(prefix: &str, items: &[Item], name: &str) -> Option<usize> {
    let rel = name.strip_prefix(prefix)?;
    let key = match rel.find('/') {
        Some(i) => &name[..prefix.len() + i + 1],
        None => name,
    };
    items.binary_search_by(|i| i.name().cmp(key)).ok()
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

    /// A container of `names` as the service pages it, by prefix and by level: every request
    /// costs `latency` of (paused, virtual) time, and is counted.
    struct Fake {
        names: Vec<String>,
        latency: Duration,
        requests: AtomicU64,
        levels: AtomicU64,
        start_from: StartFrom,
        /// The page request of this number (from 1) fails.
        fail_page: Option<u64>,
        pages_asked: AtomicU64,
        /// Every level request fails.
        fail_levels: bool,
    }

    impl Fake {
        fn new(mut names: Vec<String>, start_from: StartFrom) -> Fake {
            names.sort();
            Fake {
                names,
                latency: Duration::from_secs(1),
                requests: AtomicU64::new(0),
                levels: AtomicU64::new(0),
                start_from,
                fail_page: None,
                pages_asked: AtomicU64::new(0),
                fail_levels: false,
            }
        }

        /// The names under `prefix`, as a range of `names`.
        fn under(&self, prefix: &str) -> std::ops::Range<usize> {
            let lo = self.names.partition_point(|n| n.as_str() < prefix);
            let len = self.names[lo..].partition_point(|n| n.starts_with(prefix));
            lo..lo + len
        }

        async fn cost(&self) {
            self.requests.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.latency).await;
        }
    }

    /// How the fake service takes `startFrom`.
    #[derive(Clone, Copy, PartialEq, Debug)]
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
            prefix: &str,
            marker: Option<&str>,
            start_from: Option<&str>,
            max: u32,
        ) -> Result<ListPage> {
            self.cost().await;
            // The probe (one name long) is not counted: its failure only leaves it unsure.
            if max > 1
                && Some(self.pages_asked.fetch_add(1, Ordering::SeqCst) + 1) == self.fail_page
            {
                return Err(StoreError::Invalid("a page failed".into()));
            }
            let start_from = start_from.filter(|s| match self.start_from {
                StartFrom::Honoured => true,
                StartFrom::Ignored => false,
                StartFrom::IgnoredButProbe => s.ends_with(PROBE),
            });
            let under = self.under(prefix);
            // A marker is the service's: this one names the prefix it was listed under, and
            // refuses to serve another listing.
            let marker = match marker.map(|m| m.split_once('\0')) {
                Some(Some((of, name))) if of == prefix => Some(name),
                Some(_) => return Err(StoreError::Invalid("a marker of another listing".into())),
                None => None,
            };
            let from = match (marker, start_from) {
                (Some(m), _) => self.names.partition_point(|n| n.as_str() <= m),
                (None, Some(s)) => self.names.partition_point(|n| n.as_str() < s),
                (None, None) => 0,
            }
            .clamp(under.start, under.end);
            let to = (from + max as usize).min(under.end);
            let blobs: Vec<BlobItem> = self.names[from..to]
                .iter()
                .map(|n| BlobItem {
                    name: n.clone(),
                    ..Default::default()
                })
                .collect();
            let next_marker = (to < under.end).then(|| format!("{prefix}\0{}", self.names[to - 1]));
            Ok(ListPage {
                blobs,
                prefixes: Vec::new(),
                next_marker,
            })
        }

        async fn level(&self, prefix: &str, max: u32) -> Result<ListPage> {
            self.cost().await;
            self.levels.fetch_add(1, Ordering::SeqCst);
            if self.fail_levels {
                return Err(StoreError::Invalid("a level failed".into()));
            }
            let mut page = ListPage::default();
            let mut items = 0;
            for n in &self.names[self.under(prefix)] {
                let item = match n[prefix.len()..].find('/') {
                    Some(i) => &n[..prefix.len() + i + 1],
                    None => n.as_str(),
                };
                if page.prefixes.last().is_some_and(|p| p == item) {
                    continue;
                }
                if items == max {
                    page.next_marker = Some(n.clone());
                    break;
                }
                items += 1;
                match item.ends_with('/') {
                    true => page.prefixes.push(item.to_string()),
                    false => page.blobs.push(BlobItem {
                        name: n.clone(),
                        ..Default::default()
                    }),
                }
            }
            Ok(page)
        }

        fn entry(&self, blob: BlobItem) -> Option<Result<Entry>> {
            Some(Ok(Entry {
                path: blob.name.into_bytes(),
                ..Default::default()
            }))
        }
    }

    /// What a listing cost: requests (levels among them) and virtual seconds.
    #[derive(Debug)]
    struct Cost {
        requests: u64,
        levels: u64,
        secs: f64,
    }

    /// Lists `names` (sorted here) with `concurrency` requests in flight and pages of `page`:
    /// checks the order, and gives the requests sent and the virtual seconds taken.
    async fn run(names: Vec<String>, concurrency: usize, page: u32) -> (u64, f64) {
        run_on(names, concurrency, page, StartFrom::Honoured).await
    }

    async fn run_on(
        names: Vec<String>,
        concurrency: usize,
        page: u32,
        start_from: StartFrom,
    ) -> (u64, f64) {
        let cost = run_fake(Fake::new(names, start_from), concurrency, page).await;
        (cost.requests, cost.secs)
    }

    async fn run_fake(fake: Fake, concurrency: usize, page: u32) -> Cost {
        let (got, listed, cost) = listing(fake, concurrency, page).await;
        listed.unwrap();
        assert!(
            got.0 == got.1,
            "listed {} names, not the {} in order",
            got.0.len(),
            got.1.len()
        );
        cost
    }

    /// Lists `fake`'s names: (what was listed, the names), how it ended, and its cost.
    async fn listing(
        fake: Fake,
        concurrency: usize,
        page: u32,
    ) -> ((Vec<String>, Vec<String>), Result<()>, Cost) {
        let fake = Arc::new(fake);
        let (tx, mut rx) = mpsc::channel::<Result<Entry>>(1024);
        let started = tokio::time::Instant::now();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(e) = rx.recv().await {
                got.push(String::from_utf8(e.unwrap().path).unwrap());
            }
            got
        });
        let listed = list(fake.clone(), concurrency, page, (None, None), &tx).await;
        drop(tx);
        let got = reader.await.unwrap();
        let cost = Cost {
            requests: fake.requests.load(Ordering::SeqCst),
            levels: fake.levels.load(Ordering::SeqCst),
            secs: started.elapsed().as_secs_f64(),
        };
        ((got, fake.names.clone()), listed, cost)
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
                // Pieces past the last name cost a request each, and so does a level asked
                // beside a first page: a handful more than one stream, never one per directory
                // (a tiny tree of 25,000 has 12,500).
                assert!(
                    many <= 5 * pages + 10,
                    "{name} {n}: {many} requests where one stream sends {pages}"
                );
            }
            if name == "hashed" && n / 5000 <= 16 {
                // Names spread over the whole key space: the first page, then the rest at once.
                assert!(many_s <= 2.0, "{name} {n}: {many_s} s");
            }
        }
    }

    /// A service that ignores `startFrom`: the probe beside the first page tells, and nothing
    /// is listed from a key: a flat container is one stream, the probe and the top level (the
    /// first page again); a tree is cut by its directories all the same. When the probe cannot
    /// tell, the first range's first page does, every range stops, and one stream goes on from
    /// the furthest marker: the stream's pages and the one round of pieces already sent, no
    /// name twice, none lost.
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
            let probed = run_fake(Fake::new(names.clone(), StartFrom::Ignored), 16, 5000).await;
            let (late, late_s) = run_on(names.clone(), 16, 5000, StartFrom::IgnoredButProbe).await;
            eprintln!("{name}: one stream {one} requests {one_s:.0} s; probed {probed:?}; found late {late}, {late_s:.0} s");
            if name == "deep" {
                assert!(
                    probed.secs <= 0.5 * one_s,
                    "{name}: {probed:?} against {one_s}"
                );
            } else {
                assert!(
                    probed.requests <= one + 2,
                    "{name}: {probed:?} against {one}"
                );
                assert!(probed.secs <= one_s, "{name}: {probed:?} against {one_s}");
            }
            assert!(
                late <= one + 2 + 32,
                "{name}: {late} requests against {one}"
            );
            assert!(late_s <= one_s + 1.0, "{name}: {late_s} s against {one_s}");
        }
    }

    /// A deep tree of 1, 4 and 10 pages (four projects, then a directory for 160 files): the
    /// round trips and the requests, honoured `startFrom` or not. The first round finds the
    /// projects; the second lists each project's first page beside its directories; the third
    /// what is left, in ranges of a page or less. Never slower than one stream.
    #[tokio::test(start_paused = true)]
    async fn a_deep_tree_is_found_in_one_round_trip() {
        // (pages, round trips and requests at most, honoured; ignored)
        let cases = [
            (1, (1.0, 3), (1.0, 3)),
            (4, (2.0, 14), (2.0, 12)),
            (10, (3.0, 20), (4.0, 19)),
        ];
        for (pages, honoured, ignored) in cases {
            let names = deep(pages * 5000);
            let (one, one_s) = run(names.clone(), 1, 5000).await;
            assert_eq!(one, pages as u64);
            for (start_from, (rounds, requests)) in [
                (StartFrom::Honoured, honoured),
                (StartFrom::Ignored, ignored),
            ] {
                let cost = run_fake(Fake::new(names.clone(), start_from), 16, 5000).await;
                eprintln!("deep, {pages} pages, {start_from:?}: {cost:?}; one stream {one_s} s");
                assert!(cost.secs <= one_s, "{pages} pages: slower than one stream");
                assert!(
                    cost.secs <= rounds && cost.requests <= requests,
                    "{pages} pages, {start_from:?}: {cost:?}"
                );
            }
        }
    }

    /// Blobs at a level beside its directories (`b.txt` sorts before `b/`, `b` before both),
    /// the first page ending in a blob of the level, in a directory, or exactly at one's end:
    /// the same names in the same order as one stream, at every page size, `startFrom`
    /// honoured or not.
    #[tokio::test(start_paused = true)]
    async fn blobs_beside_directories_keep_their_place() {
        let mut names: Vec<String> = ["a", "a.txt", "b", "b.txt", "b0", "c", "z-last"]
            .iter()
            .map(|n| n.to_string())
            .collect();
        for d in ["a/", "b/", "b/x/", "b/y/", "b.d/", "c/"] {
            names.extend((0..40).map(|i| format!("{d}f{i:02}")));
            names.push(format!("{d}g.txt"));
        }
        // A level with a name past U+E000 (where the service's order and a byte order may
        // disagree) is not cut by: the same names all the same.
        let mut odd = names.clone();
        odd.extend((0..40).map(|i| format!("\u{ff21}/f{i:02}")));
        odd.extend((0..40).map(|i| format!("\u{1f600}/f{i:02}")));
        for names in [names, odd] {
            for page in [7, 40, 41, 100, 500] {
                for start_from in [StartFrom::Honoured, StartFrom::Ignored] {
                    run_fake(Fake::new(names.clone(), start_from), 4, page).await;
                }
            }
        }
    }

    /// A page request that fails, whichever it is and whatever range it is in, fails the
    /// listing: never a listing that looks complete and is short. A level that fails only
    /// costs the cut by it: the listing is whole all the same.
    #[tokio::test(start_paused = true)]
    async fn an_error_in_any_range_fails_the_listing() {
        for names in [deep(20_000), hashed(12_000), tiny(12_000)] {
            let total = {
                let fake = Fake::new(names.clone(), StartFrom::Honoured);
                let (_, listed, _) = listing(fake, 16, 1000).await;
                listed.unwrap();
                // Every page request but the probe's, which is one entry long.
                let fake = Fake::new(names.clone(), StartFrom::Honoured);
                let (_, _, cost) = listing(fake, 16, 1000).await;
                cost.requests - cost.levels - 1
            };
            for k in 1..=total {
                let mut fake = Fake::new(names.clone(), StartFrom::Honoured);
                fake.fail_page = Some(k);
                let ((got, names), listed, _) = listing(fake, 16, 1000).await;
                assert!(
                    listed.is_err(),
                    "page {k} of {total} failed, the listing did not"
                );
                // What came before the failure, in order (all of it when the page that failed
                // was one past the last name), and an error after it.
                assert!(names.starts_with(&got));
            }
            let mut fake = Fake::new(names, StartFrom::Honoured);
            fake.fail_levels = true;
            run_fake(fake, 16, 1000).await;
        }
    }

    /// Ranges from keys (a list job's) on a service ignoring `startFrom`: each is its own
    /// names, put together the whole container.
    #[tokio::test(start_paused = true)]
    async fn bounded_ranges_on_a_service_ignoring_start_from() {
        let fake = Arc::new(Fake::new(deep(30_000), StartFrom::Ignored));
        let names = fake.names.clone();
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
