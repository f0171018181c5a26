//! The Response object OpenAI's reference defines, made from a response's record and its result document: the
//! document decides the status (none yet: `queued`; the engine stopped on the length limit: `incomplete`), the
//! output and the usage.

use serde_json::{Value, json};

use super::response_record::ResponseRecord;
use crate::contract::openai_response::{Standing, Stored};
use crate::contract::outcome::{ErrorCode, ErrorDetail, Generation};

/// The Response object of `record`, whose result document is `document` (None while it has none).
pub(crate) fn response_object(record: &ResponseRecord, document: Option<&[u8]>) -> Value {
    let stored = document.and_then(Stored::read);
    let finished_at = stored.as_ref().and_then(|s| s.timestamp.as_deref()).and_then(unix_seconds);
    let standing = Standing::of(stored);
    let (mut output, mut usage, mut error, mut incomplete, mut completed_at) =
        (vec![], Value::Null, Value::Null, Value::Null, Value::Null);
    match &standing {
        Standing::Completed(generation) | Standing::Incomplete(generation) => {
            let done = matches!(standing, Standing::Completed(_));
            output.push(message(&record.id, generation, done));
            usage = json!({
                "input_tokens": generation.usage.prompt_tokens,
                "input_tokens_details": { "cached_tokens": 0 },
                "output_tokens": generation.usage.completion_tokens,
                "output_tokens_details": { "reasoning_tokens": 0 },
                "total_tokens": generation.usage.total_tokens,
            });
            if done {
                completed_at = json!(finished_at);
            } else {
                incomplete = json!({ "reason": "max_output_tokens" });
            }
        }
        Standing::Failed(detail) => {
            error = json!({ "code": error_code(detail.code), "message": error_message(detail) })
        }
        Standing::Queued | Standing::Cancelled => {}
    }
    json!({
        "id": record.id,
        "object": "response",
        "created_at": record.created_at,
        "status": standing.status(),
        "background": record.background,
        "completed_at": completed_at,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": record.instructions,
        "max_output_tokens": record.max_output_tokens,
        "metadata": record.metadata,
        "model": record.model,
        "output": output,
        "parallel_tool_calls": false,
        "previous_response_id": null,
        "reasoning": null,
        "service_tier": record.service_tier,
        "store": true,
        "temperature": record.temperature,
        "text": { "format": { "type": "text" } },
        "tool_choice": "none",
        "tools": [],
        "top_p": record.top_p,
        "truncation": "disabled",
        "usage": usage,
        "user": null,
    })
}

/// The one assistant message of a finished response.
fn message(response_id: &str, generation: &Generation, completed: bool) -> Value {
    let id = format!("msg_{}", response_id.trim_start_matches("resp_"));
    json!({
        "type": "message",
        "id": id,
        "status": if completed { "completed" } else { "incomplete" },
        "role": "assistant",
        "content": [{ "type": "output_text", "text": generation.text, "annotations": [], "logprobs": [] }],
    })
}

/// OpenAI's code for a failure: the engine's refusal (a prompt past its context) is the prompt's fault, the rest
/// the server's.
fn error_code(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::EngineRejected => "invalid_prompt",
        _ => "server_error",
    }
}

/// The failure's message, led by the pipeline's own code (as `GET /results/{requestId}` shows it).
fn error_message(detail: &ErrorDetail) -> String {
    let code = serde_json::to_value(detail.code).ok();
    let code = code.as_ref().and_then(Value::as_str).unwrap_or("error");
    format!("{code}: {}", detail.message)
}

fn unix_seconds(timestamp: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(timestamp).ok().map(|t| t.timestamp())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
