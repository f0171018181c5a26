//! R6 lost worker: a `gpuinfer worker` with requests mid-generation dies without a word (SIGKILL, as an instance
//! reclaimed before its drain ends or a host failure), on SQS + S3 (moto) with the worker's default lease. Its
//! messages are visible again within the lease (30 s), not the queue's visibility timeout (300 s), and a second
//! worker ends each request once.

use std::time::{Duration, Instant};

use gpuinfer::QueueCounts;
use serde_json::Value;

use crate::harness::{seconds, sqs_counts, worker_env};
use crate::support::engine_process::EngineProcess;
use crate::support::process::ChildProcess;
use crate::support::{eventually, moto, report_figure, request_body};

const IN_FLIGHT: usize = 4;
/// The worker's default lease (`VISIBILITY_TIMEOUT`): what a lost worker's messages wait at most.
const LEASE: Duration = Duration::from_secs(30);
/// How long the engine takes for each request.
const GENERATION: Duration = Duration::from_secs(4);

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn r6_a_worker_lost_without_notice_holds_its_requests_for_its_lease_not_the_visibility_timeout() {
    let started = Instant::now();
    let name = moto::unique("r6");
    // The template's queue: 300 s visibility, 3 receives.
    let (queue_url, dlq_url) = moto::queue_with_dlq(&name, 300, 3).await;
    let s3 = moto::s3().await;
    let bucket = moto::bucket(&name).await;
    let latency = GENERATION.as_millis().to_string();
    let engine = EngineProcess::start(&["--latency-ms", &latency]);
    let dir = tempfile::tempdir().unwrap();
    let env = worker_env(&queue_url, &dlq_url, &bucket).await;
    // The defaults but for the engine and a short long poll: no --visibility-timeout.
    let args = ["worker", "--tier", "small", "--engine-url", &engine.url, "--wait-time-seconds", "1"];
    let mut lost = ChildProcess::gpuinfer(&args, &env, &dir.path().join("lost.log"));
    let (ids, bodies): (Vec<_>, Vec<_>) = (0..IN_FLIGHT).map(|i| request_body(&format!("lost {i}"))).unzip();
    moto::send_all(&queue_url, &bodies).await;
    let engine = &engine;
    eventually(Duration::from_secs(20), "the requests in the engine", || async {
        (engine.stat("inFlight").await == IN_FLIGHT as u64).then_some(())
    })
    .await;
    lost.kill();
    let killed = Instant::now();
    let mut second = ChildProcess::gpuinfer(&args, &env, &dir.path().join("second.log"));

    let back = eventually(LEASE + Duration::from_secs(10), "the lost worker's messages received again", || async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        (engine.calls().await >= 2 * IN_FLIGHT as u64).then(|| killed.elapsed())
    })
    .await;
    assert!(back <= LEASE + Duration::from_secs(3), "received again {back:?} after the kill");
    let s3 = &s3;
    let bucket = &bucket;
    eventually(GENERATION * 3, "every result", || async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        (moto::keys(s3, bucket, "results/").await.len() == IN_FLIGHT).then_some(())
    })
    .await;
    for id in &ids {
        let document: Value = moto::object(s3, bucket, &format!("results/{id}.json")).await;
        assert_eq!(document["status"], "success", "{document}");
        assert_eq!(document["attempts"], 2, "ended by the second worker: {document}");
    }
    assert_eq!(sqs_counts(&queue_url).await, QueueCounts::default());
    assert_eq!(sqs_counts(&dlq_url).await, QueueCounts::default(), "nothing dead-lettered");
    second.signal("TERM");
    assert!(second.exited_within(Duration::from_secs(10)).await.success());
    report_figure(&format!(
        "R6 lost worker (SQS + S3 on moto): {IN_FLIGHT} requests mid-generation, received again {:.1} s after the \
         SIGKILL (lease {} s; the queue's visibility timeout 300 s), 0 lost, {}",
        back.as_secs_f64(),
        LEASE.as_secs(),
        seconds(started)
    ));
}
