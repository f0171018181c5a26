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
mod tests {
    //! Table tests of the request contract: every validation rule, its error text, and the queue body.

    use chrono::{DateTime, Utc};
    use serde_json::json;

    use crate::contract::request::{InferenceRequest, Input, Intake, MAX_REQUEST_BYTES, RequestError};
    use crate::contract::tier::{Priority, Tier};

    const ID: &str = "550e8400-e29b-41d4-a716-446655440000";

    fn parse(value: serde_json::Value) -> Result<InferenceRequest, RequestError> {
        InferenceRequest::parse(value.to_string().as_bytes(), Intake::Queue(chrono::Utc::now()))
    }

    #[test]
    fn accepts_the_sample_example_with_defaults_filled_in() {
        let request = parse(json!({"requestId": ID, "prompt": "What is Amazon ECS?"})).unwrap();
        assert_eq!(request.request_id.to_string(), ID);
        assert_eq!(request.input, Input::Prompt("What is Amazon ECS?".into()));
        assert_eq!(
            (request.sampling.max_tokens, request.sampling.temperature, request.sampling.top_p, request.route),
            (256, 0.7, 1.0, None)
        );
    }

    #[test]
    fn accepts_every_field_at_its_limits() {
        for (field, value) in [
            ("maxTokens", json!(1)),
            ("maxTokens", json!(2048)),
            ("temperature", json!(0)),
            ("temperature", json!(2.0)),
            ("topP", json!(0.0001)),
            ("topP", json!(1)),
            ("route", json!("large")),
            ("route", json!("small")),
            ("route", json!(null)),
        ] {
            let mut body = json!({"requestId": ID, "prompt": "hi"});
            body[field] = value.clone();
            assert!(parse(body).is_ok(), "{field} = {value} should be accepted");
        }
    }

    #[test]
    fn rejects_each_broken_rule_naming_the_field() {
        let cases = [
            (json!({"prompt": "hi"}), "requestId: required"),
            (json!({"requestId": "nope", "prompt": "hi"}), "requestId: must be a UUID v4"),
            (
                json!({"requestId": "550e8400-e29b-11d4-a716-446655440000", "prompt": "hi"}),
                "requestId: must be a UUID v4",
            ),
            (json!({"requestId": 7, "prompt": "hi"}), "requestId: must be a UUID v4"),
            (json!({"requestId": ID}), "prompt: required (or messages)"),
            (json!({"requestId": ID, "prompt": ""}), "prompt: must not be empty"),
            (json!({"requestId": ID, "prompt": "   "}), "prompt: must not be empty"),
            (json!({"requestId": ID, "prompt": 12}), "prompt: must be a string, got a number"),
            (json!({"requestId": ID, "prompt": "a", "messages": []}), "prompt: give either prompt or messages"),
            (json!({"requestId": ID, "prompt": "hi", "maxTokens": 0}), "maxTokens: must be an integer from 1 to 2048"),
            (
                json!({"requestId": ID, "prompt": "hi", "maxTokens": 2049}),
                "maxTokens: must be an integer from 1 to 2048",
            ),
            (json!({"requestId": ID, "prompt": "hi", "maxTokens": 12.5}), "maxTokens: must be an integer"),
            (json!({"requestId": ID, "prompt": "hi", "maxTokens": "10"}), "maxTokens: must be an integer"),
            (
                json!({"requestId": ID, "prompt": "hi", "temperature": -0.1}),
                "temperature: must be a number from 0.0 to 2.0",
            ),
            (json!({"requestId": ID, "prompt": "hi", "temperature": 2.01}), "temperature: must be a number"),
            (json!({"requestId": ID, "prompt": "hi", "topP": 0}), "topP: must be a number greater than 0"),
            (json!({"requestId": ID, "prompt": "hi", "topP": 1.5}), "topP: must be a number greater than 0"),
            (json!({"requestId": ID, "prompt": "hi", "route": "medium"}), "route: must be \"small\" or \"large\""),
            (json!({"requestId": ID, "prompt": "hi", "model": "x"}), "model: unknown field"),
            (json!({"requestId": ID, "messages": "hi"}), "messages: must be an array"),
            (json!({"requestId": ID, "messages": []}), "messages: must not be empty"),
            (json!({"requestId": ID, "messages": ["hi"]}), "messages[0]: must be an object"),
            (
                json!({"requestId": ID, "messages": [{"role": "king", "content": "x"}]}),
                "messages[0].role: must be one of",
            ),
            (json!({"requestId": ID, "messages": [{"role": "user"}]}), "messages[0].content: must be a string"),
            (
                json!({"requestId": ID, "messages": [{"role": "user", "content": "x", "audio": "y"}]}),
                "messages[0].audio: unknown field",
            ),
            (json!({"requestId": ID, "prompt": "hi", "": 1}), "\"\": unknown field"),
            (json!({"requestId": ID, "prompt": "hi", "a\r\nb": 1}), "\"a\\r\\nb\": unknown field"),
            (
                json!({"requestId": ID, "prompt": "hi", "x".repeat(100): 1}),
                &format!("{}…: unknown field", "x".repeat(64)),
            ),
            (
                json!({"requestId": ID, "messages": [{"role": "user", "content": "x", "": "y"}]}),
                "messages[0].\"\": unknown field",
            ),
            (json!(["not", "an", "object"]), "body: must be a JSON object"),
        ];
        for (body, expected) in cases {
            let error = parse(body.clone()).expect_err(&format!("{body} should be rejected"));
            let text = error.to_string();
            assert!(text.starts_with(expected), "{body}: got {text:?}, expected it to start with {expected:?}");
        }
    }

