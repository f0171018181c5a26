//! The inference request: wire format, validation rules and the queue body, shared by router and worker.

//!
//! `strict_json`: the bodies' JSON (no key given twice); `refusal`: why a request is refused; `field_checks`: the
//! checks of one field's value; `messages`: a chat's messages; `sampling`, `output`, `origin`: the request's
//! groups of fields (its `labels` are `contract::labels`).

mod field_checks;
mod messages;
mod origin;
mod output;
mod refusal;
mod sampling;
mod strict_json;

pub(crate) use messages::ChatMessage;
pub(crate) use origin::Origin;
pub(crate) use output::Output;
pub use refusal::RequestError;
pub(crate) use refusal::shorten;
pub use sampling::MAX_TOKENS_LIMIT;
pub(crate) use sampling::Sampling;
pub(crate) use sampling::{DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P};
pub(crate) use strict_json::parse_json;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::contract::labels::Labels;
use crate::contract::request_id::RequestId;
use crate::contract::tier::{Priority, Tier};
use field_checks::{parse_callback_url, parse_optional_number, parse_prompt, parse_request_id};
use refusal::{clip, shown_name};

/// Largest request accepted, equal to SQS's MaximumMessageSize.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// Longest deadline, counted from acceptance.
pub(crate) const MAX_DEADLINE_SECONDS: f64 = 24.0 * 3600.0;

/// The fields a request may have; any other is refused by name.
pub const FIELDS: [&str; 24] = [
    "requestId",
    "prompt",
    "messages",
    "maxTokens",
    "temperature",
    "topP",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "logitBias",
    "logprobs",
    "topLogprobs",
    "responseFormat",
    "stop",
    "tools",
    "toolChoice",
    "parallelToolCalls",
    "user",
    "metadata",
    "route",
    "priority",
    "deadlineSeconds",
    "deadline",
    "callbackUrl",
];

/// A validated request, as enqueued (camelCase JSON) and as the worker runs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InferenceRequest {
    pub request_id: RequestId,
    #[serde(flatten)]
    pub input: Input,
    #[serde(flatten)]
    pub sampling: Sampling,
    /// What the answer must be: its format, stop sequences, the tools it may call.
    #[serde(flatten)]
    pub output: Output,
    /// What the caller tagged it with (`user`, `metadata`): returned with the result, never sent to the engine.
    #[serde(flatten)]
    pub labels: Labels,
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
    /// The Batch API line or the OpenAI response this request is, if either; read from the queue only.
    #[serde(flatten)]
    pub origin: Origin,
}

/// What the model is asked: a plain completion prompt or an OpenAI-style chat.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Input {
    Prompt(String),
    Messages(Vec<ChatMessage>),
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
        let origin = origin::take_origin(&mut object, matches!(intake, Intake::Queue(_)))?;
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
            (None, Some(messages)) => Input::Messages(messages::parse_messages(messages)?),
            (None, None) => return Err(RequestError::invalid("prompt", "required (or messages)")),
        };
        let sampling = sampling::take_sampling(&mut object)?;
        let output = output::take_output(&mut object, matches!(input, Input::Messages(_)))?;
        let labels = Labels::take(&mut object).map_err(|(field, why)| RequestError::invalid(field, why))?;
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
            sampling,
            output,
            labels,
            route,
            priority,
            deadline,
            callback_url,
            origin,
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
