//! Downloads into a local file in blocks, resumable: a journal beside the temp file records
//! the blocks that are complete.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;

use super::beneath::{self, fd};
use super::leftover;
use super::leftover::temp_name;
use super::posix::{apply_meta_fd, create_temp, read_exact_at, write_all_vectored_at};
use super::LocalStore;
use crate::error::{no_space, Result, StoreError};
use crate::sparse::{self, Sparse};
use crate::storage::{blocking, Meta, Upload, UploadPlan};

/// A download in progress: blocks land in a temp file; a journal records which are complete,
/// so a killed run resumes instead of starting over.
pub(super) struct LocalUpload {
    store: LocalStore,
    rel: Vec<u8>,
    dir: Arc<OwnedFd>,
    tmp: Vec<u8>,
    journal_name: Vec<u8>,
    file: Arc<File>,
    journal: Mutex<File>,
    staged: Vec<bool>,
    plan: UploadPlan,
    /// The filesystem's block size, asked when a sparse file first needs it.
    blk: Arc<OnceLock<u64>>,
}

impl LocalUpload {
    pub(super) fn open(store: LocalStore, rel: Vec<u8>, plan: UploadPlan) -> Result<Self> {
        let what = store.full_path(&rel).display().to_string();
        let io = |e| StoreError::io(what.clone(), e);
        let (dir, name) = store.parent(&rel, true).map_err(&io)?;
        let tmp = temp_name(name, "partial");
        let journal_name = temp_name(name, "journal");
        let header = format!("{} {} {}\n", plan.fingerprint, plan.size, plan.block_size);
        let nblocks = plan.blocks() as usize;
        let mut staged = vec![false; nblocks];
        // The partial file and journal of an earlier attempt, only if they are ferry's own.
        let previous = leftover::open_own(&dir, &journal_name, libc::O_RDONLY).and_then(|j| {
            let mut text = String::new();
            (&j).read_to_string(&mut text).ok().map(|_| text)
        });
        let old = leftover::open_own(&dir, &tmp, libc::O_RDWR);
        let (file, journal) = match (old, previous) {
            (Some(f), Some(previous)) if previous.starts_with(&header) => {
                for line in previous[header.len()..].lines() {
                    if let Some(i) = line.trim().parse::<usize>().ok().filter(|&i| i < nblocks) {
                        staged[i] = true;
                    }
                }
                let flags = libc::O_WRONLY | libc::O_APPEND;
                let j = beneath::open_at(fd(&dir), &journal_name, flags, 0).map_err(&io)?;
                (f, File::from(j))
            }
            _ => {
                let fresh = || -> std::io::Result<(File, File)> {
                    let mut j = create_temp(&dir, &journal_name, 0o600)?;
                    j.write_all(header.as_bytes())?;
                    Ok((create_temp(&dir, &tmp, 0o600)?, j))
                };
                fresh().map_err(|e| {
                    // Nothing of an earlier attempt is in them: nothing to keep.
                    discard(&dir, &tmp, &journal_name);
                    io(e)
                })?
            }
        };
        // A later pass leaves a journal alone while its download holds this (`leftover`).
        leftover::lock(&journal);
        if let Err(e) = file.set_len(plan.size) {
            if no_space(&e) {
                discard(&dir, &tmp, &journal_name);
            }
            return Err(io(e));
        }
        Ok(LocalUpload {
            store,
            rel,
            dir,
            tmp,
            journal_name,
            file: Arc::new(file),
            journal: Mutex::new(journal),
            staged,
            plan,
            blk: Arc::default(),
        })
    }

    fn io_err(&self) -> impl Fn(std::io::Error) -> StoreError + '_ {
        self.store.io_err(&self.rel)
    }
}

#[async_trait]
impl Upload for LocalUpload {
    fn staged(&self, idx: u64) -> bool {
        self.staged.get(idx as usize).copied().unwrap_or(false)
    }

    async fn put_block(&self, idx: u64, data: Bytes, _md5: Option<[u8; 16]>) -> Result<bool> {
        self.write_at(idx, 0, vec![data], None).await?;
        self.finish_block(idx).await?;
        Ok(true)
    }

    async fn write_at(
        &self,
        idx: u64,
        offset_in_block: u64,
        data: Vec<Bytes>,
        sparse: Option<&Sparse>,
    ) -> Result<()> {
        let file = self.file.clone();
        let offset = idx * self.plan.block_size + offset_in_block;
        let what = self.store.full_path(&self.rel).display().to_string();
        let sparse = sparse.cloned();
        let blk = self.blk.clone();
        // What is left unwritten reads as zeros: the file was sized when opened, and one an
        // earlier attempt wrote is of the same version (the journal's fingerprint), so its bytes
        // there are these or were never written.
        blocking(move || {
            let write = || match &sparse {
                Some(s) => {
                    let blk = match blk.get() {
                        Some(&b) => b,
                        None => {
                            let b = sparse::block_of(&file)?;
                            *blk.get_or_init(|| b)
                        }
                    };
                    sparse::runs(data, offset, blk, s)
                        .into_iter()
                        .try_for_each(|(at, run)| write_all_vectored_at(&file, &run, at))
                }
                None => write_all_vectored_at(&file, &data, offset),
            };
            write().map_err(|e| StoreError::io(what, e))
        })
        .await
    }

    async fn finish_block(&self, idx: u64) -> Result<()> {
        // Journal after the data: a kill in between costs one block, never a hole.
        let mut j = self.journal.lock().unwrap();
        writeln!(j, "{idx}").map_err(self.io_err())
    }

    async fn read_back(&self, idx: u64) -> Result<Option<Bytes>> {
        let file = self.file.clone();
        let offset = idx * self.plan.block_size;
        let len = self.plan.block_len(idx) as usize;
        let what = self.store.full_path(&self.rel).display().to_string();
        blocking(move || {
            Ok(Some(crate::storage::bufpool::filled(len, |buf| {
                read_exact_at(&file, buf, offset).map_err(|e| StoreError::io(&what, e))
            })?))
        })
        .await
    }

    async fn commit(self: Box<Self>, meta: &Meta) -> Result<()> {
        let meta = meta.clone();
        blocking(move || {
            let io = self.io_err();
            let (_, name) = beneath::split(&self.rel);
            let done = apply_meta_fd(&self.file, &meta)
                .and_then(|_| match meta.mode {
                    Some(_) => Ok(()),
                    None => leftover::clear_mark(&self.file, 0o600),
                })
                .and_then(|_| {
                    self.store
                        .commit_temp(&self.dir, &self.tmp, name, &self.file)
                });
            if let Err(e) = done {
                // A full disk is not left full by what cannot be finished on it.
                if no_space(&e) {
                    discard(&self.dir, &self.tmp, &self.journal_name);
                }
                return Err(io(e));
            }
            let _ = beneath::unlink_at(fd(&self.dir), &self.journal_name, false);
            Ok(())
        })
        .await
    }

    async fn abort(self: Box<Self>, discard_staged: bool) {
        if discard_staged {
            discard(&self.dir, &self.tmp, &self.journal_name);
        }
    }
}

/// Removes a download's partial file and journal.
fn discard(dir: &OwnedFd, tmp: &[u8], journal: &[u8]) {
    let _ = beneath::unlink_at(fd(dir), tmp, false);
    let _ = beneath::unlink_at(fd(dir), journal, false);
}
