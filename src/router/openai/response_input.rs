//! POST /v1/responses's body: the fields gpuinfer runs, each checked (any other refused by name, in OpenAI's error
//! shape), and the pipeline request and the record it becomes. A response is a chat: `instructions` first as a
//! system message, then `input` (a string, or messages whose content is a string or `input_text` parts).

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::error::OpenAiError;
use super::objects::metadata;
use super::response_record::{InputMessage, ResponseRecord};
use super::settings::ModelTiers;
use crate::contract::openai_response::response_id;
use crate::contract::request::{InferenceRequest, Intake, RequestError};

/// The fields a create may carry; any other is refused by name.
const FIELDS: [&str; 11] = [
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "metadata",
    "store",
    "background",
    "service_tier",
    "stream",
];

/// Roles an input message may have (`developer` runs as `system`).
const ROLES: [&str; 4] = ["user", "assistant", "system", "developer"];

/// A checked create: the request it runs as, and the record kept for the Response object.
#[derive(Debug)]
pub(crate) struct Create {
    pub(crate) request: InferenceRequest,
    pub(crate) record: ResponseRecord,
}

/// Checks a create's body, accepted at `now`, and makes its request (a new id) and record.
pub(crate) fn read(body: &[u8], models: &ModelTiers, now: DateTime<Utc>) -> Result<Create, OpenAiError> {
    let Ok(Value::Object(mut ask)) = crate::contract::request::parse_json(body) else {
        return Err(OpenAiError::invalid("body: a JSON object with model and input"));
    };
    // As in OpenAI's API, null is "not given"; so are no tools and no streaming.
    let (no_tools, no_stream) = (json!([]), json!(false));
    let absent = |name: &str, value: &Value| {
        value.is_null() || (name, value) == ("tools", &no_tools) || (name, value) == ("stream", &no_stream)
    };
    ask.retain(|name, value| !absent(name, value));
    if let Some(other) = ask.keys().find(|name| !FIELDS.contains(&name.as_str())) {
        let supported = FIELDS[..FIELDS.len() - 1].join(", ");
        return Err(OpenAiError::invalid_param(
            other,
            format!("{other}: not supported by gpuinfer (supported: {supported})"),
        ));
    }
    if ask.contains_key("stream") {
        return Err(OpenAiError::invalid_param(
            "stream",
            "stream: gpuinfer does not stream; poll the response instead",
        ));
    }
    if ask.remove("store").is_some_and(|store| store != json!(true)) {
        let why = "store: must be true: a background response must be stored, and gpuinfer keeps every response \
                   (one not waited for is polled)";
        return Err(OpenAiError::invalid_param("store", why));
    }
    let background = match ask.remove("background") {
        None => false,
        Some(Value::Bool(background)) => background,
        Some(_) => return Err(OpenAiError::invalid_param("background", "background: must be true or false")),
    };
    let model = match ask.remove("model") {
        Some(Value::String(model)) if !model.is_empty() => model,
        _ => {
            return Err(OpenAiError::invalid_param(
                "model",
                "model: required, a model name (GET /v1/models lists them)",
            ));
        }
    };
    let instructions = match ask.remove("instructions") {
        None => None,
        Some(Value::String(text)) => Some(text),
        Some(_) => return Err(OpenAiError::invalid_param("instructions", "instructions: must be a string")),
    };
    let input = input_messages(ask.remove("input"))?;
    let metadata = metadata(ask.remove("metadata"))?.unwrap_or_default();
    let (service_tier, priority) = lane(ask.remove("service_tier"))?;
    let system = instructions.iter().map(|text| json!({ "role": "system", "content": text }));
    let chat = input.iter().map(|m| {
        let role = if m.role == "developer" { "system" } else { m.role.as_str() };
        json!({ "role": role, "content": m.text })
    });
    let mut fields = Map::new();
    fields.insert("messages".into(), system.chain(chat).collect());
    fields.insert("priority".into(), json!(priority));
    for (theirs, ours) in [("max_output_tokens", "maxTokens"), ("temperature", "temperature"), ("top_p", "topP")] {
        if let Some(value) = ask.remove(theirs) {
            fields.insert(ours.into(), value);
        }
    }
    if let Some(tier) = models.tier_of(&model) {
        fields.insert("route".into(), json!(tier));
    }
    // Sent without a requestId: the router makes one (`RequestId::router_made`), which the response id maps.
    let mut request = InferenceRequest::from_value(Value::Object(fields), Intake::Api(now)).map_err(refusal)?;
    request.response = true;
    let record = ResponseRecord {
        id: response_id(request.request_id),
        created_at: now.timestamp(),
        model,
        instructions,
        input,
        metadata,
        limits: request.sampling.into(),
        service_tier: service_tier.into(),
        background,
        // The caller's project, which the handler gives it.
        owner: None,
    };
    Ok(Create { request, record })
}

