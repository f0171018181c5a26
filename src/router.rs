//! The HTTP API (`app(state) -> axum::Router`): POST /infer, GET /results/{id}, GET /healthz.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use lambda_http::request::LambdaRequest;
use serde_json::json;
use uuid::Uuid;

use crate::metrics::{self, Emf, Metric};
use crate::outcome;
use crate::ports::{Classifier, Queue, ResultStore};
use crate::request::{InferenceRequest, MAX_REQUEST_BYTES, RequestError, RequestId, shorten};
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
        .fallback(no_such_endpoint)
        .method_not_allowed_fallback(method_not_allowed)
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
    body: Body,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    check_content_type(&headers)?;
    let body = read_body(&headers, body).await?;
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

/// The whole body, refused with 413 as soon as it is known to exceed the limit: at once when Content-Length
/// says so, else when the bytes read pass it. An empty body gets its own message.
async fn read_body(headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("body: larger than the {MAX_REQUEST_BYTES} byte limit"))
    };
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_REQUEST_BYTES as u64) {
        return Err(too_large());
    }
    let bytes = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.is::<LengthLimitError>() => return Err(too_large()),
        Err(error) => return Err(ApiError::new(StatusCode::BAD_REQUEST, format!("body: could not be read ({error})"))),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "body: empty; send a JSON request object"));
    }
    Ok(bytes)
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

async fn result(
    State(state): State<Arc<AppState>>,
    request_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let must_be_a_uuid = || ApiError::new(StatusCode::BAD_REQUEST, "requestId: must be a UUID");
    let Path(request_id) = request_id.map_err(|_| must_be_a_uuid())?;
    let request_id = Uuid::parse_str(&request_id).map_err(|_| must_be_a_uuid())?;
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

const ENDPOINTS: &str = "POST /infer, GET /results/{requestId}, GET /healthz";

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

/// An API Gateway event made safe for lambda_http's conversion to an HTTP request. API Gateway passes the
/// query string as the client sent it, and a character a URI may not hold (`"`, `{`, `|`, non-ASCII…) makes
/// that conversion panic, which the client sees as a 500. Such characters are percent-encoded instead, so
/// the request reaches the handlers and gets their answer.
pub fn lambda_event(mut event: LambdaRequest) -> LambdaRequest {
    if let LambdaRequest::ApiGatewayV2(request) = &mut event
        && let Some(query) = &mut request.raw_query_string
    {
        *query = uri_safe(query);
    }
    event
}

/// `text` with every byte a URI query may not hold percent-encoded.
fn uri_safe(text: &str) -> String {
    const KEPT: &[u8] = b"-._~!$&'()*+,;=:@/?%";
    let mut safe = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || KEPT.contains(&byte) {
            safe.push(char::from(byte));
        } else {
            safe.push_str(&format!("%{byte:02X}"));
        }
    }
    safe
}
