//! Extended attributes and ACLs through Blob storage (`storage::azure::xattrs`): read from a
//! local source only for entries its listing saw some on (no call for the others), stored in the
//! blob's metadata where they fit and counted under `not_kept` where not; written back onto
//! what a download makes, from the blob's metadata. Blob holds no holes: where a sparse file
//! had data is recorded beside them (`storage::azure::sparse`), for a download to make the
//! holes again.

use super::{blocking_local, Engine, Job};
use crate::error::{Result, StoreError};
use crate::sparse::Sparse;
use crate::storage::azure::sparse as in_blob_sparse;
use crate::storage::azure::xattrs as in_blob;
use crate::xattrs::{self, On, Refused, Wanted};

impl Engine {
    fn wanted(&self) -> Wanted {
        Wanted::of(&self.opts.preserve)
    }

    /// Whether the listing saw attributes worth carrying on this entry.
    fn has_attrs(&self, job: &Job) -> bool {
        self.wanted().any() && job.src.xattrs.is_some_and(|d| d != xattrs::empty_digest())
    }

    /// For an upload from a local tree: the value of `ferry_xattrs` the blob gets. Outer None:
    /// nothing known, the blob's value is left as it is; Some(None): the blob holds none (the
    /// entry has none, or they did not fit and were counted).
    pub(super) async fn attrs_for_blob(&self, job: &Job) -> Result<Option<Option<String>>> {
        if self.src.local().is_none() || self.dst.as_azure().is_none() || !self.wanted().any() {
            return Ok(None);
        }
        if job.src.xattrs.is_none() {
            return Ok(None);
        }
        if !self.has_attrs(job) {
            return Ok(Some(None));
        }
        let (rel, wanted) = (job.src.path.clone(), self.wanted());
        let attrs = blocking_local(&self.src, move |local| {
            let path = local.path(&rel);
            xattrs::c_path(&path)
                .and_then(|c| xattrs::read(&On::Path(&c), wanted))
                .map_err(|e| StoreError::io(path.display().to_string(), e))
        })
        .await?
        .unwrap_or_default();
        match in_blob::encode(&attrs) {
            Some(v) if !attrs.is_empty() => Ok(Some(Some(v))),
            Some(_) => Ok(Some(None)),
            None => {
                Refused::all(&attrs, wanted)
                    .kinds()
                    .for_each(|k| self.stats.not_kept(k));
                Ok(Some(None))
            }
        }
    }

    /// For a download into a local tree: the blob's stored attributes made those of what was
    /// written at the job's destination (one HEAD, only for a blob the listing saw some on).
    pub(super) async fn attrs_from_blob(&self, job: &Job) -> Result<()> {
        let (Some(src), Some(_)) = (self.src.as_azure(), self.dst.local()) else {
            return Ok(());
        };
        if !self.has_attrs(job) {
            return Ok(());
        }
        let Some((_, _, props)) = src.version_and_props(&job.src.path).await? else {
            return Err(StoreError::NotFound("vanished from the source".into()));
        };
        let Some(want) = props
            .metadata
            .get(in_blob::KEY)
            .and_then(|v| in_blob::decode(v))
        else {
            return Ok(());
        };
        let (rel, wanted) = (job.dst_path.clone(), self.wanted());
        let refused = blocking_local(&self.dst, move |local| {
            let path = local.path(&rel);
            let apply = || {
                let c = xattrs::c_path(&path)?;
                let on = On::Path(&c);
                let now = xattrs::read(&on, wanted)?;
                match now {
                    Some(now) => xattrs::apply(&on, &want, Some(&now), wanted),
                    None => Ok(Refused::all(&want, wanted)),
                }
            };
            apply().map_err(|e| StoreError::io(path.display().to_string(), e))
        })
        .await?;
        refused.kinds().for_each(|k| self.stats.not_kept(k));
        Ok(())
    }

    /// For an upload of a local file of more than one block: where it holds data, if it has
    /// holes (an open and an fstat; SEEK_DATA/SEEK_HOLE only for a sparse one).
    pub(super) async fn sparse_of(&self, job: &Job) -> Result<Option<Sparse>> {
        if self.src.local().is_none() || self.dst.as_azure().is_none() || !self.opts.preserve.sparse
        {
            return Ok(None);
        }
        let rel = job.src.path.clone();
        blocking_local(&self.src, move |local| {
            let path = local.path(&rel);
            let io = |e| StoreError::io(path.display().to_string(), e);
            let f = std::fs::File::open(&path).map_err(io)?;
            let md = f.metadata().map_err(io)?;
            Sparse::of_file(&f, &md).map_err(io)
        })
        .await
    }
}

/// The layout an upload records (`ferry_sparse`) in the room its `ferry_xattrs` leaves.
pub(super) fn sparse_within(
    sparse: Option<Sparse>,
    props: Option<&crate::storage::azure::BlobProps>,
) -> Option<Sparse> {
    let xattrs = props.and_then(|p| p.metadata.get(in_blob::KEY));
    sparse.map(|s| in_blob_sparse::within(s, in_blob_sparse::room(xattrs.map(String::as_str))))
}
