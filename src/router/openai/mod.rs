//! The OpenAI-compatible API beside the pipeline's own, under `/v1`: Files, Uploads, Batches, Responses and Models,
//! in OpenAI's shapes and error format, so OpenAI's clients work by changing their base URL.
//!
//! - `files`: the Files API; `uploads`: the Uploads API (large files in parts), `upload_parts`: its parts and their
//!   bounds; `jsonl_check`: the checks an uploaded batch input passes as it streams in; `expires_after`: a file's
//!   expiry as a client asks for it; `expiry`: how long each prefix is kept, the sweep that ends what is due
//! - `batches`: the Batches API and a batch's lifecycle; `batch_input`: input lines → pipeline requests;
//!   `batch_output`: the output and error files; `models`: model → tier, GET /v1/models; `ids`: object ids
//! - `responses`: the Responses API (background mode) on the pipeline; `response_input`: a create's body → pipeline
//!   request; `response_record`: what is kept of a response, its id; `response_object`: the Response object
//! - `upkeep`: what runs with no client asking (running batches finished, events due sent)
//! - `owner`: the project each stored object belongs to, and who sees it (each key its own project's)

pub(crate) mod batch_input;
pub(crate) mod batch_output;
pub(crate) mod batch_record;
pub mod batches;
pub mod expires_after;
pub mod expiry;
pub mod files;
pub mod ids;
pub(crate) mod jsonl_check;
pub mod models;
pub(crate) mod owner;
pub(crate) mod response_input;
pub(crate) mod response_object;
pub(crate) mod response_record;
pub(crate) mod responses;
pub mod settings;
pub mod upkeep;
pub(crate) mod upload_parts;
pub mod uploads;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value};

use crate::contract::error_body;
use crate::ports::{ObjectStore, StoreError};
use crate::router::api_keys::Caller;
use crate::router::state::AppState;

/// Lambda answers with at most 6 MB (its invocation payload limit), and a file goes back base64-encoded (4 bytes for
/// every 3): downloads larger than 4 MiB (5.6 MB encoded) are redirected to S3.
pub const LAMBDA_DOWNLOAD_LIMIT: u64 = 4 * 1024 * 1024;

/// Room in a body limit for the multipart form around a file or a part.
const FORM_BYTES: usize = 1024 * 1024;

/// The `/v1` routes, with the body limits of file uploads and of upload parts (a part's own bound,
/// `upload_parts::MAX_PART_BYTES`, is met first and refused with a 400 that names it).
pub(crate) fn endpoints() -> Router<Arc<AppState>> {
    let limit = |bytes: u64| DefaultBodyLimit::max(usize::try_from(bytes).unwrap_or(usize::MAX) + FORM_BYTES);
    let (upload_limit, part_limit) = (limit(jsonl_check::MAX_FILE_BYTES), limit(upload_parts::MAX_PART_BYTES));
    Router::new()
        .route("/v1/files", post(files::create).get(files::list).layer(upload_limit))
        .route("/v1/files/{file_id}", get(files::retrieve).delete(files::delete))
        .route("/v1/files/{file_id}/content", get(files::content))
        .route("/v1/uploads", post(uploads::create))
        .route("/v1/uploads/{upload_id}/parts", post(uploads::add_part).layer(part_limit))
        .route("/v1/uploads/{upload_id}/complete", post(uploads::complete))
        .route("/v1/uploads/{upload_id}/cancel", post(uploads::cancel))
        .route("/v1/batches", post(batches::create).get(batches::list))
        .route("/v1/batches/{batch_id}", get(batches::retrieve))
        .route("/v1/batches/{batch_id}/cancel", post(batches::cancel))
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/{response_id}", get(responses::retrieve).delete(responses::delete))
        .route("/v1/responses/{response_id}/cancel", post(responses::cancel))
        .route("/v1/responses/{response_id}/input_items", get(responses::input_items))
        .route("/v1/models", get(models::list))
}

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug)]
pub(crate) struct OpenAiError {
    status: StatusCode,
    message: String,
    param: Option<String>,
    code: Option<&'static str>,
}

