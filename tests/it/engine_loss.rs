//! GPU loss end to end: `gpuinfer worker` (the real binary) beside an engine process SIGKILLed with 8
//! requests in flight gives them all back at once and exits non-zero; a second worker completes each once.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::engine_process::EngineProcess;
use crate::support::process::ChildProcess;
use crate::support::{eventually, request_body};
use gpuinfer::{LocalBackends, LocalQueue, Priority, Queue, QueueCounts, ResultDocument, ResultStore, Status, Tier};

const REQUESTS: usize = 8;
/// Long enough that "visible again" can only mean given back, never timed out.
const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(300);
const LOSS_WINDOW_SECONDS: u64 = 2;

/// A `gpuinfer worker` child process on the small tier of `data_dir`; killed when dropped.
fn start_worker(data_dir: &Path, engine_url: &str) -> ChildProcess {
    let visibility = VISIBILITY_TIMEOUT.as_secs().to_string();
    let loss_window = LOSS_WINDOW_SECONDS.to_string();
    let args = [
        "worker",
        "--tier",
        "small",
        "--engine-url",
        engine_url,
        "--concurrency",
        "8",
        "--visibility-timeout",
        &visibility,
        "--engine-loss-window-seconds",
        &loss_window,
        "--wait-time-seconds",
        "1",
        "--embedded-queues",
        "--data-dir",
        data_dir.to_str().unwrap(),
    ];
    ChildProcess::gpuinfer(&args, &[], &data_dir.join("worker.log"))
}

async fn counts(queue: &LocalQueue) -> QueueCounts {
    queue.counts().await.unwrap()
}

#[tokio::test]
async fn a_sigkilled_engine_gets_every_held_message_given_back_at_once_and_a_healthy_worker_completes_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let queue = backends.lane_queue(Tier::Small, Priority::Normal, VISIBILITY_TIMEOUT, 3);
    let mut ids = Vec::new();
    for i in 0..REQUESTS {
        let (id, body) = request_body(&format!("request {i}"));
        queue.send(&body).await.unwrap();
        ids.push(id);
    }

    let mut doomed = EngineProcess::start(&["--latency-ms", "600000", "--slots", "8"]);
    let mut first = start_worker(dir.path(), &doomed.url);
    let engine = &doomed;
    eventually(Duration::from_secs(20), "8 requests in the engine", || async {
        (engine.calls().await == REQUESTS as u64).then_some(())
    })
    .await;
    assert_eq!(counts(&queue).await, QueueCounts { visible: 0, in_flight: 8, delayed: 0 });

    doomed.kill();
    let killed = Instant::now();
    let status = first.exited_within(Duration::from_secs(LOSS_WINDOW_SECONDS + 10)).await;
    assert!(!status.success(), "the worker exits non-zero so ECS replaces the task, got {status}");
    assert!(killed.elapsed() >= Duration::from_secs(LOSS_WINDOW_SECONDS), "it waits out the loss window");
    assert_eq!(
        counts(&queue).await,
        QueueCounts { visible: 8, in_flight: 0, delayed: 0 },
        "every held message visible again at once, not after the {VISIBILITY_TIMEOUT:?} visibility timeout"
    );
    for &id in &ids {
        assert!(backends.store.get(id).await.unwrap().is_none(), "no result (error or otherwise) for {id}");
    }

    let healthy = EngineProcess::start(&["--latency-ms", "20"]);
    let mut second = start_worker(dir.path(), &healthy.url);
    let store = Arc::clone(&backends.store);
    for &id in &ids {
        let store = Arc::clone(&store);
        let doc: ResultDocument = eventually(Duration::from_secs(20), "a result document", || {
            let store = Arc::clone(&store);
            async move { store.get(id).await.unwrap().map(|bytes| serde_json::from_slice(&bytes).unwrap()) }
        })
        .await;
        assert_eq!((doc.status, doc.processing.attempts), (Status::Success, 2), "{id}: the second receive succeeded");
    }
    assert_eq!(std::fs::read_dir(dir.path().join("results")).unwrap().count(), REQUESTS, "one result each");
    assert_eq!(healthy.calls().await, REQUESTS as u64, "each generated once by the healthy engine");
    let queue = &queue;
    eventually(Duration::from_secs(10), "an empty queue", || async {
        (counts(queue).await == QueueCounts::default()).then_some(())
    })
    .await;

    second.signal("TERM");
    assert!(second.exited_within(Duration::from_secs(10)).await.success(), "a drained worker exits 0");
}
