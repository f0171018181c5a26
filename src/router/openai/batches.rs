//! The Batches API and a batch's lifecycle. POST /v1/batches checks every line of the input file (all or
//! nothing) and enqueues each as a pipeline request; workers leave a mark per line as it ends. GET
//! /v1/batches/{id} counts the marks and, once every line has ended, builds the output and error files: the
//! client's poll finishes the batch, so no long-lived process is needed, on Lambda as on one machine. Cancel and
//! expiry end the lines not yet run by storing their cancel documents, which the workers honour.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use chrono::{DateTime, Duration, Utc};
use futures_util::{StreamExt, TryStreamExt, stream};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::batch_input::{self, Endpoint, LineError};
use super::batch_output::{self, Finishing};
use super::batch_record::{
    Batch, PREFIX, RequestCounts, enqueued_key, find, line_key, line_key_key, new_line_key, save,
};
use super::files::{self, ListQuery};
use super::owner::Owned;
use super::{OpenAiError, ids, metadata, objects};
use crate::contract::batch_line::{self, BatchLine, LineEnd};
use crate::contract::tier::{Priority, Tier};
use crate::infra::metrics::{self, Metric};
use crate::ports::object_io::{one_chunk, read_all};
use crate::ports::{ObjectStore, PutOutcome, StoreError};
use crate::router::api_keys::Caller;
use crate::router::routing;
use crate::router::state::AppState;
use crate::worker::callbacks::openai_events::EventType;

/// The only completion window OpenAI offers.
const COMPLETION_WINDOW: &str = "24h";
const WINDOW: Duration = Duration::hours(24);
/// Line errors a failed batch reports at most.
const MAX_REPORTED_ERRORS: usize = 1000;
/// Lines per enqueue step, and steps in flight at once.
const LINES_PER_SEND: usize = 100;
const SENDS_IN_FLIGHT: usize = 8;
/// Store calls in flight at once when a batch's remaining lines are canceled.
const CANCELS_IN_FLIGHT: usize = 32;
/// How long after a batch started the enqueue of its lines must have ended: the longest a router runs (API Gateway
/// waits 30 s). A batch still without the mark of its enqueue by then lost its creator midway, and the next poll
/// enqueues its lines again (a line already queued or run is run once: its request id is its own).
const ENQUEUE_GRACE: Duration = Duration::minutes(5);

/// What POST /v1/batches asks for.
struct Ask {
    input_file_id: String,
    endpoint: Endpoint,
    metadata: Option<Map<String, Value>>,
}

fn read_ask(body: &[u8]) -> Result<Ask, OpenAiError> {
    let Ok(Value::Object(mut ask)) = serde_json::from_slice::<Value>(body) else {
        return Err(OpenAiError::invalid("body: a JSON object with input_file_id, endpoint and completion_window"));
    };
    let Some(Value::String(input_file_id)) = ask.remove("input_file_id") else {
        return Err(OpenAiError::invalid_param("input_file_id", "input_file_id: required, the id of an uploaded file"));
    };
    let endpoint = ask.remove("endpoint");
    let Some(endpoint) = endpoint.as_ref().and_then(Value::as_str).and_then(Endpoint::parse) else {
        return Err(OpenAiError::invalid_param(
            "endpoint",
            "endpoint: \"/v1/chat/completions\" or \"/v1/completions\" (the endpoints gpuinfer runs)",
        ));
    };
    if ask.remove("completion_window").as_ref().and_then(Value::as_str) != Some(COMPLETION_WINDOW) {
        return Err(OpenAiError::invalid_param("completion_window", "completion_window: must be \"24h\""));
    }
    let metadata = metadata(ask.remove("metadata"))?;
    Ok(Ask { input_file_id, endpoint, metadata })
}

