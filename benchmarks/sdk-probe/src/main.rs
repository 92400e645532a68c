//! sdk-probe: ferry's single-file upload and download rebuilt on the official Azure SDK for
//! Rust (azure_storage_blob 1.x), so the SDK can be measured against ferry's own REST client
//! doing the same work. See docs/design/azure-client.md.
//!
//!     sdk-probe upload FILE BLOB_URL [--block-size BYTES] [--concurrency N] [--no-md5]
//!     sdk-probe download BLOB_URL FILE [--concurrency N] [--range-size BYTES] [--managed]
//!
//! Credentials: AZURE_STORAGE_ACCOUNT + AZURE_STORAGE_KEY (SharedKey, signed by the policy
//! below), or a SAS as the URL's query string. Prints one JSON line on success.

use std::collections::{BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::num::NonZero;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use azure_core::credentials::Secret;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{ClientOptions, Context, Request, Url};
use azure_core::time::{to_rfc3339, to_rfc7231, OffsetDateTime};
use azure_core::Bytes;
use azure_storage_blob::models::{
    BlobClientDownloadOptions, BlobClientGetPropertiesResultHeaders, BlockBlobClientCommitBlockListOptions,
    BlockBlobClientStageBlockOptions, BlockListType, BlockLookupList, HttpRange,
};
use azure_storage_blob::{BlobClient, BlobClientOptions};
use futures::{StreamExt, TryStreamExt};
use md5::{Digest, Md5};
use tokio::sync::Semaphore;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

/// ferry's download write size: ranges land on disk in pieces this big, so memory stays at one
/// buffer per request whatever the range size.
const WRITE_BUFFER: usize = 1 << 20;

/// Signs each try with SharedKey. azure_storage_blob 1.x ships only Entra ID token auth (and
/// only over https), so account-key access needs this; it runs per try so a retry gets a
/// fresh x-ms-date.
#[derive(Debug)]
struct SharedKey {
    account: String,
    key: Secret,
}

#[async_trait::async_trait]
impl Policy for SharedKey {
    async fn send(&self, ctx: &Context, req: &mut Request, next: &[Arc<dyn Policy>]) -> PolicyResult {
        req.insert_header("x-ms-date", to_rfc7231(&OffsetDateTime::now_utc()));
        // reqwest adds Content-Length itself when the SDK leaves it out, but the signature has
        // to cover it, so it is made explicit here.
        let body_len = req.body().len().unwrap_or(0);
        let h: HashMap<String, String> =
            req.headers().iter().map(|(k, v)| (k.as_str().to_ascii_lowercase(), v.as_str().to_string())).collect();
        if body_len > 0 && !h.contains_key("content-length") {
            req.insert_header("content-length", body_len.to_string());
        }
        let get = |k: &str| h.get(k).map(String::as_str).unwrap_or("");
        let length = if body_len == 0 { String::new() } else { body_len.to_string() };
        let mut s = format!("{}\n", req.method().as_ref().to_ascii_uppercase());
        for v in [get("content-encoding"), get("content-language"), &length, get("content-md5"), get("content-type"), ""] {
            s.push_str(v);
            s.push('\n');
        }
        for k in ["if-modified-since", "if-match", "if-none-match", "if-unmodified-since", "range"] {
            s.push_str(get(k));
            s.push('\n');
        }
        let mut ms: Vec<_> = h.iter().filter(|(k, _)| k.starts_with("x-ms-")).collect();
        ms.sort();
        for (k, v) in ms {
            s.push_str(&format!("{k}:{}\n", v.trim()));
        }
        s.push_str(&format!("/{}{}", self.account, req.url().path()));
        let mut q: Vec<(String, String)> = req.url().query_pairs().map(|(k, v)| (k.to_ascii_lowercase(), v.into_owned())).collect();
        q.sort();
        for (k, v) in q {
            s.push_str(&format!("\n{k}:{v}"));
        }
        let sig = azure_core::hmac::hmac_sha256(&s, &self.key)?;
        req.insert_header("authorization", format!("SharedKey {}:{sig}", self.account));
        next[0].send(ctx, req, &next[1..]).await
    }
}

fn client(url: &str) -> Result<BlobClient> {
    let url = Url::parse(url)?;
    let mut client_options = ClientOptions::default();
    if url.query().is_none() {
        let account = std::env::var("AZURE_STORAGE_ACCOUNT").map_err(|_| "no SAS in the URL and AZURE_STORAGE_ACCOUNT unset")?;
        let key = std::env::var("AZURE_STORAGE_KEY").map_err(|_| "no SAS in the URL and AZURE_STORAGE_KEY unset")?;
        client_options.per_try_policies.push(Arc::new(SharedKey { account, key: Secret::from(key) }));
    }
    Ok(BlobClient::new(url, None, Some(BlobClientOptions { client_options, ..Default::default() }))?)
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> std::io::Result<T> + Send + 'static) -> Result<T> {
    Ok(tokio::task::spawn_blocking(f).await??)
}

/// ferry's upload: blocks read in order N at a time, hashed in order for the blob's MD5, sent
/// N at a time with a per-block Content-MD5, committed with the whole MD5 and ferry's metadata.
async fn upload(path: &Path, url: &str, block_size: u64, n: usize, md5: bool) -> Result<serde_like::Report> {
    let started = Instant::now();
    let file = Arc::new(File::open(path)?);
    let md = file.metadata()?;
    let size = md.len();
    let blob = client(url)?.block_blob_client();
    let nblocks = size.div_ceil(block_size);
    let mtime = md.modified()?;
    // Deterministic IDs, as ferry's: a re-run of the same file finds its staged blocks.
    let tag = fnv1a(format!("{size}:{mtime:?}:{block_size}").as_bytes());
    let ids: Vec<Vec<u8>> = (0..nblocks).map(|i| format!("probe-{tag:016x}-{i:08}").into_bytes()).collect();

    let staged: HashMap<Vec<u8>, i64> = match blob.get_block_list(BlockListType::Uncommitted, None).await {
        Ok(r) => r
            .into_model()?
            .uncommitted_blocks
            .unwrap_or_default()
            .into_iter()
            .filter_map(|b| Some((b.name?, b.size?)))
            .collect(),
        Err(e) if e.http_status() == Some(azure_core::http::StatusCode::NotFound) => HashMap::new(),
        Err(e) => return Err(e.into()),
    };
    let block_len = |i: u64| block_size.min(size - i * block_size);
    let skip: Vec<bool> = (0..nblocks).map(|i| staged.get(&ids[i as usize]) == Some(&(block_len(i) as i64))).collect();

    // Bounds memory to about N blocks: a permit is held from the read until the block is sent.
    let inflight = Arc::new(Semaphore::new(n));
    let mut hasher = Md5::new();
    let mut sent = 0u64;
    {
        let (blob, ids, skip, sent) = (&blob, &ids, &skip, &mut sent);
        futures::stream::iter(0..nblocks)
            .map(|i| {
                let (inflight, file) = (inflight.clone(), file.clone());
                async move {
                    let permit = inflight.acquire_owned().await?;
                    let (off, len) = (i * block_size, block_len(i) as usize);
                    let data = blocking(move || {
                        let mut buf = vec![0u8; len];
                        file.read_exact_at(&mut buf, off)?;
                        Ok(Bytes::from(buf))
                    })
                    .await?;
                    Ok::<_, Error>((i, data, permit))
                }
            })
            .buffered(n)
            .map_ok(|(i, data, permit)| {
                if md5 {
                    hasher.update(&data);
                }
                if !skip[i as usize] {
                    *sent += 1;
                }
                async move {
                    if !skip[i as usize] {
                        let opts = BlockBlobClientStageBlockOptions {
                            transactional_content_md5: md5.then(|| Md5::digest(&data).to_vec()),
                            ..Default::default()
                        };
                        blob.stage_block(&ids[i as usize], data.len() as u64, data.into(), Some(opts)).await?;
                    }
                    drop(permit);
                    Ok(())
                }
            })
            .try_buffer_unordered(n)
            .try_for_each(|_| async { Ok(()) })
            .await?;
    }
    let digest = hasher.finalize().to_vec();
    let mode = std::os::unix::fs::PermissionsExt::mode(&md.permissions());
    let metadata = HashMap::from([
        ("mtime".to_string(), to_rfc3339(&OffsetDateTime::from(mtime))),
        ("mode".to_string(), format!("{:o}", 0o100000 | (mode & 0o7777))),
    ]);
    let list = BlockLookupList { latest: Some(ids), ..Default::default() };
    let opts = BlockBlobClientCommitBlockListOptions {
        blob_content_md5: md5.then(|| digest.clone()),
        metadata: Some(metadata),
        ..Default::default()
    };
    blob.commit_block_list(list.try_into()?, Some(opts)).await?;
    let md5 = if md5 { hex(&digest) } else { "-".into() };
    Ok(serde_like::Report { op: "upload", bytes: size, blocks_sent: sent, seconds: started.elapsed().as_secs_f64(), md5 })
}

/// ferry's download: ranges fetched N at a time and streamed into a temp file in 1 MiB
/// writes; a follower hashes the file back in order as its finished prefix grows; the MD5 is
/// checked against the blob's before the rename.
async fn download(url: &str, dest: &Path, range: u64, n: usize) -> Result<serde_like::Report> {
    let started = Instant::now();
    let blob = client(url)?;
    let props = blob.get_properties(None).await?;
    let size = props.content_length()?.ok_or("no Content-Length on the blob")?;
    let want = props.content_md5()?;
    let etag = props.etag()?;
    let tmp = partial_path(dest);
    let file = Arc::new(OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&tmp)?);
    file.set_len(size)?;
    let nranges = size.div_ceil(range);
    let range_len = |i: u64| range.min(size - i * range);

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let fetching = {
        let (blob, file, etag) = (&blob, &file, &etag);
        async move {
            let r = futures::stream::iter(0..nranges)
                .map(|i| {
                    let tx = tx.clone();
                    async move {
                        let (off, len) = (i * range, range_len(i));
                        let opts = BlobClientDownloadOptions {
                            range: Some(HttpRange::new(off, len)),
                            // One request per range: the probe schedules ranges itself, as ferry does.
                            parallel: NonZero::new(1),
                            partition_size: NonZero::new(len as usize),
                            if_match: etag.clone(),
                            ..Default::default()
                        };
                        let mut body = blob.download(Some(opts)).await?.body;
                        let mut buf = bytes::BytesMut::with_capacity(WRITE_BUFFER.min(len as usize));
                        let mut written = 0u64;
                        while let Some(c) = body.next().await {
                            buf.extend_from_slice(&c?);
                            if buf.len() >= WRITE_BUFFER {
                                written += write_at(file, buf.split().freeze(), off + written).await?;
                            }
                        }
                        if !buf.is_empty() {
                            written += write_at(file, buf.freeze(), off + written).await?;
                        }
                        if written != len {
                            return Err(format!("range {i}: got {written} of {len} bytes").into());
                        }
                        let _ = tx.send(i);
                        Ok::<_, Error>(())
                    }
                })
                .buffer_unordered(n)
                .try_for_each(|_| async { Ok(()) })
                .await;
            // Every sender is gone once the ranges are done, which ends the follower.
            drop(tx);
            r
        }
    };
    let hashing = {
        let file = file.clone();
        async move {
            let mut h = Md5::new();
            let mut done = BTreeSet::new();
            let mut next = 0u64;
            while let Some(i) = rx.recv().await {
                done.insert(i);
                while done.remove(&next) {
                    let (file, off, len) = (file.clone(), next * range, range_len(next) as usize);
                    let data = blocking(move || {
                        let mut buf = vec![0u8; len];
                        file.read_exact_at(&mut buf, off)?;
                        Ok(buf)
                    })
                    .await?;
                    h.update(&data);
                    next += 1;
                }
            }
            Ok::<_, Error>(h.finalize().to_vec())
        }
    };
    let (fetched, hashed) = tokio::join!(fetching, hashing);
    let check = fetched.and(hashed).and_then(|got| match want {
        Some(w) if w != got => Err(format!("MD5 mismatch: blob says {}, received {}", hex(&w), hex(&got)).into()),
        _ => Ok(got),
    });
    let digest = match check {
        Ok(d) => d,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    std::fs::rename(&tmp, dest)?;
    Ok(serde_like::Report { op: "download", bytes: size, blocks_sent: nranges, seconds: started.elapsed().as_secs_f64(), md5: hex(&digest) })
}

/// The SDK's own managed download (`BlobClient::download` with `parallel` and
/// `partition_size`): it re-sequences ranges itself and yields them in order, so the file is
/// written and hashed sequentially. Measured too, as what an adopter gets with least code.
async fn download_managed(url: &str, dest: &Path, range: u64, n: usize) -> Result<serde_like::Report> {
    let started = Instant::now();
    let blob = client(url)?;
    let opts = BlobClientDownloadOptions {
        parallel: NonZero::new(n),
        partition_size: NonZero::new(range as usize),
        ..Default::default()
    };
    let res = blob.download(Some(opts)).await?;
    // A ranged first response carries the whole blob's MD5 in x-ms-blob-content-md5.
    let want = res.properties.blob_content_md5.clone().or(res.properties.content_md5.clone());
    let tmp = partial_path(dest);
    let mut file = Some(File::create(&tmp)?);
    let mut h = Md5::new();
    let mut body = res.body;
    let mut size = 0u64;
    let mut chunks = 0u64;
    while let Some(c) = body.next().await {
        let c = c?;
        h.update(&c);
        size += c.len() as u64;
        chunks += 1;
        let mut f = file.take().expect("returned after each write");
        file = Some(blocking(move || f.write_all(&c).map(|_| f)).await?);
    }
    drop(file);
    let got = h.finalize().to_vec();
    if let Some(w) = want {
        if w != got {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("MD5 mismatch: blob says {}, received {}", hex(&w), hex(&got)).into());
        }
    }
    std::fs::rename(&tmp, dest)?;
    Ok(serde_like::Report { op: "download-managed", bytes: size, blocks_sent: chunks, seconds: started.elapsed().as_secs_f64(), md5: hex(&got) })
}

fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".probe-partial");
    dest.with_file_name(name)
}

async fn write_at(file: &Arc<File>, data: Bytes, offset: u64) -> Result<u64> {
    let file = file.clone();
    blocking(move || file.write_all_at(&data, offset).map(|_| data.len() as u64)).await
}

/// Output without pulling serde in: the probe's dependency count should be the SDK's.
mod serde_like {
    pub struct Report {
        pub op: &'static str,
        pub bytes: u64,
        pub blocks_sent: u64,
        pub seconds: f64,
        pub md5: String,
    }
    impl std::fmt::Display for Report {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                r#"{{"op":"{}","bytes":{},"requests_for_data":{},"seconds":{:.3},"md5":"{}"}}"#,
                self.op, self.bytes, self.blocks_sent, self.seconds, self.md5
            )
        }
    }
}

fn parse_size(s: &str) -> Result<u64> {
    let (num, mult) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (
            &s[..i],
            match &s[i..] {
                "K" | "KiB" => 1 << 10,
                "M" | "MiB" => 1 << 20,
                "G" | "GiB" => 1 << 30,
                other => return Err(format!("unknown size suffix {other:?}").into()),
            },
        ),
        None => (s, 1),
    };
    let v = num.parse::<u64>()? * mult;
    if v == 0 {
        return Err("sizes must be positive".into());
    }
    Ok(v)
}

