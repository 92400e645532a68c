use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::{
    complete_entries, default_concurrency, entries_of, object_destination, open, open_options,
    parse_roots, resolve, Root,
};
use crate::depth::Depth;
use crate::engine::{Engine, EngineOptions, Index, Job};
use crate::error::StoreError;
use crate::filter;
use crate::location::Location;
use crate::manifest::escape_path;
use crate::manifest::{Entry, Kind};
use crate::newer::{overwrites_newer, Newer};
use crate::progress::{self, Progress, ProgressFile};
use crate::same::Compare;
use crate::same::Verdict;
use crate::stats::Stats;
use crate::storage::{self, OpenOptions, Store};
use crate::units::human_bytes;
use std::path::PathBuf;

use super::args::{CarriedArgs, Common, Filters, PreserveArgs};
use super::replace::{self, Replacement};
use crate::filter::Shard;
use clap::Args;

fn parse_block_size(s: &str) -> Result<u64, String> {
    let n = crate::units::parse_size(s)?;
    // Azure's limits: blocks up to 4000 MiB; below 64 KiB the request overhead dominates.
    if !(64 * 1024..=4000 * 1024 * 1024).contains(&n) {
        return Err(format!("block size {s} is outside 64KiB..4000MiB"));
    }
    Ok(n)
}

#[derive(Args, Debug)]
pub struct CopyArgs {
    pub source: String,
    pub dest: String,
    /// Descend into directories / prefixes
    #[arg(short, long)]
    pub recursive: bool,
    /// Copy only the entries of this manifest (paths relative to SOURCE)
    #[arg(long, value_name = "MANIFEST")]
    pub files_from: Option<PathBuf>,
    /// When a destination file counts as already there
    #[arg(long, value_enum, default_value = "size-mtime")]
    pub compare: Compare,
    /// Do not set Content-MD5 on uploaded blobs
    #[arg(long = "no-put-md5", action = clap::ArgAction::SetFalse)]
    pub put_md5: bool,
    /// Between blobs of one account, stream the bytes through ferry instead of letting the
    /// service copy them (Copy Blob)
    #[arg(long = "no-server-copy", action = clap::ArgAction::SetFalse)]
    pub server_copy: bool,
    /// Abort a server-side copy still pending after this many seconds [default: 3600]
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub server_copy_timeout: Option<u64>,
    /// The keys Blob destinations keep POSIX attributes under, beside rclone's (`mtime`, `mode`,
    /// `uid`, `gid`): azcopy's `--preserve-posix-properties` ones (standard), or those of its
    /// `--posix-properties-style amlfs`, which Azure Managed Lustre imports (amlfs)
    #[arg(
        long,
        value_enum,
        env = "FERRY_POSIX_STYLE",
        default_value = "standard"
    )]
    pub posix_style: crate::storage::azure::posix::PosixStyle,
    /// Upload every blob as application/octet-stream instead of a Content-Type guessed from
    /// its extension (blob → blob keeps the source's either way)
    #[arg(long = "no-guess-mime-type", action = clap::ArgAction::SetFalse)]
    pub guess_mime: bool,
    /// Blob → blob: give each copy the source blob's access tier, where one was set on it
    /// (else the destination account's default applies)
    #[arg(long)]
    pub keep_tier: bool,
    /// Blob → blob: give each copy the source blob's index tags (a request more per tagged blob)
    #[arg(long)]
    pub keep_tags: bool,
    /// This process's share of the listing: INDEX/COUNT (same LPT split as `ferry partition`)
    #[arg(long)]
    pub shard: Option<Shard>,
    /// Show what would be copied; change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Refuse if the entries of another type this copy replaces (a directory where the source
    /// now has a file, with everything under it) are more than this: a count (1000) or a share of
    /// the destination's entries (10%). Default: 50% for a whole tree; a part of a planned pass
    /// (--files-from, --shard) is judged by the plan's prune unless this is given
    #[arg(long, value_parser = crate::commands::prune::parse_limit)]
    pub max_delete: Option<crate::commands::prune::Limit>,
    /// Replace even past --max-delete
    #[arg(long)]
    pub force: bool,
    /// Replace destination files whose mtime is later than their source's (refused otherwise,
    /// nothing copied: the sign of swapped SOURCE and DEST); for restoring older versions
    #[arg(long)]
    pub overwrite_newer: bool,
    /// Where to write the list of entries the replacements delete, in manifest format
    /// (default: $XDG_STATE_HOME/ferry/copy-<time>-<pid>-….tsv; written only when something
    /// is replaced)
    #[arg(long, value_name = "PATH")]
    pub log: Option<PathBuf>,
    /// Print one JSON summary on stdout
    #[arg(long)]
    pub json: bool,
    /// Keep PATH rewritten with the run's progress as JSON (every 2 seconds and at the end), for
    /// a pipeline's live status
    #[arg(long, value_name = "PATH")]
    pub progress_file: Option<PathBuf>,
    /// Force the progress bar on (default: on when stderr is a terminal)
    #[arg(long, overrides_with = "no_progress")]
    pub progress: bool,
    #[arg(long)]
    pub no_progress: bool,
    /// Requests in flight across all files, fixed (default: adapts, starting from clamp(CPUs, 8, 96))
    #[arg(long, env = "FERRY_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// Files transferred at once (default: 2 × concurrency)
    #[arg(long, env = "FERRY_PARALLEL_FILES")]
    pub parallel_files: Option<usize>,
    /// Block size for uploads and ranged downloads (e.g. 4MiB, 16M)
    #[arg(long, default_value = "4MiB", value_parser = parse_block_size)]
    pub block_size: u64,
    /// Cap on aggregate throughput: 500Mbps, 1Gbps (bits) or 100MB/s, 64MiB/s (bytes)
    #[arg(long, value_parser = crate::units::parse_rate)]
    pub max_bandwidth: Option<u64>,
    #[command(flatten)]
    pub preserve: PreserveArgs,
    #[command(flatten)]
    pub filters: Filters,
    #[command(flatten)]
    pub carried: CarriedArgs,
    #[command(flatten)]
    pub common: Common,
}

