//! A Blob lease on one blob below the store's root: how passes of one migration whose carried
//! state is in Blob storage keep each other out when they start on different machines (Azure
//! Batch heads, two login nodes), where the run directory's lock file cannot be seen by both.
//!
//! The lease is short (`LEASE_SECONDS`) and renewed by its holder: a pass killed with its
//! machine loses it within that time, and no one has to judge whether it is gone. The blob holds
//! who took it, written under the lease, so that a refused pass can name the holder.

use azure_core::http::{Method, Request};
use bytes::Bytes;

use super::{AzureStore, Inner};
use crate::error::{Result, StoreError};

/// Long enough to ride out a slow renewal, short enough that a dead holder frees it soon.
pub const LEASE_SECONDS: u32 = 60;

/// What a request for the lease found.
pub enum Lease {
    /// Taken (or renewed, or given back) under the id asked for.
    Held,
    /// Another id holds it; what the blob says of its holder.
    Refused(Bytes),
}

impl AzureStore {
    /// Takes the lease on `path` under `id` (a GUID the caller chose) and writes `holder` into
    /// the blob under it. The blob is made, empty, where it is missing. Taking a lease one
    /// already holds renews it.
    pub async fn lease_acquire(&self, path: &[u8], id: &str, holder: Bytes) -> Result<Lease> {
        let s = &self.inner;
        let name = s.name(path)?;
        let acquire = || async {
            let mut req = lease_request(s, &name, "acquire").await?;
            req.insert_header("x-ms-lease-duration", LEASE_SECONDS.to_string());
            req.insert_header("x-ms-proposed-lease-id", id.to_string());
            s.send(&req, &[200, 201]).await
        };
        let taken = match acquire().await {
            Err(e) if e.is_not_found() => {
                create_empty(s, &name).await?;
                acquire().await
            }
            other => other,
        };
        match taken {
            Ok(_) => {}
            Err(StoreError::Http { status: 409, .. }) => {
                return Ok(Lease::Refused(self.holder(path).await?));
            }
            Err(e) => return Err(e),
        }
        let mut req = s.request(Method::Put, &name).await?;
        req.insert_header("x-ms-lease-id", id.to_string());
        req.insert_header("x-ms-blob-type", "BlockBlob");
        req.insert_header("content-length", holder.len().to_string());
        req.set_body(holder);
        s.send(&req, &[201]).await?;
        Ok(Lease::Held)
    }

    /// Renews the lease `id` holds on `path`; Refused when it holds it no more.
    pub async fn lease_renew(&self, path: &[u8], id: &str) -> Result<Lease> {
        self.lease_with(path, id, "renew").await
    }

    /// Gives back the lease `id` holds on `path`; Refused when it held none.
    pub async fn lease_release(&self, path: &[u8], id: &str) -> Result<Lease> {
        self.lease_with(path, id, "release").await
    }

    async fn lease_with(&self, path: &[u8], id: &str, action: &str) -> Result<Lease> {
        let s = &self.inner;
        let name = s.name(path)?;
        let mut req = lease_request(s, &name, action).await?;
        req.insert_header("x-ms-lease-id", id.to_string());
        match s.send(&req, &[200]).await {
            Ok(_) => Ok(Lease::Held),
            // Another lease, none (expired and taken, or released), or no blob at all.
            Err(StoreError::Http {
                status: 409 | 412, ..
            }) => Ok(Lease::Refused(self.holder(path).await.unwrap_or_default())),
            Err(e) if e.is_not_found() => Ok(Lease::Refused(Bytes::new())),
            Err(e) => Err(e),
        }
    }

    /// What the blob says of its holder (a lease does not stop reads); empty where it is gone.
    async fn holder(&self, path: &[u8]) -> Result<Bytes> {
        use crate::storage::Store;
        let Some((e, _)) = self.head(path).await? else {
            return Ok(Bytes::new());
        };
        Ok(self.read(path, 0, e.size(), None).await?.data)
    }
}

async fn lease_request(s: &Inner, name: &str, action: &str) -> Result<Request> {
    let mut req = s.request(Method::Put, name).await?;
    req.url_mut().query_pairs_mut().append_pair("comp", "lease");
    req.insert_header("x-ms-lease-action", action.to_string());
    req.insert_header("content-length", "0");
    Ok(req)
}

/// An empty blob at `name` unless one is there (another pass may make it at the same moment).
async fn create_empty(s: &Inner, name: &str) -> Result<()> {
    let mut req = s.request(Method::Put, name).await?;
    req.insert_header("x-ms-blob-type", "BlockBlob");
    req.insert_header("content-length", "0");
    req.insert_header("if-none-match", "*");
    match s.send(&req, &[201]).await {
        Ok(_) | Err(StoreError::Http { status: 409, .. }) => Ok(()),
        Err(StoreError::Http { status: 412, .. }) => Ok(()),
        Err(e) => Err(e),
    }
}