/// POST /v1/batches: a batch of the caller's project, on one of its files.
pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Json<Batch>, OpenAiError> {
    let objects = objects(&state)?;
    let ask = read_ask(&body)?;
    let input =
        files::find(objects, &caller, &ask.input_file_id).await.map_err(|error| match error.is_not_found() {
            true => OpenAiError::invalid_param(
                "input_file_id",
                format!("input_file_id: no file {:?} (POST /v1/files)", ask.input_file_id),
            ),
            false => error,
        })?;
    let created = Utc::now();
    let mut batch = Batch {
        id: ids::new("batch_"),
        object: "batch".into(),
        endpoint: ask.endpoint.as_str().into(),
        errors: None,
        input_file_id: input.id,
        completion_window: COMPLETION_WINDOW.into(),
        status: "validating".into(),
        output_file_id: None,
        error_file_id: None,
        created_at: created.timestamp(),
        in_progress_at: None,
        expires_at: (created + WINDOW).timestamp(),
        finalizing_at: None,
        completed_at: None,
        failed_at: None,
        expired_at: None,
        cancelling_at: None,
        cancelled_at: None,
        request_counts: RequestCounts::default(),
        metadata: ask.metadata,
        owner: caller.project,
    };
    let key = new_line_key();
    objects.put_if_absent(&line_key_key(&batch.id), &key).await.map_err(|e| OpenAiError::store(&e))?;
    match check_lines(&state, objects, &batch, &key).await? {
        Err(errors) => {
            tracing::warn!(batch_id = %batch.id, errors = errors.len(), "batch failed validation");
            batch.failed(errors);
            save_ended(&state, objects, &batch).await?;
            return Ok(Json(batch));
        }
        Ok(total) => batch.request_counts.total = total,
    }
    batch.status = "in_progress".into();
    batch.in_progress_at = Some(Utc::now().timestamp());
    objects.put(&running_key(&batch.id), one_chunk(Vec::new())).await.map_err(|e| OpenAiError::store(&e))?;
    save(objects, &batch).await?;
    if let Err(error) = enqueue(&state, objects, &batch, Some(&key)).await {
        tracing::error!(batch_id = %batch.id, ?error, "enqueueing the batch failed");
        batch.failed(vec![LineError {
            code: "queue_unavailable",
            message: "the queue refused the batch's requests; create it again".into(),
            param: None,
            line: 0,
        }]);
        save_ended(&state, objects, &batch).await?;
        // Lines sent before the failure would still run: each is ended as canceled (those already run keep theirs).
        let ended = HashMap::new();
        if let Err(e) = end_remaining(&state, objects, &batch, &ended, "the batch failed to enqueue").await {
            tracing::error!(batch_id = %batch.id, error = %e, "could not end the lines of a batch that failed to enqueue");
        }
        return Err(error);
    }
    objects.put_if_absent(&enqueued_key(&batch.id), b"").await.map_err(|e| OpenAiError::store(&e))?;
    tracing::info!(batch_id = %batch.id, lines = batch.request_counts.total, endpoint = %batch.endpoint, "batch created");
    Ok(Json(batch))
}

/// Every line checked: their count, or the errors of the lines that fail (all or nothing).
async fn check_lines(
    state: &AppState,
    objects: &dyn ObjectStore,
    batch: &Batch,
    key: &[u8],
) -> Result<Result<u64, Vec<LineError>>, OpenAiError> {
    let (_, chunks) = input(objects, batch).await?;
    let mut lines = batch_input::lines(chunks);
    // Each custom_id's digest and its line: memory stays small whatever the ids' length.
    let (mut errors, mut custom_ids, mut index) = (Vec::new(), HashMap::<[u8; 16], u64>::new(), 0u32);
    while let Some(line) = lines.next().await {
        let line = line.map_err(|e| OpenAiError::store(&StoreError::caused("reading the input file", e)))?;
        let batch_line = BatchLine { id: batch.id.clone(), line: index };
        index += 1;
        match batch_input::check(
            &line,
            batch.endpoint(),
            &state.openai.models,
            (batch_line, Some(key)),
            batch.expires(),
        ) {
            Ok(checked) => {
                let digest = Sha256::digest(checked.label.custom_id.as_bytes());
                if let Some(first) = custom_ids.insert(digest[..16].try_into().unwrap_or_default(), line.0) {
                    errors.push(LineError {
                        code: "duplicate_custom_id",
                        message: format!("custom_id: repeats line {first}; each line needs its own"),
                        param: Some("custom_id".into()),
                        line: line.0,
                    });
                }
            }
            Err(error) => errors.push(error),
        }
        errors.truncate(MAX_REPORTED_ERRORS);
    }
    Ok(if errors.is_empty() { Ok(u64::from(index)) } else { Err(errors) })
}

async fn input(
    objects: &dyn ObjectStore,
    batch: &Batch,
) -> Result<(u64, crate::ports::ByteChunks<'static>), OpenAiError> {
    let input = objects.get(&files::content_key(&batch.input_file_id)).await.map_err(|e| OpenAiError::store(&e))?;
    input.ok_or_else(|| OpenAiError::invalid_param("input_file_id", "input_file_id: the file was deleted"))
}