pub async fn run(args: CopyArgs) -> anyhow::Result<ExitCode> {
    let run = Run::start(args)?;
    let filter = super::build_filter(&run.args.filters)?;
    let (src, dst, entries, rename) = run.resolve().await?;
    let entries = run.select(&src, entries, &filter).await?;
    let jobs: Vec<Job> = entries
        .into_iter()
        .map(|e| Job {
            dst_path: rename.clone().unwrap_or_else(|| e.path.clone()),
            src: e,
        })
        .collect();
    let args = &run.args;
    let dst_index = match rename {
        // One object is checked on its own (a HEAD, a stat).
        Some(_) => None,
        None => destination_index(&dst, &jobs, args, run.depth.ceiling()).await?,
    };
    let whole_tree = args.files_from.is_none() && args.shard.is_none() && rename.is_none();
    let mut replacing = Replacing::judge(args, &dst, &jobs, dst_index.as_ref(), whole_tree).await?;
    let newer = newer_at_dest(args, &dst, &jobs, dst_index.as_ref()).await?;
    if run.refused((&src, &dst), &mut replacing, &newer) {
        return Ok(ExitCode::from(1));
    }
    // Opened before anything goes: a log that cannot be written stops the copy first.
    replacing.open_log(args.log.as_deref())?;
    if !args.dry_run {
        super::take_state(&args.carried, &run.dst_loc, &run.opts).await?;
    }
    let engine = run.engine((&src, &dst), whole_tree, dst_index);
    run.transfer(&engine, jobs, &replacing).await;
    run.finish((&src, &dst), replacing, newer, whole_tree).await
}

/// What one copy carries from its arguments to its report.
struct Run {
    args: CopyArgs,
    started: Instant,
    stats: Arc<Stats>,
    progress_file: Option<ProgressFile>,
    src_loc: Location,
    dst_loc: Location,
    depth: Arc<Depth>,
    parallel_files: usize,
    opts: OpenOptions,
}

