//! Server-side copy within one account (Copy Blob): the service moves the bytes; ferry starts
//! the copy from one version of the source, waits for it within bounds, and checks what it
//! produced. Between accounts the service would need Put Block From URL, which the emulator
//! cannot do, so ferry streams there instead.

use std::future::Future;
use std::time::Duration;

use azure_core::http::headers::{HeaderName, Headers};
use azure_core::http::Etag;
use azure_storage_blob::models::{BlobClientDeleteOptions, BlobClientStartCopyFromUrlOptions};
use azure_storage_blob::BlobClient;
use tokio::time::Instant;

use super::{content_length, meta_from_headers, Inner, Props};
use crate::error::{Result, StoreError};
use crate::location::BlobLocation;
use crate::manifest::{md5_hex, Entry};
use crate::storage::Meta;

/// Whether two locations are one account behind one endpoint: the only pairs Copy Blob serves
/// with the destination's own credential (and the only ones the emulator can copy between).
pub fn same_account(a: &BlobLocation, b: &BlobLocation) -> bool {
    a.account == b.account
        && a.endpoint
            .trim_end_matches('/')
            .eq_ignore_ascii_case(b.endpoint.trim_end_matches('/'))
}

/// How long a pending copy is waited for. Within one account Azure mostly ends a copy before
/// answering; a copy between storage clusters may take minutes, but not forever.
#[derive(Clone, Copy, Debug)]
pub(super) struct Patience {
    pub first: Duration,
    pub max_delay: Duration,
    pub max_wait: Duration,
    pub max_looks: u32,
}

/// The default (`--server-copy-timeout`): looks 0.1 s apart, doubling to 5 s, for an hour.
pub(super) const PATIENCE: Patience = Patience::up_to(Duration::from_secs(3600));

impl Patience {
    /// Waits up to `max_wait`, with as many looks as that takes at the longest pause.
    pub const fn up_to(max_wait: Duration) -> Patience {
        let max_delay = Duration::from_secs(5);
        let max_looks = 10 + (max_wait.as_secs() / max_delay.as_secs()) as u32;
        Patience {
            first: Duration::from_millis(100),
            max_delay,
            max_wait,
            max_looks,
        }
    }

    /// The pause after the n-th look (0-based): doubling from `first`, at most `max_delay`.
    fn delay(&self, n: u32) -> Duration {
        self.first
            .saturating_mul(1 << n.min(16))
            .min(self.max_delay)
    }
}

/// Where a copy stands, from the destination's `x-ms-copy-status` (and its description).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum CopyState {
    Pending,
    Success,
    /// failed, aborted, or a status ferry does not know: why, as the service put it.
    Ended(String, String),
}

fn copy_state(status: Option<&str>, description: Option<&str>) -> CopyState {
    match status {
        Some("pending") => CopyState::Pending,
        Some("success") => CopyState::Success,
        other => CopyState::Ended(
            other.unwrap_or("ended without a status").to_string(),
            description.unwrap_or_default().to_string(),
        ),
    }
}

/// Looks until the copy is no longer pending, or patience runs out; then the last look's
/// state (still `Pending` if it ran out) and what came with it.
async fn wait<T, F, Fut>(patience: &Patience, mut look: F) -> Result<(CopyState, T)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(CopyState, T)>>,
{
    let started = Instant::now();
    let mut n = 0;
    loop {
        let (state, seen) = look().await?;
        n += 1;
        if state != CopyState::Pending
            || n >= patience.max_looks
            || started.elapsed() >= patience.max_wait
        {
            return Ok((state, seen));
        }
        tokio::time::sleep(patience.delay(n - 1)).await;
    }
}

fn header<'a>(h: &'a Headers, name: &'static str) -> Option<&'a str> {
    h.get_optional_str(&HeaderName::from_static(name))
}

