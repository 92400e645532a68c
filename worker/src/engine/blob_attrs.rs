//! Extended attributes and ACLs between a store that holds them (`Capabilities::xattrs`) and
//! one that keeps them in its metadata (`Capabilities::props`, `storage::metadata::xattrs`):
//! read from the source only for entries its listing saw some on (no call for the others),
//! stored in the metadata where they fit and counted under `not_kept` where not; written back
//! onto what a download makes, from the metadata. A store of metadata holds no holes: where a
//! sparse file had data is recorded beside them (`storage::metadata::sparse`), for a download
//! to make the holes again.

use super::{Engine, Job};
use crate::error::Result;
use crate::sparse::Sparse;
use crate::storage::filesystem::on_thread;
use crate::storage::metadata::sparse as in_meta_sparse;
use crate::storage::metadata::xattrs as in_meta;
use crate::storage::{ObjectVersion, Props, StoredXattrs};
use crate::xattrs::{self, Refused, Wanted};

impl Engine {
    fn wanted(&self) -> Wanted {
        Wanted::of(&self.opts.preserve)
    }

    /// Whether the listing saw attributes worth carrying on this entry.
    fn has_attrs(&self, job: &Job) -> bool {
        self.wanted().any() && job.src.xattrs.is_some_and(|d| d != xattrs::empty_digest())
    }

    /// For an upload from a store that holds attributes into one that keeps them in its
    /// metadata: the value of `ferry_xattrs` the object gets. Outer None: nothing known, the
    /// object's value is left as it is; Some(None): the object holds none (the entry has none);
    /// `NOT_KEPT` where they did not fit (and were counted), so none are read from it.
    pub(super) async fn attrs_for_blob(&self, job: &Job) -> Result<StoredXattrs> {
        if !self.src_can().xattrs || !self.dst_can().props || !self.wanted().any() {
            return Ok(None);
        }
        if job.src.xattrs.is_none() {
            return Ok(None);
        }
        if !self.has_attrs(job) {
            return Ok(Some(None));
        }
        let wanted = self.wanted();
        let attrs = match &self.src_fs {
            Some(fs) => on_thread(fs, &job.src.path, move |fs, rel| {
                fs.read_xattrs(rel, wanted)
            })
            .await?
            .unwrap_or_default(),
            None => Vec::new(),
        };
        match in_meta::encode(&attrs) {
            Some(v) if !attrs.is_empty() => Ok(Some(Some(v))),
            Some(_) => Ok(Some(None)),
            None => {
                Refused::all(&attrs, wanted)
                    .kinds()
                    .for_each(|k| self.stats.not_kept(k));
                Ok(Some(Some(in_meta::NOT_KEPT.to_string())))
            }
        }
    }

    /// For a download into a store that holds attributes: the source object's stored ones
    /// made those of what was written at the job's destination (one look, only for an object
    /// the listing saw some on).
    pub(super) async fn attrs_from_blob(&self, job: &Job) -> Result<()> {
        if !self.src_can().props || !self.dst_can().xattrs || !self.wanted().any() {
            return Ok(());
        }
        // A blob known to hold none: what the destination still holds is taken off (one
        // listxattr, no request).
        let want = match job.src.xattrs {
            None => return Ok(()),
            Some(_) if !self.has_attrs(job) => Vec::new(),
            Some(_) => match self.stored_attrs(job).await? {
                Some(v) => v,
                None => return Ok(()),
            },
        };
        let wanted = self.wanted();
        let refused = match &self.dst_fs {
            Some(fs) => {
                on_thread(fs, &job.dst_path, move |fs, rel| {
                    fs.write_xattrs(rel, &want, wanted)
                })
                .await?
            }
            None => Refused::all(&want, wanted),
        };
        refused.kinds().for_each(|k| self.stats.not_kept(k));
        Ok(())
    }

    /// The attributes the source blob stores now (one HEAD); None where its value is not one
    /// ferry can read.
    async fn stored_attrs(&self, job: &Job) -> Result<Option<xattrs::Attrs>> {
        let Some(ObjectVersion {
            props: Some(props), ..
        }) = self.src.version(&job.src.path, true).await?
        else {
            return Err(super::vanished());
        };
        Ok(props
            .metadata
            .get(in_meta::KEY)
            .and_then(|v| in_meta::decode(v)))
    }

    /// For a metadata-only update or a folder stub: `attrs_for_blob`, and between two stores that
    /// keep attributes in metadata, the source blob's value (neither takes the source's metadata
    /// whole, as a copy of a file does).
    pub(super) async fn attrs_for_update(&self, job: &Job) -> Result<StoredXattrs> {
        if !(self.src_can().props && self.dst_can().props && self.wanted().any()) {
            return self.attrs_for_blob(job).await;
        }
        Ok(match job.src.xattrs {
            None => None,
            Some(_) if !self.has_attrs(job) => Some(None),
            Some(_) => self.stored_attrs(job).await?.map(|a| in_meta::encode(&a)),
        })
    }

    /// For an upload of a file of more than one block from a store with holes into one that
    /// records them in metadata: where it holds data, if it has holes.
    pub(super) async fn sparse_of(&self, job: &Job) -> Result<Option<Sparse>> {
        if !self.src_can().holes || !self.dst_can().props || !self.opts.preserve.sparse {
            return Ok(None);
        }
        match &self.src_fs {
            Some(fs) => on_thread(fs, &job.src.path, |fs, rel| fs.sparse_layout(rel)).await,
            None => Ok(None),
        }
    }
}

/// The layout an upload records (`ferry_sparse`) in the room its `ferry_xattrs` leaves.
pub(super) fn sparse_within(sparse: Option<Sparse>, props: Option<&Props>) -> Option<Sparse> {
    let xattrs = props.and_then(|p| p.metadata.get(in_meta::KEY));
    sparse.map(|s| in_meta_sparse::within(s, in_meta_sparse::room(xattrs.map(String::as_str))))
}
