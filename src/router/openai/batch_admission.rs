//! A batch admitted after POST /v1/batches answered `validating`: every line checked (all or nothing, as OpenAI
//! validates), then every line enqueued. The work goes in steps that each stop by a deadline and save where they
//! stopped (`batches/{id}.admission`), so that a file of any size is admitted within Lambda's 30 s invocations, and a
//! step cut short (its process gone) is taken up by the next upkeep once its claim is older than `CLAIM_HOLD`. A
//! server admits at once, step after step; on Lambda the upkeep's schedule does, a step a minute.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::batch_input::{self, LineError, Position};
use super::batch_lifecycle::{self, input, save_ended};
use super::batch_record::{Batch, PREFIX, find, line_key, save};
use super::error::OpenAiError;
use crate::contract::batch_line::BatchLine;
use crate::contract::tier::{Priority, Tier};
use crate::infra::metrics::{self, Metric};
use crate::ports::object_io::{one_chunk, read_all, read_json, write_json};
use crate::ports::{ObjectStore, StoreError};
use crate::router::api_keys::Caller;
use crate::router::routing;
use crate::router::state::AppState;

/// The longest one step works before it saves where it stopped: within Lambda's 30 s with room for the saves.
pub(crate) const STEP: Duration = Duration::from_secs(20);
/// How long a step's claim on a batch holds (seconds): its work and its saves. An older claim is a step that
/// stopped midway, and the next step goes on from where it last saved.
const CLAIM_HOLD: i64 = 30;
/// Line errors a failed batch reports at most.
const MAX_REPORTED_ERRORS: usize = 1000;
/// Lines per enqueue call, and calls in flight at once.
const LINES_PER_SEND: usize = 100;
const SENDS_IN_FLIGHT: usize = 8;

/// Where a batch's admission stands between steps.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Progress {
    /// False while the lines are checked; true once they all passed and are being enqueued.
    enqueueing: bool,
    /// The next line to check or to enqueue.
    at: Position,
    /// The errors of the lines checked so far (OpenAI's batch error entries).
    errors: Vec<Value>,
    /// When the step that holds the batch began (Unix seconds); 0 when none has.
    claimed_at: i64,
}

fn progress_key(id: &str) -> String {
    format!("{PREFIX}{id}.admission")
}

/// The digests of the `custom_id`s checked so far, with their lines, kept between the steps of a check: 16 bytes of
/// SHA-256 and 8 of line number (little-endian) each, so memory stays small whatever the ids' length.
fn custom_ids_key(id: &str) -> String {
    format!("{PREFIX}{id}.custom-ids")
}

/// Saves a new batch `validating` with its admission ahead of it, and marks it running (the upkeep then steps it).
pub(super) async fn begin(objects: &dyn ObjectStore, batch: &Batch) -> Result<(), OpenAiError> {
    let store_error = |e: StoreError| OpenAiError::store(&e);
    write_json(objects, &progress_key(&batch.id), &Progress::default()).await.map_err(store_error)?;
    save(objects, batch).await?;
    batch_lifecycle::mark_running(objects, &batch.id).await
}

/// Admits the batch `id` step after step, until it is admitted or a step elsewhere holds it: a server's create, in
/// the background. A step that fails is logged; the upkeep takes the batch up again once its claim is old.
pub(super) async fn admit(state: &AppState, objects: &dyn ObjectStore, id: &str) {
    loop {
        match step(state, objects, id, Instant::now() + STEP).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(error) => {
                tracing::warn!(batch_id = %id, ?error, "a step of the batch's admission failed; the upkeep goes on with it");
                return;
            }
        }
    }
}