impl OpenAiError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        OpenAiError { status: StatusCode::BAD_REQUEST, message: message.into(), param: None, code: None }
    }

    /// Any refusal with its status (the framework's own, turned into this shape).
    pub(crate) fn refused(status: StatusCode, message: impl Into<String>) -> Self {
        OpenAiError { status, message: message.into(), param: None, code: None }
    }

    pub(crate) fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        OpenAiError { param: Some(param.to_owned()), ..Self::invalid(message) }
    }

    pub(crate) fn not_found(what: &str, id: &str) -> Self {
        OpenAiError {
            status: StatusCode::NOT_FOUND,
            message: format!("No {what} found with id '{id}'."),
            param: None,
            code: Some("not_found"),
        }
    }

    pub(crate) fn too_large(message: impl Into<String>) -> Self {
        OpenAiError { status: StatusCode::PAYLOAD_TOO_LARGE, ..Self::invalid(message) }
    }

    pub(crate) fn conflict(message: impl Into<String>) -> Self {
        OpenAiError { status: StatusCode::CONFLICT, ..Self::invalid(message) }
    }

    pub fn store(error: &StoreError) -> Self {
        tracing::error!(%error, "Batch API store call failed");
        OpenAiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the file and batch store is unavailable; retry later".into(),
            param: None,
            code: None,
        }
    }

    pub fn queue() -> Self {
        OpenAiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the queue is unavailable; retry later".into(),
            param: None,
            code: None,
        }
    }

    pub(crate) fn is_not_found(&self) -> bool {
        self.status == StatusCode::NOT_FOUND
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let body = error_body::openai(self.status.as_u16(), &self.message, self.param.as_deref(), self.code);
        (self.status, axum::Json(body)).into_response()
    }
}

/// The object store behind the API, or the error that says why there is none (results go to a queue).
pub(crate) fn objects(state: &AppState) -> Result<&dyn ObjectStore, OpenAiError> {
    state.store.objects().ok_or_else(|| OpenAiError {
        status: StatusCode::NOT_IMPLEMENTED,
        message:
            "the Files, Batches and Responses API keep their objects beside the results: set OUTPUT_DESTINATION to an S3 bucket or a \
                  folder, not a queue"
                .into(),
        param: None,
        code: None,
    })
}

/// The stored record of the `what` whose id is `id` (ids of its kind start with `prefix`) when `caller` may see it;
/// or 404, another project's exactly as one that does not exist.
pub(crate) async fn find_record<T: serde::de::DeserializeOwned + owner::Owned>(
    objects: &dyn ObjectStore,
    caller: &Caller,
    (what, prefix): (&str, &str),
    key: fn(&str) -> String,
    id: &str,
) -> Result<T, OpenAiError> {
    if !ids::is_valid(prefix, id) {
        return Err(OpenAiError::not_found(what, id));
    }
    let record = crate::ports::object_io::read_json(objects, &key(id)).await.map_err(|e| OpenAiError::store(&e))?;
    owner::visible_to(caller, record).ok_or_else(|| OpenAiError::not_found(what, id))
}

/// OpenAI's metadata limits.
const MAX_METADATA_PAIRS: usize = 16;

/// An object's `metadata` as a client sent it: at most 16 string values; absent or null is none.
pub(crate) fn metadata(value: Option<Value>) -> Result<Option<Map<String, Value>>, OpenAiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(pairs)) if pairs.len() <= MAX_METADATA_PAIRS && pairs.values().all(Value::is_string) => {
            Ok(Some(pairs))
        }
        Some(_) => Err(OpenAiError::invalid_param(
            "metadata",
            format!("metadata: an object of at most {MAX_METADATA_PAIRS} string values"),
        )),
    }
}

/// Seconds since the Unix epoch, as OpenAI's objects count time.
pub(crate) fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}
