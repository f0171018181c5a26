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

use crate::contract::openai_response::{Standing, Stored};
use crate::infra::metrics::{self, Emf, Metric};
use crate::ports::object_io::{read_all, read_json, write_json};
use crate::ports::{ObjectStore, PutOutcome, ResultStore, StoreError};
use crate::worker::callbacks::outbound::OutboundPolicy;
use crate::worker::callbacks::webhook::{Attempt, WebhookSecret, outbound_client, post_signed};

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
mod tests;
