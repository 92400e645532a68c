//! One module per subcommand; shared resolution of locations and options lives here.

pub mod args;
pub mod carry;
pub mod check;
pub mod copy;
pub mod env;
pub mod expand;
pub mod lease;
pub mod ls;
pub mod mk;
pub mod names;
pub mod partition;
pub mod plan;
pub mod prune;
pub mod replace;
pub mod rm;
pub mod shard;
pub mod status;
pub mod units;
pub mod verify;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::commands::args::{Common, Filters};
use crate::filter::Filter;
use crate::location::{self, BlobLocation, Location};
use crate::manifest::{self, Entry, Kind};
use crate::retry::RetryPolicy;
use crate::stats::Stats;
use crate::storage::{self, OpenOptions, Store};

pub fn default_concurrency() -> usize {
    // What the Azure SDKs now default to: scale with cores, never below 8 nor above 96.
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(8)
        .clamp(8, 96)
}

pub fn env() -> crate::storage::Env {
    Arc::new(|k| std::env::var(k).ok())
}

pub fn parse_location(s: &str) -> anyhow::Result<Location> {
    location::parse(s, &*env()).map_err(anyhow::Error::msg)
}

/// A source and a destination, refused where one contains the other (`overlap`).
pub fn parse_roots(src: &str, dst: &str) -> anyhow::Result<(Location, Location)> {
    let (s, d) = (parse_location(src)?, parse_location(dst)?);
    crate::overlap::refuse(&s, &d)?;
    Ok((s, d))
}

pub fn open_options(common: &Common, concurrency: usize, stats: Arc<Stats>) -> OpenOptions {
    OpenOptions {
        auth: common.auth,
        retry: RetryPolicy {
            max_retries: common.max_retries,
            ..RetryPolicy::default()
        },
        stats,
        concurrency,
        block_md5: common.block_md5,
        io_timeout: Duration::from_secs(common.io_timeout.max(1)),
        fsync: common.fsync,
        copy_wait: None,
        xattrs: crate::xattrs::Wanted::NONE,
        posix_style: Default::default(),
        guess_mime: true,
        keep_tier: false,
        keep_tags: false,
        list_concurrency: common.list_concurrency.max(1),
        list_page: common.list_page_size.clamp(1, 5000),
        env: env(),
    }
}

pub fn open(loc: &Location, opts: &OpenOptions) -> anyhow::Result<Arc<dyn Store>> {
    storage::open(loc, opts).with_context(|| format!("cannot open {loc}"))
}

/// The carried-state location of the destination at `dest`, refused where the two overlap: the
/// state would be listed, copied over and pruned as part of the tree.
pub fn state_of(
    state: &str,
    dest: &Location,
    opts: &OpenOptions,
) -> anyhow::Result<crate::carried::State> {
    let loc = parse_location(state)?;
    crate::overlap::refuse(dest, &loc)
        .context("the carried state must be kept outside the destination")?;
    Ok(crate::carried::State::new(open(&loc, opts)?))
}

/// Marks the carried state of `dest` (where `carried` names one) out of date: its pass is about
/// to write the destination. Every step that writes calls this before its first write.
pub async fn take_state(
    carried: &crate::commands::args::CarriedArgs,
    dest: &Location,
    opts: &OpenOptions,
) -> anyhow::Result<()> {
    if let (Some(state), Some(pass)) = (&carried.state, &carried.pass) {
        state_of(state, dest, opts)?.take(pass).await?;
    }
    Ok(())
}

/// Whether the carried state of `loc` stands for a fresh listing this pass.
pub async fn carried_or_fresh(
    state: &str,
    pass: &str,
    loc: &Location,
    opts: &OpenOptions,
    probe: usize,
    fresh: bool,
    scratch: Option<&Path>,
) -> anyhow::Result<crate::carried::Decision> {
    use crate::carried::Decision;
    let state = state_of(state, loc, opts)?;
    let dest = open(loc, opts)?;
    let decision = if fresh {
        Decision::Fresh("a fresh listing was asked for".into())
    } else {
        state.decide(&dest, pass, probe, scratch).await?
    };
    match &decision {
        Decision::Carried { doc, probed, .. } => eprintln!(
            "ferry: {} as {} left it ({} entries; {probed} probed, all as carried)",
            dest.describe(),
            doc.written_by,
            doc.entries
        ),
        Decision::Fresh(why) => eprintln!("ferry: listing {} fresh: {why}", dest.describe()),
    }
    Ok(decision)
}

