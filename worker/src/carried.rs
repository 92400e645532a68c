//! The destination's state carried from pass to pass (docs/scale.md): the listing a pass
//! planned against, patched with what its verifies saw and its prune deleted, kept at a state
//! location (a local directory or a Blob prefix, outside the destination) for the next pass to
//! plan against instead of listing the destination again.
//!
//! Carrying assumes nobody but ferry writes the destination. What keeps a stale state from
//! ever being used: every step that writes the destination (`mk`, `copy`, `prune`) marks it
//! taken by its pass before its first write, so a pass that fails or is killed after writing and
//! before leaving a new one makes the next pass list fresh; and a sample of carried entries is
//! looked up on the destination (HEAD / lstat) before each use. Listing and planning take
//! nothing: a pass that fails before its first write (a wrong key, a refused plan) leaves the
//! state to its re-run.

use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use futures::StreamExt;

pub use crate::documents::carry::{Merged, StateDoc};
use crate::manifest::{self, Entry, Kind};
use crate::sorted::sort::Runs;
use crate::sorted::{sort_entries, Scratch, SortError};
use crate::storage::{Meta, Store, UploadPlan};

pub const VERSION: u32 = 1;
const LISTING: &[u8] = b"dest.tsv";
const DOC: &[u8] = b"dest.json";
/// The carried listing goes to Blob in blocks of this size (a listing of 10^8 entries is ~10 GB).
const BLOCK: u64 = 8 << 20;

impl StateDoc {
    /// What an older or newer layout reads as: a state nobody can use.
    fn unreadable() -> StateDoc {
        StateDoc {
            version: 0,
            dest: String::new(),
            written_by: String::new(),
            entries: 0,
            taken_by: None,
            quantiles: Vec::new(),
        }
    }
}

/// Whether a pass plans against the carried listing, or why it lists the destination afresh.
pub enum Decision {
    Carried {
        doc: StateDoc,
        /// The carried listing, fetched into a scratch directory that lives as long as this.
        listing: PathBuf,
        probed: usize,
        _scratch: Scratch,
    },
    Fresh(String),
}

impl Decision {
    /// What `ferry ls --summary` says of it, under `carried`.
    pub fn summary(&self) -> crate::documents::CarriedSummary {
        use crate::documents::CarriedSummary;
        match self {
            Decision::Carried { doc, probed, .. } => CarriedSummary {
                used: true,
                written_by: Some(doc.written_by.clone()),
                probed: *probed as u64,
                reason: None,
            },
            Decision::Fresh(why) => CarriedSummary {
                used: false,
                written_by: None,
                probed: 0,
                reason: Some(why.clone()),
            },
        }
    }
}

pub struct State {
    store: Arc<dyn Store>,
}

impl State {
    pub fn new(store: Arc<dyn Store>) -> State {
        State { store }
    }

    pub fn describe(&self) -> String {
        self.store.describe()
    }

