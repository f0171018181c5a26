//! What every object of the OpenAI API (file, upload, batch, response) shares: the store that keeps it and who asks
//! for it (`CallerObjects`, what a `/v1` handler starts from), its `created_at` clock, its `metadata` as a client may
//! send it.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde_json::{Map, Value};

use super::error::OpenAiError;
use crate::contract::labels::check_metadata;
use crate::ports::{ObjectStore, ResultStore};
use crate::router::api_keys::Caller;
use crate::router::state::AppState;

/// What a `/v1` handler on stored objects starts from: the object store, refused here with 501 where results go to
/// a queue, and the caller, whose project owns what the request makes and bounds what it may see.
pub(crate) struct CallerObjects {
    store: Arc<dyn ResultStore>,
    pub(crate) caller: Caller,
}

impl CallerObjects {
    /// The object store, known to exist since the request was extracted.
    pub(crate) fn objects(&self) -> &dyn ObjectStore {
        self.store.objects().unwrap_or_else(|| unreachable!("a store without objects is refused at extraction"))
    }
}

impl FromRequestParts<Arc<AppState>> for CallerObjects {
    type Rejection = OpenAiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, OpenAiError> {
        objects(state)?;
        // The API-key guard gives every request it lets through a caller; a route without it answers nothing.
        let caller = parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            OpenAiError::refused(StatusCode::INTERNAL_SERVER_ERROR, "this route is not behind the API-key guard")
        })?;
        Ok(CallerObjects { store: Arc::clone(&state.store), caller })
    }
}

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
