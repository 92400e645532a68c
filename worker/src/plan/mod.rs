//! The planner: compares a source and a destination listing and decides what a phase copies,
//! what it verifies and what the final pass would delete, cut into partitions for the jobs.
//! Streaming throughout (docs/plan.md): each listing is sorted by path externally, the two
//! sorted streams are merge-joined, and the partitioners hold at most one sort run.

pub mod deletions;
pub mod split;

use std::io;
use std::path::{Path, PathBuf};

use anyhow::Context;

pub use crate::documents::plan::{PartRow, Partitioning, PlanDoc, SourceCounts, ToCopy, Totals};
use crate::manifest::{self, Entry, Kind};
use crate::newer::{overwrites_newer, Newer, Newest};
use crate::run_dir::LAYOUT;
use crate::same::{classify, Attrs, Compare, Verdict};
use crate::sorted::sort::{Order, Runs, Sorter};
use crate::sorted::{join, sort_entries, Pair, SortError};
use deletions::{Decide, Deletions};
use split::{Method, Part, Splitter, Tool};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Phase {
    Baseline,
    Incremental,
    Final,
    /// The whole-tree check after the final pass, out of the downtime: nothing is copied,
    /// every source entry is verified.
    Audit,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Baseline => "baseline",
            Phase::Incremental => "incremental",
            Phase::Final => "final",
            Phase::Audit => "audit",
        }
    }
}

/// What the plan is asked for.
pub struct Options {
    /// A listing: its one file, or its list jobs' files.
    pub source: Vec<PathBuf>,
    pub dest: Option<Vec<PathBuf>>,
    pub phase: Phase,
    pub compare: Compare,
    /// The attributes compared beyond the bytes (`--preserve`).
    pub attrs: Attrs,
    /// Hard links are kept (`--preserve`): a link group's names go to one copy part together.
    pub links: bool,
    pub skip_symlinks: bool,
    pub tool: Tool,
    pub method: Method,
    pub partitioning: Partitioning,
    /// Bytes of entries held in memory by one sort before it spills a run.
    pub sort_memory: usize,
}

impl Totals {
    fn add(&mut self, e: &Entry) {
        self.files += 1;
        self.bytes += e.size();
    }
}

impl PlanDoc {
    /// DIR/plan.json, as `ferry plan` wrote it.
    pub fn read(dir: &Path) -> anyhow::Result<PlanDoc> {
        crate::jsonfile::read(&dir.join(&LAYOUT.plan_files.plan), "plan")
    }

    /// Why the pass's prune refuses this plan (`dir`), whatever its limit: a plan made without
    /// a destination listing cannot say what to delete; a source that listed nothing is refused
    /// unless `force`, as an unmounted share looks like one.
    pub fn prune_refusal(&self, dir: &Path, force: bool) -> Option<String> {
        let s = &self.source;
        if self.dest.is_none() {
            return Some(format!(
                "the plan in {} is a {} plan, made without a destination listing: it cannot say what to delete",
                dir.display(),
                self.phase
            ));
        }
        if s.files + s.dirs + s.symlinks + s.specials == 0 && !force {
            return Some(format!(
                "the plan in {} found no entries at the source; pass --force if it really is empty",
                dir.display()
            ));
        }
        self.newer_deletions.prune_refusal(force)
    }

    /// What the pass's prune deletes, and of how many destination entries, for --max-delete:
    /// files, symlinks and the directories they leave empty, of the destination's entries.
    pub fn deletions(&self) -> (u64, u64) {
        let dest = self.dest.as_ref().map_or(0, |d| d.files) + self.dest_dirs;
        (self.extra_on_dest.files + self.prune_dirs, dest)
    }
}

/// Whether copying a file or symlink over `dst` would delete a directory's tree in a phase
/// that deletes nothing: the live passes before the final one leave it. The final pass's copy
/// replaces it, inside the window, and its plan has everything under the directory among its
/// deletions (counted against prune's --max-delete; prune finds them gone).
fn replaces_a_tree(phase: Phase, dst: Option<&Entry>) -> bool {
    matches!(phase, Phase::Baseline | Phase::Incremental)
        && dst.is_some_and(|d| d.kind == Kind::Dir)
}

