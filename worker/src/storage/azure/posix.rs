//! POSIX attributes in blob metadata. Blob storage has none of its own, so each tool that keeps
//! them made up keys, and a blob may come from any of them:
//!
//! | writer | mode | mtime | owner | kind |
//! |---|---|---|---|---|
//! | rclone (and ferry before) | `mode`: octal, type bits included | `mtime`: RFC 3339 | `uid`, `gid` | — |
//! | azcopy `--preserve-posix-properties` | `permissions`: st_mode in decimal | `modtime`: ns since the epoch | `posix_owner`, `posix_group` | `is_symlink`, `hdi_isfolder` |
//! | azcopy `--posix-properties-style amlfs` (Azure Managed Lustre's import) | `permissions`: 4 octal digits | `modtime`: `2006-01-02 15:04:05 -0700` | `owner`, `group` | as above |
//!
//! (blobfuse2 marks symlinks and folders with the same two keys.) Every style is read; ferry
//! writes rclone's keys and one of the other two, so rclone, azcopy and ferry itself all
//! restore what ferry stored.
//!
//! Beside them ferry records the Content-MD5 it wrote (`ferry_md5`, base64 as the property
//! itself): another tool that rewrites the bytes and keeps the metadata (blobfuse2 does) leaves
//! a Content-MD5 that disagrees with it, or none, and the stored mtime is then known to
//! describe bytes that are gone (`same::blob_mtime`).

use std::collections::HashMap;

use crate::manifest::{Kind, Mtime};
use crate::storage::Meta;

/// Which keys beside rclone's a blob gets (`--posix-style`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PosixStyle {
    /// azcopy's `--preserve-posix-properties` keys
    #[default]
    Standard,
    /// azcopy's `--posix-properties-style amlfs` keys, which Azure Managed Lustre imports
    Amlfs,
}

const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;
const S_IFLNK: u32 = 0o120000;

pub const SYMLINK_KEY: &str = "is_symlink";
pub const FOLDER_KEY: &str = "hdi_isfolder";
/// The Content-MD5 ferry gave the blob when it wrote it.
pub const WRITTEN_MD5_KEY: &str = "ferry_md5";

/// What a blob's metadata says about the node it stands for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Posix {
    pub mtime: Option<Mtime>,
    /// Permission, set-id and sticky bits only.
    pub mode: Option<u32>,
    pub owner: Option<(u32, u32)>,
    pub kind: Kind,
    /// The Content-MD5 ferry recorded when it wrote the blob (`WRITTEN_MD5_KEY`).
    pub written_md5: Option<[u8; 16]>,
}

impl Posix {
    /// Whether the blob records the attributes a tree keeps beyond its times (a mode or an
    /// owner): written by a tool that keeps them, so what it does not record is not there.
    pub fn records_attributes(&self) -> bool {
        self.mode.is_some() || self.owner.is_some()
    }
}

/// Metadata keys are case-insensitive; the service gives them back as they were written.
pub fn lowercased<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> HashMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect()
}

