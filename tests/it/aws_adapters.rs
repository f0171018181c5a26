//! The AWS adapters against a real SQS/S3 server (moto): queue semantics, conditional result writes,
//! and router → SQS → worker → engine → S3 with the real binary on both ends.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::support::cloudwatch::CloudWatchDouble;
use crate::support::{eventually, free_port, moto, request_body, result_document};
use gpuinfer::{
    GpuUtilization, Lanes, PutOutcome, Queue, QueueCounts, QueueError, ResultStore, S3Location, S3Store,
    SaturationOrGpu, Service, SqsQueue, Tier, WorkerConfig, metrics::Emf, simulator::Behavior,
    simulator::EngineSimulator, simulator::Faults,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
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
#[ignore = "needs moto: scripts/test.sh"]
async fn sqs_deletes_at_once_share_batch_calls_and_each_gets_its_own_outcome() {
    let (url, dlq_url) = moto::queue_with_dlq(&moto::unique("delete-batch"), 30, 3).await;
    let queue = Arc::new(SqsQueue::new(moto::sqs().await, url, Some(dlq_url)));
    let bodies: Vec<String> = (0..25).map(|i| format!("m{i}")).collect();
    assert!(queue.send_many(&bodies).await.iter().all(Result::is_ok));
    let mut receipts = Vec::new();
    while receipts.len() < bodies.len() {
        receipts.extend(queue.receive(10, Duration::from_secs(1)).await.unwrap().into_iter().map(|m| m.receipt));
    }
    receipts.push("not-a-receipt".into());
    let deletes: Vec<_> = receipts
        .into_iter()
        .map(|receipt| {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move { (receipt.clone(), queue.delete(&receipt).await) })
        })
        .collect();
    for delete in deletes {
        let (receipt, outcome) = delete.await.unwrap();
        match receipt.as_str() {
            "not-a-receipt" => assert!(matches!(outcome, Err(QueueError::ReceiptExpired)), "{outcome:?}"),
            _ => assert!(outcome.is_ok(), "{receipt}: {outcome:?}"),
        }
    }
    assert_eq!(queue.counts().await.unwrap(), QueueCounts::default());
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn s3_store_writes_once_under_the_prefix_and_reads_back() {
    let bucket = moto::bucket(&moto::unique("results")).await;
    let location = S3Location::parse(&format!("s3://{bucket}/team/a/")).unwrap();
    let store = S3Store::new(moto::s3().await, location);
    let id = gpuinfer::RequestId::new_v4();
    assert!(!store.exists(id).await.unwrap());
    assert_eq!(store.get(id).await.unwrap(), None);
    assert_eq!(store.put_if_absent(id, br#"{"n":1}"#).await.unwrap(), PutOutcome::Created);
    assert_eq!(store.put_if_absent(id, br#"{"n":2}"#).await.unwrap(), PutOutcome::AlreadyExists, "412 means done");
    assert!(store.exists(id).await.unwrap());
    assert_eq!(store.get(id).await.unwrap().unwrap(), br#"{"n":1}"#, "the first writer wins");
    assert_eq!(
        moto::keys(&moto::s3().await, &bucket, "").await,
        [format!("team/a/{id}.json")],
        "the AWS sample's rule: destination prefix + {{requestId}}.json"
    );
}

/// A long read goes on where it stopped: GetObject with `Range: bytes=N-` (S3 API Reference, GetObject, Range); a
/// start at or past the end (416 InvalidRange) is read as no bytes, a missing key as none.
#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn s3_objects_read_on_from_an_offset() {
    use gpuinfer::{ObjectStore, one_chunk};
    let bucket = moto::bucket(&moto::unique("ranges")).await;
    let store = S3Store::new(moto::s3().await, S3Location::parse(&format!("s3://{bucket}/results/")).unwrap());
    store.put("files/f.jsonl", one_chunk(b"line one\nline two\n".to_vec())).await.unwrap();
    let read = |from: u64| {
        let store = &store;
        async move {
            let (size, chunks) = store.get_from("files/f.jsonl", from).await.unwrap().expect("the object");
            let parts: Vec<_> = futures_util::TryStreamExt::try_collect(chunks).await.unwrap();
            let bytes = parts.concat();
            assert_eq!(size, bytes.len() as u64);
            String::from_utf8(bytes).unwrap()
        }
    };
    assert_eq!(read(0).await, "line one\nline two\n");
    assert_eq!(read(9).await, "line two\n");
    assert_eq!(read(18).await, "", "from the end");
    assert_eq!(read(50).await, "", "past the end");
    assert!(store.get_from("files/none.jsonl", 9).await.unwrap().is_none());
}

/// Real S3 answers 403, not 404, for a key that does not exist when the caller lacks s3:ListBucket (moto
/// answers 404 either way): a store error must then name the permissions, not leave an opaque "service error".
#[tokio::test]
async fn s3_store_names_the_missing_permission_when_s3_answers_403() {
    let forbidding = axum::Router::new().fallback(|| async { (axum::http::StatusCode::FORBIDDEN, "") });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, forbidding).await });
    let store = S3Store::new(moto::s3_at(&endpoint).await, S3Location::parse("s3://results/results/").unwrap());
    let id = gpuinfer::RequestId::new_v4();
    let error = store.exists(id).await.unwrap_err();
    assert!(std::error::Error::source(&error).is_some(), "the SDK's error is kept as the source");
    let read = error.to_string();
    assert!(read.contains(&format!("HeadObject s3://results/results/{id}.json: 403 Forbidden")), "{read}");
    assert!(read.contains("s3:GetObject") && read.contains("s3:ListBucket"), "{read}");
    let write = store.put_if_absent(id, b"{}").await.unwrap_err().to_string();
    assert!(write.contains("s3:PutObject") && !write.contains("ListBucket"), "{write}");
}

#[test]
fn s3_destinations_parse_into_bucket_and_prefix() {
    let parse = |url: &str| S3Location::parse(url).map(|l| (l.bucket, l.prefix));
    assert_eq!(parse("s3://b"), Ok(("b".into(), String::new())));
    assert_eq!(parse("s3://b/"), Ok(("b".into(), String::new())));
    assert_eq!(parse("s3://b/p/q"), Ok(("b".into(), "p/q/".into())));
    assert!(parse("s3:///p").is_err());
    assert!(parse("https://b/p").is_err());
    let sent = "550E8400-E29B-41D4-A716-44665544ABCD";
    let key = S3Location::parse("s3://b/results/").unwrap().key(gpuinfer::RequestId::parse(sent).unwrap());
    assert_eq!(key, format!("results/{sent}.json"), "the sample's key: prefix + the requestId as sent");
}

/// A `gpuinfer` child process with moto's environment; killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn gpuinfer(args: &[&str], env: &[(&str, String)]) -> Process {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpuinfer"));
    command.args(args).envs(moto::child_env()).stdout(Stdio::null()).stderr(Stdio::inherit());
    for (name, value) in env {
        command.env(name, value);
    }
    Process(command.spawn().expect("start gpuinfer"))
}

/// The AWS sample's setup: one queue per tier (named as the sample names them) and a shared DLQ, no high lanes, a
/// bucket; the router on it, one small-tier worker on the engine simulator (echo).
pub(crate) struct OneQueuePerTier {
    http: reqwest::Client,
    pub(crate) base: String,
    bucket: String,
    _router: Process,
    _worker: Process,
    _engine: EngineSimulator,
}

impl OneQueuePerTier {
    async fn start(label: &str) -> Self {
        Self::start_with(label, &[]).await
    }

    /// The same, router and worker both with the settings `env` too.
    pub(crate) async fn start_with(label: &str, env: &[(&str, String)]) -> Self {
        let name = moto::unique(label);
        let (small, dlq) = moto::queue_with_dlq(&format!("{name}-request-queue"), 30, 3).await;
        let (large, _) = moto::queue_with_dlq(&format!("{name}-large-request-queue"), 30, 3).await;
        let bucket = moto::bucket(&name).await;
        let destination = format!("s3://{bucket}/results/");
        let engine = EngineSimulator::start(Behavior::default()).await;
        let port = free_port();
        let router = gpuinfer(
            &["router", "--listen", &format!("127.0.0.1:{port}"), "--classifier", "none"],
            &[
                &[
                    ("SMALL_QUEUE_URL", small.clone()),
                    ("LARGE_QUEUE_URL", large),
                    ("OUTPUT_DESTINATION", destination.clone()),
                ],
                env,
            ]
            .concat(),
        );
        let worker = gpuinfer(
            &["worker", "--tier", "small"],
            &[
                &[
                    ("REQUEST_QUEUE_URL", small),
                    ("DLQ_URL", dlq),
                    ("OUTPUT_DESTINATION", destination),
                    ("ENGINE_URL", engine.url.clone()),
                    ("WAIT_TIME_SECONDS", "1".into()),
                ],
                env,
            ]
            .concat(),
        );
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        crate::support::router_listening(&http, &base).await;
        OneQueuePerTier { http, base, bucket, _router: router, _worker: worker, _engine: engine }
    }
}

/// OpenAI's background Responses on the standalone router over SQS + S3 (as on AWS): the response's record goes
/// to S3 beside the results, its request through the small tier's queue to a worker; retrieve polls it to
/// `completed` with the engine's text, and `GET /results/{requestId}` serves the same request's document.
#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn a_background_response_runs_through_the_standalone_router_on_sqs_and_s3() {
    let stack = OneQueuePerTier::start("responses").await;
    let (http, base) = (&stack.http, &stack.base);
    let create = json!({"model": "small", "input": "Say hello.", "background": true, "max_output_tokens": 16});
    let created: Value =
        http.post(format!("{base}/v1/responses")).json(&create).send().await.unwrap().json().await.unwrap();
    assert_eq!(created["status"], "queued", "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let done = eventually(Duration::from_secs(30), "the response completed", || {
        let request = http.get(format!("{base}/v1/responses/{id}")).send();
        async move {
            let response: Value = request.await.ok()?.json().await.ok()?;
            (response["status"] == "completed").then_some(response)
        }
    })
    .await;
    let text = done["output"][0]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("echo: "), "{done}");
    let uuid = uuid::Uuid::parse_str(id.strip_prefix("resp_").unwrap()).unwrap();
    let document = result_document(http, base, &uuid.hyphenated().to_string(), Duration::from_secs(5)).await;
    assert_eq!(document["status"], "success", "{document}");
}

