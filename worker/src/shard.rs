//! A pass's listing spread over several list jobs (`list.jobs`, docs/scale.md): the key space cut
//! at N-1 paths into N ranges, each listed by a job of its own (`ferry ls --shards --shard K`),
//! and the N listings read back as one by every step that reads a listing (`--shards`).
//!
//! A range is `[lo, hi)` in the manifest's order (paths as bytes), so each entry falls in exactly
//! one, whatever the tree's shape: a cut may fall inside a directory, between a directory's name
//! and its contents, or between `a-b` and `a/x`. Balance is the cuts' business, coverage never is.
//! The cuts come from the entry counts of the listing the last pass carried (`quantiles`, kept
//! in the carried state), or, on a first pass, from a shallow scan of the source.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use futures::StreamExt;

pub use crate::documents::shards::{Basis, ShardsDoc};
use crate::keyspace::Cuts;
use crate::manifest::{self, Entry, Kind};
use crate::storage::Store;

/// What stands for the shard's number in a listing argument given with `--shards`.
pub const PLACEHOLDER: &str = "{shard}";

/// Directories a first pass's scan lists (one request each on Blob) before it cuts, for each
/// list job, and at most; and how many it lists at once. 32 a job is ample to balance them, and
/// on Blob at a distance the scan then costs a few round trips, not one for every 16 directories.
const SCAN_DIRS_A_JOB: usize = 32;
const SCAN_DIRS: usize = 256;
const SCAN_IN_FLIGHT: usize = 64;
/// Entries a scan takes of one directory (one page on Blob).
const SCAN_PAGE: usize = 5000;

impl ShardsDoc {
    pub fn read(path: &Path) -> anyhow::Result<ShardsDoc> {
        let doc: ShardsDoc = crate::jsonfile::read(path, "shards document")?;
        doc.cuts()
            .with_context(|| format!("{}: bad cuts", path.display()))?;
        Ok(doc)
    }

