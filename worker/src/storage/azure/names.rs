//! How a relative path becomes a blob name and back.
//!
//! The Blob service rewrites some names: a backslash becomes '/', and segments ending in '.' or
//! holding control characters are documented as unsafe. Uploading names as they are let `k\v`
//! and `k/v` land on one blob, and a prune then deleted the only copy of a file because its blob
//! sat under another name. So each '/'-separated segment is mapped reversibly, as rclone's
//! azureblob backend does by default (`Slash,BackSlash,Del,Ctl,RightPeriod,InvalidUtf8`, its
//! `lib/encoder`) but for `InvalidUtf8`, so that a tree written by either tool reads back the
//! same in the other:
//!
//! | in a segment | becomes |
//! |---|---|
//! | NUL, 0x01–0x1F | U+2400–U+241F (`␀`…`␟`) |
//! | DEL 0x7F | U+2421 `␡` |
//! | `\` | U+FF3C `＼` |
//! | `/` (never in a segment ferry sees) | U+FF0F `／` |
//! | `.` as the segment's last character | U+FF0E `．` |
//! | any of those replacements itself (`．` only as the last character), and the quote U+201B `‛` | `‛` before it |
//!
//! rclone's `InvalidUtf8` (a byte of a non-UTF-8 name as `‛XX`) is not written: such a name is
//! refused (`NameError::NotUtf8`), and a blob spelling one does not decode (`NotCanonical`).
//!
//! Refused before anything is sent, too (`check`): a name holding U+FFFE or U+FFFF, which the
//! service stores but cannot put in the XML of a listing, so that every listing of the prefix
//! fails after it; and a whole name past the service's limits (`MAX_CHARS`, `MAX_SEGMENTS`),
//! which would otherwise be left to the service to refuse, or not.
//!
//! Decoding is strict: a blob name that encoding would not have produced (a raw control
//! character, a bare trailing '.', a quote before nothing it quotes...) is refused rather than
//! read as the nearest path, because two blobs would then stand for one path and a prune or a
//! second pass would act on the wrong one.

use crate::error::StoreError;

/// Put before a replacement character that stands for itself.
const QUOTE: char = '\u{201B}';
/// Control character c is written as `SYMBOLS + c` (rclone's "SYMBOL FOR NULL" block).
const SYMBOLS: u32 = 0x2400;
const SYMBOL_DEL: char = '\u{2421}';
const FULL_BACKSLASH: char = '\u{FF3C}';
const FULL_SLASH: char = '\u{FF0F}';
const FULL_STOP: char = '\u{FF0E}';

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("name is not valid UTF-8; blob names must be Unicode")]
    NotUtf8,
    #[error("blob {0:?} is not a name ferry's (and rclone's) name encoding writes, so it stands for no path; rename it")]
    NotCanonical(String),
    #[error("blob {0:?} stands for a path with a '.' or '..' segment")]
    DotSegment(String),
    #[error("name holds {0}, which the Blob service stores but cannot list (its listings are XML): every listing of the prefix would fail after it; rename it")]
    NotListable(&'static str),
    #[error("blob name is {0} characters long; the Blob service allows at most {MAX_CHARS}: shorten the path")]
    TooLong(usize),
    #[error("blob name has {0} '/'-separated segments; the Blob service allows at most {MAX_SEGMENTS}: flatten the path")]
    TooDeep(usize),
}

/// The service's limits on a whole blob name, the container's root prefix included.
pub const MAX_CHARS: usize = 1024;
pub const MAX_SEGMENTS: usize = 254;

/// Characters XML 1.0 has no place for that a name can still hold after encoding (the control
/// characters are encoded away).
fn unlistable(c: char) -> Option<&'static str> {
    match c {
        '\u{FFFE}' => Some("U+FFFE"),
        '\u{FFFF}' => Some("U+FFFF"),
        _ => None,
    }
}

/// A whole blob name (root prefix and encoded path) refused where the service could not keep
/// or list it.
pub fn check(name: &str) -> Result<(), NameError> {
    if let Some(what) = name.chars().find_map(unlistable) {
        return Err(NameError::NotListable(what));
    }
    let chars = name.chars().count();
    if chars > MAX_CHARS {
        return Err(NameError::TooLong(chars));
    }
    let segments = name.split('/').count();
    if segments > MAX_SEGMENTS {
        return Err(NameError::TooDeep(segments));
    }
    Ok(())
}

impl From<NameError> for StoreError {
    fn from(e: NameError) -> Self {
        StoreError::Invalid(e.to_string())
    }
}

fn control_symbol(c: char) -> Option<char> {
    match c {
        '\0'..='\x1f' => char::from_u32(SYMBOLS + c as u32),
        '\x7f' => Some(SYMBOL_DEL),
        _ => None,
    }
}

