//! Azure Blob Storage through the official SDK (azure_storage_blob), driven by ferry's engine:
//! block uploads with block IDs derived from each block's bytes (so a killed upload resumes from
//! Get Block List, and only with blocks that still hold the source's bytes),
//! ranged downloads resumed mid-body, paged listings. ferry's retry module, not the SDK's, retries
//! every call, so `--max-retries`, the time budget and the counts by status in `--json` hold.

pub mod auth;
mod batch;
mod copy;
pub mod lease;
mod list;
pub mod mime;
pub mod names;
pub mod posix;
mod requests;
mod root;
mod stall;
pub mod xml;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use azure_core::error::CheckSuccessOptions;
use azure_core::error::ErrorKind;
use azure_core::http::headers::{HeaderName, Headers};
use azure_core::http::policies::auth::BearerTokenAuthorizationPolicy;
use azure_core::http::policies::Policy;
use azure_core::http::response::AsyncResponseBody;
use azure_core::http::{
    ClientOptions, Context, HttpClient, Method, Pipeline, PipelineSendOptions,
    PipelineStreamOptions, Request, RetryOptions, StatusCode, Transport, Url,
};
use azure_storage_blob::models::{
    BlobContainerClientListBlobsOptions, BlockBlobClientCommitBlockListOptions,
    BlockBlobClientStageBlockOptions, BlockListType, BlockLookupList, HttpRange,
    ListBlobsIncludeItem,
};
use azure_storage_blob::{
    BlobClient, BlobClientOptions, BlobContainerClient, BlobContainerClientOptions, BlockBlobClient,
};
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use tokio::sync::{mpsc, OnceCell};

use super::{
    Capabilities, Chunk, Meta, ObjectVersion, OpenOptions, Props, Sample, Store, StoredXattrs,
    Upload, UploadPlan,
};
use crate::error::{Interruption, Result, StoreError};
use crate::keyspace::Cuts;
use crate::location::BlobLocation;
use crate::manifest::{Entry, Kind};
use crate::retry::{retry, RetryPolicy};
use crate::stats::Stats;
use crate::storage::metadata::{sparse, xattrs};
use auth::{Credential, SharedKeyPolicy};

/// Blob names keep their '/' separators; everything else outside the unreserved set is escaped.
const PATH_SET: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

pub struct AzureStore {
    inner: Arc<Inner>,
}

struct Inner {
    loc: BlobLocation,
    /// Root prefix of this store: "" or ending in '/'.
    root: String,
    cred: Credential,
    http: Arc<dyn HttpClient>,
    /// Built on first use: in auto mode the token chain has to be resolved first.
    clients: OnceCell<Clients>,
    retry: RetryPolicy,
    stats: Arc<Stats>,
    block_md5: bool,
    /// How long a server-side copy into this store is waited for.
    patience: copy::Patience,
    /// Which keys beside rclone's carry POSIX attributes (`posix.rs`).
    posix_style: posix::PosixStyle,
    /// Uploads get a Content-Type from their name (`mime.rs`), not application/octet-stream.
    guess_mime: bool,
    /// A source blob's access tier and index tags go along to its copy.
    keep_tier: bool,
    keep_tags: bool,
    /// List Blobs requests one recursive listing keeps in flight (`list.rs`); 1: one stream.
    list_concurrency: usize,
    /// Entries asked for per List Blobs page.
    list_page: u32,
}

/// A blob's `Props`, from a HEAD's or a GET's headers.
fn props_of_headers(h: &Headers) -> Props {
    let get = |k: &'static str| {
        h.get_optional_str(&HeaderName::from_static(k))
            .map(str::to_string)
    };
    Props {
        metadata: user_metadata(h),
        content_type: get("content-type"),
        content_encoding: get("content-encoding"),
        content_language: get("content-language"),
        content_disposition: get("content-disposition"),
        cache_control: get("cache-control"),
        tier: get("x-ms-access-tier")
            .filter(|_| get("x-ms-access-tier-inferred").as_deref() != Some("true")),
        tags: None,
    }
}

/// Index tags as `x-ms-tags` takes them.
fn tags_header(tags: &[(String, String)]) -> String {
    const FORM: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    tags.iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                utf8_percent_encode(k, FORM),
                utf8_percent_encode(v, FORM)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

struct Clients {
    /// Pipeline settings shared by every blob's client, so one token cache serves them all.
    options: BlobClientOptions,
    /// The same settings built once, for the requests sent without a client (`Inner::request`).
    pipeline: Pipeline,
    /// The container's URL, with the SAS query if there is one.
    base: Url,
    container: BlobContainerClient,
    /// The same container listed one level at a time (`delimiter=/`), which the SDK's
    /// `list_blobs` has no option for; it keeps any query the URL already has.
    by_level: BlobContainerClient,
    /// The token source the pipeline signs with, for the parts of a Blob Batch, which carry
    /// their own authorization.
    token: Option<Arc<dyn azure_core::credentials::TokenCredential>>,
}

/// How long an idle connection is kept for reuse (see `http_client`).
const POOL_IDLE: Duration = Duration::from_secs(4);

/// One HTTP client for every request of a run, tuned for bulk transfer.
fn http_client(opts: &OpenOptions) -> Result<Arc<dyn HttpClient>> {
    // ring is the provider rustls already builds; installing it twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .http1_only()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(opts.concurrency.max(1))
        // Below the shortest keep-alive of the servers ferry meets (5 s: Node's, so Azurite's).
        // Kept longer, a connection the server has closed can be handed out before ferry has
        // seen the close (a busy machine not running it meanwhile), and the request it carries
        // is lost and sent again; under --max-bandwidth connections sit idle that long. A new
        // connection after 4 s of idling costs a handshake, not a request.
        .pool_idle_timeout(POOL_IDLE)
        .connect_timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| StoreError::Invalid(format!("HTTP client: {e}")))?;
    // Not reqwest's read_timeout: see stall.rs.
    Ok(Arc::new(stall::StallTimeout {
        inner: Arc::new(http),
        timeout: opts.io_timeout,
    }))
}

