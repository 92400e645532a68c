//! A name that is both an object and a directory: a store without directories (Blob storage)
//! may hold blob `a` and blob `a/x` at once; a filesystem cannot. Where such a source is copied
//! into a tree, the directory wins, every pass alike: the names beneath `a` are kept, blob `a`
//! is not copied and is named as a failure (exit 1), and nothing a pass wrote at either name is
//! removed to make room for the other (`message`). Blob → Blob keeps both; an upload from a
//! tree never meets one.

use crate::manifest::{escape_path, Entry, Kind};

/// What a run says of object `path` left out for the names beneath it (`beneath`, one of them).
pub fn message(path: &[u8], beneath: &[u8]) -> String {
    format!(
        "name conflict: {} is an object and also a directory holding {} (and maybe more): \
         the directory is kept, the object not copied; rename or remove one of them at the source",
        escape_path(path),
        escape_path(beneath),
    )
}

/// Takes out of `entries` every object with names beneath it, and returns each with one of
/// those names, in path order.
pub fn take_shadowed(entries: &mut Vec<Entry>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut paths: Vec<&[u8]> = entries.iter().map(|e| e.path.as_slice()).collect();
    paths.sort_unstable();
    let mut found = Vec::new();
    for e in entries.iter().filter(|e| e.kind != Kind::Dir) {
        let mut dir = e.path.clone();
        dir.push(b'/');
        let i = paths.partition_point(|p| *p < dir.as_slice());
        if let Some(p) = paths.get(i).filter(|p| p.starts_with(&dir)) {
            found.push((e.path.clone(), p.to_vec()));
        }
    }
    found.sort();
    entries.retain(|e| {
        e.kind == Kind::Dir || found.binary_search_by(|(p, _)| p.cmp(&e.path)).is_err()
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_wins() {
        let mut entries: Vec<Entry> = ["a/x", "a", "a-1", "b", "ab/c", "a.txt"]
            .into_iter()
            .map(|p| Entry::file(p, 1))
            .collect();
        entries.push(Entry {
            kind: Kind::Dir,
            ..Entry::file("ab", 0)
        });
        let found = take_shadowed(&mut entries);
        assert_eq!(found, vec![(b"a".to_vec(), b"a/x".to_vec())]);
        let mut left: Vec<&[u8]> = entries.iter().map(|e| e.path.as_slice()).collect();
        left.sort();
        assert_eq!(left, [&b"a-1"[..], b"a.txt", b"a/x", b"ab", b"ab/c", b"b"]);
    }
}
