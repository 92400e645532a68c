use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use crate::hash::Md5;
use anyhow::Context;
use clap::Args;
use futures::{StreamExt, TryStreamExt};

use super::{
    default_concurrency, object_destination, open, open_options, parse_roots, read_manifest,
    resolve, Pacer, Root,
};
use crate::commands::args::{Common, Sorting};
use crate::documents::verify::{Compared, Entries, Row, Status, Summary};
use crate::error::StoreError;
use crate::manifest::{md5_hex, Entry, Kind};
use crate::plan::deletions::Decide;
use crate::progress::ProgressFile;
use crate::sorted::{sort_store, Join, Pair, Scratch};
use crate::stats::Stats;
use crate::storage::{self, Capabilities, Store};

#[derive(Args, Debug)]
pub struct VerifyArgs {
    pub source: String,
    pub dest: String,
    /// Check only the entries of this manifest (then nothing is reported missing on the source)
    #[arg(long, value_name = "MANIFEST")]
    pub files_from: Option<PathBuf>,
    /// Compare MD5 too: Content-MD5 on blobs, computed for local files
    #[arg(long)]
    pub checksum: bool,
    /// With --checksum: hash the bytes of blobs that have no Content-MD5
    #[arg(long, requires = "checksum")]
    pub download: bool,
    /// Compare metadata too: mtime, and what --preserve keeps (mode, owner where this process
    /// could set it, extended attributes and ACLs where listed)
    #[arg(long)]
    pub metadata: bool,
    #[command(flatten)]
    pub preserve: crate::commands::args::PreserveArgs,
    /// List identical files too (`= path`)
    #[arg(long)]
    pub all: bool,
    /// With --metadata and --files-from: compare directories' mtimes too (whole trees always
    /// do), for a check made once nothing writes into them any more (the audit)
    #[arg(long, requires = "metadata")]
    pub dir_mtimes: bool,
    /// Write what the destination holds at the manifest's paths, files and directories, as a
    /// manifest sorted by path: what `ferry carry` patches the carried listing with
    #[arg(long, value_name = "PATH", requires = "files_from")]
    pub observed: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    /// Keep PATH rewritten with the run's progress as JSON (every 2 seconds and at the end), for
    /// a pipeline's live status
    #[arg(long, value_name = "PATH")]
    pub progress_file: Option<PathBuf>,
    #[command(flatten)]
    pub sorting: Sorting,
    #[command(flatten)]
    pub common: Common,
}

impl Status {
    /// The marks of `rclone check --combined`: `+` only in the source, `-` only in the destination.
    fn mark(self) -> char {
        match self {
            Status::Same => '=',
            Status::Differ => '*',
            Status::MissingOnDst => '+',
            Status::MissingOnSrc => '-',
            Status::Error => '!',
        }
    }
}

/// The MD5 of an object: known from the listing, computed for local files, or downloaded.
async fn md5_of(store: &Arc<dyn Store>, e: &Entry, download: bool) -> Result<[u8; 16], String> {
    if let Some(m) = e.md5 {
        return Ok(m);
    }
    if let Some(m) = crate::storage::content_md5(&**store, &e.path)
        .await
        .map_err(|err| err.to_string())?
    {
        return Ok(m);
    }
    if !download {
        return Err(format!(
            "no Content-MD5 on {} (rerun with --download to hash its bytes)",
            e.display_path()
        ));
    }
    const BLOCK: u64 = 8 << 20;
    let size = e.size();
    let mut h = Md5::new();
    let blocks = size.div_ceil(BLOCK);
    // Every range from the one version: a blob rewritten meanwhile fails, never hashes a mix.
    let version = match blocks > 1 {
        true => store
            .version(&e.path, false)
            .await
            .map_err(|err| err.to_string())?
            .map(|v| v.token),
        false => None,
    };
    let version = &version;
    let mut stream = futures::stream::iter(0..blocks)
        .map(|i| {
            let store = store.clone();
            let path = e.path.clone();
            async move {
                store
                    .read(
                        &path,
                        i * BLOCK,
                        (size - i * BLOCK).min(BLOCK),
                        version.as_deref(),
                    )
                    .await
            }
        })
        .buffered(4);
    while let Some(chunk) = stream
        .try_next()
        .await
        .map_err(|err: StoreError| err.to_string())?
    {
        h.update(&chunk.data);
    }
    Ok(h.finalize())
}

