//! Cutting one stream of entries into part files, in bounded memory: by caps as the entries
//! arrive, by LPT over runs of neighbouring entries, or by Debian's fpart fed from a spill file.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use crate::manifest::Entry;
pub use crate::partition::PartTotals as Part;
use crate::partition::{
    caps_mode, distribute, lpt_in_order, weight_of, write_summary, Filler, PartWriter,
};
use crate::sorted::sort::Spill;

/// How a set of entries is cut, as asked on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// N parts balanced by size (LPT over runs of neighbouring entries, `deal_runs`); fewer
    /// when there are fewer entries.
    Parts(usize),
    /// A part closes once it holds `max_files` entries or `max_bytes` bytes.
    Caps {
        max_files: Option<u64>,
        max_bytes: Option<u64>,
    },
    /// A part closes once files/max_files + bytes/max_bytes reaches 1: each cap is what one job
    /// gets through in the target time, so a mixed part costs about that time too.
    Auto { max_files: u64, max_bytes: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Tool {
    Ferry,
    Fpart,
}

/// Runs a part is dealt, about, by `--parts`, at first: few, so that few parts share a
/// directory (each cut between runs can put one directory in one more part).
const RUNS_PER_PART: u64 = 4;
/// The heaviest part may weigh this much more than the mean, or than the heaviest file where
/// that is more (no cut can do better then), before the runs are cut twice as fine ...
const BALANCE: f64 = 1.02;
/// ... down to this many a part, where LPT's worst case is a part over the mean by one run.
const RUNS_PER_PART_MOST: u64 = 64;

pub struct Splitter {
    out: PathBuf,
    scratch: PathBuf,
    name: &'static str,
    tool: Tool,
    method: Method,
    state: State,
    files: u64,
    /// The hard-link group of the entry pushed last: a part never ends inside a group.
    last_link: Option<(u64, u64)>,
}

enum State {
    Fill {
        rule: FillRule,
        parts: PartWriter,
    },
    /// The entries in path order, and what they weigh together (`weight`).
    Lpt {
        spill: Spill,
        weight: u64,
    },
    Fpart(Spill),
}

enum FillRule {
    Caps(Filler),
    Auto {
        max_files: u64,
        max_bytes: u64,
        files: u64,
        bytes: u64,
    },
}

impl FillRule {
    /// Adds an entry; true if it opens a new part.
    fn add(&mut self, size: u64) -> bool {
        match self {
            FillRule::Caps(f) => f.add(size),
            FillRule::Auto {
                max_files,
                max_bytes,
                files,
                bytes,
            } => {
                let opens = *files == 0;
                *files += 1;
                *bytes += size;
                // files/F + bytes/B >= 1, in integers.
                let (f, b) = (*max_files as u128, *max_bytes as u128);
                if *files as u128 * b + *bytes as u128 * f >= f * b {
                    *files = 0;
                    *bytes = 0;
                }
                opens
            }
        }
    }
}

impl Splitter {
    /// Parts go to `out` (created here); `scratch` holds spill files; `name` tells this
    /// splitter's scratch files from another's. Entries are pushed in path order.
    pub fn new(
        out: PathBuf,
        scratch: PathBuf,
        name: &'static str,
        tool: Tool,
        method: Method,
    ) -> anyhow::Result<Splitter> {
        std::fs::create_dir_all(&out)
            .with_context(|| format!("cannot create {}", out.display()))?;
        let state = match (tool, method) {
            (Tool::Fpart, _) => {
                State::Fpart(Spill::create(scratch.join(format!("{name}.fpart-input")))?)
            }
            (Tool::Ferry, Method::Parts(_)) => State::Lpt {
                spill: Spill::create(scratch.join(format!("{name}.lpt-input")))?,
                weight: 0,
            },
            (
                Tool::Ferry,
                Method::Caps {
                    max_files,
                    max_bytes,
                },
            ) => State::Fill {
                rule: FillRule::Caps(Filler::new(max_files, max_bytes)),
                parts: PartWriter::new(&out),
            },
            (
                Tool::Ferry,
                Method::Auto {
                    max_files,
                    max_bytes,
                },
            ) => State::Fill {
                rule: FillRule::Auto {
                    max_files,
                    max_bytes,
                    files: 0,
                    bytes: 0,
                },
                parts: PartWriter::new(&out),
            },
        };
        Ok(Splitter {
            out,
            scratch,
            name,
            tool,
            method,
            state,
            files: 0,
            last_link: None,
        })
    }

    /// The names of a hard-link group are pushed one after another, and stay in one part: the
    /// copy job holding them links them to one copy. (A group counts once towards a part's
    /// caps, which it may then exceed.)
    pub fn push(&mut self, e: &Entry) -> anyhow::Result<()> {
        self.files += 1;
        let glued = e.link.is_some() && e.link == self.last_link;
        self.last_link = e.link;
        match &mut self.state {
            State::Fill { rule, parts } => {
                if !glued && rule.add(e.size()) {
                    parts.next_part()?;
                }
                parts.write(e)?;
            }
            State::Lpt { spill, weight } => {
                *weight += weight_of(e);
                spill.push(e)?;
            }
            State::Fpart(spill) => spill.push(e)?,
        }
        Ok(())
    }

    /// Closes the last part, writes `summary.json` (as `ferry partition` does) and returns the
    /// parts in order.
    pub fn finish(self) -> anyhow::Result<Vec<Part>> {
        let parts = match self.state {
            State::Fill { parts, .. } => parts.finish()?,
            State::Lpt { mut spill, weight } => {
                let n = match self.method {
                    Method::Parts(n) => n.min(self.files as usize),
                    _ => unreachable!("LPT is only for --parts"),
                };
                let (runs, owner) = deal_runs(&mut spill, weight, n)?;
                let n = n.min(runs.len());
                distribute(&self.out, n, || {
                    let mut bins = runs
                        .iter()
                        .zip(&owner)
                        .flat_map(|(&(len, _), &bin)| std::iter::repeat_n(bin, len as usize));
                    Ok(spill
                        .read()?
                        .map(move |e| e.map(|e| (e, bins.next().expect("a run for each entry")))))
                })?
            }
            State::Fpart(mut spill) => {
                let mut owner = run_fpart(
                    &mut spill,
                    &self.scratch,
                    self.name,
                    self.method,
                    self.files,
                )?;
                // fpart knows sizes only: a link group's names go where its first name went.
                let mut last = None;
                for (i, e) in spill.read()?.enumerate() {
                    let link = e?.link;
                    if i > 0 && link.is_some() && link == last {
                        owner[i] = owner[i - 1];
                    }
                    last = link;
                }
                let bins = owner.iter().map(|&b| b as usize + 1).max().unwrap_or(0);
                distribute(&self.out, bins, || {
                    let mut owner = owner.iter();
                    Ok(spill.read()?.map(move |e| {
                        e.map(|e| (e, *owner.next().expect("one owner per entry") as usize))
                    }))
                })?
            }
        };
        let mode = if parts.is_empty() {
            "empty"
        } else {
            match (self.tool, self.method) {
                (Tool::Fpart, _) => "fpart",
                (_, Method::Parts(_)) => "parts",
                (_, Method::Auto { .. }) => "auto",
                (
                    _,
                    Method::Caps {
                        max_files,
                        max_bytes,
                    },
                ) => caps_mode(max_files.is_some(), max_bytes.is_some()),
            }
        };
        write_summary(&self.out, mode, &parts, 0)?;
        if parts.iter().map(|p| p.files).sum::<u64>() != self.files {
            bail!(
                "{}: parts hold {} entries, expected {}",
                self.out.display(),
                parts.iter().map(|p| p.files).sum::<u64>(),
                self.files
            );
        }
        Ok(parts)
    }
}

/// `--parts` for the pipelines: the entries, in path order, are cut into runs of neighbours of
/// about the same weight, and LPT deals the runs out (heaviest first to the least loaded part).
/// A copy or verify job lists the directories its part writes into, and LPT over single files
/// puts some of nearly every directory in every part, so each job would list nearly the whole
/// tree; over runs, a directory is in as few parts as its size needs. A file heavier than a run
/// is a run of its own. The runs start at `RUNS_PER_PART` a part and are cut finer while they
/// are fewer than the parts (a few files outweigh the rest: down to one file a run, which is
/// LPT over files) or deal out less evenly than `BALANCE`. Returns each run's (entries, weight)
/// in path order, and its part.
/// A run of entries dealt to one part: (entries, weight).
type Run = (u64, u64);

fn deal_runs(spill: &mut Spill, weight: u64, n: usize) -> io::Result<(Vec<Run>, Vec<usize>)> {
    if n == 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut per_part = RUNS_PER_PART;
    loop {
        let most = weight.div_ceil(n as u64 * per_part).max(1);
        let (mut runs, mut open, mut heaviest, mut last) = (Vec::new(), (0u64, 0u64), 0, None);
        for e in spill.read()? {
            let e = e?;
            let w = weight_of(&e);
            heaviest = heaviest.max(w);
            // Never between two names of one hard-link group (pushed together).
            let glued = e.link.is_some() && e.link == last;
            last = e.link;
            if open.0 > 0 && open.1 + w > most && !glued {
                runs.push(std::mem::take(&mut open));
            }
            open = (open.0 + 1, open.1 + w);
        }
        if open.0 > 0 {
            runs.push(open);
        }
        // Cut as fine as it goes and still fewer runs than parts (link groups are not cut):
        // as many parts as runs.
        let n = if most == 1 { n.min(runs.len()) } else { n };
        if runs.len() >= n {
            let mut order: Vec<usize> = (0..runs.len()).collect();
            order.sort_by(|&a, &b| runs[b].1.cmp(&runs[a].1).then(a.cmp(&b)));
            let owner = lpt_in_order(order.into_iter().map(|i| (i, runs[i].1)), runs.len(), n);
            let mut loads = vec![0; n];
            for (run, &bin) in runs.iter().zip(&owner) {
                loads[bin] += run.1;
            }
            let fair = (weight as f64 / n as f64).max(heaviest as f64);
            let heaviest_part = loads.into_iter().max().unwrap_or(0) as f64;
            if heaviest_part <= fair * BALANCE || per_part >= RUNS_PER_PART_MOST || most == 1 {
                return Ok((runs, owner));
            }
        }
        per_part *= 2;
    }
}

/// fpart's arguments for how the parts are cut.
fn fpart_limits(cmd: &mut Command, method: Method, files: u64) {
    match method {
        Method::Parts(n) => {
            cmd.arg("-n").arg(n.min(files as usize).to_string());
        }
        Method::Caps {
            max_files,
            max_bytes,
        } => {
            if let Some(f) = max_files {
                cmd.arg("-f").arg(f.to_string());
            }
            if let Some(s) = max_bytes {
                cmd.arg("-s").arg(s.to_string());
            }
        }
        // fpart closes a part on either cap; it has no mixed rule.
        Method::Auto {
            max_files,
            max_bytes,
        } => {
            cmd.arg("-f")
                .arg(max_files.to_string())
                .arg("-s")
                .arg(max_bytes.to_string());
        }
    }
}

/// Runs fpart in arbitrary-values mode on the spilled entries and returns each entry's part.
/// fpart is fed `size index` lines, not names: it trims leading blanks from names, and the
/// index maps its answer back exactly without holding the entries.
fn run_fpart(
    spill: &mut Spill,
    scratch: &Path,
    name: &str,
    method: Method,
    files: u64,
) -> anyhow::Result<Vec<u32>> {
    if files == 0 {
        return Ok(Vec::new());
    }
    if files > u32::MAX as u64 {
        bail!("fpart: {files} entries is more than this planner indexes");
    }
    let dir = scratch.join(format!("{name}.fpart"));
    std::fs::create_dir_all(&dir)?;
    let mut cmd = Command::new("fpart");
    cmd.arg("-a")
        .arg("-i")
        .arg("-")
        .arg("-o")
        .arg(dir.join("fp"));
    fpart_limits(&mut cmd, method, files);
    eprintln!("+ {cmd:?}");
    // fpart's chatter goes to our stderr: stdout may carry --json.
    let stderr = std::io::stderr().as_fd().try_clone_to_owned()?;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::from(stderr))
        .spawn()
        .context("cannot run fpart (Debian package fpart)")?;
    {
        let mut feed = BufWriter::with_capacity(1 << 20, child.stdin.take().expect("piped stdin"));
        for (i, e) in spill.read()?.enumerate() {
            writeln!(feed, "{} {i}", e?.size())?;
        }
        feed.flush()?;
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("fpart failed ({status})");
    }
    let mut outputs: Vec<(u64, PathBuf)> = Vec::new();
    for f in std::fs::read_dir(&dir)? {
        let path = f?.path();
        let n = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("fp."))
            .and_then(|n| n.parse().ok());
        match n {
            Some(n) => outputs.push((n, path)),
            None => bail!("fpart wrote an unexpected file {}", path.display()),
        }
    }
    outputs.sort();
    let mut owner = vec![u32::MAX; files as usize];
    for (bin, (_, path)) in outputs.iter().enumerate() {
        for line in BufReader::new(File::open(path)?).lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let i: usize = line
                .trim()
                .parse()
                .with_context(|| format!("fpart output {}: {line:?}", path.display()))?;
            match owner.get_mut(i) {
                Some(o) if *o == u32::MAX => *o = bin as u32,
                _ => bail!("fpart placed entry {i} twice or out of range"),
            }
        }
    }
    let placed = owner.iter().filter(|&&o| o != u32::MAX).count();
    if placed as u64 != files {
        bail!("fpart packed {placed} of {files} entries");
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(owner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::{part_name, MAX_OPEN};

    #[test]
    fn auto_rule_weighs_files_and_bytes_together() {
        let mut r = FillRule::Auto {
            max_files: 4,
            max_bytes: 100,
            files: 0,
            bytes: 0,
        };
        // 2 files of 25 bytes: 2/4 + 50/100 = 1 closes the part.
        assert_eq!([r.add(25), r.add(25)], [true, false]);
        // Four empty files fill a part by count alone.
        assert_eq!(
            [r.add(0), r.add(0), r.add(0), r.add(0), r.add(0)],
            [true, false, false, false, true]
        );
        // One big file has a part to itself.
        let mut r = FillRule::Auto {
            max_files: 4,
            max_bytes: 100,
            files: 0,
            bytes: 0,
        };
        assert_eq!([r.add(500), r.add(1)], [true, true]);
    }

    fn entries(sizes: &[u64]) -> Vec<Entry> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| Entry::file(format!("f{i:03}"), s))
            .collect()
    }

    fn read_parts(out: &Path, parts: &[Part]) -> Vec<Vec<Vec<u8>>> {
        (0..parts.len())
            .map(|i| {
                crate::manifest::Reader::open(&out.join(part_name(i)))
                    .unwrap()
                    .map(|e| e.unwrap().path)
                    .collect()
            })
            .collect()
    }

    fn split(
        dir: &Path,
        name: &'static str,
        all: &[Entry],
        n: usize,
    ) -> (Vec<Part>, Vec<Vec<Vec<u8>>>) {
        let out = dir.join(name);
        let mut s = Splitter::new(
            out.clone(),
            dir.to_path_buf(),
            name,
            Tool::Ferry,
            Method::Parts(n),
        )
        .unwrap();
        for e in all {
            s.push(e).unwrap();
        }
        let parts = s.finish().unwrap();
        let got = read_parts(&out, &parts);
        (parts, got)
    }

    #[test]
    fn a_link_group_is_never_cut() {
        let dir = tempfile::tempdir().unwrap();
        // Ten files, the middle four one hard-link group, pushed together.
        let mut all = entries(&[100; 10]);
        for e in &mut all[3..7] {
            e.link = Some((1, 42));
        }
        let group = |parts: &[Vec<Vec<u8>>]| {
            parts
                .iter()
                .filter(|p| {
                    p.iter()
                        .any(|n| n.as_slice() >= &b"f003"[..] && n.as_slice() <= &b"f006"[..])
                })
                .count()
        };
        for n in [2, 3, 5, 10] {
            let (_, got) = split(dir.path(), "lpt", &all, n);
            assert_eq!(group(&got), 1, "--parts {n}: {got:?}");
        }
        let out = dir.path().join("caps");
        let mut s = Splitter::new(
            out.clone(),
            dir.path().to_path_buf(),
            "caps",
            Tool::Ferry,
            Method::Caps {
                max_files: Some(2),
                max_bytes: None,
            },
        )
        .unwrap();
        for e in &all {
            s.push(e).unwrap();
        }
        let parts = s.finish().unwrap();
        assert_eq!(group(&read_parts(&out, &parts)), 1);
    }

    #[test]
    fn parts_are_balanced_and_keep_directories_together() {
        // 300 directories of 1–40 files of up to 64 KiB, in path order, and two big files.
        let mut all = Vec::new();
        for d in 0..300u64 {
            for f in 0..1 + d * 7919 % 40 {
                all.push(Entry::file(
                    format!("d{d:03}/f{f:02}"),
                    (d * 31 + f * 7919) % 65536,
                ));
            }
        }
        all.insert(10, Entry::file("d000/zz-big", 40 << 20));
        all.push(Entry::file("e/big", 30 << 20));
        all.sort_by(|a, b| a.path.cmp(&b.path));
        let dir = tempfile::tempdir().unwrap();
        for n in [3, 16] {
            let (parts, got) = split(dir.path(), if n == 3 { "p3" } else { "p16" }, &all, n);
            assert_eq!(parts.len(), n);
            let mut seen: Vec<&Vec<u8>> = got.iter().flatten().collect();
            seen.sort();
            assert_eq!(
                seen,
                all.iter().map(|e| &e.path).collect::<Vec<_>>(),
                "each entry in one part"
            );
            // Within 2 % of the mean, or of the heaviest file where that is more.
            let loads: Vec<u64> = parts.iter().map(|p| p.bytes).collect();
            let mean = loads.iter().sum::<u64>() / n as u64;
            let biggest = all.iter().map(|e| e.size()).max().unwrap();
            assert!(
                loads
                    .iter()
                    .all(|&l| l as f64 <= mean.max(biggest) as f64 * 1.02),
                "{loads:?}"
            );
            // The directories the parts' jobs list between them: each once, and one more for each
            // cut between runs at most, where LPT over files puts nearly every directory in
            // every part.
            let runs = RUNS_PER_PART_MOST as usize * n + 2;
            let mut listings = 0;
            for part in &got {
                listings += part
                    .iter()
                    .map(|p| p.split(|&c| c == b'/').next().unwrap())
                    .collect::<std::collections::HashSet<_>>()
                    .len();
            }
            assert!(
                listings <= 301 + runs,
                "{n} parts list {listings} directories"
            );
        }
    }

    #[test]
    fn runs_are_cut_finer_until_the_parts_balance() {
        // Blocks of a hundred small files and one of 30 KB: the first runs (4 a part) end where a
        // 30 KB file no longer fits, so they weigh unevenly, and dealt out as they are they leave
        // a part 3.5 % over the mean.
        let sizes: Vec<u64> = (0..31 * 101)
            .map(|i| if i % 101 == 100 { 30_000 } else { 1_000 })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let (parts, _) = split(dir.path(), "blocks", &entries(&sizes), 3);
        let loads: Vec<u64> = parts.iter().map(|p| p.bytes).collect();
        let mean = loads.iter().sum::<u64>() / 3;
        assert!(
            loads.iter().all(|&l| l as f64 <= mean as f64 * 1.02),
            "{loads:?}"
        );
    }

    #[test]
    fn a_few_heavy_files_still_give_every_part_some() {
        // Four files outweigh the rest: the runs are cut finer until all 8 parts get one.
        let mut sizes = vec![1 << 30, 1 << 30, 1 << 30, 1 << 30];
        sizes.extend([100; 20]);
        let dir = tempfile::tempdir().unwrap();
        let (parts, _) = split(dir.path(), "heavy", &entries(&sizes), 8);
        assert_eq!(parts.len(), 8);
        assert!(parts.iter().all(|p| p.files > 0), "{parts:?}");
        assert_eq!(
            parts.iter().filter(|p| p.bytes >= 1 << 30).count(),
            4,
            "{parts:?}"
        );
    }

    #[test]
    fn more_parts_than_one_pass_opens_and_the_same_parts_again() {
        // More parts than one distribution pass opens: the spill is read again per group.
        let sizes: Vec<u64> = (0..2000).map(|i| (i * 7919 % 1000) as u64 * 1000).collect();
        let dir = tempfile::tempdir().unwrap();
        let (parts, got) = split(dir.path(), "many", &entries(&sizes), MAX_OPEN + 5);
        assert_eq!(parts.len(), MAX_OPEN + 5);
        assert_eq!(got.iter().map(Vec::len).sum::<usize>(), 2000);
        assert_eq!(
            split(dir.path(), "again", &entries(&sizes), MAX_OPEN + 5).1,
            got,
            "deterministic"
        );
    }

    #[test]
    fn fewer_entries_than_parts_and_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Splitter::new(
            dir.path().join("a"),
            dir.path().to_path_buf(),
            "a",
            Tool::Ferry,
            Method::Parts(8),
        )
        .unwrap();
        for e in entries(&[5, 6]) {
            s.push(&e).unwrap();
        }
        assert_eq!(s.finish().unwrap().len(), 2);
        let s = Splitter::new(
            dir.path().join("b"),
            dir.path().to_path_buf(),
            "b",
            Tool::Ferry,
            Method::Parts(8),
        )
        .unwrap();
        assert!(s.finish().unwrap().is_empty());
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("b/summary.json")).unwrap())
                .unwrap();
        assert_eq!(summary["mode"], "empty");
    }
}
