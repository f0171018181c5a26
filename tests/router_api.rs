//! Router handlers through `app(state).oneshot(..)` (no socket): every status code of the API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpuinfer::metrics::Emf;
use gpuinfer::ports::{Message, Queue, QueueCounts, QueueError, ResultStore};
use gpuinfer::router::AppState;
use gpuinfer::routing::{PerTier, RoutingConfig, Tier};
use serde_json::{Value, json};
use support::router::{call, fixture, get, post};

#[tokio::test]
async fn accepted_requests_are_enqueued_on_their_tier_and_counted() {
    let f = fixture();
    let id = "550e8400-e29b-41d4-a716-446655440000";
    let (status, body) = call(&f.state, post(json!({"requestId": id, "prompt": "hi"}).to_string())).await;
    assert_eq!((status, body), (StatusCode::ACCEPTED, json!({"requestId": id, "tier": "small"})));
    let (status, body) = call(&f.state, post(json!({"prompt": "hi", "route": "large"}).to_string())).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(body["tier"], "large");
    assert_eq!(uuid::Uuid::parse_str(body["requestId"].as_str().unwrap()).unwrap().get_version_num(), 4);

    let small = f.backends.tier_queue(Tier::Small, Duration::from_secs(30), 3);
    let large = f.backends.tier_queue(Tier::Large, Duration::from_secs(30), 3);
    assert_eq!(small.counts().await.unwrap(), QueueCounts { visible: 1, in_flight: 0, delayed: 0 });
    assert_eq!(large.counts().await.unwrap().visible, 1);
    let queued = small.receive(1, Duration::ZERO).await.unwrap();
    let queued: Value = serde_json::from_str(&queued[0].body).unwrap();
    assert_eq!(queued["requestId"], id);
    assert_eq!(queued["maxTokens"], 256);

    let lines = f.emf.json_lines();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["RoutedRequests"], 1.0);
    assert_eq!(lines[0]["Tier"], "small");
    assert_eq!(lines[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Custom/ECSInference");
    assert_eq!(lines[1]["Tier"], "large");
}

#[tokio::test]
async fn invalid_requests_get_400_naming_the_field() {
    let f = fixture();
    for (body, expected) in [
        (json!({"prompt": ""}).to_string(), "prompt: must not be empty"),
        (json!({"prompt": "hi", "maxTokens": 5000}).to_string(), "maxTokens: must be an integer from 1 to 2048"),
        (json!({"prompt": "hi", "colour": "red"}).to_string(), "colour: unknown field"),
        ("{not json".to_string(), "body: not valid JSON"),
        (String::new(), "body: empty; send a JSON request object"),
    ] {
        let (status, answer) = call(&f.state, post(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let message = answer["error"].as_str().unwrap();
        assert!(message.starts_with(expected), "{body}: {message}");
    }
    let small = f.backends.tier_queue(Tier::Small, Duration::from_secs(30), 3);
    assert_eq!(small.counts().await.unwrap().visible, 0, "nothing invalid is enqueued");
}

#[tokio::test]
async fn bodies_over_the_cap_get_413() {
    let f = fixture();
    let big = json!({"prompt": "x".repeat(1024 * 1024)}).to_string();
    let (status, body) = call(&f.state, post(big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body["error"].as_str().unwrap().starts_with("body: larger than"));
}

#[tokio::test]
async fn other_content_types_get_415() {
    let f = fixture();
    let request = Request::post("/infer").header("content-type", "text/plain").body(Body::from("{}")).unwrap();
    let (status, body) = call(&f.state, request).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(body["error"].as_str().unwrap().starts_with("content-type:"));
}

struct RefusingQueue;

#[async_trait]
impl Queue for RefusingQueue {
    async fn send(&self, _body: &str) -> Result<(), QueueError> {
        Err(QueueError::Unavailable("throttled".into()))
    }
    async fn receive(&self, _max: usize, _wait: Duration) -> Result<Vec<Message>, QueueError> {
        Ok(vec![])
    }
    async fn change_visibility(&self, _receipt: &str, _timeout: Duration) -> Result<(), QueueError> {
        Ok(())
    }
    async fn delete(&self, _receipt: &str) -> Result<(), QueueError> {
        Ok(())
    }
    async fn dead_letter(&self, _message: &Message, _reason: &str) -> Result<(), QueueError> {
        Ok(())
    }
    async fn counts(&self) -> Result<QueueCounts, QueueError> {
        Ok(QueueCounts::default())
    }
}

#[tokio::test]
async fn a_refusing_queue_gives_503_never_2xx() {
    let f = fixture();
    let state = Arc::new(AppState {
        queues: PerTier { small: Arc::new(RefusingQueue), large: Arc::new(RefusingQueue) },
        store: f.state.store.clone(),
        routing: RoutingConfig::default(),
        classifier: None,
        metrics: Emf::discard(),
    });
    let (status, body) = call(&state, post(json!({"prompt": "hi"}).to_string())).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"], "queue: unavailable, retry later");
}

#[tokio::test]
async fn results_are_served_pending_or_refused() {
    let f = fixture();
    let id = uuid::Uuid::new_v4();
    let (status, body) = call(&f.state, get(&format!("/results/{id}"))).await;
    assert_eq!((status, body), (StatusCode::NOT_FOUND, json!({"requestId": id, "status": "pending"})));

    let document = json!({"requestId": id, "status": "success", "result": {"text": "ok"}});
    f.backends.store.put_if_absent(id, document.to_string().as_bytes()).await.unwrap();
    let (status, body) = call(&f.state, get(&format!("/results/{id}"))).await;
    assert_eq!((status, body), (StatusCode::OK, document));

    for bad in ["not-a-uuid", "..%2F..%2Fetc%2Fpasswd"] {
        let (status, body) = call(&f.state, get(&format!("/results/{bad}"))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(body["error"], "requestId: must be a UUID");
    }
}

#[tokio::test]
async fn healthz_answers_ok() {
    let f = fixture();
    assert_eq!(call(&f.state, get("/healthz")).await, (StatusCode::OK, json!({"status": "ok"})));
}