/// Sends every line to its tier's queue, `LINES_PER_SEND` at a time with `SENDS_IN_FLIGHT` sends at once. Each line
/// is made into its request again as it is read: the checking pass kept only the count, so a large file is never
/// held in memory.
async fn enqueue(
    state: &AppState,
    objects: &dyn ObjectStore,
    batch: &Batch,
    key: Option<&[u8]>,
) -> Result<(), OpenAiError> {
    let (_, chunks) = input(objects, batch).await?;
    let sends = batch_input::lines(chunks).enumerate().chunks(LINES_PER_SEND).map(|lines| async move {
        let mut by_tier: HashMap<Tier, Vec<String>> = HashMap::new();
        for (index, line) in lines {
            let line = line.map_err(|e| OpenAiError::store(&StoreError::caused("reading the input file", e)))?;
            let batch_line = BatchLine { id: batch.id.clone(), line: u32::try_from(index).unwrap_or(u32::MAX) };
            let checked =
                batch_input::check(&line, batch.endpoint(), &state.openai.models, (batch_line, key), batch.expires())
                    .map_err(|e| OpenAiError::invalid(e.message))?;
            // Thresholds only: a classifier call per line would make a large batch wait on the classifier.
            let (tier, _) = routing::route(&checked.request, &state.routing, None).await;
            by_tier.entry(tier).or_default().push(checked.request.to_queue_body());
        }
        for (tier, bodies) in by_tier {
            let queue = state.queues.get(tier).get(Priority::Batch);
            let sent = queue.send_many(&bodies).await;
            if let Some(error) = sent.into_iter().find_map(Result::err) {
                tracing::error!(batch_id = %batch.id, %tier, %error, "enqueue failed");
                return Err(OpenAiError::queue());
            }
            state
                .metrics
                .emit(&[("Tier", tier.as_str())], &[Metric::count(metrics::ROUTED_REQUESTS, bodies.len() as u64)]);
            state.enqueued(tier).await;
        }
        Ok(())
    });
    sends.buffer_unordered(SENDS_IN_FLIGHT).try_collect().await
}

/// The ended lines of a batch and how each ended, from their marks.
async fn ended_lines(objects: &dyn ObjectStore, batch_id: &str) -> Result<HashMap<u32, LineEnd>, StoreError> {
    let marks = objects.list(&batch_line::marks_prefix(batch_id)).await?;
    Ok(marks.iter().filter_map(|key| batch_line::read_mark(key)).collect())
}

/// Brings a running batch up to date: its counts; once every line has ended (or the rest were ended by cancel or
/// expiry) its files, and its final status. What decides the end is kept in the record (`cancelling_at`, and
/// `expired_at` once lines were still unended at expiry), so a later or concurrent poll decides the same.
async fn refresh(state: &AppState, objects: &dyn ObjectStore, mut batch: Batch) -> Result<Batch, OpenAiError> {
    if !batch.is_running() {
        return Ok(batch);
    }
    let store_error = |e: StoreError| OpenAiError::store(&e);
    note_cancel(objects, &mut batch).await?;
    resume_enqueue(state, objects, &batch).await?;
    let mut ended = ended_lines(objects, &batch.id).await.map_err(store_error)?;
    let count = |ended: &HashMap<u32, LineEnd>, end| ended.values().filter(|e| **e == end).count() as u64;
    let all_ended = ended.len() as u64 >= batch.request_counts.total;
    if !all_ended && Utc::now() >= batch.expires() && batch.cancelling_at.is_none() {
        batch.expired_at = Some(Utc::now().timestamp());
    }
    if !all_ended && batch.expired_at.is_none() && batch.cancelling_at.is_none() {
        batch.request_counts.completed = count(&ended, LineEnd::Succeeded);
        batch.request_counts.failed = count(&ended, LineEnd::Failed);
        return Ok(batch);
    }
    let expired = batch.expired_at.is_some();
    if !all_ended {
        let reason = if expired { "the batch's completion window ended" } else { "the batch was canceled" };
        end_remaining(state, objects, &batch, &ended, reason).await.map_err(store_error)?;
        ended = ended_lines(objects, &batch.id).await.map_err(store_error)?;
    }
    batch.request_counts.completed = count(&ended, LineEnd::Succeeded);
    batch.request_counts.failed =
        count(&ended, LineEnd::Failed) + if expired { count(&ended, LineEnd::Canceled) } else { 0 };
    if batch.status != "finalizing" {
        // Seen by other polls meanwhile (which build the same files if they come): every line has ended.
        (batch.status, batch.finalizing_at) = ("finalizing".into(), Some(Utc::now().timestamp()));
        save(objects, &batch).await?;
    }
    let key = line_key(objects, &batch.id).await.map_err(store_error)?;
    let finishing = Finishing {
        batch_id: &batch.id,
        line_key: key.as_deref(),
        input_file_id: &batch.input_file_id,
        endpoint: batch.endpoint(),
        expired,
        owner: batch.owner.as_deref(),
    };
    let Some(files) = batch_output::assemble(objects, state.store.as_ref(), finishing).await.map_err(store_error)?
    else {
        let gone = "the batch's input file was deleted before its output was built; create the batch again";
        batch.failed(vec![LineError { code: "input_file_deleted", message: gone.into(), param: None, line: 0 }]);
        save_ended(state, objects, &batch).await?;
        return Ok(batch);
    };
    batch.output_file_id = files.output.map(|f| f.id);
    batch.error_file_id = files.errors.map(|f| f.id);
    // A cancel that came while the files were built: its lines were ended and left out, as a cancel's are.
    note_cancel(objects, &mut batch).await?;
    let now = Some(Utc::now().timestamp());
    match (batch.cancelling_at, expired) {
        (Some(_), _) => (batch.status, batch.cancelled_at) = ("cancelled".into(), now),
        (None, true) => batch.status = "expired".into(),
        (None, false) => (batch.status, batch.completed_at) = ("completed".into(), now),
    }
    save_ended(state, objects, &batch).await?;
    tracing::info!(batch_id = %batch.id, status = %batch.status, completed = batch.request_counts.completed, failed = batch.request_counts.failed, "batch finished");
    Ok(batch)
}

