//! local → local (NFS and other mounts included), on plain threads: per-file work is a handful
//! of system calls, and handing each file to an async pool would cost more than that.
//!
//! The order of a run, each step costing as few round trips as a network filesystem allows:
//! 1. files, as many at once as the depth allows, each compared against the destination's
//!    listing (no stat of its own), staged where no reader sees it, and committed in batches
//!    that share one flush of the filesystem; a directory the listing does not show is made
//!    when the first file bound for it needs it;
//! 2. the directories no file needed (empty ones), each depth level in parallel;
//! 3. directory metadata, deepest first, each level in parallel, only where it differs;
//! 4. the root's metadata, when a whole tree was copied.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use super::{panicked, settled, special_not_held, Engine, Job, Outcome};
use crate::error::{Result, StoreError};
use crate::manifest::Kind;
use crate::same::{self, Compare, Verdict};
use crate::stats::Stats;
use crate::storage::filesystem::{
    entry_of, entry_with_target, meta_of, open_files_limit, DirNow, EntryCopy, Filesystem,
    Identity, Staged, TempIn,
};
use crate::storage::Meta;
use crate::xattrs::{self, Wanted};

/// Staged files committed together after one flush: enough to spread its cost, few enough
/// that a batch's open descriptors (unnamed files stay open until linked) stay modest, and
/// young enough that a run killed meanwhile (a job past its time limit) loses little: what is
/// committed is what a re-run skips.
const BATCH_FILES: usize = 32;
const BATCH_BYTES: u64 = 64 << 20;
const BATCH_AGE: std::time::Duration = std::time::Duration::from_secs(1);

/// Files a run writes into one directory of a network filesystem past which their temp names
/// are made in staging directories (filesystem::TempIn): a rename into place then holds the
/// directory's lock for two round trips where a create and a rename would hold it for four.
const CROWDED: usize = 256;

/// Staging directories a run shares among its threads, and files bound for crowded
/// directories in flight, one a staging directory: enough that the creates in them keep ahead
/// of the renames out of them, which go one at a time; few, since each costs a mkdir and an
/// rmdir under the root's lock, which is the crowded directory's in a flat tree. More files
/// at once would only queue on that lock, and one that waits there longer than the client
/// remembers its staged name (1 s on latencyfs, 3 s and up on NFS) pays a LOOKUP more.
const STAGING_DIRS: usize = 16;

enum Step {
    Done(Outcome),
    Staged(Staged),
}

/// What a run changed in the destination's directories, so that finishing them needs no stat.
#[derive(Default)]
struct Changed {
    /// Made by this run.
    made: Mutex<HashSet<Vec<u8>>>,
    /// Entries added or replaced in them (their mtime moved).
    touched: Mutex<HashSet<Vec<u8>>>,
    /// Hard-linked files that ended well, by destination path: true where written this run
    /// (a new inode, to which the group's other names must be linked again).
    linked: Mutex<HashMap<Vec<u8>, bool>>,
}

impl Changed {
    fn touch(&self, path: &[u8]) {
        let parent = crate::storage::beneath::split(path).0;
        let mut t = self.touched.lock().unwrap();
        if !t.contains(parent) {
            t.insert(parent.to_vec());
        }
    }
}

pub(super) async fn run(engine: &Arc<Engine>, jobs: Vec<Job>) {
    let me = engine.clone();
    let rt = tokio::runtime::Handle::current();
    let done = tokio::task::spawn_blocking(move || {
        let (dirs, files): (Vec<Job>, Vec<Job>) =
            jobs.into_iter().partition(|j| j.src.kind == Kind::Dir);
        let changed = Changed::default();
        let missing = Missing::new(&me, &dirs);
        let (files, others) = match me.opts.preserve.links {
            true => link_groups(files),
            false => (files, Vec::new()),
        };
        me.copy_files(&files, &rt, &changed, &missing);
        me.link_names(&others, &rt, &changed, &missing);
        me.make_dirs(&dirs, &changed, &missing);
        me.finish_dirs(&dirs, &changed);
        if me.opts.finish_root {
            me.finish_root();
        }
    })
    .await;
    if let Err(e) = done {
        engine.stats.failed(
            engine.dst.describe(),
            format!("internal error: the copy threads failed: {e}"),
        );
    }
}

