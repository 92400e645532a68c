//! Refuses a source and a destination where one contains the other: a prune would delete the
//! source's own files, a copy would nest one level deeper on every run. Decided on what the
//! paths are on disk — symlinks resolved, bind mounts traced back to the directory they show —
//! never on how they are spelt. There is no override: a typo must not be able to reach one.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::location::{BlobLocation, Location};

/// An error naming both roots when one lies inside the other (or they are one).
pub fn refuse(src: &Location, dst: &Location) -> anyhow::Result<()> {
    let inside = match (src, dst) {
        (Location::Local(s), Location::Local(d)) => local(s, d),
        (Location::Blob(s), Location::Blob(d)) => blob(s, d),
        _ => None,
    };
    match inside {
        None => Ok(()),
        Some(how) => anyhow::bail!(
            "the source {} and the destination {} overlap ({how}): a copy would nest into itself and a prune would delete the source's own files; choose roots apart",
            src,
            dst
        ),
    }
}

fn blob(s: &BlobLocation, d: &BlobLocation) -> Option<&'static str> {
    if (&s.endpoint, &s.account, &s.container) != (&d.endpoint, &d.account, &d.container) {
        return None;
    }
    let key = |p: &str| p.trim_matches('/').to_string();
    within(Path::new(&key(&s.prefix)), Path::new(&key(&d.prefix)))
}

/// Where `p` is on disk: the filesystem (its device number in /proc/self/mountinfo) and the
/// path inside that filesystem, and whether `p` exists. A missing tail (a destination not made
/// yet) is kept as written below its nearest existing ancestor.
fn physical(p: &Path, mounts: &[Mount]) -> io::Result<(String, PathBuf, bool)> {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    };
    let mut existing = abs.as_path();
    let mut tail = Vec::new();
    let canon = loop {
        match std::fs::canonicalize(existing) {
            Ok(c) => break c,
            Err(_) => {
                let (Some(parent), Some(name)) = (existing.parent(), existing.file_name()) else {
                    return Err(io::Error::other(format!("cannot resolve {}", p.display())));
                };
                tail.push(name.to_owned());
                existing = parent;
            }
        }
    };
    let exists = tail.is_empty();
    let mut full = canon;
    for name in tail.into_iter().rev() {
        full.push(name);
    }
    // The mount the path is on: the longest mount point above it, the last one of that length
    // (a later mount hides an earlier one on the same point).
    let mount = mounts
        .iter()
        .filter(|m| full.starts_with(&m.point))
        .max_by_key(|m| (m.point.components().count(), m.order));
    Ok(match mount {
        Some(m) => (
            m.device.clone(),
            m.root
                .join(full.strip_prefix(&m.point).unwrap_or(Path::new(""))),
            exists,
        ),
        None => (String::new(), full, exists),
    })
}

fn local(s: &Path, d: &Path) -> Option<&'static str> {
    // One file named as the source is written under one name: into its own directory, or one
    // above, is a copy like any other.
    if std::fs::metadata(s).is_ok_and(|m| !m.is_dir()) {
        return None;
    }
    // On a network filesystem each look is a round trip: a destination not made yet costs
    // one, in resolving it.
    let mounts = mounts();
    let (Ok((sd, sp, _)), Ok((dd, dp, d_exists))) = (physical(s, &mounts), physical(d, &mounts))
    else {
        return None;
    };
    // The same directory by device and inode (a bind mount of it, a symlink to it).
    if let (true, Ok(a), Ok(b)) = (d_exists, std::fs::metadata(s), std::fs::metadata(d)) {
        if (a.dev(), a.ino()) == (b.dev(), b.ino()) {
            return Some("they are the same directory");
        }
    }
    if sd != dd {
        return None;
    }
    within(&sp, &dp)
}

/// Paths compare by component (`Path`'s equality and `starts_with`), so `data` is not within
/// `data2`.
fn within(s: &Path, d: &Path) -> Option<&'static str> {
    if s == d {
        Some("they are the same place")
    } else if d.starts_with(s) {
        Some("the destination is inside the source")
    } else if s.starts_with(d) {
        Some("the source is inside the destination")
    } else {
        None
    }
}

struct Mount {
    device: String,
    root: PathBuf,
    point: PathBuf,
    order: usize,
}

/// /proc/self/mountinfo: "id parent major:minor root mount-point ...", paths with spaces,
/// tabs, newlines and backslashes written as octal escapes.
fn mounts() -> Vec<Mount> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .enumerate()
        .filter_map(|(order, line)| {
            let f: Vec<&str> = line.split(' ').collect();
            Some(Mount {
                device: f.get(2)?.to_string(),
                root: PathBuf::from(unescape(f.get(3)?)),
                point: PathBuf::from(unescape(f.get(4)?)),
                order,
            })
        })
        .collect()
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push(u8::from_str_radix(&s[i + 1..i + 4], 8).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(p: &Path) -> Location {
        Location::Local(p.to_path_buf())
    }

    #[test]
    fn nested_roots_are_refused_however_spelt() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        std::fs::create_dir_all(src.join("inner")).unwrap();
        std::fs::create_dir(t.path().join("apart")).unwrap();
        std::os::unix::fs::symlink(&src, t.path().join("alias")).unwrap();
        let refused = |s: &Path, d: &Path| refuse(&loc(s), &loc(d)).is_err();
        assert!(refused(&src, &src.join("inner")), "destination inside");
        assert!(refused(&src.join("inner"), &src), "source inside");
        assert!(
            refused(&src, &src.join("not/made/yet")),
            "a destination not made yet, inside"
        );
        assert!(
            refused(&src, &t.path().join("alias/inner")),
            "inside, through a symlink"
        );
        assert!(
            refused(&t.path().join("alias"), &src),
            "the same, through a symlink"
        );
        assert!(refused(&src, &src.join("inner/../inner/x")), "dot-dot");
        assert!(!refused(&src, &t.path().join("apart")));
        assert!(
            !refused(&src, &t.path().join("src-sibling")),
            "a common prefix of the name is not containment"
        );
        let e = refuse(&loc(&src), &loc(&src.join("inner")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("inside the source"), "{e}");
    }

    #[test]
    fn blob_prefixes_nest_by_segment() {
        let b = |p: &str| {
            Location::Blob(BlobLocation {
                endpoint: "http://h".into(),
                account: "a".into(),
                container: "c".into(),
                prefix: p.into(),
                sas: None,
            })
        };
        assert!(refuse(&b("data"), &b("data/copy")).is_err());
        assert!(refuse(&b(""), &b("x")).is_err());
        assert!(refuse(&b("data/"), &b("data")).is_err());
        assert!(refuse(&b("data"), &b("data2")).is_ok());
        let mut other = BlobLocation {
            endpoint: "http://h".into(),
            account: "a".into(),
            container: "d".into(),
            prefix: "data/copy".into(),
            sas: None,
        };
        assert!(refuse(&b("data"), &Location::Blob(other.clone())).is_ok());
        other.container = "c".into();
        assert!(refuse(&b("data"), &Location::Blob(other)).is_err());
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape(r"/mnt/with\040space\134x"), "/mnt/with space\\x");
    }
}