/// Appends the planned directories and nodes to the first part in `dir`, made if there is none.
/// The part is written anew beside itself, both read whole, so that it ends with one end record
/// that counts everything in it.
fn append_dirs(dirs: &Path, dir: &Path, parts: &mut Vec<PartRow>) -> anyhow::Result<()> {
    let first = dir.join(crate::partition::part_name(0));
    if parts.is_empty() {
        manifest::Writer::new(std::fs::File::create(&first)?)?.finish()?;
        parts.push(PartRow {
            id: LAYOUT.part_id(0),
            files: 0,
            bytes: 0,
        });
    }
    let joined = first.with_extension("tsv.joining");
    let mut out = manifest::Writer::new(io::BufWriter::new(
        std::fs::File::create(&joined)
            .with_context(|| format!("cannot write {}", joined.display()))?,
    ))?;
    for path in [first.as_path(), dirs] {
        for e in manifest::Reader::open_whole(path)? {
            out.write(&e.map_err(anyhow::Error::msg)?)?;
        }
    }
    out.finish()?.into_inner().map_err(|e| e.into_error())?;
    std::fs::rename(&joined, &first)
        .with_context(|| format!("cannot replace {}", first.display()))?;
    Ok(())
}

fn rows(parts: Vec<Part>) -> Vec<PartRow> {
    parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| PartRow {
            id: LAYOUT.part_id(i),
            files: p.files,
            bytes: p.bytes,
        })
        .collect()
}

/// Sorts one listing (its files, one after another) by path into runs under `scratch`.
fn sort_listing(
    files: &[PathBuf],
    scratch: &Path,
    stem: &str,
    budget: usize,
) -> anyhow::Result<Runs> {
    let mut readers = Vec::with_capacity(files.len());
    for path in files {
        readers.push(manifest::Reader::open_whole(path)?);
    }
    sort_entries(readers.into_iter().flatten(), scratch, stem, budget).map_err(|e| match e {
        // The reader's message names the listing and the line already.
        SortError::Listing(line) => anyhow::Error::msg(line),
        spill => spill.into(),
    })
}

/// Pushes, one group after another, every name of each hard-link group (`all`, in link-group
/// order) that has a name to copy (`copied`, the same order), so the splitter keeps the group in
/// one part. One group is held at a time. Returns the names planned only to be linked.
fn plan_link_groups(all: &Runs, copied: &Runs, copy: &mut Splitter) -> anyhow::Result<u64> {
    let key = |e: &Entry| e.link.map(|(dev, ino)| (ino, dev));
    let mut copied = copied.merge()?.peekable();
    let (mut group, mut only_linked): (Vec<Entry>, u64) = (Vec::new(), 0);
    let mut flush = |group: &mut Vec<Entry>| -> anyhow::Result<()> {
        let Some(id) = group.first().map(key) else {
            return Ok(());
        };
        let mut to_copy = 0;
        while let Some(c) = copied.next_if(|c| c.as_ref().map_or(true, |c| key(c) <= id)) {
            to_copy += (key(&c?) == id) as u64;
        }
        if to_copy > 0 {
            only_linked += group.len() as u64 - to_copy;
            for e in group.iter() {
                copy.push(e)?;
            }
        }
        group.clear();
        Ok(())
    };
    for e in all.merge()? {
        let e = e?;
        if group.first().is_some_and(|g| key(g) != key(&e)) {
            flush(&mut group)?;
        }
        group.push(e);
    }
    flush(&mut group)?;
    Ok(only_linked)
}

