//! Reused block buffers. A fresh multi-MiB buffer is a fresh mapping: every page faults on first
//! touch, which cost more CPU than the copy itself in the upload ceiling benchmark. Buffers go
//! back to the pool when the last `Bytes` over them is dropped (after the request is sent).

use std::sync::Mutex;

use bytes::Bytes;

/// Idle buffers kept, in bytes: enough for a default in-flight budget, bounded for RSS.
const POOL_BYTES: usize = 64 << 20;

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

struct Pooled(Vec<u8>);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        let mut pool = POOL.lock().unwrap();
        let held: usize = pool.iter().map(Vec::capacity).sum();
        if held + buf.capacity() <= POOL_BYTES {
            pool.push(buf);
        }
    }
}

/// Fills a buffer of `len` bytes with `fill` and hands it out as `Bytes`.
pub fn filled<E>(len: usize, fill: impl FnOnce(&mut [u8]) -> Result<(), E>) -> Result<Bytes, E> {
    let reused = {
        let mut pool = POOL.lock().unwrap();
        pool.iter()
            .position(|b| b.capacity() >= len)
            .map(|i| pool.swap_remove(i))
    };
    let mut buf = reused.unwrap_or_default();
    buf.clear();
    buf.resize(len, 0);
    fill(&mut buf)?;
    Ok(Bytes::from_owner(Pooled(buf)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn buffers_come_back_and_are_reused() {
        let a = super::filled::<()>(1 << 20, |b| {
            b.fill(7);
            Ok(())
        })
        .unwrap();
        let ptr = a.as_ptr();
        assert!(a.iter().all(|&x| x == 7));
        drop(a);
        let b = super::filled::<()>(1000, |_| Ok(())).unwrap();
        assert_eq!(b.as_ptr(), ptr, "the freed buffer is handed out again");
        assert!(b.iter().all(|&x| x == 0), "reused buffers are cleared");
    }
}
