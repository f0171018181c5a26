//! The HTTP API (`app(state) -> axum::Router`): POST /infer, POST /infer/batch, GET and DELETE /results/{id},
//! GET /healthz.

pub mod acceptance;
pub mod body_budget;
pub mod openai;
pub mod routing;
pub mod state;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::Utc;
use http_body_util::BodyExt;
use lambda_http::request::LambdaRequest;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::contract::outcome::{self, Ending};
use crate::contract::request::{InferenceRequest, Intake, MAX_REQUEST_BYTES, RequestError, shorten};
use crate::contract::request_id::RequestId;
use crate::contract::tier::{Priority, Tier};
use crate::infra::metrics::{self, Metric};
use crate::ports::{PutOutcome, Queue, StoreError};
use crate::router::acceptance::Admission;
use crate::router::body_budget::Held;
use crate::router::routing::Reason;
use crate::router::state::AppState;

/// Where the local HTTP server listens unless told.
pub(crate) const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:8080";
/// Most requests in one POST /infer/batch.
pub(crate) const MAX_BATCH_REQUESTS: usize = 100;
/// Largest POST /infer/batch body (under Lambda's 6 MB invocation payload).
pub(crate) const MAX_INFER_BATCH_BODY_BYTES: usize = 5 * 1024 * 1024;

pub fn app(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/infer", post(infer))
        .route("/infer/batch", post(infer_batch))
        .route("/results/{request_id}", get(result).delete(cancel))
        .merge(crate::router::openai::routes())
        .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&state), require_api_key));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(api)
        .fallback(no_such_endpoint)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(refusals_as_json))
        .with_state(state)
}

/// Largest framework refusal text turned into JSON (they are a line or two).
const REFUSAL_TEXT_BYTES: usize = 16 * 1024;

/// Answers the framework's own refusals (a query, path or multipart body it cannot read, a body over a route's
/// limit: text/plain from axum) in the API's JSON shape, OpenAI's under /v1.
async fn refusals_as_json(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let openai = request.uri().path().starts_with("/v1/");
    let response = next.run(request).await;
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if !(status.is_client_error() || status.is_server_error()) || !content_type.is_some_and(|t| t.starts_with("text/"))
    {
        return response;
    }
    let text = match axum::body::to_bytes(response.into_body(), REFUSAL_TEXT_BYTES).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => status.canonical_reason().unwrap_or("refused").to_owned(),
    };
    refusal(openai, status, text)
}

/// A refusal in the API's JSON shape: OpenAI's error object under /v1, `{"error": "..."}` elsewhere.
fn refusal(openai: bool, status: StatusCode, text: String) -> Response {
    if openai {
        crate::router::openai::OpenAiError::refused(status, text).into_response()
    } else {
        ApiError::new(status, text).into_response()
    }
}

/// Refuses a request without the configured bearer token (401 in OpenAI's error shape, which its clients read).
async fn require_api_key(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(key) = &state.openai.api_key else {
        return next.run(request).await;
    };
    let sent = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    // The scheme is case-insensitive (RFC 9110 §11.1): "bearer" and "BEARER" are Bearer too.
    let token = sent.and_then(|v| v.split_once(' ')).filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"));
    if token.is_some_and(|(_, token)| constant_time_eq(token.trim().as_bytes(), key.as_bytes())) {
        return next.run(request).await;
    }
    let error = json!({ "error": {
        "message": "a valid API key is required: send Authorization: Bearer <the token gpuinfer was started with>",
        "type": "authentication_error", "param": null, "code": "invalid_api_key",
    }});
    (StatusCode::UNAUTHORIZED, Json(error)).into_response()
}

/// Compares two secrets in time that does not depend on where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// An API failure: its status code and the `{"error": "<field>: <what is wrong>"}` body.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into() }
    }

    fn queue_unavailable() -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "queue: unavailable, retry later")
    }

    fn store_unavailable(request_id: RequestId, error: &StoreError) -> Self {
        tracing::error!(%request_id, %error, "result store call failed");
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "results: store unavailable, retry later")
    }
}

