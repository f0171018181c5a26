//! What the fault tests share: worker command lines, seeded kill points, and counting stored results
//! (each first sighting kept, so a later change shows as an overwrite).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuinfer::{Queue, QueueCounts, SqsQueue};

use crate::support::moto;

/// Flags of a `gpuinfer worker` that notices faults quickly: short visibility timeout (killed work is back
/// in 3 s), long polls of `wait_seconds`, fast retries.
pub(crate) fn worker_args<'a>(
    engine_url: &'a str,
    concurrency: &'a str,
    max_receive_count: &'a str,
    wait_seconds: &'a str,
) -> Vec<&'a str> {
    vec![
        "worker",
        "--tier",
        "small",
        "--engine-url",
        engine_url,
        "--concurrency",
        concurrency,
        "--visibility-timeout",
        "3",
        "--max-receive-count",
        max_receive_count,
        "--wait-time-seconds",
        wait_seconds,
        "--retry-base-seconds",
        "0.2",
    ]
}

/// `kills` moments in a run of `requests`, as counts of stored results, drawn from a fixed seed.
pub(crate) fn kill_points(seed: u64, kills: usize, requests: usize) -> Vec<usize> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut points: Vec<usize> = (0..kills).map(|_| rng.usize(requests / 20..requests * 9 / 10)).collect();
    points.sort_unstable();
    points
}

/// The documents of a results folder as first seen (inode and bytes).
#[derive(Debug)]
pub(crate) struct FirstSeen {
    dir: PathBuf,
    seen: HashMap<PathBuf, (u64, Vec<u8>)>,
}

impl FirstSeen {
    pub(crate) fn new(results: &Path) -> Self {
        FirstSeen { dir: results.to_owned(), seen: HashMap::new() }
    }

    /// Records documents not seen before; how many there are now.
    pub(crate) fn scan(&mut self) -> usize {
        for entry in std::fs::read_dir(&self.dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") && !self.seen.contains_key(&path) {
                let inode = std::fs::metadata(&path).unwrap().ino();
                self.seen.insert(path.clone(), (inode, std::fs::read(&path).unwrap()));
            }
        }
        self.seen.len()
    }

    /// Documents whose file or bytes changed since first seen.
    pub(crate) fn overwritten(&self) -> usize {
        self.seen
            .iter()
            .filter(|(path, (inode, bytes))| {
                std::fs::metadata(path).unwrap().ino() != *inode || std::fs::read(path).unwrap() != *bytes
            })
            .count()
    }

    /// Every document, parsed.
    pub(crate) fn documents(&self) -> Vec<serde_json::Value> {
        self.seen.values().map(|(_, bytes)| serde_json::from_slice(bytes).unwrap()).collect()
    }
}

/// A `gpuinfer worker`'s environment on moto: the queue (and its high lane), the dead-letter queue, results in
/// `bucket`.
pub(crate) async fn worker_env(queue_url: &str, dlq_url: &str, bucket: &str) -> Vec<(&'static str, String)> {
    let mut env = moto::child_env();
    env.extend([
        ("REQUEST_QUEUE_URL", queue_url.to_owned()),
        ("HIGH_QUEUE_URL", moto::high_lane_of(queue_url).await),
        ("DLQ_URL", dlq_url.to_owned()),
        ("OUTPUT_DESTINATION", format!("s3://{bucket}/results/")),
    ]);
    env
}

/// A moto SQS queue, for its counts.
pub(crate) async fn sqs_queue(url: &str) -> SqsQueue {
    SqsQueue::new(moto::sqs().await, url.to_owned(), None)
}

pub(crate) async fn sqs_counts(url: &str) -> QueueCounts {
    sqs_queue(url).await.counts().await.unwrap()
}

/// Polls a queue until it holds nothing visible, in flight or delayed.
pub(crate) async fn emptied(queue: &dyn Queue, limit: Duration) {
    crate::support::eventually(limit, "an empty queue", || async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        (queue.counts().await.unwrap() == QueueCounts::default()).then_some(())
    })
    .await;
}

/// Seconds since `started`, for figures.
pub(crate) fn seconds(started: std::time::Instant) -> String {
    format!("{:.1} s", started.elapsed().as_secs_f64())
}
