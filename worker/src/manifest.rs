//! The manifest: ferry's one listing format. `ls` writes it, `copy --files-from`, `partition`,
//! `verify` and `prune` read it. Format is specified in docs/manifest.md.

use std::fmt::Write as _;
use std::io::{self, BufRead, Read, Write};

pub const HEADER: &str =
    "#ferry-manifest v2\tpath\ttype\tsize\tmtime\tmd5\tmode\towner\tlink\txattrs";

/// The end record: the last line of a manifest whose listing completed, with its counts. A
/// manifest without it (a listing that failed, a file cut short) is refused by every reader
/// that could delete on its strength (`Reader::whole`); others read it as before.
pub const END: &str = "#ferry-end";

/// What the end record counts: the entries, and the bytes their sizes add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub entries: u64,
    pub bytes: u64,
}

impl Tally {
    pub fn add(&mut self, e: &Entry) {
        self.entries += 1;
        self.bytes += e.size();
    }

    /// The end record's line, newline included.
    pub fn end_line(&self) -> String {
        format!("{END}\tentries={}\tbytes={}\n", self.entries, self.bytes)
    }

    /// The counts of an end record line (None: not one); a malformed one is an error.
    fn parse_end(line: &[u8]) -> Option<Result<Tally, String>> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let rest = line.strip_prefix(END.as_bytes())?;
        if !rest.is_empty() && !rest.starts_with(b"\t") {
            return None;
        }
        let bad = || format!("bad end record {:?}", String::from_utf8_lossy(line));
        let mut tally = (None, None);
        for field in rest.split(|&b| b == b'\t').skip(1) {
            let text = std::str::from_utf8(field).map_err(|_| bad());
            let Some((key, value)) = text.as_ref().ok().and_then(|t| t.split_once('=')) else {
                return Some(Err(bad()));
            };
            let Ok(n) = value.parse::<u64>() else {
                return Some(Err(bad()));
            };
            // Keys this ferry does not know are a later format's: read past them.
            match key {
                "entries" => tally.0 = Some(n),
                "bytes" => tally.1 = Some(n),
                _ => {}
            }
        }
        Some(match tally {
            (Some(entries), Some(bytes)) => Ok(Tally { entries, bytes }),
            _ => Err(bad()),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Kind {
    #[default]
    File,
    Symlink,
    Dir,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

impl Kind {
    pub fn code(self) -> char {
        match self {
            Kind::File => 'f',
            Kind::Symlink => 'l',
            Kind::Dir => 'd',
            Kind::Fifo => 'p',
            Kind::Socket => 's',
            Kind::CharDev => 'c',
            Kind::BlockDev => 'b',
        }
    }
    pub fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            b'f' => Kind::File,
            b'l' => Kind::Symlink,
            b'd' => Kind::Dir,
            b'p' => Kind::Fifo,
            b's' => Kind::Socket,
            b'c' => Kind::CharDev,
            b'b' => Kind::BlockDev,
            _ => return None,
        })
    }
    fn parse(s: &str) -> Option<Kind> {
        match s.as_bytes() {
            [c] => Kind::from_code(*c),
            _ => None,
        }
    }
    /// Fifos, sockets and device nodes: no bytes to copy, only a node to make.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev
        )
    }
    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Symlink => "symlink",
            Kind::Dir => "dir",
            Kind::Fifo => "fifo",
            Kind::Socket => "socket",
            Kind::CharDev => "character device",
            Kind::BlockDev => "block device",
        }
    }
}

/// Modification time with nanosecond precision, as seconds since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mtime {
    pub secs: i64,
    pub nanos: u32,
}

impl Mtime {
    pub fn parse(s: &str) -> Option<Mtime> {
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        let secs: i64 = int.parse().ok()?;
        if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut nanos: u32 = if frac.is_empty() {
            0
        } else {
            frac.parse().ok()?
        };
        for _ in frac.len()..9 {
            nanos *= 10;
        }
        // Negative times keep nanos counting forward from `secs`, as `struct timespec` does.
        Some(Mtime { secs, nanos })
    }