impl From<RequestError> for ApiError {
    fn from(error: RequestError) -> Self {
        let status = match error {
            RequestError::TooLarge { .. } | RequestError::QueueMessageTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            RequestError::Invalid { .. } => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": self.message }));
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            return (self.status, [(header::RETRY_AFTER, "1")], body).into_response();
        }
        (self.status, body).into_response()
    }
}

/// A validated request and the body its queue gets.
struct Admitted {
    request: InferenceRequest,
    body: String,
}

/// The operator's rules a valid request must also meet: an accepted callback URL, a queue body within limits.
fn admit(state: &AppState, request: InferenceRequest) -> Result<Admitted, RequestError> {
    if request.callback_url.is_some() && !state.callbacks_sent {
        let problem = "no callback can be sent: no webhook secret is configured to sign it (gpuinfer dev \
                       --webhook-secret, or WEBHOOK_SECRET); configure one, or leave callbackUrl out and poll";
        return Err(RequestError::Invalid { field: "callbackUrl".into(), problem: problem.into() });
    }
    if let Some(url) = &request.callback_url {
        let refused = reqwest::Url::parse(url).ok().and_then(|url| state.callbacks.check_url(&url).err());
        if let Some(refusal) = refused {
            return Err(RequestError::Invalid { field: "callbackUrl".into(), problem: refusal.to_string() });
        }
    }
    let body = request.to_queue_body();
    if body.len() > MAX_REQUEST_BYTES {
        return Err(RequestError::QueueMessageTooLarge { queued: body.len(), limit: MAX_REQUEST_BYTES });
    }
    Ok(Admitted { request, body })
}

/// Logs and counts a request its queue took.
fn accepted(state: &AppState, request: &InferenceRequest, tier: Tier, reason: Reason) {
    tracing::info!(request_id = %request.request_id, %tier, priority = %request.priority, reason = reason.as_str(), chars = request.input.char_count(), max_tokens = request.max_tokens, deadline = ?request.deadline, "request accepted");
    let mut counted = vec![Metric::count(metrics::ROUTED_REQUESTS, 1)];
    if reason == Reason::ClassifierFallback {
        counted.push(Metric::count(metrics::CLASSIFIER_FALLBACKS, 1));
    }
    state.metrics.emit(&[("Tier", tier.as_str())], &counted);
}

fn lane(state: &AppState, tier: Tier, priority: Priority) -> &dyn Queue {
    state.queues.get(tier).get(priority).as_ref()
}

async fn infer(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (body, _held) = read_body(&state, &headers, body, MAX_REQUEST_BYTES).await?;
    let request = InferenceRequest::parse(&body, Intake::Api(Utc::now()))?;
    let fingerprint = acceptance::fingerprint(&crate::contract::request::parse_json(&body).unwrap_or_default());
    let Admitted { request, body } = admit(&state, request)?;
    let (tier, reason) = routing::route(&request, &state.routing, state.classifier.as_deref()).await;
    let id = request.request_id;
    let admission = acceptance::admit(state.store.as_ref(), id, &fingerprint, tier).await;
    match admission.map_err(|error| ApiError::store_unavailable(id, &error))? {
        Admission::New => {}
        Admission::Retry(tier) => return Ok((StatusCode::ACCEPTED, Json(json!({ "requestId": id, "tier": tier })))),
        Admission::Reused { status } => return Ok(reused(id, &status)),
    }
    if let Err(error) = lane(&state, tier, request.priority).send(&body).await {
        tracing::error!(request_id = %id, %tier, %error, "enqueue failed");
        forget(&state, id).await;
        return Err(ApiError::queue_unavailable());
    }
    accepted(&state, &request, tier, reason);
    Ok((StatusCode::ACCEPTED, Json(json!({ "requestId": id, "tier": tier }))))
}

/// 409 for a request whose id another request holds: say where that one stands and what to do.
fn reused(request_id: RequestId, status: &str) -> (StatusCode, Json<Value>) {
    let error = format!(
        "requestId: already used by another request (its status: {status}); send this one with a new requestId, or \
         none and the router makes one"
    );
    (StatusCode::CONFLICT, Json(json!({ "requestId": request_id, "status": status, "error": error })))
}

