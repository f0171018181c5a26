//! High-priority requests while normal work saturates the engine, side by side in one run on the engine simulator (8
//! slots, GPU-like) and on the local llama.cpp engine (8 slots): a normal-lane backlog of 10× the slots, then
//! high-priority requests; their time to result through `gpuinfer dev` with the adaptive in-flight limit, with a fixed
//! limit of 32 (the template's setting before the limit adapted), and sent to the engine directly (no lanes), against
//! one request on an idle engine (and one in a full batch: on 2 CPU cores a full batch slows each request several
//! times, a GPU's far less); and the requests queued inside the engine, time-averaged, under each. Writes its
//! rows (P7, P8) into BENCHMARKS.md's table and details in place, and the first paragraph of its "Saturation" section.
//!
//! Run through scripts/bench.sh, after the pipeline benchmark.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

mod support;
use support::{
    GPU_LIKE, Process, Row, details, engine_load, free_port, loads_during, mean_of, report, run_label, simulator,
    table, write_intro, write_rows,
};

const SLOTS: usize = 8;
/// Normal-lane requests queued first: ten times the engine's slots.
const BACKLOG: usize = 10 * SLOTS;
/// High-priority requests sent once the engine is full, one every `HIGH_SPACING` of a request's time in a full
/// batch (about 400 ms on the simulator), so they overlap alike on engines whose requests take 0.6 s or 5 s.
const HIGH: usize = 12;
const HIGH_SPACING: f64 = 0.7;
const TOKENS: u32 = 48;
const SECTION: &str = "## Saturation";
/// The ids of this benchmark's rows: a row of these ids that a run did not write is dropped.
const OWNED: &[&str] = &["P7", "P8"];

/// How the high-priority requests fared, and the engine's internal queue meanwhile.
struct Outcome {
    /// Each high-priority request's time from its POST to its result.
    to_result: Vec<f64>,
    /// Requests waiting inside the engine, averaged over readings every 50 ms while the high ones ran.
    engine_waiting: f64,
    /// Backlog requests already finished when the first high-priority one was sent.
    backlog_done: usize,
}

/// Backlog requests that may finish before the first high-priority one is sent: one full batch. More means the
/// engine answered /metrics late (llama.cpp once took 37 s while tens of requests arrived at once), so the high
/// ones met a drained backlog and the scenario measured nothing.
const BACKLOG_DONE_AT_MOST: usize = SLOTS;
/// Tries of a scenario whose high-priority requests met a drained backlog.
const TRIES: usize = 3;

/// `scenario`, run again (up to `TRIES` in all) while its backlog had drained before the high-priority requests.
async fn measured<F: Future<Output = Outcome>>(name: &str, scenario: impl Fn() -> F) -> Outcome {
    for attempt in 1..=TRIES {
        let outcome = scenario().await;
        if outcome.backlog_done <= BACKLOG_DONE_AT_MOST {
            return outcome;
        }
        eprintln!(
            "saturation: {name}: {} of the {BACKLOG} backlog requests had finished before the first high-priority \
             one (the engine's /metrics answered late); try {attempt} of {TRIES} discarded",
            outcome.backlog_done
        );
    }
    panic!("saturation: {name}: the backlog drained before the high-priority requests in {TRIES} tries");
}