fn truthy(v: Option<&String>) -> bool {
    v.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// azcopy's `permissions`: AMLFS writes four octal digits; the standard style the whole st_mode
/// in decimal, which with its type bits is never under 4096, so never four digits or fewer.
fn permissions(v: &str) -> Option<u32> {
    let v = v.trim();
    match v.len() {
        1..=4 => u32::from_str_radix(v, 8).ok(),
        _ => v.parse().ok(),
    }
}

/// Reads every style. Where two say the same thing, rclone's keys win (ferry writes them
/// with nanoseconds), then azcopy's standard ones, then AMLFS's.
pub fn read(m: &HashMap<String, String>) -> Posix {
    let get = |k: &str| m.get(k).map(|v| v.trim());
    let st_mode = get("mode")
        .and_then(|v| u32::from_str_radix(v, 8).ok())
        .or_else(|| get("permissions").and_then(permissions));
    let mtime = get("mtime")
        .and_then(super::xml::parse_rfc3339)
        .or_else(|| get("modtime").and_then(|v| parse_nanos(v).or_else(|| parse_go_time(v))));
    let id = |a: &str, b: &str, c: &str| {
        get(a)
            .or_else(|| get(b))
            .or_else(|| get(c))
            .and_then(|v| v.parse::<u32>().ok())
    };
    let owner = id("uid", "posix_owner", "owner").zip(id("gid", "posix_group", "group"));
    // The markers first; then type bits, which AMLFS's four digits do not carry.
    let kind = if truthy(m.get(FOLDER_KEY)) {
        Kind::Dir
    } else if truthy(m.get(SYMLINK_KEY)) {
        Kind::Symlink
    } else {
        match st_mode.map(|s| s & S_IFMT) {
            Some(S_IFLNK) => Kind::Symlink,
            Some(S_IFDIR) => Kind::Dir,
            _ => Kind::File,
        }
    };
    Posix {
        mtime,
        mode: st_mode.map(|s| s & 0o7777),
        owner,
        kind,
        written_md5: get(WRITTEN_MD5_KEY).and_then(super::xml::decode_md5),
    }
}

/// The metadata for a node of `kind` with attributes `meta`, in rclone's keys and `style`'s.
pub fn write(meta: &Meta, kind: Kind, style: PosixStyle) -> HashMap<String, String> {
    let mut m = HashMap::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.to_string(), v);
    };
    let type_bits = match kind {
        Kind::Dir => S_IFDIR,
        Kind::Symlink => S_IFLNK,
        _ => S_IFREG,
    };
    if let Some(md5) = meta.md5 {
        put(WRITTEN_MD5_KEY, b64(&md5));
    }
    if let Some(s) = &meta.sparse {
        put(
            crate::storage::metadata::sparse::KEY,
            crate::storage::metadata::sparse::encode(s),
        );
    }
    match kind {
        Kind::Dir => put(FOLDER_KEY, "true".into()),
        Kind::Symlink => put(SYMLINK_KEY, "true".into()),
        _ => {}
    }
    if let Some(t) = meta.mtime {
        put("mtime", super::xml::format_rfc3339(t));
        match style {
            PosixStyle::Standard => put("modtime", format_nanos(t)),
            PosixStyle::Amlfs => put("modtime", format_go_time(t)),
        }
    }
    if let Some(mode) = meta.mode {
        let mode = mode & 0o7777;
        put("mode", format!("{:o}", type_bits | mode));
        match style {
            PosixStyle::Standard => put("permissions", (type_bits | mode).to_string()),
            PosixStyle::Amlfs => put("permissions", format!("{mode:04o}")),
        }
    }
    if let (Some(uid), Some(gid)) = (meta.uid, meta.gid) {
        put("uid", uid.to_string());
        put("gid", gid.to_string());
        let (o, g) = match style {
            PosixStyle::Standard => ("posix_owner", "posix_group"),
            PosixStyle::Amlfs => ("owner", "group"),
        };
        put(o, uid.to_string());
        put(g, gid.to_string());
    }
    m
}

/// The keys of each attribute in every style.
const MTIME_KEYS: [&str; 2] = ["mtime", "modtime"];
const MODE_KEYS: [&str; 2] = ["mode", "permissions"];
const OWNER_KEYS: [&str; 6] = ["uid", "gid", "posix_owner", "posix_group", "owner", "group"];
/// What says which kind of node a blob is: azcopy's `is_char_dev` and friends describe the
/// node too (and azcopy sets `is_char_dev` on symlinks by mistake).
const KIND_KEYS: [&str; 5] = [
    SYMLINK_KEY,
    FOLDER_KEY,
    "is_char_dev",
    "is_block_dev",
    "is_fifo",
];

