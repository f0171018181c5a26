//! R3 store faults: the result store refuses for a window (a fault-injecting store under an in-process worker;
//! a moto S3 server stopped and restarted under `gpuinfer worker`). Writes are retried, messages go back to the
//! queue, and after recovery every request completes: nothing lost, nothing dead-lettered.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuinfer::{
    EngineClient, EngineConfig, HealthSettings, LeaseSettings, LocalBackends, Queue, QueueCounts, Stopped, Tier,
    Worker, WorkerConfig, metrics::Emf,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::harness::{self, FirstSeen, emptied, seconds, sqs_counts, sqs_queue, worker_args};
use crate::support::engine_process::EngineProcess;
use crate::support::faulty_store::FaultyStore;
use crate::support::free_port;
use crate::support::process::ChildProcess;
use crate::support::{eventually, moto, report_figure, request_body};
use gpuinfer::{simulator::Behavior, simulator::EngineSimulator};

const OUTAGE: Duration = Duration::from_secs(4);

/// Documents whose request was received more than once: its message went back to the queue.
fn returned_to_the_queue(documents: &[Value]) -> usize {
    documents.iter().filter(|d| d["attempts"].as_u64().unwrap() > 1).count()
}

fn assert_all_succeeded(documents: &[Value], expected: usize) {
    assert_eq!(documents.len(), expected, "one document per request");
    for document in documents {
        assert_eq!(document["status"], "success", "{document}");
    }
}

#[tokio::test]
async fn r3_a_result_store_refusing_for_a_window_delays_requests_on_the_embedded_queue_but_loses_none() {
    const REQUESTS: usize = 200;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let config = WorkerConfig {
        concurrency: 8,
        wait_time: Duration::from_millis(500),
        lease: LeaseSettings {
            visibility_timeout: Duration::from_secs(3),
            retry_base: Duration::from_millis(200),
            ..LeaseSettings::default()
        },
        health: HealthSettings { interval: Duration::from_millis(200), ..HealthSettings::default() },
        ..WorkerConfig::new(Tier::Small)
    };
    let queue = backends.lane_queue(
        Tier::Small,
        gpuinfer::Priority::Normal,
        config.lease.visibility_timeout,
        config.lease.max_receive_count,
    );
    for i in 0..REQUESTS {
        queue.send(&request_body(&format!("store fault test {i}")).1).await.unwrap();
    }
    let engine = EngineSimulator::start(Behavior { latency: Duration::from_millis(20), ..Behavior::default() }).await;
    let client = EngineClient::new(&EngineConfig {
        base_url: engine.url.clone(),
        model: None,
        request_timeout: Duration::from_secs(10),
    })
    .unwrap();
    let store = Arc::new(FaultyStore::new(backends.store.clone()));
    let lanes = backends.tier_lanes(Tier::Small, config.lease.visibility_timeout, config.lease.max_receive_count);
    let worker = Worker::new(lanes, Arc::clone(&store), Arc::new(client), config, Emf::discard());
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(worker.run(shutdown.clone()));

    let mut results = FirstSeen::new(&dir.path().join("results"));
    eventually(Duration::from_secs(30), "results before the outage", || {
        std::future::ready((results.scan() >= REQUESTS / 4).then_some(()))
    })
    .await;
    store.set_failing(true);
    tokio::time::sleep(OUTAGE).await;
    store.set_failing(false);
    eventually(Duration::from_secs(60), "every result after the outage", || {
        std::future::ready((results.scan() >= REQUESTS).then_some(()))
    })
    .await;
    emptied(&*queue, Duration::from_secs(10)).await;
    let documents = results.documents();
    assert_all_succeeded(&documents, REQUESTS);
    assert_eq!(results.overwritten(), 0);
    assert!(backends.dead_letter_queue().peek_all().unwrap().is_empty(), "an outage dead-letters nothing");
    let returned = returned_to_the_queue(&documents);
    // Refused writes retry on the same lease for the queue's visibility timeout (300 s): a 4 s outage returns none.
    assert!(store.refused() > 0, "the outage was felt");
    assert_eq!(returned, 0, "ridden out on the lease: {} refusals", store.refused());
    let duplicates = engine.calls() - REQUESTS as u64;
    shutdown.cancel();
    assert_eq!(worker.await.unwrap(), Stopped::Drained);
    report_figure(&format!(
        "R3 store faults (embedded, store refusing for {:.1} s): {REQUESTS} requests, 0 lost, {} store calls \
         refused, {returned} returned to the queue, {duplicates} duplicate engine calls, 0 dead-lettered, {}",
        OUTAGE.as_secs_f64(),
        store.refused(),
        seconds(started)
    ));
}