    #[test]
    fn rejects_bodies_that_are_not_json() {
        for body in [&b""[..], b"{", b"\xff\xfe", b"null"] {
            let error = InferenceRequest::parse(body, Intake::Api(chrono::Utc::now())).unwrap_err();
            assert!(error.to_string().starts_with("body: "), "{body:?} gave {error}");
        }
    }

    #[test]
    fn rejects_bodies_over_one_mebibyte_before_parsing() {
        let body = vec![b' '; MAX_REQUEST_BYTES + 1];
        let error = InferenceRequest::parse(&body, Intake::Api(chrono::Utc::now())).unwrap_err();
        assert!(matches!(error, RequestError::TooLarge { .. }), "{error}");
    }

    #[test]
    fn generates_a_v4_request_id_only_when_asked_to() {
        let body = json!({"prompt": "hi"}).to_string();
        let request = InferenceRequest::parse(body.as_bytes(), Intake::Api(chrono::Utc::now())).unwrap();
        assert_eq!(request.request_id.uuid().get_version_num(), 4);
        assert!(InferenceRequest::parse(body.as_bytes(), Intake::Queue(chrono::Utc::now())).is_err());
    }

    #[test]
    fn chat_messages_round_trip_through_the_queue_body() {
        let original = parse(json!({
            "requestId": ID,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            "maxTokens": 32, "temperature": 0.1, "topP": 0.9, "route": "large",
        }))
        .unwrap();
        assert_eq!(original.route, Some(Tier::Large));
        assert_eq!(original.input.char_count(), "Be brief.Hi".chars().count());
        let again =
            InferenceRequest::parse(original.to_queue_body().as_bytes(), Intake::Queue(chrono::Utc::now())).unwrap();
        assert_eq!(again, original);
    }

    /// Found by tests/it/fuzz_request.rs: without serde_json's exact float parsing this topP came back one unit in the
    /// last place away from what the router accepted.
    #[test]
    fn numbers_survive_the_queue_body_bit_for_bit() {
        let original = parse(json!({"requestId": ID, "prompt": "hi", "topP": 7.743809359149756e-178})).unwrap();
        let again =
            InferenceRequest::parse(original.to_queue_body().as_bytes(), Intake::Queue(chrono::Utc::now())).unwrap();
        assert_eq!(again.sampling.top_p.to_bits(), original.sampling.top_p.to_bits());
        assert_eq!(original.sampling.top_p.to_bits(), 7.743809359149756e-178_f64.to_bits());
    }

    #[test]
    fn the_queue_body_uses_the_wire_field_names() {
        let request = parse(json!({"requestId": ID, "prompt": "hi"})).unwrap();
        let body: serde_json::Value = serde_json::from_str(&request.to_queue_body()).unwrap();
        assert_eq!(body, json!({"requestId": ID, "prompt": "hi", "maxTokens": 256, "temperature": 0.7, "topP": 1.0}));
    }

