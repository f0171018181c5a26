//! GET and DELETE /results/{requestId}: a request's document, and its cancel.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::contract::outcome::{self, Ending};
use crate::contract::request_id::RequestId;
use crate::ports::{PutOutcome, StoreError};
use crate::router::acceptance;
use crate::router::api_error::ApiError;
use crate::router::state::AppState;

/// The requestId of a /results path; a path that is not even text is refused the same way.
fn parse_request_id(path: Result<Path<String>, PathRejection>) -> Result<RequestId, ApiError> {
    let must_be_a_uuid = || ApiError::new(StatusCode::BAD_REQUEST, "requestId: must be a UUID v4");
    let Path(text) = path.map_err(|_| must_be_a_uuid())?;
    RequestId::parse(&text).ok_or_else(must_be_a_uuid)
}

pub(super) async fn result(
    State(state): State<Arc<AppState>>,
    request_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let request_id = parse_request_id(request_id)?;
    match state.store.get(request_id).await {
        Ok(Some(document)) => Ok(document_response(StatusCode::OK, document)),
        Ok(None) => Ok((StatusCode::NOT_FOUND, Json(outcome::pending(request_id))).into_response()),
        Err(error) => Err(ApiError::store_unavailable(request_id, &error)),
    }
}

/// Cancels a request that has no document yet by storing a `canceled` one: first writer wins, so the worker
/// either finds it before it runs the request, or sees it appear while it runs and aborts the engine call.
/// 200 with the canceled document (also when it was canceled before); 409 with the status of a request that
/// already finished.
pub(super) async fn cancel(
    State(state): State<Arc<AppState>>,
    request_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let request_id = parse_request_id(request_id)?;
    let unavailable = |error: StoreError| ApiError::store_unavailable(request_id, &error);
    let mut existing = state.store.get(request_id).await.map_err(unavailable)?;
    if existing.is_none() {
        match acceptance::holder(state.store.as_ref(), request_id).await.map_err(unavailable)? {
            Some(holder) if holder == request_id => {}
            holder => return Ok(nothing_to_cancel(request_id, holder)),
        }
    }
    if existing.is_none() {
        let document = outcome::canceled(request_id);
        match state.store.put_if_absent(request_id, document.to_string().as_bytes()).await.map_err(unavailable)? {
            PutOutcome::Created => {
                tracing::info!(%request_id, "request canceled");
                return Ok((StatusCode::OK, Json(document)).into_response());
            }
            PutOutcome::AlreadyExists => existing = state.store.get(request_id).await.map_err(unavailable)?,
        }
    }
    let Some(document) = existing else {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "results: store unavailable, retry later"));
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

fn document_response(status: StatusCode, document: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], document).into_response()
}
