//! `--preserve`: what a copy keeps beyond the bytes, in the spirit of `dcp --preserve` and
//! `rsync -HAXS`. The default keeps what `cp -a` keeps, and makes holes where the source has
//! them.

use crate::same::Attrs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Preserve {
    /// Permission bits, set-id and sticky bits.
    pub mode: bool,
    /// Owner and group (numeric); set only where the process may (as root, as rsync does).
    pub owner: bool,
    /// Modification times.
    pub times: bool,
    /// Hard links between names of one run.
    pub links: bool,
    /// Extended attributes: `user.*`, and as root `trusted.*` and `security.*`.
    pub xattrs: bool,
    /// POSIX ACLs, access and default (stored as the `system.posix_acl_*` attributes).
    pub acls: bool,
    /// Holes, found with SEEK_DATA/SEEK_HOLE, left as holes.
    pub sparse: bool,
    /// Fifos and, as root, device nodes (sockets are never made: counted as ignored).
    pub specials: bool,
}

pub const NAMES: [&str; 8] = [
    "mode", "owner", "times", "links", "xattrs", "acls", "sparse", "specials",
];

impl Preserve {
    pub const ALL: Preserve = Preserve {
        mode: true,
        owner: true,
        times: true,
        links: true,
        xattrs: true,
        acls: true,
        sparse: true,
        specials: true,
    };
    pub const NONE: Preserve = Preserve {
        mode: false,
        owner: false,
        times: false,
        links: false,
        xattrs: false,
        acls: false,
        sparse: false,
        specials: false,
    };

    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "mode" => &mut self.mode,
            "owner" => &mut self.owner,
            "times" => &mut self.times,
            "links" => &mut self.links,
            "xattrs" => &mut self.xattrs,
            "acls" => &mut self.acls,
            "sparse" => &mut self.sparse,
            "specials" => &mut self.specials,
            _ => return None,
        })
    }

    /// The attributes two listings are compared by: the owner only where this process can set
    /// it, else every pass would find the same difference and fail to mend it.
    pub fn attrs(&self) -> Attrs {
        // SAFETY: no arguments, no failure.
        let root = unsafe { libc::geteuid() } == 0;
        Attrs {
            mode: self.mode,
            owner: self.owner && root,
            xattrs: self.xattrs || self.acls,
            times: self.times,
            dir_times: false,
        }
    }
}

impl Default for Preserve {
    fn default() -> Self {
        Preserve::ALL
    }
}

/// `all`, `none`, or a comma-separated list of `NAMES`, each optionally prefixed with `no-`
/// (`all,no-xattrs`).
pub fn parse(s: &str) -> Result<Preserve, String> {
    let mut p = Preserve::NONE;
    for word in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        match word {
            "all" => p = Preserve::ALL,
            "none" => p = Preserve::NONE,
            w => {
                let (name, on) = match w.strip_prefix("no-") {
                    Some(n) => (n, false),
                    None => (w, true),
                };
                *p.flag(name).ok_or_else(|| {
                    format!(
                        "unknown attribute {name:?} for --preserve (one of: all, none, {})",
                        NAMES.join(", ")
                    )
                })? = on;
            }
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse() {
        assert_eq!(parse("all").unwrap(), Preserve::ALL);
        assert_eq!(parse("none").unwrap(), Preserve::NONE);
        let p = parse("all,no-xattrs,no-acls").unwrap();
        assert!(p.mode && p.links && !p.xattrs && !p.acls);
        let p = parse("mode,times").unwrap();
        assert!(p.mode && p.times && !p.owner && !p.links);
        assert!(parse("mode,colour").unwrap_err().contains("colour"));
    }
}