fn map_err(e: azure_core::Error) -> StoreError {
    let text = auth::error_text(&e);
    match e.kind() {
        ErrorKind::HttpResponse {
            status,
            error_code,
            raw_response,
        } => {
            let (body_code, body_msg) = raw_response
                .as_ref()
                .map(|r| xml::parse_error(r.body()))
                .unwrap_or_default();
            let retry_after = raw_response
                .as_ref()
                .and_then(|r| {
                    r.headers()
                        .get_optional_str(&HeaderName::from_static("retry-after"))
                })
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let code = error_code.clone().or(body_code);
            if *status == StatusCode::NotFound {
                return match code.as_deref() {
                    Some(c @ "ContainerNotFound") => StoreError::RootNotFound(format!(
                        "{c}: {}",
                        body_msg.unwrap_or_else(|| "the container does not exist".into())
                    )),
                    // Copy Blob's source unreadable with the credential it was given, not an
                    // absent blob: an HTTP error, for `copy::source_hint` to explain.
                    Some("CannotVerifyCopySource") => http(status, code, body_msg, retry_after),
                    _ => StoreError::NotFound(code.unwrap_or_else(|| "not found".into())),
                };
            }
            if *status == StatusCode::PreconditionFailed
                && !code.as_deref().is_some_and(|c| c.starts_with("Lease"))
            {
                // Only reads send If-Match: the blob was rewritten since this copy began. (A
                // lease held on the blob is a 412 too, LeaseIdMissing and the like.)
                return StoreError::Integrity("the blob changed while being copied (its ETag no longer matches); not committed".into());
            }
            http(status, code, body_msg, retry_after)
        }
        ErrorKind::Connection | ErrorKind::Io => {
            let cause = match timed_out(&e) {
                true => Interruption::Timeout,
                false => Interruption::Connection,
            };
            StoreError::transport(cause, text)
        }
        ErrorKind::Credential => StoreError::Auth(text),
        _ => StoreError::Invalid(text),
    }
}

/// An answer of the service's that is none of the kinds `map_err` sets apart.
fn http(
    status: &StatusCode,
    code: Option<String>,
    message: Option<String>,
    retry_after: Option<Duration>,
) -> StoreError {
    let mut message = message.unwrap_or_else(|| status.canonical_reason().to_string());
    if *status == StatusCode::Forbidden {
        message.push_str(" (check the credentials: `ferry env` shows which source is in use)");
    }
    StoreError::Http {
        status: u16::from(*status),
        code,
        message,
        retry_after,
    }
}

/// A body that broke off mid-way: counted as truncated, or as a timeout where it stalled.
fn body_err(e: azure_core::Error) -> StoreError {
    let cause = match timed_out(&e) {
        true => Interruption::Timeout,
        false => Interruption::Truncated,
    };
    StoreError::transport(cause, format!("truncated body: {}", auth::error_text(&e)))
}

/// Whether a transport error is a timeout, by the types in its chain: `--io-timeout`'s own
/// (`stall::Stalled`), reqwest's, or the operating system's.
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        let timeout = e.is::<stall::Stalled>()
            || e.downcast_ref::<reqwest::Error>()
                .is_some_and(reqwest::Error::is_timeout)
            || e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
        if timeout {
            return true;
        }
        next = e.source();
    }
    false
}

fn blob_name_checked(name: &str) -> Result<()> {
    if name.split('/').any(|c| c == "." || c == "..") {
        return Err(StoreError::Invalid(format!(
            "blob name {name:?} has a '.' or '..' segment, which HTTP clients rewrite"
        )));
    }
    Ok(())
}

impl AzureStore {
    pub fn new(loc: BlobLocation, opts: &OpenOptions) -> Result<Self> {
        let env = opts.env.clone();
        let choice = auth::choose(opts.auth, loc.sas.is_some(), &loc.account, &*env)?;
        let cred = auth::build(&choice, opts.auth, &loc.account, loc.sas.as_deref(), &*env)?;
        let p = loc.prefix.trim_end_matches('/');
        let root = if p.is_empty() {
            String::new()
        } else {
            format!("{p}/")
        };
        let inner = Inner {
            loc,
            root,
            cred,
            http: http_client(opts)?,
            clients: OnceCell::new(),
            retry: opts.retry.clone(),
            stats: opts.stats.clone(),
            block_md5: opts.block_md5,
            patience: opts
                .copy_wait
                .map(copy::Patience::up_to)
                .unwrap_or(copy::PATIENCE),
            posix_style: opts.posix_style,
            guess_mime: opts.guess_mime,
            keep_tier: opts.keep_tier,
            keep_tags: opts.keep_tags,
            list_concurrency: opts.list_concurrency,
            list_page: opts.list_page,
        };
        Ok(AzureStore {
            inner: Arc::new(inner),
        })
    }
}

impl Inner {
    /// One Put Blob of `name` itself (see `Store::put_node`): a node of `kind` (a file's
    /// bytes, a symlink's target, an empty folder stub), with the whole object's MD5, which the
    /// service checks on arrival and keeps as the blob's.
    async fn put_named(
        &self,
        name: &str,
        kind: Kind,
        data: Bytes,
        meta: &Meta,
        props: Option<&Props>,
    ) -> Result<()> {
        let (s, name) = (self, name.to_string());
        let mut req = s.request(Method::Put, &name).await?;
        req.insert_header("content-length", data.len().to_string());
        if let Some(md5) = meta.md5 {
            req.insert_header("content-md5", posix::b64(&md5));
        }
        req.insert_header("x-ms-blob-type", "BlockBlob");
        for (k, v) in s.content_headers(&name, kind, props) {
            req.insert_header(k, v);
        }
        for (k, v) in s.metadata_with(meta, kind, props) {
            req.insert_header(format!("x-ms-meta-{k}"), v);
        }
        req.set_body(data);
        s.send(&req, &[201]).await?;
        Ok(())
    }
}

impl Inner {
    fn name(&self, rel: &[u8]) -> Result<String> {
        let encoded = names::encode(rel)?;
        // Checked as the path was given: encoding would hide a '.' segment as '．'.
        blob_name_checked(&format!("{}{}", self.root, String::from_utf8_lossy(rel)))?;
        let name = format!("{}{encoded}", self.root);
        names::check(&name)?;
        Ok(name)
    }

