//! The local tree as a `Store`: each call runs its system calls on a thread that may block.

use std::fs::{self, File};
use std::io::Write;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::beneath::{self, fd};
use super::leftover::temp_name;
use super::posix::{
    apply_meta_fd, changed, create_temp, entry_with_target, link_in, meta_of, read_exact_at, stamp,
    unchanged, write_all_vectored_at,
};
use super::upload::LocalUpload;
use super::walk::{walk, walk_threads};
use super::LocalStore;
use crate::error::{Result, StoreError};
use crate::keyspace::{Cuts, Range};
use crate::manifest::{Entry, Kind};
use crate::sparse;
use crate::storage::filesystem::Filesystem;
use crate::storage::{
    blocking, Capabilities, Chunk, Meta, ObjectVersion, Props, Store, StoredXattrs, Upload,
    UploadPlan,
};

#[async_trait]
impl Store for LocalStore {
    fn describe(&self) -> String {
        self.root.display().to_string()
    }

    async fn list(&self, recursive: bool, tx: mpsc::Sender<Result<Entry>>) -> Result<()> {
        let (root, threads, xattrs) = (
            self.root.clone(),
            walk_threads(self.is_remote()),
            self.xattrs.clone(),
        );
        let met = self.leftovers.clone();
        blocking(move || {
            walk(
                &root,
                recursive,
                &Range::default(),
                threads,
                (&xattrs, &met),
                &tx,
            )
        })
        .await
    }

    async fn list_range(
        &self,
        cuts: &Cuts,
        k: usize,
        tx: mpsc::Sender<Result<Entry>>,
    ) -> Result<()> {
        let (root, range, threads, xattrs, met) = (
            self.root.clone(),
            cuts.range(k),
            walk_threads(self.is_remote()),
            self.xattrs.clone(),
            self.leftovers.clone(),
        );
        blocking(move || walk(&root, true, &range, threads, (&xattrs, &met), &tx)).await
    }

    async fn list_dir(&self, dir: &[u8]) -> Result<Option<Vec<Entry>>> {
        let (me, rel) = (self.clone(), dir.to_vec());
        blocking(move || me.list_dir(&rel).map_err(me.io_err(&rel))).await
    }

