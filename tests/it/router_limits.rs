//! The router's limits and hostile input: oversized, slow and endless bodies, wrong types, empty, deeply
//! nested, huge numbers, non-UTF-8, path traversal, unknown paths and methods. Each gets a clear 4xx.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::router::{call, fixture, get, post};
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use gpuinfer::{MAX_REQUEST_BYTES, Queue, Tier};
use serde_json::json;

const CHUNK: usize = 64 * 1024;

/// POST /infer with a body of endless chunks; counts the bytes the router pulled.
fn endless_body(pulled: Arc<AtomicUsize>) -> Body {
    Body::from_stream(futures_util::stream::repeat_with(move || {
        pulled.fetch_add(CHUNK, Ordering::SeqCst);
        Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; CHUNK]))
    }))
}

fn assert_refused(status: StatusCode, body: &serde_json::Value, expected: StatusCode, starts_with: &str) {
    assert_eq!(status, expected, "{body}");
    let message = body["error"].as_str().unwrap_or_else(|| panic!("a JSON error body, got {body}"));
    assert!(message.starts_with(starts_with), "{message:?} should start with {starts_with:?}");
}

#[tokio::test]
async fn a_declared_length_over_the_cap_gets_413_before_any_of_the_body_is_read() {
    let f = fixture();
    // A body that never sends a byte: only the Content-Length can answer in time.
    let request = Request::post("/infer")
        .header("content-type", "application/json")
        .header("content-length", "10000000000")
        .body(Body::from_stream(futures_util::stream::pending::<Result<Bytes, std::io::Error>>()))
        .unwrap();
    let (status, body) = tokio::time::timeout(Duration::from_secs(2), call(&f.state, request)).await.unwrap();
    assert_refused(status, &body, StatusCode::PAYLOAD_TOO_LARGE, "body: larger than the 1048576 byte limit");
}

#[tokio::test]
async fn an_endless_body_without_a_length_gets_413_once_it_passes_the_cap() {
    let f = fixture();
    let pulled = Arc::new(AtomicUsize::new(0));
    let request =
        Request::post("/infer").header("content-type", "application/json").body(endless_body(pulled.clone())).unwrap();
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), call(&f.state, request)).await.unwrap();
    assert_refused(status, &body, StatusCode::PAYLOAD_TOO_LARGE, "body: larger than");
    let pulled = pulled.load(Ordering::SeqCst);
    assert!(pulled <= MAX_REQUEST_BYTES + 2 * CHUNK, "read {pulled} bytes of an endless body");
}

#[tokio::test]
async fn a_wrong_content_type_is_refused_before_the_body_is_read() {
    let f = fixture();
    let pulled = Arc::new(AtomicUsize::new(0));
    let request =
        Request::post("/infer").header("content-type", "text/csv").body(endless_body(pulled.clone())).unwrap();
    let (status, body) = call(&f.state, request).await;
    assert_refused(status, &body, StatusCode::UNSUPPORTED_MEDIA_TYPE, "content-type: must be application/json");
    assert_eq!(pulled.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn hostile_bodies_get_400_naming_the_problem() {
    let f = fixture();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_in_field = format!(r#"{{"prompt": "hi", "route": {}{}}}"#, "{\"a\":".repeat(5_000), "1}".repeat(5_000));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"".to_vec(), "body: empty"),
        (b" \n\t ".to_vec(), "body: empty"),
        (deep.into_bytes(), "body: not valid JSON (recursion limit exceeded"),
        (deep_in_field.into_bytes(), "body: not valid JSON (recursion limit exceeded"),
        (br#"{"prompt": "hi", "maxTokens": 1e400}"#.to_vec(), "body: not valid JSON (number out of range"),
        (br#"{"prompt": "hi", "maxTokens": 123456789012345678901234567890}"#.to_vec(), "maxTokens: must be an integer"),
        (br#"{"prompt": "hi", "maxTokens": 256.5}"#.to_vec(), "maxTokens: must be an integer"),
        (br#"{"prompt": "hi", "temperature": 1e308}"#.to_vec(), "temperature: must be a number"),
        (b"{\"prompt\": \"caf\xe9\"}".to_vec(), "body: not valid JSON"),
        (b"\xff\xfe{}".to_vec(), "body: not valid JSON"),
        (br#"{"prompt": "hi", "requestId": "../../etc/passwd"}"#.to_vec(), "requestId: must be a UUID v4 string"),
        (br#"{"prompt": "hi", "requestId": "..%2F..%2Fresults%2Fx"}"#.to_vec(), "requestId: must be a UUID v4"),
        (br#"["prompt", "hi"]"#.to_vec(), "body: must be a JSON object"),
        (br#"{"prompt": "hi", "prompt": "twice"}"#.to_vec(), "body: not valid JSON (key \"prompt\" given twice"),
        (
            br#"{"messages": [{"role": "user", "content": "a", "role": "system"}]}"#.to_vec(),
            "body: not valid JSON (key \"role\" given twice",
        ),
    ];
    for (bytes, expected) in cases {
        let shown = String::from_utf8_lossy(&bytes).chars().take(60).collect::<String>();
        let (status, body) = call(&f.state, post(bytes)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{shown}: {body}");
        let message = body["error"].as_str().unwrap_or_else(|| panic!("{shown}: a JSON error body, got {body}"));
        assert!(message.starts_with(expected), "{shown}: {message:?} should start with {expected:?}");
    }
    let small = f.lane(Tier::Small, gpuinfer::Priority::Normal);
    assert_eq!(small.counts().await.unwrap().visible, 0, "nothing refused is enqueued");
}

#[tokio::test]
async fn result_paths_that_are_not_a_uuid_never_reach_the_store() {
    let f = fixture();
    for path in ["/results/..%2F..%2Fetc%2Fpasswd", "/results/%2e%2e", "/results/%ZZ", "/results/%FF%FE"] {
        let (status, body) = call(&f.state, get(path)).await;
        assert_refused(status, &body, StatusCode::BAD_REQUEST, "requestId: must be a UUID");
    }
    for path in ["/results/../../etc/passwd", "/results/a/b", "/nowhere", "/infer/extra"] {
        let (status, body) = call(&f.state, get(path)).await;
        assert_refused(status, &body, StatusCode::NOT_FOUND, "path: no endpoint at");
    }
}

#[tokio::test]
async fn wrong_methods_get_405_naming_the_endpoints() {
    let f = fixture();
    let (status, body) = call(&f.state, get("/infer")).await;
    assert_refused(status, &body, StatusCode::METHOD_NOT_ALLOWED, "method: GET is not allowed on /infer");
    let put = Request::put(format!("/results/{}", uuid::Uuid::new_v4())).body(Body::empty()).unwrap();
    let (status, body) = call(&f.state, put).await;
    assert_refused(status, &body, StatusCode::METHOD_NOT_ALLOWED, "method: PUT is not allowed");
    assert!(body["error"].as_str().unwrap().contains("POST /infer"));
    let (status, _) = call(&f.state, post(json!({"prompt": "still fine"}).to_string())).await;
    assert_eq!(status, StatusCode::ACCEPTED);
}