/// Waits until the engine runs nothing and holds nothing waiting (what an earlier scenario left has ended).
async fn wait_until_idle(http: &reqwest::Client, engine: &str) {
    loop {
        let load = engine_load(http, engine).await;
        if load.running == 0 && load.waiting == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_until_full(http: &reqwest::Client, engine: &str) {
    while (engine_load(http, engine).await.running as usize) < SLOTS {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The backlog then the high-priority requests through `gpuinfer dev`; `fixed` keeps that many in flight.
async fn through_dev(engine: &str, fixed: Option<usize>, spacing: Duration) -> Outcome {
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
    let backlog_done = std::fs::read_dir(&results).map_or(0, Iterator::count);
    let highs = async {
        let mut sent = Vec::new();
        for i in 0..HIGH {
            let at = SystemTime::now();
            sent.push((post(Some("high"), i).await, at));
            tokio::time::sleep(spacing).await;
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
    let (to_result, loads) = loads_during(engine, highs).await;
    Outcome { to_result, engine_waiting: mean_of(&loads, |load| load.waiting), backlog_done }
}

async fn complete(http: &reqwest::Client, engine: &str, i: usize) -> f64 {
    let body = json!({"model": "m", "prompt": format!("Request {i}: tell a story."), "max_tokens": TOKENS});
    let sent = Instant::now();
    let answer = http.post(format!("{engine}/v1/completions")).json(&body).send().await.unwrap();
    answer.bytes().await.unwrap();
    sent.elapsed().as_secs_f64()
}

/// The backlog then the high-priority requests sent to the engine directly: no lanes, one queue inside the engine.
async fn direct(engine: &str, spacing: Duration) -> Outcome {
    let http = reqwest::Client::new();
    wait_until_idle(&http, engine).await;
    let mut backlog = tokio::task::JoinSet::new();
    for i in 0..BACKLOG {
        let (http, engine) = (http.clone(), engine.to_owned());
        backlog.spawn(async move { complete(&http, &engine, i).await });
    }
    wait_until_full(&http, engine).await;
    let mut backlog_done = 0;
    while backlog.try_join_next().is_some() {
        backlog_done += 1;
    }
    let highs = async {
        let mut sent = tokio::task::JoinSet::new();
        for i in 0..HIGH {
            let (http, engine) = (http.clone(), engine.to_owned());
            sent.spawn(async move { (i, complete(&http, &engine, i).await) });
            tokio::time::sleep(spacing).await;
        }
        let mut to_result = sent.join_all().await;
        to_result.sort_by_key(|(i, _)| *i);
        to_result.into_iter().map(|(_, seconds)| seconds).collect()
    };
    let (to_result, loads) = loads_during(engine, highs).await;
    backlog.join_all().await;
    Outcome { to_result, engine_waiting: mean_of(&loads, |load| load.waiting), backlog_done }
}

fn p95(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[(sorted.len() * 95 / 100).min(sorted.len() - 1)]
}

/// One request's time on the idle engine, and the median time of `SLOTS` sent together (a full batch).
async fn idle_and_full_batch(http: &reqwest::Client, engine: &str) -> (f64, f64) {
    let median = |mut times: Vec<f64>| {
        times.sort_by(f64::total_cmp);
        times[times.len() / 2]
    };
    let mut idle = Vec::new();
    for i in 0..5 {
        idle.push(complete(http, engine, i).await);
    }
    let batch = (0..SLOTS).map(|i| complete(http, engine, i));
    (median(idle), median(futures_util::future::join_all(batch).await))
}

/// An engine P7 and P8 run on: its name in the rows, its URL, and whether it computes on this machine's CPU, where
/// a request in a full batch takes several times an idle one's (a GPU-like engine's, far less).
struct Engine<'a> {
    name: &'a str,
    url: &'a str,
    cpu_bound: bool,
}

/// P7 and P8 on one engine: the three scenarios, one after the other.
async fn engine_rows(rows: &mut Vec<Row>, engine: Engine<'_>) {
    let (name, url) = (engine.name, engine.url);
    let (idle, full_batch) = idle_and_full_batch(&reqwest::Client::new(), url).await;
    let spacing = Duration::from_secs_f64(full_batch * HIGH_SPACING);
    eprintln!("saturation: {name}: adaptive limit (default settings)");
    let adaptive = measured(name, || through_dev(url, None, spacing)).await;
    eprintln!("saturation: {name}: fixed limit of 32");
    let fixed = measured(name, || through_dev(url, Some(32), spacing)).await;
    eprintln!("saturation: {name}: the engine driven directly");
    let direct = measured(name, || direct(url, spacing)).await;
    for (scenario, outcome) in [("adaptive", &adaptive), ("fixed 32", &fixed), ("direct", &direct)] {
        let times: Vec<String> = outcome.to_result.iter().map(|t| format!("{t:.2}")).collect();
        eprintln!(
            "saturation: {name}: {scenario}: each high-priority request's time to result (s): {}",
            times.join(" ")
        );
    }
    let (ours, fixed_p95, direct_p95) = (p95(&adaptive.to_result), p95(&fixed.to_result), p95(&direct.to_result));
    let met = ours <= 1.5 * idle;
    report(
        rows,
        Row {
            id: "P7",
            what: format!("high-priority p95, {name}"),
            ours: format!("{ours:.2} s"),
            reference: format!("{idle:.2} s idle"),
            ratio: ours / idle,
            target: "≤ 1.5 × idle",
            met: Some(met),
            // On 2 CPU cores a request in a full batch alone takes several times an idle one's: the engine's bound.
            capped_by: (engine.cpu_bound && !met).then_some("engine-bound"),
            details: format!(
                "Spacing {} ms; full batch {full_batch:.2} s ({:.2} × idle; ours {:.2} × it); fixed limit of 32: \
                 {fixed_p95:.2} s; direct: {direct_p95:.2} s.",
                spacing.as_millis(),
                full_batch / idle,
                ours / full_batch
            ),
        },
    );
    report(
        rows,
        Row {
            id: "P8",
            what: format!("queued in the engine, {name}"),
            ours: format!("{:.1}", adaptive.engine_waiting),
            reference: format!("{:.1}", fixed.engine_waiting),
            ratio: fixed.engine_waiting / adaptive.engine_waiting.max(0.1),
            target: "none",
            met: None,
            capped_by: None,
            details: format!("Direct: {:.1}.", direct.engine_waiting),
        },
    );
}

#[tokio::main]
async fn main() {
    let output = std::env::args().skip_while(|a| a != "--write").nth(1).map(PathBuf::from);
    let llama =
        std::env::var("BENCH_LOCAL_ENGINE_URL").expect("BENCH_LOCAL_ENGINE_URL (scripts/bench.sh starts the engine)");
    let started = Instant::now();
    let (_simulator, simulator_url) = simulator(SLOTS, GPU_LIKE);
    let mut rows = Vec::new();
    engine_rows(&mut rows, Engine { name: "simulator", url: &simulator_url, cpu_bound: false }).await;
    let name = "llama.cpp";
    engine_rows(&mut rows, Engine { name, url: &llama, cpu_bound: true }).await;
    let run = run_label();
    println!("{}\n{}", table(&rows), details(&rows, &run));
    let intro = format!(
        "P7, P8, {SLOTS} slots: one run of [`benches/saturation.rs`](benches/saturation.rs), {:.0} s. {BACKLOG} \
         normal requests of {TOKENS} tokens are queued; once the engine is full, {HIGH} high-priority ones follow, one \
         every {HIGH_SPACING} of a request's time in a full batch ({SLOTS} sent together). Ours: `gpuinfer dev`, \
         adaptive in-flight limit; also measured: a fixed limit of 32, and the engine driven directly. P8: requests \
         waiting in the engine, time-averaged, against the fixed limit (ratio: ours floored at 0.1).",
        started.elapsed().as_secs_f64(),
    );
    if let Some(path) = output {
        write_rows(&path, &rows, OWNED, &run);
        write_intro(&path, SECTION, &intro);
    }
}
