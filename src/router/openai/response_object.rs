//! The Response object OpenAI's reference defines, made from a response's record and its result document: the
//! document decides the status (none yet: `queued`; the engine stopped on the length limit: `incomplete`), the
//! output and the usage.

use serde_json::{Value, json};

use super::response_record::ResponseRecord;
use super::response_shape::{InputItem, answer_items};
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
            output = output_items(&record.id, generation, done);
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
        "instructions": record.asked.instructions,
        "max_output_tokens": record.limits.max_output_tokens,
        "metadata": record.metadata,
        "model": record.model,
        "output": output,
        "parallel_tool_calls": record.shape.parallel_tool_calls,
        "previous_response_id": record.asked.previous_response_id,
        "reasoning": null,
        "service_tier": record.service_tier,
        "store": true,
        "temperature": record.limits.temperature,
        "text": record.shape.text,
        "tool_choice": record.shape.tool_choice,
        "tools": record.shape.tools,
        "top_p": record.limits.top_p,
        "top_logprobs": record.limits.top_logprobs.unwrap_or(0),
        "truncation": "disabled",
        "usage": usage,
        "user": null,
    })
}

/// The output of a finished response: its assistant message (when it has text, or called no function), then a
/// `function_call` item for each function it called.
fn output_items(response_id: &str, generation: &Generation, completed: bool) -> Vec<Value> {
    let stem = response_id.trim_start_matches("resp_");
    let status = if completed { "completed" } else { "incomplete" };
    let message = (!generation.text.is_empty() || generation.tool_calls.is_none()).then(|| {
        json!({
            "type": "message",
            "id": format!("msg_{stem}"),
            "status": status,
            "role": "assistant",
            "content": [{ "type": "output_text", "text": generation.text, "annotations": [],
                          "logprobs": token_logprobs(generation) }],
        })
    });
    let calls = answer_items(generation).into_iter().enumerate().filter_map(|(i, item)| match item {
        InputItem::FunctionCall { call_id, name, arguments } => Some(json!({
            "type": "function_call", "id": format!("fc_{stem}_{i}"), "call_id": call_id, "name": name,
            "arguments": arguments, "status": status,
        })),
        _ => None,
    });
    message.into_iter().chain(calls).collect()
}

/// The answer's tokens with their log probabilities (and alternatives) as the output text carries them: the engine's
/// chat `logprobs.content`, without the engine's own token ids; empty when none were asked for.
fn token_logprobs(generation: &Generation) -> Value {
    let tokens = generation.logprobs.as_ref().and_then(|l| l["content"].as_array()).cloned().unwrap_or_default();
    let entry =
        |token: &Value| json!({ "token": token["token"], "logprob": token["logprob"], "bytes": token["bytes"] });
    let with_alternatives = |token: &Value| {
        let mut out = entry(token);
        let alternatives = token["top_logprobs"].as_array().map(|a| a.iter().map(entry).collect::<Vec<_>>());
        out["top_logprobs"] = json!(alternatives.unwrap_or_default());
        out
    };
    Value::Array(tokens.iter().map(with_alternatives).collect())
}

