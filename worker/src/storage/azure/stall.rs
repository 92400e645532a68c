//! `--io-timeout`: a response that delivers nothing for that long, while ferry waits for it, is
//! given up on (and retried). reqwest's own `read_timeout` cannot be that: its clock for the
//! next chunk of a body starts when the last one is handed over, so time ferry spends not
//! asking (a download held back by `--max-bandwidth`, a busy machine not scheduling the task)
//! counts as the link stalling, and a capped download was cut and its range fetched again. Here
//! the clock runs only while a read is pending, and stops with each chunk.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use azure_core::error::ErrorKind;
use azure_core::http::response::PinnedStream;
use azure_core::http::{AsyncRawResponse, HttpClient, Request};
use bytes::Bytes;
use futures::Stream;
use tokio::time::{sleep, Sleep};

/// `inner` (built without a read timeout) with ferry's `--io-timeout`.
#[derive(Debug)]
pub struct StallTimeout {
    pub inner: Arc<dyn HttpClient>,
    pub timeout: Duration,
}

/// What `--io-timeout` gives up with: a type of its own, by which the error is counted as a
/// timeout (`azure::timed_out`).
#[derive(Debug, thiserror::Error)]
#[error("{what} timed out: nothing received for {} s", .timeout.as_secs())]
pub struct Stalled {
    what: &'static str,
    timeout: Duration,
}

impl Stalled {
    pub fn new(what: &'static str, timeout: Duration) -> Self {
        Stalled { what, timeout }
    }
}

fn timed_out(timeout: Duration, what: &'static str) -> azure_core::Error {
    azure_core::Error::new(ErrorKind::Io, Stalled::new(what, timeout))
}

#[async_trait]
impl HttpClient for StallTimeout {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        // Until the headers the request is ferry's to send and the response the server's to
        // start: no wait of ferry's own lies in between, so one deadline (as reqwest's had).
        let rsp = tokio::time::timeout(self.timeout, self.inner.execute_request(request))
            .await
            .map_err(|_| timed_out(self.timeout, "waiting for a response"))??;
        let (status, headers, body) = rsp.deconstruct();
        let body: PinnedStream = Box::pin(Body {
            inner: body,
            timeout: self.timeout,
            clock: None,
        });
        Ok(AsyncRawResponse::new(status, headers, body))
    }
}

struct Body<S> {
    inner: S,
    timeout: Duration,
    /// Running while ferry waits for the next chunk; None between a chunk and the next read.
    clock: Option<Pin<Box<Sleep>>>,
}

impl<S: Stream<Item = azure_core::Result<Bytes>> + Unpin> Stream for Body<S> {
    type Item = azure_core::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // The body first: what has arrived is never lost to a clock that ran out meanwhile.
        if let Poll::Ready(item) = Pin::new(&mut self.inner).poll_next(cx) {
            self.clock = None;
            return Poll::Ready(item);
        }
        let timeout = self.timeout;
        let clock = self.clock.get_or_insert_with(|| Box::pin(sleep(timeout)));
        if clock.as_mut().poll(cx).is_ready() {
            self.clock = None;
            return Poll::Ready(Some(Err(timed_out(timeout, "reading a response body"))));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test(start_paused = true)]
    async fn time_between_reads_is_not_a_stall() {
        let chunks =
            futures::stream::iter([Ok(Bytes::from_static(b"a")), Ok(Bytes::from_static(b"b"))]);
        let mut body = Body {
            inner: chunks,
            timeout: Duration::from_secs(1),
            clock: None,
        };
        assert_eq!(body.next().await.unwrap().unwrap(), "a");
        // Ferry holds the body back (a bandwidth cap) far longer than the timeout.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(body.next().await.unwrap().unwrap(), "b");
        assert!(body.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_delivers_nothing_times_out() {
        let mut body = Body {
            inner: futures::stream::pending::<azure_core::Result<Bytes>>(),
            timeout: Duration::from_secs(1),
            clock: None,
        };
        let started = tokio::time::Instant::now();
        let err = body.next().await.unwrap().unwrap_err();
        assert!(err.to_string().contains("timed out"), "{err}");
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }
}
