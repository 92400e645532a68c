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
use crate::commands::args::{Common, Sorting};
use crate::location::Location;
use crate::manifest::{Entry, Kind, Writer};
use crate::newer::{Newer, Newest};
use crate::plan::deletions::{under, Decide, Deletions};
use crate::plan::{PartRow, PlanDoc};
use crate::run_dir::LAYOUT;
use crate::sorted::sort::{Runs, Spill};
use crate::sorted::{sort_store, Join, JoinError, Pair, PathSort, Scratch, Side, SortError};
use crate::stats::Stats;
use crate::storage::{OpenOptions, Store};

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
    /// Delete what `ferry plan --out DIR` decided would go, listing and sorting nothing: its
    /// join of the same listings already found it
    #[arg(long, value_name = "DIR", conflicts_with_all = ["files_from", "dest_from", "shards"])]
    pub plan: Option<PathBuf>,
    /// With --plan: only the files of this deletion part (DIR/prune/part-ID.tsv), so that the
    /// parts go at once; the directories wait for --dirs
    #[arg(long, value_name = "ID", requires = "plan", conflicts_with = "dirs")]
    pub part: Option<String>,
    /// With --plan, after every --part: only the directories (those the deletions left empty
    /// go; those that stay take the source's mtime)
    #[arg(long, requires = "plan")]
    pub dirs: bool,
    /// List what would be deleted; delete nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Refuse if more than this would go: a count (1000) or a share of the destination (10%)
    #[arg(long, default_value = DEFAULT_MAX_DELETE, value_parser = parse_limit)]
    pub max_delete: Limit,
    /// Delete even past --max-delete, when the source is empty, or when what goes is newer
    /// than everything at the source
    #[arg(long)]
    pub force: bool,
    /// Delete without asking (needed where there is no terminal to ask on: scripts, pipelines)
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Where to write the list of deletions, in manifest format (default:
    /// $XDG_STATE_HOME/ferry/prune-<time>.tsv, i.e. ~/.local/state/ferry/ unless set)
    #[arg(long)]
    pub log: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub carried: crate::commands::args::CarriedArgs,
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

pub fn parse_limit(s: &str) -> Result<Limit, String> {
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

    /// Why deleting `n` of the destination's `of` entries (files, symlinks and directories) is
    /// past this limit; None when it is not, or when `force` lifts it. Prune's rule, and copy's
    /// for what its type changes replace.
    pub fn exceeded(self, n: u64, of: u64, force: bool) -> Option<String> {
        (!force && !self.allows(n, of)).then(|| {
            format!("{n} of {of} destination entries would be deleted, more than --max-delete {self} allows")
        })
    }
}

/// --max-delete when none is given, the pipelines' `prune.max_delete` default too: a final pass
/// deletes what moved since the last one, seldom a tenth of a tree, and an error (swapped
/// arguments, the wrong share mounted) much more.
pub const DEFAULT_MAX_DELETE: &str = "10%";

/// What a refusal past --max-delete tells the user to do.
pub const OVER_LIMIT_FIX: &str = "review with --dry-run, then pass --force or raise --max-delete";

/// Where a command keeps its record of deletions when not told: the user's state directory,
/// never the current one (which may be a job's scratch space, or the tree being pruned). The
/// name holds the time, the process and a count, so that no two runs share one.
pub fn default_log(command: &str) -> anyhow::Result<PathBuf> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
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
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(dir.join(format!(
        "{command}-{}-{}-{:09}-{}.tsv",
        now.as_secs(),
        std::process::id(),
        now.subsec_nanos(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )))
}

/// Creates a deletion log at `path` (a new file: an existing one is never overwritten).
pub fn create_log(path: &Path) -> anyhow::Result<Writer<BufWriter<std::fs::File>>> {
    let file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .or_else(|e| match e.kind() {
            // An explicit --log names a file to replace; a default name is always new.
            io::ErrorKind::AlreadyExists => std::fs::File::create(path),
            _ => Err(e),
        })
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(Writer::new(BufWriter::new(file))?)
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
    // Before anything is listed: a prune that cannot ask must be told, and says so at once.
    if !args.yes && !args.dry_run && !can_ask() {
        eprintln!("ferry prune: no terminal to ask on: pass --yes to delete without asking (review first with --dry-run)");
        return Ok(ExitCode::from(2));
    }
    let log_path = match args.log.clone() {
        Some(p) => p,
        None => default_log("prune")?,
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
                dirs_deleted: 0,
                dest_entries: 0,
                failed: 0,
                failures: Vec::new(),
                refused: Some(why.clone()),
                warning: None,
                log: None,
                leftovers_removed: 0,
                leftovers: Vec::new(),
                requests: stats.requests.counts(),
            });
        }
        eprintln!("prune refused, nothing deleted: {why}");
        Ok(ExitCode::from(1))
    };

    // The listings' sorts spill there, and the deletions they decide stay there until the end;
    // a plan has both written already.
    let mut scratch = None;
    let decided = match &args.plan {
        Some(dir) => from_plan(dir, &args),
        None => {
            let scratch = scratch.insert(Scratch::new(args.sorting.scratch.as_deref())?);
            from_listings(&args, (&src_loc, &src), &dst, scratch.path(), &opts).await
        }
    };
    let mut work = match decided {
        Ok(work) => work,
        Err(Stop::Refused(why)) => return refuse(why),
        Err(Stop::Failed(e)) => return Err(e),
    };
    let over_limit = args
        .max_delete
        .exceeded(work.total, work.dest_entries, args.force);
    if let (Some(why), false) = (&over_limit, args.dry_run) {
        return refuse(format!("{why}; {OVER_LIMIT_FIX}"));
    }
    match (work.newer.prune_refusal(args.force), args.dry_run) {
        (Some(why), false) => return refuse(why),
        (Some(why), true) => eprintln!("note: a real run would be refused: {why}"),
        (None, _) => {}
    }
    if !args.yes && !args.dry_run && !work.confirmed()? {
        eprintln!("prune cancelled, nothing deleted");
        return Ok(ExitCode::from(1));
    }

    let mut log = create_log(&log_path)?;
    let deleted = match args.dry_run {
        true => work.list(&mut log, !args.json).await?,
        false => {
            super::take_state(&args.carried, &dst_loc, &opts).await?;
            let files = work
                .delete_files(&dst, &mut log, &stats, concurrency)
                .await?;
            let dirs = work.delete_dirs(&dst, &mut log, &stats).await?;
            work.restore_mtimes(&src, &dst, &stats).await?;
            Deleted { files, dirs }
        }
    };
    // ferry's own leftovers: those in a directory that goes went with it (they alone do not
    // keep it); the others the destination's listing met go now.
    let sweep = crate::storage::sweep_leftovers(&*dst, args.dry_run).await;
    let leftovers = super::report_leftovers(&*dst, sweep, args.dry_run, args.json);
    log.finish()?;
    Ok(report(
        &args,
        &work,
        (deleted, leftovers),
        over_limit,
        &stats,
        &log_path,
    ))
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

