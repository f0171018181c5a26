//! Unit tests of `router/openai/batch_output.rs`.

use super::*;

fn finishing(expired: bool) -> Finishing<'static> {
    Finishing {
        batch_id: "batch_x",
        line_key: Some(b"the batch's secret"),
        input_file_id: "file-x",
        endpoint: Endpoint::ChatCompletions,
        expired,
    }
}

fn label() -> LineLabel {
    LineLabel { custom_id: "req-1".into(), model: "small".into() }
}

#[test]
fn a_success_becomes_an_openai_chat_completion() {
    let id = RequestId::new_v4();
    let document = json!({"requestId": id, "status": "success", "model": "gemma", "result": {"text": "hi", "finishReason": "stop", "usage": {"promptTokens": 3, "completionTokens": 1, "totalTokens": 4}}});
    let Placed::Output(line) = place(&label(), id, Some(document.to_string().as_bytes()), finishing(false)) else {
        panic!("not an output line")
    };
    assert_eq!(line["custom_id"], "req-1");
    assert_eq!(line["response"]["status_code"], 200);
    let body = &line["response"]["body"];
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gemma");
    assert_eq!(body["choices"][0]["message"]["content"], "hi");
    assert_eq!(body["usage"]["total_tokens"], 4);
    assert_eq!(line["error"], Value::Null);
}

#[test]
fn failures_go_to_the_error_file_and_canceled_lines_only_when_expired() {
    let id = RequestId::new_v4();
    let rejected = json!({"status": "error", "error": {"code": "engine_rejected", "message": "too long"}}).to_string();
    let Placed::Errors(line) = place(&label(), id, Some(rejected.as_bytes()), finishing(false)) else { panic!() };
    assert_eq!(line["response"]["status_code"], 400);
    assert_eq!(line["response"]["body"]["error"]["message"], "too long");
    let canceled = json!({"status": "error", "error": {"code": "canceled", "message": "x"}}).to_string();
    assert_eq!(place(&label(), id, Some(canceled.as_bytes()), finishing(false)), Placed::Nowhere);
    let Placed::Errors(line) = place(&label(), id, Some(canceled.as_bytes()), finishing(true)) else { panic!() };
    assert_eq!(line["error"]["code"], "batch_expired");
}
