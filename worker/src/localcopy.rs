//! local → local: the kernel's copy path (copy_file_range via std::io::copy), ownership,
//! mode, times and symlinks kept as `rsync -lptgoD --numeric-ids` keeps them.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::storage::local::{apply_meta_fd, apply_meta_path, ensure_parent, temp_path};
use crate::storage::Meta;

/// Copies one regular file through a temp name; returns the bytes copied.
pub fn copy_file(src: &Path, dst: &Path, meta: &Meta) -> io::Result<u64> {
    let mut input = File::open(src)?;
    ensure_parent(dst)?;
    let tmp = temp_path(dst, "partial");
    let mut out = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    let result = io::copy(&mut input, &mut out).and_then(|n| {
        apply_meta_fd(&out, meta)?;
        fs::rename(&tmp, dst)?;
        Ok(n)
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

pub fn copy_symlink(src: &Path, dst: &Path, meta: &Meta) -> io::Result<()> {
    let target = fs::read_link(src)?;
    ensure_parent(dst)?;
    let tmp = temp_path(dst, "partial");
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&target, &tmp)?;
    let result = apply_meta_path(&tmp, &Meta { mode: None, ..meta.clone() }, false).and_then(|_| fs::rename(&tmp, dst));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Directories get their metadata after their contents are written, which would otherwise
/// bump their mtimes again.
pub fn finish_dir(dst: &Path, meta: &Meta) -> io::Result<()> {
    fs::create_dir_all(dst)?;
    apply_meta_path(dst, meta, true)
}
