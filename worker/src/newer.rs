//! The guard against writing older over newer: a copy that would replace a destination file
//! whose mtime is later than its source's, or a prune whose deletions are later than everything
//! the source holds, is the sign of swapped SOURCE and DEST or of someone writing at the
//! destination. `copy`, `plan` and `prune` judge it here, alike.

use std::io;

pub use crate::documents::plan::Newer;
use crate::manifest::{Entry, Kind, Mtime};
use crate::same::{Compare, Verdict};

/// A time with no fraction was kept to the second (Blob's Last-Modified, filesystems and tools
/// that keep seconds): it may be up to a second behind the one it stands for.
const SECOND_NS: i128 = 1_000_000_000;

/// Below a second, what `same` calls noise (microseconds printed, seven digits stored).
const FINE_NS: i128 = 1_000;

fn nanos(m: Mtime) -> i128 {
    m.secs as i128 * 1_000_000_000 + m.nanos as i128
}

/// Whether `dst` is later than `src` beyond the coarser granularity of the two.
pub fn later(src: Mtime, dst: Mtime) -> bool {
    let slack = match src.nanos == 0 || dst.nanos == 0 {
        true => SECOND_NS,
        false => FINE_NS,
    };
    nanos(dst) - nanos(src) > slack
}

/// Whether writing `src` over `dst` (as `verdict` decided under `compare`) replaces the bytes
/// of a file or symlink that is newer at the destination. Only where times are kept (`times`):
/// else every destination's mtime is the time of its copy, later than its source's by design.
/// Under `--compare md5` an undecided file is hashed on both sides before anything is written,
/// and the same bytes under an older mtime only take the mtime: not counted.
pub fn overwrites_newer(
    src: &Entry,
    dst: Option<&Entry>,
    (verdict, compare): (Verdict, Compare),
    times: bool,
) -> bool {
    let Some(dst) = dst else { return false };
    let rewrites = match verdict {
        Verdict::Changed => true,
        Verdict::Undecided => compare != Compare::Md5,
        _ => false,
    };
    times
        && rewrites
        && matches!(src.kind, Kind::File | Kind::Symlink)
        && dst.kind == src.kind
        && matches!((src.mtime, dst.mtime), (Some(s), Some(d)) if later(s, d))
}

/// The newest mtime of the files and symlinks seen: the source's, for prune's rule.
#[derive(Default, Clone, Copy)]
pub struct Newest(pub Option<Mtime>);

impl Newest {
    pub fn see(&mut self, e: &Entry) {
        if matches!(e.kind, Kind::File | Kind::Symlink) && e.mtime > self.0 {
            self.0 = e.mtime;
        }
    }

    /// Whether deleting `e` deletes something newer than everything seen (a source with no
    /// times says nothing).
    fn outdone_by(self, e: &Entry) -> bool {
        matches!((self.0, e.mtime), (Some(s), Some(d)) if later(s, d))
    }
}

impl Newer {
    pub fn note(&mut self, e: &Entry) {
        self.count += 1;
        if self.examples.len() < 3 {
            self.examples.push(e.display_path());
        }
    }

    /// The deletions among `entries` newer than `newest`, read through once.
    pub fn deletions(
        entries: impl Iterator<Item = io::Result<Entry>>,
        newest: Newest,
    ) -> io::Result<Newer> {
        let mut found = Newer::default();
        for e in entries {
            let e = e?;
            if matches!(e.kind, Kind::File | Kind::Symlink) && newest.outdone_by(&e) {
                found.note(&e);
            }
        }
        Ok(found)
    }

    fn examples(&self) -> String {
        let more = if self.count > 3 { ", …" } else { "" };
        format!("{}{more}", self.examples.join(", "))
    }

    /// Why a copy is refused (None: nothing newer, or `allowed`).
    pub fn copy_refusal(&self, allowed: bool) -> Option<String> {
        (self.count > 0 && !allowed).then(|| {
            format!(
                "{} destination files are newer than their source's: pass --overwrite-newer only to restore older versions (else SOURCE and DEST are swapped, or something writes at the destination); first: {}",
                self.count,
                self.examples()
            )
        })
    }

    /// Why a prune is refused (None: nothing newer, or `force`).
    pub fn prune_refusal(&self, force: bool) -> Option<String> {
        (self.count > 0 && !force).then(|| {
            format!(
                "{} files to delete are newer than everything at the source (SOURCE and DEST swapped, or something writing at the destination?): review with --dry-run, then pass --force if they really go; first: {}",
                self.count,
                self.examples()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(mtime: &str) -> Entry {
        Entry {
            path: b"f".to_vec(),
            kind: Kind::File,
            size: Some(1),
            mtime: Mtime::parse(mtime),
            ..Default::default()
        }
    }

    #[test]
    fn later_allows_the_coarser_granularity() {
        let t = |s| Mtime::parse(s).unwrap();
        assert!(later(t("100.000000001"), t("100.000002000")));
        assert!(!later(t("100.000000001"), t("100.000000900")), "noise");
        assert!(!later(t("100.400000000"), t("101")), "a second kept whole");
        assert!(later(t("100.400000000"), t("102")));
        assert!(!later(t("102"), t("100.5")));
    }

    #[test]
    fn only_a_rewrite_over_a_newer_file_counts() {
        let (old, new) = (file("100.5"), file("200.5"));
        let by = |v| (v, Compare::SizeMtime);
        assert!(overwrites_newer(
            &old,
            Some(&new),
            by(Verdict::Changed),
            true
        ));
        assert!(overwrites_newer(
            &old,
            Some(&new),
            by(Verdict::Undecided),
            true
        ));
        let hashed = (Verdict::Undecided, Compare::Md5);
        assert!(
            !overwrites_newer(&old, Some(&new), hashed, true),
            "hashes decide"
        );
        assert!(!overwrites_newer(&old, Some(&new), by(Verdict::Same), true));
        assert!(!overwrites_newer(
            &old,
            Some(&new),
            by(Verdict::Changed),
            false
        ));
        assert!(!overwrites_newer(
            &new,
            Some(&old),
            by(Verdict::Changed),
            true
        ));
        assert!(!overwrites_newer(&old, None, by(Verdict::New), true));
    }

    #[test]
    fn deletions_newer_than_the_newest_source_file() {
        let mut newest = Newest::default();
        newest.see(&file("150.5"));
        newest.see(&file("120.5"));
        let gone = [file("100.5"), file("300.5"), file("150.6")];
        let found = Newer::deletions(gone.into_iter().map(Ok), newest).unwrap();
        assert_eq!(found.count, 2);
        assert!(found.prune_refusal(false).unwrap().contains("--force"));
        assert!(found.prune_refusal(true).is_none());
    }
}
