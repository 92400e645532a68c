//! The key space of paths (bytes, in the manifest's order): its ranges (`Cuts`, `Range`, which
//! the stores list by), the quantiles a carried listing keeps to cut the next pass by, and names
//! read as numbers, from one sorted page of them: where a name stands among the names that share
//! the page's stem, and which name stands at a given place. The Blob lister cuts the rest of a
//! container by it (storage/azure/list.rs); a first pass's shard scan weighs by it what a full
//! page of a directory leaves unread (shard.rs).

use crate::manifest;

/// Digits read of each name after the cut position: enough for f64 and for any page's spread.
const DIGITS: usize = 10;

/// No key made holds a character from here up after the prefix (see `Scale::new`).
pub const SAFE: char = '\u{e000}';

/// The page's names as numbers in [0, 1).
pub struct Scale<'a> {
    /// Where the first digit starts.
    at: usize,
    /// What every name of the page and every key made shares: `last` up to the first digit.
    stem: &'a str,
    alphabet: Vec<char>,
    base: f64,
}

impl<'a> Scale<'a> {
    /// From the last character `first` and `last` share (so the next value of that character is
    /// in reach), each character is a digit, its rank among the characters the page's names use
    /// there. The service orders names by UTF-16 code units, Rust by UTF-8 bytes; the two disagree
    /// only between a character above U+FFFF and one in U+E000..=U+FFFF, so a key holds no
    /// character from U+E000 up after `prefix` (which every name shares), and a name falls in the
    /// same range whichever order decides. None when the page's names use fewer than two
    /// characters there: nothing to read them by.
    pub fn new<'n>(
        prefix: &str,
        names: impl Iterator<Item = &'n str>,
        first: &str,
        last: &'a str,
    ) -> Option<Scale<'a>> {
        let rest = &last[prefix.len()..];
        let safe_end = prefix.len()
            + rest
                .char_indices()
                .find(|(_, c)| *c >= SAFE)
                .map_or(rest.len(), |(i, _)| i);
        // Where the last character `first` and `last` share starts: the first digit.
        let mut at = prefix.len();
        for ((i, a), b) in last.char_indices().zip(first.chars()) {
            if a != b {
                break;
            }
            at = i;
        }
        let at = at.max(prefix.len()).min(safe_end);
        let mut alphabet: Vec<char> = names
            .flat_map(|n| n.get(at..).unwrap_or("").chars().take(DIGITS))
            .filter(|c| *c < SAFE)
            .collect();
        alphabet.sort_unstable();
        alphabet.dedup();
        // Digit 0 is a name's end (a shorter name sorts first); 1..=n the alphabet.
        (alphabet.len() >= 2).then(|| Scale {
            at,
            stem: &last[..at],
            base: (alphabet.len() + 1) as f64,
            alphabet,
        })
    }

    pub fn at(&self) -> usize {
        self.at
    }

    pub fn stem(&self) -> &'a str {
        self.stem
    }

    pub fn value(&self, name: &str) -> f64 {
        let mut chars = name.get(self.at..).unwrap_or("").chars();
        let mut x = 0.0;
        let mut unit = 1.0;
        for _ in 0..DIGITS {
            unit /= self.base;
            match chars.next().map(|c| self.alphabet.binary_search(&c)) {
                None => break,
                Some(Ok(r)) => x += (r + 1) as f64 * unit,
                // A character the page did not use sorts after every name under the one below
                // it and before any under the one above: the latter's start (past the last, the
                // next value up) is where it stands, whatever follows it.
                Some(Err(r)) => {
                    x += (r + 1) as f64 * unit;
                    break;
                }
            }
        }
        x
    }

    /// The key that stands at `x`.
    pub fn key(&self, x: f64) -> String {
        let mut s = String::from(self.stem);
        let mut rest = x;
        for _ in 0..DIGITS {
            rest *= self.base;
            let digit = (rest.floor() as usize).min(self.alphabet.len());
            rest -= digit as f64;
            if digit == 0 {
                break;
            }
            s.push(self.alphabet[digit - 1]);
        }
        s
    }
}

/// Keys kept of a carried listing to cut the next pass by: cuts land within 1/`QUANTILES` of the
/// tree of where an even split by entries would put them.
pub const QUANTILES: usize = 256;

/// The key space cut into ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cuts {
    keys: Vec<Vec<u8>>,
}

/// `[lo, hi)`; None: unbounded on that side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Range {
    pub lo: Option<Vec<u8>>,
    pub hi: Option<Vec<u8>>,
}

impl Cuts {
    pub fn new(keys: Vec<Vec<u8>>) -> Cuts {
        debug_assert!(keys.windows(2).all(|w| w[0] <= w[1]));
        Cuts { keys }
    }

    pub fn jobs(&self) -> usize {
        self.keys.len() + 1
    }

    pub fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    /// Range `k`, 1-based.
    pub fn range(&self, k: usize) -> Range {
        assert!(
            (1..=self.jobs()).contains(&k),
            "shard {k} of {}",
            self.jobs()
        );
        Range {
            lo: (k > 1).then(|| self.keys[k - 2].clone()),
            hi: self.keys.get(k - 1).cloned(),
        }
    }
}

impl Range {
    pub fn contains(&self, path: &[u8]) -> bool {
        self.lo.as_deref().is_none_or(|lo| path >= lo)
            && self.hi.as_deref().is_none_or(|hi| path < hi)
    }

    /// Whether anything below directory `dir` can fall in the range: every path under it lies
    /// in `[dir/, dir0)` ('0' follows '/').
    pub fn meets_subtree(&self, dir: &[u8]) -> bool {
        let mut first = dir.to_vec();
        first.push(b'/');
        let mut past = dir.to_vec();
        past.push(b'/' + 1);
        self.hi.as_deref().is_none_or(|hi| first.as_slice() < hi)
            && self.lo.as_deref().is_none_or(|lo| lo < past.as_slice())
    }
}

/// Keys of a sorted stream at about even counts, in bounded memory whatever its length: every
/// `every`-th key, the spacing doubled (and every other key dropped) when too many are kept.
#[derive(Debug)]
pub struct Quantiles {
    every: u64,
    seen: u64,
    keys: Vec<Vec<u8>>,
}

impl Default for Quantiles {
    fn default() -> Self {
        Quantiles {
            every: 1,
            seen: 0,
            keys: Vec::new(),
        }
    }
}

impl Quantiles {
    pub fn push(&mut self, path: &[u8]) {
        if self.seen.is_multiple_of(self.every) {
            self.keys.push(path.to_vec());
            if self.keys.len() >= 2 * QUANTILES {
                self.keys = self.keys.drain(..).step_by(2).collect();
                self.every *= 2;
            }
        }
        self.seen += 1;
    }

    /// Escaped as in a manifest, for the carried state's document.
    pub fn finish(self) -> Vec<String> {
        self.keys.iter().map(|k| manifest::escape_path(k)).collect()
    }
}