    pub fn from_system(t: std::time::SystemTime) -> Mtime {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Mtime {
                secs: d.as_secs() as i64,
                nanos: d.subsec_nanos(),
            },
            Err(e) => {
                let d = e.duration();
                if d.subsec_nanos() == 0 {
                    Mtime {
                        secs: -(d.as_secs() as i64),
                        nanos: 0,
                    }
                } else {
                    Mtime {
                        secs: -(d.as_secs() as i64) - 1,
                        nanos: 1_000_000_000 - d.subsec_nanos(),
                    }
                }
            }
        }
    }

    #[cfg(test)]
    pub fn to_system(self) -> std::time::SystemTime {
        let base = std::time::UNIX_EPOCH;
        if self.secs >= 0 {
            base + std::time::Duration::new(self.secs as u64, self.nanos)
        } else {
            base - std::time::Duration::from_secs(self.secs.unsigned_abs())
                + std::time::Duration::from_nanos(self.nanos as u64)
        }
    }
}

impl std::fmt::Display for Mtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:09}", self.secs, self.nanos)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Entry {
    /// Relative, '/'-separated, raw bytes (local names need not be UTF-8).
    pub path: Vec<u8>,
    pub kind: Kind,
    /// None only for bare paths read from fpart output: looked up when used.
    pub size: Option<u64>,
    pub mtime: Option<Mtime>,
    pub md5: Option<[u8; 16]>,
    /// Permission bits (07777) and owner (uid, gid), where the listing saw them: a local
    /// stat, or the POSIX metadata a blob carries.
    pub mode: Option<u32>,
    pub owner: Option<(u32, u32)>,
    /// (device, inode) of a local file with more than one name: names that share it are one
    /// file, kept as hard links.
    pub link: Option<(u64, u64)>,
    /// A digest of the extended attributes and ACLs, where they were read (`xattrs::digest`);
    /// None when not read.
    pub xattrs: Option<u64>,
}

impl Entry {
    #[cfg(test)]
    pub fn file(path: impl Into<Vec<u8>>, size: u64) -> Entry {
        Entry {
            path: path.into(),
            kind: Kind::File,
            size: Some(size),
            mtime: None,
            md5: None,
            ..Default::default()
        }
    }
    pub fn size(&self) -> u64 {
        self.size.unwrap_or(0)
    }
    pub fn display_path(&self) -> String {
        escape_path(&self.path)
    }
}

/// Escapes a path so that it fits one TSV field and round-trips any byte string.
pub fn escape_path(path: &[u8]) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while !rest.is_empty() {
        let (valid, bad) = match std::str::from_utf8(rest) {
            Ok(s) => (s, &[][..]),
            Err(e) => {
                let (v, b) = rest.split_at(e.valid_up_to());
                // SAFETY-free: valid_up_to guarantees v is UTF-8.
                (std::str::from_utf8(v).unwrap(), b)
            }
        };
        for c in valid.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                // A leading '#' would read back as a comment line.
                '#' if out.is_empty() => out.push_str("\\x23"),
                c => out.push(c),
            }
        }
        rest = if bad.is_empty() {
            &[]
        } else {
            // One invalid byte at a time: the decoder may resynchronise right after it.
            let _ = write!(out, "\\x{:02x}", bad[0]);
            &bad[1..]
        };
    }
    out
}

pub fn unescape_path(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b'\\') => out.push(b'\\'),
            Some(b't') => out.push(b'\t'),
            Some(b'n') => out.push(b'\n'),
            Some(b'r') => out.push(b'\r'),
            Some(b'x') => {
                let hex = s
                    .get(i + 2..i + 4)
                    .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
                    .ok_or_else(|| format!("bad or truncated \\x escape in {s:?}"))?;
                out.push(
                    u8::from_str_radix(hex, 16).map_err(|_| format!("bad \\x escape in {s:?}"))?,
                );
                i += 4;
                continue;
            }
            _ => return Err(format!("bad escape in {s:?}")),
        }
        i += 2;
    }
    Ok(out)
}