/// The blob's metadata `current` after setting the attributes `meta` has on a node of `kind`:
/// each attribute given replaces its keys of every style, and every other key (the user's own,
/// an attribute not given) stays as it was.
pub fn replaced(
    current: &HashMap<String, String>,
    meta: &Meta,
    kind: Kind,
    style: PosixStyle,
) -> HashMap<String, String> {
    let mut gone: Vec<&str> = KIND_KEYS.to_vec();
    if meta.mtime.is_some() {
        gone.extend(MTIME_KEYS);
    }
    if meta.mode.is_some() {
        gone.extend(MODE_KEYS);
    }
    if meta.uid.is_some() && meta.gid.is_some() {
        gone.extend(OWNER_KEYS);
    }
    let mut out: HashMap<String, String> = current
        .iter()
        .filter(|(k, _)| !gone.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.extend(write(meta, kind, style));
    out
}

fn parse_nanos(v: &str) -> Option<Mtime> {
    let n: i128 = v.parse().ok()?;
    Some(Mtime {
        secs: n.div_euclid(1_000_000_000) as i64,
        nanos: n.rem_euclid(1_000_000_000) as u32,
    })
}

fn format_nanos(t: Mtime) -> String {
    (t.secs as i128 * 1_000_000_000 + t.nanos as i128).to_string()
}

/// Go's `2006-01-02 15:04:05 -0700`, as AMLFS's import reads it: whole seconds.
fn parse_go_time(v: &str) -> Option<Mtime> {
    let mut parts = v.split_whitespace();
    let (date, clock, zone) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || zone.len() != 5 || !zone[1..].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let offset = format!("{}{}:{}", &zone[..1], &zone[1..3], &zone[3..5]);
    super::xml::parse_rfc3339(&format!("{date}T{clock}{offset}"))
}

fn format_go_time(t: Mtime) -> String {
    let iso = super::xml::format_rfc3339(Mtime {
        secs: t.secs,
        nanos: 0,
    });
    // "YYYY-MM-DDTHH:MM:SS.000000000Z"
    format!("{} {} +0000", &iso[..10], &iso[11..19])
}

/// A Content-MD5 (or any bytes) as the service writes it: standard Base64. Here, not in
/// azure/mod.rs, so that the metadata codecs (storage/metadata), which read `Posix`, import no
/// module that imports them.
pub(super) fn b64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        lowercased(pairs.iter().copied())
    }

    #[test]
    fn a_blob_recording_posix_attributes_without_the_xattrs_key_holds_none() {
        use crate::storage::metadata::xattrs::{listed_digest, KEY, NOT_KEPT};
        let digest = |m: &HashMap<String, String>| listed_digest(m, read(m).records_attributes());
        let m = map(&[("mode", "100644")]);
        assert_eq!(digest(&m), Some(crate::xattrs::empty_digest()));
        let rclone = map(&[("mtime", "2023-11-14T22:13:20Z")]);
        assert_eq!(digest(&rclone), None, "an mtime alone");
        let bad = map(&[("mode", "100644"), (KEY, "AQ==")]);
        assert_eq!(
            listed_digest(&bad, Posix::default().records_attributes()),
            None,
            "unreadable"
        );
        let big = map(&[("mode", "100644"), (KEY, NOT_KEPT)]);
        assert_eq!(digest(&big), None, "not kept");
    }

    const T: Mtime = Mtime {
        secs: 1700000000,
        nanos: 123456789,
    };

    #[test]
    fn azcopy_standard_is_read() {
        let p = read(&map(&[
            ("permissions", "33188"),
            ("modtime", "1700000000123456789"),
            ("posix_owner", "1001"),
            ("posix_group", "1002"),
            ("posix_atime", "1"),
        ]));
        assert_eq!(
            p,
            Posix {
                mtime: Some(T),
                mode: Some(0o644),
                owner: Some((1001, 1002)),
                kind: Kind::File,
                written_md5: None,
            }
        );
        // A symlink as azcopy writes it: is_char_dev set too, which must not decide anything.
        let l = read(&map(&[
            ("is_symlink", "true"),
            ("is_char_dev", "true"),
            ("permissions", "41471"),
        ]));
        assert_eq!((l.kind, l.mode), (Kind::Symlink, Some(0o777)));
        let d = read(&map(&[("hdi_isfolder", "true"), ("permissions", "16877")]));
        assert_eq!((d.kind, d.mode), (Kind::Dir, Some(0o755)));
        assert_eq!(
            read(&map(&[("permissions", "41471")])).kind,
            Kind::Symlink,
            "type bits alone"
        );
        assert_eq!(read(&map(&[("is_char_dev", "true")])).kind, Kind::File);
    }

    #[test]
    fn amlfs_is_read() {
        let p = read(&map(&[
            ("Permissions", "0750"),
            ("modtime", "2023-11-15 00:13:20 +0200"),
            ("owner", "0"),
            ("group", "42"),
        ]));
        assert_eq!(
            p,
            Posix {
                mtime: Some(Mtime {
                    secs: 1700000000,
                    nanos: 0
                }),
                mode: Some(0o750),
                owner: Some((0, 42)),
                kind: Kind::File,
                written_md5: None,
            }
        );
        assert_eq!(
            read(&map(&[("permissions", "4755")])).mode,
            Some(0o4755),
            "set-uid in four octal digits"
        );
        assert_eq!(
            parse_go_time("2023-11-14 22:13:20 -0030"),
            Some(Mtime {
                secs: 1700000000 + 1800,
                nanos: 0
            })
        );
        assert_eq!(parse_go_time("2023-11-14 22:13:20"), None);
        assert_eq!(parse_go_time("2023-11-14 22:13:20 +0é0"), None);
    }

    #[test]
    fn rclone_is_read_and_wins() {
        let p = read(&map(&[
            ("mtime", "2023-11-14T22:13:20.123456789Z"),
            ("mode", "100640"),
            ("uid", "5"),
            ("gid", "6"),
            ("permissions", "33188"),
            ("posix_owner", "9"),
        ]));
        assert_eq!(
            p,
            Posix {
                mtime: Some(T),
                mode: Some(0o640),
                owner: Some((5, 6)),
                kind: Kind::File,
                written_md5: None,
            }
        );
        assert_eq!(read(&map(&[("mode", "120777")])).kind, Kind::Symlink);
        assert_eq!(
            read(&map(&[("uid", "5")])).owner,
            None,
            "a uid alone is no owner"
        );
        assert_eq!(
            read(&map(&[("mode", "junk"), ("modtime", "junk")])),
            Posix::default()
        );
    }

    #[test]
    fn written_keys_read_back_in_every_style() {
        let meta = Meta {
            mtime: Some(T),
            mode: Some(0o4755),
            uid: Some(7),
            gid: Some(8),
            md5: None,
            sparse: None,
        };
        for style in [PosixStyle::Standard, PosixStyle::Amlfs] {
            for kind in [Kind::File, Kind::Dir, Kind::Symlink] {
                let m = write(&meta, kind, style);
                assert_eq!(
                    read(&m),
                    Posix {
                        mtime: Some(T),
                        mode: Some(0o4755),
                        owner: Some((7, 8)),
                        kind,
                        written_md5: None,
                    },
                    "{style:?} {kind:?}"
                );
                // Without rclone's keys, what the other style wrote reads back on its own.
                let theirs: HashMap<String, String> = m
                    .iter()
                    .filter(|(k, _)| !["mtime", "mode", "uid", "gid"].contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let p = read(&theirs);
                let secs_only = Mtime {
                    secs: T.secs,
                    nanos: if style == PosixStyle::Amlfs {
                        0
                    } else {
                        T.nanos
                    },
                };
                assert_eq!(
                    p,
                    Posix {
                        mtime: Some(secs_only),
                        mode: Some(0o4755),
                        owner: Some((7, 8)),
                        kind,
                        written_md5: None,
                    },
                    "{style:?} {kind:?} alone"
                );
            }
        }
        let std = write(&meta, Kind::File, PosixStyle::Standard);
        assert_eq!(
            (
                std["permissions"].as_str(),
                std["modtime"].as_str(),
                std["posix_owner"].as_str()
            ),
            ("35309", "1700000000123456789", "7")
        );
        assert_eq!(
            (
                std["mode"].as_str(),
                std["mtime"].as_str(),
                std["gid"].as_str()
            ),
            ("104755", "2023-11-14T22:13:20.123456789Z", "8")
        );
        let aml = write(&meta, Kind::Symlink, PosixStyle::Amlfs);
        assert_eq!(
            (
                aml["permissions"].as_str(),
                aml["modtime"].as_str(),
                aml["owner"].as_str(),
                aml["group"].as_str()
            ),
            ("4755", "2023-11-14 22:13:20 +0000", "7", "8")
        );
        assert_eq!(
            (aml["is_symlink"].as_str(), aml["mode"].as_str()),
            ("true", "124755")
        );
        assert!(write(&Meta::default(), Kind::File, PosixStyle::Standard).is_empty());
        let recorded = write(
            &Meta {
                md5: Some([7; 16]),
                ..Meta::default()
            },
            Kind::File,
            PosixStyle::Standard,
        );
        assert_eq!(read(&recorded).written_md5, Some([7; 16]));
    }

    #[test]
    fn an_update_keeps_other_metadata() {
        let now = map(&[
            ("project", "x"),
            ("mode", "100600"),
            ("permissions", "0600"),
            ("posix_owner", "1"),
            ("posix_group", "2"),
            ("is_char_dev", "true"),
            ("mtime", "2023-11-14T22:13:20Z"),
        ]);
        let new = replaced(
            &now,
            &Meta {
                mode: Some(0o644),
                ..Meta::default()
            },
            Kind::File,
            PosixStyle::Standard,
        );
        let want = map(&[
            ("project", "x"),
            ("mode", "100644"),
            ("permissions", "33188"),
            ("posix_owner", "1"),
            ("posix_group", "2"),
            ("mtime", "2023-11-14T22:13:20Z"),
        ]);
        assert_eq!(
            new, want,
            "the mode replaced in both styles; the owner, mtime and the user's key kept"
        );
        let owned = replaced(
            &now,
            &Meta {
                uid: Some(3),
                gid: Some(4),
                ..Meta::default()
            },
            Kind::Dir,
            PosixStyle::Amlfs,
        );
        assert_eq!(
            (
                owned.get("posix_owner"),
                owned["owner"].as_str(),
                owned["hdi_isfolder"].as_str()
            ),
            (None, "3", "true")
        );
    }
}