    async fn head(&self, path: &[u8]) -> Result<Option<(Entry, Meta)>> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || {
            let md = me.lstat(&rel).map_err(me.io_err(&rel))?;
            // The attributes' digest as a listing reads it: an entry looked up alone (a few
            // names of a directory, `storage::index_paths`) compares as a listed one does.
            Ok(md.and_then(|md| {
                entry_with_target(rel.clone(), &md, || me.readlink(&rel)).map(|e| {
                    let e = crate::manifest::Entry {
                        xattrs: me.xattrs.digest(&me.full_path(&rel)),
                        ..e
                    };
                    (e, meta_of(&md))
                })
            }))
        })
        .await
    }

    /// A file keeps no `Props`.
    async fn version(&self, path: &[u8], _: bool) -> Result<Option<ObjectVersion>> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || {
            Ok(me
                .lstat(&rel)
                .map_err(me.io_err(&rel))?
                .map(|md| ObjectVersion {
                    token: stamp(&md),
                    size: md.len(),
                    props: None,
                }))
        })
        .await
    }

    async fn read(
        &self,
        path: &[u8],
        offset: u64,
        len: u64,
        version: Option<&str>,
    ) -> Result<Chunk> {
        let (me, rel, version) = (self.clone(), path.to_vec(), version.map(str::to_string));
        blocking(move || {
            let io = me.io_err(&rel);
            let f = me.open_file(&rel).map_err(&io)?;
            let check = |f: &File| match &version {
                Some(v) => f.metadata().and_then(|md| unchanged(v, &md)),
                None => Ok(()),
            };
            check(&f).map_err(&io).map_err(changed)?;
            let data = crate::storage::bufpool::filled(len as usize, |buf| {
                read_exact_at(&f, buf, offset).map_err(&io)
            })?;
            // After the read too: a write during it would otherwise go unseen.
            check(&f).map_err(&io).map_err(changed)?;
            Ok(Chunk { data, meta: None })
        })
        .await
    }

    async fn start_upload(&self, path: &[u8], plan: &UploadPlan) -> Result<Box<dyn Upload>> {
        let (me, rel, plan) = (self.clone(), path.to_vec(), plan.clone());
        let up = blocking(move || LocalUpload::open(me, rel, plan)).await?;
        Ok(Box::new(up))
    }

    async fn delete(&self, path: &[u8]) -> Result<()> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || {
            let r = me.parent(&rel, false).and_then(|(dir, name)| {
                // unlink removes a symlink itself, never its target; a directory says EISDIR.
                match beneath::unlink_at(fd(&dir), name, false) {
                    Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
                        // Held only by ferry's own leftovers, which no listing showed (prune
                        // from a plan lists nothing): they go, and then the directory.
                        let r = match beneath::unlink_at(fd(&dir), name, true) {
                            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => me
                                .clear_leftovers_in(&rel)
                                .and_then(|_| beneath::unlink_at(fd(&dir), name, true)),
                            r => r,
                        };
                        me.forget_dir(&rel);
                        r
                    }
                    r => r,
                }
            });
            match r {
                // Below a file or link there is nothing to delete: a pass that replaced a
                // directory took what it held (prune deletes from the listing it planned with).
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) =>
                {
                    Ok(())
                }
                r => r.map_err(me.io_err(&rel)),
            }
        })
        .await
    }

    async fn remove_all(&self, path: &[u8]) -> Result<()> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || Filesystem::remove_all(&me, &rel).map_err(me.io_err(&rel))).await
    }

    async fn set_meta(&self, path: &[u8], kind: Kind, meta: &Meta, _: StoredXattrs) -> Result<()> {
        let (me, rel, meta) = (self.clone(), path.to_vec(), meta.clone());
        blocking(move || {
            Filesystem::set_meta(&me, &rel, kind, &meta)
                .map(drop)
                .map_err(me.io_err(&rel))
        })
        .await
    }

    async fn create_root(&self) -> Result<bool> {
        let root = self.root.clone();
        blocking(move || {
            let existed = root.is_dir();
            fs::create_dir_all(&root).map_err(|e| StoreError::io(root.display().to_string(), e))?;
            Ok(!existed)
        })
        .await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            directories: true,
            hard_links: true,
            specials: true,
            xattrs: true,
            holes: true,
            cheap_looks: true,
            piecewise: true,
            delete_batch: 1,
            ..Capabilities::default()
        }
    }

    fn posix(&self) -> Option<std::sync::Arc<dyn Filesystem>> {
        Some(std::sync::Arc::new(self.clone()))
    }

    async fn root_exists(&self) -> Result<bool> {
        let root = self.root.clone();
        blocking(move || Ok(root.is_dir())).await
    }

    async fn root_meta(&self) -> Result<Option<Meta>> {
        let root = self.root.clone();
        blocking(move || {
            fs::metadata(&root)
                .map(|md| Some(meta_of(&md)))
                .map_err(|e| StoreError::io(root.display().to_string(), e))
        })
        .await
    }

    async fn set_root_meta(&self, meta: &Meta) -> Result<()> {
        let (me, meta) = (self.clone(), meta.clone());
        blocking(move || me.finish_root(&meta).map_err(me.io_err(b""))).await
    }

    async fn flush(&self) -> Result<()> {
        let me = self.clone();
        blocking(move || me.sync().map_err(me.io_err(b""))).await
    }

    /// A directory is made where missing and given what of `meta` differs (looked at again,
    /// whatever a listing said: files written into it moved its mtime).
    async fn put_node(
        &self,
        path: &[u8],
        kind: Kind,
        data: Bytes,
        meta: &Meta,
        _props: Option<&Props>,
    ) -> Result<()> {
        let (me, rel, meta) = (self.clone(), path.to_vec(), meta.clone());
        match kind {
            Kind::File => self.put_file(path, data, &meta).await,
            Kind::Dir => {
                blocking(move || me.finish_dir(&rel, &meta, None).map_err(me.io_err(&rel))).await
            }
            Kind::Symlink => {
                blocking(move || me.make_symlink(&rel, &data, &meta).map_err(me.io_err(&rel))).await
            }
            _ => Err(StoreError::Unsupported(format!(
                "writing a {} whole in {}",
                kind.name(),
                self.describe()
            ))),
        }
    }
}

impl LocalStore {
    /// A whole file, its bytes on disk before it takes its name.
    async fn put_file(&self, path: &[u8], data: Bytes, meta: &Meta) -> Result<()> {
        let (me, rel, meta) = (self.clone(), path.to_vec(), meta.clone());
        blocking(move || {
            let (dir, name) = me.parent(&rel, true).map_err(me.io_err(&rel))?;
            let written = |mut f: &File| {
                match &meta.sparse {
                    // Zero blocks where the source had holes are left unwritten, and the size
                    // set after: they stay holes, a trailing one included.
                    Some(s) => {
                        let (len, blk) = (data.len() as u64, sparse::block_of(f)?);
                        for (at, run) in sparse::runs(vec![data.clone()], 0, blk, s) {
                            write_all_vectored_at(f, &run, at)?;
                        }
                        f.set_len(len)?;
                    }
                    None => f.write_all(&data)?,
                }
                apply_meta_fd(f, &meta)
            };
            // Unnamed until complete where the filesystem allows; its bytes reach the disk in a
            // flush shared with the files written beside it, before it gets its name.
            if let Some(f) = me.open_unnamed(&dir, 0o600).map_err(me.io_err(&rel))? {
                return written(&f)
                    .and_then(|_| me.sync_one())
                    .and_then(|_| link_in(&f, &dir, name))
                    .map_err(me.io_err(&rel));
            }
            let tmp = temp_name(name, "partial");
            let res = create_temp(&dir, &tmp, 0o600).and_then(|f| {
                written(&f)?;
                if meta.mode.is_none() {
                    super::leftover::clear_mark(&f, 0o600)?;
                }
                me.sync_one()?;
                beneath::rename_at(fd(&dir), &tmp, name)
            });
            if res.is_err() {
                let _ = beneath::unlink_at(fd(&dir), &tmp, false);
            }
            res.map_err(me.io_err(&rel))
        })
        .await
    }
}
