//! A worker's cold start, reported once with its first result: one log line of its phases in order (adding up to the
//! total) and one EMF document of them under its tier. Here through `gpuinfer dev` starting an engine on demand (no
//! image, no weights step); tests/it/entrypoint.rs runs it through entrypoint.sh beside a stand-in ECS metadata
//! endpoint. These helpers read the JSON logs and EMF lines both write.

use std::path::Path;
use std::time::Duration;

use gpuinfer::{metrics::COLD_START, metrics::NAMESPACE};
use serde_json::Value;

use crate::support::process::ChildProcess;
use crate::support::{eventually, free_port, result_document, router_listening};

/// The message of the one log line.
const REPORTED: &str = "cold start: first result written";
/// The log line's phase fields, in the order of `COLD_START`, the total last.
const FIELDS: [&str; 6] = ["image_s", "weights_s", "engine_s", "first_request_s", "first_result_s", "total_s"];

/// The cold-start lines of a JSON log.
pub(crate) fn reports(log: &str) -> Vec<Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["message"] == REPORTED)
        .collect()
}

/// A field of the line in seconds; None for `none`.
fn seconds(report: &Value, field: &str) -> Option<f64> {
    match report[field].as_str() {
        Some("none") => None,
        Some(text) => Some(text.parse().unwrap_or_else(|_| panic!("{field}: {text:?} is not seconds"))),
        None => panic!("the line has no {field}: {report}"),
    }
}

/// Checks the one cold-start line of `log`: its tier, what its start was, which of the image and weights steps it
/// measured (`steps`), and that its phases add up to its total. The phases in the order of `COLD_START`.
pub(crate) fn one_report(log: &str, tier: &str, started_by: &str, steps: [bool; 2]) -> [Option<f64>; 6] {
    let found = reports(log);
    assert_eq!(found.len(), 1, "exactly one cold-start line: {log}");
    let report = &found[0];
    assert_eq!((report["tier"].as_str(), report["started_by"].as_str()), (Some(tier), Some(started_by)), "{report}");
    let phases = FIELDS.map(|field| seconds(report, field));
    assert_eq!([phases[0].is_some(), phases[1].is_some()], steps, "image and weights measured: {report}");
    assert!(phases[2..].iter().all(Option::is_some), "every phase from the engine on is measured: {report}");
    let sum: f64 = phases[..5].iter().flatten().sum();
    let total = phases[5].unwrap_or_default();
    // Each rounded to the millisecond: at most half of one off each.
    assert!((sum - total).abs() <= 0.003, "the phases add up to the total: {sum} vs {total} in {report}");
    phases
}

/// Checks the one cold-start EMF document of `emf` (EMF lines): under `tier`, in seconds, the phases of the log
/// line (the ones measured) and nothing else.
pub(crate) fn one_document(emf: &str, tier: &str, phases: [Option<f64>; 6]) {
    let documents: Vec<Value> = emf
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|document| document.get(COLD_START[5]).is_some())
        .collect();
    assert_eq!(documents.len(), 1, "exactly one cold-start document: {emf}");
    let document = &documents[0];
    let declared = &document["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(declared["Namespace"], NAMESPACE);
    assert_eq!(declared["Dimensions"], serde_json::json!([["Tier"]]));
    assert_eq!(document["Tier"], tier);
    let expected: Vec<&str> = COLD_START.iter().zip(phases).filter(|(_, p)| p.is_some()).map(|(n, _)| *n).collect();
    let names: Vec<&str> =
        declared["Metrics"].as_array().unwrap().iter().map(|m| m["Name"].as_str().unwrap()).collect();
    assert_eq!(names, expected, "{document}");
    assert!(declared["Metrics"].as_array().unwrap().iter().all(|m| m["Unit"] == "Seconds"), "{document}");
    for (name, phase) in COLD_START.iter().zip(phases) {
        match phase {
            Some(seconds) => {
                let value = document[*name].as_f64().unwrap();
                assert!((value - seconds).abs() <= 0.0005, "{name}: {value} in the document, {seconds} in the log");
            }
            None => assert!(document.get(*name).is_none(), "{name} was not measured: {document}"),
        }
    }
}

/// The engine simulator as dev starts it on demand, a second's "model load" before it listens.
fn engine_command() -> String {
    format!(
        "{} --listen 127.0.0.1:{{port}} --latency-ms 100 --start-delay-ms 1000",
        env!("CARGO_BIN_EXE_engine-simulator")
    )
}

async fn submit(http: &reqwest::Client, base: &str, prompt: &str) -> String {
    let id = gpuinfer::RequestId::new_v4().to_string();
    let body = serde_json::json!({ "requestId": id, "prompt": prompt, "maxTokens": 8 });
    let response = http.post(format!("{base}/infer")).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
    id
}

/// Waits until the JSON log at `log` tells of the request `id` finished (after its result and any report).
pub(crate) async fn finished(log: &Path, id: &str) {
    eventually(Duration::from_secs(10), "the request's ending in the log", || {
        let text = read(log);
        let ended = text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .any(|line| line["message"] == "request finished" && line["request_id"] == id);
        std::future::ready(ended.then_some(()))
    })
    .await;
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn dev_reports_an_on_demand_engines_cold_start_once_without_a_weights_step() {
    let data = tempfile::tempdir().unwrap();
    let address = format!("127.0.0.1:{}", free_port());
    let data_dir = data.path().display().to_string();
    let engine = engine_command();
    let args = [
        "dev",
        "--listen",
        &address,
        "--data-dir",
        &data_dir,
        "--classifier",
        "none",
        "--scaler-interval",
        "1",
        "--small-engine-cmd",
        &engine,
        "--engine-start-timeout-seconds",
        "60",
    ];
    let log = data.path().join("log");
    let envs = [("RUST_LOG", "info".to_owned()), ("AWS_LAMBDA_LOG_FORMAT", "json".to_owned())];
    let _dev = ChildProcess::gpuinfer(&args, &envs, &log);
    let (http, base) = (reqwest::Client::new(), format!("http://{address}"));
    router_listening(&http, &base).await;

    let first = submit(&http, &base, "the first request of a new engine").await;
    result_document(&http, &base, &first, Duration::from_secs(60)).await;
    eventually(Duration::from_secs(10), "the cold-start line", || {
        std::future::ready((!reports(&read(&log)).is_empty()).then_some(()))
    })
    .await;
    // A second result of the same engine, its ending logged: no second report.
    let second = submit(&http, &base, "the second request").await;
    result_document(&http, &base, &second, Duration::from_secs(30)).await;
    finished(&log, &second).await;

    let phases = one_report(&read(&log), "small", "dev engine start", [false, false]);
    assert!(phases[2].unwrap() >= 1.0, "the engine's phase holds its second of model load: {phases:?}");
    one_document(&read(&data.path().join("metrics.jsonl")), "small", phases);
}
