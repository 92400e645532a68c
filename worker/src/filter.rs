//! `--include`/`--exclude` globs and `--shard i/N`, applied to listings before any transfer.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::manifest::Entry;

pub struct Filter {
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
}

fn build(globs: &[String]) -> Result<Option<GlobSet>, String> {
    if globs.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for g in globs {
        // A pattern without '/' matches a name at any depth, as rsync and azcopy read it.
        let pattern = if g.contains('/') {
            g.clone()
        } else {
            format!("**/{g}")
        };
        b.add(
            GlobBuilder::new(&pattern)
                .literal_separator(true)
                .build()
                .map_err(|e| format!("bad glob {g:?}: {e}"))?,
        );
    }
    b.build().map(Some).map_err(|e| e.to_string())
}

impl Filter {
    pub fn new(include: &[String], exclude: &[String]) -> Result<Self, String> {
        Ok(Filter {
            include: build(include)?,
            exclude: build(exclude)?,
        })
    }

    pub fn matches(&self, path: &[u8]) -> bool {
        let p = Path::new(OsStr::from_bytes(path));
        self.include.as_ref().is_none_or(|g| g.is_match(p))
            && !self.exclude.as_ref().is_some_and(|g| g.is_match(p))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("--shard takes INDEX/COUNT, e.g. 0/4 (got {s:?})"))?;
        let index: usize = i
            .trim()
            .parse()
            .map_err(|_| format!("bad shard index {i:?}"))?;
        let count: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("bad shard count {n:?}"))?;
        if count == 0 {
            return Err("shard count must be at least 1".into());
        }
        if index >= count {
            return Err(format!("shard index {index} must be < count {count}"));
        }
        Ok(Shard { index, count })
    }
}

/// Keeps this shard's share of `entries` by the same LPT split `ferry partition --parts` makes,
/// so every cooperating process, given the same listing, computes the same owner for each file.
pub fn shard(entries: Vec<Entry>, s: Shard) -> Vec<Entry> {
    if s.count == 1 {
        return entries;
    }
    let owner = crate::partition::lpt_assign(&entries, s.count);
    entries
        .into_iter()
        .zip(owner)
        .filter(|(_, o)| *o == s.index)
        .map(|(e, _)| e)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_exclude() {
        let f = Filter::new(&["*.rs".into()], &["target/**".into()]).unwrap();
        assert!(f.matches(b"main.rs"));
        assert!(f.matches(b"src/deep/lib.rs"));
        assert!(!f.matches(b"target/x.rs"));
        assert!(!f.matches(b"README.md"));
        assert!(Filter::new(&[], &[]).unwrap().matches(b"anything"));
        assert!(Filter::new(&["[".into()], &[]).is_err());
    }

    #[test]
    fn shard_parsing() {
        assert_eq!(
            "1/4".parse::<Shard>().unwrap(),
            Shard { index: 1, count: 4 }
        );
        assert_eq!(
            "4/4".parse::<Shard>().unwrap_err(),
            "shard index 4 must be < count 4"
        );
        assert!("x".parse::<Shard>().is_err());
        assert!("0/0".parse::<Shard>().is_err());
    }

    #[test]
    fn shards_cover_everything_once() {
        let entries: Vec<Entry> = (0..100u64)
            .map(|i| Entry::file(format!("f{i}"), i * 37 % 11))
            .collect();
        let mut seen: Vec<Vec<u8>> = (0..3)
            .flat_map(|i| shard(entries.clone(), Shard { index: i, count: 3 }))
            .map(|e| e.path)
            .collect();
        seen.sort();
        let mut all: Vec<Vec<u8>> = entries.into_iter().map(|e| e.path).collect();
        all.sort();
        assert_eq!(seen, all);
    }
}
