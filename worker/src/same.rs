//! The one rule for "is this the same file?", used by `plan`, `copy`, `verify` and `prune`:
//! what a listing of each side says decides whether an entry's bytes must be sent again, only
//! its metadata set, or nothing at all.

use crate::manifest::{Entry, Kind, Mtime};

/// How two listings tell that a file's bytes changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compare {
    /// The same size is the same bytes.
    Size,
    /// The same size and modification time (rsync's quick check).
    SizeMtime,
    /// The same content MD5 (hashes local files; uses Content-MD5 on blobs).
    Md5,
    /// Never the same: always copy.
    None,
}

impl Compare {
    pub fn name(self) -> &'static str {
        match self {
            Compare::Size => "size",
            Compare::SizeMtime => "size-mtime",
            Compare::Md5 => "md5",
            Compare::None => "none",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing at the destination's name.
    New,
    /// Something of another kind there (a directory where a file goes, a file where a symlink
    /// goes...): it is removed, then the entry written.
    TypeChanged,
    /// The bytes differ.
    Changed,
    /// The listings cannot tell whether the bytes differ: hashes can (`--compare md5`), or
    /// the entry is copied.
    Undecided,
    /// The bytes are the same but mode, owner, mtime (of a directory or node) or extended
    /// attributes are not: only those are set.
    MetaOnly,
    Same,
}

impl Verdict {
    /// Whether the bytes (or the node) must be written again.
    pub fn rewrites(self) -> bool {
        matches!(
            self,
            Verdict::New | Verdict::TypeChanged | Verdict::Changed | Verdict::Undecided
        )
    }
}

/// Which attributes beyond the bytes are compared (and so carried): `--preserve`'s choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attrs {
    pub mode: bool,
    pub owner: bool,
    pub xattrs: bool,
    /// A file's or symlink's mtime, where the bytes are told apart by something else (MD5,
    /// a symlink's target): then a newer mtime alone is set, not ignored.
    pub times: bool,
    /// A directory's mtime, where the destination keeps it apart from what the directory holds
    /// (a folder stub in Blob storage, which nothing written into the folder moves).
    pub dir_times: bool,
}

impl Attrs {
    /// The bytes alone (`ferry names --held`: the replication carries no other attribute).
    pub const NONE: Attrs = Attrs {
        mode: false,
        owner: false,
        xattrs: false,
        times: false,
        dir_times: false,
    };
}

/// Below this the difference is noise from printing or storing fewer digits (other tools keep
/// microseconds, or seven digits), not a change.
const MTIME_TOLERANCE_NS: i128 = 1_000;

fn nanos(m: Mtime) -> i128 {
    m.secs as i128 * 1_000_000_000 + m.nanos as i128
}

fn same_mtime(a: Option<Mtime>, b: Option<Mtime>) -> Option<bool> {
    match (a, b) {
        (Some(a), Some(b)) => Some((nanos(a) - nanos(b)).abs() <= MTIME_TOLERANCE_NS),
        _ => None,
    }
}

/// The mtime a blob stands for: the one its metadata stores, unless ferry recorded the
/// Content-MD5 it wrote (`written_md5`) and the blob's is now another or none. Then another tool
/// rewrote the bytes and kept the metadata (blobfuse2 edits in place so, at the same size), the
/// stored mtime describes bytes that are gone, and the blob's Last-Modified, the time of the
/// rewrite, stands instead: the blob then differs from every copy ferry made by its mtime, and
/// is changed to each comparison but size alone, whichever side of a pass it is on. A rewrite
/// that drops the metadata too has only its Last-Modified, with the same effect.
pub fn blob_mtime(
    stored: Option<Mtime>,
    written_md5: Option<[u8; 16]>,
    content_md5: Option<[u8; 16]>,
    last_modified: Option<Mtime>,
) -> Option<Mtime> {
    match written_md5 {
        Some(w) if content_md5 != Some(w) => last_modified,
        _ => stored.or(last_modified),
    }
}