    /// The relative path a listed blob name (the root included) stands for; None outside the
    /// root or at the root itself.
    fn rel_of(&self, name: &str) -> Option<Result<Vec<u8>>> {
        let rel = name.strip_prefix(&self.root)?;
        (!rel.is_empty()).then(|| names::decode(rel).map_err(StoreError::from))
    }

    /// One SDK call under ferry's retry policy, its error mapped to a `StoreError`.
    async fn call<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = azure_core::Result<T>>,
    {
        retry(&self.retry, &self.stats, || {
            let attempt = op();
            async move { attempt.await.map_err(map_err) }
        })
        .await
    }

    async fn clients(&self) -> Result<&Clients> {
        self.clients.get_or_try_init(|| self.connect()).await
    }

    async fn connect(&self) -> Result<Clients> {
        let mut url = Url::parse(&self.loc.endpoint)
            .map_err(|e| StoreError::Invalid(format!("bad endpoint {}: {e}", self.loc.endpoint)))?;
        url.path_segments_mut()
            .map_err(|_| StoreError::Invalid(format!("bad endpoint {}", self.loc.endpoint)))?
            .pop_if_empty()
            .push(&self.loc.container);
        let mut per_try: Vec<Arc<dyn Policy>> = Vec::new();
        let mut bearer = None;
        match &self.cred {
            Credential::Anonymous => {}
            Credential::Sas(q) => url.set_query((!q.is_empty()).then_some(q.as_str())),
            Credential::SharedKey { account, key } => per_try.push(Arc::new(SharedKeyPolicy {
                account: account.clone(),
                key: key.clone(),
            })),
            Credential::Token(chain) => {
                if let Some(token) = chain.resolve(&self.http).await? {
                    // The SDK's own check, kept: a token must not travel in clear text.
                    if url.scheme() != "https" {
                        return Err(StoreError::Auth(format!(
                            "an Entra ID token is sent over https only, and {} is not https (use a key or a SAS for an emulator)",
                            self.loc.display()
                        )));
                    }
                    bearer = Some(token.clone());
                    per_try.push(Arc::new(BearerTokenAuthorizationPolicy::new(
                        token,
                        [auth::STORAGE_SCOPE],
                    )));
                }
            }
        }
        per_try.push(Arc::new(requests::CountingPolicy {
            stats: self.stats.clone(),
        }));
        let client_options = ClientOptions {
            transport: Some(Transport::new(self.http.clone())),
            retry: RetryOptions::none(),
            per_try_policies: per_try,
            ..Default::default()
        };
        let options = BlobClientOptions {
            client_options: client_options.clone(),
            ..Default::default()
        };
        let pipeline = Pipeline::new(
            option_env!("CARGO_PKG_NAME"),
            option_env!("CARGO_PKG_VERSION"),
            client_options.clone(),
            Vec::new(),
            Vec::new(),
            None,
        );
        let container_options = BlobContainerClientOptions {
            client_options,
            ..Default::default()
        };
        let mut level_url = url.clone();
        level_url.query_pairs_mut().append_pair("delimiter", "/");
        let client = |u: Url| {
            BlobContainerClient::new(u, None, Some(container_options.clone())).map_err(map_err)
        };
        Ok(Clients {
            options,
            pipeline,
            container: client(url.clone())?,
            by_level: client(level_url)?,
            base: url,
            token: bearer,
        })
    }

    /// One blob's URL, with the SAS query when the credential is one. Built here, not by the
    /// SDK's `blob_client`, which parses the name as URL text and so silently drops tabs and
    /// newlines from it.
    async fn blob_url(&self, name: &str) -> Result<Url> {
        let c = self.clients().await?;
        let mut url = c.base.clone();
        url.set_path(&format!(
            "{}/{}",
            c.base.path(),
            utf8_percent_encode(name, PATH_SET)
        ));
        Ok(url)
    }

    /// A client for one blob.
    async fn blob(&self, name: &str) -> Result<BlobClient> {
        let url = self.blob_url(name).await?;
        BlobClient::new(url, None, Some(self.clients().await?.options.clone())).map_err(map_err)
    }

    /// A request for blob `name`, to send on the shared pipeline. ferry's calls made once per
    /// blob (GET, Put Blob, HEAD, DELETE) go this way, as the SDK's clients would send them: a
    /// client per blob builds a pipeline per blob, and that and the SDK's parsing of every
    /// response header were a sixth of ferry's CPU on 16 KiB blobs.
    async fn request(&self, method: Method, name: &str) -> Result<Request> {
        let mut req = Request::new(self.blob_url(name).await?, method);
        req.insert_header(
            "x-ms-version",
            self.clients().await?.options.version.clone(),
        );
        Ok(req)
    }

    /// Sends `req` under the retry policy, a fresh copy each attempt; any status but `ok` is
    /// an error.
    async fn send(&self, req: &Request, ok: &'static [u16]) -> Result<Headers> {
        let pipeline = &self.clients().await?.pipeline;
        self.call(|| async {
            let opts = PipelineSendOptions {
                check_success: CheckSuccessOptions { success_codes: ok },
                ..Default::default()
            };
            Ok(pipeline
                .send(&Context::new(), &mut req.clone(), Some(opts))
                .await?
                .headers()
                .clone())
        })
        .await
    }