/// One step of the batch `id`'s admission, working until `deadline`: true when more steps are needed. Nothing is
/// done for a batch admitted, or held by a step elsewhere.
pub(crate) async fn step(
    state: &AppState,
    objects: &dyn ObjectStore,
    id: &str,
    deadline: Instant,
) -> Result<bool, OpenAiError> {
    let store_error = |e: StoreError| OpenAiError::store(&e);
    let Some(mut progress) = read_json::<Progress>(objects, &progress_key(id)).await.map_err(store_error)? else {
        return Ok(false);
    };
    let now = Utc::now().timestamp();
    if now - progress.claimed_at < CLAIM_HOLD {
        return Ok(false);
    }
    progress.claimed_at = now;
    write_json(objects, &progress_key(id), &progress).await.map_err(store_error)?;
    let mut batch = find(objects, &Caller::default(), id).await?;
    if batch_lifecycle::canceled(objects, &mut batch).await?
        || !matches!(batch.status.as_str(), "validating" | "in_progress")
    {
        // A cancel ends the lines not enqueued: there is nothing more to admit.
        done(objects, id).await?;
        return Ok(false);
    }
    if !progress.enqueueing {
        let checked = match check(state, objects, &batch, &mut progress, deadline).await {
            Err(error) if input_gone(&error) => return input_deleted(state, objects, &mut batch).await.map(|()| false),
            checked => checked?,
        };
        match checked {
            None => {
                // Unclaimed: the next step (this process's, or any other's) goes on at once.
                progress.claimed_at = 0;
                write_json(objects, &progress_key(id), &progress).await.map_err(store_error)?;
                return Ok(true);
            }
            Some(false) => {
                tracing::warn!(batch_id = %id, errors = progress.errors.len(), "batch failed validation");
                batch.failed(&progress.errors);
                save_ended(state, objects, &batch).await?;
                done(objects, id).await?;
                return Ok(false);
            }
            Some(true) => {
                // A cancel while the lines were checked ends the admission (the cancel's refresh ends the batch).
                let now = find(objects, &Caller::default(), id).await?;
                if now.status != "validating" || batch_lifecycle::canceled(objects, &mut batch).await? {
                    done(objects, id).await?;
                    return Ok(false);
                }
                batch.request_counts.total = u64::from(progress.at.index);
                batch.status = "in_progress".into();
                batch.times.in_progress_at = Some(Utc::now().timestamp());
                save(objects, &batch).await?;
                tracing::info!(batch_id = %id, lines = batch.request_counts.total, endpoint = %batch.order.endpoint, "batch admitted");
                progress = Progress { enqueueing: true, claimed_at: progress.claimed_at, ..Progress::default() };
            }
        }
    }
    match enqueue(state, objects, &batch, &mut progress.at, deadline).await {
        Ok(false) => {
            progress.claimed_at = 0;
            write_json(objects, &progress_key(id), &progress).await.map_err(store_error)?;
            Ok(true)
        }
        Err(error) if input_gone(&error) => input_deleted(state, objects, &mut batch).await.map(|()| false),
        // A store that failed midway: the next step goes on from where this one last saved.
        Err(error) if error.code.is_none() && error.message.starts_with("the file and batch store") => Err(error),
        Ok(true) => {
            done(objects, id).await?;
            Ok(false)
        }
        Err(error) => {
            tracing::error!(batch_id = %id, ?error, "enqueueing the batch failed");
            batch_lifecycle::failed_to_enqueue(state, objects, &mut batch).await?;
            done(objects, id).await?;
            Err(error)
        }
    }
}

/// Whether `error` says the batch's input file is gone (`batch_lifecycle::input`'s 400).
fn input_gone(error: &OpenAiError) -> bool {
    error.param.as_deref() == Some("input_file_id")
}

/// Fails a batch whose input file was deleted before its lines were all admitted (those enqueued are ended).
async fn input_deleted(state: &AppState, objects: &dyn ObjectStore, batch: &mut Batch) -> Result<(), OpenAiError> {
    tracing::warn!(batch_id = %batch.id, "the batch's input file was deleted while its lines were admitted");
    let gone =
        "the batch's input file was deleted before its lines were all checked and enqueued; create the batch again";
    batch.failed(vec![LineError { code: "input_file_deleted", message: gone.into(), param: None, line: 0 }]);
    save_ended(state, objects, batch).await?;
    done(objects, &batch.id).await
}

/// Ends the admission of the batch `id`: what it kept between steps removed.
async fn done(objects: &dyn ObjectStore, id: &str) -> Result<(), OpenAiError> {
    objects.delete(&custom_ids_key(id)).await.map_err(|e| OpenAiError::store(&e))?;
    objects.delete(&progress_key(id)).await.map_err(|e| OpenAiError::store(&e))
}

