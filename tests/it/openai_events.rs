//! OpenAI-shaped webhook events, as a receiver checks them with the official `openai` client's
//! `webhooks.unwrap` (tests/openai/webhook_events_client.py): `gpuinfer dev` on llama.cpp sends `response.completed`,
//! `response.cancelled` and `batch.completed` (the batch finished by the upkeep, no client polling it) to
//! OPENAI_WEBHOOK_URL; an attempt the receiver fails is sent again with the same id, and none twice after a 200.
//! On SQS and S3 (moto) the standalone router and a worker send them as on AWS.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::dev::Dev;
use crate::support::receiver::{Delivery, Receiver};
use crate::support::{eventually, free_port};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Runs `tests/openai/{script}` with `args` and returns the JSON object it printed last.
pub(crate) async fn openai_script(script: &str, args: &[&str]) -> Value {
    let path = format!("{}/tests/openai/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::process::Command::new(crate::batch_api::python())
        .arg(&path)
        .args(args)
        .output()
        .await
        .expect("run the openai client");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{script} {args:?} failed: {}\nstdout: {stdout}\nstderr: {stderr}", output.status);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("the script prints one JSON object")
}

/// The event a delivery carries: its type and its object's id.
pub(crate) fn event_of(delivery: &Delivery) -> (String, String) {
    let body: Value = serde_json::from_slice(&delivery.body).expect("an event is JSON");
    (body["type"].as_str().unwrap_or_default().to_owned(), body["data"]["id"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
#[ignore = "needs the local engine and the openai client: scripts/test.sh"]
async fn the_openai_client_accepts_the_events_of_responses_and_batches_that_gpuinfer_dev_sends() {
    // The first attempt meets a 503: the upkeep sends that event again, with the same webhook-id.
    let receiver = Receiver::start([503]).await;
    let (data, logs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_engine, engine_url) = crate::responses::chat_engine(&logs.path().join("engine.log")).await;
    let flags = [
        "--classifier",
        "none",
        "--concurrency",
        "1",
        "--fixed-concurrency",
        "--openai-webhook-url",
        &receiver.url,
        "--openai-webhook-secret",
        SECRET,
        "--allow-http-callbacks",
        "--allow-private-callbacks",
    ];
    let dev = Dev::start(data.path(), free_port(), &engine_url, &flags);
    dev.ready(&reqwest::Client::new()).await;

    let ran = openai_script("responses_client.py", &["--base-url", &dev.url]).await;
    let submitted =
        openai_script("batch_client.py", &["--base-url", &dev.url, "submit", "--lines", "2", "--endpoint", "chat"])
            .await;
    let (response, cancelled) = (ran["id"].as_str().unwrap(), ran["cancelled_id"].as_str().unwrap());
    let batch = submitted["batch_id"].as_str().unwrap();
    let wanted = [("response.completed", response), ("response.cancelled", cancelled), ("batch.completed", batch)];
    // Nobody polls the batch: the upkeep finishes it, and its event follows.
    eventually(Duration::from_secs(180), "the events at the receiver", || async {
        let events: Vec<(String, String)> = receiver.deliveries().iter().map(event_of).collect();
        wanted.iter().all(|(kind, id)| events.contains(&((*kind).to_owned(), (*id).to_owned()))).then_some(())
    })
    .await;
    // Time for an event sent twice to show: the retry's back-off is 5 s, the upkeep's period 1 s.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let deliveries = receiver.deliveries();

    // Every event was delivered once, bar the one the receiver failed, which came twice with one id.
    let mut attempts: BTreeMap<&str, usize> = BTreeMap::new();
    for delivery in &deliveries {
        *attempts.entry(delivery.id.as_str()).or_default() += 1;
    }
    let retried = &deliveries[0].id;
    assert_eq!(attempts[retried.as_str()], 2, "the failed event came again: {attempts:?}");
    assert!(attempts.iter().all(|(id, n)| id == retried || *n == 1), "no event twice after a 200: {attempts:?}");

    let file = data.path().join("deliveries.json");
    let listed: Vec<Value> = deliveries
        .iter()
        .map(|d| {
            let headers = json!({
                "webhook-id": d.id, "webhook-timestamp": d.timestamp, "webhook-signature": d.signature,
                "content-type": d.content_type,
            });
            json!({ "headers": headers, "body": String::from_utf8_lossy(&d.body) })
        })
        .collect();
    std::fs::write(&file, serde_json::to_vec(&listed).unwrap()).unwrap();
    let checked =
        openai_script("webhook_events_client.py", &["--secret", SECRET, "--deliveries", file.to_str().unwrap()]).await;
    let events = checked["events"].as_array().unwrap();
    for event in events {
        assert_eq!(event["id"], event["webhook_id"], "the webhook-id is the event's id: {event}");
        assert!(event["id"].as_str().unwrap().starts_with("evt_"), "{event}");
        for refusal in ["tampered_refused", "old_refused", "other_secret_refused"] {
            assert_eq!(event[refusal], true, "{refusal}: {event}");
        }
    }
    for (kind, id) in wanted {
        assert!(events.iter().any(|e| e["type"] == kind && e["object_id"] == id), "{kind} of {id}: {events:?}");
    }
    let waited = openai_script("batch_client.py", &["--base-url", &dev.url, "wait", "--batch", batch]).await;
    assert_eq!(waited["status"], "completed", "{waited}");
}

/// As deployed: the worker sends a response's event, the standalone router a cancel's and, from its upkeep, a
/// batch's (nobody polls the batch), every record in S3 beside the results.
#[tokio::test]
#[ignore = "needs moto and the openai client: scripts/test.sh"]
async fn router_and_worker_on_sqs_and_s3_send_the_events_of_responses_and_batches() {
    let receiver = Receiver::start([]).await;
    let env = [
        ("OPENAI_WEBHOOK_URL", receiver.url.clone()),
        ("OPENAI_WEBHOOK_SECRET", SECRET.to_owned()),
        ("ALLOW_HTTP_CALLBACKS", "true".to_owned()),
        ("ALLOW_PRIVATE_CALLBACKS", "true".to_owned()),
    ];
    let stack = crate::aws_adapters::OneQueuePerTier::start_with("events", &env).await;
    let http = reqwest::Client::new();
    let create = json!({"model": "small", "input": "Say hello.", "background": true, "max_output_tokens": 16});
    let created: Value =
        http.post(format!("{}/v1/responses", stack.base)).json(&create).send().await.unwrap().json().await.unwrap();
    let response = created["id"].as_str().unwrap().to_owned();
    let submitted =
        openai_script("batch_client.py", &["--base-url", &stack.base, "submit", "--lines", "2", "--endpoint", "chat"])
            .await;
    let batch = submitted["batch_id"].as_str().unwrap().to_owned();
    let wanted = [("response.completed", response.as_str()), ("batch.completed", batch.as_str())];
    let events = eventually(Duration::from_secs(60), "the events at the receiver", || async {
        let events: Vec<(String, String)> = receiver.deliveries().iter().map(event_of).collect();
        wanted.iter().all(|(kind, id)| events.contains(&((*kind).to_owned(), (*id).to_owned()))).then_some(events)
    })
    .await;
    assert_eq!(events.len(), 2, "each once: {events:?}");
}
