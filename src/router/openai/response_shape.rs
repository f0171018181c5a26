//! The Responses API's own shapes of what a chat request carries, both ways: `text.format` and function `tools`
//! (flat, where chat nests them), `tool_choice`, and the items of a turn that called functions (`function_call`,
//! `function_call_output`), read into chat messages and written as output items.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::error::OpenAiError;
use crate::contract::outcome::Generation;

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
