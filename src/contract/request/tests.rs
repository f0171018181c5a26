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
        (json!({"requestId": "550e8400-e29b-11d4-a716-446655440000", "prompt": "hi"}), "requestId: must be a UUID v4"),
        (json!({"requestId": 7, "prompt": "hi"}), "requestId: must be a UUID v4"),
        (json!({"requestId": ID}), "prompt: required (or messages)"),
        (json!({"requestId": ID, "prompt": ""}), "prompt: must not be empty"),
        (json!({"requestId": ID, "prompt": "   "}), "prompt: must not be empty"),
        (json!({"requestId": ID, "prompt": 12}), "prompt: must be a string, got a number"),
        (json!({"requestId": ID, "prompt": "a", "messages": []}), "prompt: give either prompt or messages"),
        (json!({"requestId": ID, "prompt": "hi", "maxTokens": 0}), "maxTokens: must be an integer from 1 to 2048"),
        (json!({"requestId": ID, "prompt": "hi", "maxTokens": 2049}), "maxTokens: must be an integer from 1 to 2048"),
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
        (json!({"requestId": ID, "messages": [{"role": "king", "content": "x"}]}), "messages[0].role: must be one of"),
        (json!({"requestId": ID, "messages": [{"role": "user"}]}), "messages[0].content: must be a string"),
        (
            json!({"requestId": ID, "messages": [{"role": "user", "content": "x", "name": "y"}]}),
            "messages[0].name: unknown field",
        ),
        (json!({"requestId": ID, "prompt": "hi", "": 1}), "\"\": unknown field"),
        (json!({"requestId": ID, "prompt": "hi", "a\r\nb": 1}), "\"a\\r\\nb\": unknown field"),
        (json!({"requestId": ID, "prompt": "hi", "x".repeat(100): 1}), &format!("{}…: unknown field", "x".repeat(64))),
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
    assert_eq!(at_api(json!({"deadline": absolute}), now).unwrap().deadline, Some(now + chrono::Duration::hours(2)));
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
