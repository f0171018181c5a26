//! The AWS adapters against a real SQS/S3 server (moto): queue semantics, conditional result writes,
//! and router → SQS → worker → engine → S3 with the real binary on both ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gpuinfer::aws::s3::{S3Location, S3Store};
use gpuinfer::aws::sqs::SqsQueue;
use gpuinfer::metrics::Emf;
use gpuinfer::ports::{PutOutcome, Queue, QueueCounts, ResultStore};
use gpuinfer::routing::Tier;
use gpuinfer::worker::WorkerConfig;
use serde_json::{Value, json};
use support::engine_double::{Behavior, EngineDouble};
use support::process::{ChildProcess, free_port};
use support::{eventually, moto, request_body, result_document, router_listening};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn sqs_queue_keeps_the_semantics_the_worker_relies_on() {
    let (url, dlq_url) = moto::queue_with_dlq(&moto::unique("semantics"), 30, 3).await;
    let queue = SqsQueue::new(moto::sqs().await, url.clone(), Some(dlq_url.clone()));
    queue.send("first").await.unwrap();
    queue.send("second").await.unwrap();
    assert_eq!(queue.counts().await.unwrap(), QueueCounts { visible: 2, in_flight: 0, delayed: 0 });

    let mut got = queue.receive(10, Duration::from_secs(1)).await.unwrap();
    got.sort_by(|a, b| a.body.cmp(&b.body));
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|m| m.receive_count == 1 && m.sent_at_ms > 1_700_000_000_000));
    assert_eq!(queue.counts().await.unwrap(), QueueCounts { visible: 0, in_flight: 2, delayed: 0 });

    queue.change_visibility(&got[0].receipt, Duration::ZERO).await.unwrap();
    let again = queue.receive(1, Duration::from_secs(1)).await.unwrap();
    assert_eq!((again[0].body.as_str(), again[0].receive_count), ("first", 2));
    queue.delete(&again[0].receipt).await.unwrap();

    queue.dead_letter(&got[1], "body: not valid JSON").await.unwrap();
    assert_eq!(queue.counts().await.unwrap(), QueueCounts::default());
    let dead = moto::drain(&dlq_url).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].body.as_deref(), Some("second"));
    let attributes = dead[0].message_attributes.as_ref().unwrap();
    assert_eq!(attributes["ErrorReason"].string_value.as_deref(), Some("body: not valid JSON"));
    assert_eq!(attributes["OriginalQueue"].string_value.as_deref(), Some(url.as_str()));
}

