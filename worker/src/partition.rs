//! Splitting a listing into parts, fpart-style.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::manifest::Entry;

/// Longest-processing-time assignment: entries by size descending (name ascending on ties) go
/// to the least-loaded of `parts` bins (lowest index on ties). Deterministic, so cooperating
/// processes agree. Returns the bin of each entry, in input order.
pub fn lpt_assign(entries: &[Entry], parts: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_unstable_by(|&a, &b| entries[b].size().cmp(&entries[a].size()).then_with(|| entries[a].path.cmp(&entries[b].path)));
    // Count every file as at least one byte so empty files still spread out.
    lpt_in_order(order.into_iter().map(|i| (i, entries[i].size().max(1))), entries.len(), parts)
}

/// LPT's dealing: each of `items` items, given as (index, weight) in the order to deal them, to
/// the least-loaded of `parts` parts (lowest index on ties). Returns each item's part.
pub fn lpt_in_order(order: impl Iterator<Item = (usize, u64)>, items: usize, parts: usize) -> Vec<usize> {
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = (0..parts).map(|i| Reverse((0, i))).collect();
    let mut owner = vec![0; items];
    for (i, weight) in order {
        let Reverse((load, bin)) = heap.pop().expect("at least one part");
        owner[i] = bin;
        heap.push(Reverse((load + weight, bin)));
    }
    owner
}

/// Parts by count or size, filled in input order in constant memory, by fpart's live-mode
/// (`-L`) rule: an entry joins the open part, which closes as soon as it holds `max_files`
/// entries or `max_bytes` bytes. So a part may exceed `max_bytes` by its last entry, and an
/// entry larger than `max_bytes` that opens a part has that part to itself.
pub struct Filler {
    max_files: Option<u64>,
    max_bytes: Option<u64>,
    files: u64,
    bytes: u64,
}

impl Filler {
    pub fn new(max_files: Option<u64>, max_bytes: Option<u64>) -> Self {
        Filler { max_files, max_bytes, files: 0, bytes: 0 }
    }

    /// Adds an entry; true if it opens a new part (the caller then starts one).
    pub fn add(&mut self, size: u64) -> bool {
        let opens = self.files == 0;
        self.files += 1;
        self.bytes += size;
        if self.max_files.is_some_and(|f| self.files >= f) || self.max_bytes.is_some_and(|s| self.bytes >= s) {
            self.files = 0;
            self.bytes = 0;
        }
        opens
    }
}

/// What one part holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartTotals {
    pub files: u64,
    pub bytes: u64,
}

pub fn part_name(i: usize) -> String {
    format!("part-{i:05}.tsv")
}

/// The `summary.json` of a set of parts, as `ferry partition` writes it (and `ferry plan` for
/// each of its sets).
pub fn summary(mode: &str, parts: &[PartTotals], dirs: u64) -> serde_json::Value {
    let loads: Vec<u64> = parts.iter().map(|p| p.bytes).collect();
    serde_json::json!({
        "mode": mode,
        "parts": parts.len(),
        "files": parts.iter().map(|p| p.files).sum::<u64>(),
        "bytes": loads.iter().sum::<u64>(),
        "imbalance_pct": (imbalance_pct(&loads) * 100.0).round() / 100.0,
        "dirs": dirs,
        "dirs_file": if dirs > 0 { Some("dirs.tsv") } else { None },
        "partitions": parts.iter().enumerate()
            .map(|(i, p)| serde_json::json!({"index": i, "file": part_name(i), "files": p.files, "bytes": p.bytes}))
            .collect::<Vec<_>>(),
    })
}

/// (max/mean − 1) × 100 over the parts' byte totals: 0 is perfect balance.
pub fn imbalance_pct(loads: &[u64]) -> f64 {
    if loads.is_empty() {
        return 0.0;
    }
    let total: u64 = loads.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let mean = total as f64 / loads.len() as f64;
    (*loads.iter().max().unwrap() as f64 / mean - 1.0) * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(v: &[u64]) -> Vec<Entry> {
        v.iter().enumerate().map(|(i, &s)| Entry::file(format!("f{i:05}"), s)).collect()
    }

    #[test]
    fn lpt_balances_a_skewed_set() {
        let mut v = vec![1_000_000_000, 900_000_000, 800_000_000];
        v.extend((0..5000).map(|i| 100_000 + (i * 7919 % 1_000_000)));
        let e = sizes(&v);
        let owner = lpt_assign(&e, 4);
        let mut loads = [0u64; 4];
        for (x, o) in e.iter().zip(&owner) {
            loads[*o] += x.size();
        }
        assert!(imbalance_pct(&loads) < 2.0, "{loads:?}");
        assert_eq!(owner, lpt_assign(&e, 4), "deterministic");
    }

    #[test]
    fn lpt_spreads_empty_files() {
        let e = sizes(&[0; 8]);
        let mut count = [0; 4];
        for o in lpt_assign(&e, 4) {
            count[o] += 1;
        }
        assert_eq!(count, [2, 2, 2, 2]);
    }

    #[test]
    fn filler_follows_fpart_live_mode() {
        // Two per part by count.
        let mut f = Filler::new(Some(2), None);
        let opens: Vec<bool> = [1, 1, 1, 1, 1].iter().map(|&s| f.add(s)).collect();
        assert_eq!(opens, [true, false, true, false, true]);
        // By size 10: 4+4 stays open, the 25 tips it over and closes it; 3+8 reaches 11 and
        // closes; the 30 opens a part and has it to itself; 2 opens the next.
        let mut f = Filler::new(None, Some(10));
        let opens: Vec<bool> = [4, 4, 25, 3, 8, 30, 2].iter().map(|&s| f.add(s)).collect();
        assert_eq!(opens, [true, false, false, true, false, true, true]);
    }
}
