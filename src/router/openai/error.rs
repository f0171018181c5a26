//! The OpenAI API's errors, in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::contract::error_body;
use crate::infra::error_chain::describe;
use crate::ports::StoreError;

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`. Its fields are open to the
/// API's modules, whose tests read them.
#[derive(Debug)]
pub(crate) struct OpenAiError {
    pub(super) status: StatusCode,
    pub(super) message: String,
    pub(super) param: Option<String>,
    pub(super) code: Option<&'static str>,
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

    pub(crate) fn store(error: &StoreError) -> Self {
        tracing::error!(%error, "Batch API store call failed");
        OpenAiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the file and batch store is unavailable; retry later".into(),
            param: None,
            code: None,
        }
    }

    pub(crate) fn queue() -> Self {
        OpenAiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the queue is unavailable; retry later".into(),
            param: None,
            code: None,
        }
    }

    /// A multipart form that could not be read, saying why (a body cut for falling behind its pace says so).
    pub(crate) fn unreadable_form(error: &axum::extract::multipart::MultipartError) -> Self {
        OpenAiError::invalid(format!("body: not a readable multipart/form-data upload ({})", describe(error)))
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
