//! Input lines: what passes, what each refusal names.

use super::*;
use crate::contract::request::Input;
use crate::contract::tier::Tier;

/// A batch's secret for its lines' ids.
const KEY: &[u8] = b"the batch's secret";

fn checked(text: &str, endpoint: Endpoint) -> Result<CheckedLine, LineError> {
    let models = ModelTiers::parse("big-model=large").unwrap();
    let line = BatchLine { id: "batch_x".into(), line: 3 };
    check(&(4, text.to_owned()), endpoint, &models, (line, Some(KEY)), Utc::now() + chrono::Duration::hours(24))
}

#[test]
fn a_chat_line_becomes_a_request_under_the_lines_own_id() {
    let text = r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"big-model","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":12,"temperature":0}}"#;
    let line = checked(text, Endpoint::ChatCompletions).unwrap();
    assert_eq!(line.label, LineLabel { custom_id: "a".into(), model: "big-model".into() });
    let request = line.request;
    assert_eq!(request.request_id, BatchLine { id: "batch_x".into(), line: 3 }.request_id(Some(KEY)));
    assert_eq!((request.max_tokens, request.temperature, request.route), (12, 0.0, Some(Tier::Large)));
    assert!(matches!(request.input, Input::Messages(_)));
    assert!(request.deadline.is_some());
}

#[test]
fn an_unmapped_model_is_left_to_the_heuristics() {
    let text = r#"{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"gemma","prompt":"Once"}}"#;
    assert_eq!(checked(text, Endpoint::Completions).unwrap().request.route, None);
}

#[test]
fn each_refusal_names_the_parameter_and_line() {
    let cases = [
        (r#"{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"x"}}"#, "url"),
        (r#"{"method":"POST","url":"/v1/chat/completions","body":{}}"#, "custom_id"),
        (r#"{"custom_id":"a","method":"GET","url":"/v1/chat/completions","body":{}}"#, "method"),
        (r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}"#, "body.model"),
        (
            r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true}}"#,
            "body.logprobs",
        ),
        (
            r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":99999}}"#,
            "body.max_tokens",
        ),
        (
            r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","prompt":"x"}}"#,
            "body.prompt",
        ),
    ];
    for (text, param) in cases {
        let error = checked(text, Endpoint::ChatCompletions).unwrap_err();
        assert_eq!(error.param.as_deref(), Some(param), "{text}: {}", error.message);
        assert_eq!(error.line, 4);
    }
}
