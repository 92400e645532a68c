//! Splitting a listing into parts, fpart-style: the rules that cut (LPT, fill by caps) and the
//! part files they write, for `ferry partition` and `ferry plan` alike.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::documents::{PartSummary, PartitionDoc, Version};
use crate::manifest::{Entry, Writer};
use crate::run_dir::LAYOUT;

/// What an entry counts for in balancing: its bytes, and at least one, so that empty files
/// spread out too.
pub fn weight_of(e: &Entry) -> u64 {
    e.size().max(1)
}

/// Longest-processing-time assignment: entries by size descending (name ascending on ties) go
/// to the least-loaded of `parts` bins (lowest index on ties). Deterministic, so cooperating
/// processes agree. Returns the bin of each entry, in input order.
pub fn lpt_assign(entries: &[Entry], parts: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        entries[b]
            .size()
            .cmp(&entries[a].size())
            .then_with(|| entries[a].path.cmp(&entries[b].path))
    });
    lpt_in_order(
        order.into_iter().map(|i| (i, weight_of(&entries[i]))),
        entries.len(),
        parts,
    )
}

/// LPT's dealing: each of `items` items, given as (index, weight) in the order to deal them, to
/// the least-loaded of `parts` parts (lowest index on ties). Returns each item's part.
pub fn lpt_in_order(
    order: impl Iterator<Item = (usize, u64)>,
    items: usize,
    parts: usize,
) -> Vec<usize> {
    let mut lpt = Lpt::new(parts);
    let mut owner = vec![0; items];
    for (i, weight) in order {
        owner[i] = lpt.deal(weight);
    }
    owner
}

/// The dealer of LPT: the parts by load, so that the next item goes to the least loaded.
pub struct Lpt(BinaryHeap<Reverse<(u64, usize)>>);

impl Lpt {
    pub fn new(parts: usize) -> Lpt {
        Lpt((0..parts).map(|i| Reverse((0, i))).collect())
    }

    /// The part an item of `weight` goes to: the least loaded (lowest index on ties).
    pub fn deal(&mut self, weight: u64) -> usize {
        let Reverse((load, part)) = self.0.pop().expect("at least one part");
        self.0.push(Reverse((load + weight, part)));
        part
    }
}

/// Entries, largest first, with their part by LPT: `ferry partition --parts`.
pub fn lpt(
    by_size: impl Iterator<Item = io::Result<Entry>>,
    parts: usize,
) -> impl Iterator<Item = io::Result<(Entry, usize)>> {
    let mut lpt = Lpt::new(parts);
    by_size.map(move |e| {
        e.map(|e| {
            let part = lpt.deal(weight_of(&e));
            (e, part)
        })
    })
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
        Filler {
            max_files,
            max_bytes,
            files: 0,
            bytes: 0,
        }
    }

    /// Adds an entry; true if it opens a new part (the caller then starts one).
    pub fn add(&mut self, size: u64) -> bool {
        let opens = self.files == 0;
        self.files += 1;
        self.bytes += size;
        if self.max_files.is_some_and(|f| self.files >= f)
            || self.max_bytes.is_some_and(|s| self.bytes >= s)
        {
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
    crate::run_dir::LAYOUT.part_file(i)
}

/// The `mode` a summary reports for parts cut by caps (`--max-files` and/or `--max-bytes`),
/// spelt as the pipelines' `partition.mode` is.
pub fn caps_mode(max_files: bool, max_bytes: bool) -> &'static str {
    match (max_files, max_bytes) {
        (true, true) => "max-files-bytes",
        (false, true) => "max-bytes",
        _ => "max-files",
    }
}

fn create_part(dir: &Path, i: usize, buffer: usize) -> anyhow::Result<Writer<BufWriter<File>>> {
    let p = dir.join(part_name(i));
    let f = File::create(&p).with_context(|| format!("cannot create {}", p.display()))?;
    Ok(Writer::new(BufWriter::with_capacity(buffer, f))?)
}

