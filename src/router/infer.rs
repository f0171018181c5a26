//! POST /infer and the bulk submit (POST /infer/batch): validate, route, admit the id, enqueue, answer 202 (or, with
//! `?wait=N` on POST /infer, 200 with the result document when it is stored within N seconds).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use chrono::Utc;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::contract::request::{InferenceRequest, Intake, MAX_REQUEST_BYTES, RequestError};
use crate::contract::request_id::RequestId;
use crate::contract::tier::{Priority, Tier};
use crate::infra::metrics::{self, Metric};
use crate::ports::{Queue, StoreError};
use crate::router::acceptance;
use crate::router::acceptance::Admission;
use crate::router::api_error::ApiError;
use crate::router::json_body::read_body;
use crate::router::result_wait;
use crate::router::routing;
use crate::router::routing::Reason;
use crate::router::state::AppState;

/// Most requests in one bulk submit (POST /infer/batch).
pub(crate) const MAX_BULK_REQUESTS: usize = 100;
/// Largest bulk submit body (under Lambda's 6 MB invocation payload).
pub(crate) const MAX_BULK_BODY_BYTES: usize = 5 * 1024 * 1024;

/// A validated request and the body its queue gets.
pub(super) struct Admitted {
    pub(super) request: InferenceRequest,
    pub(super) body: String,
}