/// Drops the record of an acceptance whose enqueue failed, so that the client's retry is accepted; if even that
/// fails, the retry is answered 202 for the lost request (logged here).
async fn forget(state: &AppState, request_id: RequestId) {
    if let Err(error) = state.store.forget_acceptance(request_id).await {
        tracing::error!(%request_id, %error, "could not drop the acceptance of a request that was not enqueued");
    }
}

/// A batch entry that passed validation, routed to its tier, and what its id means.
struct Routed {
    index: usize,
    admitted: Admitted,
    tier: Tier,
    reason: Reason,
    admission: Result<Admission, StoreError>,
}

/// Up to 100 requests at once: each is validated, routed and answered on its own (`results[i]` answers
/// entry i), and each lane's share goes to its queue in batches. 202 when every entry was queued, else 207.
async fn infer_batch(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (body, held) = read_body(&state, &headers, body, MAX_INFER_BATCH_BODY_BYTES).await?;
    let entries = batch_entries(&body)?;
    drop((body, held)); // parsed: the raw bytes are not kept while the entries are routed and queued
    let now = Utc::now();
    let mut answers = vec![Value::Null; entries.len()];
    let mut seen = HashSet::new();
    let mut routing = JoinSet::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let fingerprint = acceptance::fingerprint(&entry);
        let admitted = InferenceRequest::from_value(entry, Intake::Api(now))
            .and_then(|request| match seen.insert(request.request_id) {
                true => Ok(request),
                false => Err(RequestError::Invalid {
                    field: "requestId".into(),
                    problem: "repeats an earlier entry of this batch".into(),
                }),
            })
            .and_then(|request| admit(&state, request));
        match admitted {
            Ok(admitted) => {
                let state = Arc::clone(&state);
                routing.spawn(async move {
                    let (tier, reason) =
                        routing::route(&admitted.request, &state.routing, state.classifier.as_deref()).await;
                    let id = admitted.request.request_id;
                    let admission = acceptance::admit(state.store.as_ref(), id, &fingerprint, tier).await;
                    Routed { index, admitted, tier, reason, admission }
                });
            }
            Err(error) => {
                let error = ApiError::from(error);
                answers[index] = json!({ "index": index, "status": error.status.as_u16(), "error": error.message });
            }
        }
    }
    let mut by_lane: HashMap<(Tier, Priority), Vec<Routed>> = HashMap::new();
    while let Some(done) = routing.join_next().await {
        let routed =
            done.map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("routing failed: {e}")))?;
        let (index, id) = (routed.index, routed.admitted.request.request_id);
        answers[index] = match &routed.admission {
            Ok(Admission::New) => {
                by_lane.entry((routed.tier, routed.admitted.request.priority)).or_default().push(routed);
                continue;
            }
            Ok(Admission::Retry(tier)) => json!({ "index": index, "status": 202, "requestId": id, "tier": tier }),
            Ok(Admission::Reused { status }) => {
                let (code, Json(answer)) = reused(id, status);
                json!({ "index": index, "status": code.as_u16(), "requestId": id, "error": answer["error"] })
            }
            Err(error) => {
                let error = ApiError::store_unavailable(id, error);
                json!({ "index": index, "status": error.status.as_u16(), "requestId": id, "error": error.message })
            }
        };
    }
    for ((tier, priority), mut group) in by_lane {
        let bodies: Vec<String> = group.iter_mut().map(|routed| std::mem::take(&mut routed.admitted.body)).collect();
        let outcomes = lane(&state, tier, priority).send_batch(&bodies).await;
        for (Routed { index, admitted, reason, .. }, outcome) in group.into_iter().zip(outcomes) {
            let id = admitted.request.request_id;
            answers[index] = match outcome {
                Ok(()) => {
                    accepted(&state, &admitted.request, tier, reason);
                    json!({ "index": index, "status": 202, "requestId": id, "tier": tier })
                }
                Err(error) => {
                    tracing::error!(request_id = %id, %tier, %error, "enqueue failed");
                    forget(&state, id).await;
                    let error = ApiError::queue_unavailable();
                    json!({ "index": index, "status": error.status.as_u16(), "requestId": id, "error": error.message })
                }
            };
        }
    }
    let all_queued = answers.iter().all(|answer| answer["status"] == 202);
    let status = if all_queued { StatusCode::ACCEPTED } else { StatusCode::MULTI_STATUS };
    Ok((status, Json(json!({ "results": answers }))))
}

