//! The Batches API's handlers. POST /v1/batches answers at once with the batch `validating`, its lines then checked
//! (all or nothing) and enqueued by `batch_admission`; GET /v1/batches/{id} and cancel answer it brought up to date
//! (`batch_lifecycle`); GET /v1/batches lists the caller's.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use chrono::{Duration, Utc};
use serde_json::{Map, Value};

use super::batch_admission;
use super::batch_input::Endpoint;
use super::batch_lifecycle::{self, refresh};
use super::batch_record::{Batch, BatchOrder, BatchTimes, PREFIX, RequestCounts, find, line_key_key, new_line_key};
use super::error::OpenAiError;
use super::files::{self, ListQuery};
use super::ids;
use super::objects::{CallerObjects, metadata};
use super::owner::Owned;
use super::project_index;
use crate::infra::runtime::running_on_lambda;
use crate::router::state::AppState;

/// The only completion window OpenAI offers.
const COMPLETION_WINDOW: &str = "24h";
const WINDOW: Duration = Duration::hours(24);

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
    mine: CallerObjects,
    body: Bytes,
) -> Result<Json<Batch>, OpenAiError> {
    let objects = mine.objects();
    let ask = read_ask(&body)?;
    let input =
        files::find(objects, &mine.caller, &ask.input_file_id).await.map_err(|error| match error.is_not_found() {
            true => OpenAiError::invalid_param(
                "input_file_id",
                format!("input_file_id: no file {:?} (POST /v1/files)", ask.input_file_id),
            ),
            false => error,
        })?;
    let created = Utc::now();
    let batch = Batch {
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
        owner: mine.caller.project.clone(),
    };
    objects.put_if_absent(&line_key_key(&batch.id), &new_line_key()).await.map_err(|e| OpenAiError::store(&e))?;
    batch_admission::begin(objects, &batch).await?;
    project_index::add(objects, PREFIX, batch.owner(), &batch.id).await.map_err(|e| OpenAiError::store(&e))?;
    tracing::info!(batch_id = %batch.id, endpoint = %batch.order.endpoint, "batch created: admitting its lines");
    // A server goes on once it answered; a Lambda function is frozen, and the upkeep admits the batch.
    if !running_on_lambda() {
        let id = batch.id.clone();
        tokio::spawn(async move {
            if let Ok(objects) = super::objects::objects(&state) {
                batch_admission::admit(&state, objects, &id).await;
            }
        });
    }
    Ok(Json(batch))
}

/// GET /v1/batches/{id}: the batch, brought up to date (and finished, once every line has ended).
pub(crate) async fn retrieve(
    State(state): State<Arc<AppState>>,
    mine: CallerObjects,
    Path(id): Path<String>,
) -> Result<Json<Batch>, OpenAiError> {
    let objects = mine.objects();
    let batch = find(objects, &mine.caller, &id).await?;
    Ok(Json(refresh(&state, objects, batch).await?))
}

/// POST /v1/batches/{id}/cancel: lines not yet run are dropped; what finished is kept in the output.
pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    mine: CallerObjects,
    Path(id): Path<String>,
) -> Result<Json<Batch>, OpenAiError> {
    let objects = mine.objects();
    let mut batch = find(objects, &mine.caller, &id).await?;
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
pub(crate) async fn list(mine: CallerObjects, Query(query): Query<ListQuery>) -> Result<Json<Value>, OpenAiError> {
    let cursor = query.cursor(20, 100)?;
    Ok(Json(files::page(mine.objects(), (PREFIX, &mine.caller), cursor, |_: &Batch| true).await?))
}