impl Run {
    fn start(args: CopyArgs) -> anyhow::Result<Run> {
        let started = Instant::now();
        let stats = Arc::new(Stats::default());
        // From the start: a status should see a long listing as a live run, its totals not yet
        // known.
        let progress_file = args
            .progress_file
            .clone()
            .map(|p| ProgressFile::start(p, "copy", stats.clone()));
        let (src_loc, dst_loc) = parse_roots(&args.source, &args.dest)?;
        let depth = Arc::new(depth_for(&args, &src_loc, &dst_loc).watching(stats.clone()));
        let parallel_files = match (args.parallel_files, args.concurrency) {
            (Some(n), _) => n,
            (None, Some(c)) => 2 * c,
            // Tiny files are one request each: enough files in progress to fill any depth.
            (None, None) => depth.ceiling(),
        }
        .max(1);
        let opts = OpenOptions {
            copy_wait: args.server_copy_timeout.map(Duration::from_secs),
            posix_style: args.posix_style,
            xattrs: crate::xattrs::Wanted::of(&args.preserve.preserve),
            guess_mime: args.guess_mime,
            keep_tier: args.keep_tier,
            keep_tags: args.keep_tags,
            ..open_options(&args.common, depth.ceiling(), stats.clone())
        };
        Ok(Run {
            args,
            started,
            stats,
            progress_file,
            src_loc,
            dst_loc,
            depth,
            parallel_files,
            opts,
        })
    }

    /// Opens both ends and lists what the source holds; a single object comes with the name it
    /// takes at the destination.
    async fn resolve(
        &self,
    ) -> anyhow::Result<(Arc<dyn Store>, Arc<dyn Store>, Vec<Entry>, Option<Vec<u8>>)> {
        let (args, opts) = (&self.args, &self.opts);
        match resolve(&self.src_loc, opts, true).await? {
            Root::Object {
                parent,
                entry,
                name,
            } => {
                if args.files_from.is_some() {
                    anyhow::bail!(
                        "--files-from needs a directory or prefix as SOURCE, not a single file"
                    );
                }
                let (dst_parent, dst_name) = object_destination(&self.dst_loc, &name)?;
                Ok((
                    open(&parent, opts)?,
                    open(&dst_parent, opts)?,
                    vec![entry],
                    Some(dst_name),
                ))
            }
            Root::Tree(loc) if !args.recursive && args.files_from.is_none() => {
                // As cp's: a tree without -r is a mistake far more often than a wish for its top
                // level's files alone, and a copy of nothing must not end in exit 0.
                anyhow::bail!("{loc} is a directory: add -r (--recursive) to copy what it holds")
            }
            Root::Tree(loc) => {
                let src = open(&loc, opts)?;
                let mut entries = self.tree_entries(&src).await?;
                let dst = open(&self.dst_loc, opts)?;
                if !src.capabilities().directories && dst.capabilities().directories {
                    for (path, beneath) in crate::shadowed::take_shadowed(&mut entries) {
                        let shown = crate::manifest::escape_path(&path);
                        self.stats
                            .failed(shown, crate::shadowed::message(&path, &beneath));
                    }
                }
                Ok((src, dst, entries, None))
            }
        }
    }

    async fn tree_entries(&self, src: &Arc<dyn Store>) -> anyhow::Result<Vec<Entry>> {
        let args = &self.args;
        if let Some(m) = args.files_from.as_deref() {
            return entries_of(src, Some(m), args.recursive).await;
        }
        // What could be listed is copied; what could not (an unreadable directory, say) is
        // reported as failed, so the run ends with exit 1, not 0.
        let (entries, errors) = storage::list_partial(src, args.recursive).await;
        if entries.is_empty() && !errors.is_empty() {
            let e = anyhow::Error::from(errors.into_iter().next().expect("not empty"));
            return Err(e.context(format!("listing {} failed", src.describe())));
        }
        for e in errors {
            self.stats.failed(src.describe(), format!("listing: {e}"));
        }
        Ok(entries)
    }