/// The entries of a batch body: a JSON array of 1 to 100 requests.
fn batch_entries(body: &[u8]) -> Result<Vec<Value>, ApiError> {
    let entries = match crate::contract::request::parse_json(body) {
        Ok(Value::Array(entries)) => entries,
        Ok(_) => return Err(ApiError::new(StatusCode::BAD_REQUEST, "body: must be a JSON array of requests")),
        Err(e) => return Err(ApiError::new(StatusCode::BAD_REQUEST, format!("body: not valid JSON ({e})"))),
    };
    if entries.is_empty() || entries.len() > MAX_BATCH_REQUESTS {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("body: give 1 to {MAX_BATCH_REQUESTS} requests, got {}", entries.len()),
        ));
    }
    Ok(entries)
}

/// The body, once the content type and the size limit are checked.
/// The whole body after a content-type check, refused with 413 as soon as it is known to exceed `limit`: at
/// once when Content-Length says so, else when the bytes read pass it. An empty body gets its own message.
/// The bytes are held against the server's body budget until the returned `Held` is dropped; a body the budget
/// cannot take now is refused with 503 (and Retry-After) as it arrives, so bodies in flight never hold more memory
/// than the budget.
async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    mut body: Body,
    limit: usize,
) -> Result<(Bytes, Held), ApiError> {
    check_content_type(headers)?;
    let too_large =
        || ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("body: larger than the {limit} byte limit"));
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let busy = || {
        let mib = state.bodies.total() / (1024 * 1024);
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("body: the server holds as many request bodies as it may ({mib} MiB); retry later"),
        )
    };
    // Held against the budget: the declared length up front, then whatever arrives beyond it.
    let mut held = state.bodies.none();
    let mut taken = 0;
    if let Some(length) = declared {
        taken = length as usize;
        if !state.bodies.take(&mut held, taken) {
            return Err(busy());
        }
    }
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let unreadable = |error| ApiError::new(StatusCode::BAD_REQUEST, format!("body: could not be read ({error})"));
        let Ok(data) = frame.map_err(unreadable)?.into_data() else { continue };
        let total = bytes.len() + data.len();
        if total > limit {
            return Err(too_large());
        }
        if total > taken {
            if !state.bodies.take(&mut held, total - taken) {
                return Err(busy());
            }
            taken = total;
        }
        bytes.extend_from_slice(&data);
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "body: empty; send a JSON request object"));
    }
    Ok((Bytes::from(bytes), held))
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

/// The requestId of a /results path; a path that is not even text is refused the same way.
fn parse_request_id(path: Result<Path<String>, PathRejection>) -> Result<RequestId, ApiError> {
    let must_be_a_uuid = || ApiError::new(StatusCode::BAD_REQUEST, "requestId: must be a UUID v4");
    let Path(text) = path.map_err(|_| must_be_a_uuid())?;
    RequestId::parse(&text).ok_or_else(must_be_a_uuid)
}

async fn result(
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
async fn cancel(
    State(state): State<Arc<AppState>>,
    request_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let request_id = parse_request_id(request_id)?;
    let unavailable = |error: StoreError| ApiError::store_unavailable(request_id, &error);
    let mut existing = state.store.get(request_id).await.map_err(unavailable)?;
    if existing.is_none() && !acceptance::was_accepted(state.store.as_ref(), request_id).await.map_err(unavailable)? {
        let error = "requestId: no request with this id was accepted (or its record expired); nothing to cancel";
        return Ok((StatusCode::NOT_FOUND, Json(json!({ "requestId": request_id, "error": error }))).into_response());
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

fn document_response(status: StatusCode, document: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], document).into_response()
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
