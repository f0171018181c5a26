//! A request's ending: its document stored (first writer wins), its Batch API line marked, its OpenAI response's
//! event recorded, its metrics, then its message deleted and its callback sent.

use std::borrow::Cow;
use std::time::Instant;

use crate::callbacks::openai_events::EventType;
use crate::callbacks::webhook::Callback;
use crate::contract::openai_response::response_id;
use crate::contract::outcome::ResultDocument;
use crate::contract::request::InferenceRequest;
use crate::contract::request_id::RequestId;
use crate::infra::metrics::{self, Metric};
use crate::ports::{Engine, PutOutcome, Queue, ResultStore, StoreError};
use crate::worker::assembly::Disposition;
use crate::worker::request_run::RequestRun;

impl<Q, S, E> RequestRun<Q, S, E>
where
    Q: Queue + ?Sized + 'static,
    S: ResultStore + ?Sized + 'static,
    E: Engine + ?Sized + 'static,
{
    /// Stores the document (first writer wins), deletes the message, records it and sends the callback. A document
    /// stored first (a cancel, or another worker's result) stands: this one is neither recorded nor called back.
    pub(super) async fn finish(&self, request: &InferenceRequest, document: ResultDocument) -> Disposition {
        let (id, tier) = (request.request_id, self.parts.config.tier);
        let document = document.labelled(&request.labels);
        let body = document.to_json();
        match self.held.heartbeat(self.store_result(id, &body)).await {
            Ok(PutOutcome::Created) => self.parts.endings.cold_start.result_written(tier, &self.parts.endings.metrics),
            Ok(PutOutcome::AlreadyExists) => {
                tracing::info!(request_id = %id, %tier, "another document (a result or a cancel) was stored first; this one is dropped");
                if let Err(why) = self.mark_ending(request, None).await {
                    return self.retry_later(why).await;
                }
                self.held.delete().await;
                return Disposition::AlreadyDone;
            }
            Err(error) => return self.retry_later(&error.to_string()).await,
        }
        if let Err(why) = self.mark_ending(request, Some(&body)).await {
            return self.retry_later(why).await;
        }
        // A batch line carries no callback URL, so a request with one has nothing to mark and reaches this at once.
        if let (Some(url), Some(webhooks)) = (&request.callback_url, &self.parts.endings.webhooks) {
            webhooks.send(Callback { url: url.clone(), request_id: id, tier, body });
        }
        self.held.delete().await;
        self.record(&document);
        match document.error {
            None => Disposition::Succeeded,
            Some(error) => Disposition::Failed(error.code),
        }
    }

    /// Writes the document, first writer wins. A store that refuses is retried with back-off, keeping the
    /// generation and the lease, for the tier queue's visibility timeout (300 s, 600 s) or until the worker drains:
    /// a store outage then costs no receive (and no attempt toward the dead-letter queue) per retry.
    async fn store_result(&self, id: RequestId, body: &[u8]) -> Result<PutOutcome, StoreError> {
        let tier = self.parts.config.tier;
        let give_up = Instant::now() + tier.queue_visibility_timeout();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let error = match self.parts.store.put_if_absent(id, body).await {
                Ok(outcome) => return Ok(outcome),
                Err(error) => error,
            };
            let delay = self.parts.config.lease.retry_delay(attempt);
            if Instant::now() + delay > give_up || self.parts.draining.is_cancelled() {
                return Err(error);
            }
            tracing::warn!(request_id = %id, %tier, attempt, retry_in_s = delay.as_secs_f64(), %error, "result store refused the write; retrying on the same lease");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.parts.draining.cancelled() => return Err(error),
            }
        }
    }

    /// What a request's ending leaves before its message is deleted (so that a crash between the two only repeats
    /// it), as the stored document says (`stored`, or read back when another writer stored it): a Batch API line's
    /// mark, an OpenAI response's event. Why not, when one could not be written (the message then comes back).
    pub(super) async fn mark_ending(
        &self,
        request: &InferenceRequest,
        stored: Option<&[u8]>,
    ) -> Result<(), &'static str> {
        if !self.mark_batch_line(request, stored).await {
            return Err("the batch line's mark was not written");
        }
        let Some(events) = self.parts.endings.events.as_ref().filter(|_| request.origin.is_response()) else {
            return Ok(());
        };
        let document = match stored {
            Some(document) => Some(Cow::Borrowed(document)),
            None => self.parts.store.get(request.request_id).await.ok().flatten().map(Cow::Owned),
        };
        let Some(kind) = document.as_deref().and_then(EventType::of_response) else {
            return Err("the response's document could not be read for its event");
        };
        match events.emit(&self.parts.store, kind, &response_id(request.request_id)).await {
            true => Ok(()),
            false => Err("the response's event was not recorded"),
        }
    }

    /// For a Batch API line, leaves the mark that it ended, as the stored document says (`stored`, or read back when
    /// another writer stored it): before the message is deleted, so a crash between the two only repeats the mark.
    /// False when the mark could not be written (the message then comes back and the mark is tried again).
    async fn mark_batch_line(&self, request: &InferenceRequest, stored: Option<&[u8]>) -> bool {
        let (Some(line), Some(objects)) = (request.origin.batch_line(), self.parts.store.objects()) else {
            return true;
        };
        let marked = match stored {
            Some(document) => objects.put_if_absent(&line.end_mark(document), b"").await.map(drop),
            None => match self.parts.store.get(request.request_id).await {
                Ok(Some(document)) => objects.put_if_absent(&line.end_mark(&document), b"").await.map(drop),
                Ok(None) => Err(StoreError::unavailable("the stored document is gone")),
                Err(error) => Err(error),
            },
        };
        if let Err(error) = &marked {
            tracing::warn!(request_id = %request.request_id, batch = %line.id, line = line.line, %error, "could not mark the batch line ended");
        }
        marked.is_ok()
    }

    fn record(&self, document: &ResultDocument) {
        let usage = document.result.as_ref().map(|r| r.usage).unwrap_or_default();
        let (succeeded, processing) = (document.error.is_none(), &document.processing);
        tracing::info!(
            request_id = %processing.request_id,
            tier = %processing.tier,
            status = if succeeded { "success" } else { "error" },
            processing_ms = processing.processing_time_ms,
            queue_wait_ms = processing.queue_wait_ms,
            completion_tokens = usage.completion_tokens,
            attempts = processing.attempts,
            "request finished"
        );
        self.parts.endings.metrics.emit(
            &[("Tier", processing.tier.as_str())],
            &[
                Metric::millis(metrics::INFERENCE_LATENCY, processing.processing_time_ms),
                Metric::millis(metrics::QUEUE_WAIT, processing.queue_wait_ms),
                Metric::count(metrics::PROMPT_TOKENS, usage.prompt_tokens),
                Metric::count(metrics::COMPLETION_TOKENS, usage.completion_tokens),
                Metric::count(if succeeded { metrics::REQUESTS_SUCCEEDED } else { metrics::REQUESTS_FAILED }, 1),
            ],
        );
    }
}
