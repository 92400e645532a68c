//! Refuses a source and a destination where one contains the other: a prune would delete the
//! source's own files, a copy would nest one level deeper on every run. Decided on what the
//! paths are on disk — symlinks resolved, bind mounts traced back to the directory they show —
//! never on how they are spelt. There is no override: a typo must not be able to reach one.
//! Blob roots likewise: one container is known by its account and name, whatever spelling of
//! its endpoint reaches it (`same_container`).

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::location::{BlobLocation, Location};

/// An error naming both roots when one lies inside the other (or they are one).
pub fn refuse(src: &Location, dst: &Location) -> anyhow::Result<()> {
    let inside = match (src, dst) {
        (Location::Local(s), Location::Local(d)) => local(s, d).map(str::to_string),
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

fn blob(s: &BlobLocation, d: &BlobLocation) -> Option<String> {
    let same = same_container(s, d)?;
    let key = |p: &str| p.trim_matches('/').to_string();
    let how = within(Path::new(&key(&s.prefix)), Path::new(&key(&d.prefix)))?;
    Some(match same {
        "" => how.to_string(),
        why => format!("{how}: {why}"),
    })
}

/// Whether two locations may name one container: Some("") where they are spelt alike, else
/// Some(why) where they are found or cannot be told to be one, None where they are two.
fn same_container(s: &BlobLocation, d: &BlobLocation) -> Option<&'static str> {
    // Container names are lower case to the service; a URL may spell them otherwise.
    if !s.container.eq_ignore_ascii_case(&d.container) {
        return None;
    }
    let (se, de) = (Endpoint::of(s), Endpoint::of(d));
    let same_account = se.account == de.account;
    if same_account && se.host == de.host && se.port == de.port {
        return Some("");
    }
    let resolve_alike = se.resolves_like(&de);
    match (same_account, resolve_alike) {
        (true, true) => Some("one account and container, its endpoint spelt two ways"),
        // Two services that each hold this account's container, or one seen through two
        // routes (a private endpoint, a proxy): nothing here tells which.
        (true, false) => Some(
            "the same account and container through endpoints that resolve to different addresses, which ferry cannot tell from one container",
        ),
        // A custom domain names no account: reaching the other's addresses, it may be it.
        (false, true) if !(se.names_account && de.names_account) => Some(
            "a host that names no account resolves to the other's endpoint, which ferry cannot tell from one container",
        ),
        _ => None,
    }
}

/// Azure's host names that begin with the account's name; any other host (a custom domain)
/// may stand for any account.
const ACCOUNT_HOSTS: &[&str] = &[
    ".blob.core.windows.net",
    ".blob.storage.azure.net",
    ".blob.core.chinacloudapi.cn",
    ".blob.core.usgovcloudapi.net",
];

/// What a location's endpoint says of the service behind it.
struct Endpoint {
    /// As the service knows it: lower case, the secondary endpoint's `-secondary` dropped.
    account: String,
    host: String,
    port: u16,
    /// The account is the one the host or path names (not a guess from a custom domain).
    names_account: bool,
}

impl Endpoint {
    fn of(b: &BlobLocation) -> Endpoint {
        let (scheme, rest) = b
            .endpoint
            .split_once("://")
            .unwrap_or(("https", &b.endpoint));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let authority = authority.to_ascii_lowercase();
        // `[::1]:10000`, `host:443`, `host`: the port is what follows the last ':' past any ']'.
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !p.contains(']') => (h.to_string(), p.parse().ok()),
            _ => (authority.clone(), None),
        };
        let port = port.unwrap_or(if scheme == "http" { 80 } else { 443 });
        let account = b.account.to_ascii_lowercase();
        let account = account
            .strip_suffix("-secondary")
            .unwrap_or(&account)
            .to_string();
        let names_account =
            !path.is_empty() || ACCOUNT_HOSTS.iter().any(|suffix| host.ends_with(suffix));
        Endpoint {
            account,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            names_account,
        }
    }

    /// The addresses the host resolves to now; none where it does not resolve.
    fn addresses(&self) -> HashSet<IpAddr> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map(|a| a.map(|a| a.ip()).collect())
            .unwrap_or_default()
    }

    fn resolves_like(&self, other: &Endpoint) -> bool {
        self.port == other.port
            && (self.host == other.host || !self.addresses().is_disjoint(&other.addresses()))
    }
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

    fn at(endpoint: &str, account: &str, container: &str, prefix: &str) -> Location {
        Location::Blob(BlobLocation {
            endpoint: endpoint.into(),
            account: account.into(),
            container: container.into(),
            prefix: prefix.into(),
            sas: None,
        })
    }

    #[test]
    fn one_container_is_known_however_its_endpoint_is_spelt() {
        let refused = |s: &Location, d: &Location| refuse(s, d).is_err();
        let ip = at("http://127.0.0.1:10000/acct", "acct", "c", "p");
        let named = at("http://localhost:10000/acct", "acct", "c", "p/sub");
        let e = refuse(&ip, &named).unwrap_err().to_string();
        assert!(e.contains("spelt two ways"), "{e}");
        assert!(refused(
            &ip,
            &at("http://[::1]:10000/acct", "acct", "C", "p")
        ));
        // Another port on the same host: another service, or one behind a proxy.
        let e = refuse(&ip, &at("http://127.0.0.1:10001/acct", "acct", "c", "p"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot tell"), "{e}");
        let primary = at("https://acct.blob.core.windows.net", "acct", "c", "p");
        let secondary = at(
            "https://acct-secondary.blob.core.windows.net",
            "acct-secondary",
            "c",
            "p/x",
        );
        assert!(refused(&primary, &secondary), "the secondary endpoint");
        let private = at(
            "https://acct.privatelink.blob.core.windows.net",
            "acct",
            "c",
            "p",
        );
        assert!(refused(&primary, &private), "a private endpoint");
        // Other accounts, or another container, are apart.
        assert!(!refused(
            &ip,
            &at("http://127.0.0.1:10000/other", "other", "c", "p")
        ));
        assert!(!refused(
            &ip,
            &at("http://localhost:10000/acct", "acct", "d", "p")
        ));
        let other = at("https://other.blob.core.windows.net", "other", "c", "p");
        assert!(!refused(&primary, &other));
    }

    #[test]
    fn a_custom_domain_reaching_the_same_addresses_cannot_be_told_apart() {
        let ip = at("http://127.0.0.1:10000/acct", "acct", "c", "p");
        // `localhost` as a host-style name: its first label is no account's.
        let custom = at("http://localhost:10000", "localhost", "c", "p");
        let e = refuse(&ip, &custom).unwrap_err().to_string();
        assert!(e.contains("names no account"), "{e}");
        let elsewhere = at("http://localhost:10001", "localhost", "c", "p");
        assert!(refuse(&ip, &elsewhere).is_ok());
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape(r"/mnt/with\040space\134x"), "/mnt/with space\\x");
    }
}
