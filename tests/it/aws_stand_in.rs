//! The AWS stand-in (src/bin/aws-stand-in.rs) answers as moto does: one worker scenario (requests through SQS to
//! the worker, results to S3, a malformed request dead-lettered) ends the same on both, and the SQS and S3 rules the
//! worker relies on hold on the stand-in as AWS documents them. Also its CPU per call, which it reports itself.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageSystemAttributeName, QueueAttributeName, SendMessageBatchRequestEntry,
};
use gpuinfer::{
    Lanes, PutOutcome, Queue, QueueCounts, QueueError, ResultStore, S3Location, S3Store, SqsQueue, metrics::Emf,
    simulator::Behavior, simulator::EngineSimulator,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::support::{eventually, moto, request_body};

/// The malformed request of the scenario: no requestId, a prompt that is not a string.
const MALFORMED: &str = r#"{"prompt": 5}"#;

/// The stand-in as a child process on a free loopback port; killed when dropped.
struct StandIn {
    child: Child,
    url: String,
}

impl StandIn {
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_aws-stand-in"))
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the aws-stand-in process");
        let mut url = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut url).expect("its URL");
        StandIn { child, url: url.trim().to_owned() }
    }

    /// Calls answered and CPU seconds spent so far (`GET /stand-in/stats`).
    async fn stats(&self) -> (u64, f64) {
        let stats: Value = reqwest::get(format!("{}/stand-in/stats", self.url)).await.unwrap().json().await.unwrap();
        (stats["calls"].as_u64().unwrap(), stats["cpu_seconds"].as_f64().unwrap())
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SDK clients on one SQS/S3 endpoint (the stand-in or moto).
struct Backend {
    sqs: aws_sdk_sqs::Client,
    s3: aws_sdk_s3::Client,
}

impl Backend {
    async fn at(endpoint: &str) -> Self {
        Backend { sqs: aws_sdk_sqs::Client::new(&moto::sdk_at(endpoint).await), s3: moto::s3_at(endpoint).await }
    }

    /// A queue with these attributes; its URL.
    async fn queue(&self, name: &str, attributes: &[(QueueAttributeName, String)]) -> String {
        let mut create = self.sqs.create_queue().queue_name(name);
        for (attribute, value) in attributes {
            create = create.attributes(attribute.clone(), value);
        }
        create.send().await.expect("create queue").queue_url.expect("queue url")
    }

    /// A tier's three lanes redriving to one dead-letter queue after 3 receives, 30 s visibility, as tests/support's
    /// moto helper makes them; their URLs and the dead-letter queue's.
    async fn lanes_with_dlq(&self, name: &str) -> (Lanes<String>, String) {
        let dlq = self.queue(&format!("{name}-dlq"), &[]).await;
        let arn = self.sqs.get_queue_attributes().queue_url(&dlq).attribute_names(QueueAttributeName::QueueArn);
        let mut attributes = arn.send().await.expect("dlq arn").attributes.expect("attributes");
        let arn = attributes.remove(&QueueAttributeName::QueueArn).expect("QueueArn");
        let redrive = serde_json::json!({ "deadLetterTargetArn": arn, "maxReceiveCount": 3 }).to_string();
        let settings =
            [(QueueAttributeName::VisibilityTimeout, "30".into()), (QueueAttributeName::RedrivePolicy, redrive)];
        let lane = |suffix: &str| format!("{name}{suffix}");
        let lanes = Lanes {
            high: self.queue(&lane("-high"), &settings).await,
            normal: self.queue(&lane(""), &settings).await,
            batch: self.queue(&lane("-batch"), &settings).await,
        };
        (lanes, dlq)
    }
}

/// What a backend ended the worker scenario with.
#[derive(Debug, PartialEq)]
struct Ending {
    /// Each result document under `results/`, by key: its status.
    results: BTreeMap<String, String>,
    /// The high, normal and batch lanes' counts.
    lanes: [QueueCounts; 3],
    /// The dead-letter queue's messages: body and ErrorReason.
    dead: Vec<(String, String)>,
    engine_calls: u64,
}

/// The scenario: `bodies` sent to the normal lane in batches, an in-process worker on the three lanes and the
/// engine simulator, run until every valid request has its result and the malformed one is dead-lettered.
async fn worker_scenario(endpoint: &str, bodies: &[String]) -> Ending {
    let backend = Backend::at(endpoint).await;
    let name = moto::unique("stand-in");
    let (lanes, dlq) = backend.lanes_with_dlq(&name).await;
    backend.s3.create_bucket().bucket(&name).send().await.expect("create bucket");
    let location = S3Location::parse(&format!("s3://{name}/results/")).unwrap();
    let store: Arc<dyn ResultStore> = Arc::new(S3Store::new(backend.s3.clone(), location));
    let normal = SqsQueue::new(backend.sqs.clone(), lanes.normal.clone(), Some(dlq.clone()));
    assert!(normal.send_many(bodies).await.iter().all(Result::is_ok), "every request queued");

    let engine = EngineSimulator::start(Behavior::default()).await;
    let engine_config =
        gpuinfer::EngineConfig { base_url: engine.url.clone(), model: None, request_timeout: Duration::from_secs(10) };
    let queues =
        lanes.clone().map(|url| Arc::new(SqsQueue::new(backend.sqs.clone(), url, Some(dlq.clone()))) as Arc<dyn Queue>);
    let config = moto::worker_config();
    let worker = gpuinfer::build_worker(queues, Arc::clone(&store), &engine_config, config, Emf::discard());
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(worker.unwrap().run(shutdown.clone()));

    let dead_letters = SqsQueue::new(backend.sqs.clone(), dlq.clone(), None);
    let answered = bodies.len() - 1;
    eventually(Duration::from_secs(60), "every request answered, the malformed one dead-lettered", || async {
        let stored = moto::keys(&backend.s3, &name, "results/").await.len();
        let dead = dead_letters.counts().await.unwrap().visible;
        let left = normal.counts().await.unwrap();
        (stored == answered && dead == 1 && left == QueueCounts::default()).then_some(())
    })
    .await;
    shutdown.cancel();
    worker.await.unwrap();

    let mut results = BTreeMap::new();
    for key in moto::keys(&backend.s3, &name, "results/").await {
        let document = moto::object(&backend.s3, &name, &key).await;
        results.insert(key, document["status"].as_str().unwrap_or_default().to_owned());
    }
    let mut counts = Vec::new();
    for url in [&lanes.high, &lanes.normal, &lanes.batch] {
        counts.push(SqsQueue::new(backend.sqs.clone(), url.clone(), None).counts().await.unwrap());
    }
    let received =
        backend.sqs.receive_message().queue_url(&dlq).max_number_of_messages(10).message_attribute_names("All");
    let dead = received.send().await.unwrap().messages.unwrap_or_default();
    let dead = dead.into_iter().map(|message| {
        let reason = message.message_attributes.as_ref().and_then(|a| a["ErrorReason"].string_value.clone());
        (message.body.unwrap_or_default(), reason.unwrap_or_default())
    });
    Ending { results, lanes: counts.try_into().unwrap(), dead: dead.collect(), engine_calls: engine.calls() }
}

/// Eleven valid requests and the malformed one, between them.
fn scenario_bodies() -> Vec<String> {
    let mut bodies: Vec<String> = (0..11).map(|n| request_body(&format!("stand-in {n}")).1).collect();
    bodies.insert(5, MALFORMED.to_owned());
    bodies
}

/// What every backend must end the scenario with: a success document for each valid request, the lanes empty,
/// only the malformed request dead-lettered (why: it has no requestId), and each valid request run once.
fn assert_expected(ending: &Ending, bodies: &[String]) {
    let ids: Vec<String> = bodies
        .iter()
        .filter_map(|b| serde_json::from_str::<Value>(b).ok()?["requestId"].as_str().map(str::to_owned))
        .collect();
    let keys: Vec<String> = ids.iter().map(|id| format!("results/{id}.json")).collect();
    assert_eq!(ending.results.keys().cloned().collect::<std::collections::BTreeSet<_>>(), keys.into_iter().collect());
    assert!(ending.results.values().all(|status| status == "success"), "{:?}", ending.results);
    assert_eq!(ending.lanes, [QueueCounts::default(); 3], "nothing left visible or in flight");
    assert_eq!(ending.dead.len(), 1, "{:?}", ending.dead);
    assert_eq!(ending.dead[0].0, MALFORMED);
    assert!(ending.dead[0].1.starts_with("requestId: required"), "{:?}", ending.dead);
    assert_eq!(ending.engine_calls, ids.len() as u64);
}

/// The scenario on the stand-in alone; its stats count the calls it answered (what the benchmarks divide its CPU by).
#[tokio::test]
async fn a_worker_scenario_on_the_stand_in_ends_as_expected() {
    let stand_in = StandIn::start();
    let bodies = scenario_bodies();
    assert_expected(&worker_scenario(&stand_in.url, &bodies).await, &bodies);
    let (calls, cpu_seconds) = stand_in.stats().await;
    assert!(calls > bodies.len() as u64, "each result stored and each receive counted: {calls}");
    assert!(cpu_seconds >= 0.0, "its own CPU time: {cpu_seconds}");
}

#[tokio::test]
#[ignore = "needs moto: scripts/test.sh"]
async fn the_worker_scenario_ends_on_the_stand_in_as_on_moto() {
    let stand_in = StandIn::start();
    let bodies = scenario_bodies();
    let on_moto = worker_scenario(&moto::url(), &bodies).await;
    let on_stand_in = worker_scenario(&stand_in.url, &bodies).await;
    assert_expected(&on_moto, &bodies);
    assert_eq!(on_stand_in, on_moto, "the stand-in (left) ends the scenario as moto (right) does");
}

#[tokio::test]
async fn a_conditional_put_of_a_key_that_exists_is_412_and_reads_list_and_ranges_answer_as_s3() {
    let stand_in = StandIn::start();
    let s3 = moto::s3_at(&stand_in.url).await;
    s3.create_bucket().bucket("results").send().await.unwrap();
    let put = || s3.put_object().bucket("results").key("a/b c.json").if_none_match("*").body(b"first".to_vec().into());
    put().send().await.unwrap();
    let refused = put().send().await.unwrap_err();
    assert_eq!(refused.raw_response().map(|r| r.status().as_u16()), Some(412));
    assert_eq!(aws_sdk_s3::error::ProvideErrorMetadata::code(&refused), Some("PreconditionFailed"));

    let store = S3Store::new(s3.clone(), S3Location::parse("s3://results/team/").unwrap());
    let id = gpuinfer::RequestId::new_v4();
    assert!(!store.exists(id).await.unwrap(), "HeadObject of a missing key: 404, NotFound");
    assert_eq!(store.get(id).await.unwrap(), None, "GetObject of a missing key: NoSuchKey");
    assert_eq!(store.put_if_absent(id, b"{}").await.unwrap(), PutOutcome::Created);
    assert_eq!(store.put_if_absent(id, b"{ }").await.unwrap(), PutOutcome::AlreadyExists);
    assert_eq!(store.get(id).await.unwrap().unwrap(), b"{}");

    let ranged = s3.get_object().bucket("results").key("a/b c.json").range("bytes=1-3").send().await.unwrap();
    assert_eq!(ranged.content_range(), Some("bytes 1-3/5"));
    assert_eq!(ranged.body.collect().await.unwrap().into_bytes().as_ref(), b"irs");
    for n in 0..5 {
        s3.put_object().bucket("results").key(format!("page/{n}")).body(vec![b'x'; n].into()).send().await.unwrap();
    }
    let mut pages = s3.list_objects_v2().bucket("results").prefix("page/").max_keys(2).into_paginator().send();
    let (mut keys, mut calls) = (Vec::new(), 0);
    while let Some(page) = pages.next().await {
        calls += 1;
        keys.extend(page.unwrap().contents().iter().map(|o| (o.key().unwrap().to_owned(), o.size().unwrap())));
    }
    assert_eq!(calls, 3, "two keys a page, continued by the token");
    assert_eq!(keys, (0..5).map(|n| (format!("page/{n}"), n as i64)).collect::<Vec<_>>());
    let missing = s3.list_objects_v2().bucket("no-such-bucket").send().await.unwrap_err();
    assert_eq!(aws_sdk_s3::error::ProvideErrorMetadata::code(&missing), Some("NoSuchBucket"));
}

#[tokio::test]
async fn a_multipart_upload_completes_from_its_parts_in_order_and_small_parts_are_refused() {
    use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
    let stand_in = StandIn::start();
    let s3 = moto::s3_at(&stand_in.url).await;
    s3.create_bucket().bucket("models").send().await.unwrap();
    let upload = |key: &'static str| {
        let s3 = s3.clone();
        async move {
            let created = s3.create_multipart_upload().bucket("models").key(key).send().await.unwrap();
            created.upload_id.unwrap()
        }
    };
    let part = |key: &'static str, id: String, number: i32, bytes: Vec<u8>| {
        let sent = s3.upload_part().bucket("models").key(key).upload_id(id).part_number(number).body(bytes.into());
        async move { CompletedPart::builder().part_number(number).set_e_tag(sent.send().await.unwrap().e_tag).build() }
    };
    let complete = |key: &'static str, id: String, parts: Vec<CompletedPart>| {
        let parts = CompletedMultipartUpload::builder().set_parts(Some(parts)).build();
        s3.complete_multipart_upload().bucket("models").key(key).upload_id(id).multipart_upload(parts).send()
    };

    let id = upload("big.bin").await;
    let first = part("big.bin", id.clone(), 1, vec![1; 5 * 1024 * 1024]).await;
    let second = part("big.bin", id.clone(), 2, vec![2; 3]).await;
    let done = complete("big.bin", id.clone(), vec![first, second]).await.unwrap();
    assert!(done.e_tag().unwrap().ends_with("-2\""), "{:?}", done.e_tag());
    let object = s3.get_object().bucket("models").key("big.bin").send().await.unwrap();
    let bytes = object.body.collect().await.unwrap().into_bytes();
    assert_eq!((bytes.len(), bytes[0], bytes[bytes.len() - 1]), (5 * 1024 * 1024 + 3, 1, 2));
    let gone = complete("big.bin", id, Vec::new()).await.unwrap_err();
    assert_eq!(aws_sdk_s3::error::ProvideErrorMetadata::code(&gone), Some("NoSuchUpload"), "a completed upload ends");

    let id = upload("small.bin").await;
    let first = part("small.bin", id.clone(), 1, vec![1; 10]).await;
    let second = part("small.bin", id.clone(), 2, vec![2; 10]).await;
    let refused = complete("small.bin", id.clone(), vec![first, second]).await.unwrap_err();
    assert_eq!(aws_sdk_s3::error::ProvideErrorMetadata::code(&refused), Some("EntityTooSmall"));
    s3.abort_multipart_upload().bucket("models").key("small.bin").upload_id(&id).send().await.unwrap();
    let aborted = s3.abort_multipart_upload().bucket("models").key("small.bin").upload_id(&id).send().await;
    assert_eq!(aws_sdk_s3::error::ProvideErrorMetadata::code(&aborted.unwrap_err()), Some("NoSuchUpload"));
}