/// Part files written one after another, in input order: the next opens as the last closes.
pub struct PartWriter {
    out: PathBuf,
    current: Option<Writer<BufWriter<File>>>,
    parts: Vec<PartTotals>,
}

impl PartWriter {
    pub fn new(out: &Path) -> PartWriter {
        PartWriter {
            out: out.to_path_buf(),
            current: None,
            parts: Vec::new(),
        }
    }

    /// Closes the open part, if any, and opens the next.
    pub fn next_part(&mut self) -> anyhow::Result<()> {
        if let Some(w) = self.current.take() {
            w.finish()?;
        }
        self.current = Some(create_part(&self.out, self.parts.len(), 1 << 20)?);
        self.parts.push(PartTotals::default());
        Ok(())
    }

    /// Writes `e` into the open part.
    pub fn write(&mut self, e: &Entry) -> anyhow::Result<()> {
        self.current.as_mut().expect("a part is open").write(e)?;
        let p = self.parts.last_mut().expect("a part is open");
        p.files += 1;
        p.bytes += e.size();
        Ok(())
    }

    /// Closes the last part; what each part holds, in order.
    pub fn finish(self) -> anyhow::Result<Vec<PartTotals>> {
        if let Some(w) = self.current {
            w.finish()?;
        }
        Ok(self.parts)
    }
}

/// Parts open at once while distributing: enough for any usual plan, few enough for the
/// descriptor limit and for 64 KiB of buffer each.
pub(crate) const MAX_OPEN: usize = 256;

/// Writes `bins` part files from a stream of (entry, part), at most MAX_OPEN parts at a time:
/// with more parts the stream is made again for each group.
pub fn distribute<I, F>(out: &Path, bins: usize, mut stream: F) -> anyhow::Result<Vec<PartTotals>>
where
    I: Iterator<Item = io::Result<(Entry, usize)>>,
    F: FnMut() -> anyhow::Result<I>,
{
    let mut parts = vec![PartTotals::default(); bins];
    for first in (0..bins).step_by(MAX_OPEN) {
        let group = first..(first + MAX_OPEN).min(bins);
        let mut writers = group
            .clone()
            .map(|i| create_part(out, i, 64 * 1024))
            .collect::<anyhow::Result<Vec<_>>>()?;
        for item in stream()? {
            let (e, bin) = item?;
            if group.contains(&bin) {
                writers[bin - first].write(&e)?;
                parts[bin].files += 1;
                parts[bin].bytes += e.size();
            }
        }
        for w in writers {
            w.finish()?;
        }
    }
    Ok(parts)
}

/// Writes the `summary.json` of a set of parts into `out`, as `ferry partition` and `ferry plan`
/// (for each of its sets) do; returns its text.
pub fn write_summary(
    out: &Path,
    mode: &str,
    parts: &[PartTotals],
    dirs: u64,
) -> anyhow::Result<String> {
    let text = serde_json::to_string_pretty(&summary(mode, parts, dirs))?;
    std::fs::write(out.join(&LAYOUT.parts.summary), format!("{text}\n"))?;
    Ok(text)
}

fn summary(mode: &str, parts: &[PartTotals], dirs: u64) -> PartitionDoc {
    let loads: Vec<u64> = parts.iter().map(|p| p.bytes).collect();
    PartitionDoc {
        version: Version,
        mode: mode.into(),
        parts: parts.len(),
        files: parts.iter().map(|p| p.files).sum(),
        bytes: loads.iter().sum(),
        imbalance_pct: (imbalance_pct(&loads) * 100.0).round() / 100.0,
        dirs,
        dirs_file: (dirs > 0).then(|| LAYOUT.parts.dirs.clone()),
        partitions: parts
            .iter()
            .enumerate()
            .map(|(i, p)| PartSummary {
                index: i,
                file: part_name(i),
                files: p.files,
                bytes: p.bytes,
            })
            .collect(),
    }
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
        v.iter()
            .enumerate()
            .map(|(i, &s)| Entry::file(format!("f{i:05}"), s))
            .collect()
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