/// One list job's view of the destination as `ferry shard` decided for the pass: the carried
/// listing (fetched; judged and probed once, by the shard step), or a fresh listing.
pub async fn carried_as_decided(
    shards: &crate::shard::ShardsDoc,
    state: &str,
    pass: &str,
    loc: &Location,
    opts: &OpenOptions,
    scratch: Option<&Path>,
) -> anyhow::Result<crate::carried::Decision> {
    use crate::carried::Decision;
    let Some(decided) = &shards.carried else {
        anyhow::bail!(
            "the shards document decided nothing about the carried state (ferry shard ran without --carried)"
        );
    };
    if !decided.used {
        return Ok(Decision::Fresh(decided.reason.clone().unwrap_or_default()));
    }
    state_of(state, loc, opts)?
        .as_decided(pass, decided, scratch)
        .await
}

/// A location is either a tree (directory / prefix) or one object. `name` is what the object
/// is called at the destination: its own name, or the name of the symlink that led to it.
pub enum Root {
    Tree(Location),
    Object {
        parent: Location,
        entry: Entry,
        name: Vec<u8>,
    },
}

fn parent_and_name(loc: &Location) -> anyhow::Result<(Location, Vec<u8>)> {
    Ok(match loc {
        Location::Local(p) => {
            let name = p
                .file_name()
                .map(|n| n.as_bytes().to_vec())
                .unwrap_or_default();
            let parent = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            };
            (Location::Local(parent), name)
        }
        Location::Blob(b) => {
            let (dir, name) = b.prefix.rsplit_once('/').unwrap_or(("", &b.prefix));
            // A URL spells the blob's name; the store below takes the path it stands for.
            (
                Location::Blob(BlobLocation {
                    prefix: dir.to_string(),
                    ..b.clone()
                }),
                storage::azure::names::decode(name)?,
            )
        }
    })
}

/// Whether `loc` is a tree or one object. With `follow`, a local symlink named on the command
/// line is followed, as `cp -H`, `rsync src/` and fpsync do: the user named what it points to
/// (symlinks below it never are). `rm` does not follow: it removes the link.
pub async fn resolve(loc: &Location, opts: &OpenOptions, follow: bool) -> anyhow::Result<Root> {
    match loc {
        Location::Local(p) => {
            let stat = if follow {
                std::fs::metadata
            } else {
                std::fs::symlink_metadata
            };
            let md = stat(p).with_context(|| format!("{}", p.display()))?;
            if md.is_dir() {
                return Ok(Root::Tree(loc.clone()));
            }
            let (parent, name) = parent_and_name(loc)?;
            let is_link = std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
            let (parent, target_name) = match follow && is_link {
                true => parent_and_name(&Location::Local(
                    std::fs::canonicalize(p).with_context(|| format!("{}", p.display()))?,
                ))?,
                false => (parent, name.clone()),
            };
            let entry = storage::filesystem::entry_of(target_name, &md).with_context(|| {
                format!("{}: not a regular file, symlink or directory", p.display())
            })?;
            Ok(Root::Object {
                parent,
                entry,
                name,
            })
        }
        // The container itself: an empty one is a tree of nothing, a missing one fails as it
        // is listed.
        Location::Blob(b) if b.prefix.trim_matches('/').is_empty() => Ok(Root::Tree(loc.clone())),
        Location::Blob(b) => {
            let tree = b.prefix.ends_with('/');
            let (parent, name) = parent_and_name(&Location::Blob(BlobLocation {
                prefix: b.prefix.trim_end_matches('/').to_string(),
                ..b.clone()
            }))?;
            let found = open(&parent, opts)?.head(&name).await?;
            match found {
                // A folder stub names a tree: what is under it is meant, not the stub.
                Some((entry, _)) if entry.kind != Kind::Dir && !tree => Ok(Root::Object {
                    parent,
                    entry,
                    name,
                }),
                Some((entry, _)) if entry.kind == Kind::Dir => Ok(Root::Tree(loc.clone())),
                _ => blob_tree_or_missing(loc, opts).await,
            }
        }
    }
}

