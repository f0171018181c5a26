//! The OpenAI-compatible engine client against the engine simulator: endpoints, base URLs, error kinds, the slots
//! an engine reports.

use std::time::Duration;

use gpuinfer::{
    Engine, EngineClient, EngineConfig, EngineError, InferenceRequest, Intake, engine_base_url, simulator::Behavior,
    simulator::EngineSimulator, simulator::Reply,
};
use serde_json::json;

fn client(url: &str, model: Option<&str>, timeout: Duration) -> EngineClient {
    EngineClient::new(&EngineConfig { base_url: url.into(), model: model.map(str::to_owned), request_timeout: timeout })
        .unwrap()
}

fn request(body: serde_json::Value) -> InferenceRequest {
    InferenceRequest::parse(body.to_string().as_bytes(), Intake::Api(chrono::Utc::now())).unwrap()
}

#[test]
fn base_urls_are_normalized() {
    for given in ["http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/", " http://h:8000 "] {
        assert_eq!(engine_base_url(given), "http://h:8000", "{given:?}");
    }
}

#[tokio::test]
async fn prompts_use_completions_and_messages_use_chat() {
    let engine = EngineSimulator::start(Behavior::default()).await;
    let client = client(&engine.url, Some("my-model"), Duration::from_secs(5));
    let completion = client.generate(&request(json!({"prompt": "one two three", "maxTokens": 5}))).await.unwrap();
    assert_eq!(completion.generation.text, "echo: one two three");
    assert_eq!(completion.generation.usage.completion_tokens, 5, "maxTokens is passed as max_tokens");
    assert_eq!(completion.model.as_deref(), Some("my-model"), "the configured model is sent");
    let chat =
        client.generate(&request(json!({"messages": [{"role": "user", "content": "hello there"}]}))).await.unwrap();
    assert_eq!(chat.generation.text, "echo: hello there");
    assert_eq!(engine.prompts(), ["one two three", "hello there"]);
    assert!(client.healthy().await);
    engine.set_healthy(false);
    assert!(!client.healthy().await);
}

#[tokio::test]
async fn failures_are_typed_by_what_the_worker_must_do() {
    let engine = EngineSimulator::start(Behavior::default()).await;
    let client = client(&engine.url, Some("m"), Duration::from_secs(5));
    let hi = request(json!({"prompt": "hi"}));
    engine.script([Reply::Status(429), Reply::Status(502), Reply::Status(400), Reply::Status(404), Reply::Garbage]);
    assert!(matches!(client.generate(&hi).await, Err(EngineError::Retryable(m)) if m.contains("HTTP 429")));
    assert!(matches!(client.generate(&hi).await, Err(EngineError::Retryable(m)) if m.contains("HTTP 502")));
    assert!(
        matches!(client.generate(&hi).await, Err(EngineError::Permanent(m)) if m == "HTTP 400: simulated failure 400")
    );
    assert!(matches!(client.generate(&hi).await, Err(EngineError::Permanent(_))));
    assert!(matches!(client.generate(&hi).await, Err(EngineError::Retryable(m)) if m.contains("unreadable")));

    engine.set_latency(Duration::from_secs(5));
    let impatient = self::client(&engine.url, Some("m"), Duration::from_millis(200));
    assert!(matches!(impatient.generate(&hi).await, Err(EngineError::Retryable(m)) if m.contains("timed out")));
}

#[tokio::test]
async fn a_missing_engine_is_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = client(&url, Some("m"), Duration::from_secs(5));
    assert!(matches!(client.generate(&request(json!({"prompt": "hi"}))).await, Err(EngineError::Unavailable(_))));
    assert!(!client.healthy().await);
}

#[tokio::test]
async fn the_slots_are_read_where_the_engine_reports_them_as_llama_cpp_does() {
    let llama_like = EngineSimulator::start(Behavior { slots: 6, keeps_abandoned: true, ..Behavior::default() }).await;
    assert_eq!(client(&llama_like.url, Some("m"), Duration::from_secs(5)).slots().await, Some(6));
    let vllm_like = EngineSimulator::start(Behavior { slots: 6, ..Behavior::default() }).await;
    assert_eq!(client(&vllm_like.url, Some("m"), Duration::from_secs(5)).slots().await, None, "no /props: not said");
}
