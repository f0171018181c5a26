//! The Responses API, as OpenAI's background mode: POST /v1/responses, GET and DELETE /v1/responses/{id}, POST
//! /v1/responses/{id}/cancel, GET /v1/responses/{id}/input_items. A response is a pipeline request (routed,
//! queued, run and stored as POST /infer's are; its id maps to the requestId), and a small record beside the results
//! keeps what the Response object needs besides the result document. One created without `background` is waited
//! for up to `RESULT_WAIT_SECONDS`, then answered as it stands.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use chrono::Utc;
use serde_json::{Value, json};

use super::error::OpenAiError;
use super::objects::CallerObjects;
use super::response_input::{self, Create};
use super::response_object::response_object;
use super::response_record::{Asked, ResponseRecord, find, remove, save};
use super::response_shape::{InputItem, answer_items};
use crate::callbacks::openai_events::EventType;
use crate::contract::openai_response::{Standing, Stored};
use crate::contract::outcome::Ending;
use crate::contract::request_id::RequestId;
use crate::ports::{ObjectStore, StoreError};
use crate::router::api_keys::Caller;
use crate::router::infer::{Admitted, accepted, admit, lane};
use crate::router::result_wait;
use crate::router::results::{Canceled, cancel_request};
use crate::router::routing;
use crate::router::state::AppState;

/// POST /v1/responses: the response's request enqueued, and the response, the caller's project's (queued; or,
/// without `background`, as it stands once done or once the wait is over).
pub(crate) async fn create(
    State(state): State<Arc<AppState>>,
    mine: CallerObjects,
    body: Bytes,
) -> Result<Json<Value>, OpenAiError> {
    let objects = mine.objects();
    let ask = response_input::read(&body, &state.openai.models)?;
    let context = match &ask.previous_response_id {
        Some(previous) => conversation(&state, objects, &mine.caller, previous).await?,
        None => Vec::new(),
    };
    let Create { request, record } = ask.create(context, Utc::now())?;
    let record = ResponseRecord { owner: mine.caller.project.clone(), ..record };
    if let Some(why) = request.route.and_then(|tier| state.dispatch.routing.refuses(tier)) {
        return Err(OpenAiError::invalid_param("model", format!("model: {why}")));
    }
    let Admitted { request, body } = admit(&state, request).map_err(|e| OpenAiError::too_large(e.to_string()))?;
    // The model or the thresholds: a classifier call is not worth its wait for a response.
    let (tier, reason) = routing::route(&request, &state.dispatch.routing, None).await;
    save(objects, &record).await?;
    if let Err(error) = lane(&state, tier, request.priority).send(&body).await {
        tracing::error!(response_id = %record.id, %tier, %error, "enqueue failed");
        if let Err(error) = remove(objects, &record.id).await {
            tracing::error!(response_id = %record.id, ?error, "could not remove the record of a response not enqueued");
        }
        return Err(OpenAiError::queue());
    }
    accepted(&state, &request, tier, reason).await;
    let document = match record.background {
        true => None,
        false => result_wait::document(state.store.as_ref(), request.request_id, state.openai.result_wait)
            .await
            .map_err(|e| OpenAiError::store(&e))?,
    };
    Ok(Json(response_object(&record, document.as_deref())))
}

/// The turns a response continuing `previous` reads, in order: the earlier ones `previous` continued, its input and
/// its answer. Another project's response is answered as one that does not exist; one not finished is refused.
async fn conversation(
    state: &AppState,
    objects: &dyn ObjectStore,
    caller: &Caller,
    previous: &str,
) -> Result<Vec<InputItem>, OpenAiError> {
    let (request_id, record) = find(objects, caller, previous).await?;
    let document = state.store.get(request_id).await.map_err(|e| OpenAiError::store(&e))?;
    let standing = Standing::of(document.as_deref().and_then(Stored::read));
    let (Standing::Completed(answer) | Standing::Incomplete(answer)) = &standing else {
        let why = format!(
            "previous_response_id: {previous} is {}: a response continues one that has finished (poll it first)",
            standing.status()
        );
        return Err(OpenAiError::invalid_param("previous_response_id", why));
    };
    let Asked { context, input, .. } = record.asked;
    Ok(context.into_iter().chain(input).chain(answer_items(answer)).collect())
}

