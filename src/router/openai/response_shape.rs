//! The Responses API's own shapes of what a chat request carries, both ways: `input` and its items (messages with
//! text parts, and those of a turn that called functions: `function_call`, `function_call_output`), read into chat
//! messages and written as items; `text.format` and function `tools` (flat, where chat nests them), `tool_choice`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::error::OpenAiError;
use crate::contract::outcome::Generation;

/// Roles an input message may have (`developer` runs as `system`).
const ROLES: [&str; 4] = ["user", "assistant", "system", "developer"];

/// One item of a response's input or of the context it continues, as kept in its record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum InputItem {
    /// A message: its role and its text.
    Message { role: String, text: String },
    /// A function the model called in an earlier turn.
    FunctionCall { call_id: String, name: String, arguments: String },
    /// What the caller's function answered to a call.
    FunctionCallOutput { call_id: String, output: String },
}

impl InputItem {
    /// The chat message the engine reads for this item (`developer` runs as `system`).
    pub(crate) fn chat_message(&self) -> Value {
        match self {
            InputItem::Message { role, text } => {
                json!({ "role": if role == "developer" { "system" } else { role.as_str() }, "content": text })
            }
            InputItem::FunctionCall { call_id, name, arguments } => json!({ "role": "assistant", "content": "",
                "tool_calls": [{ "id": call_id, "type": "function", "function": { "name": name, "arguments": arguments } }] }),
            InputItem::FunctionCallOutput { call_id, output } => {
                json!({ "role": "tool", "tool_call_id": call_id, "content": output })
            }
        }
    }

    /// The item as OpenAI lists it (`input_items`), under `id`.
    pub(crate) fn listed(&self, id: String) -> Value {
        match self {
            InputItem::Message { role, text } => {
                let kind = if role == "assistant" { "output_text" } else { "input_text" };
                json!({ "type": "message", "id": id, "status": "completed", "role": role,
                        "content": [{ "type": kind, "text": text }] })
            }
            InputItem::FunctionCall { call_id, name, arguments } => json!({ "type": "function_call", "id": id,
                "call_id": call_id, "name": name, "arguments": arguments, "status": "completed" }),
            InputItem::FunctionCallOutput { call_id, output } => {
                json!({ "type": "function_call_output", "id": id, "call_id": call_id, "output": output,
                        "status": "completed" })
            }
        }
    }

    /// A `function_call` or `function_call_output` item of a create's `input` (at `param`); None for another type.
    pub(crate) fn function_item(item: &Map<String, Value>, param: &str) -> Option<Result<InputItem, OpenAiError>> {
        let text = |name: &str| item.get(name).and_then(Value::as_str).map(str::to_owned);
        let invalid = |fields: &str| {
            Err(OpenAiError::invalid_param(param, format!("{param}: needs {fields}, each a string, and nothing else")))
        };
        let (kind, known): (_, &[&str]) = match item.get("type").and_then(Value::as_str) {
            Some("function_call") => ("call", &["type", "id", "call_id", "name", "arguments", "status"]),
            Some("function_call_output") => ("output", &["type", "id", "call_id", "output", "status"]),
            _ => return None,
        };
        if item.keys().any(|k| !known.contains(&k.as_str())) {
            return Some(invalid(&known[2..].join(", ")));
        }
        Some(match (kind, text("call_id"), text("name"), text("arguments"), text("output")) {
            ("call", Some(call_id), Some(name), Some(arguments), _) => {
                Ok(InputItem::FunctionCall { call_id, name, arguments })
            }
            ("output", Some(call_id), _, _, Some(output)) => Ok(InputItem::FunctionCallOutput { call_id, output }),
            ("call", ..) => invalid("call_id, name, arguments"),
            _ => invalid("call_id, output"),
        })
    }
}

/// The items a finished turn adds to a conversation: its text as an assistant message, its function calls.
pub(crate) fn answer_items(generation: &Generation) -> Vec<InputItem> {
    let text = (!generation.text.is_empty())
        .then(|| InputItem::Message { role: "assistant".into(), text: generation.text.clone() });
    let calls = generation.tool_calls.iter().flat_map(|calls| calls.as_array().into_iter().flatten()).map(|call| {
        let field = |name: &str| call["function"][name].as_str().unwrap_or_default().to_owned();
        let call_id = call["id"].as_str().unwrap_or_default().to_owned();
        InputItem::FunctionCall { call_id, name: field("name"), arguments: field("arguments") }
    });
    text.into_iter().chain(calls).collect()
}

