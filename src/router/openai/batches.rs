//! The Batches API's handlers. POST /v1/batches checks every line of the input file (all or nothing) and starts
//! the batch; GET /v1/batches/{id} and cancel answer it brought up to date (`batch_lifecycle`); GET /v1/batches
//! lists the caller's.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use chrono::{Duration, Utc};
use futures_util::StreamExt;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::batch_input::{self, Endpoint, LineError};
use super::batch_lifecycle::{self, input, refresh, save_ended};
use super::batch_record::{Batch, BatchOrder, BatchTimes, PREFIX, RequestCounts, find, line_key_key, new_line_key};
use super::error::OpenAiError;
use super::files::{self, ListQuery};
use super::ids;
use super::objects::{metadata, objects};
use super::owner::Owned;
use crate::contract::batch_line::BatchLine;
use crate::ports::{ObjectStore, StoreError};
use crate::router::api_keys::Caller;
use crate::router::state::AppState;

/// The only completion window OpenAI offers.
const COMPLETION_WINDOW: &str = "24h";
const WINDOW: Duration = Duration::hours(24);
/// Line errors a failed batch reports at most.
const MAX_REPORTED_ERRORS: usize = 1000;

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
        order: BatchOrder {
            endpoint: ask.endpoint.as_str().into(),
            input_file_id: input.id,
            completion_window: COMPLETION_WINDOW.into(),
            metadata: ask.metadata,
        },
        status: "validating".into(),
        errors: None,
        output_file_id: None,
        error_file_id: None,
        times: BatchTimes {
            created_at: created.timestamp(),
            expires_at: (created + WINDOW).timestamp(),
            ..BatchTimes::default()
        },
        request_counts: RequestCounts::default(),
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
    batch_lifecycle::start(&state, objects, &mut batch, &key).await?;
    tracing::info!(batch_id = %batch.id, lines = batch.request_counts.total, endpoint = %batch.order.endpoint, "batch created");
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
        "validating" | "in_progress" => batch_lifecycle::cancel(objects, &mut batch).await?,
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
    let cursor = query.cursor(20, 100)?;
    let theirs = |batch: &Batch| caller.owns(batch.owner());
    Ok(Json(files::page(objects(&state)?, PREFIX, cursor, theirs).await?))
}
