//! R4 drain: SIGTERM to `gpuinfer worker` on SQS with requests in flight and a long poll open. The requests in
//! flight complete and are deleted, messages arriving while it stops are visible again within 1 s, and the
//! process exits 0 well within the stop timeout.

use std::time::{Duration, Instant};

use gpuinfer::QueueCounts;

use crate::harness::{seconds, sqs_counts, worker_args, worker_env};
use crate::support::engine_process::EngineProcess;
use crate::support::process::ChildProcess;
use crate::support::{eventually, moto, report_figure, request_body};

const IN_FLIGHT: usize = 4;
const ARRIVING: usize = 6;
/// The template's StopTimeout: ECS sends SIGKILL this long after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn r4_sigterm_completes_the_requests_in_flight_and_gives_back_what_arrives_while_stopping() {
    let started = Instant::now();
    let name = moto::unique("r4");
    // A visibility timeout far longer than the test: a message visible again was given back, not timed out.
    let (queue_url, dlq_url) = moto::queue_with_dlq(&name, 300, 3).await;
    let s3 = moto::s3().await;
    let bucket = moto::bucket(&name).await;
    let engine = EngineProcess::start(&["--latency-ms", "2000"]);
    let dir = tempfile::tempdir().unwrap();
    let env = worker_env(&queue_url, &dlq_url, &bucket).await;
    // Twice the slots in flight: the worker keeps a long poll open for the free ones.
    let args = worker_args(&engine.url, "8", "3", "5");
    let mut worker = ChildProcess::gpuinfer(&args, &env, &dir.path().join("worker.log"));

    let (in_flight, bodies): (Vec<_>, Vec<_>) = (0..IN_FLIGHT).map(|i| request_body(&format!("drain {i}"))).unzip();
    moto::send_all(&queue_url, &bodies).await;
    let engine = &engine;
    eventually(Duration::from_secs(20), "the requests in the engine", || async {
        (engine.stat("inFlight").await == IN_FLIGHT as u64).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    worker.signal("TERM");
    let signalled = Instant::now();
    let arriving: Vec<String> = (0..ARRIVING).map(|i| request_body(&format!("arriving {i}")).1).collect();
    moto::send_all(&queue_url, &arriving).await;

    let status = worker.exited_within(STOP_TIMEOUT).await;
    let exit_after = signalled.elapsed();
    assert!(status.success(), "a drained worker exits 0, got {status}");
    let exited = Instant::now();
    eventually(Duration::from_secs(1), "the arriving messages visible again", || async {
        let counts = sqs_counts(&queue_url).await;
        (counts == QueueCounts { visible: ARRIVING as u64, in_flight: 0, delayed: 0 }).then_some(())
    })
    .await;
    let visible_after = exited.elapsed();
    for id in &in_flight {
        let document = moto::object(&s3, &bucket, &format!("results/{id}.json")).await;
        assert_eq!(document["status"], "success", "{document}");
    }
    assert_eq!(engine.calls().await, IN_FLIGHT as u64, "nothing new was started after SIGTERM");
    let given_back: usize = worker
        .log()
        .lines()
        .filter(|l| l.contains("giving back unstarted"))
        .filter_map(|l| l.split("messages=").nth(1)?.split_whitespace().next()?.parse::<usize>().ok())
        .sum();
    report_figure(&format!(
        "R4 drain: SIGTERM with {IN_FLIGHT} requests in flight: {IN_FLIGHT} completed and deleted, 0 lost; \
         {ARRIVING} arriving while stopping all visible again {:.2} s after exit ({given_back} received and \
         given back); exit 0 {:.1} s after SIGTERM (stop timeout {} s), {}",
        visible_after.as_secs_f64(),
        exit_after.as_secs_f64(),
        STOP_TIMEOUT.as_secs(),
        seconds(started)
    ));
}
