use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use crate::documents::{PathError, PruneDoc};
use anyhow::Context;
use clap::Args;
use futures::StreamExt;

use super::{
    default_concurrency, find_listed_twice, manifest_entries, open, open_options, parse_roots,
    Pacer,
};
use crate::cli::{Common, Sorting};
use crate::manifest::{Entry, Kind, Writer};
use crate::sorted::sort::{Runs, Spill};
use crate::sorted::{sort_store, Join, JoinError, Pair, PathSort, Scratch, Side, SortError};
use crate::stats::Stats;
use crate::storage::Store;

#[derive(Args, Debug)]
pub struct PruneArgs {
    pub source: String,
    pub dest: String,
    /// The source as a manifest instead of a fresh listing (e.g. the pipeline's own listing)
    #[arg(long, value_name = "MANIFEST")]
    pub files_from: Option<PathBuf>,
    /// The destination as a manifest instead of a fresh listing: the listing the pass planned
    /// against (carried or fresh), written to since only by the pass itself
    #[arg(long, value_name = "MANIFEST")]
    pub dest_from: Option<PathBuf>,
    /// The listings' list jobs (`ferry shard`'s document): --files-from and --dest-from name
    /// their files with {shard}
    #[arg(long, value_name = "FILE")]
    pub shards: Option<PathBuf>,
    /// List what would be deleted; delete nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Refuse if more than this would go: a count (1000) or a share of the destination (10%)
    #[arg(long, default_value = "50%", value_parser = parse_limit)]
    pub max_delete: Limit,
    /// Delete even past --max-delete, or when the source is empty
    #[arg(long)]
    pub force: bool,
    /// Where to write the list of deletions, in manifest format (default:
    /// $XDG_STATE_HOME/ferry/prune-<time>.tsv, i.e. ~/.local/state/ferry/ unless set)
    #[arg(long)]
    pub log: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub sorting: Sorting,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Clone, Copy, Debug)]
pub enum Limit {
    Count(u64),
    Percent(f64),
}

fn parse_limit(s: &str) -> Result<Limit, String> {
    match s.strip_suffix('%') {
        Some(p) => p
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|p| (0.0..=100.0).contains(p))
            .map(Limit::Percent)
            .ok_or_else(|| format!("bad percentage {s:?}")),
        None => s
            .trim()
            .parse()
            .map(Limit::Count)
            .map_err(|_| format!("--max-delete takes a count or a percentage, got {s:?}")),
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Count(c) => write!(f, "{c}"),
            Limit::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Limit {
    fn allows(self, n: u64, of: u64) -> bool {
        match self {
            Limit::Count(c) => n <= c,
            Limit::Percent(p) => of == 0 || (n as f64) <= of as f64 * p / 100.0,
        }
    }
}

/// Where a prune keeps its record of deletions when not told: the user's state directory, never
/// the current one (which may be a job's scratch space, or the tree being pruned).
fn default_log() -> anyhow::Result<PathBuf> {
    let state = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).context("neither --log, XDG_STATE_HOME nor HOME is set: say where the deletion log goes with --log")?;
            PathBuf::from(home).join(".local/state")
        }
    };
    let dir = state.join("ferry");
    std::fs::create_dir_all(&dir).with_context(|| {
        format!(
            "cannot create {} for the deletion log (or pass --log)",
            dir.display()
        )
    })?;
    Ok(dir.join(format!("prune-{}.tsv", unix_now())))
}

pub async fn run(args: PruneArgs) -> anyhow::Result<ExitCode> {
    super::interruptible(prune(args)).await
}