/// The AWS sample's setup: one queue per tier and a shared DLQ, no high lanes. Router and worker run on it as they
/// are; a high-priority request then shares its tier's queue.
#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn the_samples_one_queue_per_tier_runs_without_high_lanes() {
    let stack = OneQueuePerTier::start("sample").await;
    let (http, base, bucket) = (&stack.http, &stack.base, &stack.bucket);
    for priority in ["normal", "high"] {
        let request = json!({"prompt": format!("{priority} lane"), "maxTokens": 8, "priority": priority});
        let response = http.post(format!("{base}/infer")).json(&request).send().await.unwrap();
        assert_eq!(response.status(), 202, "{priority}");
        let answer: Value = response.json().await.unwrap();
        let document =
            result_document(http, base, answer["requestId"].as_str().unwrap(), Duration::from_secs(30)).await;
        assert_eq!(document["result"]["text"], format!("echo: {priority} lane"), "{document}");
    }
    let keys = moto::keys(&moto::s3().await, bucket, "results/").await;
    assert_eq!(keys.iter().filter(|key| key.ends_with(".json")).count(), 2, "{keys:?}");
    // The router made both ids: it keeps no acceptance record for them (one S3 PUT per request, the result's).
    assert_eq!(keys.iter().filter(|key| key.ends_with(".accepted")).count(), 0, "{keys:?}");
}