pub fn md5_hex(md5: &[u8; 16]) -> String {
    let mut s = String::with_capacity(32);
    for b in md5 {
        let _ = write!(s, "{b:02x}");
    }
    s
}

pub fn parse_md5_hex(s: &str) -> Option<[u8; 16]> {
    // Byte slicing below needs ASCII: a multibyte character would split mid-character.
    if s.len() != 32 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Formats one manifest line (with trailing newline) into `buf`.
pub fn format_tsv(e: &Entry, buf: &mut String) {
    buf.push_str(&escape_path(&e.path));
    buf.push('\t');
    buf.push(e.kind.code());
    field(buf, e.size, |b, s| write!(b, "{s}"));
    field(buf, e.mtime, |b, m| write!(b, "{m}"));
    field(buf, e.md5, |b, m| b.write_str(&md5_hex(&m)));
    field(buf, e.mode, |b, m| write!(b, "{m:04o}"));
    field(buf, e.owner, |b, (u, g)| write!(b, "{u}:{g}"));
    field(buf, e.link, |b, (dev, ino)| write!(b, "{dev}:{ino}"));
    field(buf, e.xattrs, |b, x| write!(b, "{x:016x}"));
    buf.push('\n');
}

/// One field after a TAB: the value, or `-` where it is unknown.
fn field<T>(
    buf: &mut String,
    value: Option<T>,
    write: impl FnOnce(&mut String, T) -> std::fmt::Result,
) {
    buf.push('\t');
    match value {
        // Writing into a String cannot fail.
        Some(v) => {
            let _ = write(buf, v);
        }
        None => buf.push('-'),
    }
}

/// A field that may be absent (a shorter line) or `-`; anything else must parse.
fn optional<T>(
    field: Option<&str>,
    what: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>, String> {
    match field {
        None | Some("-") => Ok(None),
        Some(s) => parse(s)
            .map(Some)
            .ok_or_else(|| format!("bad {what}: {s:?}")),
    }
}

fn parse_pair<T: std::str::FromStr>(s: &str) -> Option<(T, T)> {
    let (a, b) = s.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

pub fn format_jsonl(e: &Entry) -> String {
    let v = serde_json::json!({
        "path": escape_path(&e.path),
        "type": e.kind.code().to_string(),
        "size": e.size,
        "mtime": e.mtime.map(|m| m.secs as f64 + m.nanos as f64 / 1e9),
        "md5": e.md5.as_ref().map(md5_hex),
        "mode": e.mode.map(|m| format!("{m:04o}")),
        "uid": e.owner.map(|o| o.0),
        "gid": e.owner.map(|o| o.1),
        "link": e.link.map(|(d, i)| format!("{d}:{i}")),
        "xattrs": e.xattrs.map(|x| format!("{x:016x}")),
    });
    v.to_string()
}

/// Parses one line; Ok(None) for comments and blank lines. A line starting with `./` is a
/// bare path as fpart writes it (`fpart .`), taken verbatim: fpart does not escape, so its
/// names may hold backslashes, tabs and bytes that are not UTF-8. ferry's own paths never
/// start with `./`.
pub fn parse_bytes(line: &[u8]) -> Result<Option<Entry>, String> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    if let Some(bare) = line.strip_prefix(b"./") {
        if bare.is_empty() {
            return Ok(None);
        }
        return Ok(Some(Entry {
            path: bare.to_vec(),
            kind: Kind::File,
            size: None,
            mtime: None,
            md5: None,
            ..Default::default()
        }));
    }
    let text = std::str::from_utf8(line)
        .map_err(|_| "not UTF-8 (ferry manifests escape such bytes as \\xHH)".to_string())?;
    if text.ends_with('\r') {
        return Err(
            "line ends in CR LF (a Windows line ending); manifests end lines with LF only".into(),
        );
    }
    parse_line(text)
}

pub fn parse_line(line: &str) -> Result<Option<Entry>, String> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    if let Some(header) = line.strip_prefix("#ferry-manifest ") {
        let version = header.split(['\t', ' ']).next().unwrap_or_default();
        if version != "v1" && version != "v2" {
            return Err(format!(
                "unsupported manifest version {version:?} (this ferry reads v1 and v2)"
            ));
        }
        return Ok(None);
    }
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let mut fields = line.split('\t');
    let raw_path = fields.next().unwrap_or_default();
    let path = unescape_path(raw_path)?;
    let Some(kind) = fields.next() else {
        // A bare path without the `./` (fpart run on a relative directory name).
        return Ok(Some(Entry {
            path,
            kind: Kind::File,
            size: None,
            mtime: None,
            md5: None,
            ..Default::default()
        }));
    };
    let kind = Kind::parse(kind).ok_or_else(|| format!("bad type {kind:?}"))?;
    let size = fields.next().ok_or("missing size")?;
    let size = if size == "-" {
        None
    } else {
        Some(
            size.parse::<u64>()
                .map_err(|_| format!("bad size {size:?}"))?,
        )
    };
    let mtime = optional(fields.next(), "mtime", Mtime::parse)?;
    let md5 = optional(fields.next(), "md5", parse_md5_hex)?;
    // v2's columns; a v1 line ends before them.
    let mode = optional(fields.next(), "mode", |m| {
        u32::from_str_radix(m, 8).ok().filter(|&m| m <= 0o7777)
    })?;
    let owner = optional(fields.next(), "owner (uid:gid)", parse_pair::<u32>)?;
    let link = optional(fields.next(), "link (device:inode)", parse_pair::<u64>)?;
    let xattrs = optional(fields.next(), "xattrs digest", |x| {
        u64::from_str_radix(x, 16).ok().filter(|_| x.len() == 16)
    })?;
    if fields.next().is_some() {
        return Err("too many fields".into());
    }
    Ok(Some(Entry {
        path,
        kind,
        size,
        mtime,
        md5,
        mode,
        owner,
        link,
        xattrs,
    }))
}

/// Streams entries from a manifest file without holding it in memory. An end record, where
/// there is one, must agree with what was read and be the last line.
pub struct Reader<R> {
    inner: R,
    line: Vec<u8>,
    lineno: u64,
    name: String,
    /// The header said v1: its lines end after the md5 field.
    v1: bool,
    /// What was read so far, and what the end record said, once read.
    read: Tally,
    end: Option<Tally>,
    /// The end record is required: its absence is an error at the end of the file.
    whole: bool,
    /// An error ended the reading: nothing follows it.
    done: bool,
}

impl Reader<io::BufReader<std::fs::File>> {
    /// An error names the file.
    pub fn open(path: &std::path::Path) -> io::Result<Self> {
        let f = std::fs::File::open(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot read {}: {e}", path.display()))
        })?;
        Ok(Reader::new(
            io::BufReader::with_capacity(1 << 20, f),
            path.display().to_string(),
        ))
    }

    /// A manifest something may be deleted on the strength of: one whose listing is known to
    /// have completed (`whole`).
    pub fn open_whole(path: &std::path::Path) -> io::Result<Self> {
        Ok(Reader::open(path)?.whole())
    }
}