    pub async fn doc(&self) -> anyhow::Result<Option<StateDoc>> {
        // Its size, then its bytes: a pass's jobs taking it at once may replace it in between
        // (another length), and the read is then cut short or long; read again.
        let mut tries = 0;
        let doc = loop {
            let Some((e, _)) = self.store.head(DOC).await? else {
                return Ok(None);
            };
            let chunk = self.store.read(DOC, 0, e.size(), None).await;
            let read = chunk.map_err(anyhow::Error::from).and_then(|c| {
                serde_json::from_slice::<serde_json::Value>(&c.data)
                    .with_context(|| format!("{}: not JSON", self.where_(DOC)))
            });
            tries += 1;
            match read {
                Ok(doc) => break doc,
                Err(e) if tries == 5 => return Err(e),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20 * tries)).await,
            }
        };
        // An older or newer layout is not an error: the pass lists fresh and writes this one.
        if doc.get("version").and_then(|v| v.as_u64()) != Some(VERSION as u64) {
            return Ok(Some(StateDoc::unreadable()));
        }
        Ok(Some(serde_json::from_value(doc).with_context(|| {
            format!("{}: not a carried-state document", self.where_(DOC))
        })?))
    }

    async fn write_doc(&self, doc: &StateDoc) -> anyhow::Result<()> {
        let mut data = serde_json::to_vec_pretty(doc).expect("the document serialises");
        data.push(b'\n');
        self.store
            .put(DOC, Bytes::from(data), &Meta::default())
            .await?;
        Ok(())
    }

    /// Marks the carried state taken by `pass`, if there is one not taken already.
    ///
    /// A pass's copy and prune jobs take it at once, each before its first write: a write that
    /// loses to another's (a local store refuses two at the same moment) is fine once the
    /// document reads as taken.
    pub async fn take(&self, pass: &str) -> anyhow::Result<Option<StateDoc>> {
        let doc = self.doc().await?;
        if let Some(d) = doc.as_ref().filter(|d| d.taken_by.is_none()) {
            let taken = StateDoc {
                taken_by: Some(pass.to_string()),
                ..d.clone()
            };
            let mut tries = 0;
            while let Err(e) = self.write_doc(&taken).await {
                tries += 1;
                if self.doc().await?.is_some_and(|now| now.taken_by.is_some()) {
                    break;
                }
                if tries == 5 {
                    return Err(e.context(format!("cannot mark {} taken", self.where_(DOC))));
                }
                tokio::time::sleep(std::time::Duration::from_millis(50 * tries)).await;
            }
        }
        Ok(doc)
    }

    /// Whether the carried state can stand for a listing of `dest` this pass: it was left by a
    /// pass that finished, for this destination, and a sample of `probe` of its files and links
    /// is found on the destination as listed. Nothing is marked: that waits for the pass's first
    /// write (`take`).
    pub async fn decide(
        &self,
        dest: &Arc<dyn Store>,
        pass: &str,
        probe: usize,
        scratch_in: Option<&Path>,
    ) -> anyhow::Result<Decision> {
        match self.doc().await? {
            None => Ok(Decision::Fresh(format!(
                "no carried state at {}",
                self.describe()
            ))),
            Some(doc) => self.judge(&doc, dest, pass, probe, scratch_in).await,
        }
    }

    /// Whether the state `doc` can stand for a listing of `dest` for `pass`.
    async fn judge(
        &self,
        doc: &StateDoc,
        dest: &Arc<dyn Store>,
        pass: &str,
        probe: usize,
        scratch_in: Option<&Path>,
    ) -> anyhow::Result<Decision> {
        if doc.version != VERSION {
            return Ok(Decision::Fresh(format!(
                "the carried state at {} is of another version of ferry",
                self.describe()
            )));
        }
        if let Some(by) = &doc.taken_by {
            return Ok(Decision::Fresh(format!(
                "the pass {by} wrote to the destination and did not leave a new carried state (it failed or was killed)"
            )));
        }
        if doc.dest != dest.describe() {
            return Ok(Decision::Fresh(format!(
                "the carried state describes {}, not {}",
                doc.dest,
                dest.describe()
            )));
        }
        let scratch = Scratch::new(scratch_in)?;
        let listing = scratch.path().join("carried.tsv");
        // A listing that cannot be read back is no reason to fail the pass: it lists afresh.
        let read = self.fetch(LISTING, &listing).await;
        let sample = match read.and_then(|()| sample(&listing, probe, seed(pass))) {
            Ok(s) => s,
            Err(e) => {
                return Ok(Decision::Fresh(format!(
                    "the carried listing at {} cannot be read ({e:#})",
                    self.describe()
                )))
            }
        };
        let probed = sample.len();
        let mismatches = probe_dest(dest, sample).await?;
        if let Some((path, why)) = mismatches.first() {
            return Ok(Decision::Fresh(format!(
                "{} of {probed} carried entries probed differ from the destination ({}: {why})",
                mismatches.len(),
                manifest::escape_path(path)
            )));
        }
        Ok(Decision::Carried {
            doc: doc.clone(),
            listing,
            probed,
            _scratch: scratch,
        })
    }

    /// The carried listing as the shard step of `pass` decided on it (`decided`), for one of
    /// the pass's list jobs; an error if another pass left or took the state since.
    pub async fn as_decided(
        &self,
        pass: &str,
        decided: &crate::documents::CarriedSummary,
        scratch_in: Option<&Path>,
    ) -> anyhow::Result<Decision> {
        let doc = self.doc().await?.unwrap_or_else(StateDoc::unreadable);
        if doc.taken_by.as_deref().is_some_and(|by| by != pass)
            || decided.written_by.as_deref() != Some(doc.written_by.as_str())
        {
            anyhow::bail!(
                "the carried state at {} is no longer the one {pass} decided on (left by {}, taken by {})",
                self.describe(),
                doc.written_by,
                doc.taken_by.as_deref().unwrap_or("nobody")
            );
        }
        let scratch = Scratch::new(scratch_in)?;
        let listing = scratch.path().join("carried.tsv");
        self.fetch(LISTING, &listing).await?;
        Ok(Decision::Carried {
            doc,
            listing,
            probed: decided.probed as usize,
            _scratch: scratch,
        })
    }

    /// Leaves `listing` (sorted, `entries` long) as the carried state, written by `pass`.
    pub async fn leave(
        &self,
        dest: &str,
        pass: &str,
        listing: &Path,
        merged: &Merged,
    ) -> anyhow::Result<StateDoc> {
        self.store.create_root().await?;
        self.store_file(listing, LISTING).await?;
        let doc = StateDoc {
            version: VERSION,
            dest: dest.to_string(),
            written_by: pass.to_string(),
            entries: merged.entries,
            taken_by: None,
            quantiles: merged.quantiles.clone(),
        };
        // The document last: until it is written, the state reads as taken (or absent).
        self.write_doc(&doc).await?;
        Ok(doc)
    }

    fn where_(&self, name: &[u8]) -> String {
        format!(
            "{}/{}",
            self.describe().trim_end_matches('/'),
            String::from_utf8_lossy(name)
        )
    }

    async fn fetch(&self, name: &[u8], to: &Path) -> anyhow::Result<()> {
        let Some((e, _)) = self.store.head(name).await? else {
            anyhow::bail!("{} is missing", self.where_(name));
        };
        let (_, mut body) = self.store.read_stream(name, 0, e.size(), None).await?;
        let mut out = BufWriter::new(std::fs::File::create(to)?);
        while let Some(piece) = body.next().await {
            out.write_all(&piece?)?;
        }
        out.flush()?;
        Ok(())
    }

    async fn store_file(&self, from: &Path, name: &[u8]) -> anyhow::Result<()> {
        let size = std::fs::metadata(from)?.len();
        let plan = UploadPlan {
            size,
            block_size: BLOCK,
            fingerprint: String::new(),
        };
        let upload = self.store.start_upload(name, &plan).await?;
        let mut file = std::fs::File::open(from)?;
        for idx in 0..plan.blocks() {
            let mut buf = vec![0u8; plan.block_len(idx) as usize];
            file.read_exact(&mut buf)?;
            if let Err(e) = upload.put_block(idx, Bytes::from(buf), None).await {
                upload.abort(false).await;
                return Err(e.into());
            }
        }
        upload.commit(&Meta::default()).await?;
        Ok(())
    }
}