/// Copies `entry` of `src` to `dst_path` of `dst` (one account): from the source version seen
/// now (`x-ms-source-if-match` on its ETag), with ferry's metadata, then checked against that
/// version's size and Content-MD5. A copy that fails, ends badly or outlasts `PATIENCE` leaves
/// no destination blob behind: Copy Blob replaced it at the start, and what it holds now is not
/// the source.
pub(super) async fn copy_blob(
    src: &Inner,
    dst: &Inner,
    entry: &Entry,
    dst_path: &[u8],
) -> Result<()> {
    let src_name = src.name(&entry.path)?;
    let source = src.blob(&src_name).await?;
    let (etag, meta, props) = source_version(src, &source, entry).await?;
    // With the source's SAS, if it has one; within one account the destination's own
    // credential authorises reading the source otherwise.
    let copy_source = src.blob_url(&src_name).await?.to_string();
    let target = dst.blob(&dst.name(dst_path)?).await?;
    let started = dst
        .call(|| {
            let opts = BlobClientStartCopyFromUrlOptions {
                source_if_match: Some(Etag::from(etag.as_str())),
                // Given metadata replaces the source's: all of it, with ferry's keys over it, as a
                // streamed copy gives. The service copies the content properties itself.
                metadata: Some(dst.metadata_with(&meta, entry.kind, Some(&props))),
                tier: props.tier.as_deref().and_then(|t| t.parse().ok()),
                blob_tags_string: props.tags.clone(),
                ..Default::default()
            };
            target.start_copy_from_url(copy_source.clone(), Some(opts))
        })
        .await
        .map_err(source_hint)?;
    let copy_id = header(started.headers(), "x-ms-copy-id")
        .ok_or_else(|| StoreError::Invalid("Copy Blob answered without an x-ms-copy-id".into()))?
        .to_string();
    let began = Instant::now();
    let (mut state, mut seen) = wait(&dst.patience, || look(dst, &target, &copy_id)).await?;
    let gave_up = state == CopyState::Pending;
    if gave_up {
        // Abort leaves an empty blob under a new ETag, so look again; a copy that ended just
        // before the abort is judged as it ended.
        let _ = dst.call(|| target.abort_copy(&copy_id, None)).await;
        (state, seen) = look(dst, &target, &copy_id).await?;
    }
    let failure = match (state, gave_up) {
        (CopyState::Success, _) => match check(entry.size(), &meta, &seen) {
            Ok(()) => return Ok(()),
            Err(e) => e,
        },
        (_, true) | (CopyState::Pending, _) => StoreError::Copy(format!(
            "still pending after {} s; aborted",
            began.elapsed().as_secs()
        )),
        (CopyState::Ended(how, why), false) if why.is_empty() => StoreError::Copy(how),
        (CopyState::Ended(how, why), false) => StoreError::Copy(format!("{how} ({why})")),
    };
    Err(noted(failure, discard(dst, &target, &seen).await))
}

/// Copy Blob reads the source with the credential it is given; say what to do when it cannot.
fn source_hint(e: StoreError) -> StoreError {
    match &e {
        StoreError::Http { code: Some(c), .. } if c == "CannotVerifyCopySource" => {
            StoreError::Copy(format!(
                "could not start: the service cannot read the source ({e}); give the source URL a SAS that can read it, or use --no-server-copy"
            ))
        }
        _ => e,
    }
}

/// The source's ETag, attributes and properties now, provided it still is the version that was
/// listed.
async fn source_version(
    src: &Inner,
    source: &BlobClient,
    entry: &Entry,
) -> Result<(String, Meta, Props)> {
    let props = match src.call(|| source.get_properties(None)).await {
        Err(e) if e.is_not_found() => {
            return Err(StoreError::NotFound("vanished from the source".into()))
        }
        r => r?,
    };
    let h = props.headers();
    let meta = meta_from_headers(h, false);
    if content_length(h) != entry.size() || entry.md5.is_some_and(|m| meta.md5 != Some(m)) {
        return Err(StoreError::Integrity(
            "the blob changed since it was listed (size or Content-MD5 differs); not copied".into(),
        ));
    }
    let etag = header(h, "etag")
        .ok_or_else(|| StoreError::Invalid("the source blob has no ETag".into()))?;
    let etag = etag.to_string();
    Ok((etag, meta, src.props_of(&src.name(&entry.path)?, h).await?))
}

