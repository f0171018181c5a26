//! OpenAI-shaped webhook events (`response.completed`, `batch.completed`, …) to the one endpoint a deployment
//! configures (`OPENAI_WEBHOOK_URL`), signed the Standard Webhooks way with its `whsec_` secret, as OpenAI's SDKs
//! check them (`client.webhooks.unwrap`). The body is OpenAI's: `{"id": "evt_…", "object": "event", "created_at",
//! "type", "data": {"id"}}`.
//!
//! Every event goes through an outbox beside the results, so none is lost to a crash and none is sent twice:
//! - its id is made from its type and its object's id, so whoever records it records the same event, and the
//!   `webhook-id` a receiver drops duplicates by is the same on every attempt;
//! - `events/{id}.json` is written first writer wins, then kept: an ending recorded twice (a cancel, then a worker
//!   that finds the canceled request) is sent once, and a delivered event is never recorded again;
//! - `events/pending/{id}` marks an event not yet delivered; a sender's first attempt comes at once, later ones come
//!   from `deliver_due` (the router's upkeep), with back-off from 5 s to an hour, for `OPENAI_WEBHOOK_RETRY_SECONDS`.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::task::TaskTracker;

use crate::callbacks::outbound::OutboundPolicy;
use crate::callbacks::webhook::{Attempt, WebhookSecret, outbound_client, post_signed};
use crate::contract::openai_response::{Standing, Stored};
use crate::infra::metrics::{self, Emf, Metric};
use crate::ports::object_io::{read_all, read_json, write_json};
use crate::ports::{ObjectStore, PutOutcome, ResultStore, StoreError};

/// Where events are kept, and where the ones not yet delivered are marked.
pub(crate) const PREFIX: &str = "events/";
const PENDING_PREFIX: &str = "events/pending/";
/// How long an event is retried unless configured: OpenAI's own window.
pub(crate) const DEFAULT_RETRY_SECONDS: u64 = 72 * 3600;
const FIRST_RETRY: Duration = Duration::from_secs(5);
const MAX_RETRY: Duration = Duration::from_secs(3600);
/// Longest wait for one attempt's answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a sender's attempt holds an event: no other sender tries it meanwhile.
const CLAIM_SECONDS: i64 = 30;

/// Where events go, and for how long they are retried.
#[derive(Debug, Clone)]
pub struct EventConfig {
    pub url: Url,
    pub secret: WebhookSecret,
    pub retry_for: Duration,
    pub policy: OutboundPolicy,
}

/// What an event reports: an OpenAI object's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Response(&'static str),
    Batch(&'static str),
}

impl EventType {
    /// The event of a response whose result document is `document`; None while it has not ended.
    pub(crate) fn of_response(document: &[u8]) -> Option<Self> {
        match Standing::of(Stored::read(document)) {
            Standing::Queued => None,
            standing => Some(EventType::Response(standing.status())),
        }
    }

    /// The event of a batch that reached `status`; None for a status that is not an end.
    pub(crate) fn of_batch(status: &str) -> Option<Self> {
        ["completed", "failed", "cancelled", "expired"].into_iter().find(|s| *s == status).map(EventType::Batch)
    }

    fn name(self) -> String {
        match self {
            EventType::Response(status) => format!("response.{status}"),
            EventType::Batch(status) => format!("batch.{status}"),
        }
    }
}

/// An event as the outbox keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Outboxed {
    /// The body, as every attempt sends it.
    event: Value,
    first_at: i64,
    /// When the next attempt is due.
    next_at: i64,
    attempts: u32,
    delivered_at: Option<i64>,
    gave_up_at: Option<i64>,
    /// What the last failed attempt met.
    last: Option<String>,
}

impl Outboxed {
    fn id(&self) -> &str {
        self.event["id"].as_str().unwrap_or_default()
    }

    fn ended(&self) -> bool {
        self.delivered_at.is_some() || self.gave_up_at.is_some()
    }
}

/// The id of the event `kind` of the object `object_id`: the same whoever makes it.
pub(crate) fn event_id(kind: EventType, object_id: &str) -> String {
    let digest = Sha256::digest(format!("{}:{object_id}", kind.name()).as_bytes());
    format!("evt_{}", hex::encode(&digest[..16]))
}

pub(crate) fn record_key(id: &str) -> String {
    format!("{PREFIX}{id}.json")
}

pub(crate) fn pending_key(id: &str) -> String {
    format!("{PENDING_PREFIX}{id}")
}

/// Records and sends events; cheap to clone.
#[derive(Debug, Clone)]
pub struct OpenAiEvents {
    http: reqwest::Client,
    config: EventConfig,
    metrics: Emf,
    attempts: TaskTracker,
}

impl OpenAiEvents {
    pub fn new(config: EventConfig, metrics: Emf) -> Result<Self, reqwest::Error> {
        let http = outbound_client(&config.policy, ATTEMPT_TIMEOUT)?;
        Ok(OpenAiEvents { http, config, metrics, attempts: TaskTracker::new() })
    }

