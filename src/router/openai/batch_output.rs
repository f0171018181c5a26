//! A finished batch's output and error files: one line per request in input order, in OpenAI's shape
//! (`id`, `custom_id`, `response{status_code, request_id, body}`, `error`), `body` the completion as the
//! endpoint answers it. Built from the stored results through temporary files, so memory does not grow with the
//! batch, and stored under ids derived from the batch's, so two finishers write the same files.

use std::io::Write;

use futures_util::{StreamExt, TryStreamExt};
use serde_json::{Value, json};
use tokio_util::io::ReaderStream;

use super::batch_input::{self, Endpoint, LineLabel};
use super::files::{self, FileObject};
use super::objects::unix_now;
use super::owner::write_owned;
use super::project_index;
use super::response_input::{self, Create};
use super::response_object::response_object;
use super::response_record::ResponseRecord;
use super::settings::ModelTiers;
use crate::contract::batch_line::BatchLine;
use crate::contract::error_body;
use crate::contract::openai_response::response_id;
use crate::contract::request_id::RequestId;
use crate::ports::{ObjectStore, ResultStore, StoreError};

/// Results read at once while the files are built: on S3 one GET per line, and the poll that builds the files of a
/// 50,000-line batch must end within API Gateway's 30 s.
const READS_IN_FLIGHT: usize = 128;

/// Where a line's result goes.
#[derive(Debug, PartialEq)]
enum Placed {
    Output(Value),
    Errors(Value),
    /// Canceled with its batch: in neither file.
    Nowhere,
}

/// What is being finished: the batch, its endpoint and how canceled lines count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Finishing<'a> {
    pub(crate) batch_id: &'a str,
    /// The batch's secret for its lines' ids (None: a batch created before its lines had one).
    pub(crate) line_key: Option<&'a [u8]>,
    pub(crate) input_file_id: &'a str,
    pub(crate) endpoint: Endpoint,
    /// The batch expired: its canceled lines are errors (`batch_expired`) rather than left out.
    pub expired: bool,
    /// The batch's project, which its files belong to.
    pub(crate) owner: Option<&'a str>,
}

/// The files a finished batch has, each None when it would be empty.
#[derive(Debug, Default)]
pub(crate) struct Files {
    pub(crate) output: Option<FileObject>,
    pub(crate) errors: Option<FileObject>,
}

/// Builds and stores the batch's output and error files from its input file and its lines' results; None when the
/// input file is gone (deleted while the batch ran).
pub(crate) async fn assemble(
    objects: &dyn ObjectStore,
    results: &dyn ResultStore,
    batch: Finishing<'_>,
) -> Result<Option<Files>, StoreError> {
    let Some((_, chunks)) = objects.get(&files::content_key(batch.input_file_id)).await? else {
        return Ok(None);
    };
    let io = |e: std::io::Error| StoreError::caused("building the batch's files", e);
    let (mut output, mut errors) = (tempfile::tempfile().map_err(io)?, tempfile::tempfile().map_err(io)?);
    let (mut output_lines, mut error_lines) = (0u64, 0u64);
    let mut placed = batch_input::lines(chunks)
        .enumerate()
        .map(|(index, line)| async move {
            let (_, text) = line.map_err(|e| StoreError::caused("reading the input file", e))?;
            let id = BatchLine { id: batch.batch_id.to_owned(), line: u32::try_from(index).unwrap_or(u32::MAX) }
                .request_id(batch.line_key);
            let document = results.get(id).await?;
            Ok::<_, StoreError>(place(&text, id, document.as_deref(), batch))
        })
        .buffered(READS_IN_FLIGHT);
    while let Some(line) = placed.try_next().await? {
        let (file, count, line) = match line {
            Placed::Output(line) => (&mut output, &mut output_lines, line),
            Placed::Errors(line) => (&mut errors, &mut error_lines, line),
            Placed::Nowhere => continue,
        };
        serde_json::to_writer(&mut *file, &line).map_err(|e| io(e.into()))?;
        file.write_all(b"\n").map_err(io)?;
        *count += 1;
    }
    let stem = batch.batch_id.trim_start_matches("batch_");
    Ok(Some(Files {
        output: store(objects, batch.owner, output, output_lines, format!("file-{stem}out"), "batch_output.jsonl")
            .await?,
        errors: store(objects, batch.owner, errors, error_lines, format!("file-{stem}err"), "batch_errors.jsonl")
            .await?,
    }))
}

/// Stores one built file (when it has lines) with its record, purpose `batch_output` as OpenAI's are, the project
/// `owner`'s.
async fn store(
    objects: &dyn ObjectStore,
    owner: Option<&str>,
    mut file: std::fs::File,
    lines: u64,
    id: String,
    filename: &str,
) -> Result<Option<FileObject>, StoreError> {
    if lines == 0 {
        return Ok(None);
    }
    use std::io::Seek;
    file.rewind().map_err(|e| StoreError::caused("building the batch's files", e))?;
    let chunks = ReaderStream::new(tokio::fs::File::from_std(file)).map_err(std::io::Error::other);
    let bytes = objects.put(&files::content_key(&id), Box::pin(chunks)).await?;
    let record =
        FileObject { owner: owner.map(str::to_owned), ..FileObject::new(id, bytes, filename.into(), "batch_output") };
    write_owned(objects, &files::record_key(&record.id), &record).await?;
    project_index::add(objects, files::PREFIX, owner, &record.id).await?;
    Ok(Some(record))
}

