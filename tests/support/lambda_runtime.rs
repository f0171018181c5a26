//! A local Lambda Runtime API: hands API Gateway events to a `gpuinfer router` child process and collects its answers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;
use tokio::sync::Notify;

#[derive(Default)]
struct Invocations {
    pending: Mutex<VecDeque<(String, Value)>>,
    answers: Mutex<Vec<(String, Value)>>,
    arrived: Notify,
}

pub(crate) struct RuntimeApi {
    /// host:port, as AWS_LAMBDA_RUNTIME_API expects it.
    pub address: String,
    state: Arc<Invocations>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl RuntimeApi {
    pub(crate) async fn start() -> Self {
        let state = Arc::new(Invocations::default());
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route("/2018-06-01/runtime/invocation/{id}/response", post(response))
            .route("/2018-06-01/runtime/invocation/{id}/error", post(response))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind runtime api");
        let address = listener.local_addr().expect("addr").to_string();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RuntimeApi { address, state, server }
    }

    /// The environment the Lambda service gives a function's process, pointing it at this API.
    pub(crate) fn function_env(&self, function: &str) -> [(&'static str, String); 6] {
        [
            ("AWS_LAMBDA_RUNTIME_API", self.address.clone()),
            ("AWS_LAMBDA_FUNCTION_NAME", function.into()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256".into()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "stream".into()),
            ("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{function}")),
        ]
    }

    /// Invokes the function with `event` and waits for its answer.
    pub(crate) async fn invoke(&self, event: Value) -> Value {
        let id = uuid::Uuid::new_v4().to_string();
        self.state.pending.lock().expect("pending").push_back((id.clone(), event));
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let notified = self.state.arrived.notified();
            for (answer_id, answer) in self.state.answers.lock().expect("answers").iter() {
                assert_ne!(answer_id, "init-error", "the function failed to initialise: {answer}");
                if answer_id == &id {
                    return answer.clone();
                }
            }
            assert!(tokio::time::timeout_at(deadline, notified).await.is_ok(), "no Lambda answer within 20 s");
        }
    }
}

async fn next(State(state): State<Arc<Invocations>>) -> Response {
    loop {
        if let Some((id, event)) = state.pending.lock().expect("pending").pop_front() {
            let mut headers = HeaderMap::new();
            let deadline = chrono::Utc::now().timestamp_millis() + 30_000;
            headers.insert("lambda-runtime-aws-request-id", HeaderValue::from_str(&id).expect("id header"));
            headers.insert("lambda-runtime-deadline-ms", HeaderValue::from(deadline));
            headers.insert(
                "lambda-runtime-invoked-function-arn",
                HeaderValue::from_static("arn:aws:lambda:us-east-1:123456789012:function:gpuinfer-router"),
            );
            headers.insert(
                "lambda-runtime-trace-id",
                HeaderValue::from_static("Root=1-00000000-000000000000000000000000"),
            );
            return (headers, Json(event)).into_response();
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

async fn response(State(state): State<Arc<Invocations>>, Path(id): Path<String>, body: String) -> StatusCode {
    let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
    state.answers.lock().expect("answers").push((id, body));
    state.arrived.notify_waiters();
    StatusCode::ACCEPTED
}

async fn init_error(State(state): State<Arc<Invocations>>, body: String) -> StatusCode {
    state.answers.lock().expect("answers").push(("init-error".into(), Value::String(body)));
    state.arrived.notify_waiters();
    StatusCode::ACCEPTED
}

/// An API Gateway HTTP API (payload v2) event.
pub(crate) fn http_event(method: &str, path: &str, body: Option<&str>) -> Value {
    serde_json::json!({
        "version": "2.0",
        "routeKey": format!("{method} {path}"),
        "rawPath": path,
        "rawQueryString": "",
        "headers": { "content-type": "application/json", "host": "api.example.com" },
        "requestContext": {
            "accountId": "123456789012", "apiId": "api", "domainName": "api.example.com", "domainPrefix": "api",
            "http": { "method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "test" },
            "requestId": uuid::Uuid::new_v4().to_string(), "routeKey": format!("{method} {path}"), "stage": "$default",
            "time": "29/Nov/2026:18:00:00 +0000", "timeEpoch": 1_796_000_000_000_i64
        },
        "body": body,
        "isBase64Encoded": false
    })
}