    /// The entries to copy, in the order they start, counted into the run's totals.
    async fn select(
        &self,
        src: &Arc<dyn Store>,
        mut entries: Vec<Entry>,
        filter: &filter::Filter,
    ) -> anyhow::Result<Vec<Entry>> {
        let args = &self.args;
        let both_local = matches!(
            (&self.src_loc, &self.dst_loc),
            (Location::Local(_), Location::Local(_))
        );
        // Directories go everywhere (into Blob storage as folder stubs), but not the prefixes a
        // listing of one level of a container shows: only what is copied makes those.
        let src_is_blob = matches!(self.src_loc, Location::Blob(_));
        entries.retain(|e| {
            filter.matches(&e.path)
                && (e.kind != Kind::Dir
                    || both_local
                    || !src_is_blob
                    || args.recursive
                    || args.files_from.is_some())
        });
        complete_entries(src, &mut entries, self.depth.ceiling()).await?;
        if let Some(s) = args.shard {
            entries = filter::shard(entries, s);
        }
        // Largest first: the long transfers start early instead of straggling at the end.
        entries.sort_by(|a, b| b.size().cmp(&a.size()).then_with(|| a.path.cmp(&b.path)));
        let stats = &self.stats;
        Stats::add(
            &stats.files_total,
            entries.iter().filter(|e| e.kind != Kind::Dir).count() as u64,
        );
        Stats::add(&stats.bytes_total, entries.iter().map(Entry::size).sum());
        stats.totals_final();
        Ok(entries)
    }

    /// Whether the copy is refused, said and reported if so. Judged before anything is
    /// written: a refused copy writes nothing at all.
    fn refused(
        &self,
        ends: (&Arc<dyn Store>, &Arc<dyn Store>),
        replacing: &mut Replacing,
        newer: &Newer,
    ) -> bool {
        let args = &self.args;
        let refusal = newer.copy_refusal(args.overwrite_newer).or_else(|| {
            let fix = super::prune::OVER_LIMIT_FIX;
            replacing
                .over_limit
                .as_ref()
                .map(|why| format!("{why}; {fix}"))
        });
        if let (Some(why), false) = (refusal, args.dry_run) {
            replacing.refused = Some(why.clone());
            if args.json {
                Outcome {
                    args,
                    ends,
                    stats: &self.stats,
                    depth: self.depth.report(),
                    replacing,
                    newer,
                    leftovers: Vec::new(),
                    seconds: 0.0,
                }
                .say();
            }
            eprintln!("copy refused, nothing copied or deleted: {why}");
            return true;
        }
        if let (Some(why), true) = (newer.copy_refusal(args.overwrite_newer), args.dry_run) {
            eprintln!("note: a real run would be refused: {why}");
        }
        false
    }

    fn engine(
        &self,
        (src, dst): (&Arc<dyn Store>, &Arc<dyn Store>),
        whole_tree: bool,
        dst_index: Option<Index>,
    ) -> Arc<Engine> {
        let args = &self.args;
        Arc::new(Engine::new(
            src.clone(),
            dst.clone(),
            EngineOptions {
                compare: args.compare,
                parallel_files: self.parallel_files,
                block_size: args.block_size,
                put_md5: args.put_md5,
                max_bandwidth: args.max_bandwidth,
                memory: match args.concurrency {
                    // A fixed depth keeps what it always promised: a block per request in flight.
                    Some(c) => c as u64 * args.block_size,
                    None => ADAPTIVE_MEMORY,
                },
                finish_root: whole_tree,
                server_copy: args.server_copy && storage::can_copy(&**src, &**dst),
                preserve: args.preserve.preserve,
            },
            self.stats.clone(),
            self.depth.clone(),
            dst_index,
        ))
    }

    async fn transfer(&self, engine: &Arc<Engine>, jobs: Vec<Job>, replacing: &Replacing) {
        let args = &self.args;
        if args.dry_run {
            replacing.show(args.json);
            dry_run(engine, jobs, &self.stats, args.json).await;
        } else {
            let bar = progress::wanted(args.progress, args.no_progress)
                .then(|| Progress::start(self.stats.clone()));
            engine.run(jobs).await;
            if let Some(b) = bar {
                b.finish();
            }
        }
    }