/// What a plan decided: its counts (the whole pass's, so that every part judges --max-delete
/// alike) and the files of the deletions this job takes. The plan's own listings were whole (a
/// failed or doubtful listing fails the plan); an empty source is still refused here.
fn from_plan(dir: &Path, args: &PruneArgs) -> Result<Work, Stop> {
    let plan = PlanDoc::read(dir)?;
    if let Some(why) = plan.prune_refusal(dir, args.force) {
        return Err(Stop::Refused(why));
    }
    let parts: Vec<&PartRow> = match &args.part {
        Some(id) => vec![plan
            .prune_partitions
            .iter()
            .find(|p| &p.id == id)
            .with_context(|| {
                format!(
                    "the plan in {} has no deletion part {id:?} ({} parts)",
                    dir.display(),
                    plan.prune_partitions.len()
                )
            })?],
        None if args.dirs => Vec::new(),
        None => plan.prune_partitions.iter().collect(),
    };
    let deletions = dir.join(&LAYOUT.plan_files.parts.prune);
    let mut files = Vec::new();
    for p in &parts {
        let i =
            p.id.parse()
                .with_context(|| format!("bad part id {:?}", p.id))?;
        files.push(deletions.join(crate::partition::part_name(i)));
    }
    let whole = args.part.is_none();
    let (total, dest_entries) = plan.deletions();
    let listed = |name: &str| whole.then(|| Entries::Manifests(vec![deletions.join(name)]));
    Ok(Work {
        files: (!args.dirs).then_some(Entries::Manifests(files)),
        file_count: parts.iter().map(|p| p.files).sum(),
        dirs: listed(&LAYOUT.parts.dirs),
        dir_count: if whole { plan.prune_dirs } else { 0 },
        touched: listed(&LAYOUT.plan_files.touched),
        total,
        dest_entries,
        planned: true,
        // Judged with the plan's refusals above.
        newer: Newer::default(),
    })
}