/// A character that stands for another in an encoded segment (the trailing full stop apart).
fn is_replacement(c: char) -> bool {
    matches!(c, FULL_BACKSLASH | FULL_SLASH | SYMBOL_DEL | QUOTE)
        || (SYMBOLS..SYMBOLS + 0x20).contains(&(c as u32))
}

fn encode_segment(seg: &str, out: &mut String) {
    let (body, last) = match seg.chars().next_back() {
        Some(c @ ('.' | FULL_STOP)) => (&seg[..seg.len() - c.len_utf8()], Some(c)),
        _ => (seg, None),
    };
    for c in body.chars() {
        if let Some(s) = control_symbol(c) {
            out.push(s);
            continue;
        }
        match c {
            '\\' => out.push(FULL_BACKSLASH),
            '/' => out.push(FULL_SLASH),
            c if is_replacement(c) => {
                out.push(QUOTE);
                out.push(c);
            }
            c => out.push(c),
        }
    }
    match last {
        Some('.') => out.push(FULL_STOP),
        Some(c) => {
            out.push(QUOTE);
            out.push(c);
        }
        None => {}
    }
}

/// One segment read back, left to right: every replacement stands for its original, a quoted one
/// for itself. rclone reads a final '．' before anything else, so it takes `x‛‛．` (the encoding
/// of `x‛.`) for `x‛．`; reading in order gets it right, and agrees with rclone on every other
/// name. It accepts names encoding never writes; `decode` refuses those.
fn decode_segment(seg: &str, out: &mut String) {
    let mut chars = seg.chars().peekable();
    while let Some(c) = chars.next() {
        let last = chars.peek().is_none();
        match c {
            QUOTE => match chars.next() {
                Some(q) if is_replacement(q) || (q == FULL_STOP && chars.peek().is_none()) => {
                    out.push(q)
                }
                Some(q) => {
                    out.push(QUOTE);
                    out.push(q);
                }
                None => out.push(QUOTE),
            },
            FULL_STOP if last => out.push('.'),
            FULL_BACKSLASH => out.push('\\'),
            FULL_SLASH => out.push('/'),
            SYMBOL_DEL => out.push('\x7f'),
            c if is_replacement(c) => out.push(char::from_u32(c as u32 - SYMBOLS).unwrap_or(c)),
            c => out.push(c),
        }
    }
}

/// The blob name (below the store's root) of the relative path `rel`.
pub fn encode(rel: &[u8]) -> Result<String, NameError> {
    let rel = std::str::from_utf8(rel).map_err(|_| NameError::NotUtf8)?;
    let mut out = String::with_capacity(rel.len() + 8);
    for (i, seg) in rel.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        encode_segment(seg, &mut out);
    }
    Ok(out)
}

/// Whether `name` may hold something encoding changes; most names do not, and are their own
/// path.
fn plain(name: &str) -> bool {
    !name.split('/').any(|s| s.ends_with('.'))
        && !name.chars().any(|c| {
            control_symbol(c).is_some() || c == '\\' || c == FULL_STOP || is_replacement(c)
        })
}