    /// After the transfers: the deletion log, leftovers swept, every file accounted for, the
    /// report and the exit code.
    async fn finish(
        self,
        ends: (&Arc<dyn Store>, &Arc<dyn Store>),
        mut replacing: Replacing,
        newer: Newer,
        whole_tree: bool,
    ) -> anyhow::Result<ExitCode> {
        let (args, stats, dst) = (&self.args, &self.stats, ends.1);
        replacing.log(dst, args.dry_run).await?;
        // The listing's replacements are the count: the local engine makes a directory over a
        // file without counting it.
        stats
            .replaced
            .fetch_max(replacing.replaced, std::sync::atomic::Ordering::Relaxed);
        // After the transfers: a partial file this pass resumed is committed by now, or written
        // to. Only a whole tree's pass: a part's directories hold other parts' files too, whose
        // partial files those parts may be about to resume.
        let sweep = match whole_tree {
            true => storage::sweep_leftovers(&**dst, args.dry_run).await,
            false => Default::default(),
        };
        let leftovers = super::report_leftovers(&**dst, sweep, args.dry_run, args.json);
        // Every file ends copied, skipped, failed or ignored; one without an outcome is a bug,
        // and must not end in exit 0.
        let g = Stats::get;
        let accounted = g(&stats.files_copied)
            + g(&stats.files_skipped)
            + g(&stats.files_failed)
            + g(&stats.files_ignored);
        if accounted < g(&stats.files_total) {
            stats.failed(
                dst.describe(),
                format!(
                    "internal error: {} files have no outcome",
                    g(&stats.files_total) - accounted
                ),
            );
        }
        if let Some(p) = self.progress_file {
            p.finish().await;
        }
        Outcome {
            args,
            ends,
            stats,
            depth: self.depth.report(),
            replacing: &replacing,
            newer: &newer,
            leftovers,
            seconds: self.started.elapsed().as_secs_f64(),
        }
        .say();
        Ok(if Stats::get(&stats.files_failed) > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    }
}

/// Bytes of blocks and ranges in memory at once when the depth adapts: twelve 4 MiB blocks,
/// or six 8 MiB download ranges, which keeps the worker under 100 MiB whatever depth it
/// settles on.
const ADAPTIVE_MEMORY: u64 = 48 << 20;

/// How much a copy keeps in flight (docs/worker.md, "Depth"). Between filesystems the depth
/// is files at once: `--parallel-files` (or twice `--concurrency`) fixes it; else it adapts,
/// starting at 16 on local disks and at 64 where either side is a network filesystem, whose
/// round trips want many more in flight. With Blob storage on either side it is requests in
/// flight: `--concurrency` fixes it; else it adapts from the CPU-derived default.
fn depth_for(args: &CopyArgs, src: &Location, dst: &Location) -> Depth {
    match (src, dst) {
        (Location::Local(s), Location::Local(d)) => match (args.parallel_files, args.concurrency) {
            (Some(n), _) => Depth::fixed(n),
            (None, Some(c)) => Depth::fixed(2 * c),
            (None, None)
                if storage::filesystem::is_remote(s) || storage::filesystem::is_remote(d) =>
            {
                Depth::adaptive(64, 4, 256)
            }
            (None, None) => Depth::adaptive(16, 2, 64),
        },
        _ => match args.concurrency {
            Some(c) => Depth::fixed(c),
            None => Depth::adaptive(default_concurrency(), 2, 256),
        },
    }
}

/// The destination files this copy would replace with older ones (newer.rs's rule), from the
/// destination's listing, or a look at the one object of a single-object copy. Nothing is
/// looked at where nothing is compared (`--compare none` into Blob storage: always copy).
async fn newer_at_dest(
    args: &CopyArgs,
    dst: &Arc<dyn Store>,
    jobs: &[Job],
    index: Option<&Index>,
) -> anyhow::Result<Newer> {
    let preserve = &args.preserve.preserve;
    let mut found = Newer::default();
    for job in jobs {
        let looked;
        let old = match index {
            Some(i) => i.get(&job.dst_path),
            None if jobs.len() == 1 && preserve.times => {
                looked = dst.head(&job.dst_path).await?.map(|(e, _)| e);
                looked.as_ref()
            }
            None => None,
        };
        let verdict = crate::same::classify(&job.src, old, args.compare, preserve.attrs());
        if overwrites_newer(&job.src, old, (verdict, args.compare), preserve.times) {
            found.note(&job.src);
        }
    }
    Ok(found)
}

/// What the destination already has, from listings rather than a look per file: the whole
/// destination for a whole tree (nothing, if its root does not exist yet), or for a part of
/// one (`--files-from`, `--shard`) just the directories that part writes into. None when
/// nothing is compared and the destination is Blob storage (it is never asked).
async fn destination_index(
    dst: &Arc<dyn Store>,
    jobs: &[Job],
    args: &CopyArgs,
    parallel: usize,
) -> anyhow::Result<Option<Index>> {
    // Where directories are real, the local → local engine learns from the index which
    // directories are missing: an absent root says all of them, without a look each.
    let directories = dst.capabilities().directories;
    if args.compare == Compare::None && !directories {
        return Ok(None);
    }
    if directories {
        if !dst.root_exists().await? {
            return Ok(Some(Index::new()));
        }
        // Nothing is compared: a listing would only tell which names are free.
        if args.compare == Compare::None {
            return Ok(None);
        }
    }
    if args.files_from.is_some() || args.shard.is_some() {
        // Directories too: what stands at their names decides whether they are made, replaced
        // or only finished (in Blob storage, folder stubs are blobs).
        let paths: Vec<&[u8]> = jobs.iter().map(|j| &j.dst_path[..]).collect();
        let (index, failed) = storage::index_paths(dst, &paths, parallel).await;
        for (dir, e) in failed {
            // Not fatal: what could not be compared is copied.
            eprintln!(
                "warning: cannot list {}/{}: {e}; its files are copied without comparing",
                dst.describe(),
                escape_path(&dir)
            );
        }
        return Ok(Some(index));
    }
    // A filesystem's listing fails a directory at a time (one unreadable): what it showed is
    // still worth comparing against.
    if directories {
        let (listed, errors) = storage::list_partial(dst, true).await;
        for e in errors {
            eprintln!("warning: listing the destination: {e}; what it did not show is copied without comparing");
        }
        return Ok(Some(
            listed.into_iter().map(|e| (e.path.clone(), e)).collect(),
        ));
    }
    index_of(dst).await.map(Some)
}

/// The destination's listing by path. A missing container is an error here, before any
/// transfer starts, rather than one failure per file.
async fn index_of(dst: &Arc<dyn Store>) -> anyhow::Result<Index> {
    match storage::list_all(dst, true).await {
        Ok(listed) => Ok(listed.into_iter().map(|e| (e.path.clone(), e)).collect()),
        Err(e @ StoreError::RootNotFound(_)) => {
            anyhow::bail!(
                "the container of {} does not exist: create it with `ferry mk` ({e})",
                dst.describe()
            )
        }
        Err(e) => Err(anyhow::Error::from(e)
            .context(format!("cannot list the destination {}", dst.describe()))),
    }
}

async fn dry_run(engine: &Arc<Engine>, jobs: Vec<Job>, stats: &Stats, json: bool) {
    let decisions: Vec<(Job, anyhow::Result<Verdict>)> = futures::stream::iter(jobs)
        .map(|j| {
            let e = engine.clone();
            async move {
                let r = e.decide(&j).await.map_err(anyhow::Error::from);
                (j, r)
            }
        })
        .buffered(engine.opts.parallel_files)
        .collect()
        .await;
    for (j, r) in decisions {
        match r {
            Ok(Verdict::MetaOnly) => {
                if j.src.kind != Kind::Dir {
                    Stats::add(&stats.files_skipped, 1);
                    Stats::add(&stats.bytes_skipped, j.src.size());
                }
                Stats::add(&stats.meta_updated, 1);
                if !json {
                    println!("would update metadata\t{}", j.src.display_path());
                }
            }
            Ok(v) if v.rewrites() && j.src.kind == Kind::Dir => {
                if !json {
                    println!("would make directory\t{}", j.src.display_path());
                }
            }
            Ok(v) if v.rewrites() => {
                if engine.server_side(&j) {
                    stats.server_copied(j.src.size());
                } else {
                    Stats::add(&stats.files_copied, 1);
                    Stats::add(&stats.bytes_copied, j.src.size());
                }
                if !json {
                    println!("would copy\t{}\t{}", j.src.display_path(), j.src.size());
                }
            }
            Ok(_) if j.src.kind == Kind::Dir => {}
            Ok(_) => {
                Stats::add(&stats.files_skipped, 1);
                Stats::add(&stats.bytes_skipped, j.src.size());
            }
            Err(e) => stats.failed(j.src.display_path(), format!("{e:#}")),
        }
    }
}

/// The entries of another type the copy replaces, judged before anything is written.
struct Replacing {
    found: Vec<Replacement>,
    /// The destination's entries known, for --max-delete's share.
    of: u64,
    over_limit: Option<String>,
    refused: Option<String>,
    /// The deletion log, open from before the first replacement until every one is written.
    writer: Option<replace::Log>,
    log: Option<PathBuf>,
    /// The entries the log holds: those whose replacement went (all of them in a dry run).
    logged: u64,
    /// The replacements that went (or, in a dry run, would).
    replaced: u64,
}

impl Replacing {
    /// Finds the replacements and judges them by --max-delete: prune's rule, whose default
    /// a whole tree gets; a part of a planned pass only the limit it is given, the
    /// pass's deletions being the plan's prune's to judge.
    async fn judge(
        args: &CopyArgs,
        dst: &Arc<dyn Store>,
        jobs: &[Job],
        index: Option<&Index>,
        whole_tree: bool,
    ) -> anyhow::Result<Replacing> {
        let found = replace::find(dst, jobs, index).await?;
        let of = index.map_or(0, |i| replace::known_entries(dst, i, &found));
        // The replaced name itself is written anew, as a changed file's bytes are: what goes
        // beyond it, a directory's contents, is what the copy deletes.
        let n = found.iter().map(|r| r.under.len() as u64).sum();
        let default = super::prune::parse_limit(super::prune::DEFAULT_MAX_DELETE)
            .expect("the default limit parses");
        let limit = args.max_delete.or(whole_tree.then_some(default));
        let over_limit = limit.and_then(|l| {
            l.exceeded(n, of, args.force).map(|why| {
                let paths: Vec<String> =
                    found.iter().take(3).map(|r| r.old.display_path()).collect();
                let more = if found.len() > 3 { ", …" } else { "" };
                format!(
                    "replacing entries of another type ({}{more}): {why}",
                    paths.join(", ")
                )
            })
        });
        Ok(Replacing {
            found,
            of,
            over_limit,
            refused: None,
            writer: None,
            log: None,
            logged: 0,
            replaced: 0,
        })
    }