/// Whether the bytes of two entries of one kind are the same, as far as listings tell.
fn bytes(src: &Entry, dst: &Entry, compare: Compare) -> Verdict {
    // A symlink's `md5` is its target's (local listings read it; a symlink blob holds the target):
    // it decides whatever the length and mtime, so `libfoo.so.1.2.3` → `.1.2.4`, written in the
    // same second, is carried.
    if src.kind == Kind::Symlink && compare != Compare::None {
        if let (Some(a), Some(b)) = (src.md5, dst.md5) {
            return if a == b {
                Verdict::Same
            } else {
                Verdict::Changed
            };
        }
    }
    let (Some(s), Some(d)) = (src.size, dst.size) else {
        return Verdict::Undecided;
    };
    if s != d {
        return Verdict::Changed;
    }
    match compare {
        Compare::None => Verdict::Changed,
        Compare::Size => Verdict::Same,
        // Only equality is trusted: a destination that records upload time instead of the
        // source's mtime makes everything undecided, never wrongly skipped.
        Compare::SizeMtime => match same_mtime(src.mtime, dst.mtime) {
            Some(true) => Verdict::Same,
            _ => Verdict::Undecided,
        },
        Compare::Md5 => match (src.md5, dst.md5) {
            (Some(a), Some(b)) if a == b => Verdict::Same,
            (Some(_), Some(_)) => Verdict::Changed,
            _ => Verdict::Undecided,
        },
    }
}

/// Whether the attributes `attrs` names differ where both sides know them.
pub fn meta_differs(src: &Entry, dst: &Entry, attrs: Attrs) -> bool {
    meta_difference(src, dst, attrs).is_some()
}

/// The first attribute `attrs` names that differs where both sides know it, said for a person.
pub fn meta_difference(src: &Entry, dst: &Entry, attrs: Attrs) -> Option<String> {
    match (src.mode, dst.mode) {
        (Some(a), Some(b)) if attrs.mode && a != b => {
            return Some(format!("mode {a:04o} != {b:04o}"))
        }
        _ => {}
    }
    match (src.owner, dst.owner) {
        (Some(a), Some(b)) if attrs.owner && a != b => {
            return Some(format!("owner {}:{} != {}:{}", a.0, a.1, b.0, b.1))
        }
        _ => {}
    }
    match (src.xattrs, dst.xattrs) {
        (Some(a), Some(b)) if attrs.xattrs && a != b => {
            Some("extended attributes or ACLs differ".to_string())
        }
        _ => None,
    }
}

/// `meta_difference`, and the mtime too: what `verify --metadata` checks once the bytes are
/// known to be the same. A directory's too where `attrs.dir_times` says it is settled, unlike
/// `classify`: a copy of a whole tree sets each after its entries, and a prune after its
/// deletions, so the end of a migration has the source's (a pipeline's parts write into one
/// directory in no order, and its prune puts the source's back).
pub fn full_difference(src: &Entry, dst: &Entry, attrs: Attrs) -> Option<String> {
    let settled = src.kind != Kind::Dir || attrs.dir_times;
    if settled && same_mtime(src.mtime, dst.mtime) == Some(false) {
        let (a, b) = (src.mtime.expect("compared"), dst.mtime.expect("compared"));
        return Some(format!("mtime {a} != {b}"));
    }
    meta_difference(src, dst, attrs)
}

/// Whether a file is one of several names (hard links) on one side and a name of its own on the
/// other, for `verify --metadata`. A copy does not mend it where the bytes are the same (as
/// rsync -H: a link broken at the source with both halves unchanged stays linked), so it is
/// named here, where a person can act on it.
pub fn link_difference(src: &Entry, dst: &Entry) -> Option<String> {
    match (src.link.is_some(), dst.link.is_some()) {
        (true, false) => Some("hard-linked at the source, a single name at the destination".into()),
        (false, true) => Some("a single name at the source, hard-linked at the destination".into()),
        _ => None,
    }
}