async fn prune(args: PruneArgs) -> anyhow::Result<ExitCode> {
    let concurrency = default_concurrency();
    let stats = Arc::new(Stats::default());
    let opts = open_options(&args.common, concurrency, stats.clone());
    let (src_loc, dst_loc) = parse_roots(&args.source, &args.dest)?;
    let src = open(&src_loc, &opts)?;
    let dst = open(&dst_loc, &opts)?;
    let log_path = match args.log.clone() {
        Some(p) => p,
        None => default_log()?,
    };

    let refuse = |why: String| -> anyhow::Result<ExitCode> {
        if args.json {
            super::print_json(&PruneDoc {
                version: Default::default(),
                command: "prune",
                dry_run: args.dry_run,
                deleted: 0,
                would_delete: 0,
                dirs: 0,
                failed: 0,
                failures: Vec::new(),
                refused: Some(why.clone()),
                warning: None,
                log: None,
                requests: stats.requests.counts(),
            });
        }
        eprintln!("prune refused, nothing deleted: {why}");
        Ok(ExitCode::from(1))
    };

    let scratch = Scratch::new(args.sorting.scratch.as_deref())?;
    let mut plan = match plan(&args, &src, &dst, scratch.path()).await {
        Ok(plan) => plan,
        Err(Stop::Refused(why)) => return refuse(why),
        Err(Stop::Failed(e)) => return Err(e),
    };
    let (n, dest_files) = (plan.file_count, plan.dest_files);
    let over_limit = (!args.force && !args.max_delete.allows(n, dest_files)).then(|| {
        format!("{n} of {dest_files} destination files would be deleted, more than --max-delete {} allows", args.max_delete)
    });
    if let (Some(why), false) = (&over_limit, args.dry_run) {
        return refuse(format!(
            "{why}; review with --dry-run, then pass --force or raise --max-delete"
        ));
    }

    let mut log = Writer::new(BufWriter::new(
        std::fs::File::create(&log_path)
            .with_context(|| format!("cannot write {}", log_path.display()))?,
    ))?;
    let deleted = match args.dry_run {
        true => plan.list(&mut log, !args.json).await?,
        false => {
            let n = plan.delete(&dst, &mut log, &stats, concurrency).await?;
            plan.restore_mtimes(&src, &dst, &stats).await?;
            n
        }
    };
    log.finish()?;
    Ok(report(&args, &plan, deleted, over_limit, &stats, &log_path))
}