/// Saves a batch that reached its end: its event recorded first (when the deployment sends events: a save that
/// fails leaves the batch running, and the next refresh records the same event again, which stands once), then its
/// running mark removed.
async fn save_ended(state: &AppState, objects: &dyn ObjectStore, batch: &Batch) -> Result<(), OpenAiError> {
    if let (Some(events), Some(kind)) = (&state.events, EventType::of_batch(&batch.status))
        && !events.emit(&state.store, kind, &batch.id).await
    {
        return Err(OpenAiError::store(&StoreError::unavailable("the batch's event could not be recorded")));
    }
    save(objects, batch).await?;
    objects.delete(&running_key(&batch.id)).await.map_err(|e| OpenAiError::store(&e))
}

/// Where running batches are marked, so that the upkeep finds the batches to bring up to date without reading every
/// batch ever made.
fn running_prefix() -> String {
    format!("{PREFIX}running/")
}

fn running_key(id: &str) -> String {
    format!("{}{id}", running_prefix())
}

/// Brings every running batch up to date (see `refresh`): those whose lines have all ended are finished, and their
/// event recorded, with no client polling. The number of batches looked at.
pub(crate) async fn refresh_running(state: &AppState, objects: &dyn ObjectStore) -> Result<usize, OpenAiError> {
    let prefix = running_prefix();
    let running = objects.list(&prefix).await.map_err(|e| OpenAiError::store(&e))?;
    for key in &running {
        let Some(id) = key.strip_prefix(&prefix) else { continue };
        // The upkeep works for every project.
        match find(objects, &Caller::default(), id).await {
            Ok(batch) if !batch.is_running() => objects.delete(key).await.map_err(|e| OpenAiError::store(&e))?,
            Ok(batch) => drop(refresh(state, objects, batch).await?),
            // A mark whose batch is gone (expired with the results) is left for the same lifecycle.
            Err(error) if error.is_not_found() => {}
            Err(error) => return Err(error),
        }
    }
    Ok(running.len())
}

/// The mark a cancel leaves before it saves the batch: a poll that read the record before the cancel still ends the
/// batch canceled.
fn cancel_key(id: &str) -> String {
    format!("{PREFIX}{id}.cancel")
}

/// Takes in a cancel that `batch`'s copy of the record does not show yet.
async fn note_cancel(objects: &dyn ObjectStore, batch: &mut Batch) -> Result<(), OpenAiError> {
    if batch.cancelling_at.is_some() {
        return Ok(());
    }
    let mark = read_all(objects, &cancel_key(&batch.id)).await.map_err(|e| OpenAiError::store(&e))?;
    if let Some(mark) = mark {
        batch.cancelling_at = Some(String::from_utf8_lossy(&mark).parse().unwrap_or_else(|_| Utc::now().timestamp()));
        if batch.status == "in_progress" {
            batch.status = "cancelling".into();
        }
    }
    Ok(())
}

