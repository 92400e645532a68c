//! JSON files read by other processes while ferry runs or after it ends (a pipeline's status,
//! its history): each is replaced whole, so a reader sees the old document or the new one,
//! never half of one.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// A document ferry wrote, read whole and checked against its type (`what` names it in errors).
pub fn read<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> anyhow::Result<T> {
    let text = std::fs::read(path)
        .with_context(|| format!("cannot read the {what} {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("{}: not a {what}", path.display()))
}

/// Writes `v` to a temporary file beside `path` (one filesystem, so the rename is atomic) and
/// renames it over `path`. Not synced: a report that a crash loses is rewritten by the next run,
/// and a sync every few seconds would cost more on a network filesystem than the file is worth.
pub fn replace<T: serde::Serialize>(path: &Path, v: &T) -> std::io::Result<()> {
    let tmp = temp_beside(path);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        serde_json::to_writer_pretty(&mut f, v)?;
        f.write_all(b"\n")?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// `.NAME.PID.tmp` in the directory of `path`: hidden, and two processes given one path do not
/// write into each other's temporary file.
fn temp_beside(path: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_else(|| "ferry".as_ref()));
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        replace(&path, &serde_json::json!({"n": 1})).unwrap();
        replace(&path, &serde_json::json!({"n": 2})).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["n"], 2);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("p.json")]);
    }

    #[test]
    fn a_failed_write_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: the rename fails.
        let path = dir.path().join("taken");
        std::fs::create_dir_all(path.join("inside")).unwrap();
        assert!(replace(&path, &serde_json::json!({})).is_err());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("taken")]);
    }
}
