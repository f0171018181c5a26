//! Shared harness for the black-box tests: the engine simulator (in-process or as a child process) and small helpers.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

pub(crate) mod answers;
pub(crate) mod api_gateway;
pub(crate) mod cfn;
pub(crate) mod cloudwatch;
pub(crate) mod dev;
pub(crate) mod engine_process;
pub(crate) mod faulty_store;
pub(crate) mod iam_moto;
pub(crate) mod lambda_runtime;
pub(crate) mod moto;
pub(crate) mod process;
pub(crate) mod receiver;
pub(crate) mod rig;
pub(crate) mod router;
pub(crate) mod signed_api;
pub(crate) mod strategies;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Every file under `dir` (recursively) whose extension is one of `extensions`.
pub(crate) fn files_under(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_under(&path, extensions));
        } else if path.extension().is_some_and(|e| extensions.iter().any(|x| e == *x)) {
            files.push(path);
        }
    }
    files
}

/// Polls `check` until it returns Some or `limit` passes; panics with `what` on timeout.
pub(crate) async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
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

/// A loopback port nobody listens on right now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Prints a test's figure line (requests, lost, duplicates, time), and appends it to the file named by
/// `GPUINFER_FIGURES` when set: scripts/test.sh prints that file after the tests, so CI logs show every figure.
pub(crate) fn report_figure(line: &str) {
    println!("{line}");
    if let Some(path) = std::env::var_os("GPUINFER_FIGURES") {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open the figures file");
        writeln!(file, "{line}").expect("write a figure");
    }
}

/// Waits until the router at `base` (http://host:port) answers GET /healthz.
pub(crate) async fn router_listening(http: &reqwest::Client, base: &str) {
    let url = format!("{base}/healthz");
    eventually(Duration::from_secs(20), "the router to listen", || {
        let request = http.get(&url).send();
        async move { request.await.ok().filter(|r| r.status().is_success()).map(|_| ()) }
    })
    .await;
}

/// Polls GET /results/{id} on the router at `base` until it answers 200; the document.
pub(crate) async fn result_document(
    http: &reqwest::Client,
    base: &str,
    id: &str,
    limit: Duration,
) -> serde_json::Value {
    let url = format!("{base}/results/{id}");
    eventually(limit, "a result document", || {
        let request = http.get(&url).send();
        async move { request.await.ok().filter(|r| r.status() == 200)?.json().await.ok() }
    })
    .await
}

/// A valid request body with a fresh requestId.
pub(crate) fn request_body(prompt: &str) -> (gpuinfer::RequestId, String) {
    let id = gpuinfer::RequestId::new_v4();
    (id, serde_json::json!({ "requestId": id, "prompt": prompt, "maxTokens": 16 }).to_string())
}

/// A writer the test keeps a handle on, e.g. for the EMF lines a component writes.
#[derive(Clone, Default)]
pub(crate) struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl SharedBuf {
    /// Every line written so far, each parsed as JSON.
    pub(crate) fn json_lines(&self) -> Vec<serde_json::Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }
}

impl std::io::Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