/// Fifty requests, half of them sent one by one and half in one POST /infer/batch, one in three on the high
/// lane: router → SQS (the high and normal lanes of both tiers) → worker processes → S3.
#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn router_sqs_worker_s3_carry_fifty_requests_end_to_end() {
    let name = moto::unique("flow");
    let (small, dlq) = moto::lanes_with_dlq(&format!("{name}-small"), 30, 3).await;
    let (large, _) = moto::lanes_with_dlq(&format!("{name}-large"), 30, 3).await;
    let bucket = moto::bucket(&name).await;
    let engine = EngineSimulator::start(Behavior::default()).await;
    let port = free_port();
    let destination = format!("s3://{bucket}/out/");
    let _router = gpuinfer(
        &["router", "--listen", &format!("127.0.0.1:{port}"), "--classifier", "none"],
        &[
            ("SMALL_QUEUE_URL", small.normal.clone()),
            ("SMALL_HIGH_QUEUE_URL", small.high.clone()),
            ("LARGE_QUEUE_URL", large.normal.clone()),
            ("LARGE_HIGH_QUEUE_URL", large.high.clone()),
            ("OUTPUT_DESTINATION", destination.clone()),
        ],
    );
    let worker_env = |lanes: &Lanes<String>| {
        vec![
            ("REQUEST_QUEUE_URL", lanes.normal.clone()),
            ("HIGH_QUEUE_URL", lanes.high.clone()),
            ("DLQ_URL", dlq.clone()),
            ("OUTPUT_DESTINATION", destination.clone()),
            ("ENGINE_URL", engine.url.clone()),
            ("WAIT_TIME_SECONDS", "1".into()),
        ]
    };
    let _small_worker = gpuinfer(&["worker", "--tier", "small"], &worker_env(&small));
    let _large_worker = gpuinfer(&["worker", "--tier", "large"], &worker_env(&large));

    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    eventually(Duration::from_secs(20), "the router to listen", || {
        let request = http.get(format!("{base}/healthz")).send();
        async move { request.await.ok().map(|_| ()) }
    })
    .await;
    let request = |i: usize| {
        let route = if i.is_multiple_of(5) { "large" } else { "small" };
        let priority = if i.is_multiple_of(3) { "high" } else { "normal" };
        json!({"prompt": format!("request {i}"), "maxTokens": 8, "route": route, "priority": priority})
    };
    let mut ids = Vec::new();
    for i in 0..25 {
        let answer: Value =
            http.post(format!("{base}/infer")).json(&request(i)).send().await.unwrap().json().await.unwrap();
        assert_eq!(answer["tier"], request(i)["route"]);
        ids.push(answer["requestId"].as_str().unwrap().to_owned());
    }
    let batch: Vec<Value> = (25..50).map(request).collect();
    let response = http.post(format!("{base}/infer/batch")).json(&batch).send().await.unwrap();
    assert_eq!(response.status(), 202);
    let answer: Value = response.json().await.unwrap();
    for (entry, sent) in answer["results"].as_array().unwrap().iter().zip(&batch) {
        assert_eq!((entry["status"].as_u64(), &entry["tier"]), (Some(202), &sent["route"]), "{entry}");
        ids.push(entry["requestId"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        let document = result_document(&http, &base, id, Duration::from_secs(60)).await;
        assert_eq!(document["status"], "success", "{document}");
    }
    let keys: Vec<String> =
        moto::keys(&moto::s3().await, &bucket, "out/").await.into_iter().filter(|key| key.ends_with(".json")).collect();
    assert_eq!(keys.len(), 50);
    let sample = moto::object(&moto::s3().await, &bucket, &keys[0]).await;
    assert!(sample["result"]["text"].as_str().unwrap().starts_with("echo: request"));
    let urls = [small.high, small.normal, large.high, large.normal];
    eventually(Duration::from_secs(10), "empty queues", || {
        let urls = urls.clone();
        async move {
            for url in urls {
                if SqsQueue::new(moto::sqs().await, url, None).counts().await.unwrap() != QueueCounts::default() {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;
    assert!(moto::drain(&dlq).await.is_empty(), "nothing dead-lettered");
}

async fn in_process_worker(
    lanes: &Lanes<String>,
    dlq: &str,
    store: Arc<dyn ResultStore>,
    engine: &EngineSimulator,
    config: WorkerConfig,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<gpuinfer::Stopped> {
    let sqs = moto::sqs().await;
    let lanes =
        lanes.clone().map(|url| Arc::new(SqsQueue::new(sqs.clone(), url, Some(dlq.to_owned()))) as Arc<dyn Queue>);
    let engine_config =
        gpuinfer::EngineConfig { base_url: engine.url.clone(), model: None, request_timeout: Duration::from_secs(10) };
    let worker = gpuinfer::build_worker(lanes, store, &engine_config, config, Emf::discard()).unwrap();
    tokio::spawn(worker.run(shutdown.clone()))
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn malformed_messages_are_dead_lettered_and_failing_requests_end_in_error_documents() {
    let name = moto::unique("faults");
    let (lanes, dlq) = moto::lanes_with_dlq(&name, 30, 3).await;
    let url = &lanes.normal;
    let bucket = moto::bucket(&name).await;
    let store: Arc<dyn ResultStore> =
        Arc::new(S3Store::new(moto::s3().await, S3Location::parse(&format!("s3://{bucket}/results/")).unwrap()));
    let engine = EngineSimulator::start(Behavior {
        faults: Faults { fail_rate: 1.0, fail_status: 500, ..Faults::default() },
        ..Behavior::default()
    })
    .await;
    let shutdown = CancellationToken::new();
    let worker = in_process_worker(&lanes, &dlq, Arc::clone(&store), &engine, moto::worker_config(), &shutdown).await;

    let sqs = moto::sqs().await;
    sqs.send_message().queue_url(url).message_body("{\"prompt\": 5}").send().await.unwrap();
    let (id, body) = request_body("always failing");
    sqs.send_message().queue_url(url).message_body(body).send().await.unwrap();

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
#[ignore = "needs moto: scripts/test.sh"]
async fn two_workers_racing_on_one_request_store_exactly_one_result() {
    let name = moto::unique("race");
    let (lanes, dlq) = moto::lanes_with_dlq(&name, 30, 3).await;
    let url = lanes.high.clone();
    let bucket = moto::bucket(&name).await;
    let store: Arc<dyn ResultStore> =
        Arc::new(S3Store::new(moto::s3().await, S3Location::parse(&format!("s3://{bucket}/results/")).unwrap()));
    let engine = EngineSimulator::start(Behavior { latency: Duration::from_millis(1500), ..Behavior::default() }).await;
    let (id, body) = request_body("the same request twice");
    let sqs = moto::sqs().await;
    for _ in 0..2 {
        sqs.send_message().queue_url(&url).message_body(&body).send().await.unwrap();
    }
    let shutdown = CancellationToken::new();
    let first = in_process_worker(&lanes, &dlq, Arc::clone(&store), &engine, moto::worker_config(), &shutdown).await;
    let second = in_process_worker(&lanes, &dlq, Arc::clone(&store), &engine, moto::worker_config(), &shutdown).await;
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

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn send_many_goes_out_ten_at_a_time_and_answers_for_each_body() {
    let (url, _) = moto::queue_with_dlq(&moto::unique("batch"), 30, 3).await;
    let queue = SqsQueue::new(moto::sqs().await, url.clone(), None);
    let mut bodies: Vec<String> = (0..23).map(|i| format!("body {i:02}")).collect();
    let outcomes = queue.send_many(&bodies).await;
    assert_eq!(outcomes.len(), 23);
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    let mut received: Vec<String> = moto::drain(&url).await.into_iter().filter_map(|m| m.body).collect();
    received.sort();
    bodies.sort();
    assert_eq!(received, bodies);

    let too_big = "x".repeat(1024 * 1024 + 1);
    let outcomes = queue.send_many(&["before".into(), too_big, "after".into()]).await;
    assert!(
        outcomes[0].is_ok() && outcomes[1].is_err() && outcomes[2].is_ok(),
        "only the oversized one fails: {outcomes:?}"
    );
    assert_eq!(moto::drain(&url).await.len(), 2);
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn on_sqs_one_slot_fills_from_the_high_lane_first_and_normal_gets_every_fifth() {
    let name = moto::unique("lanes");
    let (lanes, dlq) = moto::lanes_with_dlq(&name, 30, 3).await;
    let sqs = moto::sqs().await;
    for (lane, url, count) in [("high", &lanes.high, 6), ("normal", &lanes.normal, 4)] {
        let bodies: Vec<String> = (0..count)
            .map(|i| {
                json!({"requestId": gpuinfer::RequestId::new_v4(), "prompt": format!("{lane} {i}"), "maxTokens": 4})
                    .to_string()
            })
            .collect();
        let sent = SqsQueue::new(sqs.clone(), url.clone(), None).send_many(&bodies).await;
        assert!(sent.iter().all(Result::is_ok));
    }
    let bucket = moto::bucket(&name).await;
    let store: Arc<dyn ResultStore> =
        Arc::new(S3Store::new(moto::s3().await, S3Location::parse(&format!("s3://{bucket}/results/")).unwrap()));
    let engine = EngineSimulator::start(Behavior { latency: Duration::from_millis(20), ..Behavior::default() }).await;
    let shutdown = CancellationToken::new();
    let config = WorkerConfig { concurrency: 1, ..moto::worker_config() };
    let worker = in_process_worker(&lanes, &dlq, store, &engine, config, &shutdown).await;
    eventually(Duration::from_secs(30), "ten results", || async {
        (moto::keys(&moto::s3().await, &bucket, "results/").await.len() == 10).then_some(())
    })
    .await;
    let order: String = engine.prompts().iter().map(|p| if p.starts_with("high") { 'H' } else { 'N' }).collect();
    // One slot, so the engine sees the lanes' turns in order: the high lane first, and one slot in five (the lanes'
    // NORMAL_SHARE) for the normal lane while both have work. On SQS the worker holds one message beyond its free
    // slot, received in the round before, so the normal lane's turn may come one start later (HHHHN or HHHHHN),
    // depending on whether that receive answered before the slot freed.
    assert_eq!((order.matches('H').count(), order.matches('N').count()), (6, 4), "{order}");
    assert!(order.starts_with("HHHHN") || order.starts_with("HHHHHN"), "the normal lane's first turn: {order}");
    assert!(order.ends_with("NNN"), "the normal lane alone once the high lane is empty: {order}");
    assert_eq!(engine.max_in_flight(), 1);
    shutdown.cancel();
    worker.await.unwrap();
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn ecs_task_counts_come_from_describe_services() {
    use gpuinfer::{EcsServices, Service, ServiceTasks};
    let ecs = aws_sdk_ecs::Client::new(&moto::sdk().await);
    let cluster = moto::unique("cluster");
    ecs.create_cluster().cluster_name(&cluster).send().await.unwrap();
    let container =
        aws_sdk_ecs::types::ContainerDefinition::builder().name("inference").image("gpuinfer:v1").memory(512).build();
    let family = moto::unique("family");
    ecs.register_task_definition().family(&family).container_definitions(container).send().await.unwrap();
    ecs.create_service()
        .cluster(&cluster)
        .service_name("small")
        .task_definition(&family)
        .desired_count(2)
        .send()
        .await
        .unwrap();

    let services = EcsServices::new(ecs);
    let counts = services.task_counts(&Service { cluster: cluster.clone(), name: "small".into() }).await.unwrap();
    assert_eq!(counts.desired, 2);
    assert!(counts.running <= 2);
    let missing = services.task_counts(&Service { cluster, name: "absent".into() }).await.unwrap_err();
    assert!(missing.to_string().contains("service absent not found"), "{missing}");
}

#[test]
fn the_newest_cloudwatch_datapoint_is_the_reading() {
    use aws_sdk_cloudwatch::primitives::DateTime;
    use gpuinfer::newest_datapoint;
    let at = |secs| DateTime::from_secs(secs);
    assert_eq!(newest_datapoint(&[at(120), at(180), at(60)], &[40.0, 75.5, 10.0]), Some(75.5));
    assert_eq!(newest_datapoint(&[], &[]), None);
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn on_sqs_a_worker_holds_a_receive_of_messages_ahead_of_its_engine_slots_and_never_overfills_the_engine() {
    let name = moto::unique("ahead");
    let (lanes, dlq) = moto::lanes_with_dlq(&name, 30, 3).await;
    let bucket = moto::bucket(&name).await;
    let store: Arc<dyn ResultStore> =
        Arc::new(S3Store::new(moto::s3().await, S3Location::parse(&format!("s3://{bucket}/results/")).unwrap()));
    let engine =
        EngineSimulator::start(Behavior { slots: 8, latency: Duration::from_secs(2), ..Behavior::default() }).await;
    let bodies: Vec<String> = (0..30).map(|n| request_body(&format!("ahead {n}")).1).collect();
    moto::send_all(&lanes.normal, &bodies).await;
    let shutdown = CancellationToken::new();
    let config = WorkerConfig { concurrency: 8, ..moto::worker_config() };
    let worker = in_process_worker(&lanes, &dlq, Arc::clone(&store), &engine, config, &shutdown).await;

    // A limit of 8 on SQS holds 8 messages ahead (its limit, at most one receive's 10): 16 invisible while 8 run in
    // the engine, so when the 8 end together (as requests of like length started together do), all 8 slots are
    // refilled without waiting for a receive.
    eventually(Duration::from_secs(10), "8 requests in the engine", || {
        std::future::ready((engine.calls() >= 8).then_some(()))
    })
    .await;
    let normal = SqsQueue::new(moto::sqs().await, lanes.normal.clone(), None);
    let held = eventually(Duration::from_secs(5), "8 messages held ahead", || {
        let normal = &normal;
        async move { Some(normal.counts().await.unwrap().in_flight).filter(|&held| held == 16) }
    })
    .await;
    assert_eq!(held, 16);
    assert_eq!(engine.calls(), 8, "the messages held ahead wait for a slot, not in the engine");
    shutdown.cancel();
    worker.await.unwrap();
    assert_eq!(engine.max_in_flight(), 8, "never more requests in the engine than the limit");
}

/// CloudWatch tells metrics apart by namespace, name and their full set of dimensions: the scaler asks for the
/// workers' `EngineSaturation` by exactly the dimensions their EMF lines declare (ClusterName, ServiceName; the
/// line's shape is checked in `saturation_report`'s unit test), and for Container Insights GPU by its own. moto does
/// not serve CloudWatch in the protocol the SDK speaks (Smithy RPC v2 CBOR), so a double answers GetMetricData.
#[tokio::test]
async fn the_scalers_gpu_term_is_the_workers_saturation_else_container_insights_gpu() {
    let cloudwatch = CloudWatchDouble::start().await;
    let service = Service::of_tier("prod", "stack-{tier}", Tier::Small);
    let dimensions = [("ClusterName", "prod"), ("ServiceName", "stack-small")];
    let term = SaturationOrGpu::new(cloudwatch.client().await);
    assert_eq!(term.compute_utilization(&service).await.unwrap(), None, "no datapoint yet");

    cloudwatch.put("ECS/ContainerInsights", "TaskGPUUtilization", &dimensions, 40.0);
    assert_eq!(term.compute_utilization(&service).await.unwrap(), Some(40.0), "workers without saturation: GPU");

    let (namespace, saturation) = (gpuinfer::metrics::NAMESPACE, gpuinfer::metrics::ENGINE_SATURATION);
    cloudwatch.put(namespace, saturation, &[("ServiceName", "stack-small")], 10.0);
    assert_eq!(term.compute_utilization(&service).await.unwrap(), Some(40.0), "another dimension set, another metric");
    cloudwatch.put(namespace, saturation, &dimensions, 87.5);
    assert_eq!(term.compute_utilization(&service).await.unwrap(), Some(87.5), "the workers' saturation first");
    let other = Service::of_tier("prod", "stack-{tier}", Tier::Large);
    assert_eq!(term.compute_utilization(&other).await.unwrap(), None, "another service's metrics are its own");
}
