//! The checks of one field's value that need nothing of the rest of the request: the id, the prompt, a number in
//! its range, the callback URL.

use serde_json::{Map, Value};

use super::refusal::{RequestError, clip, kind};
use crate::contract::request_id::RequestId;

/// Longest callback URL.
const MAX_CALLBACK_URL_CHARS: usize = 2048;

/// A `requestId`: a UUID v4 string.
pub(super) fn parse_request_id(value: &Value) -> Result<RequestId, RequestError> {
    value
        .as_str()
        .and_then(RequestId::parse)
        .ok_or_else(|| RequestError::invalid("requestId", format!("must be a UUID v4 string, got {}", clip(value))))
}

/// A `prompt`: a string that is not blank.
pub(super) fn parse_prompt(value: Value) -> Result<String, RequestError> {
    match value {
        Value::String(prompt) if !prompt.trim().is_empty() => Ok(prompt),
        Value::String(_) => Err(RequestError::invalid("prompt", "must not be empty")),
        other => Err(RequestError::invalid("prompt", format!("must be a string, got {}", kind(&other)))),
    }
}

/// The number `field` holds when it is `allowed` (`range` says which are), else `default`.
pub(super) fn parse_number(
    object: &mut Map<String, Value>,
    field: &str,
    default: f64,
    allowed: impl Fn(f64) -> bool,
    range: &str,
) -> Result<f64, RequestError> {
    Ok(parse_optional_number(object, field, allowed, range)?.unwrap_or(default))
}

/// The number `field` holds when it is `allowed` (`range` says which are), if given.
pub(super) fn parse_optional_number(
    object: &mut Map<String, Value>,
    field: &str,
    allowed: impl Fn(f64) -> bool,
    range: &str,
) -> Result<Option<f64>, RequestError> {
    object
        .remove(field)
        .map(|value| {
            value
                .as_f64()
                .filter(|n| allowed(*n))
                .ok_or_else(|| RequestError::invalid(field, format!("must be a number {range}, got {}", clip(&value))))
        })
        .transpose()
}

/// An absolute http(s) URL with a host and no credentials; the operator's scheme and address rules apply apart.
pub(super) fn parse_callback_url(value: Value) -> Result<String, RequestError> {
    let invalid = |problem: &str| RequestError::invalid("callbackUrl", problem);
    let Value::String(text) = value else {
        return Err(invalid("must be a string"));
    };
    if text.chars().count() > MAX_CALLBACK_URL_CHARS {
        return Err(invalid("longer than 2048 characters"));
    }
    let url = reqwest::Url::parse(&text).map_err(|e| invalid(&format!("not a valid URL ({e})")))?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err(invalid("must be an https:// URL"));
    }
    if url.host().is_none() {
        return Err(invalid("must name a host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid("must not carry credentials; authenticate with the signature headers instead"));
    }
    Ok(text)
}
