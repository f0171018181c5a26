//! Shared harness for the black-box tests: the engine double (in-process or as a child process) and small helpers.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

pub mod engine_double;
pub mod engine_process;
pub mod lambda_runtime;
pub mod moto;

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` until it returns Some or `limit` passes; panics with `what` on timeout.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(started.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A valid request body with a fresh requestId.
pub fn request_body(prompt: &str) -> (uuid::Uuid, String) {
    let id = uuid::Uuid::new_v4();
    (id, serde_json::json!({ "requestId": id, "prompt": prompt, "maxTokens": 16 }).to_string())
}
