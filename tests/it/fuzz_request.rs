//! Request parsing and validation under property tests (the test command's stand-in for the cargo-fuzz
//! target fuzz/fuzz_targets/request.rs): arbitrary bytes and request-shaped JSON never panic, a refusal
//! always names the field at fault, and an accepted request keeps the contract and survives the queue.

use crate::support::strategies::{body_bytes, request_like};
use gpuinfer::{InferenceRequest, Input, Intake, MAX_TOKENS_LIMIT, REQUEST_FIELDS, RequestError};
use proptest::prelude::*;
use serde_json::Value;

/// Parses `body` both ways (router, queue) and checks what came out.
fn check(body: &[u8]) {
    for id in [Intake::Api(chrono::Utc::now()), Intake::Queue(chrono::Utc::now())] {
        match InferenceRequest::parse(body, id) {
            Ok(request) => check_accepted(&request),
            Err(error) => check_refused(&error, body),
        }
    }
}

fn check_accepted(request: &InferenceRequest) {
    assert_eq!(request.request_id.uuid().get_version_num(), 4);
    assert!((1..=MAX_TOKENS_LIMIT).contains(&request.sampling.max_tokens));
    assert!((0.0..=2.0).contains(&request.sampling.temperature));
    assert!(request.sampling.top_p > 0.0 && request.sampling.top_p <= 1.0);
    match &request.input {
        Input::Prompt(prompt) => assert!(!prompt.trim().is_empty()),
        Input::Messages(messages) => assert!(!messages.is_empty()),
    }
    let queued = request.to_queue_body();
    assert_eq!(
        &InferenceRequest::parse(queued.as_bytes(), Intake::Queue(chrono::Utc::now())).unwrap(),
        request,
        "{queued}"
    );
}

fn check_refused(error: &RequestError, body: &[u8]) {
    let RequestError::Invalid { field, problem } = error else { panic!("a small body refused as too large: {error}") };
    assert!(!field.is_empty() && !problem.is_empty(), "{error}");
    // An unknown key is named as sent when plain, else as a JSON string (so an empty or odd name stays visible).
    let unknown_key = || {
        let value: Value = serde_json::from_slice(body).unwrap();
        value.as_object().unwrap().keys().any(|key| *field == *key || *field == serde_json::to_string(key).unwrap())
    };
    assert!(
        field == "body" || REQUEST_FIELDS.contains(&field.as_str()) || field.starts_with("messages[") || unknown_key(),
        "{error} names no field of the request"
    );
    assert_eq!(error.to_string(), format!("{field}: {problem}"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_body_is_parsed_or_refused_naming_the_field(body in body_bytes()) {
        check(&body);
    }

    #[test]
    fn request_shaped_objects_are_accepted_only_within_the_contract(value in request_like()) {
        check(value.to_string().as_bytes());
    }
}