/// The output or error line of the request of input line `text` from its stored document.
fn place(text: &str, id: RequestId, stored: Option<&[u8]>, batch: Finishing<'_>) -> Placed {
    let label = &batch_input::label(text);
    let document: Value = stored.and_then(|d| serde_json::from_slice(d).ok()).unwrap_or_default();
    let line = |response: Value, error: Value| {
        json!({
            "id": format!("batch_req_{}", id.uuid().simple()),
            "custom_id": label.custom_id,
            "response": response,
            "error": error,
        })
    };
    let code = document["error"]["code"].as_str().unwrap_or("missing_result");
    let message = document["error"]["message"].as_str().unwrap_or("no result was stored for this request");
    match (document["status"].as_str(), code) {
        (Some("success"), _) => {
            let body = match batch.endpoint {
                Endpoint::Responses => response_body(text, id, stored),
                _ => completion_body(&document, label, id, batch.endpoint),
            };
            Placed::Output(line(json!({ "status_code": 200, "request_id": id, "body": body }), Value::Null))
        }
        (_, "canceled") if !batch.expired => Placed::Nowhere,
        (_, "canceled" | "expired") => Placed::Errors(line(
            Value::Null,
            json!({ "code": "batch_expired", "message": "the batch's completion window ended before this request ran" }),
        )),
        (_, "engine_rejected") => {
            let body = error_body::openai(400, message, None, Some(code));
            Placed::Errors(line(json!({ "status_code": 400, "request_id": id, "body": body }), Value::Null))
        }
        (_, code) => Placed::Errors(line(Value::Null, json!({ "code": code, "message": message }))),
    }
}

/// The Response object of a `/v1/responses` line, made from the line's body (checked again as its create was) and
/// its stored document.
fn response_body(text: &str, id: RequestId, stored: Option<&[u8]>) -> Value {
    let Ok(Value::Object(mut line)) = serde_json::from_str::<Value>(text) else { return Value::Null };
    let Some(Value::Object(body)) = line.remove("body") else { return Value::Null };
    let ask = response_input::read_fields(body, &ModelTiers::default());
    match ask.and_then(|ask| ask.create(Vec::new(), chrono::Utc::now())) {
        Ok(Create { record, .. }) => response_object(&ResponseRecord { id: response_id(id), ..record }, stored),
        Err(_) => Value::Null,
    }
}

/// The endpoint's own answer, rebuilt from a result document: a chat completion or a text completion.
fn completion_body(document: &Value, label: &LineLabel, id: RequestId, endpoint: Endpoint) -> Value {
    let result = &document["result"];
    let model = document["model"].as_str().unwrap_or(&label.model);
    let usage = json!({
        "prompt_tokens": result["usage"]["promptTokens"],
        "completion_tokens": result["usage"]["completionTokens"],
        "total_tokens": result["usage"]["totalTokens"],
    });
    let (text, finish_reason, logprobs) = (&result["text"], &result["finishReason"], &result["logprobs"]);
    let (object, prefix, choice) = match endpoint {
        Endpoint::ChatCompletions => {
            let mut message = json!({ "role": "assistant", "content": text });
            if let Some(calls) = result.get("toolCalls") {
                // An answer that only calls tools has no content, as OpenAI's.
                let content = if text.as_str().is_some_and(|t| !t.is_empty()) { text.clone() } else { Value::Null };
                message = json!({ "role": "assistant", "content": content, "tool_calls": calls });
            }
            let choice =
                json!({ "index": 0, "message": message, "finish_reason": finish_reason, "logprobs": logprobs });
            ("chat.completion", "chatcmpl", choice)
        }
        Endpoint::Completions | Endpoint::Responses => (
            "text_completion",
            "cmpl",
            json!({ "index": 0, "text": text, "finish_reason": finish_reason, "logprobs": logprobs }),
        ),
    };
    json!({
        "id": format!("{prefix}-{}", id.uuid().simple()),
        "object": object,
        "created": unix_now(),
        "model": model,
        "choices": [choice],
        "usage": usage,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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

    /// An input line, custom_id `req-1`, model `small`.
    const LINE: &str = r#"{"custom_id":"req-1","method":"POST","url":"/v1/chat/completions","body":{"model":"small"}}"#;

    #[test]
    fn a_success_becomes_an_openai_chat_completion() {
        let id = RequestId::new_v4();
        let document = json!({"requestId": id, "status": "success", "model": "gemma", "result": {"text": "hi", "finishReason": "stop", "usage": {"promptTokens": 3, "completionTokens": 1, "totalTokens": 4}}});
        let Placed::Output(line) = place(LINE, id, Some(document.to_string().as_bytes()), finishing(false)) else {
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
        let rejected =
            json!({"status": "error", "error": {"code": "engine_rejected", "message": "too long"}}).to_string();
        let Placed::Errors(line) = place(LINE, id, Some(rejected.as_bytes()), finishing(false)) else { panic!() };
        assert_eq!(line["response"]["status_code"], 400);
        assert_eq!(line["response"]["body"]["error"]["message"], "too long");
        let canceled = json!({"status": "error", "error": {"code": "canceled", "message": "x"}}).to_string();
        assert_eq!(place(LINE, id, Some(canceled.as_bytes()), finishing(false)), Placed::Nowhere);
        let Placed::Errors(line) = place(LINE, id, Some(canceled.as_bytes()), finishing(true)) else { panic!() };
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
}