/// Checks the batch's lines from `progress.at` on, until the file ends (Some: whether every line passed) or
/// `deadline` (None: `progress` and the custom_ids seen saved for the next step).
async fn check(
    state: &AppState,
    objects: &dyn ObjectStore,
    batch: &Batch,
    progress: &mut Progress,
    deadline: Instant,
) -> Result<Option<bool>, OpenAiError> {
    let store_error = |e: StoreError| OpenAiError::store(&e);
    let key = line_key(objects, &batch.id).await.map_err(store_error)?;
    let mut custom_ids = read_custom_ids(objects, &batch.id).await.map_err(store_error)?;
    let (_, chunks) = input(objects, batch, progress.at.offset).await?;
    let mut lines = batch_input::lines_from(chunks, progress.at);
    while let Some(line) = lines.next().await {
        let (line, after) = line.map_err(|e| store_error(StoreError::caused("reading the input file", e)))?;
        let batch_line = BatchLine { id: batch.id.clone(), line: progress.at.index };
        let checked = batch_input::check(
            &line,
            batch.endpoint(),
            &state.openai.models,
            (batch_line, key.as_deref()),
            batch.expires(),
        );
        let error = match checked {
            Ok(checked)
                if let Some(why) = checked.request.route.and_then(|tier| state.dispatch.routing.refuses(tier)) =>
            {
                Some(LineError {
                    code: "invalid_request",
                    message: format!("model: {why}"),
                    param: Some("body.model".into()),
                    line: line.0,
                })
            }
            Ok(checked) => {
                let digest: [u8; 16] =
                    Sha256::digest(checked.label.custom_id.as_bytes())[..16].try_into().unwrap_or_default();
                // The line itself again (a step that stopped between its saves checks it twice) is no repeat.
                let first = *custom_ids.entry(digest).or_insert(line.0);
                (first != line.0).then(|| LineError {
                    code: "duplicate_custom_id",
                    message: format!("custom_id: repeats line {first}; each line needs its own"),
                    param: Some("custom_id".into()),
                    line: line.0,
                })
            }
            Err(error) => Some(error),
        };
        if let Some(error) = error.filter(|_| progress.errors.len() < MAX_REPORTED_ERRORS) {
            progress.errors.push(serde_json::to_value(error).unwrap_or_default());
        }
        progress.at = after;
        if Instant::now() >= deadline {
            let digests = custom_ids.iter().flat_map(|(digest, line)| digest.iter().copied().chain(line.to_le_bytes()));
            let saved = objects.put(&custom_ids_key(&batch.id), one_chunk(digests.collect())).await;
            saved.map_err(store_error)?;
            return Ok(None);
        }
    }
    Ok(Some(progress.errors.is_empty()))
}

/// The custom_ids a previous step of the check saw, with their lines.
async fn read_custom_ids(objects: &dyn ObjectStore, id: &str) -> Result<HashMap<[u8; 16], u64>, StoreError> {
    let bytes = read_all(objects, &custom_ids_key(id)).await?.unwrap_or_default();
    let entries = bytes.chunks_exact(24).filter_map(|entry| {
        let (digest, line) = entry.split_at(16);
        Some((digest.try_into().ok()?, u64::from_le_bytes(line.try_into().ok()?)))
    });
    Ok(entries.collect())
}

