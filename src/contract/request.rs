//! The inference request: wire format, validation rules and the queue body, shared by router and worker.

//!
//! `strict_json`: the bodies' JSON (no key given twice); `refusal`: why a request is refused; `field_checks`: the
//! checks of one field's value.

mod field_checks;
mod refusal;
mod strict_json;

pub use refusal::RequestError;
pub(crate) use refusal::shorten;
pub(crate) use strict_json::parse_json;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::contract::batch_line::BatchLine;
use crate::contract::request_id::RequestId;
use crate::contract::tier::{Priority, Tier};
use field_checks::{parse_callback_url, parse_number, parse_optional_number, parse_prompt, parse_request_id};
use refusal::{clip, shown_name};

/// Largest request accepted, equal to SQS's MaximumMessageSize.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
pub const MAX_TOKENS_LIMIT: u32 = 2048;
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 256;
pub(crate) const DEFAULT_TEMPERATURE: f64 = 0.7;
pub(crate) const DEFAULT_TOP_P: f64 = 1.0;
/// Longest deadline, counted from acceptance.
pub(crate) const MAX_DEADLINE_SECONDS: f64 = 24.0 * 3600.0;

/// The fields a request may have; any other is refused by name.
pub const FIELDS: [&str; 11] = [
    "requestId",
    "prompt",
    "messages",
    "maxTokens",
    "temperature",
    "topP",
    "route",
    "priority",
    "deadlineSeconds",
    "deadline",
    "callbackUrl",
];
const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// A validated request, as enqueued (camelCase JSON) and as the worker runs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceRequest {
    pub request_id: RequestId,
    #[serde(flatten)]
    pub input: Input,
    #[serde(flatten)]
    pub sampling: Sampling,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<Tier>,
    #[serde(skip_serializing_if = "Priority::is_normal")]
    pub(crate) priority: Priority,
    /// When the request stops being worth running; on the queue always absolute (`deadline`, RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) deadline: Option<DateTime<Utc>>,
    /// Where the result document is POSTed once stored (http or https; the operator's policy is checked apart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) callback_url: Option<String>,
    /// The Batch API line this request is; set by the Batch API only, read from the queue only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchLine>,
    /// Whether this request is an OpenAI response, whose end the deployment's OpenAI webhook hears of
    /// (`response.completed`, …); set by the Responses API only, read from the queue only.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub response: bool,
}

/// How the model samples its answer, and its length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sampling {
    pub max_tokens: u32,
    pub temperature: f64,
    pub top_p: f64,
}

/// What the model is asked: a plain completion prompt or an OpenAI-style chat.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Input {
    Prompt(String),
    Messages(Vec<ChatMessage>),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatMessage {
    pub(crate) role: String,
    pub(crate) content: String,
}

impl Input {
    /// Length in characters, as the routing thresholds count it.
    pub(crate) fn char_count(&self) -> usize {
        match self {
            Input::Prompt(prompt) => prompt.chars().count(),
            Input::Messages(messages) => messages.iter().map(|m| m.content.chars().count()).sum(),
        }
    }

    /// The text a classifier reads: the prompt, or the chat contents one per line.
    pub fn text(&self) -> String {
        match self {
            Input::Prompt(prompt) => prompt.clone(),
            Input::Messages(messages) => messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n"),
        }
    }
}

/// Where a body comes from: whether a missing `requestId` is generated, and what deadlines are measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// A client's body at the API, accepted at this moment: a missing `requestId` is generated,
    /// `deadlineSeconds` counts from acceptance, and a `deadline` must fall within the next 24 hours.
    Api(DateTime<Utc>),
    /// A queue message first sent at this moment: `requestId` is required, `deadlineSeconds` counts from the
    /// send, and a `deadline` is taken as given (a passed one is how the worker finds a request expired).
    Queue(DateTime<Utc>),
}

