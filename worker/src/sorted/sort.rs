//! External sort of manifest entries: sorted runs of bounded size spilled to files, then a
//! k-way merge. Listings of tens of millions of entries pass through in the memory of one run.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

use crate::manifest::{Entry, Kind, Mtime};

/// The orders entries are sorted in.
#[derive(Clone, Copy, Debug)]
pub enum Order {
    /// By path bytes: how listings are joined.
    Path,
    /// Largest first, then by path: the order in which LPT places entries (`ferry partition --parts`).
    SizeDesc,
    /// By hard-link group (inode, then device), then path: the names of a group together.
    Link,
}

impl Order {
    pub fn entries(self, a: &Entry, b: &Entry) -> Ordering {
        match self {
            Order::Path => a.path.cmp(&b.path),
            Order::SizeDesc => b.size().cmp(&a.size()).then_with(|| a.path.cmp(&b.path)),
            Order::Link => link_order(a)
                .cmp(&link_order(b))
                .then_with(|| a.path.cmp(&b.path)),
        }
    }

    /// A number that orders as the entries do wherever two numbers differ: most comparisons of
    /// a sort end on it, without touching the records.
    fn key(self, e: &Entry) -> u64 {
        match self {
            Order::Path => {
                // The first eight bytes, zero-padded: zero sorts first, as a shorter path does.
                let mut k = [0u8; 8];
                let n = e.path.len().min(8);
                k[..n].copy_from_slice(&e.path[..n]);
                u64::from_be_bytes(k)
            }
            Order::SizeDesc => u64::MAX - e.size(),
            Order::Link => link_order(e).0,
        }
    }
}

/// (inode, device): the inode first, since it tells most groups apart.
fn link_order(e: &Entry) -> (u64, u64) {
    e.link.map(|(dev, ino)| (ino, dev)).unwrap_or((0, 0))
}

const READ_BUFFER: usize = 128 * 1024;

/// Collects entries, spilling each full run, sorted, into `dir/<stem>-<n>.run`. A run is held
/// encoded, back to back in one buffer, and sorted as (key, offset) pairs: no allocation per
/// entry, and a sort that mostly compares integers in one array.
pub struct Sorter {
    order: Order,
    budget: usize,
    dir: PathBuf,
    stem: String,
    arena: Vec<u8>,
    items: Vec<(u64, usize)>,
    runs: Vec<PathBuf>,
    entries: u64,
}

impl Sorter {
    /// `budget`: bytes held before a run is spilled (at least one entry per run).
    pub fn new(order: Order, budget: usize, dir: PathBuf, stem: &str) -> Sorter {
        Sorter {
            order,
            budget,
            dir,
            stem: stem.to_string(),
            arena: Vec::new(),
            items: Vec::new(),
            runs: Vec::new(),
            entries: 0,
        }
    }

    pub fn push(&mut self, e: &Entry) -> io::Result<()> {
        self.items.push((self.order.key(e), self.arena.len()));
        encode(e, &mut self.arena);
        self.entries += 1;
        if self.arena.len() + self.items.len() * std::mem::size_of::<(u64, usize)>() >= self.budget
        {
            self.spill()?;
        }
        Ok(())
    }

    fn spill(&mut self) -> io::Result<()> {
        if self.items.is_empty() {
            return Ok(());
        }
        let arena = &self.arena;
        // Equal keys leave it to the paths, in either order (SizeDesc's key is the size).
        self.items.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0).then_with(|| {
                record_path(record_at(arena, a.1)).cmp(record_path(record_at(arena, b.1)))
            })
        });
        let path = self
            .dir
            .join(format!("{}-{}.run", self.stem, self.runs.len()));
        let mut out = BufWriter::with_capacity(1 << 20, File::create(&path)?);
        for &(_, at) in &self.items {
            out.write_all(record_at(arena, at))?;
        }
        out.flush()?;
        self.runs.push(path);
        self.items.clear();
        self.arena.clear();
        Ok(())
    }

    /// Spills what is left and hands over the runs, to be merged as often as needed.
    pub fn finish(mut self) -> io::Result<Runs> {
        self.spill()?;
        Ok(Runs {
            order: self.order,
            paths: std::mem::take(&mut self.runs),
            entries: self.entries,
        })
    }
}

