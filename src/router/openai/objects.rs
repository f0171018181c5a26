//! What every object of the OpenAI API (file, upload, batch, response) shares: the store that keeps it, its
//! `created_at` clock, its `metadata` as a client may send it.

use axum::http::StatusCode;
use serde_json::{Map, Value};

use super::error::OpenAiError;
use crate::contract::labels::check_metadata;
use crate::ports::ObjectStore;
use crate::router::state::AppState;

/// The object store behind the API, or the error that says why there is none (results go to a queue).
pub(crate) fn objects(state: &AppState) -> Result<&dyn ObjectStore, OpenAiError> {
    state.store.objects().ok_or_else(|| {
        OpenAiError::refused(
            StatusCode::NOT_IMPLEMENTED,
            "the Files, Batches and Responses API keep their objects beside the results: set OUTPUT_DESTINATION to an S3 bucket or a \
                  folder, not a queue",
        )
    })
}

/// An object's `metadata` as a client sent it (`contract::request::check_metadata`'s bounds); absent or null is
/// none.
pub(crate) fn metadata(value: Option<Value>) -> Result<Option<Map<String, Value>>, OpenAiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value) => check_metadata(value)
            .map(Some)
            .map_err(|why| OpenAiError::invalid_param("metadata", format!("metadata: {why}"))),
    }
}

/// Seconds since the Unix epoch, as OpenAI's objects count time.
pub(crate) fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}