/// A Blob prefix with no folder stub: a tree where some blob lies under it. Nothing there is
/// an error, as a missing local path is: a typo must not read as an empty source.
async fn blob_tree_or_missing(loc: &Location, opts: &OpenOptions) -> anyhow::Result<Root> {
    let sample = open(loc, opts)?.list_dir_sample(b"", 1).await?;
    anyhow::ensure!(
        !sample.entries.is_empty(),
        "{loc}: not found (no blob of that name, none under it and no folder stub); check the name"
    );
    Ok(Root::Tree(loc.clone()))
}

/// Where a single object goes: into DST if it is a directory (or ends in '/'), else as DST.
pub fn object_destination(dst: &Location, name: &[u8]) -> anyhow::Result<(Location, Vec<u8>)> {
    let into_dir = match dst {
        Location::Local(p) => p.is_dir() || p.as_os_str().as_bytes().ends_with(b"/"),
        Location::Blob(b) => b.prefix.is_empty() || b.prefix.ends_with('/'),
    };
    if into_dir {
        Ok((dst.clone(), name.to_vec()))
    } else {
        parent_and_name(dst)
    }
}

/// `.` and `..` can name no blob and must never climb out of a local root. (Empty components
/// and a leading '/' are legal in blob names; local roots refuse them per file.)
fn unsafe_path(path: &[u8]) -> bool {
    path.is_empty() || path.split(|&b| b == b'/').any(|c| c == b"." || c == b"..")
}

const UNSAFE_PATH: &str = "unsafe path: empty, or with a '.' or '..' component";

/// Streams a manifest's entries, each line checked as `read_manifest` checks it, but for paths
/// listed twice: those are found once the entries are sorted (`sorted::Join`). `whole` where
/// something may be deleted on its strength: a manifest without its end record is then an error
/// (`manifest::Reader::whole`).
pub fn manifest_entries(
    path: &Path,
    whole: bool,
) -> anyhow::Result<impl Iterator<Item = Result<Entry, String>>> {
    let mut reader = manifest::Reader::open(path)?;
    if whole {
        reader = reader.whole();
    }
    let name = path.display().to_string();
    Ok(std::iter::from_fn(move || {
        let entry = reader.next()?;
        Some(entry.and_then(|e| match unsafe_path(&e.path) {
            true => Err(format!(
                "{name}:{}: {}: {UNSAFE_PATH}",
                reader.lineno(),
                e.display_path()
            )),
            false => Ok(e),
        }))
    }))
}

fn listed_twice(manifest: &Path, line: u64, path: &str, first: u64) -> String {
    format!(
        "{}:{line}: {path}: listed twice (first on line {first})",
        manifest.display()
    )
}

/// Says where a manifest names `path` (escaped) twice, as `read_manifest` does: a sorted
/// stream finds the duplicate but no longer knows its lines, so they are looked for again (a
/// second read of the manifest, on this error path only).
pub fn find_listed_twice(manifest: &Path, path: &str) -> Option<String> {
    let mut reader = manifest::Reader::open(manifest).ok()?;
    let mut first = None;
    while let Some(Ok(e)) = reader.next() {
        if e.display_path() != path {
            continue;
        }
        match first {
            None => first = Some(reader.lineno()),
            Some(f) => return Some(listed_twice(manifest, reader.lineno(), path, f)),
        }
    }
    None
}

/// Reads a manifest completely, failing on the first bad line: nothing is acted upon before
/// every line has been read and checked.
pub fn read_manifest(path: &Path) -> anyhow::Result<Vec<Entry>> {
    let mut reader = manifest::Reader::open(path)?;
    let mut entries = Vec::new();
    let mut seen: std::collections::HashMap<Vec<u8>, u64> = std::collections::HashMap::new();
    while let Some(entry) = reader.next() {
        let entry = entry.map_err(anyhow::Error::msg)?;
        let line = reader.lineno();
        let at = || format!("{}:{line}: {}", path.display(), entry.display_path());
        if unsafe_path(&entry.path) {
            bail!("{}: {UNSAFE_PATH}", at());
        }
        if let Some(first) = seen.insert(entry.path.clone(), line) {
            bail!("{}", listed_twice(path, line, &entry.display_path(), first));
        }
        entries.push(entry);
    }
    Ok(entries)
}

