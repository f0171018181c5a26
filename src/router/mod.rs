//! The HTTP API (`app(state) -> axum::Router`): POST /infer, POST /infer/batch, GET and DELETE /results/{id},
//! GET /healthz.

pub(crate) mod acceptance;
mod api_error;
pub(crate) mod api_keys;
pub(crate) mod body_budget;
mod guards;
mod infer;
mod json_body;
pub(crate) mod openai;
mod result_wait;
mod results;
pub(crate) mod routing;
pub(crate) mod state;

use std::sync::Arc;

use axum::http::{Method, StatusCode, Uri};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::contract::request::shorten;
use crate::router::api_error::ApiError;
use crate::router::guards::{refusals_as_json, require_api_key};
use crate::router::infer::{infer, infer_bulk};
use crate::router::results::{cancel, result};
use crate::router::state::AppState;

/// Where the local HTTP server listens unless told.
pub(crate) const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:8080";

pub fn app(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/infer", post(infer))
        .route("/infer/batch", post(infer_bulk))
        .route("/results/{request_id}", get(result).delete(cancel))
        .merge(crate::router::openai::endpoints())
        .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&state), require_api_key));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(api)
        .fallback(no_such_endpoint)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(refusals_as_json))
        .with_state(state)
}

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

const ENDPOINTS: &str =
    "POST /infer, POST /infer/batch, GET /results/{requestId}, DELETE /results/{requestId}, GET /healthz";

async fn no_such_endpoint(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("path: no endpoint at {} (there are {ENDPOINTS})", shorten(uri.path(), 80)),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method: {method} is not allowed on {} (there are {ENDPOINTS})", shorten(uri.path(), 80)),
    )
}