/// delete.tsv, every file and symlink to delete (for review), and prune/: the same cut in path
/// order into `parts(count)` parts (one at least, none when nothing goes), contiguous and about
/// equal in count, for prune jobs to delete at once; the directories the deletions
/// leave empty, in the order they go (dirs.tsv); and the directories that stay and take the
/// source's mtime once every part is done (touched.tsv). Without a destination listing (a
/// baseline) every one is empty.
fn write_deletions(
    out: &Path,
    mut deletions: Option<Deletions>,
    parts: impl Fn(u64) -> u64,
) -> anyhow::Result<Vec<PartRow>> {
    let dir = out.join(&LAYOUT.plan_files.parts.prune);
    std::fs::create_dir_all(&dir)?;
    let create = |path: PathBuf| -> io::Result<_> {
        manifest::Writer::new(io::BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(path)?,
        ))
    };
    let close = |w: manifest::Writer<io::BufWriter<std::fs::File>>| -> io::Result<()> {
        w.finish()?.into_inner().map_err(|e| e.into_error())?;
        Ok(())
    };
    let copy_all = |from: Option<&mut crate::sorted::sort::Spill>, to: PathBuf| -> io::Result<()> {
        let mut w = create(to)?;
        if let Some(from) = from {
            for e in from.read()? {
                w.write(&e?)?;
            }
        }
        close(w)
    };
    let mut d = deletions.as_mut();
    copy_all(
        d.as_mut().map(|d| &mut d.dirs),
        dir.join(&LAYOUT.parts.dirs),
    )?;
    copy_all(
        d.as_mut().map(|d| &mut d.touched),
        dir.join(&LAYOUT.plan_files.touched),
    )?;
    let mut all = create(out.join(&LAYOUT.plan_files.delete))?;
    let mut rows = Vec::new();
    if let Some(d) = d {
        let n = d.file_count;
        let parts = if n == 0 { 0 } else { parts(n).clamp(1, n) };
        let mut files = d.files.read()?;
        for i in 0..parts {
            let count = n / parts + u64::from(i < n % parts);
            let mut w = create(dir.join(crate::partition::part_name(i as usize)))?;
            let mut row = PartRow {
                id: LAYOUT.part_id(i as usize),
                files: 0,
                bytes: 0,
            };
            for e in files.by_ref().take(count as usize) {
                let e = e?;
                row.files += 1;
                row.bytes += e.size();
                w.write(&e)?;
                all.write(&e)?;
            }
            close(w)?;
            rows.push(row);
        }
    }
    close(all)?;
    Ok(rows)
}

/// Writes the plan into `out` (copy/, verify/, delete.tsv, prune/; scratch files in `scratch`) and
/// returns plan.json's document (the caller writes it last).
pub fn plan(opts: &Options, out: &Path, scratch: &Path) -> anyhow::Result<PlanDoc> {
    let started = std::time::Instant::now();
    let source_runs = sort_listing(&opts.source, scratch, "source", opts.sort_memory)?;
    let dest_runs = match &opts.dest {
        Some(d) => Some(sort_listing(d, scratch, "dest", opts.sort_memory)?),
        None => None,
    };
    eprintln!(
        "ferry plan: listings sorted in {:.1} s ({} sorted runs)",
        started.elapsed().as_secs_f64(),
        source_runs.count() + dest_runs.as_ref().map_or(0, Runs::count)
    );
    let mut pass = Pass::new(opts, out, scratch, dest_runs.is_some())?;
    let source_entries = source_runs.merge()?;
    let visit = |pair: Pair| pass.visit(pair);
    match &dest_runs {
        Some(d) => join(source_entries, d.merge()?, visit)?,
        None => join(source_entries, std::iter::empty(), visit)?,
    }
    drop(source_runs);
    drop(dest_runs);
    let doc = pass.finish(out, scratch)?;
    let (c, n) = (&doc.to_copy, doc.copy_partitions.len());
    eprintln!(
        "ferry plan: {} of {} files to copy ({} new, {} changed, {} undecided, {} of another type before, {} in a directory's place left to the final pass), {} metadata only, {} directories and nodes, {} unchanged, {} only on the destination; {} copy parts in {:.1} s",
        c.files, doc.source.files, c.new, c.changed, c.undecided, c.type_changed, c.deferred, c.metadata_only, c.dirs, doc.unchanged, doc.extra_on_dest.files, n,
        started.elapsed().as_secs_f64()
    );
    Ok(doc)
}

/// What the join counts for plan.json.
#[derive(Default)]
struct Counts {
    source: SourceCounts,
    source_files: Totals,
    dest: Totals,
    dest_dirs: u64,
    to_copy: ToCopy,
    unchanged: u64,
    extra: Totals,
    newest: Newest,
    newer_at_dest: Newer,
}

/// One plan's pass over the joined listings: the decision for each pair goes to the writers here
/// as it is made, so that nothing but the counts and one sort run is held.
struct Pass<'a> {
    opts: &'a Options,
    /// An audit checks everything and copies nothing; every other phase verifies what it copied.
    audit: bool,
    copy: Splitter,
    verify: Option<Splitter>,
    /// Directories and nodes to make or update: no bytes to balance, so they go to the first
    /// copy part, after its files, and count in no part's totals.
    dirs: manifest::Writer<io::BufWriter<std::fs::File>>,
    /// What the final pass would delete, decided in this join rather than by prune's own: the
    /// destination's listing is the one this pass plans against.
    deletions: Option<Decide>,
    /// Hard-linked files are held back, sorted by link group, and planned after the join, a
    /// group's names together (see `plan_link_groups`): every name of a group one of whose
    /// names is copied, all in one part.
    linked: Sorter,
    linked_copied: Sorter,
    counts: Counts,
}

