//! R1 crash: the `gpuinfer worker` process SIGKILLed at seeded random moments and restarted, on the embedded
//! queue and on SQS + S3 (moto): every request ends in one success document, none missing, none overwritten.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use gpuinfer::{LocalBackends, Queue, QueueCounts, Tier};
use serde_json::Value;

use crate::harness::{FirstSeen, emptied, kill_points, seconds, sqs_counts, sqs_queue, worker_args, worker_env};
use crate::support::engine_process::EngineProcess;
use crate::support::process::ChildProcess;
use crate::support::{eventually, moto, report_figure, request_body};

const KILLS: usize = 5;
/// Receives a message may take: a request in flight at every kill still has attempts left.
const MAX_RECEIVE_COUNT: &str = "10";

/// Asserts every document is a success for one of `ids`, each id exactly once.
fn assert_one_success_each(documents: &[Value], ids: &HashSet<String>) {
    let mut seen = HashSet::new();
    for document in documents {
        assert_eq!(document["status"], "success", "{document}");
        let id = document["requestId"].as_str().unwrap().to_owned();
        assert!(ids.contains(&id), "a document for an unknown request {id}");
        assert!(seen.insert(id), "two documents for one request: {document}");
    }
    assert_eq!(seen.len(), ids.len(), "missing: {:?}", ids.difference(&seen).collect::<Vec<_>>());
}

#[tokio::test]
async fn r1_a_worker_sigkilled_five_times_on_the_embedded_queue_loses_and_overwrites_nothing() {
    const REQUESTS: usize = 1000;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let queue = backends.lane_queue(Tier::Small, gpuinfer::Priority::Normal, Duration::from_secs(3), 10);
    let mut ids = HashSet::new();
    for i in 0..REQUESTS {
        let (id, body) = request_body(&format!("crash test {i}"));
        queue.send(&body).await.unwrap();
        ids.insert(id.to_string());
    }
    let engine = EngineProcess::start(&["--latency-ms", "20", "--slots", "64"]);
    let data_dir = dir.path().to_str().unwrap();
    let mut args = worker_args(&engine.url, "16", MAX_RECEIVE_COUNT, "1");
    args.extend(["--embedded-queues", "--data-dir", data_dir]);
    let log = dir.path().join("worker.log");
    let start = || ChildProcess::gpuinfer(&args, &[], &log);

    let mut results = FirstSeen::new(&dir.path().join("results"));
    let mut worker = start();
    for point in kill_points(1, KILLS, REQUESTS) {
        eventually(Duration::from_secs(60), "results before the next kill", || {
            std::future::ready((results.scan() >= point).then_some(()))
        })
        .await;
        worker.kill();
        worker = start();
    }
    eventually(Duration::from_secs(90), "every result", || {
        std::future::ready((results.scan() >= REQUESTS).then_some(()))
    })
    .await;
    emptied(&*queue, Duration::from_secs(20)).await;
    let documents = results.documents();
    assert_one_success_each(&documents, &ids);
    let overwritten = results.overwritten();
    assert_eq!(overwritten, 0, "documents changed after they were first written");
    assert!(backends.dead_letter_queue().peek_all().unwrap().is_empty(), "nothing dead-lettered");
    let duplicates = engine.calls().await - REQUESTS as u64;
    worker.signal("TERM");
    assert!(worker.exited_within(Duration::from_secs(10)).await.success(), "the last worker drains and exits 0");
    report_figure(&format!(
        "R1 crash (embedded queue): {REQUESTS} requests, {} lost, {overwritten} overwritten, {duplicates} duplicate \
         engine calls, {KILLS} kills, {}",
        REQUESTS - documents.len(),
        seconds(started)
    ));
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn r1_a_worker_sigkilled_five_times_on_sqs_and_s3_loses_and_overwrites_nothing() {
    const REQUESTS: usize = 200;
    let started = Instant::now();
    let name = moto::unique("r1");
    let (queue_url, dlq_url) = moto::queue_with_dlq(&name, 3, 10).await;
    let s3 = moto::s3().await;
    let bucket = moto::versioned_bucket(&s3, &name).await;
    let mut ids = HashSet::new();
    let bodies: Vec<String> = (0..REQUESTS)
        .map(|i| {
            let (id, body) = request_body(&format!("crash test {i}"));
            ids.insert(id.to_string());
            body
        })
        .collect();
    moto::send_all(&queue_url, &bodies).await;
    let engine = EngineProcess::start(&["--latency-ms", "20", "--slots", "64"]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("worker.log");
    let env = worker_env(&queue_url, &dlq_url, &bucket).await;
    let args = worker_args(&engine.url, "16", MAX_RECEIVE_COUNT, "1");
    let start = || ChildProcess::gpuinfer(&args, &env, &log);
    let stored = || async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        moto::keys(&s3, &bucket, "results/").await.len()
    };

    let mut worker = start();
    for point in kill_points(2, KILLS, REQUESTS) {
        eventually(Duration::from_secs(60), "results before the next kill", || async {
            (stored().await >= point).then_some(())
        })
        .await;
        worker.kill();
        worker = start();
    }
    eventually(Duration::from_secs(90), "every result", || async { (stored().await >= REQUESTS).then_some(()) }).await;
    emptied(&sqs_queue(&queue_url).await, Duration::from_secs(20)).await;
    let mut documents = Vec::new();
    for key in moto::keys(&s3, &bucket, "results/").await {
        documents.push(moto::object(&s3, &bucket, &key).await);
    }
    assert_one_success_each(&documents, &ids);
    let versions = moto::version_counts(&s3, &bucket, "results/").await;
    let overwritten = versions.values().filter(|&&n| n > 1).count();
    assert_eq!(overwritten, 0, "objects written more than once: {versions:?}");
    assert_eq!(sqs_counts(&dlq_url).await, QueueCounts::default(), "nothing dead-lettered");
    let duplicates = engine.calls().await - REQUESTS as u64;
    worker.signal("TERM");
    assert!(worker.exited_within(Duration::from_secs(10)).await.success(), "the last worker drains and exits 0");
    report_figure(&format!(
        "R1 crash (SQS + S3 on moto): {REQUESTS} requests, {} lost, {overwritten} overwritten, {duplicates} duplicate \
         engine calls, {KILLS} kills, {}",
        REQUESTS - documents.len(),
        seconds(started)
    ));
}