    pub fn cuts(&self) -> anyhow::Result<Cuts> {
        let keys = self
            .cuts
            .iter()
            .map(|c| manifest::unescape_path(c).map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if self.jobs == 0 || keys.len() + 1 != self.jobs as usize {
            bail!(
                "{} jobs need {} cuts, not {}",
                self.jobs,
                self.jobs.saturating_sub(1),
                keys.len()
            );
        }
        if keys.windows(2).any(|w| w[0] > w[1]) {
            bail!("the cuts are not in order");
        }
        Ok(Cuts::new(keys))
    }

    /// The files of one side's listing: `listing` with `{shard}` standing for 1..=jobs.
    pub fn files(&self, listing: &Path) -> anyhow::Result<Vec<PathBuf>> {
        let pattern = listing.to_str().filter(|s| s.contains(PLACEHOLDER));
        let Some(pattern) = pattern else {
            bail!(
                "with --shards, a listing names its {} files with {PLACEHOLDER} ({} does not)",
                self.jobs,
                listing.display()
            );
        };
        Ok((1..=self.jobs)
            .map(|k| PathBuf::from(pattern.replace(PLACEHOLDER, &k.to_string())))
            .collect())
    }
}

/// A listing argument: one file, or with `--shards` the files of its list jobs.
pub fn listing_files(listing: &Path, shards: Option<&Path>) -> anyhow::Result<Vec<PathBuf>> {
    match shards {
        Some(doc) => ShardsDoc::read(doc)?.files(listing),
        None if listing.to_str().is_some_and(|s| s.contains(PLACEHOLDER)) => bail!(
            "{} names a sharded listing: give --shards too",
            listing.display()
        ),
        None => Ok(vec![listing.to_path_buf()]),
    }
}

/// `jobs - 1` cuts that share `units` (sorted keys, each with its weight) out about evenly: a
/// cut is placed at the unit that crosses each `k/jobs` of the total weight.
pub fn even_cuts(units: &[(Vec<u8>, u64)], jobs: usize) -> Cuts {
    let total: u64 = units.iter().map(|(_, w)| w).sum();
    let mut keys = Vec::with_capacity(jobs.saturating_sub(1));
    let mut sum = 0u64;
    let mut units = units.iter().peekable();
    for k in 1..jobs {
        let target = total as u128 * k as u128 / jobs as u128;
        while let Some((_, w)) = units.peek() {
            let (before, after) = (sum as u128, (sum + w) as u128);
            // The unit that crosses the target goes to the side that leaves the nearer split.
            if before >= target || (after > target && target - before <= after - target) {
                break;
            }
            sum += w;
            units.next();
        }
        // The range ends where the next unit begins; past the last, the ranges left are empty.
        let at = match units.peek() {
            Some((key, _)) => key.clone(),
            None => keys.last().cloned().unwrap_or_default(),
        };
        keys.push(at);
    }
    // A cut never goes back: equal neighbours are an empty range.
    for i in 1..keys.len() {
        if keys[i] < keys[i - 1] {
            keys[i] = keys[i - 1].clone();
        }
    }
    Cuts::new(keys)
}

/// Cuts by the carried listing's quantiles (equal entry counts apart).
pub fn cuts_from_quantiles(quantiles: &[String], jobs: usize) -> anyhow::Result<Cuts> {
    let units = quantiles
        .iter()
        .map(|q| {
            manifest::unescape_path(q)
                .map(|k| (k, 1))
                .map_err(anyhow::Error::msg)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(even_cuts(&units, jobs))
}

/// Cuts by a shallow look at `store`: the root's entries and those of the first directories met
/// breadth first (`SCAN_DIRS_A_JOB` a job, up to `SCAN_DIRS`), each counted once; a directory not
/// looked into counts as many entries as the directories looked into held on average.
pub async fn scan(store: &Arc<dyn Store>, jobs: usize) -> anyhow::Result<Cuts> {
    let scan_dirs = (SCAN_DIRS_A_JOB * jobs).min(SCAN_DIRS);
    let mut units: Vec<(Vec<u8>, u64)> = Vec::new();
    let mut unread: Vec<Vec<u8>> = Vec::new();
    let mut level: Vec<Vec<u8>> = vec![Vec::new()];
    let (mut read, mut held) = (0usize, 0u64);
    while !level.is_empty() && read < scan_dirs {
        let take = level.len().min(scan_dirs - read);
        unread.extend(level.drain(take..));
        let pages: Vec<_> = futures::stream::iter(level.drain(..))
            .map(|dir| async move {
                let sample = store.list_dir_sample(&dir, SCAN_PAGE).await;
                (dir, sample)
            })
            .buffered(SCAN_IN_FLIGHT)
            .collect()
            .await;
        for (dir, sample) in pages {
            let sample = sample.with_context(|| format!("cannot scan {}", store.describe()))?;
            read += 1;
            held += sample.entries.len() as u64;
            if sample.more {
                units.extend(unread_rest(&dir, &sample.entries, REST_PIECES));
            }
            for e in sample.entries {
                if e.kind == Kind::Dir {
                    level.push(e.path.clone());
                }
                units.push((e.path, 1));
            }
        }
    }
    unread.append(&mut level);
    let guess = (held / read.max(1) as u64).max(1);
    for dir in unread {
        units.push((dir, guess));
    }
    units.sort();
    Ok(even_cuts(&units, jobs))
}

/// Pieces `unread_rest` spreads its estimate over, at most (each at most a page's width): as
/// fine as the scan itself weighs a tree.
const REST_PIECES: usize = SCAN_DIRS;

/// What a first page of `dir` leaves unread, as weighted keys past its last name: a store
/// that lists in order (Blob) gives the first names, so a flat container's scan would see only
/// the low end of its key space and put every cut there. Read as numbers (`crate::keyspace`),
/// the page spans `[first, last]`; the names past it are taken to spread as the page's do, up
/// to the end of the names that share the page's stem. A page out of order (a local
/// directory's, in the order the file system keeps) is a sample from the whole directory
/// already: nothing to add.
fn unread_rest(dir: &[u8], page: &[Entry], pieces: usize) -> Vec<(Vec<u8>, u64)> {
    let names: Option<Vec<&str>> = page
        .iter()
        .map(|e| std::str::from_utf8(&e.path).ok())
        .collect();
    let (Some(names), false) = (names, page.windows(2).any(|w| w[0].path >= w[1].path)) else {
        return Vec::new();
    };
    let (Some(first), Some(last)) = (names.first(), names.last()) else {
        return Vec::new();
    };
    let prefix = match dir.is_empty() {
        true => String::new(),
        false => format!("{}/", String::from_utf8_lossy(dir)),
    };
    let Some(scale) = crate::keyspace::Scale::new(&prefix, names.iter().copied(), first, last)
    else {
        return Vec::new();
    };
    let (from, to) = (scale.value(first), scale.value(last));
    let (width, rest) = (to - from, 1.0 - to);
    if width <= 0.0 || rest <= 0.0 {
        return Vec::new();
    }
    let count = ((rest / width).ceil() as usize).clamp(1, pieces);
    let piece = rest / count as f64;
    let per_piece = (page.len() as f64 * piece / width).round().max(1.0) as u64;
    (0..count)
        .map(|i| scale.key(to + piece * (i as f64 + 0.5)))
        .filter(|k| k.as_str() > *last)
        .map(|k| (k.into_bytes(), per_piece))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::{Quantiles, Range, QUANTILES};

    fn named(names: impl Iterator<Item = String>) -> Vec<Entry> {
        names.map(|n| Entry::file(n, 1)).collect()
    }

    #[test]
    fn a_full_sorted_page_weighs_the_rest_of_its_key_space() {
        // The first page of 16^4 hashed names: 0000..0fff, a sixteenth of them.
        let page = named((0..0x1000).map(|i| format!("{i:04x}")));
        let rest = unread_rest(b"", &page, REST_PIECES);
        let weight: u64 = rest.iter().map(|(_, w)| w).sum();
        // 15 pages, read as a little more: the page spans 16 of the 17 digits of its block (a
        // name ending there would be the 17th).
        assert!(
            (0xe800..=0x10800).contains(&weight),
            "{weight}: about 15 pages"
        );
        assert!(rest.iter().all(|(k, _)| k.as_slice() > b"0fff".as_slice()));
        // Cut with the page, four ranges hold about a quarter each: at 4…, 8…, c….
        let mut units: Vec<_> = page.iter().map(|e| (e.path.clone(), 1)).collect();
        units.extend(rest);
        units.sort();
        let cuts = even_cuts(&units, 4);
        let firsts: Vec<u8> = cuts.keys().iter().map(|k| k[0]).collect();
        assert_eq!(firsts, b"48c", "{:?}", cuts.keys());
        // Under a directory, the keys keep its prefix.
        let page = named((0..0x1000).map(|i| format!("d/{i:04x}")));
        let rest = unread_rest(b"d", &page, 8);
        assert_eq!(rest.len(), 8);
        assert!(rest
            .iter()
            .all(|(k, _)| k.starts_with(b"d/") && k.as_slice() > b"d/0fff".as_slice()));
    }

    #[test]
    fn a_page_out_of_order_is_a_sample_already() {
        let mut page = named((0..100).map(|i| format!("{i:04x}")));
        page.swap(3, 70);
        assert!(unread_rest(b"", &page, REST_PIECES).is_empty());
    }

    fn r(lo: Option<&str>, hi: Option<&str>) -> Range {
        Range {
            lo: lo.map(|s| s.as_bytes().to_vec()),
            hi: hi.map(|s| s.as_bytes().to_vec()),
        }
    }

    #[test]
    fn every_path_falls_in_one_range() {
        let cuts = Cuts::new(vec![
            b"a-b".to_vec(),
            b"a/x".to_vec(),
            b"a/x".to_vec(),
            b"m".to_vec(),
        ]);
        let paths: [&[u8]; 8] = [b"", b"a", b"a-b", b"a/a", b"a/x", b"a/x/y", b"b", b"z"];
        for p in paths {
            let n = (1..=cuts.jobs())
                .filter(|&k| cuts.range(k).contains(p))
                .count();
            assert_eq!(n, 1, "{}", String::from_utf8_lossy(p));
        }
        assert!(!(1..=cuts.jobs()).any(|k| k == 3 && cuts.range(k).contains(b"a/x")));
    }

    #[test]
    fn a_subtree_is_entered_only_when_it_meets_the_range() {
        // "a/x" lies past "a-b": a range of [a-b, a/x) still holds "a/a", below "a".
        assert!(r(Some("a-b"), Some("a/x")).meets_subtree(b"a"));
        assert!(!r(Some("b"), None).meets_subtree(b"a"));
        assert!(!r(None, Some("a/")).meets_subtree(b"a"));
        assert!(r(None, Some("a/\x01")).meets_subtree(b"a"));
        assert!(!r(Some("a0"), None).meets_subtree(b"a"));
        assert!(r(Some("a/zz"), None).meets_subtree(b"a"));
    }

    #[test]
    fn even_cuts_share_the_weight() {
        let units: Vec<(Vec<u8>, u64)> = (0..100u32)
            .map(|i| (format!("{i:03}").into_bytes(), 1))
            .collect();
        let cuts = even_cuts(&units, 4);
        assert_eq!(
            cuts.keys(),
            [b"025".to_vec(), b"050".to_vec(), b"075".to_vec()]
        );
        // Fewer units than jobs: the last ranges are empty, none goes back.
        let cuts = even_cuts(&units[..2], 4);
        assert_eq!(cuts.jobs(), 4);
        assert!(cuts.keys().windows(2).all(|w| w[0] <= w[1]));
        // A heavy unit gets a range of its own.
        let units = vec![
            (b"a".to_vec(), 1),
            (b"big".to_vec(), 100),
            (b"c".to_vec(), 1),
        ];
        assert_eq!(even_cuts(&units, 2).keys(), [b"big".to_vec()]);
    }

    #[test]
    fn quantiles_stay_bounded_and_even() {
        let mut q = Quantiles::default();
        for i in 0..100_000u32 {
            q.push(format!("{i:06}").as_bytes());
        }
        let keys = q.finish();
        assert!(
            keys.len() >= QUANTILES && keys.len() < 2 * QUANTILES,
            "{}",
            keys.len()
        );
        let cuts = cuts_from_quantiles(&keys, 4).unwrap();
        let at: Vec<u32> = cuts
            .keys()
            .iter()
            .map(|k| String::from_utf8_lossy(k).parse().unwrap())
            .collect();
        for (k, got) in at.iter().enumerate() {
            let want = 25_000 * (k as u32 + 1);
            assert!(
                got.abs_diff(want) <= 100_000 / QUANTILES as u32,
                "{got} for {want}"
            );
        }
    }
}
