//! The two JSON error bodies every refusal is written in: gpuinfer's own, `{"error": "<field>: <what is wrong>"}`,
//! and OpenAI's error object under /v1, `{"error": {"message", "type", "param", "code"}}`.

use serde_json::{Value, json};

/// gpuinfer's error body.
pub(crate) fn plain(message: &str) -> Value {
    json!({ "error": message })
}

/// OpenAI's error object for an answer of HTTP `status`; its `type` follows the status, as OpenAI's API does.
pub(crate) fn openai(status: u16, message: &str, param: Option<&str>, code: Option<&str>) -> Value {
    let kind = match status {
        401 => "authentication_error",
        404 => "not_found_error",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    };
    json!({ "error": { "message": message, "type": kind, "param": param, "code": code } })
}