    fn removed(&self) -> u64 {
        self.found.iter().map(Replacement::entries).sum()
    }

    fn show(&self, json: bool) {
        if !json {
            for r in &self.found {
                println!("would replace {}", r.describe());
            }
        }
        if let Some(why) = &self.over_limit {
            eprintln!("note: a real run would be refused: {why}");
        }
    }

    /// Creates the deletion log (`asked`, else a new name in the state directory) where
    /// something is replaced; none otherwise.
    fn open_log(&mut self, asked: Option<&std::path::Path>) -> anyhow::Result<()> {
        if !self.found.is_empty() {
            self.writer = Some(replace::Log::create(asked)?);
        }
        Ok(())
    }

    /// Writes the deletion log: in a dry run what would go, else what went.
    async fn log(&mut self, dst: &Arc<dyn Store>, dry_run: bool) -> anyhow::Result<()> {
        let Some(mut log) = self.writer.take() else {
            return Ok(());
        };
        for r in &self.found {
            if dry_run || replace::done(dst, r).await {
                log.write(r)?;
                self.logged += r.entries();
                self.replaced += 1;
            }
        }
        self.log = Some(log.path.clone());
        log.finish()?;
        Ok(())
    }
}

/// "in flight: 16 (fixed)" or "in flight: adaptive 8 -> 24 (peak 32)".
fn depth_brief(d: &crate::documents::Report) -> String {
    match d.mode {
        crate::documents::Mode::Fixed => format!("in flight: {} (fixed)", d.last),
        crate::documents::Mode::Adaptive => format!(
            "in flight: adaptive {} -> {} (peak {})",
            d.initial, d.last, d.peak
        ),
    }
}

/// What a copy comes to: said once, as `--json`'s document or as lines on stderr.
struct Outcome<'a> {
    args: &'a CopyArgs,
    ends: (&'a Arc<dyn Store>, &'a Arc<dyn Store>),
    stats: &'a Stats,
    depth: crate::documents::Report,
    replacing: &'a Replacing,
    newer: &'a Newer,
    leftovers: Vec<String>,
    seconds: f64,
}