    /// Parses `fields` added to a minimal client request accepted at `at`.
    fn at_api(fields: serde_json::Value, at: DateTime<Utc>) -> Result<InferenceRequest, RequestError> {
        let mut body = json!({"requestId": ID, "prompt": "hi"});
        body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        InferenceRequest::parse(body.to_string().as_bytes(), Intake::Api(at))
    }

    #[test]
    fn priority_deadline_and_callback_are_optional_and_checked() {
        let now = Utc::now();
        let plain = at_api(json!({}), now).unwrap();
        assert_eq!((plain.priority, plain.deadline, plain.callback_url), (Priority::Normal, None, None));
        let full = at_api(
            json!({"priority": "high", "deadlineSeconds": 90, "callbackUrl": "https://hooks.example.com/done?x=1"}),
            now,
        )
        .unwrap();
        assert_eq!(full.priority, Priority::High);
        assert_eq!(full.deadline, Some(now + chrono::Duration::seconds(90)), "relative to acceptance");
        assert_eq!(full.callback_url.as_deref(), Some("https://hooks.example.com/done?x=1"));
        let absolute = (now + chrono::Duration::hours(2)).to_rfc3339();
        assert_eq!(
            at_api(json!({"deadline": absolute}), now).unwrap().deadline,
            Some(now + chrono::Duration::hours(2))
        );
        assert_eq!(
            at_api(json!({"deadlineSeconds": 0.5e1}), now).unwrap().deadline,
            Some(now + chrono::Duration::seconds(5))
        );

        let past = (now - chrono::Duration::seconds(1)).to_rfc3339();
        let tomorrow = (now + chrono::Duration::hours(25)).to_rfc3339();
        for (fields, expected) in [
            (json!({"priority": "urgent"}), "priority: must be \"high\", \"normal\" or \"batch\""),
            (json!({"priority": 1}), "priority: must be \"high\", \"normal\" or \"batch\""),
            (json!({"deadlineSeconds": 0}), "deadlineSeconds: must be a number of seconds from 1 to 86400"),
            (json!({"deadlineSeconds": 86401}), "deadlineSeconds: must be a number of seconds from 1 to 86400"),
            (json!({"deadlineSeconds": "60"}), "deadlineSeconds: must be a number"),
            (json!({"deadline": "tomorrow"}), "deadline: must be an RFC 3339 date-time"),
            (json!({"deadline": past}), "deadline: already passed"),
            (json!({"deadline": tomorrow}), "deadline: must be at most 24 hours after acceptance"),
            (json!({"deadline": absolute, "deadlineSeconds": 60}), "deadline: give either deadline or deadlineSeconds"),
            (json!({"callbackUrl": 7}), "callbackUrl: must be a string"),
            (json!({"callbackUrl": "not a url"}), "callbackUrl: not a valid URL"),
            (json!({"callbackUrl": "ftp://example.com/x"}), "callbackUrl: must be an https:// URL"),
            (json!({"callbackUrl": "https://user:pw@example.com/"}), "callbackUrl: must not carry credentials"),
            (json!({"callbackUrl": format!("https://example.com/{}", "x".repeat(2048))}), "callbackUrl: longer than"),
        ] {
            let error = at_api(fields.clone(), now).expect_err(&format!("{fields} should be rejected"));
            assert!(error.to_string().starts_with(expected), "{fields}: got {error}");
        }
    }

    #[test]
    fn the_queue_carries_an_absolute_deadline_and_takes_any_one_back() {
        let accepted = Utc::now();
        let request = at_api(json!({"deadlineSeconds": 30, "priority": "high"}), accepted).unwrap();
        let body: serde_json::Value = serde_json::from_str(&request.to_queue_body()).unwrap();
        assert_eq!(body["priority"], "high");
        assert!(body.get("deadlineSeconds").is_none(), "only the absolute form travels");
        let later = accepted + chrono::Duration::minutes(5);
        let received = InferenceRequest::parse(request.to_queue_body().as_bytes(), Intake::Queue(later)).unwrap();
        assert_eq!(received, request, "a passed deadline is still a valid message: the worker expires it");
        assert!(received.expired_at(later) && !received.expired_at(accepted));
        let relative = json!({"requestId": ID, "prompt": "hi", "deadlineSeconds": 10}).to_string();
        let sent = InferenceRequest::parse(relative.as_bytes(), Intake::Queue(accepted)).unwrap();
        assert_eq!(sent.deadline, Some(accepted + chrono::Duration::seconds(10)), "on the queue: from the send");
    }

