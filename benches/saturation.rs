//! High-priority requests while normal work saturates the engine, side by side in one run on the engine simulator
//! (8 slots, GPU-like): a normal-lane backlog of 10× the slots, then high-priority requests; their time to result
//! through `gpuinfer dev` with the adaptive in-flight limit, with a fixed limit of 32 (the template's setting before
//! the limit adapted), and sent to the engine directly (no lanes), against one request on an idle engine; and the
//! requests queued inside the engine, time-averaged, under each. Writes the "Saturation" section of BENCHMARKS.md.
//!
//! Run through scripts/bench.sh, after the pipeline benchmark (which rewrites the rest of BENCHMARKS.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use gpuinfer::engine_load::{self, EngineLoad};
use serde_json::{Value, json};

mod support;
use support::{GPU_LIKE, Process, Row, free_port, machine, report, simulator, table, write_section};

const SLOTS: usize = 8;
/// Normal-lane requests queued first: ten times the engine's slots.
const BACKLOG: usize = 10 * SLOTS;
/// High-priority requests sent once the engine is full, one every `HIGH_SPACING`.
const HIGH: usize = 12;
const HIGH_SPACING: Duration = Duration::from_millis(400);
const TOKENS: u32 = 48;
const SECTION: &str = "## Saturation";

/// How the high-priority requests fared, and the engine's internal queue meanwhile.
struct Outcome {
    /// Each high-priority request's time from its POST to its result.
    to_result: Vec<f64>,
    /// Requests waiting inside the engine, averaged over readings every 50 ms while the high ones ran.
    engine_waiting: f64,
}

async fn load(http: &reqwest::Client, engine: &str) -> EngineLoad {
    let text = http.get(format!("{engine}/metrics")).send().await.unwrap().text().await.unwrap();
    engine_load::parse(&text).unwrap()
}

