//! GET and DELETE /results/{requestId}: a request's document, and its cancel; another project's response is
//! answered as an id never seen.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::contract::outcome::{self, Ending};
use crate::contract::request_id::RequestId;
use crate::ports::{PutOutcome, StoreError};
use crate::router::acceptance;
use crate::router::api_error::ApiError;
use crate::router::api_keys::Caller;
use crate::router::openai::response_record;
use crate::router::state::AppState;

/// The requestId of a /results path; a path that is not even text is refused the same way.
fn parse_request_id(path: Result<Path<String>, PathRejection>) -> Result<RequestId, ApiError> {
    let must_be_a_uuid = || ApiError::new(StatusCode::BAD_REQUEST, "requestId: must be a UUID v4");
    let Path(text) = path.map_err(|_| must_be_a_uuid())?;
    RequestId::parse(&text).ok_or_else(must_be_a_uuid)
}

/// Whether `caller` may not know of the request `request_id`: it is a /v1 response of another project's (with keys
/// configured, a response is its project's, here as under /v1). Any other request id is the capability of whoever
/// holds it: a random UUID v4, or a batch line's, which only the batch's project is shown.
async fn hidden_from(state: &AppState, caller: Option<&Caller>, request_id: RequestId) -> Result<bool, ApiError> {
    let (Some(caller), Some(objects)) = (caller, state.store.objects()) else { return Ok(false) };
    response_record::of_another_project(objects, caller, request_id)
        .await
        .map_err(|error| ApiError::store_unavailable(request_id, &error))
}

pub(super) async fn result(
    State(state): State<Arc<AppState>>,
    caller: Option<Extension<Caller>>,
    request_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let request_id = parse_request_id(request_id)?;
    if hidden_from(&state, caller.as_deref(), request_id).await? {
        return Ok((StatusCode::NOT_FOUND, Json(outcome::pending(request_id))).into_response());
    }
    match state.store.get(request_id).await {
        Ok(Some(document)) => Ok(document_response(StatusCode::OK, document)),
        Ok(None) => Ok((StatusCode::NOT_FOUND, Json(outcome::pending(request_id))).into_response()),
        Err(error) => Err(ApiError::store_unavailable(request_id, &error)),
    }
}

/// DELETE /results/{requestId}: the cancel (`cancel_request`). 200 with the canceled document (also when it was
/// canceled before); 409 with the status of a request that already finished.
pub(super) async fn cancel(
    State(state): State<Arc<AppState>>,
    caller: Option<Extension<Caller>>,
    request_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let request_id = parse_request_id(request_id)?;
    if hidden_from(&state, caller.as_deref(), request_id).await? {
        return Ok(nothing_to_cancel(request_id, None));
    }
    let canceled = cancel_request(&state, request_id).await;
    let document = match canceled.map_err(|error| ApiError::store_unavailable(request_id, &error))? {
        Canceled::Document(document) => document,
        Canceled::NotHeld(holder) => return Ok(nothing_to_cancel(request_id, holder)),
    };
    match Ending::read(&document) {
        Some(ending) if ending.is_canceled() => Ok(document_response(StatusCode::OK, document)),
        ending => {
            let status = ending.map_or("unknown", |e| e.status.as_str());
            let error = format!("requestId: already finished with status {status}; nothing to cancel");
            Ok((StatusCode::CONFLICT, Json(json!({ "requestId": request_id, "status": status, "error": error })))
                .into_response())
        }
    }
}

/// What a cancel leaves.
pub(crate) enum Canceled {
    /// The request's document: the canceled one the cancel stored, or the one stored before it.
    Document(Vec<u8>),
    /// No accepted request holds the id as written: none does (None), or one does in another case.
    NotHeld(Option<RequestId>),
}

/// Cancels a request that has no document yet by storing a `canceled` one: first writer wins, so the worker
/// either finds it before it runs the request, or sees it appear while it runs and aborts the engine call.
pub(crate) async fn cancel_request(state: &AppState, request_id: RequestId) -> Result<Canceled, StoreError> {
    if let Some(document) = state.store.get(request_id).await? {
        return Ok(Canceled::Document(document));
    }
    match acceptance::holder(state.store.as_ref(), request_id).await? {
        Some(holder) if holder == request_id => {}
        holder => return Ok(Canceled::NotHeld(holder)),
    }
    let document = outcome::canceled(request_id).to_string().into_bytes();
    match state.store.put_if_absent(request_id, &document).await? {
        PutOutcome::Created => {
            tracing::info!(%request_id, "request canceled");
            mark_cancels(state).await;
            Ok(Canceled::Document(document))
        }
        PutOutcome::AlreadyExists => state
            .store
            .get(request_id)
            .await?
            .map(Canceled::Document)
            .ok_or_else(|| StoreError::unavailable("the document that won over the cancel cannot be read")),
    }
}

/// 404 for a cancel of an id no accepted request holds as sent: none holds it, or one holds it in another case.
fn nothing_to_cancel(request_id: RequestId, holder: Option<RequestId>) -> Response {
    let error = match holder {
        None => "requestId: no request with this id was accepted (or its record expired); nothing to cancel".into(),
        Some(holder) => format!(
            "requestId: the accepted request holds this id as {holder} (ids that differ only in case are one id); \
             cancel it with that spelling"
        ),
    };
    (StatusCode::NOT_FOUND, Json(json!({ "requestId": request_id, "error": error }))).into_response()
}

/// Tells the workers that canceled documents were stored (the cancel mark): the one that runs a canceled request
/// then stops it within a cancel poll. A failed mark is logged: the cancel stands, and the worker finds it at its
/// next full look.
pub(crate) async fn mark_cancels(state: &AppState) {
    if let Err(error) = state.store.mark_cancels().await {
        tracing::warn!(%error, "cancel stored, but the cancel mark could not be written: a running request stops at its worker's next full look (60 s)");
    }
}

fn document_response(status: StatusCode, document: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], document).into_response()
}
