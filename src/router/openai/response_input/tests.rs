//! A create's body: what it runs as, and each refusal naming its parameter.

use super::*;
use crate::contract::request::Input;
use crate::contract::tier::{Priority, Tier};

fn read_body(body: Value) -> Result<Create, OpenAiError> {
    read(body.to_string().as_bytes(), &ModelTiers::parse("big-model=large").unwrap(), Utc::now())
}

fn param(body: Value) -> Option<String> {
    read_body(body).unwrap_err().param
}

#[test]
fn instructions_come_first_and_a_string_input_is_the_users_message() {
    let create = read_body(json!({"model": "big-model", "input": "Hi", "instructions": "Be brief.",
        "max_output_tokens": 12, "temperature": 0, "metadata": {"k": "v"}, "background": true, "store": true}))
    .unwrap();
    let Input::Messages(messages) = &create.request.input else { panic!("a chat") };
    let roles: Vec<(&str, &str)> = messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
    assert_eq!(roles, [("system", "Be brief."), ("user", "Hi")]);
    let request = &create.request;
    assert_eq!((request.max_tokens, request.temperature, request.route), (12, 0.0, Some(Tier::Large)));
    let record = &create.record;
    assert_eq!(record.id, response_id(request.request_id));
    assert!(request.request_id.is_router_made());
    assert_eq!((record.model.as_str(), record.background, record.max_output_tokens), ("big-model", true, 12));
    assert_eq!(record.input, [InputMessage { role: "user".into(), text: "Hi".into() }]);
    assert_eq!(record.metadata["k"], "v");
}

#[test]
fn messages_take_text_parts_and_developer_runs_as_system() {
    let input = json!([
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
    ]);
    let create = read_body(json!({"model": "gemma", "input": input, "service_tier": "priority"})).unwrap();
    let Input::Messages(messages) = &create.request.input else { panic!("a chat") };
    let roles: Vec<(&str, &str)> = messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
    assert_eq!(roles, [("system", "Rules."), ("user", "a\nb")]);
    assert_eq!(create.record.input[0].role, "developer", "listed as sent");
    assert_eq!((create.request.route, create.request.priority), (None, Priority::High));
    assert!(!create.record.background, "OpenAI's default");
}

#[test]
fn what_gpuinfer_does_not_run_is_refused_by_name() {
    let base = || json!({"model": "small", "input": "Hi"});
    let with = |name: &str, value: Value| {
        let mut body = base();
        body[name] = value;
        body
    };
    let cases = [
        (with("tools", json!([{"type": "web_search"}])), "tools"),
        (with("reasoning", json!({"effort": "low"})), "reasoning"),
        (with("previous_response_id", json!("resp_x")), "previous_response_id"),
        (with("stream", json!(true)), "stream"),
        (with("store", json!(false)), "store"),
        (with("max_output_tokens", json!(99_999)), "max_output_tokens"),
        (with("top_p", json!(0)), "top_p"),
        (with("metadata", json!({"k": 1})), "metadata"),
        (with("input", json!([{"role": "user", "content": [{"type": "input_image"}]}])), "input[0].content[0]"),
        (with("input", json!([{"role": "tool", "content": "x"}])), "input[0].role"),
        (with("input", json!([{"type": "function_call_output", "output": "x"}])), "input[0].type"),
        (with("input", json!("")), "input"),
        (json!({"input": "Hi"}), "model"),
    ];
    for (body, expected) in cases {
        assert_eq!(param(body.clone()).as_deref(), Some(expected), "{body}");
    }
}

#[test]
fn null_no_tools_and_no_streaming_are_not_given() {
    let body = json!({"model": "small", "input": "Hi", "tools": [], "stream": false, "reasoning": null});
    assert!(read_body(body).is_ok());
}