#[tokio::test]
async fn a_receive_hides_a_message_for_its_visibility_timeout_and_the_next_gets_a_new_receipt_handle() {
    let stand_in = StandIn::start();
    let backend = Backend::at(&stand_in.url).await;
    let url = backend.queue("visibility", &[]).await;
    let sent = backend.sqs.send_message().queue_url(&url).message_body("hello").send().await.unwrap();
    let md5 = hex::encode(<md5::Md5 as md5::Digest>::digest(b"hello"));
    assert_eq!(sent.md5_of_message_body(), Some(md5.as_str()), "MD5OfMessageBody");
    let receive = || {
        let receive = backend.sqs.receive_message().queue_url(&url).visibility_timeout(1);
        receive.message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
    };
    let first = receive().send().await.unwrap().messages.unwrap();
    assert!(receive().send().await.unwrap().messages.unwrap_or_default().is_empty(), "hidden for 1 s");
    let waited = Instant::now();
    let second = receive().wait_time_seconds(5).send().await.unwrap().messages.unwrap();
    let waited = waited.elapsed();
    assert!(waited < Duration::from_secs(3), "the long poll answers once the message is visible again: {waited:?}");
    assert_ne!(first[0].receipt_handle, second[0].receipt_handle, "a fresh receipt handle on every receive");
    let count = |m: &aws_sdk_sqs::types::Message| {
        m.attributes.as_ref().unwrap()[&MessageSystemAttributeName::ApproximateReceiveCount].clone()
    };
    assert_eq!((count(&first[0]).as_str(), count(&second[0]).as_str()), ("1", "2"));

    let queue = SqsQueue::new(backend.sqs.clone(), url.clone(), None);
    let stale = queue.change_visibility(first[0].receipt_handle.as_ref().unwrap(), Duration::ZERO).await;
    assert!(matches!(stale, Err(QueueError::ReceiptExpired)), "{stale:?}");
    queue.delete(second[0].receipt_handle.as_ref().unwrap()).await.unwrap();
    assert!(matches!(queue.delete("not-a-receipt").await, Err(QueueError::ReceiptExpired)));
    assert_eq!(queue.counts().await.unwrap(), QueueCounts::default());
}

