//! What OpenAI's clients send beyond a prompt, end to end on `gpuinfer dev` and the engine simulator: each control
//! reaches the engine under the engine's own name, a request's labels come back with its result and never reach the
//! engine, an answer that does not fit its response format ends as an `invalid_output` error (never a success), a
//! function call comes back as a Responses `function_call` item, and a response continued with
//! `previous_response_id` sends the engine the earlier turn. On llama.cpp with the official client: batch_api.rs.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::openai_events::openai_script;
use crate::responses::{DevOnSimulator, dev_on_simulator};
use crate::support::dev::Dev;
use crate::support::{eventually, free_port};

/// `gpuinfer dev` on the simulator answering each request in 200 ms.
async fn rig() -> DevOnSimulator {
    dev_on_simulator(&["--latency-ms", "200"], &["--classifier", "none"]).await
}

/// The stored document of an accepted /infer request, once there.
async fn result(rig: &DevOnSimulator, request_id: &str) -> Value {
    let path = format!("/results/{request_id}");
    eventually(Duration::from_secs(30), "the result document", || async {
        let (status, document) = rig.call(reqwest::Method::GET, &path, None).await;
        (status == StatusCode::OK).then_some(document)
    })
    .await
}

/// A waited-for response (not background), created from `body`.
async fn respond(rig: &DevOnSimulator, body: Value) -> Value {
    let (status, response) = rig.call(reqwest::Method::POST, "/v1/responses", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    assert_ne!(response["status"], "queued", "waited for: {response}");
    response
}

fn person_format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": {"type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}}})
}

