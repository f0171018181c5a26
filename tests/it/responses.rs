//! OpenAI's background Responses on the pipeline, over HTTP against `gpuinfer dev` and the engine simulator: a
//! response is queued, run and stored as a request of POST /infer is (its id maps to the requestId, and GET
//! /results works for it); it is cut at max_output_tokens, canceled before the engine sees it, waited for when not
//! background, refused field by field in OpenAI's error shape, listed and deleted; and the official `openai` client
//! runs them on llama.cpp.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::dev::Dev;
use crate::support::engine_process::EngineProcess;
use crate::support::process::ChildProcess;
use crate::support::{eventually, free_port};

/// `gpuinfer dev` with `flags` in front of the engine simulator started with `engine_flags`.
pub(crate) struct DevOnSimulator {
    pub(crate) dev: Dev,
    pub(crate) engine: EngineProcess,
    http: reqwest::Client,
    _data: tempfile::TempDir,
}

pub(crate) async fn dev_on_simulator(engine_flags: &[&str], flags: &[&str]) -> DevOnSimulator {
    let engine = EngineProcess::start(engine_flags);
    let data = tempfile::tempdir().unwrap();
    let dev = Dev::start(data.path(), free_port(), &engine.url, flags);
    let http = reqwest::Client::new();
    dev.ready(&http).await;
    DevOnSimulator { dev, engine, http, _data: data }
}

impl DevOnSimulator {
    pub(crate) async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.dev.url));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap())
    }

    async fn create(&self, body: Value) -> Value {
        let (status, response) = self.call(reqwest::Method::POST, "/v1/responses", Some(body)).await;
        assert_eq!(status, StatusCode::OK, "{response}");
        response
    }

    async fn retrieve(&self, id: &str) -> Value {
        let (status, response) = self.call(reqwest::Method::GET, &format!("/v1/responses/{id}"), None).await;
        assert_eq!(status, StatusCode::OK, "{response}");
        response
    }

    async fn cancel(&self, id: &str) -> Value {
        let (status, response) = self.call(reqwest::Method::POST, &format!("/v1/responses/{id}/cancel"), None).await;
        assert_eq!(status, StatusCode::OK, "{response}");
        response
    }

    /// Polls the response until its status is no longer queued.
    async fn finished(&self, id: &str) -> Value {
        eventually(Duration::from_secs(30), "the response to finish", || async move {
            Some(self.retrieve(id).await).filter(|response| response["status"] != "queued")
        })
        .await
    }
}

/// The pipeline's requestId of a response id (`resp_` and the UUID's 32 hex digits).
fn request_id(response_id: &str) -> String {
    let hex = response_id.strip_prefix("resp_").unwrap_or_else(|| panic!("{response_id} is not a response id"));
    uuid::Uuid::try_parse(hex).unwrap().hyphenated().to_string()
}

fn output_text(response: &Value) -> &str {
    response["output"][0]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no output text: {response}"))
}

