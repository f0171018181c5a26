//! End to end on a real model: `gpuinfer dev` as a child process in front of the local llama.cpp engine
//! (started by scripts/test.sh), killed and restarted mid-run without losing an accepted request; what the worker
//! reads of that engine (its load, its slots).

use std::time::{Duration, Instant};

use crate::support::dev::Dev;
use crate::support::{free_port, result_document};
use gpuinfer::{Engine, EngineClient, EngineConfig};
use serde_json::{Value, json};

fn engine_url() -> String {
    std::env::var("GPUINFER_TEST_ENGINE_URL").unwrap_or_else(|_| {
        panic!(
            "this test needs the real local engine: run scripts/test.sh, or start one with \
             `scripts/local-engine.sh start --port 18000` and set GPUINFER_TEST_ENGINE_URL=http://127.0.0.1:18000"
        )
    })
}

/// Short visibility so a request held by the killed pipeline comes back quickly.
const DEV_FLAGS: &[&str] = &["--visibility-timeout", "4", "--classifier", "none", "--concurrency", "4"];

async fn post(http: &reqwest::Client, dev: &Dev, body: &Value) -> (u16, Value) {
    let response = http.post(format!("{}/infer", dev.url)).json(body).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
#[ignore = "needs the local engine: scripts/test.sh"]
async fn requests_reach_the_real_model_and_survive_a_killed_pipeline() {
    let engine = engine_url();
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut dev = Dev::start(data.path(), port, &engine, DEV_FLAGS);
    dev.ready(&http).await;

    let small = json!({"requestId": uuid::Uuid::new_v4(), "prompt": "The capital of France is", "maxTokens": 12});
    let large = json!({"requestId": uuid::Uuid::new_v4(), "prompt": "Write one sentence about GPUs.", "maxTokens": 12, "route": "large"});
    let generated = json!({"prompt": "Once upon a time", "maxTokens": 12, "temperature": 0.2});
    let mut accepted = Vec::new();
    for (body, tier) in [(&small, "small"), (&large, "large"), (&generated, "small")] {
        let (status, answer) = post(&http, &dev, body).await;
        assert_eq!((status, answer["tier"].as_str()), (202, Some(tier)), "{answer}");
        accepted.push(answer["requestId"].as_str().unwrap().to_owned());
    }
    let (status, answer) = post(&http, &dev, &json!({"prompt": "hi", "maxTokens": 0})).await;
    assert_eq!(status, 400);
    assert!(answer["error"].as_str().unwrap().starts_with("maxTokens:"), "{answer}");

    // Kill the whole pipeline while those requests may be queued or in flight, then start it again.
    dev.child.kill().unwrap();
    dev.child.wait().unwrap();
    let dev = Dev::start(data.path(), port, &engine, DEV_FLAGS);
    dev.ready(&http).await;
    for prompt in ["The largest planet is", "Water boils at"] {
        let (status, answer) = post(&http, &dev, &json!({"prompt": prompt, "maxTokens": 12})).await;
        assert_eq!(status, 202, "{answer}");
        accepted.push(answer["requestId"].as_str().unwrap().to_owned());
    }

    for id in &accepted {
        let document = result_document(&http, &dev.url, id, Duration::from_secs(120)).await;
        assert_eq!(document["status"], "success", "{document}");
        assert_eq!(document["requestId"].as_str(), Some(id.as_str()));
        assert!(!document["result"]["text"].as_str().unwrap().is_empty(), "{document}");
        assert!(document["result"]["usage"]["promptTokens"].as_u64().unwrap() > 0, "{document}");
        assert!(document["result"]["usage"]["completionTokens"].as_u64().unwrap() > 0, "{document}");
        let file = data.path().join("results").join(format!("{id}.json"));
        assert!(file.exists(), "mirrored at results/{{requestId}}.json");
    }
    println!(
        "e2e: {} requests through the real model in {:.1} s (one pipeline kill)",
        accepted.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The worker fills a llama.cpp engine's slots at once from its /props (`adaptive_limit`): the real server reports the
/// 8 that scripts/test.sh starts it with, and its /metrics gauges are read.
#[tokio::test]
#[ignore = "needs the local engine: scripts/test.sh"]
async fn the_real_engine_reports_its_slots_and_its_load() {
    let config = EngineConfig { base_url: engine_url(), model: None, request_timeout: Duration::from_secs(5) };
    let engine = EngineClient::new(&config).unwrap();
    assert_eq!(engine.slots().await, Some(8));
    assert!(engine.load().await.is_some(), "llama.cpp's /metrics gauges read");
}
