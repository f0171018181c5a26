//! The result and error documents written to the store at `results/{requestId}.json`.

use serde::{Deserialize, Serialize};

use crate::contract::labels::Labels;
use crate::contract::request_id::RequestId;
use crate::contract::tier::Tier;

/// What the engine produced for one request (the AWS sample's `result` object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Generation {
    pub text: String,
    pub usage: Usage,
    pub finish_reason: String,
    /// The functions the model called (OpenAI's `tool_calls`, as the engine sent them); then `finishReason` is
    /// `tool_calls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// Each token's log probability (OpenAI's `logprobs` of the choice, as the engine sent it), when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// Why a request ended without a generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The engine refused the request (4xx), e.g. the prompt exceeds the context window.
    EngineRejected,
    /// Every allowed attempt failed with a transient error.
    AttemptsExhausted,
    /// The request's deadline passed before inference started; it never ran.
    Expired,
    /// The client canceled the request (DELETE /results/{requestId}) before it finished.
    Canceled,
    /// The answer is not what the response format asked for (not JSON, or not valid against its schema): the
    /// engine ignored the format, or was cut at maxTokens.
    InvalidOutput,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Success,
    Error,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Success => "success",
            Status::Error => "error",
        }
    }
}

/// The document a client reads back: `status` says whether `result` or `error` is present.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultDocument {
    #[serde(flatten)]
    pub processing: Processing,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Generation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
    pub(crate) timestamp: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The request's `user` and `metadata`, returned as sent.
    #[serde(flatten)]
    pub labels: Labels,
}

/// Facts about the processing of one message, shared by success and error documents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Processing {
    pub request_id: RequestId,
    pub tier: Tier,
    pub task_arn: String,
    pub processing_time_ms: u64,
    pub queue_wait_ms: u64,
    pub attempts: u32,
}

impl ResultDocument {
    pub(crate) fn success(p: Processing, generation: Generation, model: Option<String>) -> Self {
        Self::new(p, Status::Success, Some(generation), None, model)
    }

    pub(crate) fn failure(p: Processing, code: ErrorCode, message: String) -> Self {
        Self::new(p, Status::Error, None, Some(ErrorDetail { code, message }), None)
    }

    fn new(
        p: Processing,
        status: Status,
        result: Option<Generation>,
        error: Option<ErrorDetail>,
        model: Option<String>,
    ) -> Self {
        ResultDocument { processing: p, status, result, error, timestamp: now(), model, labels: Labels::default() }
    }

    /// The document with the request's labels (`user`, `metadata`) returned in it.
    pub(crate) fn labelled(self, labels: &Labels) -> Self {
        ResultDocument { labels: labels.clone(), ..self }
    }

    pub(crate) fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|e| unreachable!("a result document always serializes: {e}"))
    }
}

/// The body of GET /results/{id} while no document exists yet.
pub(crate) fn pending(request_id: RequestId) -> serde_json::Value {
    serde_json::json!({ "requestId": request_id, "status": "pending" })
}

/// The document DELETE /results/{id} stores for a request that has none yet. Stored first, it wins over any
/// later result (first writer wins); the worker finds it before it runs the request, or while it runs.
pub fn canceled(request_id: RequestId) -> serde_json::Value {
    canceled_because(request_id, "canceled by the client before it finished (DELETE /results/{requestId})")
}

/// A cancel document that says why the request was canceled.
pub(crate) fn canceled_because(request_id: RequestId, reason: &str) -> serde_json::Value {
    let error = ErrorDetail { code: ErrorCode::Canceled, message: reason.into() };
    serde_json::json!({ "requestId": request_id, "status": Status::Error, "error": error, "timestamp": now() })
}

/// The bytes of a new cancel mark (`ResultStore::mark_cancels`): when it was written and a random nonce, so that
/// each mark differs from the last (and so does its S3 ETag).
pub(crate) fn cancel_mark() -> Vec<u8> {
    serde_json::json!({ "markedAt": now(), "nonce": uuid::Uuid::new_v4() }).to_string().into_bytes()
}

/// What a stored document says about how its request ended: its status and error code.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Ending {
    pub status: Status,
    #[serde(default)]
    pub error: Option<ErrorDetail>,
}

impl Ending {
    pub(crate) fn read(document: &[u8]) -> Option<Self> {
        serde_json::from_slice(document).ok()
    }

    pub(crate) fn is_canceled(&self) -> bool {
        self.error.as_ref().is_some_and(|e| e.code == ErrorCode::Canceled)
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}