/// `text` (`{format: {type: "text" | "json_object" | "json_schema", name, schema, strict, description}}`) as the
/// pipeline's `responseFormat` (chat's `response_format`); None for plain text.
pub(crate) fn response_format(text: &Value) -> Result<Option<Value>, OpenAiError> {
    let invalid = |param: &str, why: &str| OpenAiError::invalid_param(param, format!("{param}: {why}"));
    let Some(fields) = text.as_object() else { return Err(invalid("text", "an object with format")) };
    if let Some(other) = fields.keys().find(|k| !["format", "verbosity"].contains(&k.as_str())) {
        return Err(invalid(&format!("text.{other}"), "not supported by gpuinfer (supported: format)"));
    }
    let Some(format) = fields.get("format").filter(|f| !f.is_null()) else { return Ok(None) };
    match format["type"].as_str() {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({ "type": "json_object" }))),
        Some("json_schema") => {
            let mut spec = format.as_object().cloned().unwrap_or_default();
            spec.remove("type");
            Ok(Some(json!({ "type": "json_schema", "json_schema": spec })))
        }
        _ => Err(invalid("text.format.type", "\"text\", \"json_object\" or \"json_schema\"")),
    }
}

/// A Responses function tool (`{type: "function", name, description, parameters, strict}`) in chat's shape; any
/// other type (web search, file search, …) refused by name.
pub(crate) fn chat_tool(tool: &Value, param: &str) -> Result<Value, OpenAiError> {
    match tool["type"].as_str() {
        Some("function") => {}
        other => {
            let kind = other.unwrap_or("a tool without a type");
            let why = format!(
                "{param}.type: {kind} is not served: gpuinfer runs function tools only (the engine has no built-in tools)"
            );
            return Err(OpenAiError::invalid_param(&format!("{param}.type"), why));
        }
    }
    let mut function = tool.as_object().cloned().unwrap_or_default();
    function.remove("type");
    function.retain(|_, value| !value.is_null());
    Ok(json!({ "type": "function", "function": function }))
}

/// `tool_choice` in chat's shape: the modes as they are, `{type: "function", name}` nested as chat names it.
pub(crate) fn chat_tool_choice(choice: &Value) -> Value {
    match choice["name"].as_str().filter(|_| choice["type"] == "function") {
        Some(name) => json!({ "type": "function", "function": { "name": name } }),
        None => choice.clone(),
    }
}

/// `input`: a string (one user message) or a list of items.
pub(crate) fn input_items(input: Option<Value>) -> Result<Vec<InputItem>, OpenAiError> {
    let invalid = |param: &str, what: &str| OpenAiError::invalid_param(param, format!("{param}: {what}"));
    let items = match input {
        Some(Value::String(text)) if !text.trim().is_empty() => {
            return Ok(vec![InputItem::Message { role: "user".into(), text }]);
        }
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => return Err(invalid("input", "required, a non-empty string or a list of items")),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let param = format!("input[{i}]");
            let Value::Object(mut item) = item else {
                return Err(invalid(&param, "must be an item: a message, a function_call or a function_call_output"));
            };
            if let Some(function_item) = InputItem::function_item(&item, &param) {
                return function_item;
            }
            if item.remove("type").is_some_and(|kind| kind != json!("message")) {
                let why = "\"message\", \"function_call\" and \"function_call_output\" items are supported";
                return Err(invalid(&format!("{param}.type"), why));
            }
            if let Some(other) = item.keys().find(|k| !["role", "content"].contains(&k.as_str())) {
                return Err(invalid(&format!("{param}.{other}"), "unknown field (a message has type, role, content)"));
            }
            let role = match item.remove("role") {
                Some(Value::String(role)) if ROLES.contains(&role.as_str()) => role,
                _ => return Err(invalid(&format!("{param}.role"), &format!("must be one of {}", ROLES.join(", ")))),
            };
            let text = content_text(item.remove("content"), &format!("{param}.content"))?;
            Ok(InputItem::Message { role, text })
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
