//! Exponential backoff with equal jitter, honouring Retry-After, bounded in count and time.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::{Result, StoreError};
use crate::stats::Stats;

#[derive(Clone, Debug)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub base: Duration,
    pub max_delay: Duration,
    /// No retry starts after this much time spent on one operation.
    pub budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            base: Duration::from_millis(200),
            max_delay: Duration::from_secs(30),
            budget: Duration::from_secs(300),
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `attempt` (0-based): uniformly random in [d/2, d] where d
    /// doubles each time, so synchronized clients spread out.
    pub fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max_delay);
        let half = exp / 2;
        let jittered = half + Duration::from_nanos(fastrand::u64(0..=half.as_nanos() as u64));
        match retry_after {
            // The server knows its load better than our schedule does, within reason.
            Some(ra) => ra.min(self.max_delay),
            None => jittered,
        }
    }
}

/// Runs `op` until it succeeds, fails with a non-retryable error, or the policy is exhausted.
/// Every retry is counted in `stats` under its status (or "timeout", "connection", "truncated").
pub async fn retry<T, F, Fut>(policy: &RetryPolicy, stats: &Stats, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        let err: StoreError = match op().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let Some(label) = err.retry_label() else {
            return Err(err);
        };
        if attempt >= policy.max_retries || started.elapsed() >= policy.budget {
            return Err(err);
        }
        stats.retried(&label);
        tokio::time::sleep(policy.backoff(attempt, err.retry_after())).await;
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn fast() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            base: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
            budget: Duration::from_secs(5),
        }
    }

    fn http(status: u16) -> StoreError {
        StoreError::Http {
            status,
            code: None,
            message: String::new(),
            retry_after: None,
        }
    }

    #[tokio::test]
    async fn retries_transient_then_succeeds() {
        let stats = Stats::default();
        let calls = AtomicU32::new(0);
        let out = retry(&fast(), &stats, || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 => Err(http(503)),
                1 => Err(StoreError::transport(
                    crate::error::Interruption::Truncated,
                    "body truncated",
                )),
                _ => Ok(7),
            }
        })
        .await
        .unwrap();
        assert_eq!(out, 7);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        let by = stats.retries_by_status();
        assert_eq!(by.get("503"), Some(&1));
        assert_eq!(by.get("truncated"), Some(&1));
    }

    #[tokio::test]
    async fn gives_up_after_max_and_never_retries_permanent() {
        let stats = Stats::default();
        let calls = AtomicU32::new(0);
        let r: Result<()> = retry(&fast(), &stats, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(http(500))
        })
        .await;
        assert!(r.is_err());
        assert_eq!(
            calls.load(Ordering::SeqCst),
            4,
            "one try plus three retries"
        );

        calls.store(0, Ordering::SeqCst);
        let r: Result<()> = retry(&fast(), &stats, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(http(403))
        })
        .await;
        assert!(r.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn backoff_is_bounded_and_honours_retry_after() {
        let p = RetryPolicy::default();
        for a in 0..40 {
            let d = p.backoff(a, None);
            assert!(d <= p.max_delay);
        }
        let d = p.backoff(0, Some(Duration::from_secs(3)));
        assert_eq!(d, Duration::from_secs(3));
        assert_eq!(p.backoff(0, Some(Duration::from_secs(3600))), p.max_delay);
    }
}