#[tokio::test]
async fn a_call_on_an_unknown_queue_is_queue_does_not_exist_and_a_batch_of_eleven_is_refused() {
    let stand_in = StandIn::start();
    let backend = Backend::at(&stand_in.url).await;
    let unknown = format!("{}/123456789012/no-such-queue", stand_in.url);
    let deleted = backend.sqs.delete_message().queue_url(&unknown).receipt_handle("r").send().await.unwrap_err();
    assert!(deleted.as_service_error().is_some_and(|e| e.is_queue_does_not_exist()), "{deleted:?}");

    let url = backend.queue("batches", &[]).await;
    let entries = |n: usize| {
        let entry = |i: usize| SendMessageBatchRequestEntry::builder().id(format!("e{i}")).message_body("m").build();
        (0..n).map(entry).collect::<Result<Vec<_>, _>>().unwrap()
    };
    let refused = backend.sqs.send_message_batch().queue_url(&url).set_entries(Some(entries(11))).send().await;
    let refused = refused.unwrap_err();
    assert!(refused.as_service_error().is_some_and(|e| e.is_too_many_entries_in_batch_request()), "{refused:?}");
    let sent = backend.sqs.send_message_batch().queue_url(&url).set_entries(Some(entries(10))).send().await.unwrap();
    assert_eq!((sent.successful.len(), sent.failed.len()), (10, 0));
    let invalid = DeleteMessageBatchRequestEntry::builder().id("x").receipt_handle("not-a-receipt").build().unwrap();
    let deleted = backend.sqs.delete_message_batch().queue_url(&url).entries(invalid).send().await.unwrap();
    assert_eq!(deleted.failed[0].code, "ReceiptHandleIsInvalid");
}