    /// The blob's properties (HEAD), or None where there is no such blob.
    async fn properties(&self, name: &str) -> Result<Option<Headers>> {
        match self
            .send(&self.request(Method::Head, name).await?, &[200])
            .await
        {
            Ok(h) => Ok(Some(h)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One GET of `len` bytes at `offset` (the whole blob when `len` is 0), as one request.
    /// With `version` (an ETag) the service refuses (412) to serve bytes of any other version.
    async fn open_range(
        &self,
        name: &str,
        offset: u64,
        len: u64,
        version: Option<&str>,
    ) -> Result<(Headers, AsyncResponseBody)> {
        let mut req = self.request(Method::Get, name).await?;
        req.insert_header("accept", "application/octet-stream");
        if let Some(v) = version {
            req.insert_header("if-match", v.to_string());
        }
        if len > 0 {
            req.insert_header("range", HttpRange::new(offset, len).to_string());
        }
        let opts = PipelineStreamOptions {
            check_success: CheckSuccessOptions {
                success_codes: &[200, 206],
            },
            ..Default::default()
        };
        let (_, headers, body) = self
            .clients()
            .await?
            .pipeline
            .stream(&Context::new(), &mut req, Some(opts))
            .await
            .map_err(map_err)?
            .deconstruct();
        Ok((headers, body))
    }

    /// One page of List Blobs under `prefix`: all names (`recursive`) or one level, from
    /// `marker` or from the key `start_from`.
    async fn list_page(
        &self,
        recursive: bool,
        prefix: &str,
        marker: Option<&str>,
        start_from: Option<&str>,
        page: u32,
    ) -> Result<xml::ListPage> {
        let clients = self.clients().await?;
        let client = if recursive {
            &clients.container
        } else {
            &clients.by_level
        };
        // One page per call, so a failed page is retried from its own marker.
        let body = retry(&self.retry, &self.stats, || async {
            let opts = BlobContainerClientListBlobsOptions {
                include: Some(vec![ListBlobsIncludeItem::Metadata]),
                marker: marker.map(str::to_string),
                start_from: start_from.map(str::to_string),
                maxresults: Some(page as i32),
                prefix: (!prefix.is_empty()).then(|| prefix.to_string()),
                ..Default::default()
            };
            let mut pages = client.list_blobs(Some(opts)).map_err(map_err)?.into_pages();
            match pages.next().await {
                Some(page) => Ok(Bytes::from(page.map_err(map_err)?.into_body())),
                None => Ok(Bytes::new()),
            }
        })
        .await?;
        // ferry reads the page itself: the SDK's model has no BlobPrefix entries.
        xml::parse_list(&body)
    }

    /// Streams the entries under `root` + `sub` (`sub` empty or ending in '/'): all of them,
    /// or one level with `recursive` false; only the first `pages` pages if given. Paths stay
    /// relative to the root.
    async fn list_under(
        &self,
        sub: &str,
        recursive: bool,
        pages: Option<(u32, u32)>,
        tx: &mpsc::Sender<Result<Entry>>,
    ) -> Result<bool> {
        let s = self;
        let prefix = format!("{}{sub}", s.root);
        let mut marker: Option<String> = None;
        let (mut left, size) = pages.unwrap_or((u32::MAX, s.list_page));
        loop {
            left -= 1;
            let page = s
                .list_page(recursive, &prefix, marker.as_deref(), None, size)
                .await?;
            // A folder stub and the prefix of the blobs under it are one directory: listed once,
            // as the stub, which has the metadata.
            let mut stubs = std::collections::HashSet::new();
            for b in page.blobs {
                if let Some(e) = s.entry_of(b) {
                    if let Ok(e) = &e {
                        if e.kind == Kind::Dir {
                            stubs.insert(e.path.clone());
                        }
                    }
                    if tx.send(e).await.is_err() {
                        return Ok(false);
                    }
                }
            }
            for p in page.prefixes {
                if let Some(e) = s.prefix_entry(&p) {
                    if e.as_ref().map_or(true, |e| !stubs.contains(&e.path))
                        && tx.send(e).await.is_err()
                    {
                        return Ok(false);
                    }
                }
            }
            match page.next_marker {
                Some(m) if left > 0 => marker = Some(m),
                // Whether the pages asked for ended with names still to list.
                m => return Ok(m.is_some()),
            }
        }
    }

    fn entry_of(&self, b: xml::BlobItem) -> Option<Result<Entry>> {
        let path = match self.rel_of(&b.name)? {
            Ok(path) => path,
            Err(e) => return Some(Err(e)),
        };
        let p = posix::read(&b.metadata);
        Some(Ok(Entry {
            path,
            kind: p.kind,
            size: Some(b.size),
            mtime: crate::same::blob_mtime(p.mtime, p.written_md5, b.md5, b.last_modified),
            md5: b.md5,
            mode: p.mode,
            owner: p.owner,
            xattrs: xattrs::listed_digest(&b.metadata, p.records_attributes()),
            ..Default::default()
        }))
    }

    /// The directory a listed prefix (`root/dir/`) stands for.
    fn prefix_entry(&self, prefix: &str) -> Option<Result<Entry>> {
        let dir = self.rel_of(prefix.trim_end_matches('/'))?;
        Some(dir.map(|path| Entry {
            path,
            kind: Kind::Dir,
            size: Some(0),
            mtime: None,
            md5: None,
            ..Default::default()
        }))
    }

    /// The metadata a blob standing for a node of `kind` with attributes `meta` gets.
    fn metadata_of(&self, meta: &Meta, kind: Kind) -> HashMap<String, String> {
        posix::write(meta, kind, self.posix_style)
    }

    /// What blob `name`, whose HEAD gave `h`, carries besides its bytes, as much of it as this
    /// run keeps: its tags cost a request of their own, made only when they are kept (and
    /// there are some).
    async fn props_of(&self, name: &str, h: &Headers) -> Result<Props> {
        let mut p = props_of_headers(h);
        if !self.keep_tier {
            p.tier = None;
        }
        let tagged = h
            .get_optional_str(&HeaderName::from_static("x-ms-tag-count"))
            .is_some_and(|n| n != "0");
        if self.keep_tags && tagged {
            let blob = self.blob(name).await?;
            let tags = self
                .call(|| blob.get_tags(None))
                .await?
                .into_model()
                .map_err(map_err)?;
            let pairs: Vec<(String, String)> = tags
                .blob_tag_set
                .unwrap_or_default()
                .into_iter()
                .filter_map(|t| Some((t.key?, t.value.unwrap_or_default())))
                .collect();
            p.tags = Some(tags_header(&pairs));
        }
        Ok(p)
    }

    /// A copy of a blob keeps all of its metadata, ferry's keys written over it.
    fn metadata_with(
        &self,
        meta: &Meta,
        kind: Kind,
        props: Option<&Props>,
    ) -> HashMap<String, String> {
        let mut m = props.map(|p| p.metadata.clone()).unwrap_or_default();
        // The source's record is of the source's write; this copy gets its own, or none.
        m.remove(posix::WRITTEN_MD5_KEY);
        m.extend(self.metadata_of(meta, kind));
        m
    }

    /// The content properties of blob `name`: a source blob's, else a type guessed from the
    /// name. (The `x-ms-blob-*` forms: a `Content-Encoding` header would describe the request.)
    fn content_headers(
        &self,
        name: &str,
        kind: Kind,
        props: Option<&Props>,
    ) -> Vec<(&'static str, String)> {
        let guessed = match kind {
            Kind::File if self.guess_mime => mime::guess(name),
            _ => mime::DEFAULT,
        };
        let Some(p) = props else {
            return vec![("x-ms-blob-content-type", guessed.to_string())];
        };
        let mut h = vec![(
            "x-ms-blob-content-type",
            p.content_type
                .clone()
                .unwrap_or_else(|| guessed.to_string()),
        )];
        let mut add = |k, v: &Option<String>| h.extend(v.clone().map(|v| (k, v)));
        add("x-ms-blob-content-encoding", &p.content_encoding);
        add("x-ms-blob-content-language", &p.content_language);
        add("x-ms-blob-content-disposition", &p.content_disposition);
        add("x-ms-blob-cache-control", &p.cache_control);
        add("x-ms-access-tier", &p.tier);
        add("x-ms-tags", &p.tags);
        h
    }
}

/// A response's user metadata (`x-ms-meta-*`), keys lowercased.
fn user_metadata(h: &Headers) -> HashMap<String, String> {
    posix::lowercased(
        h.iter()
            .filter_map(|(k, v)| Some((k.as_str().strip_prefix("x-ms-meta-")?, v.as_str()))),
    )
}

fn meta_from_headers(h: &Headers, ranged: bool) -> Meta {
    meta_and_kind(h, ranged).0
}

/// What a HEAD or GET says of a blob: its attributes and the kind of node it stands for.
fn meta_and_kind(h: &Headers, ranged: bool) -> (Meta, Kind) {
    let get = |k: &'static str| h.get_optional_str(&HeaderName::from_static(k));
    // A ranged GET's Content-MD5 would be the range's; the blob's is in x-ms-blob-content-md5.
    let md5 = if ranged { None } else { get("content-md5") };
    let user = user_metadata(h);
    let p = posix::read(&user);
    let md5 = md5
        .or_else(|| get("x-ms-blob-content-md5"))
        .and_then(xml::decode_md5);
    let last_modified = get("last-modified").and_then(xml::parse_http_date);
    let meta = Meta {
        mtime: crate::same::blob_mtime(p.mtime, p.written_md5, md5, last_modified),
        mode: p.mode,
        uid: p.owner.map(|o| o.0),
        gid: p.owner.map(|o| o.1),
        md5,
        sparse: user.get(sparse::KEY).and_then(|v| sparse::decode(v)),
    };
    (meta, p.kind)
}

fn content_length(h: &Headers) -> u64 {
    h.get_optional_str(&HeaderName::from_static("content-length"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl AzureStore {
    /// The entries directly in directory `dir`: all, or those of its first pages.
    /// The entries directly in `dir`: all of them, or the `pages` asked for and whether names
    /// were left after them.
    async fn level(&self, dir: &[u8], pages: Option<(u32, u32)>) -> Result<(Vec<Entry>, bool)> {
        let sub = if dir.is_empty() {
            String::new()
        } else {
            format!("{}/", names::encode(dir)?)
        };
        let (tx, mut rx) = mpsc::channel(1024);
        let lister = async move {
            let r = self.inner.list_under(&sub, false, pages, &tx).await;
            drop(tx);
            r
        };
        let collect = async move {
            let mut out = Vec::new();
            while let Some(e) = rx.recv().await {
                out.extend(e.ok());
            }
            out
        };
        let (listed, out) = tokio::join!(lister, collect);
        listed.map(|more| (out, more))
    }
}

#[async_trait]
impl Store for AzureStore {
    fn describe(&self) -> String {
        self.inner.loc.display()
    }

    async fn list(&self, recursive: bool, tx: mpsc::Sender<Result<Entry>>) -> Result<()> {
        let s = &self.inner;
        match recursive && s.list_concurrency > 1 {
            true => {
                list::list(
                    s.clone(),
                    s.list_concurrency,
                    s.list_page,
                    (None, None),
                    &tx,
                )
                .await
            }
            false => s.list_under("", recursive, None, &tx).await.map(|_| ()),
        }
    }

    async fn list_range(
        &self,
        cuts: &Cuts,
        k: usize,
        tx: mpsc::Sender<Result<Entry>>,
    ) -> Result<()> {
        let s = &self.inner;
        // The ranges are the service's: each cut as the name it encodes to, put back in order
        // (the encoding does not keep it). A cut is cut short before any character from U+E000
        // up, where the service's order (UTF-16) and a byte order may disagree (list.rs).
        let mut keys: Vec<String> = cuts
            .keys()
            .iter()
            .map(|key| {
                let name = names::encode(key)
                    .unwrap_or_else(|_| String::from_utf8_lossy(key).into_owned());
                let safe = name.find(|c| c >= '\u{e000}').unwrap_or(name.len());
                format!("{}{}", s.root, &name[..safe])
            })
            .collect();
        keys.sort();
        let lo = (k > 1).then(|| keys[k - 2].clone());
        let hi = keys.get(k - 1).cloned();
        list::list(s.clone(), s.list_concurrency, s.list_page, (lo, hi), &tx).await
    }

    async fn list_dir_sample(&self, dir: &[u8], max: usize) -> Result<Sample> {
        let size = (max.clamp(1, 5000) as u32).min(self.inner.list_page.max(1));
        let (entries, more) = self.level(dir, Some((1, size))).await?;
        Ok(Sample { entries, more })
    }

    async fn list_dir(&self, dir: &[u8]) -> Result<Option<Vec<Entry>>> {
        // A prefix is never absent: an empty one simply lists nothing.
        self.level(dir, None)
            .await
            .map(|(entries, _)| Some(entries))
    }

    async fn head(&self, path: &[u8]) -> Result<Option<(Entry, Meta)>> {
        let s = &self.inner;
        Ok(s.properties(&s.name(path)?).await?.map(|h| {
            let (meta, kind) = meta_and_kind(&h, false);
            let owner = meta.uid.zip(meta.gid);
            let user = user_metadata(&h);
            (
                Entry {
                    path: path.to_vec(),
                    kind,
                    size: Some(content_length(&h)),
                    mtime: meta.mtime,
                    md5: meta.md5,
                    mode: meta.mode,
                    owner,
                    // As a listing gives it: one rule for what a blob says of its attributes.
                    xattrs: xattrs::listed_digest(&user, posix::read(&user).records_attributes()),
                    ..Default::default()
                },
                meta,
            )
        }))
    }

    /// The blob's ETag and size, and with `props` what it carries besides, from one HEAD.
    async fn version(&self, path: &[u8], props: bool) -> Result<Option<ObjectVersion>> {
        let s = &self.inner;
        let name = s.name(path)?;
        let Some(h) = s.properties(&name).await? else {
            return Ok(None);
        };
        Ok(Some(ObjectVersion {
            token: h
                .get_optional_str(&HeaderName::from_static("etag"))
                .unwrap_or_default()
                .to_string(),
            size: content_length(&h),
            props: match props {
                true => Some(s.props_of(&name, &h).await?),
                false => None,
            },
        }))
    }

    async fn read(
        &self,
        path: &[u8],
        offset: u64,
        len: u64,
        version: Option<&str>,
    ) -> Result<Chunk> {
        let s = &self.inner;
        let name = s.name(path)?;
        // The body read is inside the retry: a connection cut mid-body is retried like a 503.
        retry(&s.retry, &s.stats, || async {
            let (headers, mut body) = s.open_range(&name, offset, len, version).await?;
            let meta = meta_from_headers(&headers, len > 0);
            // Chunks go straight into one buffer of the promised size: no second copy.
            let mut data = bytes::BytesMut::with_capacity(len as usize);
            while let Some(c) = body.next().await {
                let c = c.map_err(body_err)?;
                if data.len() + c.len() > len as usize {
                    return Err(StoreError::Integrity(format!(
                        "long read of {name}: more than the {len} bytes asked for"
                    )));
                }
                data.extend_from_slice(&c);
            }
            if data.len() as u64 != len {
                return Err(StoreError::ShortRead(format!(
                    "short read of {name}: got {} of {len} bytes",
                    data.len()
                )));
            }
            Ok(Chunk {
                data: data.freeze(),
                meta: Some(meta),
            })
        })
        .await
    }

    async fn read_stream(
        &self,
        path: &[u8],
        offset: u64,
        len: u64,
        version: Option<&str>,
    ) -> Result<(Option<Meta>, BoxStream<'static, Result<Bytes>>)> {
        if len == 0 {
            let chunk = self.read(path, offset, len, version).await?;
            return Ok((chunk.meta, Box::pin(futures::stream::empty())));
        }
        let inner = self.inner.clone();
        let name = inner.name(path)?;
        let (headers, body) = retry(&inner.retry, &inner.stats, || {
            inner.open_range(&name, offset, len, version)
        })
        .await?;
        let meta = meta_from_headers(&headers, true);
        // A body cut short resumes with If-Match on the ETag of the first response, so the rest
        // cannot come from a newer version of the blob.
        let etag = version.map(str::to_string).or_else(|| {
            headers
                .get_optional_str(&HeaderName::from_static("etag"))
                .map(str::to_string)
        });
        let state = RangeStream {
            inner,
            name,
            etag,
            next: offset,
            end: offset + len,
            body: Some(body),
            retries: 0,
            started: std::time::Instant::now(),
        };
        Ok((
            Some(meta),
            Box::pin(futures::stream::unfold(state, RangeStream::step)),
        ))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            md5: true,
            props: true,
            delete_batch: batch::MAX,
            ..Capabilities::default()
        }
    }

    fn service(&self) -> Option<crate::storage::Service> {
        Some(crate::storage::Service::Blob(Account(self.inner.clone())))
    }

    async fn root_meta(&self) -> Result<Option<Meta>> {
        self.read_root_meta().await
    }

    async fn set_root_meta(&self, meta: &Meta) -> Result<()> {
        self.write_root_meta(meta).await.map(drop)
    }

    async fn put_node(
        &self,
        path: &[u8],
        kind: Kind,
        data: Bytes,
        meta: &Meta,
        props: Option<&Props>,
    ) -> Result<()> {
        let s = &self.inner;
        s.put_named(&s.name(path)?, kind, data, meta, props).await
    }

    /// Set Blob Metadata replaces all of a blob's metadata: what it holds now is read first,
    /// and only the POSIX keys of the attributes given change. The update is made on the
    /// version just read (If-Match), so a blob rewritten meanwhile is not given stale keys.
    async fn set_meta(
        &self,
        path: &[u8],
        kind: Kind,
        meta: &Meta,
        xattrs: StoredXattrs,
    ) -> Result<()> {
        let s = &self.inner;
        s.set_meta_named(&s.name(path)?, kind, meta, xattrs).await
    }

    async fn start_upload(&self, path: &[u8], plan: &UploadPlan) -> Result<Box<dyn Upload>> {
        let s = &self.inner;
        let blob = s.blob(&s.name(path)?).await?.block_blob_client();
        let listed = retry(&s.retry, &s.stats, || async {
            match blob
                .get_block_list(BlockListType::Uncommitted, None)
                .await
                .map_err(map_err)
            {
                Ok(r) => Ok(r
                    .into_model()
                    .map_err(map_err)?
                    .uncommitted_blocks
                    .unwrap_or_default()),
                Err(e) if e.is_not_found() => Ok(Vec::new()),
                Err(e) => Err(e),
            }
        })
        .await?;
        let staged = listed
            .into_iter()
            .filter_map(|b| Some((b.name?, b.size?)))
            .collect();
        let ids = Mutex::new(vec![None; plan.blocks() as usize]);
        Ok(Box::new(AzureUpload {
            inner: self.inner.clone(),
            name: s.name(path)?,
            blob,
            staged,
            ids,
            props: Mutex::new(None),
        }))
    }

    async fn delete(&self, path: &[u8]) -> Result<()> {
        let s = &self.inner;
        let mut req = s.request(Method::Delete, &s.name(path)?).await?;
        req.insert_header("x-ms-delete-snapshots", "include");
        match s.send(&req, &[202]).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn delete_many(&self, paths: &[Vec<u8>]) -> Vec<Result<()>> {
        batch::delete_paths(self, paths).await
    }

    /// A blob stands for a directory either as a folder stub at its own name or as the prefix
    /// of the blobs below it: both go.
    async fn remove_all(&self, path: &[u8]) -> Result<()> {
        self.delete(path).await?;
        let mut below = names::encode(path)?;
        below.push('/');
        let (tx, mut rx) = mpsc::channel(1024);
        let inner = self.inner.clone();
        let lister = tokio::spawn(async move { inner.list_under(&below, true, None, &tx).await });
        // What is listed goes in batches as it comes, the last one short.
        let mut deletes = futures::stream::FuturesUnordered::new();
        let (mut chunk, mut listed) = (Vec::new(), true);
        let mut first_error = None;
        loop {
            tokio::select! {
                e = rx.recv(), if listed => match e {
                    Some(Ok(e)) => chunk.push(e.path),
                    Some(Err(e)) => { first_error.get_or_insert(e); }
                    None => listed = false,
                },
                Some(r) = deletes.next(), if !deletes.is_empty() => if let Some(e) = batch::first_err(r) { first_error.get_or_insert(e); },
                else => break,
            }
            if chunk.len() >= batch::MAX || (!listed && !chunk.is_empty()) {
                let paths = std::mem::take(&mut chunk);
                deletes.push(async move { self.delete_many(&paths).await });
            }
        }
        match lister.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(StoreError::Invalid(format!("listing task failed: {e}")));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn create_root(&self) -> Result<bool> {
        let s = &self.inner;
        let container = &s.clients().await?.container;
        match s.call(|| container.create(None)).await {
            Ok(_) => Ok(true),
            Err(StoreError::Http { status: 409, .. }) => Ok(false),
            // A container SAS may not create containers, only use its own: if listing it works,
            // it exists, which is all `mk` promises.
            Err(e @ StoreError::Http { status: 403, .. }) => {
                let probe = BlobContainerClientListBlobsOptions {
                    maxresults: Some(1),
                    ..Default::default()
                };
                let listed = match container.list_blobs(Some(probe)).map_err(map_err) {
                    Ok(pager) => matches!(pager.into_pages().next().await, Some(Ok(_))),
                    Err(_) => false,
                };
                if listed {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// A Blob store's side of a server-side copy (`storage::Service`).
#[derive(Clone)]
pub struct Account(Arc<Inner>);

impl Account {
    pub(crate) fn same_account(&self, other: &Account) -> bool {
        copy::same_account(&self.0.loc, &other.0.loc)
    }

    /// Copies `entry` of `src` to `dst_path` here (`copy::copy_blob`).
    pub(crate) async fn copy_from(
        &self,
        src: &Account,
        entry: &Entry,
        dst_path: &[u8],
    ) -> Result<()> {
        copy::copy_blob(&src.0, &self.0, entry, dst_path).await
    }
}

impl Inner {
    /// `Store::set_meta` of blob `name` itself.
    async fn set_meta_named(
        &self,
        name: &str,
        kind: Kind,
        meta: &Meta,
        attrs: Option<Option<String>>,
    ) -> Result<()> {
        let (s, name) = (self, name.to_string());
        let h = s
            .properties(&name)
            .await?
            .ok_or_else(|| StoreError::NotFound("vanished from the destination".into()))?;
        let (_, now) = meta_and_kind(&h, false);
        if now != kind {
            return Err(StoreError::Integrity(format!(
                "is no longer a {} (changed meanwhile)",
                kind.name()
            )));
        }
        let mut req = s.request(Method::Put, &name).await?;
        req.url_mut()
            .query_pairs_mut()
            .append_pair("comp", "metadata");
        req.insert_header("content-length", "0");
        if let Some(etag) = h.get_optional_str(&HeaderName::from_static("etag")) {
            req.insert_header("if-match", etag.to_string());
        }
        let mut m = posix::replaced(&user_metadata(&h), meta, kind, s.posix_style);
        match attrs {
            Some(Some(v)) => {
                m.insert(xattrs::KEY.to_string(), v);
            }
            Some(None) => {
                m.remove(xattrs::KEY);
            }
            None => {}
        }
        for (k, v) in m {
            req.insert_header(format!("x-ms-meta-{k}"), v);
        }
        s.send(&req, &[200]).await?;
        Ok(())
    }
}

/// The body of one ranged GET. A body cut short is re-requested from the first byte not yet
/// received, within the retry policy, so a large range never restarts from zero. (The SDK's
/// retries cover getting a response, not reading its body.)
struct RangeStream {
    inner: Arc<Inner>,
    name: String,
    etag: Option<String>,
    next: u64,
    end: u64,
    body: Option<AsyncResponseBody>,
    retries: u32,
    started: std::time::Instant,
}

impl RangeStream {
    async fn step(mut self) -> Option<(Result<Bytes>, Self)> {
        loop {
            if self.next >= self.end {
                return None;
            }
            if self.body.is_none() {
                match self
                    .inner
                    .open_range(
                        &self.name,
                        self.next,
                        self.end - self.next,
                        self.etag.as_deref(),
                    )
                    .await
                {
                    Ok((_, b)) => self.body = Some(b),
                    Err(e) => match self.backoff(e).await {
                        Ok(()) => continue,
                        Err(e) => return Some(self.fail(e)),
                    },
                }
            }
            let body = self.body.as_mut().expect("opened above");
            let err = match body.next().await {
                Some(Ok(c)) if c.len() as u64 <= self.end - self.next => {
                    self.next += c.len() as u64;
                    return Some((Ok(c), self));
                }
                Some(Ok(_)) => {
                    return Some(self.fail(StoreError::Integrity(
                        "long read: more bytes than the range asked for".into(),
                    )))
                }
                None => StoreError::transport(
                    Interruption::Truncated,
                    format!("truncated body: {} bytes short", self.end - self.next),
                ),
                Some(Err(e)) => body_err(e),
            };
            self.body = None;
            if let Err(e) = self.backoff(err).await {
                return Some(self.fail(e));
            }
        }
    }

    /// Waits before the next attempt, or gives the error back when it is not worth one.
    async fn backoff(&mut self, err: StoreError) -> Result<()> {
        let policy = &self.inner.retry;
        match err.retry_label() {
            Some(label)
                if self.retries < policy.max_retries && self.started.elapsed() < policy.budget =>
            {
                self.inner.stats.retried(&label);
                tokio::time::sleep(policy.backoff(self.retries, err.retry_after())).await;
                self.retries += 1;
                Ok(())
            }
            _ => Err(err),
        }
    }

    /// Yields the error and ends the stream.
    fn fail(mut self, e: StoreError) -> (Result<Bytes>, Self) {
        self.next = self.end;
        (Err(e), self)
    }
}

struct AzureUpload {
    inner: Arc<Inner>,
    name: String,
    blob: BlockBlobClient,
    /// Uncommitted blocks left by earlier attempts: ID → size.
    staged: HashMap<Vec<u8>, i64>,
    /// Each block's ID, known once its bytes have been read.
    ids: Mutex<Vec<Option<Vec<u8>>>>,
    /// A source blob's metadata and content properties, for the commit.
    props: Mutex<Option<Props>>,
}

/// A block's ID is derived from its index and its own bytes (MD5), so a staged block is reused
/// only if it holds exactly the bytes the source has now: a source edited in place between two
/// attempts, even to the same size and mtime, can never get old blocks committed. Every ID of
/// a blob has the same length, as the service requires.
fn block_id(idx: u64, md5: &[u8; 16]) -> Vec<u8> {
    format!("ferry2-{idx:08}-{}", crate::manifest::md5_hex(md5)).into_bytes()
}

#[async_trait]
impl Upload for AzureUpload {
    fn staged(&self, _idx: u64) -> bool {
        // Not known before the block's bytes are: see `block_id`.
        false
    }

    async fn put_block(&self, idx: u64, data: Bytes, md5: Option<[u8; 16]>) -> Result<bool> {
        let s = &self.inner;
        let md5 = md5.unwrap_or_else(|| crate::hash::digest(&data));
        let id = block_id(idx, &md5);
        self.ids.lock().unwrap()[idx as usize] = Some(id.clone());
        if self.staged.get(&id) == Some(&(data.len() as i64)) {
            return Ok(false);
        }
        // The service checks each block as it lands. (Azurite also takes a much faster path with
        // it: without one it computes a CRC64 in JavaScript to echo back.)
        let md5 = s.block_md5.then(|| md5.to_vec());
        s.call(|| {
            let opts = BlockBlobClientStageBlockOptions {
                transactional_content_md5: md5.clone(),
                ..Default::default()
            };
            self.blob
                .stage_block(&id, data.len() as u64, data.clone().into(), Some(opts))
        })
        .await?;
        Ok(true)
    }

    async fn read_back(&self, _idx: u64) -> Result<Option<Bytes>> {
        // Uncommitted blocks cannot be read; the caller re-reads the source.
        Ok(None)
    }

    fn keep_props(&self, props: &Props) {
        *self.props.lock().unwrap() = Some(props.clone());
    }

    async fn commit(self: Box<Self>, meta: &Meta) -> Result<()> {
        let s = &self.inner;
        let ids = std::mem::take(&mut *self.ids.lock().unwrap());
        let ids: Vec<Vec<u8>> = ids
            .into_iter()
            .enumerate()
            .map(|(i, id)| {
                id.ok_or_else(|| StoreError::Invalid(format!("block {i} was never written")))
            })
            .collect::<Result<_>>()?;
        let props = self.props.lock().unwrap().take();
        let content: HashMap<&str, String> = s
            .content_headers(&self.name, Kind::File, props.as_ref())
            .into_iter()
            .collect();
        let metadata = s.metadata_with(meta, Kind::File, props.as_ref());
        s.call(|| async {
            let list = BlockLookupList {
                latest: Some(ids.clone()),
                ..Default::default()
            };
            let opts = BlockBlobClientCommitBlockListOptions {
                blob_content_md5: meta.md5.map(|m| m.to_vec()),
                metadata: Some(metadata.clone()),
                blob_content_type: content.get("x-ms-blob-content-type").cloned(),
                blob_content_encoding: content.get("x-ms-blob-content-encoding").cloned(),
                blob_content_language: content.get("x-ms-blob-content-language").cloned(),
                blob_content_disposition: content.get("x-ms-blob-content-disposition").cloned(),
                blob_cache_control: content.get("x-ms-blob-cache-control").cloned(),
                tier: content.get("x-ms-access-tier").and_then(|t| t.parse().ok()),
                blob_tags_string: content.get("x-ms-tags").cloned(),
                ..Default::default()
            };
            self.blob
                .commit_block_list(list.try_into()?, Some(opts))
                .await
        })
        .await?;
        Ok(())
    }

    async fn abort(self: Box<Self>, _discard: bool) {
        // Uncommitted blocks expire on their own after a week; leaving them lets a re-run resume.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_form_encoded() {
        let tags = [
            ("team".to_string(), "data eng".to_string()),
            ("path".to_string(), "a/b:c+d=e".to_string()),
        ];
        assert_eq!(tags_header(&tags), "team=data%20eng&path=a%2Fb%3Ac%2Bd%3De");
    }

    #[test]
    fn a_transport_error_is_classified_by_its_type_not_its_text() {
        let cause = |e: StoreError| match e {
            StoreError::Transport { cause, .. } => cause,
            e => panic!("not a transport error: {e:?}"),
        };
        let stalled = || {
            azure_core::Error::new(
                ErrorKind::Io,
                stall::Stalled::new("reading a response body", Duration::from_secs(3)),
            )
        };
        assert_eq!(cause(map_err(stalled())), Interruption::Timeout);
        assert_eq!(cause(body_err(stalled())), Interruption::Timeout);
        let os = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert_eq!(
            cause(map_err(azure_core::Error::new(ErrorKind::Io, os))),
            Interruption::Timeout
        );
        // Words are not a kind: a reset that mentions a timeout is still a reset.
        let reset = || azure_core::Error::with_message(ErrorKind::Connection, "reset; timed out?");
        assert_eq!(cause(map_err(reset())), Interruption::Connection);
        assert_eq!(cause(body_err(reset())), Interruption::Truncated);
    }
}
