//! Extended attributes and ACLs (which are attributes: `system.posix_acl_*`) in blob metadata.
//! Metadata names must be C# identifiers and all names and values of a blob together fit in
//! 8 KiB, so a file's kept attributes go as one value, `ferry_xattrs`: base64 of, per attribute
//! sorted by name, its name's length (u16, little-endian), the name, its value's length (u32,
//! little-endian) and the value. What does not fit within `ROOM` is not stored, and counted.

use std::ffi::CString;

use base64::Engine as _;

use crate::xattrs::Attrs;

pub const KEY: &str = "ferry_xattrs";

/// The value of `KEY` on an object whose entry had attributes that did not fit: they are not
/// known from the object (a listing says so), which a missing key would deny.
pub const NOT_KEPT: &str = "-";

/// The longest value stored: 8 KiB less a KiB for the POSIX keys and the user's own.
pub const ROOM: usize = 8192 - 1024 - KEY.len();

/// The value that stands for `attrs`; None when it would not fit in `ROOM`.
pub fn encode(attrs: &Attrs) -> Option<String> {
    let mut raw = Vec::new();
    for (name, value) in attrs {
        let name = name.as_bytes();
        raw.extend_from_slice(&u16::try_from(name.len()).ok()?.to_le_bytes());
        raw.extend_from_slice(name);
        raw.extend_from_slice(&u32::try_from(value.len()).ok()?.to_le_bytes());
        raw.extend_from_slice(value);
    }
    let value = base64::engine::general_purpose::STANDARD.encode(raw);
    (value.len() <= ROOM).then_some(value)
}

/// The attributes a value of `KEY` stands for; None if it is not one ferry wrote.
pub fn decode(value: &str) -> Option<Attrs> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()?;
    let mut rest = &raw[..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let mut take = |n: usize| -> Option<&[u8]> {
            let (a, b) = (rest.get(..n)?, rest.get(n..)?);
            rest = b;
            Some(a)
        };
        let len = take(2)?;
        let name = take(u16::from_le_bytes(len.try_into().ok()?) as usize)?.to_vec();
        let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let value = take(len)?.to_vec();
        out.push((CString::new(name).ok()?, value));
    }
    out.sort();
    Some(out)
}

/// The listing's digest (`Entry.xattrs`) of a blob's attributes, from its metadata `m`
/// (lowercased keys). A blob whose metadata records the POSIX attributes a tree keeps
/// (`records_posix`: a mode or an owner, as ferry, rclone and azcopy write them, `Posix::records_attributes`) but no `KEY` holds none, as `rsync -X` reads
/// a source without any: a download takes off what the destination still has. Without those keys
/// nothing is known of them (None); nor with a value ferry cannot read.
pub fn listed_digest(
    m: &std::collections::HashMap<String, String>,
    records_posix: bool,
) -> Option<u64> {
    match m.get(KEY) {
        Some(v) => decode(v).map(|a| crate::xattrs::digest(&a)),
        None if records_posix => Some(crate::xattrs::empty_digest()),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_and_what_is_too_big_is_refused() {
        let a = |n: &str, v: &[u8]| (CString::new(n).unwrap(), v.to_vec());
        let attrs = vec![
            a(
                "security.capability",
                &[1, 0, 0, 2, 0x20, 0, 0, 0, 0, 0, 0, 0],
            ),
            a("system.posix_acl_access", &[2, 0, 0, 0, 1, 0, 6, 0]),
            a("user.empty", b""),
            a("user.x", b"\x00\xffbinary"),
        ];
        assert_eq!(decode(&encode(&attrs).unwrap()), Some(attrs));
        assert_eq!(decode(&encode(&Vec::new()).unwrap()), Some(Vec::new()));
        assert_eq!(encode(&vec![a("user.big", &[7; ROOM])]), None);
        assert_eq!(decode("not base64!"), None);
        assert_eq!(decode("AQ=="), None, "cut short");
    }
}