/// `service_tier` as the Response object names it, and the lane it picks.
fn lane(service_tier: Option<Value>) -> Result<(&'static str, &'static str), OpenAiError> {
    match service_tier.as_ref().map(Value::as_str) {
        None | Some(Some("auto" | "default")) => Ok(("default", "normal")),
        Some(Some("priority")) => Ok(("priority", "high")),
        Some(Some("flex")) => Ok(("flex", "batch")),
        Some(_) => Err(OpenAiError::invalid_param(
            "service_tier",
            "service_tier: \"auto\", \"default\", \"priority\" (the high lane) or \"flex\" (the batch lane)",
        )),
    }
}

/// `input`: a string (one user message) or a list of messages.
fn input_messages(input: Option<Value>) -> Result<Vec<InputMessage>, OpenAiError> {
    let invalid = |param: &str, what: &str| OpenAiError::invalid_param(param, format!("{param}: {what}"));
    let items = match input {
        Some(Value::String(text)) if !text.trim().is_empty() => {
            return Ok(vec![InputMessage { role: "user".into(), text }]);
        }
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => return Err(invalid("input", "required, a non-empty string or a list of messages")),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let param = format!("input[{i}]");
            let Value::Object(mut item) = item else {
                return Err(invalid(&param, "must be a message, an object with role and content"));
            };
            if item.remove("type").is_some_and(|kind| kind != json!("message")) {
                return Err(invalid(&format!("{param}.type"), "only \"message\" items are supported"));
            }
            if let Some(other) = item.keys().find(|k| !["role", "content"].contains(&k.as_str())) {
                return Err(invalid(&format!("{param}.{other}"), "unknown field (a message has type, role, content)"));
            }
            let role = match item.remove("role") {
                Some(Value::String(role)) if ROLES.contains(&role.as_str()) => role,
                _ => return Err(invalid(&format!("{param}.role"), &format!("must be one of {}", ROLES.join(", ")))),
            };
            let text = content_text(item.remove("content"), &format!("{param}.content"))?;
            Ok(InputMessage { role, text })
        })
        .collect()
}

/// A message's content: a string, or text parts (`input_text`, or `output_text` as an earlier answer's), joined by
/// new lines.
fn content_text(content: Option<Value>, param: &str) -> Result<String, OpenAiError> {
    let parts = match content {
        Some(Value::String(text)) => return Ok(text),
        Some(Value::Array(parts)) if !parts.is_empty() => parts,
        _ => return Err(OpenAiError::invalid_param(param, format!("{param}: a string or a list of input_text parts"))),
    };
    let texts = parts.iter().enumerate().map(|(j, part)| match (part["type"].as_str(), part["text"].as_str()) {
        (Some("input_text" | "output_text"), Some(text)) => Ok(text),
        (kind, _) => {
            let kind = kind.unwrap_or("a part without a type");
            let message = format!("{param}[{j}]: {kind} is not supported (text only: {{type: input_text, text}})");
            Err(OpenAiError::invalid_param(&format!("{param}[{j}]"), message))
        }
    });
    Ok(texts.collect::<Result<Vec<_>, _>>()?.join("\n"))
}

