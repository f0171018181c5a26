//! Why a request is refused (`RequestError`), and how a refusal quotes what it refuses.

use serde_json::Value;

/// Why a request was refused; displays as `<field>: <what is wrong>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("body: larger than the {limit} byte limit ({size} bytes)")]
    TooLarge { size: usize, limit: usize },
    /// The request as sent fits, but the message it becomes (JSON escaping, defaults filled in) does not.
    #[error(
        "body: the request becomes a {queued}-byte queue message (escapes and defaults included), over the {limit}-byte \
         limit of a queue message: shorten the prompt"
    )]
    QueueMessageTooLarge { queued: usize, limit: usize },
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
}

impl RequestError {
    pub(super) fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Self {
        RequestError::Invalid { field: field.into(), problem: problem.into() }
    }
}

/// Longest unknown field name an error repeats.
const SHOWN_NAME_CHARS: usize = 64;

/// An unknown field's name as an error shows it: as sent when it is a plain name, else as a JSON string (so an
/// empty name, a control character or a quote stays visible), cut to 64 characters either way.
pub(super) fn shown_name(name: &str) -> String {
    let plain = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.$@".contains(c));
    let cut: String = name.chars().take(SHOWN_NAME_CHARS).collect();
    let ellipsis = if cut.len() < name.len() { "…" } else { "" };
    if plain { format!("{cut}{ellipsis}") } else { format!("{}{ellipsis}", Value::String(cut)) }
}

/// A short rendering of a rejected value for error messages.
pub(super) fn clip(value: &Value) -> String {
    shorten(&value.to_string(), 40)
}

/// `text` cut to `max` characters, with an ellipsis when cut: error messages quote what they refuse.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// What a refused value is, for error messages (`a number`, `an array`).
pub(super) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
