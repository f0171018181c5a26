//! The HTTP API (`app(state) -> axum::Router`): POST /infer, GET /results/{id}, GET /healthz.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use uuid::Uuid;

use crate::metrics::{self, Emf, Metric};
use crate::outcome;
use crate::ports::{Classifier, Queue, ResultStore};
use crate::request::{InferenceRequest, MAX_REQUEST_BYTES, RequestError, RequestId};
use crate::routing::{self, PerTier, Reason, RoutingConfig};

/// Everything the handlers share.
pub struct AppState {
    pub queues: PerTier<Arc<dyn Queue>>,
    pub store: Arc<dyn ResultStore>,
    pub routing: RoutingConfig,
    pub classifier: Option<Arc<dyn Classifier>>,
    pub metrics: Emf,
}

pub fn app(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/infer", post(infer))
        .route("/results/{request_id}", get(result))
        .route("/healthz", get(healthz))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(state)
}

/// An API failure: its status code and the `{"error": "<field>: <what is wrong>"}` body.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into() }
    }
}

impl From<RequestError> for ApiError {
    fn from(error: RequestError) -> Self {
        let status = match error {
            RequestError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            RequestError::Invalid { .. } => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

async fn infer(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    check_content_type(&headers)?;
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body: larger than the {MAX_REQUEST_BYTES} byte limit"),
            )
        } else {
            ApiError::new(rejection.status(), format!("body: {}", rejection.body_text()))
        }
    })?;
    let request = InferenceRequest::parse(&body, RequestId::Generate)?;
    let queue_body = request.to_queue_body();
    if queue_body.len() > MAX_REQUEST_BYTES {
        return Err(RequestError::TooLarge { size: queue_body.len(), limit: MAX_REQUEST_BYTES }.into());
    }
    let (tier, reason) = routing::route(&request, &state.routing, state.classifier.as_deref()).await;
    state.queues.get(tier).send(&queue_body).await.map_err(|error| {
        tracing::error!(request_id = %request.request_id, %tier, %error, "enqueue failed");
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "queue: unavailable, retry later")
    })?;
    tracing::info!(request_id = %request.request_id, %tier, reason = reason.as_str(), chars = request.input.char_count(), max_tokens = request.max_tokens, "request accepted");
    let mut counted = vec![Metric::count(metrics::ROUTED_REQUESTS, 1)];
    if reason == Reason::ClassifierFallback {
        counted.push(Metric::count(metrics::CLASSIFIER_FALLBACKS, 1));
    }
    state.metrics.emit(&[("Tier", tier.as_str())], &counted);
    Ok((StatusCode::ACCEPTED, Json(json!({ "requestId": request.request_id, "tier": tier }))))
}

/// JSON bodies only. A missing Content-Type, or the form type `curl -d` sends without `-H`, is read as JSON.
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return Ok(()) };
    let media = value.to_str().unwrap_or_default().split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if media == "application/json" || media == "application/x-www-form-urlencoded" || media.ends_with("+json") {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content-type: must be application/json, got {media:?}"),
        ))
    }
}

async fn result(State(state): State<Arc<AppState>>, Path(request_id): Path<String>) -> Result<Response, ApiError> {
    let request_id = Uuid::parse_str(&request_id)
        .map_err(|_| ApiError::new(StatusCode::BAD_REQUEST, "requestId: must be a UUID"))?;
    match state.store.get(request_id).await {
        Ok(Some(document)) => Ok(([(header::CONTENT_TYPE, "application/json")], document).into_response()),
        Ok(None) => Ok((StatusCode::NOT_FOUND, Json(outcome::pending(request_id))).into_response()),
        Err(error) => {
            tracing::error!(%request_id, %error, "result lookup failed");
            Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "results: store unavailable, retry later"))
        }
    }
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}
