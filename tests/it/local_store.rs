//! The file result store: atomic create-if-absent (first writer wins), reads, and the retry schedule's cap.

use std::sync::Arc;
use std::time::Duration;

use gpuinfer::local::store::FileStore;
use gpuinfer::ports::{PutOutcome, ResultStore};
use gpuinfer::vocabulary::Tier;
use gpuinfer::worker::WorkerConfig;

#[tokio::test]
async fn the_first_writer_wins_and_readers_never_see_a_partial_document() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileStore::open(dir.path()).unwrap());
    let id = gpuinfer::request_id::RequestId::new_v4();
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
    let config = WorkerConfig {
        retry_base: Duration::from_secs(2),
        visibility_timeout: Duration::from_secs(20),
        ..WorkerConfig::new(Tier::Small)
    };
    let delays: Vec<u64> = (1..=6).map(|attempt| config.retry_delay(attempt).as_secs()).collect();
    assert_eq!(delays, [2, 4, 8, 16, 20, 20]);
}