#[tokio::test]
async fn s3_store_writes_once_under_the_prefix_and_reads_back() {
    let bucket = moto::bucket(&moto::unique("results")).await;
    let location = S3Location::parse(&format!("s3://{bucket}/team/a/")).unwrap();
    let store = S3Store::new(moto::s3().await, location);
    let id = uuid::Uuid::new_v4();
    assert!(!store.exists(id).await.unwrap());
    assert_eq!(store.get(id).await.unwrap(), None);
    assert_eq!(store.put_if_absent(id, br#"{"n":1}"#).await.unwrap(), PutOutcome::Created);
    assert_eq!(store.put_if_absent(id, br#"{"n":2}"#).await.unwrap(), PutOutcome::AlreadyExists, "412 means done");
    assert!(store.exists(id).await.unwrap());
    assert_eq!(store.get(id).await.unwrap().unwrap(), br#"{"n":1}"#, "the first writer wins");
    assert_eq!(moto::keys(&moto::s3().await, &bucket, "").await, [format!("team/a/results/{id}.json")]);
}

#[test]
fn s3_destinations_parse_into_bucket_and_prefix() {
    let parse = |url: &str| S3Location::parse(url).map(|l| (l.bucket, l.prefix));
    assert_eq!(parse("s3://b"), Ok(("b".into(), String::new())));
    assert_eq!(parse("s3://b/"), Ok(("b".into(), String::new())));
    assert_eq!(parse("s3://b/p/q"), Ok(("b".into(), "p/q/".into())));
    assert!(parse("s3:///p").is_err());
    assert!(parse("https://b/p").is_err());
}

/// A `gpuinfer` child process with moto's environment and `env`, logging into `logs`; killed when dropped.
fn gpuinfer(args: &[&str], env: &[(&str, String)], logs: &Path) -> ChildProcess {
    let mut all = moto::child_env();
    all.extend(env.iter().cloned());
    ChildProcess::gpuinfer(args, &all, &logs.join(format!("{}.log", args.join("-"))))
}

#[tokio::test]
async fn router_sqs_worker_s3_carry_fifty_requests_end_to_end() {
    let name = moto::unique("flow");
    let (small, dlq) = moto::queue_with_dlq(&format!("{name}-small"), 30, 3).await;
    let (large, _) = moto::queue_with_dlq(&format!("{name}-large"), 30, 3).await;
    let bucket = moto::bucket(&name).await;
    let engine = EngineDouble::start(Behavior::default()).await;
    let logs = tempfile::tempdir().unwrap();
    let port = free_port();
    let destination = format!("s3://{bucket}/out/");
    let _router = gpuinfer(
        &["router", "--listen", &format!("127.0.0.1:{port}"), "--classifier", "none"],
        &[
            ("SMALL_QUEUE_URL", small.clone()),
            ("LARGE_QUEUE_URL", large.clone()),
            ("OUTPUT_DESTINATION", destination.clone()),
        ],
        logs.path(),
    );
    let worker_env = |queue: &str| {
        vec![
            ("REQUEST_QUEUE_URL", queue.to_owned()),
            ("DLQ_URL", dlq.clone()),
            ("OUTPUT_DESTINATION", destination.clone()),
            ("ENGINE_URL", engine.url.clone()),
            ("WAIT_TIME_SECONDS", "1".into()),
        ]
    };
    let _small_worker = gpuinfer(&["worker", "--tier", "small"], &worker_env(&small), logs.path());
    let _large_worker = gpuinfer(&["worker", "--tier", "large"], &worker_env(&large), logs.path());

    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    router_listening(&http, &base).await;
    let mut ids = Vec::new();
    for i in 0..50 {
        let route = if i % 5 == 0 { "large" } else { "small" };
        let answer: Value = http
            .post(format!("{base}/infer"))
            .json(&json!({"prompt": format!("request {i}"), "maxTokens": 8, "route": route}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["tier"], route);
        ids.push(answer["requestId"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let document = result_document(&http, &base, id, Duration::from_secs(60)).await;
        assert_eq!(document["status"], "success", "{document}");
    }
    let keys = moto::keys(&moto::s3().await, &bucket, "out/results/").await;
    assert_eq!(keys.len(), 50);
    let sample = moto::object(&moto::s3().await, &bucket, &keys[0]).await;
    assert!(sample["result"]["text"].as_str().unwrap().starts_with("echo: request"));
    let counts = |url: String| async move { SqsQueue::new(moto::sqs().await, url, None).counts().await.unwrap() };
    eventually(Duration::from_secs(10), "empty queues", || {
        let (small, large) = (small.clone(), large.clone());
        async move {
            (counts(small).await == QueueCounts::default() && counts(large).await == QueueCounts::default())
                .then_some(())
        }
    })
    .await;
    assert!(moto::drain(&dlq).await.is_empty(), "nothing dead-lettered");
}

fn worker_config() -> WorkerConfig {
    WorkerConfig {
        concurrency: 4,
        wait_time: Duration::from_secs(1),
        visibility_timeout: Duration::from_secs(30),
        retry_base: Duration::ZERO,
        health_interval: Duration::from_millis(50),
        ..WorkerConfig::new(Tier::Small)
    }
}

async fn in_process_worker(
    url: &str,
    dlq: &str,
    store: Arc<dyn ResultStore>,
    engine: &EngineDouble,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<gpuinfer::worker::Stopped> {
    let queue: Arc<dyn Queue> = Arc::new(SqsQueue::new(moto::sqs().await, url.to_owned(), Some(dlq.to_owned())));
    let engine_config = gpuinfer::engine::EngineConfig {
        base_url: engine.url.clone(),
        model: None,
        request_timeout: Duration::from_secs(10),
    };
    let worker = gpuinfer::cmd::worker::build(queue, store, &engine_config, worker_config(), Emf::discard()).unwrap();
    tokio::spawn(worker.run(shutdown.clone()))
}

#[tokio::test]
async fn malformed_messages_are_dead_lettered_and_failing_requests_end_in_error_documents() {
    let name = moto::unique("faults");
    let (url, dlq) = moto::queue_with_dlq(&name, 30, 3).await;
    let bucket = moto::bucket(&name).await;
    let store: Arc<dyn ResultStore> =
        Arc::new(S3Store::new(moto::s3().await, S3Location::parse(&format!("s3://{bucket}")).unwrap()));
    let engine = EngineDouble::start(Behavior { fail_rate: 1.0, fail_status: 500, ..Behavior::default() }).await;
    let shutdown = CancellationToken::new();
    let worker = in_process_worker(&url, &dlq, Arc::clone(&store), &engine, &shutdown).await;

    let sqs = moto::sqs().await;
    sqs.send_message().queue_url(&url).message_body("{\"prompt\": 5}").send().await.unwrap();
    let (id, body) = request_body("always failing");
    sqs.send_message().queue_url(&url).message_body(body).send().await.unwrap();

    let document: Value = eventually(Duration::from_secs(30), "an error document", || {
        let store = Arc::clone(&store);
        async move { store.get(id).await.unwrap().map(|b| serde_json::from_slice(&b).unwrap()) }
    })
    .await;
    assert_eq!(document["status"], "error");
    assert_eq!(document["error"]["code"], "attempts_exhausted");
    assert_eq!(document["attempts"], 3);
    assert_eq!(engine.calls(), 3);
    let dead = moto::drain(&dlq).await;
    assert_eq!(dead.len(), 1, "only the malformed message is dead-lettered");
    let reason = dead[0].message_attributes.as_ref().unwrap()["ErrorReason"].string_value.clone().unwrap();
    assert!(reason.starts_with("requestId: required"), "{reason}");
    shutdown.cancel();
    worker.await.unwrap();
}

#[tokio::test]
async fn two_workers_racing_on_one_request_store_exactly_one_result() {
    let name = moto::unique("race");
    let (url, dlq) = moto::queue_with_dlq(&name, 30, 3).await;
    let bucket = moto::bucket(&name).await;
    let store: Arc<dyn ResultStore> =
        Arc::new(S3Store::new(moto::s3().await, S3Location::parse(&format!("s3://{bucket}")).unwrap()));
    let engine = EngineDouble::start(Behavior { latency: Duration::from_millis(1500), ..Behavior::default() }).await;
    let (id, body) = request_body("the same request twice");
    let sqs = moto::sqs().await;
    for _ in 0..2 {
        sqs.send_message().queue_url(&url).message_body(&body).send().await.unwrap();
    }
    let shutdown = CancellationToken::new();
    let first = in_process_worker(&url, &dlq, Arc::clone(&store), &engine, &shutdown).await;
    let second = in_process_worker(&url, &dlq, Arc::clone(&store), &engine, &shutdown).await;
    let queue = SqsQueue::new(sqs.clone(), url.clone(), None);
    eventually(Duration::from_secs(30), "both messages deleted", || {
        let queue = queue.clone();
        async move { (queue.counts().await.unwrap() == QueueCounts::default()).then_some(()) }
    })
    .await;
    assert_eq!(moto::keys(&moto::s3().await, &bucket, "").await, [format!("results/{id}.json")]);
    assert_eq!(engine.calls(), 2, "both ran the request (neither result existed yet), one write won");
    shutdown.cancel();
    first.await.unwrap();
    second.await.unwrap();
}
