//! An API failure of the gpuinfer API (outside /v1): its status and the `{"error": "<field>: <what is wrong>"}`
//! body.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::contract::error_body;
use crate::contract::request::RequestError;
use crate::contract::request_id::RequestId;
use crate::ports::StoreError;

/// An API failure: its status code and the `{"error": "<field>: <what is wrong>"}` body.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(super) status: StatusCode,
    pub(super) message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into() }
    }

    pub(super) fn queue_unavailable() -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "queue: unavailable, retry later")
    }

    pub(super) fn store_unavailable(request_id: RequestId, error: &StoreError) -> Self {
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
        let body = Json(error_body::plain(&self.message));
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            return (self.status, [(header::RETRY_AFTER, "1")], body).into_response();
        }
        (self.status, body).into_response()
    }
}