/// create (background) → queued → retrieve until completed: the text, the usage that adds up, the fields the client
/// sent; the same request under GET /results/{requestId}; its input items; then its deletion.
#[tokio::test]
async fn a_background_response_is_queued_then_completed_and_is_a_pipeline_request() {
    let rig = dev_on_simulator(&["--latency-ms", "300"], &[]).await;
    let created = rig
        .create(json!({
            "model": "small", "input": "Say hi.", "instructions": "Be brief.", "background": true,
            "metadata": {"ticket": "42"}, "temperature": 0.2,
        }))
        .await;
    assert_eq!(created["status"], "queued", "{created}");
    assert_eq!((created["object"].as_str(), created["background"].as_bool()), (Some("response"), Some(true)));
    let id = created["id"].as_str().unwrap();

    let done = rig.finished(id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(output_text(&done).starts_with("echo: "), "{done}");
    assert_eq!(done["output"][0]["role"], "assistant");
    let usage = &done["usage"];
    let (input, output) = (usage["input_tokens"].as_u64().unwrap(), usage["output_tokens"].as_u64().unwrap());
    assert!(output > 0 && usage["total_tokens"].as_u64() == Some(input + output), "{usage}");
    assert_eq!((done["model"].as_str(), done["instructions"].as_str()), (Some("small"), Some("Be brief.")));
    assert_eq!((done["metadata"]["ticket"].as_str(), done["temperature"].as_f64()), (Some("42"), Some(0.2)));
    assert_eq!(done["created_at"], created["created_at"]);

    let request_id = request_id(id);
    let (status, document) = rig.call(reqwest::Method::GET, &format!("/results/{request_id}"), None).await;
    assert_eq!((status, document["status"].as_str()), (StatusCode::OK, Some("success")), "{document}");
    assert_eq!(document["result"]["text"].as_str(), Some(output_text(&done)));

    let (status, items) = rig.call(reqwest::Method::GET, &format!("/v1/responses/{id}/input_items"), None).await;
    assert_eq!(status, StatusCode::OK, "{items}");
    assert_eq!(items["object"], "list");
    assert_eq!(items["data"][0]["content"][0], json!({"type": "input_text", "text": "Say hi."}), "{items}");
    assert_eq!(items["data"].as_array().unwrap().len(), 1, "instructions are not an input item: {items}");

    let (status, deleted) = rig.call(reqwest::Method::DELETE, &format!("/v1/responses/{id}"), None).await;
    assert_eq!((status, deleted), (StatusCode::OK, json!({"id": id, "object": "response", "deleted": true})));
    let (status, gone) = rig.call(reqwest::Method::GET, &format!("/v1/responses/{id}"), None).await;
    assert_eq!((status, gone["error"]["type"].as_str()), (StatusCode::NOT_FOUND, Some("not_found_error")));
    let (status, _) = rig.call(reqwest::Method::GET, &format!("/results/{request_id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the result went with the response");
}

/// Without `background` (OpenAI's default) the create waits and answers the completed response; an answer cut at
/// max_output_tokens is incomplete, with the reason.
#[tokio::test]
async fn a_response_without_background_is_waited_for_and_one_cut_at_its_limit_is_incomplete() {
    let rig = dev_on_simulator(&["--completion-tokens", "8"], &[]).await;
    let started = Instant::now();
    let done = rig.create(json!({"model": "small", "input": [{"role": "user", "content": "Hello"}]})).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(!output_text(&done).is_empty());
    assert_eq!((done["background"].as_bool(), done["incomplete_details"].is_null()), (Some(false), true));
    assert!(started.elapsed() < Duration::from_secs(10), "answered when done, not at the end of the wait");

    let cut = rig.create(json!({"model": "small", "input": "Count to ten.", "max_output_tokens": 3})).await;
    assert_eq!(cut["status"], "incomplete", "{cut}");
    assert_eq!(cut["incomplete_details"], json!({"reason": "max_output_tokens"}));
    assert_eq!((cut["usage"]["output_tokens"].as_u64(), cut["max_output_tokens"].as_u64()), (Some(3), Some(3)));
}

/// One engine slot held by a slow request: a foreground response past the wait is answered queued (and completes
/// later), a queued background one canceled ends cancelled and the engine never sees it; a finished one's cancel
/// answers it as it is.
#[tokio::test]
async fn a_queued_response_canceled_never_reaches_the_engine() {
    let rig = dev_on_simulator(
        &["--latency-ms", "2000", "--slots", "1"],
        &["--concurrency", "1", "--fixed-concurrency", "--result-wait-seconds", "1"],
    )
    .await;
    let started = Instant::now();
    let first = rig.create(json!({"model": "small", "input": "first"})).await;
    assert_eq!(first["status"], "queued", "past the 1 s wait: {first}");
    assert!(started.elapsed() < Duration::from_secs(2), "answered at the end of the wait");
    eventually(Duration::from_secs(10), "the engine to take the first request", || async {
        (rig.engine.calls().await == 1).then_some(())
    })
    .await;

    let second = rig.create(json!({"model": "small", "input": "second", "background": true})).await;
    let canceled = rig.cancel(second["id"].as_str().unwrap()).await;
    assert_eq!(canceled["status"], "cancelled", "{canceled}");
    assert_eq!(rig.retrieve(second["id"].as_str().unwrap()).await["status"], "cancelled");

    let first_id = first["id"].as_str().unwrap();
    assert_eq!(rig.finished(first_id).await["status"], "completed");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(rig.engine.calls().await, 1, "the engine was asked for the canceled response");

    let (status, refused) = rig.call(reqwest::Method::POST, &format!("/v1/responses/{first_id}/cancel"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "only background responses are canceled, as OpenAI does: {refused}");
    let third = rig.create(json!({"model": "small", "input": "third", "background": true})).await;
    let third_id = third["id"].as_str().unwrap();
    assert_eq!(rig.finished(third_id).await["status"], "completed");
    assert_eq!(rig.cancel(third_id).await["status"], "completed", "a finished response is answered as it is");
}

/// What gpuinfer does not run is refused with a 400 in OpenAI's error shape that names the field.
#[tokio::test]
async fn refused_fields_answer_400_in_openais_shape_naming_the_field() {
    let rig = dev_on_simulator(&[], &[]).await;
    let cases = [
        ("tools", json!([{"type": "web_search"}]), "tools[0].type"),
        ("reasoning", json!({"effort": "high"}), "reasoning"),
        (
            "text",
            json!({"format": {"type": "json_schema", "name": "x", "schema": {"$ref": "https://example.com/s"}}}),
            "text.format.schema",
        ),
        ("stream", json!(true), "stream"),
        ("store", json!(false), "store"),
        ("max_output_tokens", json!(100_000), "max_output_tokens"),
    ];
    for (field, value, param) in cases {
        let mut body = json!({"model": "small", "input": "Hi", "background": true});
        body[field] = value;
        let (status, refused) = rig.call(reqwest::Method::POST, "/v1/responses", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}: {refused}");
        let error = &refused["error"];
        assert_eq!((error["param"].as_str(), error["type"].as_str()), (Some(param), Some("invalid_request_error")));
        assert!(error["message"].as_str().unwrap().starts_with(param), "{refused}");
    }
    let (status, store) = rig
        .call(
            reqwest::Method::POST,
            "/v1/responses",
            Some(json!({"model": "small", "input": "Hi", "background": true, "store": false})),
        )
        .await;
    assert!(store["error"]["message"].as_str().unwrap().contains("must be stored"), "{status}: {store}");
    let unknown = format!("/v1/responses/resp_{}", uuid::Uuid::new_v4().simple());
    let (status, missing) = rig.call(reqwest::Method::GET, &unknown, None).await;
    assert_eq!((status, missing["error"]["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")), "{missing}");
    assert_eq!(rig.engine.calls().await, 0, "nothing refused reached the engine");
}

/// The real llama.cpp engine of scripts/local-engine.sh with its chat model (SmolLM2-135M-Instruct), in the
/// foreground on a free port: gemma-3-270m, the suite's shared engine, is a base model, which runs on to its token
/// limit (`incomplete`) where a chat model ends its answer (`completed`).
pub(crate) async fn chat_engine(log: &std::path::Path) -> (ChildProcess, String) {
    let port = free_port().to_string();
    let mut command = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/local-engine.sh"));
    command.args(["serve", "--model", "smollm2", "--slots", "1", "--port", &port]);
    let engine = ChildProcess::spawn(&mut command, log);
    let url = format!("http://127.0.0.1:{port}");
    let health = format!("{url}/health");
    eventually(Duration::from_secs(120), "the chat engine to be healthy", || async {
        let answer = reqwest::get(&health).await.ok();
        answer.filter(|answer| answer.status().is_success()).map(drop)
    })
    .await;
    (engine, url)
}

/// The official `openai` client (tests/openai/responses_client.py) on `gpuinfer dev` with llama.cpp, one request at
/// a time: `responses.create(background=True)` answers queued, `responses.retrieve` is polled to completed and
/// `output_text` reads the answer; a response created behind it and canceled while queued ends cancelled.
#[tokio::test]
#[ignore = "needs the local engine and the openai client: scripts/test.sh"]
async fn the_openai_client_runs_background_responses_on_gpuinfer_dev_with_llama_cpp() {
    let (data, logs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_engine, engine_url) = chat_engine(&logs.path().join("engine.log")).await;
    let flags = ["--classifier", "none", "--concurrency", "1", "--fixed-concurrency"];
    let dev = Dev::start(data.path(), free_port(), &engine_url, &flags);
    dev.ready(&reqwest::Client::new()).await;
    let ran = crate::openai_events::openai_script("responses_client.py", &["--base-url", &dev.url]).await;
    assert_eq!((ran["created_status"].as_str(), ran["status"].as_str()), (Some("queued"), Some("completed")), "{ran}");
    assert!(!ran["output_text"].as_str().unwrap().trim().is_empty(), "{ran}");
    let usage = &ran["usage"];
    let total = usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap();
    assert_eq!(usage["total_tokens"].as_u64(), Some(total), "{ran}");
    assert_eq!(ran["metadata"], json!({"purpose": "gpuinfer test"}));
    assert_eq!(ran["input_items"], json!(["What is the capital of France?"]));
    assert_eq!(
        (ran["cancelled_status"].as_str(), ran["cancelled_later"].as_str()),
        (Some("cancelled"), Some("cancelled"))
    );
}