/// OpenAI's code for a failure: the engine's refusal (a prompt past its context) is the prompt's fault, the rest
/// the server's.
fn error_code(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::EngineRejected => "invalid_prompt",
        ErrorCode::InvalidOutput => "invalid_output",
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
mod tests {
    //! The Response object at each point of a response's life.

    use serde_json::Map;

    use super::*;
    use crate::contract::request_id::RequestId;
    use crate::router::openai::response_record::{AnswerShape, Asked, ResponseLimits};

    fn record() -> ResponseRecord {
        ResponseRecord {
            id: "resp_0123".into(),
            created_at: 1_700_000_000,
            model: "small".into(),
            asked: Asked { instructions: Some("Be brief.".into()), ..Asked::default() },
            metadata: Map::new(),
            limits: ResponseLimits { max_output_tokens: 16, temperature: 0.7, top_p: 1.0, top_logprobs: None },
            shape: AnswerShape::default(),
            service_tier: "default".into(),
            background: true,
            owner: Some("team-a".into()),
        }
    }

    fn success(finish_reason: &str) -> Vec<u8> {
        json!({"requestId": RequestId::new_v4(), "status": "success", "timestamp": "2026-01-01T00:00:00Z",
            "result": {"text": "Hello", "finishReason": finish_reason,
                       "usage": {"promptTokens": 3, "completionTokens": 2, "totalTokens": 5}}})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn a_response_that_called_a_function_answers_with_a_function_call_item() {
        let call = json!({"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}});
        let document = json!({"requestId": RequestId::new_v4(), "status": "success", "timestamp": "2026-01-01T00:00:00Z",
            "result": {"text": "", "finishReason": "tool_calls", "toolCalls": [call],
                       "usage": {"promptTokens": 3, "completionTokens": 2, "totalTokens": 5}}});
        let object = response_object(&record(), Some(document.to_string().as_bytes()));
        assert_eq!(object["status"], "completed");
        let item = json!({"type": "function_call", "id": "fc_0123_0", "call_id": "call_1", "name": "add",
            "arguments": "{\"a\":1}", "status": "completed"});
        assert_eq!(object["output"], json!([item]));
    }

    #[test]
    fn the_output_text_carries_the_engines_log_probabilities_without_its_token_ids() {
        let token = json!({"id": 7, "token": "Hi", "bytes": [72, 105], "logprob": -0.5,
                           "top_logprobs": [{"id": 7, "token": "Hi", "bytes": [72, 105], "logprob": -0.5}]});
        let document = json!({"status": "success", "timestamp": "2026-01-01T00:00:00Z",
            "result": {"text": "Hi", "finishReason": "stop", "logprobs": {"content": [token]},
                       "usage": {"promptTokens": 3, "completionTokens": 1, "totalTokens": 4}}});
        let object = response_object(&record(), Some(document.to_string().as_bytes()));
        let expected = json!([{"token": "Hi", "logprob": -0.5, "bytes": [72, 105],
                               "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}]}]);
        assert_eq!(object["output"][0]["content"][0]["logprobs"], expected);
    }

    #[test]
    fn without_a_document_a_response_is_queued() {
        let object = response_object(&record(), None);
        assert_eq!((object["status"].as_str(), object["object"].as_str()), (Some("queued"), Some("response")));
        assert_eq!(object["output"], json!([]));
        assert!(object["usage"].is_null() && object["error"].is_null());
        assert_eq!((object["background"].as_bool(), object["store"].as_bool()), (Some(true), Some(true)));
        assert_eq!(object["instructions"], "Be brief.");
    }

    #[test]
    fn a_completed_response_carries_its_text_and_usage() {
        let object = response_object(&record(), Some(&success("stop")));
        assert_eq!(object["status"], "completed");
        assert_eq!(
            object["output"][0]["content"][0],
            json!({"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []})
        );
        assert_eq!(object["output"][0]["role"], "assistant");
        assert_eq!(
            (object["usage"]["input_tokens"].as_u64(), object["usage"]["output_tokens"].as_u64()),
            (Some(3), Some(2))
        );
        assert_eq!(object["usage"]["total_tokens"], 5);
        assert_eq!(object["completed_at"], 1_767_225_600);
        assert!(object["incomplete_details"].is_null());
    }

    #[test]
    fn a_response_cut_at_its_token_limit_is_incomplete() {
        let object = response_object(&record(), Some(&success("length")));
        assert_eq!(object["status"], "incomplete");
        assert_eq!(object["incomplete_details"], json!({"reason": "max_output_tokens"}));
        assert_eq!(object["output"][0]["status"], "incomplete");
        assert!(object["completed_at"].is_null());
    }

    #[test]
    fn failures_and_cancels() {
        let id = RequestId::new_v4();
        let canceled = crate::contract::outcome::canceled(id).to_string().into_bytes();
        assert_eq!(response_object(&record(), Some(&canceled))["status"], "cancelled");
        let failed = json!({"requestId": id, "status": "error",
            "error": {"code": "engine_rejected", "message": "prompt longer than the context"}});
        let object = response_object(&record(), Some(failed.to_string().as_bytes()));
        assert_eq!(object["status"], "failed");
        assert_eq!(
            object["error"],
            json!({"code": "invalid_prompt", "message": "engine_rejected: prompt longer than the context"})
        );
    }
}
