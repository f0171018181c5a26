//! Every refusal is JSON in the API's own shape, the framework's own included: a query, a path or a multipart body it
//! cannot read and a body over a route's limit answer `{"error": …}` (OpenAI's error object under /v1), never
//! text/plain; an empty `after=` cursor is refused, not answered with an empty page; the bearer scheme is read
//! case-insensitively.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;

use crate::support::router::{call, fixture, get};
use gpuinfer::router::state::AppState;

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
    state.openai.api_keys = gpuinfer::router::api_keys::ApiKeys::parse_local(&["the-key".into()]).unwrap();
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