/// A seed from the pass's name: each pass probes other entries, and a re-run of one the same.
fn seed(pass: &str) -> u64 {
    crate::storage::fnv1a(pass.as_bytes())
}

/// Up to `n` of the listing's files and links, chosen uniformly (reservoir sampling): a
/// directory's attributes are looked at by the pass anyway, and in Blob storage a directory may
/// exist only as the prefix of the names under it, which no lookup of its own finds.
fn sample(listing: &Path, n: usize, seed: u64) -> anyhow::Result<Vec<Entry>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut kept: Vec<Entry> = Vec::with_capacity(n);
    let mut seen = 0usize;
    // Whole, or no state: ls hands it on as the destination a prune deletes against.
    for e in manifest::Reader::open_whole(listing)? {
        let e = e.map_err(anyhow::Error::msg)?;
        if e.kind == Kind::Dir {
            continue;
        }
        seen += 1;
        if kept.len() < n {
            kept.push(e);
        } else {
            let j = rng.usize(..seen);
            if j < n {
                kept[j] = e;
            }
        }
    }
    Ok(kept)
}

/// The sampled entries the destination no longer holds as carried, with why.
async fn probe_dest(
    dest: &Arc<dyn Store>,
    sample: Vec<Entry>,
) -> anyhow::Result<Vec<(Vec<u8>, String)>> {
    // The probe is a few dozen lookups (--probe), each a round trip to a remote destination:
    // all in flight at once, they cost one round trip of the pass's time, not several.
    const IN_FLIGHT: usize = 128;
    let looked: Vec<_> = futures::stream::iter(sample)
        .map(|e| async move {
            let seen = dest.head(&e.path).await;
            (e, seen)
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let mut out = Vec::new();
    for (e, seen) in looked {
        match seen? {
            None => out.push((e.path, "gone".to_string())),
            Some((d, _)) => {
                if let Some(why) = disagrees(&e, &d) {
                    out.push((e.path, why));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Where a carried entry and the destination's own disagree, in what a listing records.
/// Fields one side did not record (a digest not read, an MD5 the lookup does not return) are
/// not compared.
fn disagrees(carried: &Entry, seen: &Entry) -> Option<String> {
    fn both<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
        matches!((a, b), (Some(x), Some(y)) if x != y)
    }
    if carried.kind != seen.kind {
        return Some(format!(
            "a {} now, carried as a {}",
            seen.kind.name(),
            carried.kind.name()
        ));
    }
    if carried.size != seen.size {
        return Some(format!(
            "{} bytes now, carried as {}",
            seen.size(),
            carried.size()
        ));
    }
    if carried.mtime != seen.mtime {
        return Some("its modification time changed".into());
    }
    if both(&carried.md5, &seen.md5) {
        return Some("its MD5 changed".into());
    }
    if both(&carried.mode, &seen.mode) || both(&carried.owner, &seen.owner) {
        return Some("its mode or owner changed".into());
    }
    if both(&carried.xattrs, &seen.xattrs) {
        return Some("its extended attributes changed".into());
    }
    None
}

/// The destination as a pass left it, sorted by path into `out`: the listing it planned against
/// (`listing`; none for a baseline), each path a verify looked at replaced by what it saw
/// (`observed`), and what prune deleted (`deleted`) gone, together with whatever a deleted or
/// replaced directory held.
pub fn merge(
    listing: &[PathBuf],
    observed: &[PathBuf],
    deleted: &[PathBuf],
    out: &Path,
    scratch: &Path,
    budget: usize,
) -> anyhow::Result<Merged> {
    let sorted = |paths: Vec<&Path>, stem: &str| -> anyhow::Result<Runs> {
        let mut readers = Vec::new();
        for p in paths {
            readers.push(manifest::Reader::open_whole(p)?);
        }
        sort_entries(readers.into_iter().flatten(), scratch, stem, budget).map_err(|e| match e {
            SortError::Listing(e) => anyhow::anyhow!(e),
            e => e.into(),
        })
    };
    let old = sorted(listing.iter().map(PathBuf::as_path).collect(), "carried")?;
    let seen = sorted(observed.iter().map(PathBuf::as_path).collect(), "observed")?;
    let gone = sorted(deleted.iter().map(PathBuf::as_path).collect(), "deleted")?;
    let mut counts = Merged {
        observed: seen.entries(),
        deleted: gone.entries(),
        ..Merged::default()
    };
    let mut old = old.merge()?.peekable();
    let mut seen = seen.merge()?.peekable();
    let mut gone = gone.merge()?.peekable();
    let mut w = manifest::Writer::new(BufWriter::with_capacity(
        1 << 20,
        std::fs::File::create(out)?,
    ))?;
    // Directories whose contents went with them: deleted, or replaced by a file or link. Few
    // (a pass's own deletions and type changes), and every descendant sorts after its ancestor.
    let mut emptied: std::collections::HashSet<Vec<u8>> = Default::default();
    let mut quantiles = crate::keyspace::Quantiles::default();
    loop {
        let next = [old.peek(), seen.peek(), gone.peek()]
            .into_iter()
            .flatten()
            .map(|r| r.as_ref().map(|e| e.path.clone()).map_err(|e| e.kind()))
            .min_by(|a, b| match (a, b) {
                (Ok(a), Ok(b)) => a.cmp(b),
                (Err(_), _) => std::cmp::Ordering::Less,
                (_, Err(_)) => std::cmp::Ordering::Greater,
            });
        let path = match next {
            None => break,
            Some(Ok(p)) => p,
            Some(Err(_)) => {
                for it in [&mut old, &mut seen, &mut gone] {
                    if let Some(Err(_)) = it.peek() {
                        return Err(it.next().unwrap().unwrap_err().into());
                    }
                }
                unreachable!("an error was peeked");
            }
        };
        let take = |it: &mut std::iter::Peekable<crate::sorted::sort::Merge>| -> io::Result<Option<Entry>> {
            match it.peek() {
                Some(Ok(e)) if e.path == path => it.next().transpose(),
                _ => Ok(None),
            }
        };
        let (was, now, deleted) = (take(&mut old)?, take(&mut seen)?, take(&mut gone)?);
        if !emptied.is_empty() && ancestors(&path).any(|a| emptied.contains(a)) {
            continue;
        }
        if let Some(d) = deleted {
            // A deleted directory's contents went with it; a deleted file is just gone.
            if d.kind == Kind::Dir {
                emptied.insert(path);
            }
            continue;
        }
        let keep = match (was, now) {
            (was, Some(now)) => {
                if now.kind != Kind::Dir && was.is_some_and(|w| w.kind == Kind::Dir) {
                    emptied.insert(path.clone());
                }
                now
            }
            (Some(was), None) => was,
            (None, None) => continue,
        };
        w.write(&keep)?;
        quantiles.push(&keep.path);
        counts.entries += 1;
    }
    counts.quantiles = quantiles.finish();
    w.finish()?.into_inner().map_err(|e| e.into_error())?;
    Ok(counts)
}

/// `a/b/c` → `a/b`, `a`.
fn ancestors(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter()
        .enumerate()
        .rev()
        .filter(|(_, &b)| b == b'/')
        .map(move |(i, _)| &path[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, entries: &[Entry]) -> PathBuf {
        let p = dir.join(name);
        let mut w = manifest::Writer::new(std::fs::File::create(&p).unwrap()).unwrap();
        for e in entries {
            w.write(e).unwrap();
        }
        w.finish().unwrap();
        p
    }

    fn dir(path: &str) -> Entry {
        Entry {
            path: path.into(),
            kind: Kind::Dir,
            size: Some(0),
            ..Default::default()
        }
    }

    fn paths(p: &Path) -> Vec<(String, u64)> {
        manifest::Reader::open(p)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.display_path(), e.size())
            })
            .collect()
    }

    #[test]
    fn a_pass_patches_the_listing_it_planned_against() {
        let t = tempfile::tempdir().unwrap();
        let listing = write(
            t.path(),
            "old.tsv",
            &[
                Entry::file("keep", 1),
                Entry::file("changed", 1),
                dir("was-dir"),
                Entry::file("was-dir/x", 1),
                Entry::file("was-dir.txt", 1),
                dir("pruned"),
                Entry::file("pruned/y", 1),
                Entry::file("stale", 1),
            ],
        );
        // Verify parts come in any order, each sorted by itself.
        let seen = [
            write(
                t.path(),
                "o1.tsv",
                &[Entry::file("was-dir", 5), Entry::file("new", 2)],
            ),
            write(t.path(), "o2.tsv", &[Entry::file("changed", 9)]),
        ];
        let deleted = write(
            t.path(),
            "deleted.tsv",
            &[
                Entry::file("pruned/y", 1),
                dir("pruned"),
                Entry::file("stale", 1),
            ],
        );
        let out = t.path().join("new.tsv");
        let n = merge(
            std::slice::from_ref(&listing),
            &seen,
            std::slice::from_ref(&deleted),
            &out,
            t.path(),
            1 << 20,
        )
        .unwrap();
        assert_eq!(
            paths(&out),
            [
                ("changed", 9),
                ("keep", 1),
                ("new", 2),
                ("was-dir", 5),
                ("was-dir.txt", 1)
            ]
            .map(|(p, s)| (p.to_string(), s))
        );
        assert_eq!((n.entries, n.observed, n.deleted), (5, 3, 3));
    }

    #[test]
    fn a_baseline_carries_what_it_saw() {
        let t = tempfile::tempdir().unwrap();
        let seen = [write(
            t.path(),
            "o.tsv",
            &[Entry::file("b", 2), dir("a"), Entry::file("a/c", 1)],
        )];
        let out = t.path().join("new.tsv");
        merge(&[], &seen, &[], &out, t.path(), 1 << 20).unwrap();
        assert_eq!(
            paths(&out),
            [("a", 0), ("a/c", 1), ("b", 2)].map(|(p, s)| (p.to_string(), s))
        );
    }

    #[test]
    fn a_probe_compares_what_both_recorded() {
        let carried = Entry {
            mtime: manifest::Mtime::parse("10.5"),
            md5: Some([1; 16]),
            ..Entry::file("f", 3)
        };
        assert_eq!(disagrees(&carried, &carried.clone()), None);
        let no_md5 = Entry {
            md5: None,
            ..carried.clone()
        };
        assert_eq!(disagrees(&carried, &no_md5), None);
        let rewritten = Entry {
            md5: Some([2; 16]),
            ..carried.clone()
        };
        assert!(disagrees(&carried, &rewritten).unwrap().contains("MD5"));
        let touched = Entry {
            mtime: manifest::Mtime::parse("11"),
            ..carried.clone()
        };
        assert!(disagrees(&carried, &touched).is_some());
    }

    #[test]
    fn a_sample_is_of_files_and_the_same_for_one_pass() {
        let t = tempfile::tempdir().unwrap();
        let mut entries = vec![dir("d")];
        entries.extend((0..100).map(|i| Entry::file(format!("d/{i:03}"), i)));
        let listing = write(t.path(), "l.tsv", &entries);
        let a = sample(&listing, 10, seed("incremental")).unwrap();
        assert_eq!(a.len(), 10);
        assert!(a.iter().all(|e| e.kind == Kind::File));
        assert_eq!(a, sample(&listing, 10, seed("incremental")).unwrap());
        assert_ne!(a, sample(&listing, 10, seed("final")).unwrap());
        assert_eq!(sample(&listing, 1000, 1).unwrap().len(), 100);
    }
}