/// A sort abandoned halfway (a failed listing) leaves no runs behind.
impl Drop for Sorter {
    fn drop(&mut self) {
        for p in &self.runs {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Sorted run files; removed when dropped.
pub struct Runs {
    order: Order,
    paths: Vec<PathBuf>,
    entries: u64,
}

impl Runs {
    pub fn count(&self) -> usize {
        self.paths.len()
    }

    /// How many entries the runs hold.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// All entries in order, read from the runs in one k-way merge.
    pub fn merge(&self) -> io::Result<Merge> {
        let mut readers = Vec::with_capacity(self.paths.len());
        let mut heap = BinaryHeap::with_capacity(self.paths.len());
        for (i, p) in self.paths.iter().enumerate() {
            let mut r = BufReader::with_capacity(READ_BUFFER, File::open(p)?);
            if let Some(e) = decode(&mut r)? {
                heap.push(Head {
                    entry: e,
                    run: i,
                    order: self.order,
                });
            }
            readers.push(r);
        }
        Ok(Merge { readers, heap })
    }
}

impl Drop for Runs {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

struct Head {
    entry: Entry,
    run: usize,
    order: Order,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    /// Reversed, so that the max-heap yields the smallest entry; equal entries come out in run
    /// order, which keeps the merge deterministic.
    fn cmp(&self, other: &Self) -> Ordering {
        self.order
            .entries(&other.entry, &self.entry)
            .then_with(|| other.run.cmp(&self.run))
    }
}

pub struct Merge {
    readers: Vec<BufReader<File>>,
    heap: BinaryHeap<Head>,
}

impl Iterator for Merge {
    type Item = io::Result<Entry>;
    fn next(&mut self) -> Option<Self::Item> {
        let mut top = self.heap.peek_mut()?;
        let next = match decode(&mut self.readers[top.run]) {
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        let entry = match next {
            Some(n) => std::mem::replace(&mut top.entry, n),
            None => std::collections::binary_heap::PeekMut::pop(top).entry,
        };
        Some(Ok(entry))
    }
}

// The run format: little-endian, fixed fields after a length-prefixed path. Private to one
// process and one sort, so it has no header or version.
const HAS_SIZE: u8 = 1;
const HAS_MTIME: u8 = 2;
const HAS_MD5: u8 = 4;
const HAS_MODE: u8 = 8;
const HAS_OWNER: u8 = 16;
const HAS_LINK: u8 = 32;
const HAS_XATTRS: u8 = 64;
const FIXED: usize = 2 + 8 + 8 + 4 + 16 + 4 + 8 + 16 + 8;

fn record_at(arena: &[u8], at: usize) -> &[u8] {
    let len = u32::from_le_bytes(arena[at..at + 4].try_into().expect("4 bytes")) as usize;
    &arena[at..at + 4 + len + FIXED]
}

fn record_path(record: &[u8]) -> &[u8] {
    &record[4..record.len() - FIXED]
}

fn encode(e: &Entry, out: &mut Vec<u8>) {
    out.extend_from_slice(&(e.path.len() as u32).to_le_bytes());
    out.extend_from_slice(&e.path);
    out.push(e.kind.code() as u8);
    let flags = (e.size.is_some() as u8 * HAS_SIZE)
        | (e.mtime.is_some() as u8 * HAS_MTIME)
        | (e.md5.is_some() as u8 * HAS_MD5)
        | (e.mode.is_some() as u8 * HAS_MODE)
        | (e.owner.is_some() as u8 * HAS_OWNER)
        | (e.link.is_some() as u8 * HAS_LINK)
        | (e.xattrs.is_some() as u8 * HAS_XATTRS);
    out.push(flags);
    out.extend_from_slice(&e.size.unwrap_or(0).to_le_bytes());
    let m = e.mtime.unwrap_or(Mtime { secs: 0, nanos: 0 });
    out.extend_from_slice(&m.secs.to_le_bytes());
    out.extend_from_slice(&m.nanos.to_le_bytes());
    out.extend_from_slice(&e.md5.unwrap_or([0; 16]));
    out.extend_from_slice(&e.mode.unwrap_or(0).to_le_bytes());
    let (uid, gid) = e.owner.unwrap_or((0, 0));
    out.extend_from_slice(&uid.to_le_bytes());
    out.extend_from_slice(&gid.to_le_bytes());
    let (dev, ino) = e.link.unwrap_or((0, 0));
    out.extend_from_slice(&dev.to_le_bytes());
    out.extend_from_slice(&ino.to_le_bytes());
    out.extend_from_slice(&e.xattrs.unwrap_or(0).to_le_bytes());
}

fn decode(r: &mut impl Read) -> io::Result<Option<Entry>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut path = vec![0u8; u32::from_le_bytes(len) as usize];
    r.read_exact(&mut path)?;
    let mut fixed = [0u8; FIXED];
    r.read_exact(&mut fixed)?;
    let kind = Kind::from_code(fixed[0]).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("sort run: bad kind byte {}", fixed[0]),
        )
    })?;
    let flags = fixed[1];
    let le8 = |at: usize| <[u8; 8]>::try_from(&fixed[at..at + 8]).expect("8 bytes");
    let size = u64::from_le_bytes(le8(2));
    let secs = i64::from_le_bytes(le8(10));
    let nanos = u32::from_le_bytes(fixed[18..22].try_into().expect("4 bytes"));
    let md5: [u8; 16] = fixed[22..38].try_into().expect("16 bytes");
    let le4 = |at: usize| u32::from_le_bytes(fixed[at..at + 4].try_into().expect("4 bytes"));
    Ok(Some(Entry {
        path,
        kind,
        size: (flags & HAS_SIZE != 0).then_some(size),
        mtime: (flags & HAS_MTIME != 0).then_some(Mtime { secs, nanos }),
        md5: (flags & HAS_MD5 != 0).then_some(md5),
        mode: (flags & HAS_MODE != 0).then_some(le4(38)),
        owner: (flags & HAS_OWNER != 0).then_some((le4(42), le4(46))),
        link: (flags & HAS_LINK != 0)
            .then_some((u64::from_le_bytes(le8(50)), u64::from_le_bytes(le8(58)))),
        xattrs: (flags & HAS_XATTRS != 0).then_some(u64::from_le_bytes(le8(66))),
    }))
}

/// Appends entries to a spill file in arrival order and reads them back in that order.
pub struct Spill {
    path: PathBuf,
    out: Option<BufWriter<File>>,
    encoded: Vec<u8>,
}

impl Spill {
    pub fn create(path: PathBuf) -> io::Result<Spill> {
        let out = BufWriter::with_capacity(1 << 20, File::create(&path)?);
        Ok(Spill {
            path,
            out: Some(out),
            encoded: Vec::new(),
        })
    }
    pub fn push(&mut self, e: &Entry) -> io::Result<()> {
        self.encoded.clear();
        encode(e, &mut self.encoded);
        self.out
            .as_mut()
            .expect("push before read")
            .write_all(&self.encoded)
    }
    /// Ends writing (on the first call) and reads everything back from the start.
    pub fn read(&mut self) -> io::Result<impl Iterator<Item = io::Result<Entry>>> {
        if let Some(out) = self.out.take() {
            out.into_inner().map_err(|e| e.into_error())?;
        }
        let mut r = BufReader::with_capacity(READ_BUFFER, File::open(&self.path)?);
        Ok(std::iter::from_fn(move || decode(&mut r).transpose()))
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &[u8], size: u64) -> Entry {
        Entry {
            path: path.to_vec(),
            kind: Kind::File,
            size: Some(size),
            mtime: Mtime::parse("-3.25"),
            md5: None,
            ..Default::default()
        }
    }

