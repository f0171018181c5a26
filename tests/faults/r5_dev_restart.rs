//! R5 restart under load: `gpuinfer dev` stopped (once with SIGTERM, once with SIGKILL) and started again
//! while producers keep posting. Every request it answered 202 ends in a success document.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::harness::seconds;
use crate::support::engine_process::EngineProcess;
use crate::support::free_port;
use crate::support::process::ChildProcess;
use crate::support::{eventually, report_figure, result_document, router_listening};

const PRODUCERS: usize = 4;
const PER_PRODUCER: usize = 100;

/// What the producers were told: the ids answered 202, and how many posts got anything else.
#[derive(Default)]
struct Answers {
    accepted: Vec<String>,
    refused: usize,
}

fn start_dev(data_dir: &Path, port: u16, engine_url: &str) -> ChildProcess {
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "dev",
        "--listen",
        &listen,
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--small-engine-url",
        engine_url,
        "--classifier",
        "none",
        "--visibility-timeout",
        "3",
        "--concurrency",
        "8",
        "--wait-time-seconds",
        "1",
    ];
    ChildProcess::gpuinfer(&args, &[], &data_dir.join("dev.log"))
}

/// One producer: posts its requests 20 ms apart, recording each answer.
async fn produce(http: reqwest::Client, base: String, producer: usize, answers: Arc<Mutex<Answers>>) {
    for i in 0..PER_PRODUCER {
        let body = json!({"prompt": format!("producer {producer} request {i}"), "maxTokens": 8});
        let answer = http.post(format!("{base}/infer")).json(&body).send().await;
        let accepted = match answer {
            Ok(response) if response.status() == 202 => response.json::<Value>().await.ok(),
            _ => None,
        };
        {
            let mut answers = answers.lock().unwrap();
            match accepted.and_then(|a| a["requestId"].as_str().map(str::to_owned)) {
                Some(id) => answers.accepted.push(id),
                None => answers.refused += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn r5_restarting_gpuinfer_dev_under_load_loses_no_accepted_request() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let engine = EngineProcess::start(&["--latency-ms", "20"]);
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let mut dev = start_dev(dir.path(), port, &engine.url);
    router_listening(&http, &base).await;

    let answers = Arc::new(Mutex::new(Answers::default()));
    let mut producers = JoinSet::new();
    for producer in 0..PRODUCERS {
        producers.spawn(produce(http.clone(), base.clone(), producer, Arc::clone(&answers)));
    }
    let sent = PRODUCERS * PER_PRODUCER;
    for (threshold, signal) in [(sent / 4, "TERM"), (sent * 5 / 8, "KILL")] {
        let answers = &answers;
        eventually(Duration::from_secs(30), "accepted requests before the restart", || {
            std::future::ready((answers.lock().unwrap().accepted.len() >= threshold).then_some(()))
        })
        .await;
        dev.signal(signal);
        let status = dev.exited_within(Duration::from_secs(20)).await;
        if signal == "TERM" {
            assert!(status.success(), "SIGTERM drains and exits 0, got {status}");
        }
        dev = start_dev(dir.path(), port, &engine.url);
        router_listening(&http, &base).await;
    }
    while let Some(done) = producers.join_next().await {
        done.unwrap();
    }

    let Answers { accepted, refused } = std::mem::take(&mut *answers.lock().unwrap());
    assert_eq!(accepted.len() + refused, sent);
    assert!(accepted.len() > sent / 2, "most requests were accepted: {} of {sent}", accepted.len());
    for id in &accepted {
        let document = result_document(&http, &base, id, Duration::from_secs(60)).await;
        assert_eq!(document["status"], "success", "{document}");
    }
    let documents = std::fs::read_dir(dir.path().join("results"))
        .unwrap()
        .filter(|entry| entry.as_ref().unwrap().path().extension().is_some_and(|e| e == "json"))
        .count();
    let duplicates = engine.calls().await.saturating_sub(documents as u64);
    dev.signal("TERM");
    assert!(dev.exited_within(Duration::from_secs(20)).await.success());
    report_figure(&format!(
        "R5 dev restart under load: {sent} posted, {} accepted, 0 lost, {refused} refused while restarting, \
         2 restarts (SIGTERM, SIGKILL), {duplicates} duplicate engine calls, {}",
        accepted.len(),
        seconds(started)
    ));
}