/// The verdict for source entry `src` against what the destination holds at its name.
pub fn classify(src: &Entry, dst: Option<&Entry>, compare: Compare, attrs: Attrs) -> Verdict {
    let Some(dst) = dst else { return Verdict::New };
    if dst.kind != src.kind {
        return Verdict::TypeChanged;
    }
    let verdict = match src.kind {
        Kind::File | Kind::Symlink => bytes(src, dst, compare),
        // A directory has no bytes, and its mtime is not compared (but where `dir_times` says
        // the destination keeps it apart): it moves with every entry
        // made or removed in it, and the parallel jobs of a pipeline write into one directory
        // in no order, so the last of them sets it. Nodes likewise have only metadata.
        Kind::Dir | Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev => Verdict::Same,
    };
    match verdict {
        Verdict::Same if meta_differs(src, dst, attrs) => Verdict::MetaOnly,
        Verdict::Same if attrs.dir_times && dir_mtime_differs(src, dst) => Verdict::MetaOnly,
        Verdict::Same if attrs.times && mtime_alone_differs(src, dst, compare) => Verdict::MetaOnly,
        v => v,
    }
}

/// Whether a directory's kept mtime is not the source's: another one, or none at all (a Blob
/// prefix without its folder stub, which then gets one).
fn dir_mtime_differs(src: &Entry, dst: &Entry) -> bool {
    src.kind == Kind::Dir
        && match (src.mtime, dst.mtime) {
            (Some(_), None) => true,
            (a, b) => same_mtime(a, b) == Some(false),
        }
}

/// Whether bytes told the same by their MD5 (or a symlink's target) carry another mtime: size
/// and size-mtime comparisons never see one (the first by choice, the second calls it a change).
fn mtime_alone_differs(src: &Entry, dst: &Entry, compare: Compare) -> bool {
    let by_digest = compare == Compare::Md5
        || (src.kind == Kind::Symlink && src.md5.is_some() && dst.md5.is_some());
    by_digest
        && matches!(src.kind, Kind::File | Kind::Symlink)
        && same_mtime(src.mtime, dst.mtime) == Some(false)
}