/// Waits until the engine runs nothing and holds nothing waiting (what an earlier scenario left has ended).
async fn wait_until_idle(http: &reqwest::Client, engine: &str) {
    loop {
        let load = load(http, engine).await;
        if load.running == 0 && load.waiting == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_until_full(http: &reqwest::Client, engine: &str) {
    while (load(http, engine).await.running as usize) < SLOTS {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads the engine's queue every 50 ms until `done` resolves; the mean.
async fn mean_waiting_during(
    http: &reqwest::Client,
    engine: &str,
    done: impl std::future::Future<Output = Vec<f64>>,
) -> (Vec<f64>, f64) {
    tokio::pin!(done);
    let mut readings = Vec::new();
    loop {
        tokio::select! {
            to_result = &mut done => {
                let mean = readings.iter().sum::<u64>() as f64 / readings.len().max(1) as f64;
                return (to_result, mean);
            }
            () = tokio::time::sleep(Duration::from_millis(50)) => readings.push(load(http, engine).await.waiting),
        }
    }
}

/// The backlog then the high-priority requests through `gpuinfer dev`; `fixed` keeps that many in flight.
async fn through_dev(engine: &str, fixed: Option<usize>) -> Outcome {
    wait_until_idle(&reqwest::Client::new(), engine).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut env = vec![("GPUINFER_DATA_DIR", dir.path().display().to_string())];
    if let Some(limit) = fixed {
        env.extend([("WORKER_CONCURRENCY", limit.to_string()), ("WORKER_FIXED_CONCURRENCY", "true".into())]);
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpuinfer"));
    command.args(["dev", "--listen", &base[7..], "--small-engine-url", engine, "--classifier", "none"]);
    command.envs(env).env("RUST_LOG", "warn").stdout(Stdio::null()).stderr(Stdio::null());
    let _dev = Process(command.spawn().expect("start gpuinfer dev"));
    let http = reqwest::Client::new();
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let post = |priority: Option<&str>, i: usize| {
        let mut body = json!({"prompt": format!("Request {i}: tell a story."), "maxTokens": TOKENS});
        if let Some(priority) = priority {
            body["priority"] = json!(priority);
        }
        let (http, base) = (http.clone(), base.clone());
        async move {
            let answer: Value =
                http.post(format!("{base}/infer")).json(&body).send().await.unwrap().json().await.unwrap();
            answer["requestId"].as_str().unwrap().to_owned()
        }
    };
    for i in 0..BACKLOG {
        post(None, i).await;
    }
    wait_until_full(&http, engine).await;
    let results = dir.path().join("results");
    let highs = async {
        let mut sent = Vec::new();
        for i in 0..HIGH {
            let at = SystemTime::now();
            sent.push((post(Some("high"), i).await, at));
            tokio::time::sleep(HIGH_SPACING).await;
        }
        let mut to_result = Vec::new();
        for (id, at) in sent {
            let path = results.join(format!("{id}.json"));
            while !path.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let written = std::fs::metadata(&path).unwrap().modified().unwrap();
            to_result.push(written.duration_since(at).unwrap_or_default().as_secs_f64());
        }
        to_result
    };
    let (to_result, engine_waiting) = mean_waiting_during(&http, engine, highs).await;
    Outcome { to_result, engine_waiting }
}

async fn complete(http: &reqwest::Client, engine: &str, i: usize) -> f64 {
    let body = json!({"model": "m", "prompt": format!("Request {i}: tell a story."), "max_tokens": TOKENS});
    let sent = Instant::now();
    let answer = http.post(format!("{engine}/v1/completions")).json(&body).send().await.unwrap();
    answer.bytes().await.unwrap();
    sent.elapsed().as_secs_f64()
}

/// The backlog then the high-priority requests sent to the engine directly: no lanes, one queue inside the engine.
async fn direct(engine: &str) -> Outcome {
    let http = reqwest::Client::new();
    wait_until_idle(&http, engine).await;
    let mut backlog = tokio::task::JoinSet::new();
    for i in 0..BACKLOG {
        let (http, engine) = (http.clone(), engine.to_owned());
        backlog.spawn(async move { complete(&http, &engine, i).await });
    }
    wait_until_full(&http, engine).await;
    let highs = async {
        let mut sent = tokio::task::JoinSet::new();
        for i in 0..HIGH {
            let (http, engine) = (http.clone(), engine.to_owned());
            sent.spawn(async move { (i, complete(&http, &engine, i).await) });
            tokio::time::sleep(HIGH_SPACING).await;
        }
        let mut to_result = sent.join_all().await;
        to_result.sort_by_key(|(i, _)| *i);
        to_result.into_iter().map(|(_, seconds)| seconds).collect()
    };
    let (to_result, engine_waiting) = mean_waiting_during(&http, engine, highs).await;
    backlog.join_all().await;
    Outcome { to_result, engine_waiting }
}

fn p95(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[(sorted.len() * 95 / 100).min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() {
    let output = std::env::args().skip_while(|a| a != "--write").nth(1).map(PathBuf::from);
    let started = Instant::now();
    let (_engine, engine) = simulator(SLOTS, GPU_LIKE);
    let http = reqwest::Client::new();
    let mut idle = Vec::new();
    for i in 0..5 {
        idle.push(complete(&http, &engine, i).await);
    }
    idle.sort_by(f64::total_cmp);
    let idle = idle[2];
    eprintln!("saturation: adaptive limit (default settings)");
    let adaptive = through_dev(&engine, None).await;
    eprintln!("saturation: fixed limit of 32");
    let fixed = through_dev(&engine, Some(32)).await;
    eprintln!("saturation: the engine driven directly");
    let direct = direct(&engine).await;

    for (name, outcome) in [("adaptive", &adaptive), ("fixed 32", &fixed), ("direct", &direct)] {
        let times: Vec<String> = outcome.to_result.iter().map(|t| format!("{t:.2}")).collect();
        eprintln!("saturation: {name}: each high-priority request's time to result (s): {}", times.join(" "));
    }
    let mut rows = Vec::new();
    let (ours, fixed_p95, direct_p95) = (p95(&adaptive.to_result), p95(&fixed.to_result), p95(&direct.to_result));
    report(
        &mut rows,
        Row {
            id: "P7",
            what: format!(
                "high-priority p95 time to result, {HIGH} sent behind a normal backlog of {BACKLOG}, simulator, {SLOTS} slots"
            ),
            ours: format!("{ours:.2} s, adaptive limit (default settings)"),
            reference: format!(
                "{idle:.2} s one request on an idle engine; {fixed_p95:.2} s with a fixed limit of 32; {direct_p95:.2} s sent to the engine directly"
            ),
            ratio: ours / idle,
            target: "≤ 2 × idle",
            met: Some(ours <= 2.0 * idle),
        },
    );
    report(
        &mut rows,
        Row {
            id: "P8",
            what: format!("requests queued inside the engine, time-averaged, same run, simulator, {SLOTS} slots"),
            ours: format!("{:.1} adaptive limit", adaptive.engine_waiting),
            reference: format!(
                "{:.1} fixed limit of 32; {:.1} sent to the engine directly",
                fixed.engine_waiting, direct.engine_waiting
            ),
            ratio: fixed.engine_waiting / adaptive.engine_waiting.max(0.1),
            target: "none set: measured (fixed ÷ adaptive, adaptive floored at 0.1)",
            met: None,
        },
    );
    let table = table(&rows);
    println!("{table}");
    let section = format!(
        "{SECTION}\n\nOne run of `benches/saturation.rs` (through scripts/bench.sh), every row measured side by side in \
         that run. Machine: {}. Took {:.0} s. {BACKLOG} normal requests of {TOKENS} tokens are queued, then, once the \
         engine is full, {HIGH} high-priority ones {} ms apart.\n\n{table}",
        machine(),
        started.elapsed().as_secs_f64(),
        HIGH_SPACING.as_millis()
    );
    if let Some(path) = output {
        write_section(&path, SECTION, &section);
    }
}