/// What stops a prune before it deletes anything.
enum Stop {
    /// Refused for safety (exit 1): the listings cannot be trusted to say what the source lacks.
    Refused(String),
    Failed(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for Stop {
    fn from(e: E) -> Stop {
        Stop::Failed(e.into())
    }
}

/// Sorts both sides and plans the deletions; refuses when the source's listing is doubtful
/// (failed, empty without --force, naming a path twice) or the destination's failed.
async fn plan(
    args: &PruneArgs,
    src: &Arc<dyn Store>,
    dst: &Arc<dyn Store>,
    scratch: &Path,
) -> Result<Deletions, Stop> {
    let budget = args.sorting.memory.budget();
    let files = |m: &Option<PathBuf>| {
        m.as_ref()
            .map(|m| crate::shard::listing_files(m, args.shards.as_deref()))
            .transpose()
    };
    let (source_files, dest_files) = (files(&args.files_from)?, files(&args.dest_from)?);
    // A source we could not read completely must never be mistaken for one that lost files.
    let source = match sort_side(source_files.as_deref(), src, scratch, "source", budget).await {
        Err(SortError::Listing(e)) => {
            return Err(Stop::Refused(format!("the source listing failed ({e})")))
        }
        runs => runs?,
    };
    if source.entries() == 0 && !args.force {
        return Err(Stop::Refused(format!(
            "the source {} lists no entries; pass --force if it really is empty",
            src.describe()
        )));
    }
    let dest = match sort_side(dest_files.as_deref(), dst, scratch, "dest", budget).await {
        Err(SortError::Listing(e)) => {
            return Err(Stop::Refused(format!(
                "the destination listing failed ({e})"
            )))
        }
        runs => runs?,
    };
    match Deletions::plan(&source, &dest, scratch, args.dest_from.is_some()).await {
        Err(PlanError::Join(
            e @ JoinError::Duplicate {
                side: Side::Source, ..
            },
        )) => Err(Stop::Refused(format!(
            "the source listing failed ({})",
            twice(source_files.as_deref(), e)
        ))),
        plan => Ok(plan?),
    }
}

/// A path the source names twice, with its lines when it came from a manifest.
fn twice(files: Option<&[PathBuf]>, e: JoinError) -> String {
    match (files, &e) {
        (Some(files), JoinError::Duplicate { path, .. }) => files
            .iter()
            .find_map(|m| find_listed_twice(m, path))
            .unwrap_or_else(|| e.to_string()),
        _ => e.to_string(),
    }
}

/// The summary: --json on stdout, or lines on stderr. Exit 1 if anything could not be deleted.
fn report(
    args: &PruneArgs,
    plan: &Deletions,
    deleted: u64,
    over_limit: Option<String>,
    stats: &Stats,
    log_path: &Path,
) -> ExitCode {
    let (n, dest_files) = (plan.file_count, plan.dest_files);
    let failed = Stats::get(&stats.files_failed);
    if args.json {
        let failures = stats.failures().into_iter();
        super::print_json(&PruneDoc {
            version: Default::default(),
            command: "prune",
            dry_run: args.dry_run,
            deleted,
            would_delete: n,
            dirs: plan.dir_count,
            failed,
            failures: failures
                .map(|(path, error)| PathError { path, error })
                .collect(),
            refused: None,
            warning: over_limit,
            log: Some(log_path.display().to_string()),
            requests: stats.requests.counts(),
        });
    } else if args.dry_run {
        eprintln!(
            "would delete {n} of {dest_files} destination files and {} directories; list in {}",
            plan.dir_count,
            log_path.display()
        );
        if let Some(why) = &over_limit {
            eprintln!("note: a real run would be refused: {why}");
        }
    } else {
        eprintln!(
            "deleted {deleted} of {dest_files} destination files, failed {failed}; list in {}",
            log_path.display()
        );
        for (p, e) in stats.failures() {
            eprintln!("failed: {p}: {e}");
        }
    }
    if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// One side's entries sorted by path: a fresh listing, or a manifest (checked line by line; a
/// path listed twice is found by the join).
async fn sort_side(
    manifest: Option<&[PathBuf]>,
    store: &Arc<dyn Store>,
    scratch: &Path,
    stem: &str,
    budget: usize,
) -> Result<Runs, SortError> {
    match manifest {
        Some(files) => {
            let (mut sort, mut pacer) = (PathSort::new(scratch, stem, budget), Pacer::default());
            for m in files {
                let entries =
                    manifest_entries(m).map_err(|e| SortError::Listing(format!("{e:#}")))?;
                for e in entries {
                    sort.push(e)?;
                    pacer.tick().await;
                }
            }
            sort.finish()
        }
        None => sort_store(store, scratch, stem, budget).await,
    }
}

#[derive(Debug, thiserror::Error)]
enum PlanError {
    #[error(transparent)]
    Join(#[from] JoinError),
    #[error("cannot keep the list of deletions in the scratch directory: {0}")]
    Scratch(#[from] io::Error),
}

/// What goes, spilled to scratch files in the order it goes: the destination's files and
/// symlinks that the source lacks, in path order, then the directories they leave empty.
/// Counted before anything is deleted, so that --max-delete can refuse first.
struct Deletions {
    files: Spill,
    file_count: u64,
    dirs: Spill,
    dir_count: u64,
    /// The destination's files and symlinks, for --max-delete's percentage.
    dest_files: u64,
    /// The directories that stay and lose an entry, or whose mtime is not the source's already
    /// (the parts of a pipeline write into one directory in no order), as the source lists
    /// them: each gets the source's mtime once the deletions are done.
    touched: Spill,
    /// The destination's listing predates the pass's copies (`--dest-from`): a touched
    /// directory's mtime is looked at before it is set.
    planned: bool,
}

impl Deletions {
    /// One merge-join of the two sorted listings. `planned`: the destination's listing is the
    /// one its pass planned against (`--dest-from`), so the directories the source has and it
    /// lacks were made since, by the pass's copies, and take the source's mtime too.
    async fn plan(
        source: &Runs,
        dest: &Runs,
        scratch: &Path,
        planned: bool,
    ) -> Result<Deletions, PlanError> {
        let mut files = Spill::create(scratch.join("delete-files"))?;
        let mut dirs = EmptiedDirs::new(Spill::create(scratch.join("delete-dirs"))?);
        let mut touched = TouchedDirs::new(Spill::create(scratch.join("touched-dirs"))?);
        let (mut file_count, mut dest_files) = (0, 0);
        let mut pacer = Pacer::default();
        for pair in Join::new(source.merge()?, dest.merge()?)? {
            pacer.tick().await;
            let (d, kept) = match pair? {
                Pair::Source(s) => {
                    if planned {
                        // Made by the pass: so was its directory's new mtime.
                        touched.advance(&s.path)?;
                        touched.lose(&s.path);
                        if s.kind == Kind::Dir {
                            touched.open(s, true);
                        }
                    }
                    continue;
                }
                Pair::Both(s, d) => {
                    touched.advance(&d.path)?;
                    if planned && rewritten(&s, &d) {
                        touched.lose(&s.path);
                    }
                    if s.kind == Kind::Dir && (d.kind == Kind::Dir || planned) {
                        // A planned listing's directory mtimes are as a verify saw them, before
                        // later parts wrote into them: each is looked at when the time comes.
                        let differs = s.mtime.is_some() && s.mtime != d.mtime;
                        touched.open(s, differs || planned);
                    }
                    (d, true)
                }
                Pair::Dest(d) => {
                    touched.advance(&d.path)?;
                    touched.lose(&d.path);
                    (d, false)
                }
            };
            dirs.advance(&d.path)?;
            if d.kind != Kind::Dir {
                dest_files += 1;
            }
            match (kept, d.kind) {
                (true, _) => dirs.keep(&d.path),
                (false, Kind::Dir) => dirs.open(d),
                (false, _) => {
                    files.push(&d)?;
                    file_count += 1;
                }
            }
        }
        let (dirs, dir_count) = dirs.finish()?;
        let touched = touched.finish()?;
        Ok(Deletions {
            files,
            file_count,
            dirs,
            dir_count,
            dest_files,
            touched,
            planned,
        })
    }

    /// Gives the local directories that lost entries, or have another mtime than the source's,
    /// the source's (as `rsync --delete -t` leaves them); the root its from a look at the
    /// source root (set only where it differs). Blob storage has no directory whose mtime a
    /// deletion moves.
    async fn restore_mtimes(
        &mut self,
        src: &Arc<dyn Store>,
        dst: &Arc<dyn Store>,
        stats: &Stats,
    ) -> anyhow::Result<()> {
        if !dst.capabilities().directories {
            return Ok(());
        }
        for d in self.touched.read()? {
            let d = d.map_err(PlanError::Scratch)?;
            let Some(mtime) = d.mtime else { continue };
            if self.planned {
                match dst.head(&d.path).await {
                    Ok(Some((now, _))) if now.kind == Kind::Dir && now.mtime == Some(mtime) => {
                        continue
                    }
                    Ok(Some(_)) => {}
                    // Gone or unreadable: nothing of the pass's to mend.
                    Ok(None) | Err(_) => continue,
                }
            }
            let meta = crate::storage::Meta {
                mtime: Some(mtime),
                ..Default::default()
            };
            if let Err(e) = dst.set_meta(&d.path, Kind::Dir, &meta).await {
                stats.failed(
                    d.display_path(),
                    format!("directory mtime not restored: {e}"),
                );
            }
        }
        // Only a source whose root is a directory of its own has an mtime to restore (a
        // container's is only what a copy recorded of it).
        if !src.capabilities().directories {
            return Ok(());
        }
        let done = async {
            let Some(meta) = src.root_meta().await? else {
                return Ok(());
            };
            dst.set_root_meta(&crate::storage::Meta {
                mtime: meta.mtime,
                ..Default::default()
            })
            .await
        }
        .await;
        if let Err(e) = done {
            stats.failed(dst.describe(), format!("directory mtime not restored: {e}"));
        }
        Ok(())
    }

    /// A dry run: the log gets every planned deletion, and stdout too when `print`.
    async fn list(
        &mut self,
        log: &mut Writer<BufWriter<std::fs::File>>,
        print: bool,
    ) -> anyhow::Result<u64> {
        let mut out = BufWriter::new(io::stdout());
        let mut pacer = Pacer::default();
        for e in self.files.read()?.chain(self.dirs.read()?) {
            pacer.tick().await;
            let e = e.map_err(PlanError::Scratch)?;
            log.write(&e)?;
            if print {
                writeln!(out, "would delete\t{}", e.display_path())?;
            }
        }
        out.flush()?;
        Ok(0)
    }

    /// Deletes the files, then the directories in their order (each after those inside it).
    /// Where the destination takes many deletions in one request (Blob Batch), they go so, up
    /// to `concurrency` requests at a time; else one by one, `2 × concurrency` at a time. The
    /// log holds what was deleted, as the destination confirms it: a run cut short still says
    /// what it did, and a deletion refused inside a batch is that path's failure alone.
    async fn delete(
        &mut self,
        dst: &Arc<dyn Store>,
        log: &mut Writer<BufWriter<std::fs::File>>,
        stats: &Stats,
        concurrency: usize,
    ) -> anyhow::Result<u64> {
        let batch = dst.delete_batch().max(1);
        let in_flight = if batch > 1 {
            concurrency
        } else {
            concurrency * 2
        };
        let mut deleted = 0u64;
        let mut results = futures::stream::iter(self.files.read()?)
            .chunks(batch)
            .map(|chunk| {
                let dst = dst.clone();
                async move {
                    let entries = chunk.into_iter().collect::<io::Result<Vec<Entry>>>()?;
                    let done = dst.delete_many(&paths(&entries)).await;
                    Ok::<_, io::Error>(entries.into_iter().zip(done))
                }
            })
            .buffer_unordered(in_flight.max(1));
        while let Some(done) = results.next().await {
            for (e, r) in done.map_err(PlanError::Scratch)? {
                match r {
                    Ok(()) => {
                        deleted += 1;
                        log.write(&e)?;
                    }
                    Err(err) => stats.failed(e.display_path(), err.to_string()),
                }
            }
        }
        for dirs in DirBatches::new(self.dirs.read()?, batch) {
            let dirs = dirs.map_err(PlanError::Scratch)?;
            // A directory still holding something (a file whose deletion failed, or one that
            // appeared since the listing) stays, and is reported: the destination is not what
            // the source says it should be.
            for (d, r) in dirs.iter().zip(dst.delete_many(&paths(&dirs)).await) {
                match r {
                    Ok(()) => log.write(d)?,
                    Err(err) => {
                        stats.failed(d.display_path(), format!("directory not deleted: {err}"))
                    }
                }
            }
        }
        Ok(deleted)
    }
}

fn paths(entries: &[Entry]) -> Vec<Vec<u8>> {
    entries.iter().map(|e| e.path.clone()).collect()
}

/// The emptied directories, in their order, cut into groups of up to `max` that may go at
/// once: a group closes before a directory with one of the group inside it, so that each
/// still goes after everything inside it, though the parts of one request go in any order.
struct DirBatches<I: Iterator> {
    dirs: std::iter::Peekable<I>,
    max: usize,
}

impl<I: Iterator<Item = io::Result<Entry>>> DirBatches<I> {
    fn new(dirs: I, max: usize) -> Self {
        DirBatches {
            dirs: dirs.peekable(),
            max: max.max(1),
        }
    }
}

impl<I: Iterator<Item = io::Result<Entry>>> Iterator for DirBatches<I> {
    type Item = io::Result<Vec<Entry>>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut group: Vec<Entry> = Vec::new();
        while group.len() < self.max {
            match self.dirs.peek() {
                None => break,
                // An unreadable spill ends the deletions; what was grouped before it goes first.
                Some(Err(_)) if !group.is_empty() => break,
                Some(Err(_)) => return self.dirs.next().map(|r| r.map(|_| group)),
                Some(Ok(d)) if group.iter().any(|g| under(&d.path, &g.path)) => break,
                Some(Ok(_)) => group.extend(self.dirs.next().and_then(Result::ok)),
            }
        }
        (!group.is_empty()).then_some(Ok(group))
    }
}

/// The destination directories that a prune leaves empty: those the source lacks with nothing
/// under them that the source keeps. Found in the one pass over the sorted destination: in
/// byte order the entries under a directory `d` ("d/…") come after it as one unbroken range
/// (siblings such as "d.x" or "d-x" may come between `d` and that range, never inside it), so
/// `d` is decided as soon as the walk leaves its range. The directories still undecided are
/// byte prefixes of the current path, so they are at most one per byte of a path, in practice
/// its depth, whatever the size of the tree. Decided ones go to a spill file, each after those
/// inside it (an inner range closes first), the order in which they must be removed.
struct EmptiedDirs {
    /// Undecided directories, outermost first, and whether something kept lies under each.
    open: Vec<(Entry, bool)>,
    out: Spill,
    count: u64,
}

impl EmptiedDirs {
    fn new(out: Spill) -> Self {
        EmptiedDirs {
            open: Vec::new(),
            out,
            count: 0,
        }
    }

    /// Decides every directory whose range ends before `path`; called with every destination
    /// path, in order.
    fn advance(&mut self, path: &[u8]) -> io::Result<()> {
        while let Some((dir, _)) = self.open.last() {
            if in_range(&dir.path, path) {
                break;
            }
            self.close()?;
        }
        Ok(())
    }

    /// A destination directory the source lacks: it goes unless something kept is under it.
    fn open(&mut self, dir: Entry) {
        self.open.push((dir, false));
    }

    /// A destination entry the source has: the directories it is in stay.
    fn keep(&mut self, path: &[u8]) {
        for (dir, occupied) in self.open.iter_mut() {
            if under(&dir.path, path) {
                *occupied = true;
            }
        }
    }

    fn close(&mut self) -> io::Result<()> {
        let (dir, occupied) = self.open.pop().expect("closed only when open");
        if !occupied {
            self.out.push(&dir)?;
            self.count += 1;
        }
        Ok(())
    }

    fn finish(mut self) -> io::Result<(Spill, u64)> {
        while !self.open.is_empty() {
            self.close()?;
        }
        Ok((self.out, self.count))
    }
}

/// The kept directories whose mtime must be set, found in the same pass as `EmptiedDirs`:
/// the kept directories holding the current path are open (at most its depth), each noting
/// whether its mtime differs or an entry directly in it goes; one is decided when the walk
/// leaves its range.
struct TouchedDirs {
    open: Vec<(Entry, bool)>,
    out: Spill,
}

impl TouchedDirs {
    fn new(out: Spill) -> Self {
        TouchedDirs {
            open: Vec::new(),
            out,
        }
    }

    fn advance(&mut self, path: &[u8]) -> io::Result<()> {
        while let Some((dir, _)) = self.open.last() {
            if in_range(&dir.path, path) {
                break;
            }
            self.close()?;
        }
        Ok(())
    }

    /// A directory both sides have, as the source lists it; `differs`: not with its mtime.
    fn open(&mut self, dir: Entry, differs: bool) {
        self.open.push((dir, differs));
    }

    /// `path` goes: its directory's mtime moves (the root's is set wherever it differs).
    fn lose(&mut self, path: &[u8]) {
        let parent = crate::storage::beneath::split(path).0;
        // Not always the innermost: `a/b` is still open at `a/b.txt`, which sorts before `a/b/x`.
        if let Some((_, lost)) = self.open.iter_mut().rev().find(|(d, _)| d.path == parent) {
            *lost = true;
        }
    }

    fn close(&mut self) -> io::Result<()> {
        let (dir, lost) = self.open.pop().expect("closed only when open");
        if lost {
            self.out.push(&dir)?;
        }
        Ok(())
    }

    fn finish(mut self) -> io::Result<Spill> {
        while !self.open.is_empty() {
            self.close()?;
        }
        Ok(self.out)
    }
}

/// Whether the pass that planned against `d` wrote `s`'s name (so moved its directory's mtime):
/// where they differ at all, the pass copied it or left it to the copy to decide.
fn rewritten(s: &Entry, d: &Entry) -> bool {
    s.kind != d.kind || (s.kind != Kind::Dir && (s.size != d.size || s.mtime != d.mtime))
}

/// Whether `path` is inside directory `dir`.
fn under(dir: &[u8], path: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/'
}

/// Whether `path`, which sorts after `dir`, is still within the range of `dir` and what is
/// under it: `dir` itself followed by a byte up to '/'. Past that no path can be under `dir`.
fn in_range(dir: &[u8], path: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] <= b'/'
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `paths` sorted into runs of a few entries each, so that merges are exercised.
    fn sorted(paths: &[&str], scratch: &Path, stem: &str) -> Runs {
        crate::sorted::sort_entries(paths.iter().map(|p| Ok(entry(p))), scratch, stem, 150).unwrap()
    }

    fn entry(path: &str) -> Entry {
        let (path, kind) = match path.strip_suffix('/') {
            Some(dir) => (dir, Kind::Dir),
            None => (path, Kind::File),
        };
        Entry {
            path: path.as_bytes().to_vec(),
            kind,
            size: Some(1),
            ..Default::default()
        }
    }

    /// Plans a prune of `dst` (directories end in '/') against `src`, through sorts of a few
    /// entries per run; returns the files and the directories in the order they would go.
    fn plan(src: &[&str], dst: &[&str]) -> (Vec<String>, Vec<String>, u64) {
        let scratch = tempfile::tempdir().unwrap();
        let sort = |paths: &[&str], stem: &str| sorted(paths, scratch.path(), stem);
        let (s, d) = (sort(src, "s"), sort(dst, "d"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut plan = rt
            .block_on(Deletions::plan(&s, &d, scratch.path(), false))
            .unwrap();
        let read = |spill: &mut Spill| {
            spill
                .read()
                .unwrap()
                .map(|e| e.unwrap().display_path())
                .collect::<Vec<_>>()
        };
        let (files, dirs) = (read(&mut plan.files), read(&mut plan.dirs));
        assert_eq!(
            (plan.file_count, plan.dir_count),
            (files.len() as u64, dirs.len() as u64)
        );
        (files, dirs, plan.dest_files)
    }

    #[test]
    fn deletes_what_the_source_lacks_and_the_directories_left_empty() {
        let (files, dirs, dest_files) = plan(
            &["keep/", "keep/k", "top"],
            &[
                "keep/",
                "keep/k",
                "keep/extra",
                "top",
                "gone/",
                "gone/a/",
                "gone/a/b",
                "gone/c",
                "empty/",
            ],
        );
        assert_eq!(files, ["gone/a/b", "gone/c", "keep/extra"]);
        assert_eq!(dirs, ["empty", "gone/a", "gone"]);
        assert_eq!(dest_files, 5);
    }

    #[test]
    fn the_directories_that_stay_and_lose_an_entry_are_found() {
        let scratch = tempfile::tempdir().unwrap();
        let sort = |paths: &[&str], stem: &str| sorted(paths, scratch.path(), stem);
        let src = ["a/", "a/k", "a/b/", "a/b/k", "a.b/", "c/", "c/k", "k"];
        let dst = [
            "a/",
            "a/k",
            "a/x",
            "a/b/",
            "a/b/k",
            "a/b/gone/",
            "a/b/gone/y",
            "a.b/",
            "a.b/z",
            "c/",
            "c/k",
            "k",
        ];
        let (s, d) = (sort(&src, "s"), sort(&dst, "d"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut plan = rt
            .block_on(Deletions::plan(&s, &d, scratch.path(), false))
            .unwrap();
        let touched: Vec<String> = plan
            .touched
            .read()
            .unwrap()
            .map(|e| e.unwrap().display_path())
            .collect();
        // "a/b/gone" goes whole: only "a/b", where it was, moves; "c" loses nothing.
        assert_eq!(touched, ["a.b", "a/b", "a"]);
    }

    #[test]
    fn siblings_sorting_between_a_directory_and_its_children() {
        // "a.b" and "a-b" sort after "a" but before "a/…"; "a/b.c" between "a/b" and "a/b/…".
        // A kept file under "a/b" must keep "a" and "a/b", and nothing else.
        let (files, dirs, _) = plan(
            &["a.b", "a/b/k"],
            &[
                "a/", "a-b/", "a-b/x", "a.b", "a.b.d/", "a/b/", "a/b.c", "a/b/k", "a/b/z/", "a0/",
                "a0/y",
            ],
        );
        assert_eq!(files, ["a-b/x", "a/b.c", "a0/y"]);
        assert_eq!(dirs, ["a-b", "a.b.d", "a/b/z", "a0"]);
    }

    #[test]
    fn nested_directories_go_innermost_first() {
        let (files, dirs, _) = plan(
            &["k"],
            &["g/", "g.x", "g/h/", "g/h.y", "g/h/i/", "g/h/i/j", "k", "z/"],
        );
        assert_eq!(files, ["g.x", "g/h.y", "g/h/i/j"]);
        assert_eq!(dirs, ["g/h/i", "g/h", "g", "z"]);
    }

    #[test]
    fn a_directory_the_source_has_stays_even_empty_and_manifests_without_directories_keep_theirs() {
        // The source names d/ itself: kept though empty. The source names only files (a
        // manifest of files): their directories stay because of what is under them.
        let (files, dirs, _) = plan(
            &["d/", "m/n/f"],
            &["d/", "d/x", "m/", "m/n/", "m/n/f", "m/o/"],
        );
        assert_eq!(files, ["d/x"]);
        assert_eq!(dirs, ["m/o"]);
    }

    #[test]
    fn escaped_names_join_by_their_bytes() {
        // "\t" (0x09) sorts before '-' and '/', "\\" (0x5c) after them: the escaped text would
        // sort otherwise.
        let (files, dirs, _) = plan(
            &["d/\\", "d\tx"],
            &["d/", "d/\\", "d/\t", "d\tx", "d\\/", "d\\/y"],
        );
        assert_eq!(files, ["d/\\t", "d\\\\/y"]);
        assert_eq!(dirs, ["d\\\\"]);
    }

    fn groups(dirs: Vec<io::Result<Entry>>, max: usize) -> Vec<Result<Vec<String>, String>> {
        DirBatches::new(dirs.into_iter(), max)
            .map(|g| {
                g.map(|g| g.iter().map(Entry::display_path).collect())
                    .map_err(|e| e.to_string())
            })
            .collect()
    }

    #[test]
    fn directories_go_in_groups_none_holding_another() {
        let dirs = ["a/b/c", "a/b/d", "a/x", "a/b", "a", "a.b", "e"]
            .map(|d| Ok(entry(&format!("{d}/"))))
            .into_iter()
            .collect();
        let want: Vec<Result<Vec<String>, String>> = vec![
            Ok(vec!["a/b/c".into(), "a/b/d".into(), "a/x".into()]),
            Ok(vec!["a/b".into()]),
            Ok(vec!["a".into(), "a.b".into(), "e".into()]),
        ];
        assert_eq!(groups(dirs, 256), want);
        let flat = ["e", "f", "g"]
            .map(|d| Ok(entry(&format!("{d}/"))))
            .into_iter()
            .collect();
        assert_eq!(
            groups(flat, 2),
            vec![
                Ok(vec!["e".to_string(), "f".into()]),
                Ok(vec!["g".to_string()])
            ]
        );
        // One at a time (a local tree): the order is the plan's.
        let one = ["a/b", "a", "c"]
            .map(|d| Ok(entry(&format!("{d}/"))))
            .into_iter()
            .collect();
        assert_eq!(
            groups(one, 1),
            vec![
                Ok(vec!["a/b".to_string()]),
                Ok(vec!["a".to_string()]),
                Ok(vec!["c".to_string()])
            ]
        );
    }

    #[test]
    fn an_unreadable_spill_ends_a_group_and_is_reported() {
        let dirs = vec![
            Ok(entry("a/")),
            Err(io::Error::other("bad spill")),
            Ok(entry("b/")),
        ];
        assert_eq!(
            groups(dirs, 256),
            vec![
                Ok(vec!["a".to_string()]),
                Err("bad spill".into()),
                Ok(vec!["b".to_string()])
            ]
        );
    }

    #[test]
    fn ranges() {
        assert!(in_range(b"a", b"a/b") && in_range(b"a", b"a.b") && in_range(b"a", b"a\t"));
        assert!(!in_range(b"a", b"a0") && !in_range(b"a", b"b") && !in_range(b"a/b", b"a/c"));
    }
}