/// Longest line accepted. Paths are at most 4 KiB on Linux and 1,024 characters as blob names;
/// escaped, that stays far below this. A longer line is an error, never an allocation without end.
pub const MAX_LINE: usize = 64 * 1024;

impl<R: BufRead> Reader<R> {
    pub fn new(inner: R, name: String) -> Self {
        Reader {
            inner,
            line: Vec::new(),
            lineno: 0,
            name,
            v1: false,
            read: Tally::default(),
            end: None,
            whole: false,
            done: false,
        }
    }

    /// Requires the end record: a manifest that lacks it (its listing failed or was cut short)
    /// yields an error after its last entry, so that nothing is decided on part of a listing.
    pub fn whole(mut self) -> Self {
        self.whole = true;
        self
    }

    fn fail(&mut self, e: String) -> Option<Result<Entry, String>> {
        self.done = true;
        Some(Err(e))
    }

    /// At the end of the file: an error where the end record was required and is missing.
    fn at_end(&mut self) -> Option<Result<Entry, String>> {
        if self.whole && self.end.is_none() {
            return self.fail(format!(
                "{}: no end record ({END}): the listing that wrote it did not complete, or the file was cut short; nothing may be deleted on its strength: list again",
                self.name
            ));
        }
        self.done = true;
        None
    }