/// One look at the destination: the state of *our* copy, and the headers it came with.
async fn look(dst: &Inner, target: &BlobClient, copy_id: &str) -> Result<(CopyState, Headers)> {
    let props = dst.call(|| target.get_properties(None)).await?;
    let h = props.headers().clone();
    if header(&h, "x-ms-copy-id") != Some(copy_id) {
        // Someone else's blob now: not ours to check, nor to remove.
        return Err(StoreError::Integrity(
            "the destination blob was replaced by another writer during the server-side copy"
                .into(),
        ));
    }
    Ok((
        copy_state(
            header(&h, "x-ms-copy-status"),
            header(&h, "x-ms-copy-status-description"),
        ),
        h,
    ))
}

/// A finished copy holds the source version's size and Content-MD5.
fn check(size: u64, source: &Meta, copied: &Headers) -> Result<()> {
    let got = meta_from_headers(copied, false).md5;
    if content_length(copied) != size {
        return Err(StoreError::Integrity(format!(
            "the server-side copy holds {} bytes, the source {size}",
            content_length(copied)
        )));
    }
    match (source.md5, got) {
        (Some(want), got) if got != Some(want) => Err(StoreError::Integrity(format!(
            "MD5 mismatch: source says {}, the server-side copy has {}",
            md5_hex(&want),
            got.map(|g| md5_hex(&g)).unwrap_or_else(|| "none".into())
        ))),
        _ => Ok(()),
    }
}

/// Removes the destination of a copy that went wrong, only as last seen (If-Match); says how
/// that went.
async fn discard(dst: &Inner, target: &BlobClient, seen: &Headers) -> String {
    let etag = header(seen, "etag").map(Etag::from);
    match dst
        .call(|| {
            target.delete(Some(BlobClientDeleteOptions {
                if_match: etag.clone(),
                ..Default::default()
            }))
        })
        .await
    {
        Ok(_) => "the destination blob was removed".into(),
        Err(e) if e.is_not_found() => "the destination blob is gone".into(),
        // 412: another writer replaced it meanwhile; theirs is not ours to remove.
        Err(StoreError::Integrity(_)) => {
            "the destination blob was rewritten by another writer meanwhile and left alone".into()
        }
        Err(e) => format!("the destination blob could not be removed: {e}"),
    }
}