/// An undecided verdict settled by the two sides' content hashes: unknown on either side is
/// copied, since copying is the only way to be sure.
pub fn by_hashes(
    src: &Entry,
    dst: &Entry,
    src_md5: Option<[u8; 16]>,
    dst_md5: Option<[u8; 16]>,
    attrs: Attrs,
) -> Verdict {
    match (src_md5, dst_md5) {
        (Some(a), Some(b))
            if a == b
                && (meta_differs(src, dst, attrs)
                    || (attrs.times && same_mtime(src.mtime, dst.mtime) == Some(false))) =>
        {
            Verdict::MetaOnly
        }
        (Some(a), Some(b)) if a == b => Verdict::Same,
        _ => Verdict::Changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(path: &str, size: Option<u64>, mtime: Option<&str>, md5: Option<u8>) -> Entry {
        Entry {
            path: path.into(),
            kind: Kind::File,
            size,
            mtime: mtime.and_then(Mtime::parse),
            md5: md5.map(|b| [b; 16]),
            ..Default::default()
        }
    }

    const ALL: Attrs = Attrs {
        mode: true,
        owner: true,
        xattrs: true,
        times: true,
        dir_times: false,
    };

    #[test]
    fn bytes_follow_the_comparison() {
        use Verdict::*;
        let src = f("a", Some(5), Some("100.000000000"), Some(1));
        let dir = Entry {
            kind: Kind::Dir,
            ..f("a", Some(0), None, None)
        };
        assert_eq!(classify(&src, None, Compare::Size, ALL), New);
        assert_eq!(
            classify(&src, Some(&dir), Compare::Size, ALL),
            TypeChanged,
            "a directory in the way is replaced"
        );
        assert_eq!(
            classify(&dir, Some(&src), Compare::Size, ALL),
            TypeChanged,
            "a file in the way is replaced"
        );
        assert_eq!(
            classify(&src, Some(&f("a", None, None, None)), Compare::Size, ALL),
            Undecided
        );
        assert_eq!(
            classify(&f("a", None, None, None), Some(&src), Compare::Size, ALL),
            Undecided
        );
        for c in [
            Compare::Size,
            Compare::SizeMtime,
            Compare::Md5,
            Compare::None,
        ] {
            assert_eq!(
                classify(&src, Some(&f("a", Some(6), Some("100"), Some(1))), c, ALL),
                Changed
            );
        }
        assert_eq!(
            classify(&src, Some(&src.clone()), Compare::None, ALL),
            Changed
        );
        assert_eq!(
            classify(
                &src,
                Some(&f("a", Some(5), Some("7"), Some(2))),
                Compare::Size,
                ALL
            ),
            Same
        );
        // size-mtime: equal within a microsecond, else undecided (never changed, never same).
        assert_eq!(
            classify(
                &src,
                Some(&f("a", Some(5), Some("100.000001"), None)),
                Compare::SizeMtime,
                ALL
            ),
            Same
        );
        assert_eq!(
            classify(
                &src,
                Some(&f("a", Some(5), Some("99.999999"), None)),
                Compare::SizeMtime,
                ALL
            ),
            Same
        );
        assert_eq!(
            classify(
                &src,
                Some(&f("a", Some(5), Some("100.000001001"), None)),
                Compare::SizeMtime,
                ALL
            ),
            Undecided
        );
        assert_eq!(
            classify(
                &src,
                Some(&f("a", Some(5), Some("200"), None)),
                Compare::SizeMtime,
                ALL
            ),
            Undecided
        );
        assert_eq!(
            classify(
                &src,
                Some(&f("a", Some(5), None, None)),
                Compare::SizeMtime,
                ALL
            ),
            Undecided
        );
        // md5: both known decide; one missing is undecided.
        assert_eq!(
            classify(
                &src,
                Some(&f("a", Some(5), None, Some(1))),
                Compare::Md5,
                ALL
            ),
            Same
        );
        assert_eq!(
            classify(
                &src,
                Some(&f("a", Some(5), None, Some(2))),
                Compare::Md5,
                ALL
            ),
            Changed
        );
        assert_eq!(
            classify(&src, Some(&f("a", Some(5), None, None)), Compare::Md5, ALL),
            Undecided
        );
    }

    #[test]
    fn a_symlink_is_told_by_its_target() {
        use Verdict::*;
        let link = |target: &[u8], mtime: &str| Entry {
            kind: Kind::Symlink,
            md5: Some(crate::hash::digest(target)),
            ..f("l", Some(target.len() as u64), Some(mtime), None)
        };
        let old = link(b"libfoo.so.1.2.3", "100");
        for c in [Compare::Size, Compare::SizeMtime, Compare::Md5] {
            assert_eq!(
                classify(&link(b"libfoo.so.1.2.4", "100"), Some(&old), c, ALL),
                Changed,
                "{c:?}"
            );
            assert_eq!(classify(&old.clone(), Some(&old), c, ALL), Same, "{c:?}");
            assert_eq!(
                classify(&link(b"libfoo.so.1.2.3", "200"), Some(&old), c, ALL),
                MetaOnly,
                "{c:?}: a touched link"
            );
            assert_eq!(
                classify(&link(b"libfoo.so.1.2.3", "200"), Some(&old), c, Attrs::NONE),
                Same,
                "{c:?}"
            );
        }
        // A target not read on one side: the size and mtime rules, as for a file.
        let unread = Entry {
            md5: None,
            ..old.clone()
        };
        assert_eq!(
            classify(
                &link(b"libfoo.so.1.2.4", "100"),
                Some(&unread),
                Compare::SizeMtime,
                ALL
            ),
            Same
        );
    }

    #[test]
    fn a_blob_rewritten_by_another_tool_has_the_mtime_of_the_rewrite() {
        let (stored, rewrite) = (Mtime::parse("100"), Mtime::parse("500"));
        let (ours, theirs) = (Some([1; 16]), Some([2; 16]));
        assert_eq!(
            blob_mtime(stored, ours, ours, rewrite),
            stored,
            "as written"
        );
        assert_eq!(
            blob_mtime(stored, ours, theirs, rewrite),
            rewrite,
            "new bytes"
        );
        assert_eq!(blob_mtime(stored, ours, None, rewrite), rewrite, "MD5 gone");
        assert_eq!(
            blob_mtime(None, None, None, rewrite),
            rewrite,
            "metadata gone"
        );
        assert_eq!(
            blob_mtime(stored, None, theirs, rewrite),
            stored,
            "no record: another tool's blob, its mtime trusted"
        );
    }

    #[test]
    fn an_mtime_alone_is_set_when_md5_tells_the_bytes() {
        use Verdict::*;
        let src = f("a", Some(5), Some("200"), Some(1));
        let dst = f("a", Some(5), Some("100"), Some(1));
        assert_eq!(classify(&src, Some(&dst), Compare::Md5, ALL), MetaOnly);
        assert_eq!(
            classify(&src, Some(&dst), Compare::Md5, Attrs::NONE),
            Same,
            "times not kept"
        );
        assert_eq!(
            classify(&src, Some(&dst), Compare::Size, ALL),
            Same,
            "size alone, by choice"
        );
        assert_eq!(
            classify(&src, Some(&dst), Compare::SizeMtime, ALL),
            Undecided
        );
        assert_eq!(
            by_hashes(&src, &dst, Some([1; 16]), Some([1; 16]), ALL),
            MetaOnly
        );
        assert_eq!(
            by_hashes(&src, &dst, Some([1; 16]), Some([1; 16]), Attrs::NONE),
            Same
        );
    }

    #[test]
    fn metadata_alone_is_a_metadata_update() {
        use Verdict::*;
        let src = Entry {
            mode: Some(0o640),
            owner: Some((1, 2)),
            xattrs: Some(9),
            ..f("a", Some(5), Some("100"), None)
        };
        let same = classify(&src, Some(&src.clone()), Compare::SizeMtime, ALL);
        assert_eq!(same, Same);
        for dst in [
            Entry {
                mode: Some(0o644),
                ..src.clone()
            },
            Entry {
                owner: Some((1, 3)),
                ..src.clone()
            },
            Entry {
                xattrs: Some(8),
                ..src.clone()
            },
        ] {
            assert_eq!(
                classify(&src, Some(&dst), Compare::SizeMtime, ALL),
                MetaOnly,
                "{dst:?}"
            );
            assert_eq!(
                classify(&src, Some(&dst), Compare::SizeMtime, Attrs::NONE),
                Same,
                "not kept, not compared"
            );
        }
        // Unknown on one side is no difference (a blob without POSIX metadata).
        let bare = Entry {
            mode: None,
            owner: None,
            xattrs: None,
            ..src.clone()
        };
        assert_eq!(classify(&src, Some(&bare), Compare::SizeMtime, ALL), Same);
        // Bytes that differ win over metadata.
        let longer = Entry {
            size: Some(6),
            mode: Some(0o600),
            ..src.clone()
        };
        assert_eq!(
            classify(&src, Some(&longer), Compare::SizeMtime, ALL),
            Changed
        );
        // A directory: its mode and owner, not its mtime.
        let d = Entry {
            kind: Kind::Dir,
            size: Some(0),
            ..src.clone()
        };
        assert_eq!(
            classify(
                &d,
                Some(&Entry {
                    mtime: Mtime::parse("5"),
                    ..d.clone()
                }),
                Compare::SizeMtime,
                ALL
            ),
            Same
        );
        assert_eq!(
            classify(
                &d,
                Some(&Entry {
                    mode: Some(0o700),
                    ..d.clone()
                }),
                Compare::SizeMtime,
                ALL
            ),
            MetaOnly
        );
        assert_eq!(classify(&d, Some(&d.clone()), Compare::Md5, ALL), Same);
        // A folder stub keeps its mtime apart: there it is compared, and a bare prefix has none.
        let stubs = Attrs {
            dir_times: true,
            ..ALL
        };
        let moved = Entry {
            mtime: Mtime::parse("5"),
            ..d.clone()
        };
        assert_eq!(
            classify(&d, Some(&moved), Compare::SizeMtime, stubs),
            MetaOnly
        );
        let prefix = Entry {
            mtime: None,
            ..d.clone()
        };
        assert_eq!(
            classify(&d, Some(&prefix), Compare::SizeMtime, stubs),
            MetaOnly
        );
        assert_eq!(
            classify(&d, Some(&d.clone()), Compare::SizeMtime, stubs),
            Same
        );
        assert_eq!(
            classify(&src, Some(&src.clone()), Compare::SizeMtime, stubs),
            Same
        );
    }
}