/// The operator's rules a valid request must also meet: an accepted callback URL, a queue body within limits.
pub(super) fn admit(state: &AppState, request: InferenceRequest) -> Result<Admitted, RequestError> {
    if let Some(problem) = request.route.and_then(|tier| state.dispatch.routing.refuses(tier)) {
        return Err(RequestError::Invalid { field: "route".into(), problem });
    }
    if request.callback_url.is_some() && !state.callbacks.sent {
        let problem = "no callback can be sent: no webhook secret is configured to sign it (gpuinfer dev \
                       --webhook-secret, or WEBHOOK_SECRET); configure one, or leave callbackUrl out and poll";
        return Err(RequestError::Invalid { field: "callbackUrl".into(), problem: problem.into() });
    }
    if let Some(url) = &request.callback_url {
        let refused = reqwest::Url::parse(url).ok().and_then(|url| state.callbacks.policy.check_url(&url).err());
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

/// Logs and counts a request its queue took, and wakes its tier if it has no task.
pub(super) async fn accepted(state: &AppState, request: &InferenceRequest, tier: Tier, reason: Reason) {
    tracing::info!(request_id = %request.request_id, %tier, priority = %request.priority, reason = reason.as_str(), chars = request.input.char_count(), max_tokens = request.sampling.max_tokens, deadline = ?request.deadline, "request accepted");
    let mut counted = vec![Metric::count(metrics::ROUTED_REQUESTS, 1)];
    if reason == Reason::ClassifierFallback {
        counted.push(Metric::count(metrics::CLASSIFIER_FALLBACKS, 1));
    }
    state.metrics.emit(&[("Tier", tier.as_str())], &counted);
    state.enqueued(tier).await;
}

pub(super) fn lane(state: &AppState, tier: Tier, priority: Priority) -> &dyn Queue {
    state.dispatch.queues.get(tier).get(priority).as_ref()
}

pub(super) async fn infer(
    State(state): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let wait = wait(query.as_deref(), state.openai.result_wait)?;
    let (body, _held) = read_body(&state, &headers, body, MAX_REQUEST_BYTES).await?;
    let request = InferenceRequest::parse(&body, Intake::Api(Utc::now()))?;
    let sent = acceptance::Sent::of(&crate::contract::request::parse_json(&body).unwrap_or_default());
    let Admitted { request, body } = admit(&state, request)?;
    let (tier, reason) = routing::route(&request, &state.dispatch.routing, state.dispatch.classifier.as_deref()).await;
    let id = request.request_id;
    let admission = acceptance::admit(state.store.as_ref(), id, &sent, tier).await;
    let tier = match admission.map_err(|error| ApiError::store_unavailable(id, &error))? {
        Admission::New => tier,
        Admission::Retry(tier) => return answer(&state, id, tier, wait).await,
        Admission::Reused { status } => return Ok(reused(id, &status)),
    };
    if let Err(error) = lane(&state, tier, request.priority).send(&body).await {
        tracing::error!(request_id = %id, %tier, %error, "enqueue failed");
        forget(&state, id).await;
        return Err(ApiError::queue_unavailable());
    }
    accepted(&state, &request, tier, reason).await;
    answer(&state, id, tier, wait).await
}

/// `?wait=N` on POST /infer: whole seconds, at most the configured bound (`RESULT_WAIT_SECONDS`); other query
/// parameters are ignored, as before.
fn wait(query: Option<&str>, bound: Duration) -> Result<Option<Duration>, ApiError> {
    let Some(value) = query.into_iter().flat_map(|q| q.split('&')).find_map(|pair| pair.strip_prefix("wait=")) else {
        return Ok(None);
    };
    let seconds = value.parse::<u64>().ok().filter(|&seconds| seconds <= bound.as_secs()).ok_or_else(|| {
        let limit = bound.as_secs();
        ApiError::new(StatusCode::BAD_REQUEST, format!("wait: whole seconds from 0 to {limit} (RESULT_WAIT_SECONDS)"))
    })?;
    Ok((seconds > 0).then(|| Duration::from_secs(seconds)))
}

/// The answer to an accepted request: 202, or with `wait`, 200 and its result document once stored within it.
async fn answer(
    state: &AppState,
    id: RequestId,
    tier: Tier,
    wait: Option<Duration>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if let Some(wait) = wait {
        let stored = result_wait::document(state.store.as_ref(), id, wait).await;
        let stored = stored.map_err(|error| ApiError::store_unavailable(id, &error))?;
        if let Some(document) = stored.and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok()) {
            return Ok((StatusCode::OK, Json(document)));
        }
    }
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
    if let Err(error) = acceptance::forget(state.store.as_ref(), request_id).await {
        tracing::error!(%request_id, %error, "could not drop the acceptance of a request that was not enqueued");
    }
}

/// A bulk submit's entry that passed validation, routed to its tier, and what its id means.
struct Routed {
    index: usize,
    admitted: Admitted,
    tier: Tier,
    reason: Reason,
    admission: Result<Admission, StoreError>,
}

/// Up to 100 requests at once: each is validated, routed and answered on its own (`results[i]` answers
/// entry i), and each lane's share goes to its queue in batches. 202 when every entry was queued, else 207.
pub(super) async fn infer_bulk(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (body, held) = read_body(&state, &headers, body, MAX_BULK_BODY_BYTES).await?;
    let entries = bulk_entries(&body)?;
    drop((body, held)); // parsed: the raw bytes are not kept while the entries are routed and queued
    let now = Utc::now();
    let mut answers = vec![Value::Null; entries.len()];
    let mut seen = HashSet::new();
    let mut routing = JoinSet::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let sent = acceptance::Sent::of(&entry);
        let admitted = InferenceRequest::from_value(entry, Intake::Api(now))
            .and_then(|request| match seen.insert(request.request_id.canonical()) {
                true => Ok(request),
                false => Err(RequestError::Invalid {
                    field: "requestId".into(),
                    problem: "repeats an earlier entry of this batch (ids that differ only in case are one id)".into(),
                }),
            })
            .and_then(|request| admit(&state, request));
        match admitted {
            Ok(admitted) => {
                let state = Arc::clone(&state);
                routing.spawn(async move {
                    let (tier, reason) = routing::route(
                        &admitted.request,
                        &state.dispatch.routing,
                        state.dispatch.classifier.as_deref(),
                    )
                    .await;
                    let id = admitted.request.request_id;
                    let admission = acceptance::admit(state.store.as_ref(), id, &sent, tier).await;
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
                let error = &answer["error"];
                json!({ "index": index, "status": code.as_u16(), "requestId": id, "holderStatus": status, "error": error })
            }
            Err(error) => {
                let error = ApiError::store_unavailable(id, error);
                json!({ "index": index, "status": error.status.as_u16(), "requestId": id, "error": error.message })
            }
        };
    }
    for ((tier, priority), mut group) in by_lane {
        let bodies: Vec<String> = group.iter_mut().map(|routed| std::mem::take(&mut routed.admitted.body)).collect();
        let outcomes = lane(&state, tier, priority).send_many(&bodies).await;
        for (Routed { index, admitted, reason, .. }, outcome) in group.into_iter().zip(outcomes) {
            let id = admitted.request.request_id;
            answers[index] = match outcome {
                Ok(()) => {
                    accepted(&state, &admitted.request, tier, reason).await;
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

/// The entries of a bulk submit's body: a JSON array of 1 to 100 requests.
fn bulk_entries(body: &[u8]) -> Result<Vec<Value>, ApiError> {
    let entries = match crate::contract::request::parse_json(body) {
        Ok(Value::Array(entries)) => entries,
        Ok(_) => return Err(ApiError::new(StatusCode::BAD_REQUEST, "body: must be a JSON array of requests")),
        Err(e) => return Err(ApiError::new(StatusCode::BAD_REQUEST, format!("body: not valid JSON ({e})"))),
    };
    if entries.is_empty() || entries.len() > MAX_BULK_REQUESTS {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("body: give 1 to {MAX_BULK_REQUESTS} requests, got {}", entries.len()),
        ));
    }
    Ok(entries)
}
