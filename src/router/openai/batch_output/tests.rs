//! Unit tests of `router/openai/batch_output.rs`.

use super::*;

fn finishing(expired: bool) -> Finishing<'static> {
    Finishing {
        batch_id: "batch_x",
        line_key: Some(b"the batch's secret"),
        input_file_id: "file-x",
        endpoint: Endpoint::ChatCompletions,
        expired,
        owner: Some("team-a"),
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

#[tokio::test]
async fn a_batchs_output_and_error_files_are_its_projects() {
    use crate::ports::object_io::{one_chunk, read_json};
    use crate::router::api_keys::Caller;
    use crate::router::openai::owner::visible_to;
    let dir = tempfile::tempdir().unwrap();
    let store = crate::local::store::FileStore::open(dir.path()).unwrap();
    let batch = Finishing { input_file_id: "file-in", ..finishing(false) };
    let line = |custom_id: &str| {
        let body = json!({"model": "small", "messages": [{"role": "user", "content": "hi"}]});
        json!({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}).to_string()
    };
    let input = format!("{}\n{}\n", line("ok"), line("refused"));
    store.put(&files::content_key("file-in"), one_chunk(input.into_bytes())).await.unwrap();
    let request = |line| BatchLine { id: batch.batch_id.to_owned(), line }.request_id(batch.line_key);
    let usage = json!({"promptTokens": 1, "completionTokens": 1, "totalTokens": 2});
    let success = json!({"status": "success", "result": {"text": "hi", "finishReason": "stop", "usage": usage}});
    let refused = json!({"status": "error", "error": {"code": "engine_rejected", "message": "too long"}});
    let results: &dyn ResultStore = &store;
    results.put_if_absent(request(0), success.to_string().as_bytes()).await.unwrap();
    results.put_if_absent(request(1), refused.to_string().as_bytes()).await.unwrap();

    let built = assemble(&store, results, batch).await.unwrap().unwrap();
    for file in [built.output.unwrap(), built.errors.unwrap()] {
        let stored: FileObject = read_json(&store, &files::record_key(&file.id)).await.unwrap().unwrap();
        assert_eq!(stored.owner.as_deref(), Some("team-a"), "{}", file.id);
        assert!(
            visible_to(&Caller::of("team-b"), Some(stored)).is_none(),
            "another project's batch files are not seen"
        );
    }
}