/// The error, with what became of the destination the copy left behind.
fn noted(err: StoreError, note: String) -> StoreError {
    match err {
        StoreError::Copy(m) => StoreError::Copy(format!("{m}; {note}")),
        StoreError::Integrity(m) => StoreError::Integrity(format!("{m}; {note}")),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn loc(endpoint: &str, account: &str) -> BlobLocation {
        BlobLocation {
            endpoint: endpoint.into(),
            account: account.into(),
            container: "c".into(),
            prefix: String::new(),
            sas: None,
        }
    }

    #[test]
    fn same_account_means_same_endpoint_and_account() {
        let a = loc("https://acct.blob.core.windows.net", "acct");
        assert!(same_account(
            &a,
            &BlobLocation {
                container: "other".into(),
                prefix: "p/".into(),
                sas: Some("sig=x".into()),
                ..a.clone()
            }
        ));
        assert!(same_account(
            &a,
            &loc("https://ACCT.blob.core.windows.net/", "acct")
        ));
        assert!(!same_account(
            &a,
            &loc("https://other.blob.core.windows.net", "other")
        ));
        assert!(!same_account(
            &a,
            &loc("http://acct.blob.core.windows.net", "acct")
        ));
        let emu = loc(
            "http://127.0.0.1:10000/devstoreaccount1",
            "devstoreaccount1",
        );
        assert!(
            !same_account(
                &emu,
                &loc(
                    "http://127.0.0.1:10001/devstoreaccount1",
                    "devstoreaccount1"
                )
            ),
            "two emulators"
        );
        assert!(!same_account(
            &emu,
            &loc("http://127.0.0.1:10000/other", "other")
        ));
    }

    #[test]
    fn copy_states() {
        assert_eq!(copy_state(Some("pending"), None), CopyState::Pending);
        assert_eq!(
            copy_state(Some("success"), Some("ignored")),
            CopyState::Success
        );
        assert_eq!(
            copy_state(Some("failed"), Some("500 InternalError")),
            CopyState::Ended("failed".into(), "500 InternalError".into())
        );
        assert_eq!(
            copy_state(Some("aborted"), None),
            CopyState::Ended("aborted".into(), String::new())
        );
        assert!(matches!(copy_state(None, None), CopyState::Ended(..)));
    }

    #[test]
    fn pauses_double_up_to_the_cap() {
        let d: Vec<u64> = (0..8)
            .map(|n| PATIENCE.delay(n).as_millis() as u64)
            .collect();
        assert_eq!(d, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(PATIENCE.delay(u32::MAX), PATIENCE.max_delay);
        // As many looks as the wait holds at the longest pause, and a few for the short ones.
        assert_eq!(
            (
                PATIENCE.max_looks,
                Patience::up_to(Duration::from_secs(60)).max_looks
            ),
            (730, 22)
        );
    }

    /// A look that says pending `pending` times, then `last`; counts the looks.
    fn looks(
        pending: u32,
        last: CopyState,
        count: &AtomicU32,
    ) -> impl FnMut() -> std::future::Ready<Result<(CopyState, u32)>> + '_ {
        move || {
            let n = count.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok((
                if n < pending {
                    CopyState::Pending
                } else {
                    last.clone()
                },
                n,
            )))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waits_until_the_copy_ends() {
        let count = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let (state, n) = wait(&PATIENCE, looks(3, CopyState::Success, &count))
            .await
            .unwrap();
        assert_eq!((state, n), (CopyState::Success, 3));
        assert_eq!(start.elapsed(), Duration::from_millis(100 + 200 + 400));
        let failed = CopyState::Ended("failed".into(), "x".into());
        count.store(0, Ordering::SeqCst);
        assert_eq!(
            wait(&PATIENCE, looks(0, failed.clone(), &count))
                .await
                .unwrap()
                .0,
            failed
        );
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_so_many_looks_or_so_long() {
        let count = AtomicU32::new(0);
        let few = Patience {
            max_looks: 4,
            ..PATIENCE
        };
        assert_eq!(
            wait(&few, looks(u32::MAX, CopyState::Success, &count))
                .await
                .unwrap(),
            (CopyState::Pending, 3)
        );
        count.store(0, Ordering::SeqCst);
        let brief = Patience {
            max_wait: Duration::from_secs(60),
            ..PATIENCE
        };
        let start = tokio::time::Instant::now();
        let (state, _) = wait(&brief, looks(u32::MAX, CopyState::Success, &count))
            .await
            .unwrap();
        assert_eq!(state, CopyState::Pending);
        assert!(
            start.elapsed() >= Duration::from_secs(60) && start.elapsed() < Duration::from_secs(66),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_finished_copy_must_hold_the_source_version() {
        let md5 = [7u8; 16];
        let mut h = Headers::new();
        h.insert("content-length", "10");
        h.insert("content-md5", super::super::posix::b64(&md5));
        let source = Meta {
            md5: Some(md5),
            ..Meta::default()
        };
        assert!(check(10, &source, &h).is_ok());
        assert!(check(11, &source, &h)
            .unwrap_err()
            .to_string()
            .contains("holds 10 bytes"));
        let other = Meta {
            md5: Some([8u8; 16]),
            ..Meta::default()
        };
        assert!(check(10, &other, &h)
            .unwrap_err()
            .to_string()
            .contains("MD5 mismatch"));
        assert!(
            check(10, &Meta::default(), &h).is_ok(),
            "no MD5 at the source: nothing to compare"
        );
    }
}