async fn compare(
    src: &Arc<dyn Store>,
    dst: &Arc<dyn Store>,
    s: &Entry,
    d: &Entry,
    args: &VerifyArgs,
) -> (Status, String) {
    if s.kind != d.kind {
        return (
            Status::Differ,
            format!(
                "{} on source, {} on destination",
                s.kind.name(),
                d.kind.name()
            ),
        );
    }
    if s.size != d.size {
        return (Status::Differ, format!("size {} != {}", s.size(), d.size()));
    }
    if s.kind == Kind::Symlink {
        // Same length says little about a link: compare where it points.
        let (a, b) = tokio::join!(link_target(src, s), link_target(dst, d));
        return match (a, b) {
            (Ok(a), Ok(b)) if a == b => (Status::Same, String::new()),
            (Ok(a), Ok(b)) => (
                Status::Differ,
                format!(
                    "symlink to {} != {}",
                    crate::manifest::escape_path(&a),
                    crate::manifest::escape_path(&b)
                ),
            ),
            (Err(e), _) | (_, Err(e)) => (Status::Error, e),
        };
    }
    if args.checksum && s.kind == Kind::File {
        let (a, b) = tokio::join!(md5_of(src, s, args.download), md5_of(dst, d, args.download));
        match (a, b) {
            (Ok(a), Ok(b)) if a == b => {}
            (Ok(a), Ok(b)) => {
                return (
                    Status::Differ,
                    format!("md5 {} != {}", md5_hex(&a), md5_hex(&b)),
                )
            }
            (Err(e), _) | (_, Err(e)) => return (Status::Error, e),
        }
    }
    // A directory's mtime is settled only once nothing writes into it: two whole trees, or a
    // partition checked after its pass (--dir-mtimes); not while other parts still copy.
    let attrs = crate::same::Attrs {
        dir_times: args.files_from.is_none() || args.dir_mtimes,
        ..args.preserve.preserve.attrs()
    };
    // Names that are one file: only between two sides that keep hard links.
    let links = args.preserve.preserve.links
        && src.capabilities().hard_links
        && dst.capabilities().hard_links;
    let difference = || {
        crate::same::full_difference(s, d, attrs)
            .or_else(|| links.then(|| crate::same::link_difference(s, d)).flatten())
    };
    match args.metadata.then(difference).flatten() {
        Some(why) => (Status::Differ, why),
        None => (Status::Same, String::new()),
    }
}

pub async fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    super::interruptible(verify(args)).await
}