/// Enqueues the lines of a batch whose creator stopped before its enqueue ended (see `ENQUEUE_GRACE`).
async fn resume_enqueue(state: &AppState, objects: &dyn ObjectStore, batch: &Batch) -> Result<(), OpenAiError> {
    let started = batch.in_progress_at.and_then(|at| DateTime::from_timestamp(at, 0)).unwrap_or_else(Utc::now);
    if batch.status != "in_progress" || Utc::now() - started < ENQUEUE_GRACE {
        return Ok(());
    }
    let key = enqueued_key(&batch.id);
    if objects.get(&key).await.map_err(|e| OpenAiError::store(&e))?.is_some() {
        return Ok(());
    }
    tracing::warn!(batch_id = %batch.id, "the batch's enqueue never ended (its router stopped midway): enqueueing its lines again");
    let line_key = line_key(objects, &batch.id).await.map_err(|e| OpenAiError::store(&e))?;
    enqueue(state, objects, batch, line_key.as_deref()).await?;
    objects.put_if_absent(&key, b"").await.map_err(|e| OpenAiError::store(&e))?;
    Ok(())
}

/// Ends the lines without a mark: a cancel document for each (a worker that finds it drops the line; one that
/// stored its result first wins), and the mark of whichever document stands.
async fn end_remaining(
    state: &AppState,
    objects: &dyn ObjectStore,
    batch: &Batch,
    ended: &HashMap<u32, LineEnd>,
    reason: &str,
) -> Result<(), StoreError> {
    let total = u32::try_from(batch.request_counts.total).unwrap_or(u32::MAX);
    let remaining = (0..total).filter(|line| !ended.contains_key(line));
    let key = line_key(objects, &batch.id).await?;
    let key = key.as_deref();
    stream::iter(remaining)
        .map(|line| async move {
            let line = BatchLine { id: batch.id.clone(), line };
            let id = line.request_id(key);
            let cancel =
                serde_json::to_vec(&crate::contract::outcome::canceled_because(id, reason)).unwrap_or_default();
            let stored = match state.store.put_if_absent(id, &cancel).await? {
                PutOutcome::Created => cancel,
                PutOutcome::AlreadyExists => state.store.get(id).await?.unwrap_or(cancel),
            };
            objects.put_if_absent(&line.end_mark(&stored), b"").await.map(drop)
        })
        // In line order: the lines a worker would take next are ended first.
        .buffered(CANCELS_IN_FLIGHT)
        .try_collect::<()>()
        .await?;
    crate::router::results::mark_cancels(state).await;
    Ok(())
}

/// GET /v1/batches/{id}: the batch, brought up to date (and finished, once every line has ended).
pub(crate) async fn retrieve(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Batch>, OpenAiError> {
    let objects = objects(&state)?;
    let batch = find(objects, &caller, &id).await?;
    Ok(Json(refresh(&state, objects, batch).await?))
}

/// POST /v1/batches/{id}/cancel: lines not yet run are dropped; what finished is kept in the output.
pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Batch>, OpenAiError> {
    let objects = objects(&state)?;
    let mut batch = find(objects, &caller, &id).await?;
    match batch.status.as_str() {
        "validating" | "in_progress" => {
            let now = Utc::now().timestamp();
            let marked = objects.put_if_absent(&cancel_key(&batch.id), now.to_string().as_bytes()).await;
            marked.map_err(|e| OpenAiError::store(&e))?;
            (batch.status, batch.cancelling_at) = ("cancelling".into(), Some(now));
            save(objects, &batch).await?;
            tracing::info!(batch_id = %batch.id, "batch canceling");
        }
        "cancelling" | "cancelled" => {}
        other => {
            return Err(OpenAiError::conflict(format!("the batch is {other}; only a running batch can be canceled")));
        }
    }
    Ok(Json(refresh(&state, objects, batch).await?))
}

/// GET /v1/batches: the caller's, newest first, as stored (a batch's counts are brought up to date by retrieving it).
pub(crate) async fn list(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, OpenAiError> {
    let limit = query.limit.unwrap_or(20).clamp(1, 100);
    let theirs = |batch: &Batch| caller.owns(batch.owner());
    Ok(Json(files::page(objects(&state)?, PREFIX, query.after.as_deref(), limit, theirs).await?))
}
