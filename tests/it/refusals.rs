//! Every refusal is JSON in the API's own shape, the framework's own included: a query, a path or a multipart body it
//! cannot read and a body over a route's limit answer `{"error": …}` (OpenAI's error object under /v1), never
//! text/plain; a body in another charset than UTF-8 is a 415; an empty `after=` cursor is refused, not answered with an empty page; the bearer scheme is read
//! case-insensitively; a key store's keys guard the /v1 routes alone, and one that cannot be read refuses them all.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;

use crate::support::router::{call, fixture, get};
use gpuinfer::AppState;

/// The OpenAI error object of a refusal under /v1, or a panic naming what came instead.
fn openai_error(status: StatusCode, body: &Value, want: StatusCode) -> &Value {
    assert_eq!(status, want, "{body}");
    let error = &body["error"];
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "not OpenAI's error object: {body}");
    assert!(error.get("type").is_some() && error.get("param").is_some(), "{body}");
    error
}

#[tokio::test]
async fn the_frameworks_own_refusals_answer_in_the_apis_json_shape() {
    let f = fixture();
    let (status, body) = call(&f.state, get("/v1/files?limit=many")).await;
    openai_error(status, &body, StatusCode::BAD_REQUEST);
    let (status, body) = call(&f.state, get("/v1/batches?limit=-1")).await;
    openai_error(status, &body, StatusCode::BAD_REQUEST);

    let no_boundary = Request::post("/v1/files").header("content-type", "multipart/form-data").body(Body::from("x"));
    let (status, body) = call(&f.state, no_boundary.unwrap()).await;
    assert!(status.is_client_error(), "{status}");
    openai_error(status, &body, status);

    let (status, body) = call(&f.state, get("/results/%ZZ%ZZ")).await;
    assert!(status.is_client_error(), "{status}: {body}");
    assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "not the API's error shape: {body}");

    let huge = vec![b' '; 3 * 1024 * 1024];
    let opening = Request::post("/v1/uploads").header("content-type", "application/json").body(Body::from(huge));
    let (status, body) = call(&f.state, opening.unwrap()).await;
    openai_error(status, &body, StatusCode::PAYLOAD_TOO_LARGE);
}

/// A /v1 body whose charset is not UTF-8 is refused with 415 in OpenAI's shape before any handler reads it (RFC 8259
/// §8.1), as /infer refuses it; UTF-8 named in any case goes through.
#[tokio::test]
async fn a_v1_body_in_another_charset_is_refused_before_it_is_read() {
    let f = fixture();
    let create = r#"{"model": "small", "input": "hi", "background": true}"#;
    for charset in ["utf-16", "\"ISO-8859-1\""] {
        let request = Request::post("/v1/responses")
            .header("content-type", format!("application/json; charset={charset}"))
            .body(Body::from(create));
        let (status, body) = call(&f.state, request.unwrap()).await;
        let error = openai_error(status, &body, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(error["message"].as_str().unwrap().contains("send the JSON in UTF-8"), "{body}");
    }
    let request = Request::post("/v1/responses").header("content-type", "application/json; charset=UTF-8");
    let (status, body) = call(&f.state, request.body(Body::from(create)).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn an_empty_after_cursor_is_refused_naming_the_parameter() {
    let f = fixture();
    for path in ["/v1/files?after=", "/v1/batches?after="] {
        let (status, body) = call(&f.state, get(path)).await;
        let error = openai_error(status, &body, StatusCode::BAD_REQUEST);
        assert_eq!(error["param"], "after", "{path}: {body}");
    }
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let f = fixture();
    let mut state = Arc::into_inner(f.state).unwrap();
    let keys = gpuinfer::ApiKeys::parse_local(&["the-key".into()]).unwrap();
    state.openai.api_keys = keys.map(gpuinfer::KeySource::Local);
    let state: Arc<AppState> = Arc::new(state);
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let request = Request::get("/v1/models").header("authorization", format!("{scheme} the-key"));
        let (status, body) = call(&state, request.body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::OK, "{scheme}: {body}");
    }
    for wrong in ["Bearer other-key", "Basic the-key", "the-key"] {
        let request = Request::get("/v1/models").header("authorization", wrong);
        let (status, body) = call(&state, request.body(Body::empty()).unwrap()).await;
        openai_error(status, &body, StatusCode::UNAUTHORIZED);
    }
}

/// A key store that holds `document`, or cannot be read (None).
struct FixedKeyStore(Option<String>);

#[async_trait::async_trait]
impl gpuinfer::KeyStore for FixedKeyStore {
    async fn read(&self) -> Result<String, gpuinfer::KeyStoreError> {
        self.0.clone().ok_or_else(|| gpuinfer::KeyStoreError::unavailable("AccessDeniedException"))
    }

    async fn write(&self, _: &str) -> Result<(), gpuinfer::KeyStoreError> {
        unreachable!("the router never writes its keys")
    }
}

/// The router's state with its /v1 keys read from `store`.
fn with_stored_keys(store: FixedKeyStore) -> Arc<AppState> {
    use gpuinfer::{KeySource, StoredKeys};
    let mut state = Arc::into_inner(fixture().state).unwrap();
    let keys = StoredKeys::new(Arc::new(store), std::time::Duration::from_secs(60));
    state.openai.api_keys = Some(KeySource::Stored(Arc::new(keys)));
    Arc::new(state)
}

/// With a key store (API_KEYS_SECRET_ID), the /v1 routes take only its keys and the others are left to API Gateway's
/// IAM; a store that cannot be read refuses every /v1 request with 503 in OpenAI's shape (Retry-After, which its
/// clients honour), before the request is read, never letting one through.
#[tokio::test]
async fn stored_keys_guard_the_v1_routes_only_and_an_unreadable_store_lets_nothing_through() {
    let mut document = gpuinfer::KeyDocument::default();
    document.add("team-a", "sk-stored").unwrap();
    let state = with_stored_keys(FixedKeyStore(Some(document.to_json())));
    let with_key = |path: &str, key: &str| {
        Request::get(path).header("authorization", format!("Bearer {key}")).body(Body::empty()).unwrap()
    };
    let (status, body) = call(&state, with_key("/v1/models", "sk-stored")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for refused in [get("/v1/models"), with_key("/v1/models", "sk-other"), with_key("/v1/models", "")] {
        let (status, body) = call(&state, refused).await;
        assert_eq!(openai_error(status, &body, StatusCode::UNAUTHORIZED)["code"], "invalid_api_key");
    }
    let unknown = uuid::Uuid::new_v4();
    let (status, body) = call(&state, get(&format!("/results/{unknown}"))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no key asked outside /v1: {body}");

    let state = with_stored_keys(FixedKeyStore(None));
    let (status, body) = call(&state, with_key("/v1/models", "sk-stored")).await;
    assert_eq!(openai_error(status, &body, StatusCode::SERVICE_UNAVAILABLE)["type"], "server_error");
    let oversized = Request::post("/v1/uploads")
        .header("authorization", "Bearer sk-stored")
        .header("content-type", "application/json")
        .body(Body::from(vec![b' '; 3 * 1024 * 1024]));
    let (status, body) = call(&state, oversized.unwrap()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "the key is checked before the body is read: {body}");
    let response = tower::ServiceExt::oneshot(gpuinfer::app(state), with_key("/v1/models", "x")).await;
    assert_eq!(response.unwrap().headers()["retry-after"], "1");
}