    #[test]
    fn records_round_trip() {
        let all = [
            Entry {
                path: b"tab\there\n\xff".to_vec(),
                kind: Kind::Symlink,
                size: None,
                mtime: None,
                md5: Some([7; 16]),
                ..Default::default()
            },
            Entry {
                path: Vec::new(),
                kind: Kind::Dir,
                size: Some(u64::MAX),
                mtime: Mtime::parse("1700000000.000000001"),
                md5: None,
                ..Default::default()
            },
            entry(b"a", 0),
        ];
        let mut buf = Vec::new();
        for e in &all {
            encode(e, &mut buf);
        }
        let mut r = &buf[..];
        for e in &all {
            assert_eq!(&decode(&mut r).unwrap().unwrap(), e);
        }
        assert!(decode(&mut r).unwrap().is_none());
    }

    #[test]
    fn many_runs_merge_into_one_order() {
        let dir = tempfile::tempdir().unwrap();
        // A budget of one byte spills every entry as its own run.
        for budget in [1, 300, 1 << 20] {
            let mut s = Sorter::new(Order::Path, budget, dir.path().to_path_buf(), "t");
            let mut want = Vec::new();
            for i in 0..200u64 {
                let name = format!("d{}/f{}", (i * 7919) % 13, (i * 104729) % 200).into_bytes();
                want.push(name.clone());
                s.push(&entry(&name, i)).unwrap();
            }
            want.sort();
            let runs = s.finish().unwrap();
            for _ in 0..2 {
                let got: Vec<Vec<u8>> = runs.merge().unwrap().map(|e| e.unwrap().path).collect();
                assert_eq!(got, want, "budget {budget}");
            }
            let files = std::fs::read_dir(dir.path()).unwrap().count();
            assert!(
                budget > 1000 || files > 1,
                "budget {budget} wrote {files} runs"
            );
            drop(runs);
            assert_eq!(
                std::fs::read_dir(dir.path()).unwrap().count(),
                0,
                "runs removed"
            );
        }
    }