/// A name of a hard-link group other than the one whose bytes are copied (the first by path,
/// so that every run picks the same), and that one's destination path.
struct OtherName {
    job: Job,
    first: Vec<u8>,
}

/// Splits off the names that share a source inode with an earlier one: only the first of a
/// group is copied; the others are linked to its copy.
fn link_groups(files: Vec<Job>) -> (Vec<Job>, Vec<OtherName>) {
    let mut first: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
    for j in files.iter().filter(|j| j.src.kind == Kind::File) {
        if let Some(id) = j.src.link {
            let f = first.entry(id).or_insert_with(|| j.src.path.clone());
            if j.src.path < *f {
                *f = j.src.path.clone();
            }
        }
    }
    let (mut copied, mut others) = (Vec::with_capacity(files.len()), Vec::new());
    for j in files {
        match j
            .src
            .link
            .filter(|_| j.src.kind == Kind::File)
            .and_then(|id| first.get(&id))
        {
            Some(f) if *f != j.src.path => {
                let first = f.clone();
                others.push(OtherName { job: j, first });
            }
            _ => copied.push(j),
        }
    }
    // The first name's destination path, which `copied` knows by its source path.
    let dst_of: HashMap<&[u8], &[u8]> = copied
        .iter()
        .filter(|j| j.src.link.is_some())
        .map(|j| (&j.src.path[..], &j.dst_path[..]))
        .collect();
    for o in &mut others {
        o.first = dst_of
            .get(&o.first[..])
            .map(|d| d.to_vec())
            .unwrap_or_default();
    }
    (copied, others)
}

/// Runs `f` over `items` on up to `threads` threads.
fn parallel<T: Sync>(items: &[T], threads: usize, f: impl Fn(&T) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            s.spawn(|| {
                while let Some(item) = items.get(next.fetch_add(1, Relaxed)) {
                    f(item);
                }
            });
        }
    });
}

/// Directory jobs grouped by depth, shallowest first.
fn by_level(dirs: &[Job]) -> Vec<Vec<&Job>> {
    let mut levels: Vec<Vec<&Job>> = Vec::new();
    for d in dirs {
        let level = d.dst_path.iter().filter(|&&b| b == b'/').count();
        if levels.len() <= level {
            levels.resize_with(level + 1, Vec::new);
        }
        levels[level].push(d);
    }
    levels
}

/// The directories the destination's listing did not show, each made once, by the first thread
/// that needs it (for a file, or a directory below it), the others bound for it waiting; made
/// up front instead, the files would wait for every one, and directories in one parent are
/// made one at a time (the parent's lock, held over two round trips each on NFS).
struct Missing<'a> {
    engine: &'a Engine,
    dirs: HashMap<&'a [u8], OnceLock<()>>,
}

impl<'a> Missing<'a> {
    fn new(engine: &'a Engine, dirs: &'a [Job]) -> Missing<'a> {
        let dirs = dirs
            .iter()
            .filter(|d| engine.dst_dir(&d.dst_path).is_none())
            .map(|d| (&d.dst_path[..], OnceLock::new()))
            .collect();
        Missing { engine, dirs }
    }

    /// Makes `path` (and its missing parents) unless it is made already or not this run's to
    /// make. A failure is left for the files inside to report.
    fn ensure(&self, path: &[u8], changed: &Changed) {
        let Some(cell) = self.dirs.get(path) else {
            return;
        };
        cell.get_or_init(|| {
            self.ensure(crate::storage::beneath::split(path).0, changed);
            // A mkdir is a round trip like any other: it takes a slot of the depth.
            let _slot = self.engine.depth.acquire_blocking();
            if let Ok(true) = self.engine.stores().1.make_dir(path) {
                changed.made.lock().unwrap().insert(path.to_vec());
                changed.touch(path);
            }
        });
    }
}