impl<'a> Pass<'a> {
    fn new(opts: &'a Options, out: &Path, scratch: &Path, has_dest: bool) -> anyhow::Result<Self> {
        let splitter = |dir: &str, stem: &'static str| {
            Splitter::new(
                out.join(dir),
                scratch.to_path_buf(),
                stem,
                opts.tool,
                opts.method,
            )
        };
        let copy = splitter(&LAYOUT.plan_files.parts.copy, "copy")?;
        let audit = opts.phase == Phase::Audit;
        let verify = match opts.phase {
            Phase::Audit => Some(splitter(&LAYOUT.plan_files.parts.verify, "verify")?),
            _ => None,
        };
        let dirs = manifest::Writer::new(io::BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(scratch.join(&LAYOUT.parts.dirs))?,
        ))?;
        let deletions = match has_dest {
            true => Some(Decide::new(scratch, true)?),
            false => None,
        };
        let budget = (opts.sort_memory / 2).max(1);
        let sorter = |stem: &str| Sorter::new(Order::Link, budget, scratch.to_path_buf(), stem);
        Ok(Pass {
            opts,
            audit,
            copy,
            verify,
            dirs,
            deletions,
            linked: sorter("linked"),
            linked_copied: sorter("linked-copied"),
            counts: Counts::default(),
        })
    }

    fn visit(&mut self, pair: Pair) -> anyhow::Result<()> {
        if let Some(d) = self.deletions.as_mut() {
            d.visit(&pair)?;
        }
        let n = &mut self.counts;
        let (src, dst) = match pair {
            Pair::Source(s) => (s, None),
            Pair::Both(s, d) => (s, Some(d)),
            Pair::Dest(d) => {
                if d.kind != Kind::Dir {
                    n.dest.add(&d);
                    n.extra.add(&d);
                }
                n.dest_dirs += (d.kind == Kind::Dir) as u64;
                return Ok(());
            }
        };
        match dst.as_ref() {
            Some(d) if d.kind == Kind::Dir => n.dest_dirs += 1,
            Some(d) => n.dest.add(d),
            None => {}
        }
        n.newest.see(&src);
        match src.kind {
            Kind::Dir => n.source.dirs += 1,
            Kind::Symlink => {
                n.source.symlinks += 1;
                // Blob storage holds no symlinks: planned, they would look new on every pass.
                if self.opts.skip_symlinks {
                    n.source.symlinks_not_migrated += 1;
                    return Ok(());
                }
            }
            k if k.is_special() => n.source.specials += 1,
            _ => {}
        }
        let verdict = classify(&src, dst.as_ref(), self.opts.compare, self.opts.attrs);
        if src.kind != Kind::File && src.kind != Kind::Symlink {
            return self.visit_dir(&src, verdict);
        }
        self.visit_file(&src, dst.as_ref(), verdict)
    }

    /// A directory or node needs copying only to be made, replace what stands in its way, or
    /// take new metadata; the files under a directory make it anyway.
    fn visit_dir(&mut self, src: &Entry, verdict: Verdict) -> anyhow::Result<()> {
        if verdict != Verdict::Same {
            self.counts.to_copy.dirs += 1;
            self.counts.to_copy.type_changed += (verdict == Verdict::TypeChanged) as u64;
        }
        // The audit verifies every directory and node (their metadata); other phases make
        // or update those that differ.
        if self.audit || verdict != Verdict::Same {
            self.dirs.write(src)?;
        }
        Ok(())
    }

    fn visit_file(
        &mut self,
        src: &Entry,
        dst: Option<&Entry>,
        verdict: Verdict,
    ) -> anyhow::Result<()> {
        let (opts, n) = (self.opts, &mut self.counts);
        n.source_files.add(src);
        if overwrites_newer(src, dst, (verdict, opts.compare), opts.attrs.times) {
            n.newer_at_dest.note(src);
        }
        if verdict == Verdict::TypeChanged && replaces_a_tree(opts.phase, dst) {
            n.to_copy.deferred += 1;
            return Ok(());
        }
        let to_copy = &mut n.to_copy;
        match verdict {
            Verdict::Same => n.unchanged += 1,
            Verdict::New => to_copy.new += 1,
            Verdict::Changed => to_copy.changed += 1,
            Verdict::TypeChanged => {
                to_copy.changed += 1;
                to_copy.type_changed += 1;
            }
            Verdict::Undecided => to_copy.undecided += 1,
            Verdict::MetaOnly => to_copy.metadata_only += 1,
        }
        if verdict.rewrites() {
            to_copy.files += 1;
            to_copy.bytes += src.size();
        }
        if let Some(v) = self.verify.as_mut() {
            v.push(src)?;
        }
        if self.audit {
            // Nothing is copied: the verify partitions are the whole plan.
        } else if opts.links && src.link.is_some() {
            self.linked.push(src)?;
            if verdict != Verdict::Same {
                self.linked_copied.push(src)?;
            }
        } else if verdict != Verdict::Same {
            self.copy.push(src)?;
        }
        Ok(())
    }

    /// Plans the held-back link groups, closes every part and returns plan.json's document.
    fn finish(self, out: &Path, scratch: &Path) -> anyhow::Result<PlanDoc> {
        let Pass {
            opts,
            audit,
            mut copy,
            verify,
            dirs,
            deletions,
            linked,
            linked_copied,
            mut counts,
        } = self;
        counts.to_copy.linked =
            plan_link_groups(&linked.finish()?, &linked_copied.finish()?, &mut copy)?;
        let mut copy_parts = rows(copy.finish()?);
        let deletions = deletions.map(Decide::finish).transpose()?;
        let prune_dirs = deletions.as_ref().map_or(0, |d| d.dir_count);
        // Deleting costs a request a file (or a batch), whatever its size: cut by count, into the
        // parts asked for, or by the file cap (as --auto chose it), else as many as the copy has.
        let prune_parts = |n: u64| match (&opts.partitioning.parts, opts.partitioning.max_files) {
            (Some(parts), _) => *parts as u64,
            (None, Some(cap)) => n.div_ceil(cap.max(1)),
            (None, None) => copy_parts.len() as u64,
        };
        let prune_partitions = write_deletions(out, deletions, prune_parts)?;
        let newer_deletions = Newer::deletions(
            manifest::Reader::open(&out.join(&LAYOUT.plan_files.delete))?
                .map(|e| e.map_err(io::Error::other)),
            counts.newest,
        )?;
        dirs.finish()?.into_inner().map_err(|e| e.into_error())?;
        let verify_parts = verify_parts(verify, &mut copy_parts, &counts, out, scratch)?;
        let Counts {
            mut source,
            source_files,
            ..
        } = counts;
        source.files = source_files.files;
        source.bytes = source_files.bytes;
        let baseline = opts.phase == Phase::Baseline;
        Ok(PlanDoc {
            version: Default::default(),
            phase: opts.phase.name().into(),
            compare: if baseline {
                "none"
            } else {
                opts.compare.name()
            }
            .into(),
            source,
            dest: (!baseline).then_some(counts.dest),
            dest_dirs: counts.dest_dirs,
            to_copy: counts.to_copy,
            unchanged: counts.unchanged,
            extra_on_dest: counts.extra,
            partitioning: opts.partitioning.clone(),
            copy_partitions: copy_parts,
            verify_partitions: verify_parts,
            verify_scope: if audit { "all" } else { "copied" }.into(),
            prune_partitions,
            prune_dirs,
            newer_at_dest: counts.newer_at_dest,
            newer_deletions,
        })
    }
}

/// The verify partitions: an audit's own, else the copy's, whose jobs verify what they copied.
/// The planned directories and nodes (in `scratch`) go to the first part of whichever the
/// phase makes them in.
fn verify_parts(
    verify: Option<Splitter>,
    copy_parts: &mut Vec<PartRow>,
    counts: &Counts,
    out: &Path,
    scratch: &Path,
) -> anyhow::Result<Vec<PartRow>> {
    let dirs_planned = scratch.join(&LAYOUT.parts.dirs);
    Ok(match verify {
        Some(v) => {
            let mut parts = rows(v.finish()?);
            if counts.source.dirs + counts.source.specials > 0 {
                append_dirs(
                    &dirs_planned,
                    &out.join(&LAYOUT.plan_files.parts.verify),
                    &mut parts,
                )?;
            }
            parts
        }
        None => {
            if counts.to_copy.dirs > 0 {
                append_dirs(
                    &dirs_planned,
                    &out.join(&LAYOUT.plan_files.parts.copy),
                    copy_parts,
                )?;
            }
            copy_parts
                .iter()
                .map(|p| PartRow {
                    id: p.id.clone(),
                    ..*p
                })
                .collect()
        }
    })
}
