//! Aggregate bandwidth cap. Each request reserves its bytes on a virtual clock that advances
//! at the target rate and waits until its slot; starting empty, there is no initial burst.

use std::time::{Duration, Instant};
use tokio::sync::Mutex;

pub struct Throttle {
    bytes_per_sec: f64,
    next_free: Mutex<Instant>,
}

impl Throttle {
    pub fn new(bytes_per_sec: u64) -> Self {
        Throttle {
            bytes_per_sec: bytes_per_sec as f64,
            next_free: Mutex::new(Instant::now()),
        }
    }

    pub async fn take(&self, bytes: u64) {
        let cost = Duration::from_secs_f64(bytes as f64 / self.bytes_per_sec);
        let until = {
            let mut next = self.next_free.lock().await;
            let start = (*next).max(Instant::now());
            *next = start + cost;
            *next
        };
        tokio::time::sleep_until(until.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn holds_the_rate_over_many_requests() {
        let t = Throttle::new(1000);
        let start = tokio::time::Instant::now();
        for _ in 0..10 {
            t.take(500).await;
        }
        // 5000 bytes at 1000 B/s: five seconds of virtual time, give or take nothing.
        assert_eq!(start.elapsed().as_secs(), 5);
    }
}