impl Outcome<'_> {
    fn say(self) {
        if self.args.json {
            super::print_json(&self.doc());
        } else {
            self.lines();
        }
    }

    /// `--json`'s document.
    fn doc(self) -> crate::documents::CopyDoc {
        use crate::documents::{Blocks, CopyBytes, CopyDoc, CopyFiles, PathError, PathReason};
        let Outcome {
            args,
            ends: (src, dst),
            stats,
            depth,
            replacing,
            newer,
            leftovers,
            seconds,
        } = self;
        let g = Stats::get;
        let failures = stats.failures().into_iter();
        let ignored = stats.ignored_list().into_iter();
        CopyDoc {
            version: Default::default(),
            command: "copy",
            source: src.describe(),
            dest: dst.describe(),
            dry_run: args.dry_run,
            files: CopyFiles {
                total: g(&stats.files_total),
                copied: g(&stats.files_copied),
                skipped: g(&stats.files_skipped),
                failed: g(&stats.files_failed),
                ignored: g(&stats.files_ignored),
                server_copied: g(&stats.files_server_copied),
                metadata_only: g(&stats.meta_updated),
                replaced: g(&stats.replaced),
                removed: replacing.removed(),
                newer_at_dest: newer.count,
            },
            replacements: replacing
                .found
                .iter()
                .map(|r| crate::documents::Replaced {
                    path: r.old.display_path(),
                    was: r.old.kind.name().into(),
                    entries: r.entries(),
                    bytes: r.bytes(),
                })
                .collect(),
            dest_entries: replacing.of,
            refused: replacing.refused.clone(),
            warning: replacing.over_limit.clone().filter(|_| args.dry_run),
            log: replacing.log.as_ref().map(|p| p.display().to_string()),
            bytes: CopyBytes {
                total: g(&stats.bytes_total),
                copied: g(&stats.bytes_copied),
                skipped: g(&stats.bytes_skipped),
                server_copied: g(&stats.bytes_server_copied),
            },
            blocks: Blocks {
                sent: g(&stats.blocks_sent),
                reused: g(&stats.blocks_reused),
            },
            retries: crate::documents::Retries {
                total: g(&stats.retries_total),
                by_status: stats.retries_by_status(),
            },
            requests: stats.requests.counts(),
            concurrency: depth,
            failures: failures
                .map(|(path, error)| PathError { path, error })
                .collect(),
            ignored: ignored
                .map(|(path, reason)| PathReason { path, reason })
                .collect(),
            ignored_by_reason: stats.ignored_by_reason(),
            not_kept: stats.not_kept_by_kind(),
            leftovers_removed: leftovers.len() as u64,
            leftovers,
            seconds: (seconds * 1000.0).round() / 1000.0,
        }
    }

    /// The lines on stderr.
    fn lines(self) {
        let Outcome {
            args,
            stats,
            depth,
            replacing,
            seconds,
            ..
        } = self;
        let g = Stats::get;
        let verb = if args.dry_run { "would copy" } else { "copied" };
        let server = match g(&stats.files_server_copied) {
            0 => String::new(),
            n => format!(", {n} server-side"),
        };
        let meta = match (g(&stats.meta_updated), g(&stats.replaced)) {
            (0, 0) => String::new(),
            (m, 0) => format!(" ({m} with new metadata only)"),
            (m, r) => {
                format!(" ({m} with new metadata only; {r} entries of another type replaced)")
            }
        };
        eprintln!(
        "{verb} {} files ({}{server}), skipped {} ({}){meta}, failed {}, ignored {} in {:.2}s{}; {}",
        g(&stats.files_copied),
        human_bytes(g(&stats.bytes_copied)),
        g(&stats.files_skipped),
        human_bytes(g(&stats.bytes_skipped)),
        g(&stats.files_failed),
        g(&stats.files_ignored),
        seconds,
        if g(&stats.retries_total) > 0 { format!(", retries {}", stats.retry_brief()) } else { String::new() },
        depth_brief(&depth)
    );
        if let Some(log) = &replacing.log {
            eprintln!(
                "{} {} of {} destination entries to replace {} of another type; list in {}",
                if args.dry_run {
                    "would delete"
                } else {
                    "deleted"
                },
                replacing.logged,
                replacing.of,
                replacing.found.len(),
                log.display()
            );
        }
        for (p, e) in stats.failures() {
            eprintln!("failed: {p}: {e}");
        }
        for (p, why) in stats.ignored_list() {
            eprintln!("ignored: {p}: {why}");
        }
        for (what, n) in stats.not_kept_by_kind() {
            eprintln!("not kept: {what} of {n} entries (the destination cannot hold them)");
        }
    }
}
