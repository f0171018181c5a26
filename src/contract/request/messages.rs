//! A chat's messages as OpenAI writes them: a role (`developer` runs as `system`), content as a string or text
//! parts, and the tool turns (an assistant's `tool_calls`, a tool's answer to its `tool_call_id`).

use serde::Serialize;
use serde_json::{Map, Value};

use super::refusal::{RequestError, kind, shown_name};

const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];
const MESSAGE_FIELDS: [&str; 5] = ["role", "content", "name", "tool_calls", "tool_call_id"];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatMessage {
    pub(crate) role: String,
    pub(crate) content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    /// The calls an assistant's turn made (OpenAI's `tool_calls`, kept as sent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_calls: Option<Value>,
    /// The call a tool's message answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message of `role` saying `content`, nothing else.
    pub(crate) fn text(role: &str, content: impl Into<String>) -> Self {
        ChatMessage { role: role.into(), content: content.into(), name: None, tool_calls: None, tool_call_id: None }
    }
}

pub(super) fn parse_messages(value: Value) -> Result<Vec<ChatMessage>, RequestError> {
    let Value::Array(items) = value else {
        return Err(RequestError::invalid("messages", "must be an array of {role, content} objects"));
    };
    if items.is_empty() {
        return Err(RequestError::invalid("messages", "must not be empty"));
    }
    items.into_iter().enumerate().map(|(i, item)| parse_message(i, item)).collect()
}

fn parse_message(i: usize, item: Value) -> Result<ChatMessage, RequestError> {
    let field = |name: &str| format!("messages[{i}].{name}");
    let Value::Object(mut object) = item else {
        return Err(RequestError::invalid(format!("messages[{i}]"), "must be an object with role and content"));
    };
    object.retain(|_, value| !value.is_null());
    if let Some(unknown) = object.keys().find(|k| !MESSAGE_FIELDS.contains(&k.as_str())) {
        let allowed = MESSAGE_FIELDS.join(", ");
        return Err(RequestError::invalid(field(&shown_name(unknown)), format!("unknown field (allowed: {allowed})")));
    }
    let role = match object.remove("role") {
        Some(Value::String(role)) if role == "developer" => "system".to_owned(),
        Some(Value::String(role)) if ROLES.contains(&role.as_str()) => role,
        _ => return Err(RequestError::invalid(field("role"), format!("must be one of {}", ROLES.join(", ")))),
    };
    let tool_calls = take_tool_calls(&mut object, &role, &field)?;
    let tool_call_id = match (object.remove("tool_call_id"), role.as_str()) {
        (None, _) => None,
        (Some(Value::String(id)), "tool") if !id.is_empty() => Some(id),
        (Some(_), "tool") => return Err(RequestError::invalid(field("tool_call_id"), "must be a non-empty string")),
        (Some(_), _) => return Err(RequestError::invalid(field("tool_call_id"), "only a tool message has one")),
    };
    let name = match object.remove("name") {
        None => None,
        Some(Value::String(name)) => Some(name),
        Some(other) => {
            return Err(RequestError::invalid(field("name"), format!("must be a string, got {}", kind(&other))));
        }
    };
    let content = match object.remove("content") {
        None if tool_calls.is_some() => String::new(),
        None => return Err(RequestError::invalid(field("content"), "must be a string or a list of text parts")),
        Some(content) => content_text(content, &field("content"))?,
    };
    Ok(ChatMessage { role, content, name, tool_calls, tool_call_id })
}

/// An assistant's `tool_calls`: a non-empty list of function calls, each with an id, a name and its arguments.
fn take_tool_calls(
    object: &mut Map<String, Value>,
    role: &str,
    field: &impl Fn(&str) -> String,
) -> Result<Option<Value>, RequestError> {
    let Some(calls) = object.remove("tool_calls") else { return Ok(None) };
    if role != "assistant" {
        return Err(RequestError::invalid(field("tool_calls"), "only an assistant message has them"));
    }
    let well_formed = |call: &Value| {
        call["id"].is_string()
            && call["type"] == "function"
            && call["function"]["name"].is_string()
            && call["function"]["arguments"].is_string()
    };
    match &calls {
        Value::Array(list) if !list.is_empty() && list.iter().all(well_formed) => Ok(Some(calls)),
        _ => Err(RequestError::invalid(
            field("tool_calls"),
            "a list of {id, type: \"function\", function: {name, arguments}} (arguments a JSON string)",
        )),
    }
}

/// A message's content: a string, or a list of text parts (`{"type": "text", "text": …}`) joined by new lines.
fn content_text(content: Value, field: &str) -> Result<String, RequestError> {
    let parts = match content {
        Value::String(text) => return Ok(text),
        Value::Array(parts) if !parts.is_empty() => parts,
        _ => return Err(RequestError::invalid(field, "must be a string or a list of text parts")),
    };
    let texts = parts.iter().enumerate().map(|(j, part)| match (part["type"].as_str(), part["text"].as_str()) {
        (Some("text"), Some(text)) if part.as_object().is_some_and(|p| p.len() == 2) => Ok(text),
        (Some("text"), _) => {
            Err(RequestError::invalid(format!("{field}[{j}]"), "a text part is {type: \"text\", text}"))
        }
        (kind, _) => Err(RequestError::invalid(
            format!("{field}[{j}].type"),
            format!(
                "{} is not supported: the engines behind gpuinfer read text only (parts of type \"text\")",
                kind.map_or("a part without a type".to_owned(), |k| format!("{k:?}"))
            ),
        )),
    });
    Ok(texts.collect::<Result<Vec<_>, _>>()?.join("\n"))
}