const USAGE: &str = "usage: sdk-probe upload FILE BLOB_URL [--block-size BYTES] [--concurrency N] [--no-md5]\n       sdk-probe download BLOB_URL FILE [--concurrency N] [--range-size BYTES] [--managed]";

async fn run(args: Vec<String>) -> Result<String> {
    let mut pos = Vec::new();
    let (mut block_size, mut range_size, mut n, mut managed, mut md5) = (4u64 << 20, 16u64 << 20, 8usize, false, true);
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--block-size" => block_size = parse_size(&val()?)?,
            "--range-size" => range_size = parse_size(&val()?)?,
            "--concurrency" => n = parse_size(&val()?)? as usize,
            "--managed" => managed = true,
            // ferry's --no-put-md5 --no-block-md5: leaves only reading and HTTP to measure.
            "--no-md5" => md5 = false,
            s if s.starts_with("--") => return Err(format!("unknown flag {s}\n{USAGE}").into()),
            _ => pos.push(a),
        }
    }
    let report = match pos.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["upload", file, url] => upload(Path::new(file), url, block_size, n, md5).await?,
        ["download", url, file] if managed => download_managed(url, Path::new(file), range_size, n).await?,
        ["download", url, file] => download(url, Path::new(file), range_size, n).await?,
        _ => return Err(USAGE.into()),
    };
    Ok(report.to_string())
}

fn main() -> std::process::ExitCode {
    // The same allocator setting as ferry's main.rs: block buffers freed on another thread
    // than the one that allocated them otherwise pile up in glibc arenas. Kept identical so
    // that RSS compares the HTTP stacks, not malloc tuning.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match rt.block_on(run(std::env::args().skip(1).collect())) {
        Ok(line) => {
            println!("{line}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            // The SDK's top-level messages are generic ("retry policy expired ..."): the cause
            // is further down the chain.
            let mut msg = e.to_string();
            let mut src = e.source();
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            eprintln!("sdk-probe: error: {msg}");
            std::process::ExitCode::from(1)
        }
    }
}