/// Sorts both sides and plans the deletions; refuses when the source's listing is doubtful
/// (failed, empty without --force, naming a path twice) or the destination's failed.
async fn from_listings(
    args: &PruneArgs,
    (src_loc, src): (&Location, &Arc<dyn Store>),
    dst: &Arc<dyn Store>,
    scratch: &Path,
    opts: &OpenOptions,
) -> Result<Work, Stop> {
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
    // A source that is not there at all is a mistake --force must not reach (a typo'd prefix
    // lists nothing, as an empty one does).
    if source.entries() == 0 && source_files.is_none() {
        if let Err(e) = super::resolve(src_loc, opts, true).await {
            return Err(Stop::Refused(format!("{e:#}")));
        }
    }
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
    let planned = args.dest_from.is_some();
    match walk(&source, &dest, scratch, planned).await {
        Err(PlanError::Join(
            e @ JoinError::Duplicate {
                side: Side::Source, ..
            },
        )) => Err(Stop::Refused(format!(
            "the source listing failed ({})",
            twice(source_files.as_deref(), e)
        ))),
        Err(e) => Err(e.into()),
        Ok((mut d, newest)) => Ok(Work {
            newer: Newer::deletions(d.files.read()?, newest)?,
            files: Some(Entries::Spill(d.files)),
            file_count: d.file_count,
            dirs: Some(Entries::Spill(d.dirs)),
            dir_count: d.dir_count,
            touched: Some(Entries::Spill(d.touched)),
            total: d.file_count + d.dir_count,
            dest_entries: d.dest_entries,
            planned,
        }),
    }
}

/// One merge-join of the two sorted listings, every pair shown to the deletions' walk.
async fn walk(
    source: &Runs,
    dest: &Runs,
    scratch: &Path,
    planned: bool,
) -> Result<(Deletions, Newest), PlanError> {
    let mut decide = Decide::new(scratch, planned)?;
    let (mut pacer, mut newest) = (Pacer::default(), Newest::default());
    for pair in Join::new(source.merge()?, dest.merge()?)? {
        pacer.tick().await;
        let pair = pair?;
        if let Pair::Source(s) | Pair::Both(s, _) = &pair {
            newest.see(s);
        }
        decide.visit(&pair)?;
    }
    Ok((decide.finish()?, newest))
}

