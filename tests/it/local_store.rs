//! The file result store: atomic create-if-absent (first writer wins), reads, expiry, and the retry schedule's cap.

use std::sync::Arc;
use std::time::Duration;

use gpuinfer::{FileStore, LeaseSettings, PutOutcome, RequestId, ResultStore};

#[tokio::test]
async fn the_first_writer_wins_and_readers_never_see_a_partial_document() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileStore::open(dir.path()).unwrap());
    let id = gpuinfer::RequestId::new_v4();
    assert!(!store.exists(id).await.unwrap());
    assert_eq!(store.get(id).await.unwrap(), None);
    let writers: Vec<_> = (0..16)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store.put_if_absent(id, format!("writer {i} {}", "x".repeat(100_000)).as_bytes()).await.unwrap()
            })
        })
        .collect();
    let mut created = 0;
    for writer in writers {
        if writer.await.unwrap() == PutOutcome::Created {
            created += 1;
        }
    }
    assert_eq!(created, 1);
    let stored = String::from_utf8(store.get(id).await.unwrap().unwrap()).unwrap();
    let (writer, tail) = stored.split_once(' ').and_then(|(_, rest)| rest.split_once(' ')).unwrap();
    assert!(writer.parse::<u32>().is_ok() && tail == "x".repeat(100_000), "one writer's whole document");
    assert!(store.exists(id).await.unwrap());
    assert_eq!(store.path_of(id), dir.path().join("results").join(format!("{id}.json")));
    let leftovers = std::fs::read_dir(dir.path().join("results")).unwrap().count();
    assert_eq!(leftovers, 1, "no temporary files are left behind");
}

#[test]
fn retry_delays_double_and_stop_at_the_visibility_timeout() {
    let lease = LeaseSettings {
        retry_base: Duration::from_secs(2),
        visibility_timeout: Duration::from_secs(20),
        ..LeaseSettings::default()
    };
    let delays: Vec<u64> = (1..=6).map(|attempt| lease.retry_delay(attempt).as_secs()).collect();
    assert_eq!(delays, [2, 4, 8, 16, 20, 20]);
}

/// Documents expire as the results bucket's lifecycle rule makes them on AWS: older than the retention, gone.
#[tokio::test]
async fn documents_older_than_the_retention_expire_and_newer_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let (old, new) = (RequestId::new_v4(), RequestId::new_v4());
    store.put_if_absent(old, b"{}").await.unwrap();
    store.record_acceptance(old, b"{}").await.unwrap();
    store.put_if_absent(new, b"{}").await.unwrap();
    let long_ago = std::time::SystemTime::now() - Duration::from_secs(40 * 86_400);
    for name in [format!("{old}.json"), format!("{old}.accepted")] {
        let file = std::fs::File::options().write(true).open(dir.path().join("results").join(name)).unwrap();
        file.set_modified(long_ago).unwrap();
    }
    assert_eq!(store.expire(Duration::from_secs(30 * 86_400), std::time::SystemTime::now()).unwrap(), 2);
    assert_eq!(store.get(old).await.unwrap(), None);
    assert_eq!(store.acceptance(old).await.unwrap(), None);
    assert!(store.get(new).await.unwrap().is_some(), "a recent document stays");
}

/// Every folder the Batch API keeps beside the results expires with them (the bucket's rule covers every key under
/// the results prefix): files, batches, a batch's marks, uploads and their parts; a folder left empty by the sweep
/// goes too, one with a recent object stays.
#[test]
fn objects_in_every_folder_expire_with_the_results() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path()).unwrap();
    let results = dir.path().join("results");
    let long_ago = std::time::SystemTime::now() - Duration::from_secs(40 * 86_400);
    let old = [
        "files/file-a.jsonl",
        "batches/batch_a.json",
        "batch-lines/batch_a/00000000.succeeded",
        "uploads/upload_a/part_a",
    ];
    for path in old.iter().chain(&["batch-lines/batch_b/00000000.failed"]) {
        let path = results.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"{}").unwrap();
    }
    for path in old.iter().chain(&["batch-lines/batch_a", "uploads/upload_a"]) {
        std::fs::File::open(results.join(path)).unwrap().set_modified(long_ago).unwrap();
    }
    assert_eq!(store.expire(Duration::from_secs(30 * 86_400), std::time::SystemTime::now()).unwrap(), old.len());
    for path in old.iter().chain(&["batch-lines/batch_a", "uploads/upload_a"]) {
        assert!(!results.join(path).exists(), "{path} outlived the retention");
    }
    assert!(results.join("batch-lines/batch_b/00000000.failed").exists(), "a recent mark stays");
}