    /// An end record read at line `lineno`: it must count what was read.
    fn check_end(&mut self, end: Result<Tally, String>) -> Option<Result<Entry, String>> {
        let at = format!("{}:{}", self.name, self.lineno);
        match end {
            Err(e) => self.fail(format!("{at}: {e}")),
            Ok(_) if self.end.is_some() => self.fail(format!("{at}: a second end record")),
            Ok(end) if end != self.read => self.fail(format!(
                "{at}: the end record counts {} entries ({} bytes) but {} entries ({} bytes) were read: the file was changed or cut; list again",
                end.entries, end.bytes, self.read.entries, self.read.bytes
            )),
            Ok(end) => {
                self.end = Some(end);
                None
            }
        }
    }

    /// The number of the line the last entry came from.
    pub fn lineno(&self) -> u64 {
        self.lineno
    }
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<Entry, String>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            self.line.clear();
            match (&mut self.inner)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut self.line)
            {
                Ok(0) => return self.at_end(),
                Ok(_) => {}
                Err(e) => return Some(Err(format!("{}: {e}", self.name))),
            }
            self.lineno += 1;
            if let Some(end) = Tally::parse_end(&self.line) {
                match self.check_end(end) {
                    None => continue,
                    failed => return failed,
                }
            }
            if self.line.len() > MAX_LINE {
                return Some(Err(format!(
                    "{}:{}: line longer than {} KiB",
                    self.name,
                    self.lineno,
                    MAX_LINE / 1024
                )));
            }
            if self.line.starts_with(b"#ferry-manifest v1") {
                self.v1 = true;
            }
            let fields = self.line.iter().filter(|&&b| b == b'\t').count() + 1;
            if self.v1
                && fields > 5
                && !self.line.starts_with(b"#")
                && !self.line.starts_with(b"./")
            {
                return Some(Err(format!(
                    "{}:{}: too many fields ({fields}; a v1 manifest has five)",
                    self.name, self.lineno
                )));
            }
            match parse_bytes(&self.line) {
                Ok(None) => continue,
                Ok(Some(_)) if self.end.is_some() => {
                    let at = format!("{}:{}", self.name, self.lineno);
                    return self.fail(format!("{at}: an entry after the end record"));
                }
                Ok(Some(e)) => {
                    self.read.add(&e);
                    return Some(Ok(e));
                }
                Err(e) => return Some(Err(format!("{}:{}: {e}", self.name, self.lineno))),
            }
        }
    }
}

/// Buffered manifest writer; writes the header first and, on `finish` alone, the end record:
/// a writer dropped on an error leaves a manifest that says it is not whole.
pub struct Writer<W: Write> {
    out: W,
    buf: String,
    tally: Tally,
}

