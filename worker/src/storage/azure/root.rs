//! The top directory's own attributes. Below a prefix they are a folder stub at the prefix's
//! own name (`c/p` for `c/p/`), as a listing of the container shows that directory; at a
//! container's root no blob can stand for it, so they go in the container's metadata, under
//! the same keys.

use azure_core::http::headers::Headers;
use azure_core::http::{Method, Request};
use bytes::Bytes;

use super::{posix, user_metadata, AzureStore, Inner};
use crate::error::Result;
use crate::manifest::Kind;
use crate::storage::Meta;

impl AzureStore {
    /// What the root holds of mode, owner and mtime; None where nothing was stored.
    pub(super) async fn read_root_meta(&self) -> Result<Option<Meta>> {
        let s = &self.inner;
        let h = match stub_name(s) {
            Some(name) => s.properties(&name).await?,
            None => Some(
                s.send(&container_request(s, Method::Head, false).await?, &[200])
                    .await?,
            ),
        };
        Ok(h.and_then(|h| stored(&h)))
    }

    /// Gives the root the attributes `meta` names, where it lacks them; Ok(true) if it did.
    pub(super) async fn write_root_meta(&self, meta: &Meta) -> Result<bool> {
        let s = &self.inner;
        if meta.mtime.is_none() && meta.mode.is_none() && meta.uid.is_none() {
            return Ok(false);
        }
        let Some(name) = stub_name(s) else {
            let h = s
                .send(&container_request(s, Method::Head, false).await?, &[200])
                .await?;
            if stored(&h).is_some_and(|now| !differs(&now, meta)) {
                return Ok(false);
            }
            let mut req = container_request(s, Method::Put, true).await?;
            req.insert_header("content-length", "0");
            for (k, v) in posix::replaced(&user_metadata(&h), meta, Kind::Dir, s.posix_style) {
                req.insert_header(format!("x-ms-meta-{k}"), v);
            }
            s.send(&req, &[200]).await?;
            return Ok(true);
        };
        match s.properties(&name).await? {
            Some(h) if stored(&h).is_some_and(|now| !differs(&now, meta)) => Ok(false),
            Some(h) if posix::read(&user_metadata(&h)).kind == Kind::Dir => s
                .set_meta_named(&name, Kind::Dir, meta, None)
                .await
                .map(|_| true),
            // None, or a blob of the user's own at that name, which is left alone: a file
            // there and a folder of the same name cannot both be.
            Some(_) => Ok(false),
            None => s
                .put_named(&name, Kind::Dir, Bytes::new(), meta, None)
                .await
                .map(|_| true),
        }
    }
}

/// The folder stub standing for the root, where it has a name.
fn stub_name(s: &Inner) -> Option<String> {
    let name = s.root.trim_end_matches('/');
    (!name.is_empty()).then(|| name.to_string())
}

/// A request on the container itself: its properties, or with `metadata` its metadata.
async fn container_request(s: &Inner, method: Method, metadata: bool) -> Result<Request> {
    let mut url = s.clients().await?.base.clone();
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("restype", "container");
        if metadata {
            q.append_pair("comp", "metadata");
        }
    }
    let mut req = Request::new(url, method);
    req.insert_header("x-ms-version", s.clients().await?.options.version.clone());
    Ok(req)
}

/// The attributes stored in `h`'s metadata, only as stored (no Last-Modified stands in).
fn stored(h: &Headers) -> Option<Meta> {
    let p = posix::read(&user_metadata(h));
    (p.mtime.is_some() || p.mode.is_some() || p.owner.is_some())
        .then(|| Meta::posix(p.mtime, p.mode, p.owner))
}

/// Whether `want` names an attribute `now` does not have.
fn differs(now: &Meta, want: &Meta) -> bool {
    (want.mtime.is_some() && want.mtime != now.mtime)
        || (want.mode.is_some() && want.mode != now.mode)
        || (want.uid.is_some() && (want.uid, want.gid) != (now.uid, now.gid))
}