/// Whether a person can be asked: stdin and stderr are a terminal.
fn can_ask() -> bool {
    use std::io::IsTerminal;
    io::stdin().is_terminal() && io::stderr().is_terminal()
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

/// What a prune deleted: files and symlinks, and directories.
#[derive(Default)]
struct Deleted {
    files: u64,
    dirs: u64,
}

/// The summary: --json on stdout, or lines on stderr. Exit 1 if anything could not be deleted.
fn report(
    args: &PruneArgs,
    plan: &Work,
    (deleted, leftovers): (Deleted, Vec<String>),
    over_limit: Option<String>,
    stats: &Stats,
    log_path: &Path,
) -> ExitCode {
    let (n, dirs, dest) = (plan.file_count, plan.dir_count, plan.dest_entries);
    let failed = Stats::get(&stats.files_failed);
    if args.json {
        let failures = stats.failures().into_iter();
        super::print_json(&PruneDoc {
            version: Default::default(),
            command: "prune",
            dry_run: args.dry_run,
            deleted: deleted.files,
            would_delete: n,
            dirs,
            dirs_deleted: deleted.dirs,
            dest_entries: dest,
            failed,
            failures: failures
                .map(|(path, error)| PathError { path, error })
                .collect(),
            refused: None,
            warning: over_limit,
            log: Some(log_path.display().to_string()),
            leftovers_removed: leftovers.len() as u64,
            leftovers,
            requests: stats.requests.counts(),
        });
    } else if args.dry_run {
        eprintln!(
            "would delete {} of {dest} destination entries ({n} files and symlinks, {dirs} directories); list in {}",
            n + dirs,
            log_path.display()
        );
        if let Some(why) = &over_limit {
            eprintln!("note: a real run would be refused: {why}");
        }
    } else {
        eprintln!(
            "deleted {} of {dest} destination entries ({} files and symlinks, {} directories), failed {failed}; list in {}",
            deleted.files + deleted.dirs,
            deleted.files,
            deleted.dirs,
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
                    manifest_entries(m, true).map_err(|e| SortError::Listing(format!("{e:#}")))?;
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
    /// Reading it back: a spill, or the plan's files.
    #[error("cannot read back the list of deletions: {0}")]
    Read(io::Error),
}

/// Entries read back in order: a scratch spill, or manifests one after another.
enum Entries {
    Spill(Spill),
    Manifests(Vec<PathBuf>),
}

impl Entries {
    fn read(&mut self) -> io::Result<Box<dyn Iterator<Item = io::Result<Entry>> + '_>> {
        match self {
            Entries::Spill(s) => Ok(Box::new(s.read()?)),
            Entries::Manifests(files) => {
                let readers = files
                    .iter()
                    .map(|f| crate::manifest::Reader::open_whole(f))
                    .collect::<io::Result<Vec<_>>>()?;
                Ok(Box::new(
                    readers
                        .into_iter()
                        .flatten()
                        .map(|e| e.map_err(io::Error::other)),
                ))
            }
        }
    }
}

/// What this prune deletes and mends, in the order it goes: files and symlinks in path order,
/// then the directories they leave empty (each after those inside it), then the mtimes of the
/// directories that stay. A part of a plan's prune has files only, its `--dirs` job the rest.
struct Work {
    files: Option<Entries>,
    file_count: u64,
    dirs: Option<Entries>,
    dir_count: u64,
    /// The directories that stay and lose an entry, or whose mtime is not the source's.
    touched: Option<Entries>,
    /// Every entry the pass deletes (all parts' files, and the directories), for --max-delete.
    total: u64,
    /// The destination's entries (files, symlinks and directories), for --max-delete's
    /// percentage.
    dest_entries: u64,
    /// The destination's listing predates the pass's copies: a touched directory's mtime is
    /// looked at before it is set.
    planned: bool,
    /// The files to delete newer than everything at the source (a plan's are judged by it).
    newer: Newer,
}

impl Work {
    /// Shows what would go (count, bytes, the first names) and asks on the terminal; anything
    /// but y or yes is a no.
    fn confirmed(&mut self) -> anyhow::Result<bool> {
        const SHOWN: usize = 10;
        let (mut bytes, mut first) = (0u64, Vec::new());
        if let Some(files) = self.files.as_mut() {
            for e in files.read().map_err(PlanError::Read)? {
                let e = e.map_err(PlanError::Read)?;
                bytes += e.size();
                if first.len() < SHOWN {
                    first.push(e.display_path());
                }
            }
        }
        let n = self.file_count + self.dir_count;
        let size = crate::units::human_bytes(bytes);
        eprintln!(
            "would delete {} files and symlinks ({size}) and {} directories, of {} destination entries:",
            self.file_count, self.dir_count, self.dest_entries
        );
        for p in &first {
            eprintln!("  {p}");
        }
        if self.file_count > first.len() as u64 {
            eprintln!("  … and {} more", self.file_count - first.len() as u64);
        }
        eprint!("Delete {n} entries ({size})? [y/N] ");
        let mut answer = String::new();
        io::stdin().read_line(&mut answer)?;
        Ok(matches!(answer.trim().to_lowercase().as_str(), "y" | "yes"))
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
        let Some(touched) = self.touched.as_mut() else {
            return Ok(());
        };
        if !dst.capabilities().directories {
            return Ok(());
        }
        for d in touched.read().map_err(PlanError::Read)? {
            let d = d.map_err(PlanError::Read)?;
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
            if let Err(e) = dst.set_meta(&d.path, Kind::Dir, &meta, None).await {
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
    ) -> anyhow::Result<Deleted> {
        let mut out = BufWriter::new(io::stdout());
        let mut pacer = Pacer::default();
        for entries in [self.files.as_mut(), self.dirs.as_mut()]
            .into_iter()
            .flatten()
        {
            for e in entries.read().map_err(PlanError::Read)? {
                pacer.tick().await;
                let e = e.map_err(PlanError::Read)?;
                log.write(&e)?;
                if print {
                    writeln!(out, "would delete\t{}", e.display_path())?;
                }
            }
        }
        out.flush()?;
        Ok(Deleted::default())
    }

    /// Deletes the files. Where the destination takes many deletions in one request (Blob
    /// Batch), they go so, up to `concurrency` requests at a time; else one by one,
    /// `2 × concurrency` at a time. The log holds what was deleted, as the destination confirms
    /// it: a run cut short still says what it did, and a deletion refused inside a batch is
    /// that path's failure alone.
    async fn delete_files(
        &mut self,
        dst: &Arc<dyn Store>,
        log: &mut Writer<BufWriter<std::fs::File>>,
        stats: &Stats,
        concurrency: usize,
    ) -> anyhow::Result<u64> {
        let Some(files) = self.files.as_mut() else {
            return Ok(0);
        };
        let batch = dst.capabilities().delete_batch.max(1);
        let in_flight = if batch > 1 {
            concurrency
        } else {
            concurrency * 2
        };
        let mut deleted = 0u64;
        let mut results = futures::stream::iter(files.read().map_err(PlanError::Read)?)
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
            for (e, r) in done.map_err(PlanError::Read)? {
                match r {
                    Ok(()) => {
                        deleted += 1;
                        log.write(&e)?;
                    }
                    Err(err) => stats.failed(e.display_path(), err.to_string()),
                }
            }
        }
        Ok(deleted)
    }

    /// Deletes the emptied directories in their order (each after those inside it), in
    /// batches where the destination takes them; returns how many went.
    async fn delete_dirs(
        &mut self,
        dst: &Arc<dyn Store>,
        log: &mut Writer<BufWriter<std::fs::File>>,
        stats: &Stats,
    ) -> anyhow::Result<u64> {
        let Some(dirs) = self.dirs.as_mut() else {
            return Ok(0);
        };
        let mut deleted = 0;
        for dirs in DirBatches::new(
            dirs.read().map_err(PlanError::Read)?,
            dst.capabilities().delete_batch.max(1),
        ) {
            let dirs = dirs.map_err(PlanError::Read)?;
            // A directory still holding something (a file whose deletion failed, or one that
            // appeared since the listing) stays, and is reported: the destination is not what
            // the source says it should be.
            for (d, r) in dirs.iter().zip(dst.delete_many(&paths(&dirs)).await) {
                match r {
                    Ok(()) => {
                        deleted += 1;
                        log.write(d)?
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(path: &str) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            kind: Kind::Dir,
            ..Default::default()
        }
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
            .map(|d| Ok(dir(d)))
            .into_iter()
            .collect();
        let want: Vec<Result<Vec<String>, String>> = vec![
            Ok(vec!["a/b/c".into(), "a/b/d".into(), "a/x".into()]),
            Ok(vec!["a/b".into()]),
            Ok(vec!["a".into(), "a.b".into(), "e".into()]),
        ];
        assert_eq!(groups(dirs, 256), want);
        let flat = ["e", "f", "g"].map(|d| Ok(dir(d))).into_iter().collect();
        assert_eq!(
            groups(flat, 2),
            vec![
                Ok(vec!["e".to_string(), "f".into()]),
                Ok(vec!["g".to_string()])
            ]
        );
        // One at a time (a local tree): the order is the plan's.
        let one = ["a/b", "a", "c"].map(|d| Ok(dir(d))).into_iter().collect();
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
            Ok(dir("a")),
            Err(io::Error::other("bad spill")),
            Ok(dir("b")),
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
}