/// A refusal of the pipeline's checks, named by the create's own fields.
fn refusal(error: RequestError) -> OpenAiError {
    match error {
        RequestError::Invalid { field, problem } => {
            let name = match field.as_str() {
                "maxTokens" => "max_output_tokens",
                "topP" => "top_p",
                "temperature" => "temperature",
                _ => "input",
            };
            OpenAiError::invalid_param(name, format!("{name}: {problem}"))
        }
        other => OpenAiError::too_large(other.to_string()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! A create's body: what it runs as, and each refusal naming its parameter.

    use super::*;
    use crate::contract::request::Input;
    use crate::contract::tier::{Priority, Tier};

    fn read_body(body: Value) -> Result<Create, OpenAiError> {
        read(body.to_string().as_bytes(), &ModelTiers::parse("big-model=large").unwrap(), Utc::now())
    }

    fn param(body: Value) -> Option<String> {
        read_body(body).unwrap_err().param
    }

    #[test]
    fn instructions_come_first_and_a_string_input_is_the_users_message() {
        let create = read_body(json!({"model": "big-model", "input": "Hi", "instructions": "Be brief.",
            "max_output_tokens": 12, "temperature": 0, "metadata": {"k": "v"}, "background": true, "store": true}))
        .unwrap();
        let Input::Messages(messages) = &create.request.input else { panic!("a chat") };
        let roles: Vec<(&str, &str)> = messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        assert_eq!(roles, [("system", "Be brief."), ("user", "Hi")]);
        let request = &create.request;
        assert_eq!(
            (request.sampling.max_tokens, request.sampling.temperature, request.route),
            (12, 0.0, Some(Tier::Large))
        );
        let record = &create.record;
        assert_eq!(record.id, response_id(request.request_id));
        assert!(request.request_id.is_router_made());
        assert_eq!(
            (record.model.as_str(), record.background, record.limits.max_output_tokens),
            ("big-model", true, 12)
        );
        assert_eq!(record.input, [InputMessage { role: "user".into(), text: "Hi".into() }]);
        assert_eq!(record.metadata["k"], "v");
    }

    #[test]
    fn messages_take_text_parts_and_developer_runs_as_system() {
        let input = json!([
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        ]);
        let create = read_body(json!({"model": "gemma", "input": input, "service_tier": "priority"})).unwrap();
        let Input::Messages(messages) = &create.request.input else { panic!("a chat") };
        let roles: Vec<(&str, &str)> = messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        assert_eq!(roles, [("system", "Rules."), ("user", "a\nb")]);
        assert_eq!(create.record.input[0].role, "developer", "listed as sent");
        assert_eq!((create.request.route, create.request.priority), (None, Priority::High));
        assert!(!create.record.background, "OpenAI's default");
    }

    #[test]
    fn what_gpuinfer_does_not_run_is_refused_by_name() {
        let base = || json!({"model": "small", "input": "Hi"});
        let with = |name: &str, value: Value| {
            let mut body = base();
            body[name] = value;
            body
        };
        let cases = [
            (with("tools", json!([{"type": "web_search"}])), "tools"),
            (with("reasoning", json!({"effort": "low"})), "reasoning"),
            (with("previous_response_id", json!("resp_x")), "previous_response_id"),
            (with("stream", json!(true)), "stream"),
            (with("store", json!(false)), "store"),
            (with("max_output_tokens", json!(99_999)), "max_output_tokens"),
            (with("top_p", json!(0)), "top_p"),
            (with("metadata", json!({"k": 1})), "metadata"),
            (with("input", json!([{"role": "user", "content": [{"type": "input_image"}]}])), "input[0].content[0]"),
            (with("input", json!([{"role": "tool", "content": "x"}])), "input[0].role"),
            (with("input", json!([{"type": "function_call_output", "output": "x"}])), "input[0].type"),
            (with("input", json!("")), "input"),
            (json!({"input": "Hi"}), "model"),
        ];
        for (body, expected) in cases {
            assert_eq!(param(body.clone()).as_deref(), Some(expected), "{body}");
        }
    }

    #[test]
    fn null_no_tools_and_no_streaming_are_not_given() {
        let body = json!({"model": "small", "input": "Hi", "tools": [], "stream": false, "reasoning": null});
        assert!(read_body(body).is_ok());
    }
}