    /// Records the event `kind` of `object_id` (once: an event recorded before is left as it is), then makes its
    /// first attempt in the background. False when the outbox could not be written.
    pub(crate) async fn emit<S: ResultStore + ?Sized + 'static>(
        &self,
        store: &Arc<S>,
        kind: EventType,
        object_id: &str,
    ) -> bool {
        let Some(objects) = store.objects() else { return true };
        let recorded = match self.record(objects, kind, object_id).await {
            Ok(recorded) => recorded,
            Err(error) => {
                tracing::warn!(%object_id, event = %kind.name(), %error, "could not record the OpenAI event");
                return false;
            }
        };
        if let Some(record) = recorded {
            let (events, store) = (self.clone(), Arc::clone(store));
            self.attempts.spawn(async move {
                if let Some(objects) = store.objects() {
                    events.attempt(objects, record).await;
                }
            });
        }
        true
    }

    /// Writes the event and its pending mark; the event, when this call recorded it first.
    async fn record(
        &self,
        objects: &dyn ObjectStore,
        kind: EventType,
        object_id: &str,
    ) -> Result<Option<Outboxed>, StoreError> {
        let id = event_id(kind, object_id);
        let now = chrono::Utc::now().timestamp();
        let event =
            json!({ "id": id, "object": "event", "created_at": now, "type": kind.name(), "data": { "id": object_id } });
        let record = Outboxed {
            event,
            first_at: now,
            next_at: now + CLAIM_SECONDS,
            attempts: 0,
            delivered_at: None,
            gave_up_at: None,
            last: None,
        };
        // The mark first: a crash between the two leaves a mark the upkeep clears, never an event without one.
        objects.put_if_absent(&pending_key(&id), now.to_string().as_bytes()).await?;
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        Ok(match objects.put_if_absent(&record_key(&id), &bytes).await? {
            PutOutcome::Created => Some(record),
            PutOutcome::AlreadyExists => None,
        })
    }

    /// Attempts every event whose attempt is due at `now` (and clears the marks of those that ended); the number of
    /// events attempted.
    pub(crate) async fn deliver_due(&self, objects: &dyn ObjectStore, now: i64) -> Result<usize, StoreError> {
        let mut attempted = 0;
        for key in objects.list(PENDING_PREFIX).await? {
            let Some(id) = key.strip_prefix(PENDING_PREFIX) else { continue };
            match read_json::<Outboxed>(objects, &record_key(id)).await? {
                Some(record) if record.ended() => objects.delete(&key).await?,
                Some(mut record) if record.next_at <= now => {
                    // Claimed before the attempt, so that an upkeep running beside this one leaves it.
                    record.next_at = now + CLAIM_SECONDS;
                    write_json(objects, &record_key(id), &record).await?;
                    self.attempt(objects, record).await;
                    attempted += 1;
                }
                Some(_) => {}
                None => clear_if_orphaned(objects, &key, now).await?,
            }
        }
        Ok(attempted)
    }

    /// One attempt at `record`, and what it leaves: delivered, given up, or due again after a back-off.
    async fn attempt(&self, objects: &dyn ObjectStore, mut record: Outboxed) {
        let id = record.id().to_owned();
        let body = serde_json::to_vec(&record.event).unwrap_or_default();
        let now = || chrono::Utc::now().timestamp();
        record.attempts += 1;
        let outcome = post_signed(&self.http, &self.config.url, &self.config.secret, &id, &body).await;
        let failure = match outcome {
            Attempt::Delivered => {
                record.delivered_at = Some(now());
                None
            }
            Attempt::Final(error) => {
                record.gave_up_at = Some(now());
                Some(error.to_string())
            }
            Attempt::Retry(last) => {
                let backoff = FIRST_RETRY.saturating_mul(1 << (record.attempts - 1).min(16)).min(MAX_RETRY);
                let next_at = now() + i64::try_from(backoff.as_secs()).unwrap_or(i64::MAX);
                let window = i64::try_from(self.config.retry_for.as_secs()).unwrap_or(i64::MAX);
                if next_at - record.first_at > window {
                    record.gave_up_at = Some(now());
                }
                record.next_at = next_at;
                Some(last)
            }
        };
        record.last.clone_from(&failure);
        let kind = record.event["type"].as_str().unwrap_or_default().to_owned();
        match (&failure, record.ended()) {
            (None, _) => {
                tracing::info!(event_id = %id, %kind, attempts = record.attempts, "OpenAI event delivered");
                self.metrics.emit(&[], &[Metric::count(metrics::WEBHOOKS_DELIVERED, 1)]);
            }
            (Some(last), true) => {
                tracing::warn!(event_id = %id, %kind, attempts = record.attempts, %last, "OpenAI event given up");
                self.metrics.emit(&[], &[Metric::count(metrics::WEBHOOK_FAILURES, 1)]);
            }
            (Some(last), false) => {
                tracing::info!(event_id = %id, %kind, attempts = record.attempts, %last, retry_at = record.next_at, "OpenAI event not delivered yet");
            }
        }
        let kept = write_json(objects, &record_key(&id), &record).await;
        let cleared = if record.ended() && kept.is_ok() { objects.delete(&pending_key(&id)).await } else { Ok(()) };
        if let Err(error) = kept.and(cleared) {
            // The mark stays: the next upkeep attempts it again (with the same id, which receivers drop twice).
            tracing::warn!(event_id = %id, %error, "could not record how the OpenAI event's attempt went");
        }
    }

    /// Waits up to `grace` for first attempts in progress (a stopping worker); the upkeep makes the rest.
    pub(crate) async fn finish(&self, grace: Duration) {
        self.attempts.close();
        let _ = tokio::time::timeout(grace, self.attempts.wait()).await;
    }
}

/// A pending mark without its event is one whose writer stopped between the two writes: it is left a claim's time
/// (the event may be being written meanwhile), then cleared. A mark holds when it was written.
async fn clear_if_orphaned(objects: &dyn ObjectStore, key: &str, now: i64) -> Result<(), StoreError> {
    let written = read_all(objects, key).await?.and_then(|bytes| String::from_utf8_lossy(&bytes).parse::<i64>().ok());
    if written.is_none_or(|at| now - at > CLAIM_SECONDS) {
        objects.delete(key).await?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Unit tests of `callbacks/openai_events.rs`: the outbox against a folder store and a local receiver.

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
}