pub fn build_filter(f: &Filters) -> anyhow::Result<Filter> {
    Filter::new(&f.include, &f.exclude).map_err(anyhow::Error::msg)
}

/// The entries of a tree: from a manifest if given, else a full listing.
pub async fn entries_of(
    store: &Arc<dyn Store>,
    files_from: Option<&Path>,
    recursive: bool,
) -> anyhow::Result<Vec<Entry>> {
    match files_from {
        Some(m) => read_manifest(m),
        None => storage::list_all(store, recursive)
            .await
            .with_context(|| format!("listing {} failed", store.describe())),
    }
}

/// Fills in sizes and times for bare paths (fpart output) by asking the store.
pub async fn complete_entries(
    store: &Arc<dyn Store>,
    entries: &mut [Entry],
    concurrency: usize,
) -> anyhow::Result<()> {
    use futures::StreamExt;
    let missing: Vec<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.size.is_none())
        .map(|(i, _)| i)
        .collect();
    let found: Vec<(usize, anyhow::Result<Option<Entry>>)> = futures::stream::iter(missing)
        .map(|i| {
            let store = store.clone();
            let path = entries[i].path.clone();
            async move {
                (
                    i,
                    store
                        .head(&path)
                        .await
                        .map(|o| o.map(|(e, _)| e))
                        .map_err(anyhow::Error::from),
                )
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    for (i, r) in found {
        match r? {
            Some(e) => entries[i] = e,
            None => bail!(
                "{}: listed in the manifest but not in {}",
                entries[i].display_path(),
                store.describe()
            ),
        }
    }
    Ok(())
}

/// Seconds since `started`, to the millisecond, as the reports give them.
pub fn seconds(started: std::time::Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0
}

/// A document of crate::documents on stdout.
/// Says what a pass did with the leftovers of earlier runs it met in `dst`
/// (`storage::sweep_leftovers`): one line each on stderr (none under `--json`, whose document
/// lists them), and a warning for each that could not be removed. Returns the paths removed.
pub fn report_leftovers(
    dst: &dyn crate::storage::Store,
    sweep: crate::storage::Sweep,
    dry_run: bool,
    json: bool,
) -> Vec<String> {
    let verb = if dry_run { "would remove" } else { "removed" };
    for (p, e) in &sweep.failed {
        eprintln!(
            "warning: cannot remove ferry's leftover {}/{}: {e}",
            dst.describe(),
            crate::manifest::escape_path(p)
        );
    }
    let removed: Vec<String> = sweep
        .removed
        .iter()
        .map(|p| crate::manifest::escape_path(p))
        .collect();
    if !json {
        for p in &removed {
            eprintln!("{verb} leftover of an earlier ferry run\t{p}");
        }
    }
    removed
}

pub fn print_json<T: serde::Serialize>(doc: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(doc).expect("documents always serialise")
    );
}

/// Runs a command until it ends or a SIGINT, SIGTERM or SIGHUP arrives (Ctrl-C, Slurm's time
/// limit, a closed terminal). On a signal the command's future is dropped first, so what it owns
/// is cleaned up as on any other way out (scratch directories removed, logs flushed), and the
/// process exits at once with 128 + the signal's number, as a shell reports a killed command:
/// work handed to blocking threads (a large file being hashed) is abandoned, not waited for.
pub async fn interruptible(
    command: impl std::future::Future<Output = anyhow::Result<std::process::ExitCode>>,
) -> anyhow::Result<std::process::ExitCode> {
    use std::io::Write;
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    let (name, number) = tokio::select! {
        result = command => return result,
        _ = int.recv() => ("SIGINT", libc::SIGINT),
        _ = term.recv() => ("SIGTERM", libc::SIGTERM),
        _ = hup.recv() => ("SIGHUP", libc::SIGHUP),
    };
    eprintln!("ferry: stopped by {name}");
    let _ = std::io::stdout().flush();
    std::process::exit(128 + number)
}

/// Lets a long loop without awaits give the runtime a turn now and then, so that
/// `interruptible` sees a signal while the loop runs.
#[derive(Default)]
pub struct Pacer(u32);

impl Pacer {
    pub async fn tick(&mut self) {
        self.0 = self.0.wrapping_add(1);
        if self.0.is_multiple_of(4096) {
            tokio::task::yield_now().await;
        }
    }
}
