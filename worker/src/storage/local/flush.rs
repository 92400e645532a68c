//! Flushes to disk shared between threads: one `syncfs` for every file written meanwhile.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::beneath::{self, fd};
use super::LocalStore;

/// How long a lone file's flush waits for more to join it (see `sync_one`).
const FLUSH_GATHERING: Duration = Duration::from_millis(5);

/// One `syncfs` shared by every thread that needs its files on disk while it runs: files
/// written meanwhile cost one flush between them, not one each.
#[derive(Default)]
pub(super) struct Flushes {
    pub(super) state: Mutex<FlushState>,
    finished: Condvar,
}

#[derive(Default)]
pub(super) struct FlushState {
    started: u64,
    done: u64,
    running: bool,
    /// When the next flush starts, however few have joined it.
    gathering_until: Option<Instant>,
    /// A failed flush fails every later one: the filesystem lost writes it had accepted.
    failed: Option<(std::io::ErrorKind, String)>,
}

impl LocalStore {
    /// `sync` for a caller with one file: its flush waits a moment for others to join.
    /// Files arrive one by one from the network, each a fraction of a millisecond after the
    /// last, and a flush takes about as long: started at once, nearly every file would have
    /// a flush of its own (1,230 for 2,000 files of 16 KiB; 128 with this wait).
    pub(super) fn sync_one(&self) -> std::io::Result<()> {
        self.flush(FLUSH_GATHERING)
    }

    pub(super) fn flush(&self, gathering: Duration) -> std::io::Result<()> {
        let root = match (self.fsync, self.root_fd.get()) {
            (true, Some(root)) => root,
            _ => return Ok(()),
        };
        let fl = &self.flushes;
        let mut st = fl.state.lock().unwrap();
        // A flush already running may have missed what this caller wrote: it needs the next.
        let wanted = st.started + 1;
        loop {
            if let Some((kind, msg)) = &st.failed {
                return Err(std::io::Error::new(*kind, msg.clone()));
            }
            if st.done >= wanted {
                return Ok(());
            }
            if st.running {
                st = fl.finished.wait(st).unwrap();
                continue;
            }
            let now = Instant::now();
            let until = *st.gathering_until.get_or_insert(now + gathering);
            if now < until && !gathering.is_zero() {
                st = fl.finished.wait_timeout(st, until - now).unwrap().0;
                continue;
            }
            st.gathering_until = None;
            st.running = true;
            st.started += 1;
            let this = st.started;
            drop(st);
            let r = beneath::sync_fs(fd(root));
            st = fl.state.lock().unwrap();
            st.running = false;
            st.done = this;
            if let Err(e) = r {
                st.failed = Some((e.kind(), e.to_string()));
            }
            fl.finished.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use bytes::Bytes;

    use super::*;
    use crate::manifest::Mtime;
    use crate::storage::{Meta, Store};

    /// Durable puts from many tasks at once share flushes, and each lands whole under its
    /// name, a new one or one it replaces, with no temp name left behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_durable_puts_land_whole() {
        let t = tempfile::tempdir().unwrap();
        let s = LocalStore::new(t.path().to_path_buf(), true);
        std::fs::create_dir(t.path().join("d")).unwrap();
        std::fs::write(t.path().join("d/f3"), b"old and longer than the new bytes").unwrap();
        let meta = Meta {
            mtime: Some(Mtime {
                secs: 1_600_000_000,
                nanos: 5,
            }),
            mode: Some(0o640),
            ..Meta::default()
        };
        let puts = (0..32).map(|i| {
            let (s, meta) = (s.clone(), meta.clone());
            tokio::spawn(async move {
                s.put(
                    format!("d/f{i}").as_bytes(),
                    Bytes::from(format!("file {i}")),
                    &meta,
                )
                .await
            })
        });
        for p in futures::future::join_all(puts).await {
            p.unwrap().unwrap();
        }
        let fl = s.flushes.state.lock().unwrap();
        assert!(fl.done >= 1 && fl.done == fl.started && fl.failed.is_none());
        let names: Vec<String> = std::fs::read_dir(t.path().join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 32, "{names:?}");
        for i in 0..32 {
            let p = t.path().join(format!("d/f{i}"));
            assert_eq!(std::fs::read(&p).unwrap(), format!("file {i}").as_bytes());
            let md = std::fs::metadata(&p).unwrap();
            assert_eq!(
                (md.mode() & 0o7777, md.mtime(), md.mtime_nsec()),
                (0o640, 1_600_000_000, 5)
            );
        }
    }
}
