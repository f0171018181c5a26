//! A batch's lifecycle once its lines are admitted (`batch_admission`): the batch brought up to date from the marks
//! workers leave per line, and once every line has ended its
//! output and error files built and its final status saved. A client's poll or the upkeep brings it up to date, so
//! no long-lived process is needed, on Lambda as on one machine. Cancel and expiry end the lines not yet run by
//! storing their cancel documents, which the workers honour.

use std::collections::HashMap;

use chrono::Utc;
use futures_util::{StreamExt, TryStreamExt, stream};

use super::batch_input::LineError;
use super::batch_output::{self, Finishing};
use super::batch_record::{Batch, PREFIX, find, line_key, save};
use super::error::OpenAiError;
use super::files;
use crate::callbacks::openai_events::EventType;
use crate::contract::batch_line::{self, BatchLine, LineEnd};
use crate::ports::object_io::{one_chunk, read_all};
use crate::ports::{ObjectStore, PutOutcome, StoreError};
use crate::router::api_keys::Caller;
use crate::router::state::AppState;

/// Store calls in flight at once when a batch's remaining lines are canceled.
const CANCELS_IN_FLIGHT: usize = 32;

/// Marks the batch `id` running, so that the upkeep finds the batches to step and bring up to date without reading
/// every batch ever made.
pub(super) async fn mark_running(objects: &dyn ObjectStore, id: &str) -> Result<(), OpenAiError> {
    objects.put(&running_key(id), one_chunk(Vec::new())).await.map(drop).map_err(|e| OpenAiError::store(&e))
}

/// Fails a batch whose lines the queue refused, and ends the lines it took before the refusal (as canceled: those
/// already run keep their results).
pub(super) async fn failed_to_enqueue(
    state: &AppState,
    objects: &dyn ObjectStore,
    batch: &mut Batch,
) -> Result<(), OpenAiError> {
    batch.failed(vec![LineError {
        code: "queue_unavailable",
        message: "the queue refused the batch's requests; create it again".into(),
        param: None,
        line: 0,
    }]);
    save_ended(state, objects, batch).await?;
    if let Err(e) = end_remaining(state, objects, batch, &HashMap::new(), "the batch failed to enqueue").await {
        tracing::error!(batch_id = %batch.id, error = %e, "could not end the lines of a batch that failed to enqueue");
    }
    Ok(())
}

/// The batch's input file from byte `from` on, its size and content; a 400 once it was deleted.
pub(super) async fn input(
    objects: &dyn ObjectStore,
    batch: &Batch,
    from: u64,
) -> Result<(u64, crate::ports::ByteChunks<'static>), OpenAiError> {
    let key = files::content_key(&batch.order.input_file_id);
    let input = objects.get_from(&key, from).await.map_err(|e| OpenAiError::store(&e))?;
    input.ok_or_else(|| OpenAiError::invalid_param("input_file_id", "input_file_id: the file was deleted"))
}

/// The ended lines of a batch and how each ended, from their marks.
async fn ended_lines(objects: &dyn ObjectStore, batch_id: &str) -> Result<HashMap<u32, LineEnd>, StoreError> {
    let marks = objects.list(&batch_line::marks_prefix(batch_id)).await?;
    Ok(marks.iter().filter_map(|key| batch_line::read_mark(key)).collect())
}

/// Brings a running batch up to date: its counts; once every line has ended (or the rest were ended by cancel or
/// expiry) its files, and its final status. What decides the end is kept in the record (`cancelling_at`, and
/// `expired_at` once lines were still unended at expiry), so a later or concurrent poll decides the same.
pub(super) async fn refresh(
    state: &AppState,
    objects: &dyn ObjectStore,
    mut batch: Batch,
) -> Result<Batch, OpenAiError> {
    if !batch.is_running() {
        return Ok(batch);
    }
    let store_error = |e: StoreError| OpenAiError::store(&e);
    note_cancel(objects, &mut batch).await?;
    if batch.times.cancelling_at.is_some() && batch.times.in_progress_at.is_none() {
        // Canceled before any line was admitted: nothing ran, and there is nothing to build.
        (batch.status, batch.times.cancelled_at) = ("cancelled".into(), Some(Utc::now().timestamp()));
        save_ended(state, objects, &batch).await?;
        return Ok(batch);
    }
    let mut ended = ended_lines(objects, &batch.id).await.map_err(store_error)?;
    let count = |ended: &HashMap<u32, LineEnd>, end| ended.values().filter(|e| **e == end).count() as u64;
    let all_ended = ended.len() as u64 >= batch.request_counts.total;
    if !all_ended && Utc::now() >= batch.expires() && batch.times.cancelling_at.is_none() {
        batch.times.expired_at = Some(Utc::now().timestamp());
    }
    if !all_ended && batch.times.expired_at.is_none() && batch.times.cancelling_at.is_none() {
        batch.request_counts.completed = count(&ended, LineEnd::Succeeded);
        batch.request_counts.failed = count(&ended, LineEnd::Failed);
        return Ok(batch);
    }
    let expired = batch.times.expired_at.is_some();
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
        (batch.status, batch.times.finalizing_at) = ("finalizing".into(), Some(Utc::now().timestamp()));
        save(objects, &batch).await?;
    }
    let key = line_key(objects, &batch.id).await.map_err(store_error)?;
    let finishing = Finishing {
        batch_id: &batch.id,
        line_key: key.as_deref(),
        input_file_id: &batch.order.input_file_id,
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
    match (batch.times.cancelling_at, expired) {
        (Some(_), _) => (batch.status, batch.times.cancelled_at) = ("cancelled".into(), now),
        (None, true) => batch.status = "expired".into(),
        (None, false) => (batch.status, batch.times.completed_at) = ("completed".into(), now),
    }
    save_ended(state, objects, &batch).await?;
    tracing::info!(batch_id = %batch.id, status = %batch.status, completed = batch.request_counts.completed, failed = batch.request_counts.failed, "batch finished");
    Ok(batch)
}