#[tokio::test]
#[ignore = "needs moto and its server binary: scripts/test.sh"]
async fn r3_s3_stopped_and_restarted_under_a_worker_delays_requests_but_loses_none() {
    const BEFORE: usize = 20;
    const DURING: usize = 100;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let s3_url = format!("http://127.0.0.1:{port}");
    let moto_log = dir.path().join("moto.log");
    let mut own_moto = moto::start_own(port, &moto_log).await;
    let s3 = moto::s3_at(&s3_url).await;
    let name = moto::unique("r3");
    let bucket = moto::versioned_bucket(&s3, &name).await;
    // Five receives of a 3 s visibility: the outage, moto's restart and the bucket's re-creation take a few of them
    // (more on a loaded machine); a message that ran out of receives would be dead-lettered, which is what R3 forbids.
    let (queue_url, dlq_url) = moto::queue_with_dlq(&name, 3, 5).await;
    let engine = EngineProcess::start(&["--latency-ms", "20"]);
    let mut env = harness::worker_env(&queue_url, &dlq_url, &bucket).await;
    env.push(("AWS_ENDPOINT_URL_S3", s3_url.clone()));
    let args = worker_args(&engine.url, "8", "5", "1");
    let mut worker = ChildProcess::gpuinfer(&args, &env, &dir.path().join("worker.log"));
    let batch = |n: usize| -> (HashSet<String>, Vec<String>) {
        (0..n).map(|i| request_body(&format!("s3 outage test {i}"))).map(|(id, body)| (id.to_string(), body)).unzip()
    };
    let stored = |expected: usize| {
        let (s3, bucket) = (s3.clone(), bucket.clone());
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            (moto::keys(&s3, &bucket, "results/").await.len() >= expected).then_some(())
        }
    };

    let (_, bodies) = batch(BEFORE);
    moto::send_all(&queue_url, &bodies).await;
    eventually(Duration::from_secs(30), "results before the outage", || stored(BEFORE)).await;
    emptied(&sqs_queue(&queue_url).await, Duration::from_secs(10)).await;

    // The results written so far go with the stopped server: the requests sent from here on are the ones counted.
    own_moto.kill();
    let (ids, bodies) = batch(DURING);
    moto::send_all(&queue_url, &bodies).await;
    tokio::time::sleep(OUTAGE).await;
    let _own_moto = moto::start_own(port, &moto_log).await;
    moto::versioned_bucket(&s3, &bucket).await;
    eventually(Duration::from_secs(60), "every result after the outage", || stored(DURING)).await;
    emptied(&sqs_queue(&queue_url).await, Duration::from_secs(20)).await;
    let mut documents = Vec::new();
    for key in moto::keys(&s3, &bucket, "results/").await {
        documents.push(moto::object(&s3, &bucket, &key).await);
    }
    assert_all_succeeded(&documents, DURING);
    let stored_ids: HashSet<String> = documents.iter().map(|d| d["requestId"].as_str().unwrap().to_owned()).collect();
    assert_eq!(stored_ids, ids, "exactly the requests sent during the outage");
    let versions = moto::version_counts(&s3, &bucket, "results/").await;
    assert!(versions.values().all(|&n| n == 1), "nothing overwritten: {versions:?}");
    assert_eq!(sqs_counts(&dlq_url).await, QueueCounts::default(), "an outage dead-letters nothing");
    worker.signal("TERM");
    assert!(worker.exited_within(Duration::from_secs(10)).await.success());
    let log = worker.log();
    let refused = log.matches("result store refused the write").count();
    let returned = returned_to_the_queue(&documents);
    assert!(refused > 0, "writes were retried while S3 was down");
    let duplicates = engine.calls().await - (BEFORE + DURING) as u64;
    report_figure(&format!(
        "R3 store faults (S3 on moto, stopped for {:.1} s and restarted): {DURING} requests, 0 lost, 0 overwritten, \
         {refused} refused writes retried, {returned} returned to the queue, {duplicates} duplicate engine calls, \
         0 dead-lettered, {}",
        OUTAGE.as_secs_f64(),
        seconds(started)
    ));
}