async fn verify(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let concurrency = default_concurrency();
    let stats = Arc::new(Stats::default());
    let progress = args
        .progress_file
        .clone()
        .map(|p| ProgressFile::start(p, "verify", stats.clone()));
    let mut opts = open_options(&args.common, concurrency, stats.clone());
    // Listings read the attributes `--metadata` compares (of local trees; a digest each), and
    // what --observed records stands for a listing (`ferry ls`), attributes included.
    if args.metadata || args.observed.is_some() {
        opts.xattrs = crate::xattrs::Wanted::of(&args.preserve.preserve);
    }
    let (src_loc, dst_loc) = parse_roots(&args.source, &args.dest)?;
    let mut rows: Vec<Row> = Vec::new();
    // Paths whose destination entries go to --observed, besides those compared.
    let mut observe: Vec<Vec<u8>> = Vec::new();
    let (src, dst, src_entries, rename) = match resolve(&src_loc, &opts, true).await? {
        Root::Object {
            parent,
            entry,
            name,
        } => {
            let (dp, name) = object_destination(&dst_loc, &name)?;
            (
                open(&parent, &opts)?,
                open(&dp, &opts)?,
                vec![entry],
                Some(name),
            )
        }
        Root::Tree(loc) => {
            let src = open(&loc, &opts)?;
            let dst = open(&dst_loc, &opts)?;
            let Some(m) = args.files_from.as_deref() else {
                return verify_trees(&args, &src, &dst, &stats, progress, started).await;
            };
            // A partition: both sides are looked at fresh (the manifest may predate the copy),
            // in the directories it names only.
            let listed = read_manifest(m)?;
            if args.observed.is_some() {
                observe = listed.iter().map(|e| e.path.clone()).collect();
            }
            // Directories it names only for their metadata.
            let paths: Vec<&[u8]> = listed
                .iter()
                .filter(|e| e.kind != Kind::Dir || args.metadata)
                .map(|e| &e.path[..])
                .collect();
            let (mut found, failed) = storage::index_paths(&src, &paths, concurrency).await;
            rows.extend(unlisted(&paths, &failed, "source"));
            // A path gone from the source is left out: it shows as missing on the destination
            // only if the destination still lacks it.
            let entries = paths.iter().filter_map(|p| found.remove(*p)).collect();
            (src, dst, entries, None)
        }
    };
    let dst_index =
        dest_index(&dst, rename, &src_entries, &observe, concurrency, &mut rows).await?;
    if let Some(path) = &args.observed {
        write_observed(path, &dst_index)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    // Paths already judged (their directory could not be listed) are not judged again.
    let judged: std::collections::HashSet<String> = rows.iter().map(|r| r.path.clone()).collect();
    let both = held_by_both(&src, &dst);
    let src_entries: Vec<Entry> = src_entries
        .into_iter()
        .filter(|e| {
            (judged.is_empty() || !judged.contains(&e.display_path()))
                && compared(e, both, args.metadata)
        })
        .collect();
    // Every row is known to come now: those already judged and one per entry left.
    for row in &rows {
        tally(&stats, row.status, 0);
    }
    Stats::add(&stats.files_total, (rows.len() + src_entries.len()) as u64);
    Stats::add(
        &stats.bytes_total,
        src_entries.iter().map(Entry::size).sum(),
    );
    stats.totals_final();
    rows.extend(compare_indexed(&args, &src, &dst, src_entries, dst_index, &stats).await);
    rows.sort_by(|a, b| a.path.cmp(&b.path));
    let mut report = Report::new(&args, None)?;
    for row in rows {
        report.add(row)?;
    }
    report.finish(&src, &dst, &stats, progress, started).await
}

/// The destination's entries of the source's (or, with --observed, of every path the manifest
/// names), by source path: one object's under its new name, `rename`; the paths whose
/// directory could not be listed become rows.
async fn dest_index(
    dst: &Arc<dyn Store>,
    rename: Option<Vec<u8>>,
    src_entries: &[Entry],
    observe: &[Vec<u8>],
    concurrency: usize,
    rows: &mut Vec<Row>,
) -> anyhow::Result<HashMap<Vec<u8>, Entry>> {
    if let Some(name) = rename {
        return Ok(dst
            .head(&name)
            .await?
            .map(|(e, _)| (src_entries[0].path.clone(), e))
            .into_iter()
            .collect());
    }
    let mut paths: Vec<&[u8]> = src_entries.iter().map(|e| &e.path[..]).collect();
    if !observe.is_empty() {
        paths = observe.iter().map(|p| &p[..]).collect();
    }
    let (found, failed) = storage::index_paths(dst, &paths, concurrency).await;
    rows.extend(unlisted(&paths, &failed, "destination"));
    Ok(found)
}

/// The destination's entries a verify looked up, sorted by path.
fn write_observed(path: &Path, found: &HashMap<Vec<u8>, Entry>) -> io::Result<()> {
    let mut entries: Vec<&Entry> = found.values().collect();
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let mut w = crate::manifest::Writer::new(BufWriter::new(File::create(path)?))?;
    for e in entries {
        w.write(e)?;
    }
    w.finish()?.flush()
}

/// Counts a row as decided, for the progress file: the same, or not (differ, missing, error);
/// `bytes` are the source file's.
fn tally(stats: &Stats, status: Status, bytes: u64) {
    match status {
        Status::Same => Stats::add(&stats.files_verified, 1),
        _ => Stats::add(&stats.files_failed, 1),
    }
    Stats::add(&stats.bytes_verified, bytes);
}

/// Rows for the paths in directories whose listing failed: not known, so neither same nor
/// missing.
fn unlisted(paths: &[&[u8]], failed: &[(Vec<u8>, StoreError)], side: &str) -> Vec<Row> {
    if failed.is_empty() {
        return Vec::new();
    }
    let why: HashMap<&[u8], String> = failed
        .iter()
        .map(|(d, e)| (&d[..], format!("cannot list the {side}: {e}")))
        .collect();
    paths
        .iter()
        .filter_map(|p| {
            why.get(crate::storage::beneath::split(p).0)
                .map(|w| Row::new(Status::Error, crate::manifest::escape_path(p), w.clone()))
        })
        .collect()
}

/// Where a symlink points: read from the link, or from the blob that holds its target.
async fn link_target(store: &Arc<dyn Store>, e: &Entry) -> std::result::Result<Vec<u8>, String> {
    crate::storage::read_link(&**store, e)
        .await
        .map(|(target, _)| target)
        .map_err(|err| err.to_string())
}

/// Files and symlinks are compared everywhere. Directories are implied by what is in them (and
/// where a side keeps them as folder stubs, by the same), and compared only for their metadata
/// between two sides that hold directories of their own (`--metadata`); fifos, sockets and
/// devices only between two sides that hold them.
fn compared(e: &Entry, both: Capabilities, metadata: bool) -> bool {
    match e.kind {
        Kind::File | Kind::Symlink => true,
        Kind::Dir => metadata && both.directories,
        _ => both.specials,
    }
}

/// What both sides hold.
fn held_by_both(src: &Arc<dyn Store>, dst: &Arc<dyn Store>) -> Capabilities {
    let (s, d) = (src.capabilities(), dst.capabilities());
    Capabilities {
        directories: s.directories && d.directories,
        specials: s.specials && d.specials,
        ..Capabilities::default()
    }
}

/// The rows of a manifest's entries (or of one object) against what was found of them at the
/// destination; nothing else at the destination is looked at, so nothing is missing on the source.
async fn compare_indexed(
    args: &VerifyArgs,
    src: &Arc<dyn Store>,
    dst: &Arc<dyn Store>,
    src_entries: Vec<Entry>,
    mut dst_index: HashMap<Vec<u8>, Entry>,
    stats: &Stats,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut pairs = Vec::new();
    let both = held_by_both(src, dst);
    for s in src_entries
        .into_iter()
        .filter(|e| compared(e, both, args.metadata))
    {
        match dst_index.remove(&s.path) {
            Some(d) => pairs.push((s, d)),
            None => {
                tally(stats, Status::MissingOnDst, s.size());
                rows.push(Row::new(
                    Status::MissingOnDst,
                    s.display_path(),
                    String::new(),
                ))
            }
        }
    }
    let done: Vec<Row> = futures::stream::iter(pairs)
        .map(|(s, d)| async move {
            let (st, why) = compare(src, dst, &s, &d, args).await;
            tally(stats, st, s.size());
            Row::new(st, s.display_path(), why)
        })
        .buffer_unordered(default_concurrency())
        .collect()
        .await;
    rows.extend(done);
    rows
}

/// Results held in order behind the oldest comparison still running, per comparison allowed
/// to run: a large file being hashed holds the rows after it back (they come out in path order)
/// but not the comparisons, until this many are waiting.
const REORDER_WINDOW: usize = 64;

/// Two whole trees: each listing sorted by path on disk, the two merge-joined, pairs compared
/// `concurrency` at a time and rows streamed out in path order. Memory: one sort run, and the
/// pairs of the reorder window.
async fn verify_trees(
    args: &VerifyArgs,
    src: &Arc<dyn Store>,
    dst: &Arc<dyn Store>,
    stats: &Stats,
    progress: Option<ProgressFile>,
    started: Instant,
) -> anyhow::Result<ExitCode> {
    let scratch = Scratch::new(args.sorting.scratch.as_deref())?;
    let budget = args.sorting.memory.budget();
    let src_runs = sort_store(src, scratch.path(), "source", budget)
        .await
        .with_context(|| format!("listing {} failed", src.describe()))?;
    let dst_runs = sort_store(dst, scratch.path(), "dest", budget)
        .await
        .with_context(|| format!("listing {} failed", dst.describe()))?;
    let concurrency = default_concurrency();
    let permits = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let both = held_by_both(src, dst);
    let mut report = Report::new(args, Some(scratch.path()))?;
    // Prune's own walk sees every pair too: the directories only at the destination are those
    // it would remove (nothing under them that the source has), known once their range ends.
    let mut extra_dirs = Decide::new(scratch.path(), false)?;
    let joined = Join::new(src_runs.merge()?, dst_runs.merge()?)?.map(|pair| {
        let pair = pair?;
        extra_dirs.visit(&pair)?;
        anyhow::Ok(pair)
    });
    let mut rows = futures::stream::iter(joined)
        .map(|pair| {
            let permits = permits.clone();
            async move {
                let (row, bytes) = match pair? {
                    Pair::Source(s) => (
                        compared(&s, both, args.metadata).then(|| {
                            Row::new(Status::MissingOnDst, s.display_path(), String::new())
                        }),
                        s.size(),
                    ),
                    Pair::Dest(d) => (
                        (d.kind != Kind::Dir).then(|| {
                            Row::new(Status::MissingOnSrc, d.display_path(), String::new())
                        }),
                        0,
                    ),
                    Pair::Both(s, d) if compared(&s, both, args.metadata) => {
                        let _running = permits.acquire().await.expect("never closed");
                        let (st, why) = compare(src, dst, &s, &d, args).await;
                        (Some(Row::new(st, s.display_path(), why)), s.size())
                    }
                    // The source's side is not compared (a directory; a symlink beside blob
                    // storage): the destination's entry stands alone.
                    Pair::Both(_, d) => (
                        (d.kind != Kind::Dir).then(|| {
                            Row::new(Status::MissingOnSrc, d.display_path(), String::new())
                        }),
                        0,
                    ),
                };
                if let Some(r) = &row {
                    tally(stats, r.status, bytes);
                }
                anyhow::Ok(row)
            }
        })
        .buffered(concurrency * REORDER_WINDOW);
    let mut pacer = Pacer::default();
    while let Some(row) = rows.next().await {
        pacer.tick().await;
        if let Some(row) = row? {
            report.add(row)?;
        }
    }
    drop(rows);
    // After the rows in path order, each after those inside it, as prune removes them.
    for dir in extra_dirs.finish()?.dirs.read()? {
        let dir = dir?;
        tally(stats, Status::MissingOnSrc, 0);
        report.add(Row::new(
            Status::MissingOnSrc,
            dir.display_path(),
            "directory".to_string(),
        ))?;
    }
    report.finish(src, dst, stats, progress, started).await
}

impl Row {
    fn new(status: Status, path: String, reason: String) -> Row {
        Row {
            path,
            reason,
            status,
        }
    }
}

/// The report as rows arrive: counted, printed at once as text, or for --json kept until the
/// counts that come before them in the document are known (in a scratch file, when the rows
/// stream from a whole tree).
struct Report<'a> {
    args: &'a VerifyArgs,
    counts: [usize; 5],
    text: Option<BufWriter<io::Stdout>>,
    kept: Kept,
}