    #[test]
    fn path_keys_agree_with_path_order() {
        // Short paths, zero bytes and shared prefixes: wherever two keys differ they must order
        // as the paths do.
        let names: Vec<&[u8]> = vec![
            b"",
            b"a",
            b"a\0",
            b"a\0\0b",
            b"ab",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefgg\xff",
            b"\xff",
            b"b",
        ];
        for x in &names {
            for y in &names {
                let (kx, ky) = (Order::Path.key(&entry(x, 0)), Order::Path.key(&entry(y, 0)));
                if kx != ky {
                    assert_eq!(kx.cmp(&ky), x.cmp(y), "{x:?} vs {y:?}");
                }
            }
        }
    }

    #[test]
    fn size_order_is_lpt_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Sorter::new(Order::SizeDesc, 100, dir.path().to_path_buf(), "s");
        for (p, z) in [(&b"b"[..], 5), (b"a", 5), (b"c", 9), (b"d", 0)] {
            s.push(&entry(p, z)).unwrap();
        }
        let got: Vec<Vec<u8>> = s
            .finish()
            .unwrap()
            .merge()
            .unwrap()
            .map(|e| e.unwrap().path)
            .collect();
        assert_eq!(
            got,
            [b"c".to_vec(), b"a".to_vec(), b"b".to_vec(), b"d".to_vec()]
        );
    }

    #[test]
    fn spill_reads_back_in_arrival_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::create(dir.path().join("x")).unwrap();
        for p in [&b"z"[..], b"a", b"m"] {
            s.push(&entry(p, 1)).unwrap();
        }
        let got: Vec<Vec<u8>> = s.read().unwrap().map(|e| e.unwrap().path).collect();
        assert_eq!(got, [b"z".to_vec(), b"a".to_vec(), b"m".to_vec()]);
    }
}