impl InferenceRequest {
    /// Parses and validates a request body against every rule of the contract.
    pub fn parse(body: &[u8], intake: Intake) -> Result<Self, RequestError> {
        if body.len() > MAX_REQUEST_BYTES {
            return Err(RequestError::TooLarge { size: body.len(), limit: MAX_REQUEST_BYTES });
        }
        let value = parse_json(body).map_err(|e| RequestError::invalid("body", format!("not valid JSON ({e})")))?;
        let Value::Object(object) = value else {
            return Err(RequestError::invalid("body", "must be a JSON object"));
        };
        Self::from_object(object, intake)
    }

    /// Validates one request already parsed as JSON (an entry of a batch).
    pub(crate) fn from_value(value: Value, intake: Intake) -> Result<Self, RequestError> {
        let Value::Object(object) = value else {
            return Err(RequestError::invalid("body", "must be a JSON object"));
        };
        Self::from_object(object, intake)
    }

    fn from_object(mut object: Map<String, Value>, intake: Intake) -> Result<Self, RequestError> {
        let batch = match (object.remove("batch"), intake) {
            (None | Some(Value::Null), _) => None,
            (Some(_), Intake::Api(_)) => {
                return Err(RequestError::invalid("batch", "set by the Batch API (POST /v1/batches), not by clients"));
            }
            (Some(value), Intake::Queue(_)) => Some(
                serde_json::from_value(value)
                    .map_err(|e| RequestError::invalid("batch", format!("not a batch line ({e})")))?,
            ),
        };
        let response = match (object.remove("response"), intake) {
            (None | Some(Value::Null), _) => false,
            (Some(_), Intake::Api(_)) => {
                return Err(RequestError::invalid(
                    "response",
                    "set by the Responses API (POST /v1/responses), not by clients",
                ));
            }
            (Some(value), Intake::Queue(_)) => {
                value.as_bool().ok_or_else(|| RequestError::invalid("response", "true or false"))?
            }
        };
        if let Some(unknown) = object.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(RequestError::invalid(
                shown_name(unknown),
                format!("unknown field (allowed: {})", FIELDS.join(", ")),
            ));
        }
        // An explicit null means "not given" for every optional field.
        object.retain(|_, v| !v.is_null());
        let request_id = match (object.remove("requestId"), intake) {
            (Some(value), _) => parse_request_id(&value)?,
            (None, Intake::Api(_)) => RequestId::router_made(),
            (None, Intake::Queue(_)) => return Err(RequestError::invalid("requestId", "required")),
        };
        let input = match (object.remove("prompt"), object.remove("messages")) {
            (Some(_), Some(_)) => {
                return Err(RequestError::invalid("prompt", "give either prompt or messages, not both"));
            }
            (Some(prompt), None) => Input::Prompt(parse_prompt(prompt)?),
            (None, Some(messages)) => Input::Messages(parse_messages(messages)?),
            (None, None) => return Err(RequestError::invalid("prompt", "required (or messages)")),
        };
        let max_tokens = match object.remove("maxTokens") {
            None => DEFAULT_MAX_TOKENS,
            Some(value) => value
                .as_u64()
                .filter(|n| (1..=u64::from(MAX_TOKENS_LIMIT)).contains(n))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    RequestError::invalid(
                        "maxTokens",
                        format!("must be an integer from 1 to {MAX_TOKENS_LIMIT}, got {}", clip(&value)),
                    )
                })?,
        };
        let temperature = parse_number(
            &mut object,
            "temperature",
            DEFAULT_TEMPERATURE,
            |t| (0.0..=2.0).contains(&t),
            "from 0.0 to 2.0",
        )?;
        let top_p =
            parse_number(&mut object, "topP", DEFAULT_TOP_P, |p| p > 0.0 && p <= 1.0, "greater than 0 and at most 1")?;
        let route = match object.remove("route") {
            None => None,
            Some(value) => Some(value.as_str().and_then(Tier::parse).ok_or_else(|| {
                RequestError::invalid("route", format!("must be \"small\" or \"large\", got {value}"))
            })?),
        };
        let priority = match object.remove("priority") {
            None => Priority::Normal,
            Some(value) => value.as_str().and_then(Priority::parse).ok_or_else(|| {
                RequestError::invalid(
                    "priority",
                    format!("must be \"high\", \"normal\" or \"batch\", got {}", clip(&value)),
                )
            })?,
        };
        let deadline = parse_deadline(&mut object, intake)?;
        let callback_url = object.remove("callbackUrl").map(parse_callback_url).transpose()?;
        Ok(InferenceRequest {
            request_id,
            input,
            sampling: Sampling { max_tokens, temperature, top_p },
            route,
            priority,
            deadline,
            callback_url,
            batch,
            response,
        })
    }

    /// True once the deadline, if any, is not after `now`.
    pub(crate) fn expired_at(&self, now: DateTime<Utc>) -> bool {
        self.deadline.is_some_and(|deadline| deadline <= now)
    }

    /// The JSON body put on the queue (always carries the requestId).
    pub fn to_queue_body(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| unreachable!("a validated request always serializes: {e}"))
    }
}