/// The simulator answers `{}` to any response format: against a schema that requires fields, the worker must not
/// call that a success.
#[tokio::test]
async fn controls_reach_the_engine_labels_come_back_and_an_answer_off_its_format_is_an_error() {
    let rig = rig().await;
    let body = json!({"messages": [{"role": "developer", "content": "Extract."},
                                   {"role": "user", "content": [{"type": "text", "text": "Ann is 31."}]}],
        "responseFormat": person_format(), "seed": 7, "stop": ["END"], "presencePenalty": 0.5,
        "frequencyPenalty": -0.5, "logitBias": {"13": -100}, "logprobs": true, "topLogprobs": 2, "user": "u-1", "metadata": {"job": "extract"}});
    let (status, accepted) = rig.call(reqwest::Method::POST, "/infer", Some(body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let document = result(&rig, accepted["requestId"].as_str().unwrap()).await;
    assert_eq!(
        (document["status"].as_str(), document["error"]["code"].as_str()),
        (Some("error"), Some("invalid_output"))
    );
    let message = document["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("the answer does not match its schema") && message.contains("name"), "{document}");
    assert_eq!((document["user"].as_str(), &document["metadata"]), (Some("u-1"), &json!({"job": "extract"})));

    let sent = rig.engine.last_request().await;
    assert_eq!(sent["response_format"], person_format());
    assert_eq!((sent["seed"].as_i64(), &sent["stop"]), (Some(7), &json!(["END"])));
    assert_eq!((sent["presence_penalty"].as_f64(), sent["frequency_penalty"].as_f64()), (Some(0.5), Some(-0.5)));
    assert_eq!((sent["logprobs"].as_bool(), sent["top_logprobs"].as_u64()), (Some(true), Some(2)));
    assert_eq!(sent["logit_bias"], json!({"13": -100}));
    assert_eq!(sent["messages"][0], json!({"role": "system", "content": "Extract."}), "developer runs as system");
    assert_eq!(sent["messages"][1]["content"], "Ann is 31.");
    assert!(sent.get("user").is_none() && sent.get("metadata").is_none(), "labels stay with gpuinfer: {sent}");
}

#[tokio::test]
async fn a_function_call_is_a_function_call_item_and_a_continued_response_sends_the_earlier_turn() {
    let rig = rig().await;
    let tool = json!({"type": "function", "name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}}, "strict": false});
    let first = respond(
        &rig,
        json!({"model": "small", "input": "Weather in Paris?", "tools": [tool], "tool_choice": "required"}),
    )
    .await;
    assert_eq!(first["status"], "completed", "{first}");
    let call = &first["output"][0];
    assert_eq!((call["type"].as_str(), call["name"].as_str()), (Some("function_call"), Some("get_weather")), "{first}");
    assert_eq!(first["tools"], json!([tool]), "echoed as sent");
    let sent = rig.engine.last_request().await;
    assert_eq!(sent["tools"][0]["function"]["name"], "get_weather", "chat's shape: {sent}");

    let output = json!({"type": "function_call_output", "call_id": call["call_id"], "output": "18 °C, sunny"});
    let second = respond(
        &rig,
        json!({"model": "small", "input": [output], "previous_response_id": first["id"], "instructions": "Be brief."}),
    )
    .await;
    assert_eq!((second["status"].as_str(), &second["previous_response_id"]), (Some("completed"), &first["id"]));
    assert_eq!(second["output"][0]["type"], "message", "no tool_choice this turn: {second}");
    let sent = rig.engine.last_request().await;
    let roles: Vec<&str> = sent["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"], "instructions, the first turn, its call, the output");

    let queued = json!({"model": "small", "input": "x", "background": true});
    let (_, pending) = rig.call(reqwest::Method::POST, "/v1/responses", Some(queued)).await;
    let unknown = format!("resp_{}", uuid::Uuid::new_v4().simple());
    let (status, missing) = rig
        .call(
            reqwest::Method::POST,
            "/v1/responses",
            Some(json!({"model": "small", "input": "x", "previous_response_id": unknown})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    // The simulator takes 200 ms a request: the background response is still queued.
    let (status, refused) = rig
        .call(
            reqwest::Method::POST,
            "/v1/responses",
            Some(json!({"model": "small", "input": "x", "previous_response_id": pending["id"]})),
        )
        .await;
    assert_eq!((status, refused["error"]["param"].as_str()), (StatusCode::BAD_REQUEST, Some("previous_response_id")));
}

/// The official `openai` client (tests/openai/structured_client.py) on `gpuinfer dev` in front of llama.cpp, which
/// enforces a schema while it decodes: a Batch file mixing structured output, seed, stop, penalties, logprobs,
/// content parts and a tool line completes with every line 200 and each structured line valid; a Batch file for
/// /v1/responses; `responses.parse` with a Pydantic model, waited and background; a continued response.
#[tokio::test]
#[ignore = "needs the local engine and the openai client: scripts/test.sh"]
async fn the_openai_client_gets_structured_output_and_every_control_through_batch_and_responses_on_llama_cpp() {
    let data = tempfile::tempdir().unwrap();
    let dev = Dev::start(data.path(), free_port(), &crate::batch_api::engine_url(), &["--classifier", "none"]);
    dev.ready(&reqwest::Client::new()).await;
    let ran = openai_script("structured_client.py", &["--base-url", &dev.url]).await;
    let chat = &ran["chat_batch"];
    let statuses = chat["statuses"].as_object().unwrap();
    assert_eq!(statuses.len(), 7, "{ran}");
    assert!(statuses.values().all(|status| status == 200), "{ran}");
    let person = json!({"name": "Ann", "age": 31});
    assert_eq!(chat["schema_answer"], person, "{ran}");
    assert_eq!((chat["logprob_tokens"].as_u64(), chat["top_logprobs"].as_u64()), (Some(8), Some(2)), "{ran}");
    let responses = &ran["responses_batch"];
    assert_eq!((responses["object"].as_str(), &responses["answer"]), (Some("response"), &person), "{ran}");
    let parsed = &ran["parsed"];
    assert_eq!((&parsed["waited"], &parsed["background"]), (&person, &person), "{ran}");
    assert_eq!(parsed["background_created"], "queued");
    let continued = &ran["continued"];
    assert_eq!(continued["previous_response_id"], continued["first_id"], "{ran}");
    assert!(["completed", "incomplete"].contains(&continued["status"].as_str().unwrap()), "{ran}");
    assert_eq!(
        (ran["logprobs"]["tokens"].as_u64(), ran["logprobs"]["alternatives"].as_u64()),
        (Some(4), Some(2)),
        "{ran}"
    );
}