/// Directories this run writes at least `CROWDED` files into, on the root's filesystem (a
/// rename cannot cross into a filesystem mounted below the root), when that is a network one.
fn crowded_dirs<'a>(
    dst: &dyn Filesystem,
    files: &'a [Job],
    missing: &Missing,
    changed: &Changed,
) -> HashSet<&'a [u8]> {
    let mut count: HashMap<&[u8], usize> = HashMap::new();
    for f in files {
        *count
            .entry(crate::storage::beneath::split(&f.dst_path).0)
            .or_default() += 1;
    }
    count.retain(|_, n| *n >= CROWDED);
    if count.is_empty() {
        return HashSet::new();
    }
    let device = |rel: &[u8]| {
        missing.ensure(rel, changed);
        dst.dir_device(rel).ok()
    };
    // Asked once the root exists (a statfs of a missing root is a round trip for nothing).
    let Some(root) = device(b"").filter(|_| dst.is_remote()) else {
        return HashSet::new();
    };
    count
        .into_keys()
        .filter(|d| device(d) == Some(root))
        .collect()
}

impl Engine {
    fn stores(&self) -> (&dyn Filesystem, &dyn Filesystem) {
        match (&self.src_fs, &self.dst_fs) {
            (Some(src), Some(dst)) => (&**src, &**dst),
            _ => unreachable!("the local → local engine runs between two filesystems"),
        }
    }

    /// Makes the missing directories no file needed, a level at a time.
    fn make_dirs(&self, dirs: &[Job], changed: &Changed, missing: &Missing) {
        for level in by_level(dirs) {
            parallel(&level, self.depth.limit(), |d| {
                missing.ensure(&d.dst_path, changed)
            });
        }
    }

    /// The listing's entry for a destination directory, if it showed one there.
    fn dst_dir(&self, path: &[u8]) -> Option<&crate::manifest::Entry> {
        self.dst_index
            .as_ref()?
            .get(path)
            .filter(|e| e.kind == Kind::Dir)
    }

