//! The local tree as a `Store`: each call runs its system calls on a thread that may block.

use std::fs::{self, File};
use std::io::Write;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::beneath::{self, fd};
use super::ops::LocalFs;
use super::posix::{
    apply_meta_fd, changed, create_temp, entry_with_target, link_in, meta_of, read_exact_at, stamp,
    temp_name, umask, unchanged, write_all_vectored_at,
};
use super::upload::LocalUpload;
use super::walk::{walk, walk_threads};
use super::LocalStore;
use crate::error::{Result, StoreError};
use crate::keyspace::{Cuts, Range};
use crate::manifest::{Entry, Kind};
use crate::sparse;
use crate::storage::{blocking, Capabilities, Chunk, Meta, Props, Store, Upload, UploadPlan};
use crate::xattrs::{self, Attrs, On, Refused, Wanted};

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

    async fn looks_beat_listing(&self, dir: &[u8], wanted: usize) -> bool {
        // A directory's size in bytes over this errs low as a count of its entries on ext4,
        // XFS, btrfs and tmpfs alike (and on NFS exports of them): the estimate leans to listing.
        const BYTES_PER_ENTRY: u64 = 32;
        // A listed entry costs a stat, a look walks to its parent too; over NFS a look is a
        // round trip, and a READDIRPLUS page brings a hundred and more entries (tools/latencyfs:
        // ~150).
        const LISTED_PER_LOOK: u64 = 4;
        const LISTED_PER_LOOK_REMOTE: u64 = 200;
        let (me, path) = (self.clone(), self.full_path(dir));
        let beat = move || {
            // By name: a size is all it reads, and the listing that may follow opens the
            // directory safely itself.
            let md = fs::symlink_metadata(path).ok().filter(fs::Metadata::is_dir);
            let entries = md.map_or(0, |md| md.len() / BYTES_PER_ENTRY);
            let wanted = wanted as u64;
            // Where even a local disk's looks lose, the filesystem is not asked what it is.
            wanted <= entries / LISTED_PER_LOOK
                && (!me.is_remote() || wanted <= entries / LISTED_PER_LOOK_REMOTE)
        };
        blocking(move || Ok(beat())).await.unwrap_or(false)
    }

    async fn version(&self, path: &[u8]) -> Result<Option<(String, u64)>> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || {
            Ok(me
                .lstat(&rel)
                .map_err(me.io_err(&rel))?
                .map(|md| (stamp(&md), md.len())))
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

    async fn put(&self, path: &[u8], data: Bytes, meta: &Meta) -> Result<()> {
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
        blocking(move || LocalFs::remove_all(&me, &rel).map_err(me.io_err(&rel))).await
    }

    async fn set_meta(&self, path: &[u8], kind: Kind, meta: &Meta) -> Result<()> {
        let (me, rel, meta) = (self.clone(), path.to_vec(), meta.clone());
        blocking(move || {
            LocalFs::set_meta(&me, &rel, kind, &meta)
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

    async fn sweep_leftovers(&self, dry_run: bool) -> crate::storage::Sweep {
        let me = self.clone();
        blocking(move || Ok(me.sweep(dry_run)))
            .await
            .unwrap_or_default()
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
            ..Capabilities::default()
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn filesystem(&self) -> Option<&dyn LocalFs> {
        Some(self)
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

    /// What any new file gets: 0666 less the umask.
    fn default_mode(&self) -> Option<u32> {
        Some(0o666 & !umask())
    }

    async fn content_md5(&self, path: &[u8]) -> Result<Option<[u8; 16]>> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || me.md5(&rel).map(Some).map_err(me.io_err(&rel))).await
    }

    async fn read_small(&self, path: &[u8], limit: u64) -> Result<Option<(Bytes, Meta)>> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || LocalFs::read_small(&me, &rel, limit)).await
    }

    /// An open and an fstat; SEEK_DATA/SEEK_HOLE only for a sparse file.
    async fn sparse_layout(&self, path: &[u8]) -> Result<Option<sparse::Sparse>> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || {
            let io = me.io_err(&rel);
            let f = File::open(me.full_path(&rel)).map_err(&io)?;
            let md = f.metadata().map_err(&io)?;
            sparse::Sparse::of_file(&f, &md).map_err(&io)
        })
        .await
    }

    async fn read_xattrs(&self, path: &[u8], wanted: Wanted) -> Result<Option<Attrs>> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || {
            xattrs::c_path(&me.full_path(&rel))
                .and_then(|c| xattrs::read(&On::Path(&c), wanted))
                .map_err(me.io_err(&rel))
        })
        .await
    }

    async fn apply_xattrs(&self, path: &[u8], want: Attrs, wanted: Wanted) -> Result<Refused> {
        let (me, rel) = (self.clone(), path.to_vec());
        blocking(move || {
            let apply = || {
                let c = xattrs::c_path(&me.full_path(&rel))?;
                let on = On::Path(&c);
                match xattrs::read(&on, wanted)? {
                    Some(now) => xattrs::apply(&on, &want, Some(&now), wanted),
                    None => Ok(Refused::all(&want, wanted)),
                }
            };
            apply().map_err(me.io_err(&rel))
        })
        .await
    }

    async fn read_link(&self, entry: &Entry) -> Result<(Vec<u8>, Meta)> {
        let (me, rel, what) = (self.clone(), entry.path.clone(), entry.display_path());
        blocking(move || {
            let read = || {
                let md = me.lstat(&rel).and_then(|m| {
                    m.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
                })?;
                if !md.file_type().is_symlink() {
                    return Err(std::io::Error::other("no longer a symlink"));
                }
                Ok((me.readlink(&rel)?, meta_of(&md)))
            };
            read().map_err(|e| StoreError::io(what, e))
        })
        .await
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
            Kind::File => self.put(path, data, &meta).await,
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
