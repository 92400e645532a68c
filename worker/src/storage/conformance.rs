//! One behavioural suite, run against every backend: what the engine relies on from a store.
//! The Azure run talks to a real Azurite started here on a free loopback port.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{list_all, Meta, OpenOptions, Store, UploadPlan};
use crate::keyspace::Cuts;
use crate::location::BlobLocation;
use crate::manifest::{Kind, Mtime};
use crate::stats::Stats;

const DEV_ACCOUNT: &str = "devstoreaccount1";
// Azurite's published development key; it guards nothing.
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

pub struct Azurite {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Azurite {
    pub fn start() -> Azurite {
        let bin = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../node_modules/.bin/azurite-blob");
        assert!(
            bin.exists(),
            "{} is missing: run `make setup` (npm ci) first",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(bin)
            .args([
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                &port.to_string(),
                "--skipApiVersionCheck",
                "--loose",
                "--silent",
                "--location",
            ])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start Azurite");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "Azurite did not start listening on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Azurite {
            child,
            port,
            _dir: dir,
        }
    }

    /// What the commands open a store with, but for Azurite's account and key.
    pub fn options() -> OpenOptions {
        let common = crate::commands::args::Common {
            auth: crate::storage::azure::auth::AuthMode::Key,
            max_retries: 2,
            block_md5: true,
            io_timeout: 30,
            fsync: true,
            list_concurrency: 4,
            list_page_size: 5000,
        };
        OpenOptions {
            env: Arc::new(|k| match k {
                "AZURE_STORAGE_ACCOUNT" => Some(DEV_ACCOUNT.to_string()),
                "AZURE_STORAGE_KEY" => Some(DEV_KEY.to_string()),
                _ => None,
            }),
            ..crate::commands::open_options(&common, 8, Arc::new(Stats::default()))
        }
    }

    pub fn location(&self, container: &str, prefix: &str) -> BlobLocation {
        BlobLocation {
            endpoint: format!("http://127.0.0.1:{}/{DEV_ACCOUNT}", self.port),
            account: DEV_ACCOUNT.into(),
            container: container.into(),
            prefix: prefix.into(),
            sas: None,
        }
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn meta(secs: i64) -> Meta {
    Meta {
        mtime: Some(Mtime {
            secs,
            nanos: 123_456_789,
        }),
        mode: Some(0o640),
        ..Meta::default()
    }
}

async fn listing(store: &Arc<dyn Store>, recursive: bool) -> BTreeMap<Vec<u8>, (Kind, u64)> {
    list_all(store, recursive)
        .await
        .unwrap()
        .into_iter()
        .map(|e| {
            let s = e.size();
            (e.path, (e.kind, s))
        })
        .collect()
}

/// Names that a URL, a query string or a shell each read specially, and some that are not ASCII.
const NAMES: [&[u8]; 6] = [
    b"plain.txt",
    b"with space/and+plus&amp=eq",
    "caf\u{e9}/\u{6f22}\u{5b57}".as_bytes(),
    b"#hash",
    b"pct%41",
    b"-dash",
];

/// The suite. `local` says whether the backend has directories and keeps owners. The checks
/// run in this order on one store: each later one relies on what the earlier ones wrote.
async fn conforms(store: Arc<dyn Store>, local: bool) {
    // create_root is idempotent.
    store.create_root().await.unwrap();
    assert!(!store.create_root().await.unwrap());

    objects_round_trip(&store).await;
    listings_hold_every_object(&store).await;
    let (plan, data) = big_upload();
    uploads_resume_from_staged_blocks(&store, &plan, &data, local).await;
    another_version_reuses_no_block(&store, &plan, &data).await;
    unsafe_names_are_refused(&store).await;
    capabilities_hold(&store, local).await;

    // Deletes, including of what is already gone.
    store.delete(b"plain.txt").await.unwrap();
    store.delete(b"plain.txt").await.unwrap();
    assert!(store.head(b"plain.txt").await.unwrap().is_none());
}

/// put, head, ranged read; metadata survives. Empty objects too.
async fn objects_round_trip(store: &Arc<dyn Store>) {
    for (i, n) in NAMES.iter().enumerate() {
        let body = Bytes::from(format!("content {i} of {}", String::from_utf8_lossy(n)));
        store
            .put(n, body.clone(), &meta(1_700_000_000 + i as i64))
            .await
            .unwrap();
        let (e, m) = store.head(n).await.unwrap().expect("just written");
        assert_eq!(e.size(), body.len() as u64);
        assert_eq!(
            m.mtime,
            meta(1_700_000_000 + i as i64).mtime,
            "mtime kept for {n:?}"
        );
        assert_eq!(m.mode, Some(0o640));
        let part = store.read(n, 2, 5, None).await.unwrap();
        assert_eq!(part.data, body.slice(2..7));
    }
    assert!(store.head(b"absent").await.unwrap().is_none());
    assert!(store.read(b"absent", 0, 1, None).await.is_err());

    store
        .put(b"dir/empty", Bytes::new(), &Meta::default())
        .await
        .unwrap();
    assert_eq!(
        store
            .read(b"dir/empty", 0, 0, None)
            .await
            .unwrap()
            .data
            .len(),
        0
    );
}

/// Recursive sees every object; non-recursive sees the top level and its dirs.
async fn listings_hold_every_object(store: &Arc<dyn Store>) {
    let all = listing(store, true).await;
    for n in NAMES.iter().chain([&b"dir/empty"[..]].iter()) {
        assert_eq!(
            all.get(*n).map(|x| x.0),
            Some(Kind::File),
            "{:?} listed",
            String::from_utf8_lossy(n)
        );
    }
    let top = listing(store, false).await;
    assert_eq!(top.get(&b"dir"[..]).map(|x| x.0), Some(Kind::Dir));
    assert!(!top.contains_key(&b"dir/empty"[..]));
    ranges_join_to_the_listing(store, &all).await;
}

/// The recursive listing cut into ranges (list jobs, crate::shard), at listed paths and
/// between them, a directory's name and its contents apart: every entry in one range.
async fn ranges_join_to_the_listing(store: &Arc<dyn Store>, all: &BTreeMap<Vec<u8>, (Kind, u64)>) {
    let mut keys: Vec<Vec<u8>> = all.keys().step_by(2).cloned().collect();
    keys.extend([b"dir".to_vec(), b"dir/".to_vec(), b"zz".to_vec()]);
    keys.sort();
    let cuts = Cuts::new(keys);
    let mut joined = BTreeMap::new();
    for k in 1..=cuts.jobs() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let (s, c) = (store.clone(), cuts.clone());
        let lister = tokio::spawn(async move { s.list_range(&c, k, tx).await });
        while let Some(e) = rx.recv().await {
            let e = e.unwrap();
            let path = String::from_utf8_lossy(&e.path).into_owned();
            let size = e.size();
            assert!(
                joined.insert(e.path, (e.kind, size)).is_none(),
                "{path} listed twice"
            );
        }
        lister.await.unwrap().unwrap();
    }
    assert_eq!(&joined, all, "the ranges together are not the listing");
}

/// An object of ten whole blocks and a short last one, and its bytes.
fn big_upload() -> (UploadPlan, Vec<u8>) {
    let plan = UploadPlan {
        size: 10 * 65536 + 7,
        block_size: 65536,
        fingerprint: "v1".into(),
    };
    let data: Vec<u8> = (0..plan.size).map(|i| (i * 31 % 251) as u8).collect();
    (plan, data)
}

/// Block `i` of `data` as `plan` cuts it.
fn block(plan: &UploadPlan, data: &[u8], i: u64) -> Bytes {
    Bytes::copy_from_slice(
        &data[(i * plan.block_size) as usize..(i * plan.block_size + plan.block_len(i)) as usize],
    )
}

/// A block upload is invisible until committed, and resumes from staged blocks.
async fn uploads_resume_from_staged_blocks(
    store: &Arc<dyn Store>,
    plan: &UploadPlan,
    data: &[u8],
    local: bool,
) {
    let nth = |i: u64| block(plan, data, i);
    {
        let up = store.start_upload(b"big/object", plan).await.unwrap();
        assert!((0..plan.blocks()).all(|i| !up.staged(i)));
        for i in [0, 3, 10] {
            up.put_block(i, nth(i), None).await.unwrap();
        }
        // Dropped without commit or abort: what a kill -9 leaves behind.
    }
    assert!(
        store.head(b"big/object").await.unwrap().is_none(),
        "uncommitted upload must not be visible"
    );
    assert!(!listing(store, true).await.contains_key(&b"big/object"[..]));
    let up = store.start_upload(b"big/object", plan).await.unwrap();
    let mut reused = Vec::new();
    for i in 0..plan.blocks() {
        // The engine's way this time (the MD5 taken in the object's pass): the IDs must agree.
        if up.staged(i)
            || !up
                .put_block(i, nth(i), Some(crate::hash::digest(&nth(i))))
                .await
                .unwrap()
        {
            reused.push(i);
        }
    }
    assert_eq!(
        reused,
        vec![0, 3, 10],
        "staged blocks survive and are not sent again"
    );
    if let Some(b) = up.read_back(3).await.unwrap() {
        assert_eq!(b, nth(3));
    }
    let md5: [u8; 16] = crate::hash::digest(data);
    up.commit(&Meta {
        md5: Some(md5),
        ..meta(1_600_000_000)
    })
    .await
    .unwrap();
    let got = store.read(b"big/object", 0, plan.size, None).await.unwrap();
    assert!(got.data == data, "committed bytes equal what was staged");
    let (_, m) = store.head(b"big/object").await.unwrap().unwrap();
    assert_eq!(m.mtime, meta(1_600_000_000).mtime);
    if !local {
        assert_eq!(m.md5, Some(md5), "blob keeps Content-MD5");
    }
}

/// Another source version must not reuse the staged blocks of the first: a block whose
/// bytes changed is written again, whatever the journal or the block list holds.
async fn another_version_reuses_no_block(store: &Arc<dyn Store>, plan: &UploadPlan, data: &[u8]) {
    {
        let up = store.start_upload(b"big/other", plan).await.unwrap();
        up.put_block(1, block(plan, data, 1), None).await.unwrap();
    }
    let v2 = UploadPlan {
        fingerprint: "v2".into(),
        ..plan.clone()
    };
    let up = store.start_upload(b"big/other", &v2).await.unwrap();
    assert!(
        (0..v2.blocks()).all(|i| !up.staged(i)),
        "blocks of another version are not known staged"
    );
    let changed = Bytes::from(vec![0x5a; plan.block_size as usize]);
    assert!(
        up.put_block(1, changed, None).await.unwrap(),
        "a block with other bytes is sent"
    );
    up.abort(true).await;
}

/// Unsafe names never resolve outside the root.
async fn unsafe_names_are_refused(store: &Arc<dyn Store>) {
    for bad in [&b"../escape"[..], b"a/../../b", b"a/./b"] {
        assert!(
            store
                .put(bad, Bytes::from_static(b"x"), &Meta::default())
                .await
                .is_err(),
            "{bad:?} refused"
        );
    }
}

/// What a store declares of itself (`Capabilities`) is what its methods do.
async fn capabilities_hold(store: &Arc<dyn Store>, local: bool) {
    let can = store.capabilities();
    assert_eq!(can.directories, local, "{can:?}");
    assert_eq!(store.posix().is_some(), local);
    assert!(store.root_exists().await.unwrap());

    // A node of each kind the store holds, written whole, reads back as that kind.
    let m = meta(1_650_000_000);
    store
        .put_node(
            b"nodes/link",
            Kind::Symlink,
            Bytes::from_static(b"../plain.txt"),
            &m,
            None,
        )
        .await
        .unwrap();
    let (e, _) = store.head(b"nodes/link").await.unwrap().expect("written");
    assert_eq!(e.kind, Kind::Symlink);
    let (target, got) = super::read_link(&**store, &e).await.unwrap();
    assert_eq!(target, b"../plain.txt");
    assert_eq!(got.mtime, m.mtime);
    store
        .put_node(b"nodes/dir", Kind::Dir, Bytes::new(), &m, None)
        .await
        .unwrap();
    let (e, _) = store.head(b"nodes/dir").await.unwrap().expect("written");
    assert_eq!((e.kind, e.mtime), (Kind::Dir, m.mtime));
    // Metadata alone, then the root's own.
    store
        .set_meta(b"nodes/dir", Kind::Dir, &meta(1_650_000_100), None)
        .await
        .unwrap();
    let (e, _) = store.head(b"nodes/dir").await.unwrap().unwrap();
    assert_eq!(e.mtime, meta(1_650_000_100).mtime);
    store.set_root_meta(&meta(1_640_000_000)).await.unwrap();
    let root = store
        .root_meta()
        .await
        .unwrap()
        .expect("the root keeps its attributes");
    assert_eq!(root.mtime, meta(1_640_000_000).mtime);

    // Where the store computes an MD5 itself, it is the bytes'.
    let body = Bytes::from_static(b"hashed here");
    store.put(b"nodes/file", body.clone(), &m).await.unwrap();
    let md5 = super::content_md5(&**store, b"nodes/file").await.unwrap();
    assert_eq!(md5.is_some(), local);
    assert!(md5.is_none_or(|d| d == crate::hash::digest(&body)));
    if let Some(fs) = store.posix() {
        filesystem_conforms(&*fs, &body, &m);
    }
    if can.props {
        let with = store.version(b"nodes/file", true).await.unwrap().unwrap();
        assert_eq!(with.size, body.len() as u64);
        assert!(with.props.is_some());
        let without = store.version(b"nodes/file", false).await.unwrap().unwrap();
        assert_eq!((without.token, without.props), (with.token, None));
    }
    // A piecewise upload takes a block in pieces.
    if can.piecewise {
        let plan = UploadPlan {
            size: 6,
            block_size: 6,
            fingerprint: "p".into(),
        };
        let up = store.start_upload(b"nodes/pieces", &plan).await.unwrap();
        up.write_at(0, 0, vec![Bytes::from_static(b"abc")], None)
            .await
            .unwrap();
        up.write_at(0, 3, vec![Bytes::from_static(b"def")], None)
            .await
            .unwrap();
        up.finish_block(0).await.unwrap();
        up.commit(&m).await.unwrap();
        let got = store.read(b"nodes/pieces", 0, 6, None).await.unwrap();
        assert_eq!(got.data, "abcdef");
    }
    store.flush().await.unwrap();
    store.remove_all(b"nodes").await.unwrap();
    assert!(store.head(b"nodes/file").await.unwrap().is_none());
}

/// The filesystem capability (`Filesystem`) of a store that has one, on what
/// `capabilities_hold` wrote: `nodes/file` holding `body`, `nodes/link` (to `../plain.txt`),
/// `nodes/dir`. What the store's own methods did shows through it, and what it does shows
/// through them.
fn filesystem_conforms(fs: &dyn super::Filesystem, body: &Bytes, m: &Meta) {
    use std::os::unix::fs::MetadataExt;
    // Reads: a small file whole, a link itself, hashes of both, a dense file's layout.
    let (data, got) = fs.read_small(b"nodes/file", 1 << 20).unwrap().unwrap();
    assert_eq!((data, got.mtime), (body.clone(), m.mtime));
    assert!(fs.read_small(b"nodes/file", 4).unwrap().is_none());
    assert_eq!(fs.md5(b"nodes/file").unwrap(), crate::hash::digest(body));
    assert_eq!(fs.readlink(b"nodes/link").unwrap(), b"../plain.txt");
    assert_eq!(
        fs.md5(b"nodes/link").unwrap(),
        crate::hash::digest(b"../plain.txt")
    );
    let (target, link_meta) = fs.read_link(b"nodes/link").unwrap();
    assert_eq!(
        (&target[..], link_meta.mtime),
        (&b"../plain.txt"[..], m.mtime)
    );
    assert!(fs.read_link(b"nodes/file").is_err(), "a file is no symlink");
    assert!(
        fs.open_file(b"nodes/link").is_err(),
        "a symlink is never followed"
    );
    assert_eq!(fs.sparse_layout(b"nodes/file").unwrap(), None);
    assert!(fs.lstat(b"nodes/none").unwrap().is_none());
    assert_eq!(fs.default_mode() & !0o666, 0);

    // Writes: a directory made once, a second name of a file, metadata set in place.
    assert!(fs.make_dir(b"nodes/made").unwrap());
    assert!(!fs.make_dir(b"nodes/made").unwrap());
    fs.hard_link(b"nodes/file", b"nodes/made/second", true)
        .unwrap();
    let (one, two) = (
        fs.lstat(b"nodes/file").unwrap().unwrap(),
        fs.lstat(b"nodes/made/second").unwrap().unwrap(),
    );
    assert_eq!((one.ino(), one.nlink()), (two.ino(), 2));
    let later = meta(1_660_000_000);
    fs.set_meta(b"nodes/made/second", Kind::File, &later)
        .unwrap();
    let now = fs.lstat(b"nodes/file").unwrap().unwrap();
    assert_eq!((now.mtime(), now.mode() & 0o7777), (1_660_000_000, 0o640));
    assert!(
        fs.set_meta(b"nodes/made", Kind::File, &later).is_err(),
        "a kind is checked"
    );
    fs.make_symlink(b"nodes/made/link", b"second", &later)
        .unwrap();
    assert_eq!(fs.readlink(b"nodes/made/link").unwrap(), b"second");
    fs.finish_dir(b"nodes/made", &later, None).unwrap();
    assert_eq!(
        fs.lstat(b"nodes/made").unwrap().unwrap().mtime(),
        1_660_000_000
    );

    // Attributes: what is written reads back, where the filesystem holds user attributes.
    let wanted = crate::xattrs::Wanted {
        xattrs: true,
        ..crate::xattrs::Wanted::default()
    };
    let want = vec![(c"user.ferry.test".to_owned(), b"v".to_vec())];
    let refused = fs.write_xattrs(b"nodes/file", &want, wanted).unwrap();
    if refused == crate::xattrs::Refused::default() {
        let held = fs.read_xattrs(b"nodes/file", wanted).unwrap().unwrap();
        assert_eq!(held, want);
    }

    // Nothing of ferry's own is left behind to sweep; the removal takes a tree.
    let swept = fs.sweep_leftovers(true);
    assert!(
        swept.removed.is_empty() && swept.failed.is_empty(),
        "{swept:?}"
    );
    fs.remove_all(b"nodes/made").unwrap();
    assert!(fs.lstat(b"nodes/made").unwrap().is_none());
    assert!(!fs.looks_beat_listing(b"nodes", 1_000));
}

#[tokio::test]
async fn local_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(super::LocalStore::new(dir.path().join("root"), true));
    conforms(store, true).await;
}

#[tokio::test]
async fn azure_store_conforms() {
    let az = Azurite::start();
    let store: Arc<dyn Store> = Arc::new(
        super::azure::AzureStore::new(
            az.location("conformance", "some/prefix"),
            &Azurite::options(),
        )
        .unwrap(),
    );
    conforms(store, false).await;
}

#[tokio::test]
async fn azure_store_at_container_root_conforms() {
    let az = Azurite::start();
    let store: Arc<dyn Store> = Arc::new(
        super::azure::AzureStore::new(az.location("rootlevel", ""), &Azurite::options()).unwrap(),
    );
    conforms(store, false).await;
}

#[tokio::test]
async fn missing_container_is_a_clear_error_not_an_empty_listing() {
    let az = Azurite::start();
    let store: Arc<dyn Store> = Arc::new(
        super::azure::AzureStore::new(az.location("nosuchcontainer", ""), &Azurite::options())
            .unwrap(),
    );
    let err = list_all(&store, true).await.unwrap_err();
    assert!(
        matches!(err, crate::error::StoreError::RootNotFound(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("ContainerNotFound"), "{err}");
}
