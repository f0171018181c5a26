//! Prompts and generated text never reach the logs: the real `gpuinfer dev` runs a prompt, a chat and a
//! refused request at info level; its log and its metrics file carry the request ids, and none of the text.

use std::time::Duration;

use crate::support::engine_process::EngineProcess;
use crate::support::free_port;
use crate::support::process::ChildProcess;
use crate::support::{result_document, router_listening};
use serde_json::{Value, json};

const PROMPT: &str = "Marmalade zeppelin 4417 describes the pelican";
const SYSTEM: &str = "Obsidian walrus 9902 speaks softly";
const USER: &str = "Tangerine heron 3381 asks a question";
const REFUSED: &str = "Cobalt lynx 5561";

#[tokio::test]
async fn prompts_and_generated_text_never_reach_the_logs() {
    let engine = EngineProcess::start(&["--latency-ms", "10"]);
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let args = [
        "dev",
        "--listen",
        &listen,
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--small-engine-url",
        &engine.url,
        "--classifier",
        "none",
        "--wait-time-seconds",
        "1",
        "--log-level",
        "info",
    ];
    let mut dev = ChildProcess::gpuinfer(&args, &[], &dir.path().join("dev.log"));
    let http = reqwest::Client::new();
    let base = format!("http://{listen}");
    router_listening(&http, &base).await;

    let chat = json!({"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]});
    let mut ids = Vec::new();
    for body in [json!({"prompt": PROMPT, "maxTokens": 8}), chat] {
        let answer: Value = http.post(format!("{base}/infer")).json(&body).send().await.unwrap().json().await.unwrap();
        ids.push(answer["requestId"].as_str().unwrap().to_owned());
    }
    let refused = http.post(format!("{base}/infer")).json(&json!({"prompt": PROMPT, "route": REFUSED})).send();
    assert_eq!(refused.await.unwrap().status(), 400);
    let mut generated = Vec::new();
    for id in &ids {
        let document = result_document(&http, &base, id, Duration::from_secs(20)).await;
        generated.push(document["result"]["text"].as_str().unwrap().to_owned());
    }
    dev.signal("TERM");
    assert!(dev.exited_within(Duration::from_secs(20)).await.success());

    let logs = format!("{}{}", dev.log(), std::fs::read_to_string(dir.path().join("metrics.jsonl")).unwrap());
    for id in &ids {
        assert!(logs.contains(id.as_str()), "the log names request {id}");
    }
    for text in [PROMPT, SYSTEM, USER, REFUSED].iter().copied().chain(generated.iter().map(String::as_str)) {
        assert!(!text.is_empty());
        assert!(!logs.contains(text), "{text:?} is in the logs");
    }
    for word in ["Marmalade", "walrus", "heron", "lynx"] {
        assert!(!logs.contains(word), "{word:?} (from a prompt) is in the logs");
    }
}