enum Kept {
    Memory(Vec<Row>),
    File { path: PathBuf, out: BufWriter<File> },
}

impl<'a> Report<'a> {
    fn new(args: &'a VerifyArgs, scratch: Option<&Path>) -> io::Result<Self> {
        let kept = match scratch {
            Some(dir) if args.json => {
                let path = dir.join("rows.jsonl");
                Kept::File {
                    out: BufWriter::with_capacity(1 << 20, File::create(&path)?),
                    path,
                }
            }
            _ => Kept::Memory(Vec::new()),
        };
        let text = (!args.json).then(|| BufWriter::new(io::stdout()));
        Ok(Report {
            args,
            counts: [0; 5],
            text,
            kept,
        })
    }

    fn add(&mut self, row: Row) -> anyhow::Result<()> {
        self.counts[row.status as usize] += 1;
        if row.status == Status::Same && !self.args.all {
            return Ok(());
        }
        if let Some(out) = &mut self.text {
            match row.reason.is_empty() {
                true => writeln!(out, "{} {}", row.status.mark(), row.path)?,
                false => writeln!(out, "{} {}\t{}", row.status.mark(), row.path, row.reason)?,
            }
            return Ok(());
        }
        match &mut self.kept {
            Kept::Memory(rows) => rows.push(row),
            Kept::File { out, .. } => {
                serde_json::to_writer(&mut *out, &row)?;
                out.write_all(b"\n")?;
            }
        }
        Ok(())
    }