impl<W: Write> Writer<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        writeln!(out, "{HEADER}")?;
        Ok(Writer {
            out,
            buf: String::with_capacity(256),
            tally: Tally::default(),
        })
    }
    pub fn write(&mut self, e: &Entry) -> io::Result<()> {
        self.buf.clear();
        format_tsv(e, &mut self.buf);
        self.tally.add(e);
        self.out.write_all(self.buf.as_bytes())
    }
    /// Ends the manifest: the end record, then a flush.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(self.tally.end_line().as_bytes())?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_that_cannot_be_opened_is_named() {
        let missing = std::path::Path::new("/nonexistent/listing.tsv");
        let e = Reader::open(missing).err().expect("no such file");
        assert!(e.to_string().contains("/nonexistent/listing.tsv"), "{e}");
    }

    fn written(entries: &[Entry]) -> Vec<u8> {
        let mut w = Writer::new(Vec::new()).unwrap();
        for e in entries {
            w.write(e).unwrap();
        }
        w.finish().unwrap()
    }

    fn read_whole(bytes: Vec<u8>) -> Result<Vec<Entry>, String> {
        Reader::new(io::Cursor::new(bytes), "m.tsv".into())
            .whole()
            .collect()
    }

    #[test]
    fn a_manifest_ends_with_its_counts_and_reads_back_whole() {
        let entries = [Entry::file("a", 3), Entry::file("b/c", 4)];
        let bytes = written(&entries);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.ends_with("\n#ferry-end\tentries=2\tbytes=7\n"),
            "{text}"
        );
        assert_eq!(read_whole(bytes).unwrap(), entries);
        assert_eq!(read_whole(written(&[])).unwrap(), vec![]);
    }

    #[test]
    fn a_manifest_that_is_not_whole_is_refused_where_it_must_be() {
        let whole = written(&[Entry::file("a", 3), Entry::file("b", 4)]);
        let text = String::from_utf8(whole).unwrap();
        let cut = text
            .lines()
            .take(2)
            .map(|l| format!("{l}\n"))
            .collect::<String>();
        // A reader that deletes nothing reads a manifest without the record as before.
        let lenient: Result<Vec<_>, _> =
            Reader::new(io::Cursor::new(cut.clone()), "m.tsv".into()).collect();
        assert_eq!(lenient.unwrap().len(), 1);
        let e = read_whole(cut.into_bytes()).unwrap_err();
        assert!(
            e.starts_with("m.tsv: no end record") && e.contains("list again"),
            "{e}"
        );
        // The record must count what was read, whoever reads it, and be last.
        let dropped = text.replacen("a\tf\t3", "#a\tf\t3", 1);
        let e = Reader::new(io::Cursor::new(dropped), "m.tsv".into())
            .collect::<Result<Vec<_>, _>>()
            .unwrap_err();
        assert!(
            e.contains("counts 2 entries (7 bytes) but 1 entries (4 bytes)"),
            "{e}"
        );
        let e = read_whole(format!("{text}z\tf\t1\t-\t-\n").into_bytes()).unwrap_err();
        assert!(e.contains("after the end record"), "{e}");
        for bad in ["#ferry-end\tentries=x\tbytes=0", "#ferry-end\tbytes=0"] {
            let e = read_whole(format!("{HEADER}\n{bad}\n").into_bytes()).unwrap_err();
            assert!(e.contains("bad end record"), "{e}");
        }
        // Keys a later format adds are read past.
        let later = format!("{HEADER}\n#ferry-end\tentries=0\tbytes=0\tfiles=0\n");
        assert!(read_whole(later.into_bytes()).unwrap().is_empty());
    }

    #[test]
    fn odd_names_round_trip() {
        let names: Vec<&[u8]> = vec![
            b"plain.txt",
            b"with space",
            b"tab\there",
            b"new\nline",
            b"back\\slash",
            b"-leading-dash",
            b"#hash-first",
            b"dir/#not-first-component",
            b"caf\xc3\xa9",
            b"bad\xff\xfeutf8",
            b"\\x41 literal",
            b"cr\r",
        ];
        for n in names {
            let e = Entry {
                path: n.to_vec(),
                kind: Kind::File,
                size: Some(7),
                mtime: Mtime::parse("12.5"),
                md5: Some([0xab; 16]),
                mode: Some(0o4755),
                owner: Some((1000, 100)),
                link: Some((2049, 77)),
                xattrs: Some(0xfe),
            };
            let mut line = String::new();
            format_tsv(&e, &mut line);
            assert_eq!(line.matches('\n').count(), 1, "{line:?}");
            assert!(!line.starts_with('#'));
            assert_eq!(parse_line(&line).unwrap().unwrap(), e, "{line:?}");
        }
    }

    #[test]
    fn mtime_text_round_trips() {
        for s in ["0.000000000", "1700000000.123456789", "-5.250000000"] {
            assert_eq!(Mtime::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(
            Mtime::parse("3.5").unwrap(),
            Mtime {
                secs: 3,
                nanos: 500_000_000
            }
        );
        assert!(Mtime::parse("3.1234567891").is_none());
        let t = std::time::UNIX_EPOCH - std::time::Duration::from_millis(1500);
        let m = Mtime::from_system(t);
        assert_eq!(
            m,
            Mtime {
                secs: -2,
                nanos: 500_000_000
            }
        );
        assert_eq!(m.to_system(), t);
    }

    #[test]
    fn bare_paths_from_fpart_are_verbatim() {
        for raw in [
            &b"./a/b c\n"[..],
            b"./back\\slash\\n",
            b"./tab\there",
            b"./bad\xffbyte",
        ] {
            let e = parse_bytes(raw).unwrap().unwrap();
            assert_eq!(
                e.path,
                raw[2..].strip_suffix(b"\n").unwrap_or(&raw[2..]),
                "{raw:?}"
            );
            assert_eq!(e.size, None);
        }
        assert!(parse_bytes(b"not\xffutf8\tf\t1\t-\t-").is_err());
    }

    #[test]
    fn comments_and_errors() {
        assert_eq!(parse_line(HEADER).unwrap(), None);
        assert_eq!(parse_line("\n").unwrap(), None);
        assert!(parse_line("a\tf\tnotanumber\t-\t-").is_err());
        assert!(parse_line("a\tx\t1\t-\t-").is_err());
        assert!(parse_line("a\\q\tf\t1\t-\t-").is_err());
    }

    #[test]
    fn hostile_lines_are_errors_not_panics() {
        // 32 bytes, but 3-byte characters: slicing by bytes would split one.
        let md5 = format!("{}ab", "€".repeat(10));
        assert!(parse_line(&format!("a\tf\t1\t-\t{md5}"))
            .unwrap_err()
            .contains("bad md5"));
        assert!(parse_bytes(b"a\tf\t1\t-\t-\r\n")
            .unwrap_err()
            .contains("CR LF"));
        assert!(parse_line("#ferry-manifest v3\tpath")
            .unwrap_err()
            .contains("v3"));
        assert!(parse_line("a\tf\t1\t-\t-\t0999\t-\t-\t-")
            .unwrap_err()
            .contains("bad mode"));
        assert!(parse_line("a\tf\t1\t-\t-\t0644\t12\t-\t-")
            .unwrap_err()
            .contains("bad owner"));
        assert!(parse_line("a\tf\t1\t-\t-\t0644\t1:2\t-\t-\tx")
            .unwrap_err()
            .contains("too many"));
        assert!(parse_line("\\x4").is_err());
        assert!(parse_line("\\xzz\tf\t1\t-\t-").is_err());
        assert!(parse_line("\\x+1\tf\t1\t-\t-").is_err());
        let mut long = vec![b'a'; MAX_LINE + 10];
        long.push(b'\n');
        long.extend_from_slice(b"b\tf\t1\t-\t-\n");
        let mut r = Reader::new(io::Cursor::new(long), "m".into());
        assert!(r
            .next()
            .unwrap()
            .unwrap_err()
            .starts_with("m:1: line longer"));
    }
}
