//! The OpenAI-compatible API beside the pipeline's own, under `/v1`: Files, Uploads, Batches, Responses and Models,
//! in OpenAI's shapes and error format, so OpenAI's clients work by changing their base URL.
//!
//! - `files`: the Files API; `uploads`: the Uploads API (large files in parts), `upload_parts`: its parts and their
//!   bounds; `jsonl_check`: the checks an uploaded batch input passes as it streams in; `expires_after`: a file's
//!   expiry as a client asks for it; `expiry`: how long each prefix is kept, the sweep that ends what is due
//! - `batches`: the Batches API's handlers; `batch_admission`: a new batch's lines checked and enqueued in steps that
//!   resume; `batch_lifecycle`: a batch brought up to date, finished,
//!   canceled or expired; `batch_record`: a batch as stored; `batch_input`: input lines → pipeline requests;
//!   `batch_output`: the output and error files; `models`: model → tier, GET /v1/models; `ids`: object ids
//! - `responses`: the Responses API (background mode) on the pipeline; `response_input`: a create's body → pipeline
//!   request; `response_record`: what is kept of a response, its id; `response_object`: the Response object;
//!   `response_shape`: Responses' shapes of formats, tools and function-call items
//! - `unserved`: the OpenAI endpoints refused with what would serve them (synchronous completions, embeddings)
//! - `upkeep`: what runs with no client asking (running batches finished, events due sent)
//! - `owner`: the project each stored object belongs to, and who sees it (each key its own project's); `objects`:
//!   what every object shares (its store, `created_at`, `metadata`); `error`: errors in OpenAI's shape;
//!   `project_index`: each project's list of its files and batches
//! - `settings`: how the API is set up (models' tiers, result waits, large downloads, API keys)

pub(crate) mod batch_admission;
pub(crate) mod batch_input;
pub(crate) mod batch_lifecycle;
pub(crate) mod batch_output;
pub(crate) mod batch_record;
pub(crate) mod batches;
pub(crate) mod error;
pub(crate) mod expires_after;
pub(crate) mod expiry;
pub(crate) mod files;
pub(crate) mod ids;
pub(crate) mod jsonl_check;
pub(crate) mod models;
pub(crate) mod objects;
pub(crate) mod owner;
pub(crate) mod project_index;
pub(crate) mod response_input;
pub(crate) mod response_object;
pub(crate) mod response_record;
pub(crate) mod response_shape;
pub(crate) mod responses;
pub(crate) mod settings;
pub(crate) mod unserved;
pub(crate) mod upkeep;
pub(crate) mod upload_parts;
pub(crate) mod uploads;

pub use settings::LAMBDA_DOWNLOAD_LIMIT;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{get, post};

use crate::router::state::AppState;

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
        .route("/v1/chat/completions", post(unserved::completions))
        .route("/v1/completions", post(unserved::completions))
        .route("/v1/embeddings", post(unserved::embeddings))
        .route_layer(axum::middleware::from_fn(utf8_only))
}

/// A body in another charset than UTF-8 is refused (415, OpenAI's shape) before any `/v1` handler reads it.
async fn utf8_only(request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    match crate::router::json_body::foreign_charset(request.headers()) {
        Some(refused) => axum::response::IntoResponse::into_response(error::OpenAiError::refused(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            refused,
        )),
        None => next.run(request).await,
    }
}