/// Sends the batch's lines from `at` on to their tiers' queues, `LINES_PER_SEND` at a time with `SENDS_IN_FLIGHT`
/// sends at once, until the file ends (true) or `deadline` (false; `at` is where the next step goes on). A line
/// sent again by the next step (its send was in flight) runs once: its request id is its own. Each line is made
/// into its request again as it is read, so a large file is never held in memory.
async fn enqueue(
    state: &AppState,
    objects: &dyn ObjectStore,
    batch: &Batch,
    at: &mut Position,
    deadline: Instant,
) -> Result<bool, OpenAiError> {
    let key = line_key(objects, &batch.id).await.map_err(|e| OpenAiError::store(&e))?;
    let key = key.as_deref();
    let (_, chunks) = input(objects, batch, at.offset).await?;
    let start = at.index;
    let mut sends = batch_input::lines_from(chunks, *at)
        .enumerate()
        .chunks(LINES_PER_SEND)
        .map(|lines| async move {
            let mut by_tier: HashMap<Tier, Vec<String>> = HashMap::new();
            let mut after = None;
            for (offset, line) in lines {
                let (line, position) =
                    line.map_err(|e| OpenAiError::store(&StoreError::caused("reading the input file", e)))?;
                let index = start + u32::try_from(offset).unwrap_or(u32::MAX);
                let batch_line = BatchLine { id: batch.id.clone(), line: index };
                let checked = batch_input::check(
                    &line,
                    batch.endpoint(),
                    &state.openai.models,
                    (batch_line, key),
                    batch.expires(),
                )
                .map_err(|e| OpenAiError::invalid(e.message))?;
                // Thresholds only: a classifier call per line would make a large batch wait on the classifier.
                let (tier, _) = routing::route(&checked.request, &state.dispatch.routing, None).await;
                by_tier.entry(tier).or_default().push(checked.request.to_queue_body());
                after = Some(position);
            }
            for (tier, bodies) in by_tier {
                let queue = state.dispatch.queues.get(tier).get(Priority::Batch);
                if let Some(error) = queue.send_many(&bodies).await.into_iter().find_map(Result::err) {
                    tracing::error!(batch_id = %batch.id, %tier, %error, "enqueue failed");
                    return Err(OpenAiError::queue());
                }
                let sent = Metric::count(metrics::ROUTED_REQUESTS, bodies.len() as u64);
                state.metrics.emit(&[("Tier", tier.as_str())], &[sent]);
                state.enqueued(tier).await;
            }
            Ok(after)
        })
        .buffered(SENDS_IN_FLIGHT);
    while let Some(sent) = sends.next().await {
        if let Some(after) = sent? {
            *at = after;
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Admission in steps: a step past its deadline saves where it stopped and gives up its claim, and the next goes on
    //! from there, the custom_ids already seen included; every line is enqueued once, whatever the number of steps; a
    //! cancel before admission ends the batch with no files; a deleted input file fails it saying so.

    use std::sync::Arc;

    use super::*;
    use crate::callbacks::outbound::OutboundPolicy;
    use crate::contract::tier::{Lanes, PerTier};
    use crate::local::LocalBackends;
    use crate::ports::Queue;
    use crate::router::body_budget::BodyBudget;
    use crate::router::openai::batch_record::{BatchOrder, BatchTimes, RequestCounts};
    use crate::router::openai::files;
    use crate::router::routing::RoutingConfig;
    use crate::router::state::{CallbackAcceptance, Dispatch};

    struct Admitting {
        _dir: tempfile::TempDir,
        backends: LocalBackends,
        state: AppState,
    }

    fn admitting() -> Admitting {
        let dir = tempfile::tempdir().unwrap();
        let backends = LocalBackends::open(dir.path()).unwrap();
        let lanes = |tier| -> Lanes<Arc<dyn Queue>> {
            backends.tier_lanes(tier, Duration::from_secs(30), 3).map(|q| q as Arc<dyn Queue>)
        };
        let state = AppState {
            dispatch: Dispatch {
                queues: PerTier { small: lanes(Tier::Small), large: lanes(Tier::Large) },
                routing: RoutingConfig::default(),
                classifier: None,
                wake: None,
            },
            store: backends.store.clone(),
            callbacks: CallbackAcceptance::sent_under(OutboundPolicy::default()),
            metrics: crate::infra::metrics::Emf::to_writer(std::io::sink()),
            bodies: BodyBudget::default(),
            openai: Default::default(),
            events: None,
        };
        Admitting { _dir: dir, backends, state }
    }

    /// A batch `validating` on a file of the lines whose custom_ids are `custom_ids` (blank lines between), saved
    /// with its admission ahead.
    async fn created(objects: &dyn ObjectStore, custom_ids: &[&str]) -> String {
        let text: String = custom_ids
            .iter()
            .map(|id| {
                let body = serde_json::json!({"model": "small", "prompt": "hi", "max_tokens": 4});
                let line =
                    serde_json::json!({"custom_id": id, "method": "POST", "url": "/v1/completions", "body": body});
                format!("{line}\r\n\n")
            })
            .collect();
        let file_id = crate::router::openai::ids::new("file-");
        objects.put(&files::content_key(&file_id), one_chunk(text.into_bytes())).await.unwrap();
        let batch = Batch {
            id: crate::router::openai::ids::new("batch_"),
            object: "batch".into(),
            order: BatchOrder {
                endpoint: "/v1/completions".into(),
                input_file_id: file_id,
                completion_window: "24h".into(),
                metadata: None,
            },
            status: "validating".into(),
            errors: None,
            output_file_id: None,
            error_file_id: None,
            times: BatchTimes { created_at: 0, expires_at: Utc::now().timestamp() + 3600, ..BatchTimes::default() },
            request_counts: RequestCounts::default(),
            owner: None,
        };
        begin(objects, &batch).await.unwrap();
        batch.id
    }

    /// Steps the batch `id` with deadlines already passed (each step does one line or one send, then saves and
    /// gives up its claim), one after the other as a server's `admit` does, until it needs no more: how many steps
    /// it took. Between two steps, a claim made just now keeps every step off the batch.
    async fn step_until_done(state: &AppState, objects: &dyn ObjectStore, id: &str) -> usize {
        for steps in 1..1000 {
            if !step(state, objects, id, Instant::now()).await.unwrap() {
                return steps;
            }
            let unclaimed: Progress = read_json(objects, &progress_key(id)).await.unwrap().unwrap();
            assert_eq!(unclaimed.claimed_at, 0, "a step that stops gives up its claim");
            let held = Progress { claimed_at: Utc::now().timestamp(), ..unclaimed };
            write_json(objects, &progress_key(id), &held).await.unwrap();
            assert!(!step(state, objects, id, Instant::now()).await.unwrap(), "a claim that holds keeps steps off");
            write_json(objects, &progress_key(id), &Progress { claimed_at: 0, ..held }).await.unwrap();
        }
        panic!("the admission never ended");
    }

    #[tokio::test]
    async fn a_check_cut_into_steps_still_finds_a_custom_id_seen_steps_before() {
        let Admitting { state, backends, _dir } = admitting();
        let objects = backends.store.as_ref() as &dyn ObjectStore;
        let id = created(objects, &["a", "b", "c", "b"]).await;
        assert!(step_until_done(&state, objects, &id).await >= 4, "one line a step");
        let batch = find(objects, &Caller::default(), &id).await.unwrap();
        assert_eq!(batch.status, "failed");
        let errors = batch.errors.unwrap();
        assert_eq!(errors["data"][0]["code"], "duplicate_custom_id", "{errors}");
        assert_eq!(errors["data"][0]["line"], 7, "the 4th line, blank lines counted: {errors}");
        assert!(errors["data"][0]["message"].as_str().unwrap().contains("repeats line 3"), "{errors}");
        assert!(read_all(objects, &progress_key(&id)).await.unwrap().is_none(), "nothing kept once it ended");
        assert!(read_all(objects, &custom_ids_key(&id)).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn an_admission_cut_into_steps_enqueues_every_line_once() {
        let Admitting { state, backends, _dir } = admitting();
        let objects = backends.store.as_ref() as &dyn ObjectStore;
        let custom_ids: Vec<String> = (0..250).map(|i| format!("req-{i}")).collect();
        let id = created(objects, &custom_ids.iter().map(String::as_str).collect::<Vec<_>>()).await;
        let steps = step_until_done(&state, objects, &id).await;
        assert!(steps > 250, "a line a step checked, then a send a step: {steps}");
        let batch = find(objects, &Caller::default(), &id).await.unwrap();
        assert_eq!((batch.status.as_str(), batch.request_counts.total), ("in_progress", 250));
        let queue = backends.lane_queue(Tier::Small, Priority::Batch, Duration::from_secs(30), 3);
        let mut lines = Vec::new();
        while let Ok(messages) = queue.receive(10, Duration::ZERO).await
            && !messages.is_empty()
        {
            lines.extend(
                messages.iter().map(|m| serde_json::from_str::<Value>(&m.body).unwrap()["batch"]["line"].clone()),
            );
        }
        let mut lines: Vec<u64> = lines.iter().filter_map(Value::as_u64).collect();
        lines.sort_unstable();
        assert_eq!(lines, (0..250).collect::<Vec<u64>>(), "each line once, in a batch of sends cut three times");
    }

    #[tokio::test]
    async fn a_batch_canceled_before_its_lines_were_admitted_ends_cancelled_with_no_files() {
        let Admitting { state, backends, _dir } = admitting();
        let objects = backends.store.as_ref() as &dyn ObjectStore;
        let id = created(objects, &["a", "b", "c"]).await;
        let mut batch = find(objects, &Caller::default(), &id).await.unwrap();
        batch_lifecycle::cancel(objects, &mut batch).await.unwrap();
        let ended = batch_lifecycle::refresh(&state, objects, batch).await.unwrap();
        assert_eq!(ended.status, "cancelled");
        assert_eq!((ended.output_file_id, ended.error_file_id), (None, None), "nothing ran: no file");
        assert!(!step(&state, objects, &id, Instant::now() + STEP).await.unwrap(), "nothing more to admit");
        assert!(read_all(objects, &progress_key(&id)).await.unwrap().is_none());
        let queue = backends.lane_queue(Tier::Small, Priority::Batch, Duration::from_secs(30), 3);
        assert!(queue.receive(10, Duration::ZERO).await.unwrap().is_empty(), "no line was enqueued");
    }

    #[tokio::test]
    async fn a_batch_whose_input_file_is_deleted_while_it_is_admitted_fails_saying_so() {
        let Admitting { state, backends, _dir } = admitting();
        let objects = backends.store.as_ref() as &dyn ObjectStore;
        let id = created(objects, &["a", "b"]).await;
        let batch = find(objects, &Caller::default(), &id).await.unwrap();
        objects.delete(&files::content_key(&batch.order.input_file_id)).await.unwrap();
        assert!(!step(&state, objects, &id, Instant::now() + STEP).await.unwrap());
        let failed = find(objects, &Caller::default(), &id).await.unwrap();
        assert_eq!(failed.status, "failed");
        assert_eq!(failed.errors.unwrap()["data"][0]["code"], "input_file_deleted");
        assert!(read_all(objects, &progress_key(&id)).await.unwrap().is_none(), "nothing left to resume");
    }
}
