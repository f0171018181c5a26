//! Unit tests of `worker/callbacks/openai_events.rs`: the outbox against a folder store and a local receiver.

use std::sync::Mutex;

use axum::http::{HeaderMap, StatusCode};

use super::*;
use crate::contract::request_id::RequestId;
use crate::local::store::FileStore;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What a receiver got: the webhook-id, the timestamp, the signature and the body of each POST.
type Received = Arc<Mutex<Vec<(String, String, String, Vec<u8>)>>>;

/// A receiver on 127.0.0.1 that answers `statuses` in turn, then 200.
async fn receiver(statuses: Vec<u16>) -> (Url, Received) {
    let received: Received = Arc::default();
    let statuses = Arc::new(Mutex::new(statuses.into_iter()));
    let (log, script) = (Arc::clone(&received), Arc::clone(&statuses));
    let app = axum::Router::new().route(
        "/events",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let (log, script) = (Arc::clone(&log), Arc::clone(&script));
            async move {
                let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                let entry =
                    (header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"), body.to_vec());
                log.lock().unwrap().push(entry);
                StatusCode::from_u16(script.lock().unwrap().next().unwrap_or(200)).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = Url::parse(&format!("http://{}/events", listener.local_addr().unwrap())).unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

fn events(url: Url, retry_for: Duration) -> OpenAiEvents {
    let policy = OutboundPolicy { allow_http: true, allow_private: true };
    let config = EventConfig { url, secret: SECRET.parse().unwrap(), retry_for, policy };
    OpenAiEvents::new(config, Emf::discard()).unwrap()
}

fn store() -> (tempfile::TempDir, Arc<FileStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FileStore::open(dir.path()).unwrap());
    (dir, store)
}

/// Waits for the first attempts in the background to end.
async fn settle(events: &OpenAiEvents) {
    events.attempts.close();
    events.attempts.wait().await;
    events.attempts.reopen();
}

fn record(store: &FileStore, id: &str) -> Outboxed {
    let bytes = std::fs::read(store.dir().join(record_key(id))).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn an_events_id_is_made_from_its_type_and_object() {
    let completed = event_id(EventType::Response("completed"), "resp_1");
    assert_eq!(completed, event_id(EventType::Response("completed"), "resp_1"));
    assert_ne!(completed, event_id(EventType::Response("failed"), "resp_1"));
    assert_ne!(completed, event_id(EventType::Response("completed"), "resp_2"));
    assert_ne!(completed, event_id(EventType::Batch("completed"), "resp_1"));
    assert!(completed.starts_with("evt_") && completed.len() == 36, "{completed}");
}

#[test]
fn a_responses_event_follows_its_document_and_a_batches_its_status() {
    let id = RequestId::router_made();
    let canceled = serde_json::to_vec(&crate::contract::outcome::canceled(id)).unwrap();
    assert_eq!(EventType::of_response(&canceled), Some(EventType::Response("cancelled")));
    let pending = serde_json::to_vec(&crate::contract::outcome::pending(id)).unwrap();
    assert_eq!(EventType::of_response(&pending), None, "a pending document is no end");
    assert_eq!(EventType::of_batch("completed"), Some(EventType::Batch("completed")));
    assert_eq!(EventType::of_batch("expired").map(EventType::name).as_deref(), Some("batch.expired"));
    assert_eq!(EventType::of_batch("finalizing"), None);
}

#[tokio::test]
async fn an_event_is_sent_once_in_openais_shape_signed_the_standard_webhooks_way() {
    let (url, received) = receiver(vec![]).await;
    let (_dir, store) = store();
    let events = events(url, Duration::from_secs(60));
    let kind = EventType::Response("completed");
    assert!(events.emit(&store, kind, "resp_abc").await);
    settle(&events).await;
    // Recorded again (a second worker, a retried message): the event stands and is not sent again.
    assert!(events.emit(&store, kind, "resp_abc").await);
    settle(&events).await;
    assert_eq!(events.deliver_due(store.objects().unwrap(), i64::MAX).await.unwrap(), 0);
    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), 1, "sent once");
    let (id, timestamp, signature, body) = &received[0];
    let secret: WebhookSecret = SECRET.parse().unwrap();
    assert_eq!(*signature, secret.sign(id, timestamp.parse().unwrap(), body));
    let body: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(body["id"], *id);
    assert_eq!((body["object"].as_str(), body["type"].as_str()), (Some("event"), Some("response.completed")));
    assert_eq!(body["data"], json!({ "id": "resp_abc" }));
    assert!(body["created_at"].as_i64().unwrap() > 1_700_000_000);
    assert!(record(&store, id).delivered_at.is_some());
    assert!(!store.dir().join(pending_key(id)).exists(), "a delivered event is no longer pending");
}

#[tokio::test]
async fn a_failed_attempt_is_retried_when_due_with_the_same_id_and_never_after_a_success() {
    let (url, received) = receiver(vec![503, 500]).await;
    let (_dir, store) = store();
    let events = events(url, Duration::from_secs(3600));
    assert!(events.emit(&store, EventType::Batch("completed"), "batch_1").await);
    settle(&events).await;
    let objects = store.objects().unwrap();
    let id = event_id(EventType::Batch("completed"), "batch_1");
    let first = record(&store, &id);
    assert_eq!((first.attempts, first.last.as_deref()), (1, Some("HTTP 503")));
    assert_eq!(events.deliver_due(objects, first.next_at - 1).await.unwrap(), 0, "not due yet");
    assert_eq!(events.deliver_due(objects, first.next_at).await.unwrap(), 1);
    let second = record(&store, &id);
    // The first back-off is 5 s from the first attempt, the second 10 s from the second (made at once here).
    assert!(second.next_at - first.next_at >= 5, "the back-off doubles: {} then {}", first.next_at, second.next_at);
    assert_eq!(events.deliver_due(objects, second.next_at).await.unwrap(), 1);
    assert!(record(&store, &id).delivered_at.is_some());
    assert_eq!(events.deliver_due(objects, i64::MAX).await.unwrap(), 0);
    let ids: Vec<String> = received.lock().unwrap().iter().map(|r| r.0.clone()).collect();
    assert_eq!(ids, vec![id.clone(), id.clone(), id], "three attempts, one id");
}

#[tokio::test]
async fn an_event_is_given_up_past_its_window_or_at_once_when_refused_for_good() {
    let (url, received) = receiver(vec![500, 500, 404]).await;
    let (_dir, store) = store();
    let events = events(url, Duration::from_secs(8));
    let objects = store.objects().unwrap();
    assert!(events.emit(&store, EventType::Response("failed"), "resp_1").await);
    settle(&events).await;
    let id = event_id(EventType::Response("failed"), "resp_1");
    let first = record(&store, &id);
    assert!(first.gave_up_at.is_none(), "5 s of back-off fits the 8 s window");
    events.deliver_due(objects, first.next_at).await.unwrap();
    assert!(record(&store, &id).gave_up_at.is_some(), "the next back-off (10 s) is past the window");
    assert_eq!(events.deliver_due(objects, i64::MAX).await.unwrap(), 0, "a given-up event is not tried again");
    // A receiver that answers 404 is not asked again.
    assert!(events.emit(&store, EventType::Response("failed"), "resp_2").await);
    settle(&events).await;
    assert!(record(&store, &event_id(EventType::Response("failed"), "resp_2")).gave_up_at.is_some());
    assert_eq!(received.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_pending_mark_without_its_event_is_cleared_after_a_claims_time() {
    let (url, _received) = receiver(vec![]).await;
    let (_dir, store) = store();
    let events = events(url, Duration::from_secs(60));
    let objects = store.objects().unwrap();
    objects.put_if_absent(&pending_key("evt_orphan"), b"1000").await.unwrap();
    events.deliver_due(objects, 1000 + CLAIM_SECONDS).await.unwrap();
    assert!(store.dir().join(pending_key("evt_orphan")).exists(), "its event may still be being written");
    events.deliver_due(objects, 1001 + CLAIM_SECONDS).await.unwrap();
    assert!(!store.dir().join(pending_key("evt_orphan")).exists());
}