/// Saves a batch that reached its end: its event recorded first (when the deployment sends events: a save that
/// fails leaves the batch running, and the next refresh records the same event again, which stands once), then its
/// running mark removed.
pub(super) async fn save_ended(state: &AppState, objects: &dyn ObjectStore, batch: &Batch) -> Result<(), OpenAiError> {
    if let (Some(events), Some(kind)) = (&state.events, EventType::of_batch(&batch.status))
        && !events.emit(&state.store, kind, &batch.id).await
    {
        return Err(OpenAiError::store(&StoreError::unavailable("the batch's event could not be recorded")));
    }
    save(objects, batch).await?;
    objects.delete(&running_key(&batch.id)).await.map_err(|e| OpenAiError::store(&e))
}

/// Where running batches (and those being admitted) are marked.
fn running_prefix() -> String {
    format!("{PREFIX}running/")
}

fn running_key(id: &str) -> String {
    format!("{}{id}", running_prefix())
}

/// The ids of the batches marked running.
pub(crate) async fn running(objects: &dyn ObjectStore) -> Result<Vec<String>, OpenAiError> {
    let prefix = running_prefix();
    let marks = objects.list(&prefix).await.map_err(|e| OpenAiError::store(&e))?;
    Ok(marks.iter().filter_map(|key| key.strip_prefix(&prefix)).map(str::to_owned).collect())
}

/// Brings every running batch of `running` (the ids `running` listed) up to date (see `refresh`): those whose lines
/// have all ended are finished, and their event recorded, with no client polling. The number of batches looked at.
pub(crate) async fn refresh_running(
    state: &AppState,
    objects: &dyn ObjectStore,
    running: &[String],
) -> Result<usize, OpenAiError> {
    for id in running {
        // The upkeep works for every project.
        match find(objects, &Caller::default(), id).await {
            // Still being admitted (`batch_admission`).
            Ok(batch) if batch.status == "validating" => {}
            Ok(batch) if !batch.is_running() => {
                objects.delete(&running_key(id)).await.map_err(|e| OpenAiError::store(&e))?;
            }
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

/// Starts canceling a running batch: its cancel mark, then the record saved canceling (the next refresh ends its
/// lines not yet run).
pub(super) async fn cancel(objects: &dyn ObjectStore, batch: &mut Batch) -> Result<(), OpenAiError> {
    let now = Utc::now().timestamp();
    let marked = objects.put_if_absent(&cancel_key(&batch.id), now.to_string().as_bytes()).await;
    marked.map_err(|e| OpenAiError::store(&e))?;
    (batch.status, batch.times.cancelling_at) = ("cancelling".into(), Some(now));
    save(objects, batch).await?;
    tracing::info!(batch_id = %batch.id, "batch canceling");
    Ok(())
}

/// Whether the batch was canceled, its copy of the record brought up to date (see `note_cancel`).
pub(super) async fn canceled(objects: &dyn ObjectStore, batch: &mut Batch) -> Result<bool, OpenAiError> {
    note_cancel(objects, batch).await?;
    Ok(batch.times.cancelling_at.is_some())
}

/// Takes in a cancel that `batch`'s copy of the record does not show yet.
async fn note_cancel(objects: &dyn ObjectStore, batch: &mut Batch) -> Result<(), OpenAiError> {
    if batch.times.cancelling_at.is_some() {
        return Ok(());
    }
    let mark = read_all(objects, &cancel_key(&batch.id)).await.map_err(|e| OpenAiError::store(&e))?;
    if let Some(mark) = mark {
        batch.times.cancelling_at =
            Some(String::from_utf8_lossy(&mark).parse().unwrap_or_else(|_| Utc::now().timestamp()));
        if batch.status == "in_progress" {
            batch.status = "cancelling".into();
        }
    }
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
