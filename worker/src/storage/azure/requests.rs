//! Every request sent to Blob storage, counted by kind in `Stats::requests`. One policy in the
//! pipeline every client and ferry's own requests share sees each attempt as it goes to the
//! wire, so no call site can forget to count, and ferry's retries (the SDK's are off) count
//! once per attempt, as the service bills them.

use std::sync::Arc;

use async_trait::async_trait;
use azure_core::http::headers::HeaderName;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{Context, Method, Request};

use crate::stats::{RequestKind, Stats};

/// What a request is, from its method, its `comp` and `restype` parameters and whether it
/// names a source to copy from: the operation names of the Blob service's REST reference.
pub fn classify(
    method: &Method,
    comp: Option<&str>,
    restype: Option<&str>,
    copy_source: bool,
) -> RequestKind {
    use RequestKind::*;
    let container = restype == Some("container");
    match (method, comp) {
        (Method::Head, _) => Heads,
        (Method::Get, Some("list")) => ListPages,
        (Method::Get, None) if container => Heads,
        (Method::Get, None) => Gets,
        (Method::Put, Some("block")) => Blocks,
        (Method::Put, Some("blocklist")) => BlockLists,
        (Method::Put, None) if container => Others,
        (Method::Put, None) if copy_source => Copies,
        (Method::Put, None) => Puts,
        (Method::Delete, None) if !container => Deletes,
        (Method::Post, Some("batch")) => Batches,
        _ => Others,
    }
}

fn kind_of(req: &Request) -> RequestKind {
    let (mut comp, mut restype) = (None, None);
    for (k, v) in req.url().query_pairs() {
        match &*k {
            "comp" => comp = Some(v),
            "restype" => restype = Some(v),
            _ => {}
        }
    }
    let copy_source = req
        .headers()
        .get_optional_str(&HeaderName::from_static("x-ms-copy-source"))
        .is_some();
    classify(
        &req.method(),
        comp.as_deref(),
        restype.as_deref(),
        copy_source,
    )
}

/// Counts each request it passes on. Placed last among the per-try policies: what it counts has
/// been signed and is about to be sent; it changes nothing, so a signature made before it
/// still covers every header.
pub struct CountingPolicy {
    pub stats: Arc<Stats>,
}

impl std::fmt::Debug for CountingPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CountingPolicy")
    }
}

#[async_trait]
impl Policy for CountingPolicy {
    async fn send(
        &self,
        ctx: &Context,
        req: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        self.stats.requests.sent(kind_of(req));
        next[0].send(ctx, req, &next[1..]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use azure_core::http::Url;
    use RequestKind::*;

    fn kind(method: Method, url: &str, copy_source: bool) -> RequestKind {
        let mut req = Request::new(Url::parse(url).unwrap(), method);
        if copy_source {
            req.insert_header("x-ms-copy-source", "http://127.0.0.1:10000/a/c/src");
        }
        kind_of(&req)
    }

    #[test]
    fn kinds_of_the_operations_ferry_sends() {
        let c = "http://127.0.0.1:10000/acct/cont";
        let b = "http://127.0.0.1:10000/acct/cont/dir/b.bin";
        assert_eq!(
            kind(
                Method::Get,
                &format!("{c}?restype=container&comp=list&maxresults=5000"),
                false
            ),
            ListPages
        );
        assert_eq!(
            kind(
                Method::Get,
                &format!("{c}?delimiter=%2F&restype=container&comp=list"),
                false
            ),
            ListPages
        );
        assert_eq!(kind(Method::Put, b, false), Puts);
        assert_eq!(
            kind(Method::Put, &format!("{b}?comp=block&blockid=Zm9v"), false),
            Blocks
        );
        assert_eq!(
            kind(Method::Put, &format!("{b}?comp=block&blockid=Zm9v"), true),
            Blocks
        );
        assert_eq!(
            kind(Method::Put, &format!("{b}?comp=blocklist"), false),
            BlockLists
        );
        assert_eq!(kind(Method::Get, b, false), Gets);
        assert_eq!(kind(Method::Head, b, false), Heads);
        assert_eq!(
            kind(Method::Get, &format!("{c}?restype=container"), false),
            Heads
        );
        assert_eq!(kind(Method::Delete, b, false), Deletes);
        assert_eq!(kind(Method::Put, b, true), Copies);
        assert_eq!(
            kind(Method::Put, &format!("{b}?comp=metadata"), false),
            Others
        );
        assert_eq!(
            kind(Method::Put, &format!("{b}?comp=copy&copyid=x"), false),
            Others
        );
        assert_eq!(
            kind(Method::Put, &format!("{c}?restype=container"), false),
            Others
        );
        assert_eq!(
            kind(Method::Delete, &format!("{c}?restype=container"), false),
            Others
        );
        assert_eq!(
            kind(
                Method::Post,
                &format!("{c}?restype=container&comp=batch"),
                false
            ),
            Batches
        );
        assert_eq!(
            kind(
                Method::Get,
                &format!("{b}?comp=blocklist&blocklisttype=uncommitted"),
                false
            ),
            Others
        );
        assert_eq!(kind(Method::Get, &format!("{b}?comp=tags"), false), Others);
    }

    #[test]
    fn a_sas_query_does_not_change_the_kind() {
        let sas = "sv=2024-08-04&ss=b&srt=co&sp=rl&sig=abc%3D";
        assert_eq!(
            kind(Method::Get, &format!("http://h/a/c/x?{sas}"), false),
            Gets
        );
        assert_eq!(
            kind(
                Method::Get,
                &format!("http://h/a/c?restype=container&comp=list&{sas}"),
                false
            ),
            ListPages
        );
    }
}