    /// A schema as OpenAI's structured-output examples write one.
    fn person_format() -> serde_json::Value {
        json!({"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": {
            "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"], "additionalProperties": false}}})
    }

    fn chat(fields: serde_json::Value) -> Result<InferenceRequest, RequestError> {
        let mut body = json!({"requestId": ID, "messages": [{"role": "user", "content": "Ann is 31."}]});
        body.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
        parse(body)
    }

    #[test]
    fn what_the_engines_honour_is_taken_and_survives_the_queue() {
        let tool = json!({"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}});
        let request = chat(json!({
            "responseFormat": person_format(), "seed": 7, "stop": ["\n\n", "END"], "presencePenalty": -2,
            "frequencyPenalty": 1.5, "logitBias": {"50256": -100, "13": 2.5}, "logprobs": true, "topLogprobs": 20, "tools": [tool],
            "toolChoice": {"type": "function", "function": {"name": "get_weather"}}, "parallelToolCalls": false,
            "user": "u-1", "metadata": {"job": "extract"},
        }))
        .unwrap();
        let sampling = &request.sampling;
        assert_eq!(
            (
                sampling.seed,
                sampling.presence_penalty,
                sampling.frequency_penalty,
                sampling.logprobs,
                sampling.top_logprobs
            ),
            (Some(7), Some(-2.0), Some(1.5), true, Some(20))
        );
        assert_eq!(sampling.logit_bias.as_ref().map(|b| b["50256"].clone()), Some(json!(-100)));
        assert_eq!(request.output.stop, ["\n\n", "END"]);
        assert_eq!(request.output.response_format, Some(person_format()));
        assert_eq!((request.output.tools.len(), request.output.parallel_tool_calls), (1, Some(false)));
        assert_eq!(request.labels.user.as_deref(), Some("u-1"));
        let again = InferenceRequest::parse(request.to_queue_body().as_bytes(), Intake::Queue(Utc::now())).unwrap();
        assert_eq!(again, request);
        assert_eq!(chat(json!({"stop": "END", "responseFormat": {"type": "text"}})).unwrap().output.stop, ["END"]);
        assert_eq!(chat(json!({"responseFormat": {"type": "text"}})).unwrap().output.response_format, None);
    }

    #[test]
    fn content_parts_and_the_developer_role_are_a_chat_as_openai_writes_it() {
        let request = chat(json!({"messages": [
            {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "name": "ann"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        ]}))
        .unwrap();
        let Input::Messages(messages) = &request.input else { panic!("a chat") };
        let roles: Vec<(&str, &str)> = messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
        assert_eq!(roles, [("system", "Be brief."), ("user", "a\nb"), ("assistant", ""), ("tool", "42")]);
        assert_eq!(messages[3].tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn each_output_and_sampling_control_is_checked_naming_its_path() {
        let tool = |name: &str| json!({"type": "function", "function": {"name": name}});
        let metadata: serde_json::Map<String, serde_json::Value> =
            (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
        let remote = json!({"type": "json_schema", "json_schema": {"name": "x",
            "schema": {"$ref": "http://127.0.0.1:9/schema.json"}}});
        let big =
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"description": "x".repeat(70_000)}}});
        let cases = [
            (json!({"responseFormat": {"type": "xml"}}), "responseFormat.type: must be"),
            (json!({"responseFormat": {"type": "json_schema"}}), "responseFormat.json_schema: required"),
            (
                json!({"responseFormat": {"type": "json_schema", "json_schema": {"schema": {}}}}),
                "responseFormat.json_schema.name",
            ),
            (
                json!({"responseFormat": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 12}}}}),
                "responseFormat.json_schema.schema: not a valid JSON Schema",
            ),
            (json!({"responseFormat": remote}), "responseFormat.json_schema.schema: not a valid JSON Schema"),
            (json!({"responseFormat": big}), "responseFormat: larger than 64 KiB"),
            (json!({"responseFormat": {"type": "json_object", "schema": {}}}), "responseFormat.schema: unknown field"),
            (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop: a non-empty string or a list of 1 to 4"),
            (json!({"stop": ""}), "stop: a non-empty string"),
            (json!({"presencePenalty": 2.5}), "presencePenalty: must be a number from -2.0 to 2.0"),
            (json!({"frequencyPenalty": -3}), "frequencyPenalty: must be a number from -2.0 to 2.0"),
            (json!({"seed": 1.5}), "seed: must be an integer"),
            (json!({"logitBias": {"50256": -101}}), "logitBias: an object of token ids"),
            (json!({"logitBias": {"a token": 1}}), "logitBias: an object of token ids"),
            (json!({"logprobs": true, "topLogprobs": 21}), "topLogprobs: must be an integer from 0 to 20"),
            (json!({"topLogprobs": 2}), "topLogprobs: needs logprobs: true"),
            (json!({"tools": [{"type": "web_search"}]}), "tools[0].type: \"web_search\" tools are not served"),
            (json!({"tools": [tool("a b")]}), "tools[0].function.name: required"),
            (json!({"tools": [tool("f"), tool("f")]}), "tools[1].function.name: another tool has this name"),
            (
                json!({"tools": (0..129).map(|i| tool(&format!("f{i}"))).collect::<Vec<_>>()}),
                "tools: at most 128 tools",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}]}),
                "tools[0].function.parameters: not a valid JSON Schema",
            ),
            (
                json!({"tools": [tool("f")], "toolChoice": {"type": "function", "function": {"name": "g"}}}),
                "toolChoice: names a function",
            ),
            (json!({"toolChoice": "required"}), "toolChoice: needs tools"),
            (json!({"parallelToolCalls": true}), "parallelToolCalls: needs tools"),
            (json!({"metadata": metadata}), "metadata: at most 16 pairs"),
            (json!({"metadata": {"k".repeat(65): "v"}}), "metadata: key"),
            (json!({"metadata": {"k": "v".repeat(513)}}), "metadata: \"k\": a value longer than 512"),
            (json!({"metadata": {"k": 1}}), "metadata: \"k\": values must be strings"),
            (json!({"user": 7}), "user: must be a string"),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}),
                "messages[0].content[0].type: \"image_url\" is not supported",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]}),
                "messages[0].tool_call_id: only a tool message",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}),
                "messages[0].tool_calls: only an assistant",
            ),
        ];
        for (fields, expected) in cases {
            let error = chat(fields.clone()).expect_err(&format!("{fields} should be refused"));
            assert!(error.to_string().starts_with(expected), "{fields}: got {error}");
        }
        let remote = chat(json!({"responseFormat": remote})).unwrap_err().to_string();
        assert!(remote.contains("gpuinfer never fetches a schema"), "{remote}");
        let on_a_prompt = parse(json!({"requestId": ID, "prompt": "hi", "tools": [tool("f")]})).unwrap_err();
        assert!(on_a_prompt.to_string().starts_with("tools: need messages"), "{on_a_prompt}");
    }

    #[test]
    fn an_answer_is_held_to_its_format() {
        let request = chat(json!({"responseFormat": person_format()})).unwrap();
        assert_eq!(request.output.check_answer(r#"{"name": "Ann", "age": 31}"#), Ok(()));
        let wrong = request.output.check_answer(r#"{"name": "Ann", "age": "31"}"#).unwrap_err();
        assert!(wrong.starts_with("the answer does not match its schema") && wrong.contains("/age"), "{wrong}");
        let cut = request.output.check_answer(r#"{"name": "An"#).unwrap_err();
        assert!(cut.starts_with("the answer is not JSON"), "{cut}");
        let object = chat(json!({"responseFormat": {"type": "json_object"}})).unwrap();
        assert_eq!(object.output.check_answer(" {\"a\": 1}\n"), Ok(()));
        assert!(object.output.check_answer("[1]").is_err());
        assert_eq!(chat(json!({})).unwrap().output.check_answer("free text"), Ok(()));
    }
}
