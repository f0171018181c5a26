//! The Bedrock classifier against a local stub of the Converse REST API (POST /model/{modelId}/converse).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use gpuinfer::aws::bedrock::BedrockClassifier;
use gpuinfer::request::{InferenceRequest, Intake};
use gpuinfer::routing::{Reason, RoutingConfig, route};
use gpuinfer::vocabulary::Tier;
use serde_json::{Value, json};

#[derive(Default)]
struct Stub {
    answer: Mutex<(String, Duration)>,
    models: Mutex<Vec<String>>,
}

async fn converse(State(stub): State<Arc<Stub>>, Path(model): Path<String>, Json(_body): Json<Value>) -> Json<Value> {
    stub.models.lock().unwrap().push(model);
    let (text, delay) = stub.answer.lock().unwrap().clone();
    tokio::time::sleep(delay).await;
    Json(json!({
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 10, "outputTokens": 1, "totalTokens": 11},
        "metrics": {"latencyMs": 5}
    }))
}

async fn start_stub() -> (Arc<Stub>, String) {
    let stub = Arc::new(Stub::default());
    let app = Router::new().route("/model/{model}/converse", post(converse)).with_state(Arc::clone(&stub));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (stub, url)
}

#[tokio::test]
async fn bedrock_answers_route_the_ambiguous_zone_and_failures_fall_back_to_small() {
    let (stub, url) = start_stub().await;
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(url)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_bedrockruntime::config::Credentials::new("test", "test", None, None, "stub"))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await;
    let classifier = BedrockClassifier::new(aws_sdk_bedrockruntime::Client::new(&sdk), "amazon.nova-micro-v1:0".into());
    let config = RoutingConfig { classifier_timeout: Duration::from_millis(1500), ..Default::default() };
    let body = json!({"prompt": "Compare two approaches to tensor parallelism. ".repeat(15)}).to_string();
    let ambiguous = InferenceRequest::parse(body.as_bytes(), Intake::Api(chrono::Utc::now())).unwrap();

    *stub.answer.lock().unwrap() = ("large".into(), Duration::ZERO);
    assert_eq!(route(&ambiguous, &config, Some(&classifier)).await, (Tier::Large, Reason::Classifier));
    assert_eq!(stub.models.lock().unwrap().as_slice(), ["amazon.nova-micro-v1:0"]);

    *stub.answer.lock().unwrap() = ("Small".into(), Duration::ZERO);
    assert_eq!(route(&ambiguous, &config, Some(&classifier)).await, (Tier::Small, Reason::Classifier));

    *stub.answer.lock().unwrap() = ("¯\\_(ツ)_/¯".into(), Duration::ZERO);
    assert_eq!(route(&ambiguous, &config, Some(&classifier)).await, (Tier::Small, Reason::ClassifierFallback));

    *stub.answer.lock().unwrap() = ("large".into(), Duration::from_secs(10));
    let started = Instant::now();
    assert_eq!(route(&ambiguous, &config, Some(&classifier)).await, (Tier::Small, Reason::ClassifierFallback));
    assert!(started.elapsed() < Duration::from_millis(2000), "gave up within the 1.5 s budget");
}