    fn count(&self, st: Status) -> usize {
        self.counts[st as usize]
    }

    /// Prints the report, once the progress file (if any) says finished with the same counts.
    async fn finish(
        self,
        src: &Arc<dyn Store>,
        dst: &Arc<dyn Store>,
        stats: &Stats,
        progress: Option<ProgressFile>,
        started: Instant,
    ) -> anyhow::Result<ExitCode> {
        if let Some(p) = progress {
            p.finish().await;
        }
        let bad = self.counts.iter().sum::<usize>() - self.count(Status::Same);
        let (same, differ, missing_on_dst, missing_on_src, error) = (
            self.count(Status::Same),
            self.count(Status::Differ),
            self.count(Status::MissingOnDst),
            self.count(Status::MissingOnSrc),
            self.count(Status::Error),
        );
        if let Some(mut out) = self.text {
            out.flush()?;
            eprintln!("{same} same, {differ} differ, {missing_on_dst} missing on destination, {missing_on_src} missing on source, {error} errors");
        } else {
            let entries = match self.kept {
                Kept::Memory(rows) => Entries::Memory(rows),
                Kept::File { path, out } => {
                    out.into_inner().map_err(|e| e.into_error())?;
                    Entries::File(path)
                }
            };
            let doc = Summary {
                version: Default::default(),
                passed: bad == 0,
                checksum: self.args.checksum,
                compared: Compared::of(self.args),
                command: "verify",
                dest: dst.describe(),
                differ,
                entries,
                error,
                missing_on_dst,
                missing_on_src,
                requests: stats.requests.counts(),
                same,
                seconds: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
                source: src.describe(),
            };
            let mut out = BufWriter::new(io::stdout().lock());
            serde_json::to_writer_pretty(&mut out, &doc)?;
            out.write_all(b"\n")?;
            out.flush()?;
        }
        Ok(if bad > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    }
}

impl Compared {
    fn of(args: &VerifyArgs) -> Vec<Compared> {
        [
            (true, Compared::Size),
            (args.checksum, Compared::Md5),
            (args.metadata, Compared::Metadata),
        ]
        .into_iter()
        .filter_map(|(asked, what)| asked.then_some(what))
        .collect()
    }
}
