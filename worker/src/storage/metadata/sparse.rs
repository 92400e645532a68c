//! That a blob's file was sparse at the source, in its metadata (`ferry_sparse`): the file's
//! data extents, `data:START+LENGTH,...` in bytes and in order (`data:` alone: no data at
//! all), where they fit in the room the blob's other metadata leaves; `zeros` where they do
//! not (the file had holes, where is not known). No key: the file had none.

use crate::sparse::Sparse;

pub const KEY: &str = "ferry_sparse";

const ZEROS: &str = "zeros";

pub fn encode(s: &Sparse) -> String {
    match s {
        Sparse::Zeros => ZEROS.into(),
        Sparse::Extents(x) => {
            let list: Vec<String> = x.iter().map(|(s, l)| format!("{s}+{l}")).collect();
            format!("data:{}", list.join(","))
        }
    }
}

/// The longest value stored beside a `ferry_xattrs` value of `xattrs`: the two keys share the
/// 7 KiB `xattrs::ROOM` is cut from (the rest is the POSIX keys' and the user's). `zeros`
/// always fits in that rest.
pub fn room(xattrs: Option<&str>) -> usize {
    let shared = super::xattrs::ROOM + super::xattrs::KEY.len();
    let taken = xattrs.map_or(0, |v| super::xattrs::KEY.len() + v.len());
    shared.saturating_sub(taken + KEY.len())
}

/// `s` as it is stored in `room` bytes of value: its extents where they fit, else `Zeros`.
pub fn within(s: Sparse, room: usize) -> Sparse {
    match &s {
        Sparse::Extents(_) if encode(&s).len() > room => Sparse::Zeros,
        _ => s,
    }
}

/// The layout a value stands for; None if it is not one ferry wrote (then nothing is made a
/// hole).
pub fn decode(value: &str) -> Option<Sparse> {
    let value = value.trim();
    if value == ZEROS {
        return Some(Sparse::Zeros);
    }
    let list = value.strip_prefix("data:")?;
    let mut extents: Vec<(u64, u64)> = Vec::new();
    for x in list.split(',').filter(|x| !x.is_empty()) {
        let (s, l) = x.split_once('+')?;
        let (s, l): (u64, u64) = (s.parse().ok()?, l.parse().ok()?);
        // In order and apart, as SEEK_DATA gives them: anything else is not ferry's.
        if extents.last().is_some_and(|&(ps, pl)| ps + pl > s) || s.checked_add(l).is_none() {
            return None;
        }
        extents.push((s, l));
    }
    Some(Sparse::Extents(extents))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_round_trip_and_what_does_not_fit_is_only_sparse() {
        let x = Sparse::Extents(vec![(0, 4096), (1 << 30, 12)]);
        assert_eq!(encode(&x), "data:0+4096,1073741824+12");
        assert_eq!(decode(&encode(&x)), Some(x.clone()));
        assert_eq!(decode("data:"), Some(Sparse::Extents(vec![])));
        assert_eq!(decode(" zeros "), Some(Sparse::Zeros));
        assert_eq!(within(x.clone(), 25), x);
        assert_eq!(within(x, 24), Sparse::Zeros);
        assert_eq!(within(Sparse::Zeros, 0), Sparse::Zeros);
        for bad in [
            "",
            "data:1",
            "data:0+10,5+1",
            "data:x+1",
            "holes",
            "data:1+18446744073709551615",
        ] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