fn parse_messages(value: Value) -> Result<Vec<ChatMessage>, RequestError> {
    let Value::Array(items) = value else {
        return Err(RequestError::invalid("messages", "must be an array of {role, content} objects"));
    };
    if items.is_empty() {
        return Err(RequestError::invalid("messages", "must not be empty"));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let field = |name: &str| format!("messages[{i}].{name}");
            let Value::Object(mut object) = item else {
                return Err(RequestError::invalid(format!("messages[{i}]"), "must be an object with role and content"));
            };
            if let Some(unknown) = object.keys().find(|k| !["role", "content"].contains(&k.as_str())) {
                return Err(RequestError::invalid(
                    field(&shown_name(unknown)),
                    "unknown field (allowed: role, content)",
                ));
            }
            let role = match object.remove("role") {
                Some(Value::String(role)) if ROLES.contains(&role.as_str()) => role,
                _ => return Err(RequestError::invalid(field("role"), format!("must be one of {}", ROLES.join(", ")))),
            };
            let content = match object.remove("content") {
                Some(Value::String(content)) => content,
                _ => return Err(RequestError::invalid(field("content"), "must be a string")),
            };
            Ok(ChatMessage { role, content })
        })
        .collect()
}

/// `deadlineSeconds` (relative) or `deadline` (RFC 3339), turned into one absolute deadline.
fn parse_deadline(object: &mut Map<String, Value>, intake: Intake) -> Result<Option<DateTime<Utc>>, RequestError> {
    let (Intake::Api(start) | Intake::Queue(start)) = intake;
    let relative = parse_optional_number(
        object,
        "deadlineSeconds",
        |s| (1.0..=MAX_DEADLINE_SECONDS).contains(&s),
        "of seconds from 1 to 86400 (24 hours)",
    )?;
    let absolute = object.remove("deadline");
    match (relative, absolute) {
        (Some(_), Some(_)) => {
            Err(RequestError::invalid("deadline", "give either deadline or deadlineSeconds, not both"))
        }
        (Some(seconds), None) => Ok(Some(start + chrono::Duration::milliseconds((seconds * 1000.0).round() as i64))),
        (None, None) => Ok(None),
        (None, Some(value)) => {
            let deadline = value
                .as_str()
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                .map(|d| d.with_timezone(&Utc))
                .ok_or_else(|| {
                    RequestError::invalid(
                        "deadline",
                        format!("must be an RFC 3339 date-time such as 2026-11-29T18:30:00Z, got {}", clip(&value)),
                    )
                })?;
            if let Intake::Api(accepted) = intake {
                if deadline <= accepted {
                    return Err(RequestError::invalid("deadline", format!("already passed ({})", clip(&value))));
                }
                if (deadline - accepted).as_seconds_f64() > MAX_DEADLINE_SECONDS {
                    return Err(RequestError::invalid("deadline", "must be at most 24 hours after acceptance"));
                }
            }
            Ok(Some(deadline))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