/// GET /v1/responses/{id}
pub(crate) async fn retrieve(
    State(state): State<Arc<AppState>>,
    mine: CallerObjects,
    Path(id): Path<String>,
) -> Result<Json<Value>, OpenAiError> {
    let (request_id, record) = find(mine.objects(), &mine.caller, &id).await?;
    let document = state.store.get(request_id).await.map_err(|e| OpenAiError::store(&e))?;
    Ok(Json(response_object(&record, document.as_deref())))
}

/// POST /v1/responses/{id}/cancel: a background response not finished is canceled (as DELETE /results/{requestId}
/// cancels); a finished one is answered as it is.
pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    mine: CallerObjects,
    Path(id): Path<String>,
) -> Result<Json<Value>, OpenAiError> {
    let (request_id, record) = find(mine.objects(), &mine.caller, &id).await?;
    if !record.background {
        return Err(OpenAiError::invalid("Only responses created with background=true can be cancelled."));
    }
    let document = end(&state, request_id, &id).await?;
    Ok(Json(response_object(&record, Some(&document))))
}

/// DELETE /v1/responses/{id}: the response is ended as a cancel ends it, then its record and its result are
/// removed. The document of a canceled one stays (until it expires with the results), so that no worker runs it.
pub(crate) async fn delete(
    State(state): State<Arc<AppState>>,
    mine: CallerObjects,
    Path(id): Path<String>,
) -> Result<Json<Value>, OpenAiError> {
    let objects = mine.objects();
    let (request_id, record) = find(objects, &mine.caller, &id).await?;
    let document = end(&state, request_id, &id).await?;
    if !Ending::read(&document).is_some_and(|ending| ending.is_canceled()) {
        state.store.delete(request_id).await.map_err(|e| OpenAiError::store(&e))?;
    }
    remove(objects, &record.id).await?;
    tracing::info!(response_id = %record.id, "response deleted");
    Ok(Json(json!({ "id": record.id, "object": "response", "deleted": true })))
}

/// The request's document once a cancel has ended it: the canceled one, or the one stored first; its event
/// recorded (`response.cancelled` at once, not when a worker reaches the canceled request).
async fn end(state: &AppState, request_id: RequestId, id: &str) -> Result<Vec<u8>, OpenAiError> {
    let document = match cancel_request(state, request_id).await.map_err(|e| OpenAiError::store(&e))? {
        Canceled::Document(document) => document,
        Canceled::NotHeld(_) => return Err(OpenAiError::not_found("response", id)),
    };
    if let (Some(events), Some(kind)) = (&state.events, EventType::of_response(&document))
        && !events.emit(&state.store, kind, id).await
    {
        return Err(OpenAiError::store(&StoreError::unavailable("the response's event could not be recorded")));
    }
    Ok(document)
}

/// What GET /v1/responses/{id}/input_items takes.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ItemsQuery {
    after: Option<String>,
    limit: Option<usize>,
    order: Option<String>,
}

/// GET /v1/responses/{id}/input_items: the input's messages as items, newest first unless `order=asc`.
pub(crate) async fn input_items(
    mine: CallerObjects,
    Path(id): Path<String>,
    Query(query): Query<ItemsQuery>,
) -> Result<Json<Value>, OpenAiError> {
    let (_, record) = find(mine.objects(), &mine.caller, &id).await?;
    let stem = record.id.trim_start_matches("resp_");
    let mut items: Vec<Value> =
        record.asked.input.iter().enumerate().map(|(i, item)| item.listed(format!("msg_{stem}_{i}"))).collect();
    match query.order.as_deref() {
        None | Some("desc") => items.reverse(),
        Some("asc") => {}
        Some(_) => return Err(OpenAiError::invalid_param("order", "order: \"asc\" or \"desc\"")),
    }
    if let Some(after) = &query.after {
        let at = items.iter().position(|item| item["id"] == after.as_str());
        let at = at.ok_or_else(|| OpenAiError::invalid_param("after", "after: the id of an item of this response"))?;
        items.drain(..=at);
    }
    let limit = query.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(OpenAiError::invalid_param("limit", format!("limit: from 1 to 100, got {limit}")));
    }
    let has_more = items.len() > limit;
    items.truncate(limit);
    let (first_id, last_id) = (items.first().map(|i| i["id"].clone()), items.last().map(|i| i["id"].clone()));
    Ok(Json(json!({ "object": "list", "data": items, "first_id": first_id, "last_id": last_id, "has_more": has_more })))
}