/// The relative path a blob name (below the store's root) stands for.
pub fn decode(name: &str) -> Result<Vec<u8>, NameError> {
    let path = if plain(name) {
        name.to_string()
    } else {
        let mut path = String::with_capacity(name.len());
        for (i, seg) in name.split('/').enumerate() {
            if i > 0 {
                path.push('/');
            }
            decode_segment(seg, &mut path);
        }
        if encode(path.as_bytes())? != name {
            return Err(NameError::NotCanonical(name.to_string()));
        }
        path
    };
    if path.split('/').any(|s| s == "." || s == "..") {
        return Err(NameError::DotSegment(name.to_string()));
    }
    Ok(path.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(s: &str) -> String {
        encode(s.as_bytes()).unwrap()
    }

    #[test]
    fn names_map_as_rclone_maps_them() {
        for (raw, blob) in [
            ("plain/name.txt", "plain/name.txt"),
            ("k\\v", "k＼v"),
            ("a\tb", "a␉b"),
            ("a\x01b", "a␁b"),
            ("nul\0", "nul␀"),
            ("del\x7f", "del␡"),
            ("name.", "name．"),
            ("dir./x", "dir．/x"),
            ("dots...", "dots..．"),
            (".hidden", ".hidden"),
            ("mid.dle", "mid.dle"),
            ("lit＼eral", "lit‛＼eral"),
            ("lit／slash", "lit‛／slash"),
            ("sym␉bol", "sym‛␉bol"),
            ("sym␀", "sym‛␀"),
            ("sym␡", "sym‛␡"),
            ("quote‛", "quote‛‛"),
            ("full．", "full‛．"),
            ("full．stop", "full．stop"),
            ("quote‛.", "quote‛‛．"),
            ("‼", "‼"),
            ("  spaces  ", "  spaces  "),
            ("", ""),
        ] {
            assert_eq!(enc(raw), blob, "encoding {raw:?}");
            assert_eq!(decode(blob).unwrap(), raw.as_bytes(), "decoding {blob:?}");
        }
    }

    #[test]
    fn a_backslash_and_a_slash_never_share_a_blob() {
        assert_ne!(enc("k\\v"), enc("k/v"));
        assert_eq!(decode(&enc("k\\v")).unwrap(), b"k\\v");
        assert_eq!(decode(&enc("k/v")).unwrap(), b"k/v");
    }

    #[test]
    fn names_encoding_never_writes_are_refused() {
        for name in [
            "x.",
            "dir./x",
            "a\tb",
            "a\\b",
            "a\x7f",
            "lone‛quote",
            "‛x",
            "trail‛",
            "a‛．b",
        ] {
            assert!(
                matches!(decode(name), Err(NameError::NotCanonical(_))),
                "{name:?} -> {:?}",
                decode(name)
            );
        }
    }

    #[test]
    fn dot_segments_are_refused_both_ways_round() {
        assert!(matches!(decode("a/．/b"), Err(NameError::DotSegment(_))));
        assert!(matches!(decode(".．"), Err(NameError::DotSegment(_))));
    }

    #[test]
    fn non_utf8_names_are_refused() {
        assert_eq!(encode(b"bad\xff"), Err(NameError::NotUtf8));
    }

    #[test]
    fn names_the_service_cannot_keep_or_list_are_refused() {
        assert_eq!(check("a\u{FFFE}b"), Err(NameError::NotListable("U+FFFE")));
        assert_eq!(check("d/\u{FFFF}"), Err(NameError::NotListable("U+FFFF")));
        assert_eq!(check(&"é".repeat(MAX_CHARS)), Ok(()));
        assert_eq!(
            check(&"x".repeat(MAX_CHARS + 1)),
            Err(NameError::TooLong(1025))
        );
        let deep = vec!["d"; MAX_SEGMENTS].join("/");
        assert_eq!(check(&deep), Ok(()));
        assert_eq!(check(&format!("{deep}/f")), Err(NameError::TooDeep(255)));
    }

    /// Every character that matters to the mapping, and a few that must pass untouched.
    const ALPHABET: &[char] = &[
        'a', 'Z', '.', '/', '\\', '\0', '\t', '\n', '\r', '\x01', '\x1f', '\x7f', ' ', '‛', '‼',
        '＼', '／', '．', '␀', '␁', '␉', '␟', '␠', '␡', '␢', 'é', '😀',
    ];

    fn random_name(rng: &mut fastrand::Rng) -> String {
        (0..rng.usize(0..12))
            .map(|_| ALPHABET[rng.usize(..ALPHABET.len())])
            .collect()
    }

    #[test]
    fn encoding_is_a_bijection_over_many_odd_names() {
        let mut rng = fastrand::Rng::with_seed(34);
        let mut seen = std::collections::HashMap::new();
        for _ in 0..200_000 {
            let raw = random_name(&mut rng);
            let blob = enc(&raw);
            // Nothing the service would rewrite or mark unsafe is left in an encoded segment.
            assert!(
                !blob.contains('\\') && !blob.chars().any(|c| control_symbol(c).is_some()),
                "{raw:?} -> {blob:?}"
            );
            assert!(
                !blob.split('/').any(|s| s.ends_with('.')),
                "{raw:?} -> {blob:?}"
            );
            assert_eq!(
                blob.matches('/').count(),
                raw.matches('/').count(),
                "{raw:?} -> {blob:?}"
            );
            if raw.split('/').any(|s| s == "." || s == "..") {
                assert!(decode(&blob).is_err());
                continue;
            }
            assert_eq!(
                decode(&blob).unwrap(),
                raw.as_bytes(),
                "{raw:?} -> {blob:?}"
            );
            if let Some(other) = seen.insert(blob.clone(), raw.clone()) {
                assert_eq!(other, raw, "two names on one blob {blob:?}");
            }
        }
    }

    #[test]
    fn whatever_decodes_encodes_back_to_itself() {
        let mut rng = fastrand::Rng::with_seed(35);
        for _ in 0..200_000 {
            let name = random_name(&mut rng);
            if let Ok(path) = decode(&name) {
                assert_eq!(
                    encode(&path).unwrap(),
                    name,
                    "{name:?} -> {:?}",
                    String::from_utf8_lossy(&path)
                );
            }
        }
    }
}