    /// Links each other name of a hard-link group to the copy of its first name, once that
    /// is committed. A name the destination already has as that very inode is left alone;
    /// where the first name failed, or the destination cannot link (another filesystem below
    /// the root), the name is copied on its own.
    fn link_names(
        &self,
        others: &[OtherName],
        rt: &tokio::runtime::Handle,
        changed: &Changed,
        missing: &Missing,
    ) {
        let (_, dst) = self.stores();
        let linked = changed.linked.lock().unwrap().clone();
        let id = Identity::current();
        parallel(others, self.depth.limit(), |o| {
            let job = &o.job;
            missing.ensure(crate::storage::beneath::split(&job.dst_path).0, changed);
            let _slot = self.depth.acquire_blocking();
            let Some(&rewritten) = linked.get(&o.first) else {
                return self.copy_alone(job, &id, rt, changed);
            };
            let existing = self.dst_index.as_ref().and_then(|i| i.get(&job.dst_path));
            let first = self.dst_index.as_ref().and_then(|i| i.get(&o.first));
            let same_inode = matches!((existing.and_then(|e| e.link), first.and_then(|e| e.link)), (Some(a), Some(b)) if a == b);
            if same_inode && !rewritten {
                return self.record(job, Ok(Outcome::Skipped));
            }
            let dst_err = |e| StoreError::io(dst.path(&job.dst_path).display().to_string(), e);
            if existing.is_some_and(|e| e.kind != Kind::File) {
                if let Err(e) = dst.remove_all(&job.dst_path) {
                    return self.record(job, Err(dst_err(e)));
                }
                Stats::add(&self.stats.replaced, 1);
            }
            // Where no listing was taken the name may exist: a temp name renamed over it.
            let absent = self.dst_index.is_some() && existing.is_none();
            match dst.hard_link(&o.first, &job.dst_path, absent) {
                Ok(()) => {
                    changed.touch(&job.dst_path);
                    self.record(job, Ok(Outcome::Copied));
                }
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                    self.stats.not_kept("links");
                    self.copy_alone(job, &id, rt, changed);
                }
                Err(e) => self.record(job, Err(dst_err(e))),
            }
        });
    }

    /// Copies one file by itself, committed at once.
    fn copy_alone(&self, job: &Job, id: &Identity, rt: &tokio::runtime::Handle, changed: &Changed) {
        match self.stage_one(job, id, rt, None) {
            Ok(Step::Staged(st)) => self.flush_and_commit(vec![(st, job)], changed),
            Ok(Step::Done(outcome)) => self.done(job, outcome, changed),
            Err(e) => self.record(job, Err(e)),
        }
    }

    /// Records a file that needed no commit: skipped, its metadata set, or made at once (a
    /// symlink, a node).
    fn done(&self, job: &Job, outcome: Outcome, changed: &Changed) {
        if matches!(outcome, Outcome::Copied) {
            changed.touch(&job.dst_path);
        }
        if job.src.link.is_some() && matches!(outcome, Outcome::Skipped | Outcome::MetaUpdated) {
            changed
                .linked
                .lock()
                .unwrap()
                .insert(job.dst_path.clone(), false);
        }
        self.record(job, Ok(outcome));
    }

    fn copy_files(
        &self,
        files: &[Job],
        rt: &tokio::runtime::Handle,
        changed: &Changed,
        missing: &Missing,
    ) {
        let next = AtomicUsize::new(0);
        let id = Identity::current();
        let (_, dst) = self.stores();
        // Each thread keeps a source and a destination file open, and its batch's staged
        // files stay open until committed: threads take a quarter of the open-files limit,
        // batches another (the directory caches take a quarter, filesystem::open_files_limit).
        let fds = open_files_limit();
        let threads = self
            .depth
            .ceiling()
            .min((fds / 8).max(1) as usize)
            .clamp(1, files.len().max(1));
        // Without fsync nothing is gained by waiting: each file is committed at once.
        let batch_files = if dst.fsync() {
            BATCH_FILES.min((fds / 4 / threads as u64).max(1) as usize)
        } else {
            1
        };
        let crowded = crowded_dirs(dst, files, missing, changed);
        // Made on first use; None (temp names beside the final ones) where one cannot be made.
        let staging: Vec<OnceLock<Option<Arc<OwnedFd>>>> =
            (0..STAGING_DIRS).map(|_| OnceLock::new()).collect();
        let turns: Vec<Mutex<()>> = (0..STAGING_DIRS).map(|_| Mutex::new(())).collect();
        std::thread::scope(|s| {
            for k in 0..threads {
                let (next, id, crowded) = (&next, &id, &crowded);
                let slot = k % STAGING_DIRS;
                let (staging, turn) = (&staging[slot], &turns[slot]);
                s.spawn(move || {
                    let mut batch: Vec<(Staged, &Job)> = Vec::new();
                    let mut batch_bytes = 0;
                    let mut batch_since = std::time::Instant::now();
                    while let Some(job) = files.get(next.fetch_add(1, Relaxed)) {
                        let parent = crate::storage::beneath::split(&job.dst_path).0;
                        missing.ensure(parent, changed);
                        let crowded = crowded.contains(parent);
                        // Held until the file is committed (a crowded file's is, in this turn).
                        // Taken before a slot of the depth: a thread waiting for its turn holding
                        // a slot could starve the commit of the thread whose turn it is.
                        let _turn = crowded.then(|| turn.lock().unwrap_or_else(|e| e.into_inner()));
                        let mut permit = self.depth.acquire_blocking();
                        let temp_in = match crowded {
                            true => staging.get_or_init(|| dst.staging_dir(slot).ok()).clone(),
                            false => None,
                        };
                        let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            self.stage_one(job, id, rt, temp_in.as_ref())
                        }))
                        .unwrap_or_else(|p| Err(panicked(p)));
                        match step {
                            Ok(Step::Staged(st)) if st.synced => {
                                permit.done(st.bytes);
                                self.commit(st, job, changed);
                            }
                            Ok(Step::Staged(st)) => {
                                if batch.is_empty() {
                                    batch_since = std::time::Instant::now();
                                }
                                permit.done(st.bytes);
                                batch_bytes += st.bytes;
                                batch.push((st, job));
                            }
                            Ok(Step::Done(outcome)) => self.done(job, outcome, changed),
                            Err(e) => self.record(job, Err(e)),
                        }
                        drop(permit);
                        if batch.len() >= batch_files
                            || batch_bytes >= BATCH_BYTES
                            || (!batch.is_empty() && batch_since.elapsed() >= BATCH_AGE)
                        {
                            self.commit_batch(std::mem::take(&mut batch), changed);
                            batch_bytes = 0;
                        }
                    }
                    self.commit_batch(batch, changed);
                });
            }
        });
        for (k, _) in staging
            .iter()
            .enumerate()
            .filter(|(_, d)| matches!(d.get(), Some(Some(_))))
        {
            dst.remove_staging_dir(k);
        }
    }

    fn stage_one(
        &self,
        job: &Job,
        id: &Identity,
        rt: &tokio::runtime::Handle,
        staging: Option<&Arc<OwnedFd>>,
    ) -> Result<Step> {
        let (_, dst) = self.stores();
        #[cfg(test)]
        if job.src.path == b"panic-here" {
            panic!("a test asked for a panic");
        }
        let (src_err, dst_err) = (self.src_err(job), self.dst_err(job));
        let existing = self.dst_entry(job)?;
        match self.verdict(job, existing.as_ref())? {
            Verdict::Same => return Ok(Step::Done(Outcome::Skipped)),
            Verdict::MetaOnly => {
                self.update_meta(job, existing.as_ref()).map_err(dst_err)?;
                return Ok(Step::Done(Outcome::MetaUpdated));
            }
            Verdict::TypeChanged => {
                dst.remove_all(&job.dst_path).map_err(dst_err)?;
                Stats::add(&self.stats.replaced, 1);
            }
            _ => {}
        }
        if job.src.kind.is_special() {
            return self.make_node(job, id).map_err(dst_err).map(Step::Done);
        }
        if job.src.kind == Kind::Symlink {
            let refused = dst
                .copy_symlink(&self.entry_copy(job, id))
                .map_err(src_err)?;
            refused.kinds().for_each(|k| self.stats.not_kept(k));
            return Ok(Step::Done(Outcome::Copied));
        }
        // Where no listing was taken the name may exist: only a temp name and a rename can
        // replace it without a moment where it is gone.
        let absent = self.dst_index.is_some() && existing.is_none();
        self.stage_regular(job, id, rt, staging, absent)
    }

    /// An I/O error on the job's source, named by its path.
    fn src_err<'a>(&'a self, job: &'a Job) -> impl Fn(std::io::Error) -> StoreError + Copy + 'a {
        let (src, _) = self.stores();
        move |e| StoreError::io(src.path(&job.src.path).display().to_string(), e)
    }

    /// An I/O error on the job's destination, named by its path.
    fn dst_err<'a>(&'a self, job: &'a Job) -> impl Fn(std::io::Error) -> StoreError + Copy + 'a {
        let (_, dst) = self.stores();
        move |e| StoreError::io(dst.path(&job.dst_path).display().to_string(), e)
    }

    /// The destination's entry at the job's path: from the listing when there is one, else
    /// from its own stat, unless nothing is compared.
    fn dst_entry(&self, job: &Job) -> Result<Option<crate::manifest::Entry>> {
        let (_, dst) = self.stores();
        Ok(match (&self.dst_index, self.opts.compare) {
            (Some(idx), _) => idx.get(&job.dst_path).cloned(),
            (None, Compare::None) => None,
            // One object named on the command line: its own stat.
            (None, _) => dst
                .lstat(&job.dst_path)
                .map_err(self.dst_err(job))?
                .and_then(|md| {
                    entry_with_target(job.dst_path.clone(), &md, || dst.readlink(&job.dst_path))
                }),
        })
    }

    /// What the job has to do to the destination's entry (`existing`), hashing both sides
    /// where `--compare md5` leaves the listings undecided.
    fn verdict(&self, job: &Job, existing: Option<&crate::manifest::Entry>) -> Result<Verdict> {
        let (src, dst) = self.stores();
        let (src_err, dst_err) = (self.src_err(job), self.dst_err(job));
        let attrs = self.opts.preserve.attrs();
        let verdict = match (
            same::classify(&job.src, existing, self.opts.compare, attrs),
            existing,
        ) {
            (Verdict::Undecided, Some(d)) if self.opts.compare == Compare::Md5 => {
                let (sm, dm) = (
                    src.md5(&job.src.path).map_err(src_err)?,
                    dst.md5(&job.dst_path).map_err(dst_err)?,
                );
                same::by_hashes(&job.src, d, Some(sm), Some(dm), attrs)
            }
            (v, _) => settled(v),
        };
        // Listings carry no device number: to them a device node renumbered in place is the
        // same node. Devices are few, so each side gets a look at it.
        Ok(match verdict {
            Verdict::Same | Verdict::MetaOnly
                if matches!(job.src.kind, Kind::CharDev | Kind::BlockDev)
                    && self.opts.preserve.specials =>
            {
                use std::os::unix::fs::MetadataExt;
                let src_rdev = src.lstat(&job.src.path).map_err(src_err)?.map(|m| m.rdev());
                let dst_rdev = dst.lstat(&job.dst_path).map_err(dst_err)?.map(|m| m.rdev());
                if src_rdev != dst_rdev {
                    Verdict::Changed
                } else {
                    verdict
                }
            }
            v => v,
        })
    }

    /// Stages a regular file, in the shared staging directory where there is one.
    fn stage_regular(
        &self,
        job: &Job,
        id: &Identity,
        rt: &tokio::runtime::Handle,
        staging: Option<&Arc<OwnedFd>>,
        absent: bool,
    ) -> Result<Step> {
        let (src, dst) = self.stores();
        let entry = self.entry_copy(job, id);
        let stage = |temp_in| dst.stage_file(&entry, &self.quirks, absent, temp_in);
        let staged = match staging.map(|d| stage(TempIn::Staging(d))) {
            // Another process finished and removed the shared staging directory meanwhile.
            Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => stage(TempIn::Final),
            Some(r) => r,
            None => stage(TempIn::Final),
        }
        // Staging reads one side and writes the other: the error names both.
        .map_err(|e| {
            StoreError::io(
                format!(
                    "{} → {}",
                    src.path(&job.src.path).display(),
                    dst.path(&job.dst_path).display()
                ),
                e,
            )
        })?;
        if let Some(t) = &self.throttle {
            rt.block_on(t.take(staged.bytes));
        }
        Stats::add(&self.stats.bytes_copied, staged.bytes);
        staged.refused.kinds().for_each(|k| self.stats.not_kept(k));
        Ok(Step::Staged(staged))
    }

    /// The job's entry as the destination's filesystem makes it.
    fn entry_copy<'a>(&'a self, job: &'a Job, id: &'a Identity) -> EntryCopy<'a> {
        EntryCopy {
            src: self.stores().0,
            src_rel: &job.src.path,
            dst_rel: &job.dst_path,
            src_xattrs: job.src.xattrs,
            id,
            keep: &self.opts.preserve,
        }
    }

    /// A fifo or device node: made, unless it is a socket (whose listener makes it), or
    /// `--preserve` leaves specials out, or it is a device and this process may not make one.
    fn make_node(&self, job: &Job, id: &Identity) -> std::io::Result<Outcome> {
        let (_, dst) = self.stores();
        let device = matches!(job.src.kind, Kind::CharDev | Kind::BlockDev);
        if job.src.kind == Kind::Socket {
            return Ok(Outcome::Ignored(special_not_held(job.src.kind)));
        }
        if !self.opts.preserve.specials {
            return Ok(Outcome::Ignored(
                "fifo or device node (--preserve leaves out specials)",
            ));
        }
        match dst.make_node(&self.entry_copy(job, id)) {
            Ok(refused) => {
                refused.kinds().for_each(|k| self.stats.not_kept(k));
                Ok(Outcome::Copied)
            }
            // mknod of a device needs CAP_MKNOD (and a mount that allows devices).
            Err(e) if device && e.raw_os_error() == Some(libc::EPERM) => Ok(Outcome::Ignored(
                "device node (making one needs root, on a mount that allows devices)",
            )),
            Err(e) => Err(e),
        }
    }

    /// Puts a batch of staged files under their final names, after one flush of the
    /// filesystem when the run is durable: the flush writes every file of the batch at once,
    /// where an fsync each would wait on the disk once per file.
    fn commit_batch(&self, batch: Vec<(Staged, &Job)>, changed: &Changed) {
        if batch.is_empty() {
            return;
        }
        // Committing costs round trips too (a rename each): it takes a slot like a copy.
        let _slot = self.depth.acquire_blocking();
        self.flush_and_commit(batch, changed);
    }

    /// Flushes the filesystem (when the run is durable) and commits the staged files; when the
    /// flush fails, none is committed.
    fn flush_and_commit(&self, batch: Vec<(Staged, &Job)>, changed: &Changed) {
        let (_, dst) = self.stores();
        if let Err(e) = dst.sync() {
            for (st, job) in batch {
                st.discard();
                self.record(
                    job,
                    Err(StoreError::io(
                        self.dst.describe(),
                        std::io::Error::new(e.kind(), format!("cannot flush to disk: {e}")),
                    )),
                );
            }
            return;
        }
        for (st, job) in batch {
            self.commit(st, job, changed);
        }
    }

    fn commit(&self, st: Staged, job: &Job, changed: &Changed) {
        let (_, dst) = self.stores();
        changed.touch(&job.dst_path);
        let r = st
            .commit()
            .map(|_| Outcome::Copied)
            .map_err(|e| StoreError::io(dst.path(&job.dst_path).display().to_string(), e));
        if r.is_ok() && job.src.link.is_some() {
            changed
                .linked
                .lock()
                .unwrap()
                .insert(job.dst_path.clone(), true);
        }
        self.record(job, r);
    }

    /// Sets the metadata of a destination entry whose bytes are the source's already: from the
    /// source's listing where it has it all, else from a look at the source.
    /// `existing`: the destination's entry, from its listing.
    fn update_meta(
        &self,
        job: &Job,
        existing: Option<&crate::manifest::Entry>,
    ) -> std::io::Result<()> {
        let (src, dst) = self.stores();
        let entry = match (job.src.mode, job.src.owner, job.src.mtime) {
            (Some(_), Some(_), Some(_)) => job.src.clone(),
            _ => src
                .lstat(&job.src.path)?
                .and_then(|md| entry_of(job.src.path.clone(), &md))
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?,
        };
        let chowned = dst.set_meta(
            &job.dst_path,
            job.src.kind,
            &Meta::of_entry(&entry).kept(&self.opts.preserve),
        )?;
        // The attributes only where both listings read them and they differ (the verdict may
        // have been the mode's alone), or where a chown took the source's capability away
        // (after the chown, as a first write has it).
        let differ = matches!(
            (job.src.xattrs, existing.and_then(|e| e.xattrs)),
            (Some(a), Some(b)) if a != b
        );
        let lost_capability = chowned && job.src.xattrs.is_none_or(xattrs::holds_capability);
        match differ || lost_capability {
            true => self.copy_xattrs(&job.src.path, &job.dst_path),
            false => Ok(()),
        }
    }

    /// Makes the kept attributes of a destination entry those of the source entry, counting
    /// what the destination refuses.
    fn copy_xattrs(&self, src_rel: &[u8], dst_rel: &[u8]) -> std::io::Result<()> {
        let (src, dst) = self.stores();
        let wanted = Wanted::of(&self.opts.preserve);
        if !wanted.any() || src.no_xattrs_here() {
            return Ok(());
        }
        let Some(want) = src.read_xattrs(src_rel, wanted)? else {
            return Ok(());
        };
        // Nothing to set, on a destination that holds nothing to remove: no call there (a
        // round trip each on a network filesystem).
        if want.is_empty() && dst.no_xattrs_here() {
            return Ok(());
        }
        dst.write_xattrs(dst_rel, &want, wanted)?
            .kinds()
            .for_each(|k| self.stats.not_kept(k));
        Ok(())
    }

    fn finish_dirs(&self, dirs: &[Job], changed: &Changed) {
        let (src, dst) = self.stores();
        let id = Identity::current();
        let (made, touched) = (
            changed.made.lock().unwrap(),
            changed.touched.lock().unwrap(),
        );
        // Deepest first, so setting a parent's mtime comes after its children are done.
        for level in by_level(dirs).into_iter().rev() {
            parallel(&level, self.depth.limit(), |d| {
                // What a directory made this run got from its parent (asked once a parent).
                let parent = made
                    .contains(&d.dst_path)
                    .then(|| dst.inherits(crate::storage::beneath::split(&d.dst_path).0));
                let parent = match parent.transpose() {
                    Ok(p) => p,
                    Err(e) => {
                        let why = format!("directory: {e}");
                        return self.stats.failed(d.src.display_path(), why);
                    }
                };
                let known = if let Some(parent) = parent {
                    Some(DirNow::made(&id, parent))
                } else {
                    self.dst_dir(&d.dst_path).and_then(|e| {
                        let mtime = if touched.contains(&d.dst_path) {
                            None
                        } else {
                            e.mtime
                        };
                        Some(DirNow {
                            mode: Some(e.mode?),
                            owner: e.owner?,
                            mtime,
                        })
                    })
                };
                // The source side comes from its listing where that saw it all.
                let want = match (d.src.mode, d.src.owner, d.src.mtime) {
                    (Some(mode), Some((uid, gid)), Some(mtime)) => Ok(Meta {
                        mode: Some(mode),
                        uid: Some(uid),
                        gid: Some(gid),
                        mtime: Some(mtime),
                        md5: None,
                        sparse: None,
                    }),
                    _ => src.lstat(&d.src.path).and_then(|md| {
                        md.map(|md| meta_of(&md))
                            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
                    }),
                };
                // Attributes where the two digests differ, or are not known: a directory
                // made this run has none unless its parent has a default ACL, which it
                // inherits (a parent made this run gets the source's ACLs after its children,
                // so it passes on what its own parent has).
                let dst_xattrs = if let Some(parent) = parent {
                    (!parent.default_acl).then(crate::xattrs::empty_digest)
                } else {
                    self.dst_dir(&d.dst_path).and_then(|e| e.xattrs)
                };
                let xattrs = || match (d.src.xattrs, dst_xattrs) {
                    (Some(a), Some(b)) if a == b => Ok(()),
                    _ => self.copy_xattrs(&d.src.path, &d.dst_path),
                };
                if let Err(e) = want
                    .and_then(|want| dst.finish_dir(&d.dst_path, &want, known))
                    .and_then(|_| xattrs())
                {
                    self.stats
                        .failed(d.src.display_path(), format!("directory: {e}"));
                }
            });
        }
    }

    fn finish_root(&self) {
        let (src, dst) = self.stores();
        let r = File::open(src.path(b""))
            .and_then(|f| f.metadata())
            .and_then(|md| dst.finish_root(&meta_of(&md)))
            .and_then(|_| self.copy_xattrs(b"", b""));
        if let Err(e) = r {
            self.stats
                .failed(self.dst.describe(), format!("directory: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Entry;

    #[test]
    fn a_link_group_is_copied_once_by_its_first_name() {
        let job = |p: &str, link: Option<(u64, u64)>| Job {
            src: Entry {
                link,
                ..Entry::file(p.to_string(), 5)
            },
            dst_path: format!("to/{p}").into_bytes(),
        };
        let files = vec![
            job("b", Some((1, 7))),
            job("solo", None),
            job("a", Some((1, 7))),
            job("c", Some((1, 7))),
            job("other", Some((2, 7))),
        ];
        let (copied, others) = link_groups(files);
        let names: Vec<&[u8]> = copied.iter().map(|j| &j.src.path[..]).collect();
        assert_eq!(
            names,
            [&b"solo"[..], b"a", b"other"],
            "the first by path, whatever the order given"
        );
        let linked: Vec<(&[u8], &[u8])> = others
            .iter()
            .map(|o| (&o.job.src.path[..], &o.first[..]))
            .collect();
        assert_eq!(
            linked,
            [(&b"b"[..], &b"to/a"[..]), (b"c", b"to/a")],
            "linked to the first name's destination"
        );
    }
}
