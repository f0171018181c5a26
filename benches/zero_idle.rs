//! Zero idle on one machine, side by side in one run: a bursty trace from `gpuinfer simulate`'s generator replayed
//! for real through `gpuinfer dev`, its engines started on demand against one engine always on, on the engine
//! simulator (with a start delay like a model load) and on the llama.cpp engine; beside each, what
//! `gpuinfer simulate`'s model predicts for the same trace. Prints its rows (Z1–Z3) and writes them into
//! BENCHMARKS.md's table and details in place, and the first paragraph of its "Zero idle on one machine" section.
//!
//! Run through scripts/bench.sh, after the pipeline benchmark.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use gpuinfer::{
    DEFAULT_BACKLOG_PER_TASK, DEFAULT_UTILIZATION_TARGET, ScalingPolicy, Tier, simulate::Millis, simulate::SECOND,
    simulate::TierModel, simulate::cold_start::ColdStart, simulate::event_loop, simulate::event_loop::Timing,
    simulate::policy::Policy, simulate::policy::PolicyKind, simulate::trace, simulate::trace::Traffic,
};
use serde_json::json;

mod support;
use support::{Process, Row, details, free_port, report, run_label, table, write_intro, write_rows};

/// The trace: the shape of `gpuinfer simulate`'s default bursty traffic (bursts of ~10 min after silences of
/// ~110 min) with its time divided by 60, at 1.2 requests/s during bursts, for 240 s (seeded: the same every run;
/// this seed gives 3 bursts).
const TRAFFIC: Traffic = Traffic::Bursty { rate: 4320.0, burst_minutes: 10.0 / 60.0, gap_minutes: 110.0 / 60.0 };
/// The trace, as the report describes it.
const TRACE: &str = "bursts of ~10 s at 1.2 requests/s after silences of ~110 s (its default bursty shape, time \
                     ÷ 60)";
const TRACE_SECONDS: u64 = 240;
const TRACE_SEED: u64 = 20;
/// The on-demand fleet's settings: a scaler tick a second, an idle TTL of 10 s, at most two engines.
const IDLE_TTL_SECONDS: u64 = 10;
const MAX_ENGINES: u32 = 2;
/// The heading of the section this benchmark owns in BENCHMARKS.md.
const SECTION: &str = "## Zero idle on one machine";
/// The ids of this benchmark's rows: a row of these ids that a run did not write is dropped.
const OWNED: &[&str] = &["Z1", "Z2", "Z3"];

/// An engine the tier runs: its command line (`{port}` left for dev), slots, and the tokens each request asks for.
struct EngineUnderTest {
    /// Its name in the rows.
    name: &'static str,
    /// What the section's first paragraph says of it.
    setup: &'static str,
    command: String,
    slots: u32,
    tokens: u32,
}

/// What one replay of the trace measured.
struct Replay {
    /// On demand, engine processes alive integrated over the replay (until the tier is back at zero).
    engine_seconds: f64,
    /// The replay's length: from its start until the last result, and (on demand) no engine is left.
    wall_seconds: f64,
    /// Arrival (the POST) to the result file, per request, in arrival order.
    to_result: Vec<Duration>,
}

/// An engine started directly: its own start time, and one request's time on it once warm.
struct Direct {
    process: Process,
    url: String,
    start: Duration,
    request: Duration,
}

fn engines() -> Vec<EngineUnderTest> {
    let root = env!("CARGO_MANIFEST_DIR");
    vec![
        EngineUnderTest {
            name: "simulator",
            setup: "8 slots, 5 s start delay",
            command: format!(
                "{} --listen 127.0.0.1:{{port}} --slots 8 --completion-tokens 100000 --token-ms 10 \
                 --batch-slowdown 0.3 --start-delay-ms 5000",
                env!("CARGO_BIN_EXE_engine-simulator")
            ),
            slots: 8,
            tokens: 48,
        },
        EngineUnderTest {
            name: "llama.cpp",
            setup: "gemma-3-270m, 4 slots",
            command: format!("{root}/scripts/local-engine.sh serve --port {{port}} --slots 4"),
            slots: 4,
            tokens: 16,
        },
    ]
}

/// The engine command in a process group of its own (the group is killed when it is done).
fn engine_process(command: &str) -> Process {
    let mut child = Command::new("sh");
    child.args(["-c", &format!("exec {command}")]).stdout(Stdio::null()).stderr(Stdio::null());
    Process(child.process_group(0).spawn().expect("start the engine"))
}

/// SIGKILL to the engine's whole process group (a wrapper script's children too), then reaps it.
fn kill_group(engine: Process) {
    let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", engine.pid())]).status();
}

async fn healthy(http: &reqwest::Client, url: &str) -> bool {
    http.get(format!("{url}/health")).send().await.is_ok_and(|r| r.status().is_success())
}

/// Starts the engine directly and measures its own start (spawn → /health answers) and a warm request (median of 5).
async fn start_direct(engine: &EngineUnderTest) -> Direct {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let spawned = Instant::now();
    let process = engine_process(&engine.command.replace("{port}", &port.to_string()));
    while !healthy(&http, &url).await {
        assert!(spawned.elapsed() < Duration::from_secs(300), "{} did not start", engine.name);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let start = spawned.elapsed();
    let mut requests = Vec::new();
    for i in 0..5 {
        let body = json!({"model": "m", "prompt": format!("Request {i}: tell a story."), "max_tokens": engine.tokens});
        let sent = Instant::now();
        let answer = http.post(format!("{url}/v1/completions")).json(&body).send().await.unwrap();
        assert!(answer.status().is_success());
        answer.bytes().await.unwrap();
        requests.push(sent.elapsed());
    }
    requests.sort();
    Direct { process, url, start, request: requests[2] }
}

/// Engines of one replay alive now: the process groups (dev starts each engine in its own) of live processes
/// whose environment holds `marker`.
fn live_engines(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    let mut groups = std::collections::BTreeSet::new();
    for entry in entries.flatten() {
        if !entry.file_name().to_str().is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if !String::from_utf8_lossy(&environ).split('\0').any(|variable| variable == marker) {
            continue;
        }
        // After the command name's closing parenthesis: state, parent, process group.
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
        if let (Some(state), Some(group)) = (fields.first(), fields.get(2))
            && *state != "Z"
        {
            groups.insert(group.to_string());
        }
    }
    groups.len()
}

/// Replays the arrivals through `gpuinfer dev` (small tier), engines on demand when `engine_url` is None.
async fn replay(engine: &EngineUnderTest, engine_url: Option<&str>, arrivals: &[Millis]) -> Replay {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let marker = format!("GPUINFER_BENCH_ENGINE={}", uuid::Uuid::new_v4());
    let on_demand_command = format!("{marker} {}", engine.command);
    let (ttl, max_engines, concurrency) =
        (IDLE_TTL_SECONDS.to_string(), format!("small={MAX_ENGINES}"), engine.slots.to_string());
    let mut args = vec!["dev", "--listen", &base[7..], "--classifier", "none", "--scaler-interval", "1"];
    args.extend(["--concurrency", &concurrency]);
    match engine_url {
        Some(url) => args.extend(["--small-engine-url", url]),
        None => args.extend([
            "--small-engine-cmd",
            &on_demand_command,
            "--engine-idle-ttl-seconds",
            &ttl,
            "--max-engines",
            &max_engines,
        ]),
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpuinfer"));
    command.args(&args).env("GPUINFER_DATA_DIR", dir.path()).env("RUST_LOG", "warn");
    let _dev = Process(command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start gpuinfer dev"));
    let http = reqwest::Client::new();
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let started = Instant::now();
    let mut sends = tokio::task::JoinSet::new();
    for (i, &at) in arrivals.iter().enumerate() {
        let (http, base, tokens) = (http.clone(), base.clone(), engine.tokens);
        sends.spawn(async move {
            tokio::time::sleep_until((started + Duration::from_millis(at)).into()).await;
            let id = uuid::Uuid::new_v4().to_string();
            let body = json!({"requestId": id, "prompt": format!("Request {i}: tell a story."), "maxTokens": tokens});
            let sent = SystemTime::now();
            let status = http.post(format!("{base}/infer")).json(&body).send().await.unwrap().status();
            assert_eq!(status, 202);
            (i, id, sent)
        });
    }
    // Engine processes, sampled every 100 ms from the start of the replay until the tier is back at zero.
    let mut engine_seconds = 0.0;
    let mut sent = Vec::new();
    let results = dir.path().join("results");
    let mut last = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = Instant::now();
        if engine_url.is_none() {
            engine_seconds += live_engines(&marker) as f64 * (now - last).as_secs_f64();
        }
        last = now;
        while let Some(done) = sends.try_join_next() {
            sent.push(done.unwrap());
        }
        let all_answered =
            sent.len() == arrivals.len() && sent.iter().all(|(_, id, _)| results.join(format!("{id}.json")).exists());
        let drained = engine_url.is_some() || live_engines(&marker) == 0;
        if all_answered && drained {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(TRACE_SECONDS * 4), "the replay did not finish");
    }
    let wall_seconds = started.elapsed().as_secs_f64();
    sent.sort_by_key(|(i, _, _)| *i);
    let to_result = sent
        .iter()
        .map(|(_, id, sent)| {
            let written = std::fs::metadata(results.join(format!("{id}.json"))).unwrap().modified().unwrap();
            written.duration_since(*sent).unwrap_or_default()
        })
        .collect();
    Replay { engine_seconds, wall_seconds, to_result }
}

/// What `gpuinfer simulate`'s model of our policy predicts for the same arrivals: (engine-seconds, p50, p95).
fn predicted(
    engine: &EngineUnderTest,
    start: Duration,
    request: Duration,
    arrivals: &[Millis],
) -> (f64, Millis, Millis) {
    let model = TierModel {
        tier: Tier::Small,
        // Measured whole: spawn to healthy.
        cold_start: ColdStart { phases: [start.as_millis() as Millis, 0, 0, 0] },
        service_time: request.as_millis() as Millis,
        concurrency: engine.slots,
        price_per_hour: 0.0,
        scaling: ScalingPolicy::new(DEFAULT_BACKLOG_PER_TASK, 0, MAX_ENGINES, DEFAULT_UTILIZATION_TARGET).unwrap(),
        scale_in_periods: IDLE_TTL_SECONDS as usize,
        scale_in_cooldown: 0,
        gpu_memory_when_running: 90.0,
        warm_window: None,
    };
    let end = TRACE_SECONDS * SECOND * 4;
    let timing = Timing { period: SECOND, retention: end, end };
    let run = event_loop::run(&model, &Policy::new(PolicyKind::Ours, &model), &timing, arrivals);
    let at = |percent: usize| run.latencies[(run.latencies.len() * percent / 100).min(run.latencies.len() - 1)];
    (run.task_time as f64 / SECOND as f64, at(50), at(95))
}

fn percentile(values: &[Duration], percent: usize) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted[(sorted.len() * percent / 100).min(sorted.len() - 1)].as_secs_f64()
}

async fn rows_for(engine: &EngineUnderTest, arrivals: &[Millis], rows: &mut Vec<Row>) {
    eprintln!("{}: the engine started directly, then the trace always on, then on demand", engine.name);
    let direct = start_direct(engine).await;
    let always_on = replay(engine, Some(&direct.url), arrivals).await;
    let Direct { process, start, request, .. } = direct;
    kill_group(process);
    let on_demand = replay(engine, None, arrivals).await;
    let (sim_seconds, sim_p50, sim_p95) = predicted(engine, start, request, arrivals);
    let (start_s, request_s) = (start.as_secs_f64(), request.as_secs_f64());
    // One engine always on over the same window as the replay on demand (the longer of the two).
    let window = on_demand.wall_seconds.max(always_on.wall_seconds);
    report(
        rows,
        Row {
            id: "Z1",
            what: format!("engine-seconds, {}", engine.name),
            ours: format!("{:.0} engine-s", on_demand.engine_seconds),
            reference: format!("{window:.0} engine-s"),
            ratio: window / on_demand.engine_seconds,
            target: "none",
            met: None,
            capped_by: None,
            details: format!("On demand over {:.0} s; simulate predicted {sim_seconds:.0}.", on_demand.wall_seconds),
        },
    );
    let p = |replay: &Replay| (percentile(&replay.to_result, 50), percentile(&replay.to_result, 95));
    let ((od50, od95), (ao50, ao95)) = (p(&on_demand), p(&always_on));
    report(
        rows,
        Row {
            id: "Z2",
            what: format!("time to result p95, {}", engine.name),
            ours: format!("{od95:.2} s"),
            reference: format!("{ao95:.2} s"),
            ratio: od95 / ao95,
            target: "none",
            met: None,
            capped_by: None,
            details: format!(
                "p50 {od50:.2} s on demand, {ao50:.2} s always on; simulate predicted p50 {:.2} s, p95 {:.2} s.",
                sim_p50 as f64 / 1000.0,
                sim_p95 as f64 / 1000.0
            ),
        },
    );
    let cold = on_demand.to_result[0].as_secs_f64();
    let overhead = cold - start_s - request_s;
    report(
        rows,
        Row {
            id: "Z3",
            what: format!("cold start, {}", engine.name),
            ours: format!("{cold:.2} s"),
            reference: format!("{start_s:.2} s + {request_s:.2} s"),
            ratio: overhead,
            target: "overhead ≤ 1 s",
            met: Some(overhead <= 1.0),
            capped_by: None,
            // The ratio column is gpuinfer's part of it; the method is the section's.
            details: String::new(),
        },
    );
}

#[tokio::main]
async fn main() {
    let output = std::env::args().skip_while(|a| a != "--write").nth(1).map(PathBuf::from);
    let started = Instant::now();
    let mut rng = fastrand::Rng::with_seed(TRACE_SEED);
    let arrivals: Vec<Millis> =
        trace::generate(TRAFFIC, TRACE_SECONDS * SECOND, &mut rng).into_iter().map(|(at, _)| at).collect();
    let bursts = 1 + arrivals.windows(2).filter(|w| w[1] - w[0] > IDLE_TTL_SECONDS * SECOND).count();
    eprintln!(
        "trace: {TRACE} for {TRACE_SECONDS} s, seed {TRACE_SEED}: {} requests in {bursts} bursts",
        arrivals.len()
    );
    let mut rows = Vec::new();
    let engines = engines();
    for engine in &engines {
        rows_for(engine, &arrivals, &mut rows).await;
    }
    let setups: Vec<String> = engines.iter().map(|engine| format!("{} ({})", engine.name, engine.setup)).collect();
    let run = run_label();
    println!("{}\n{}", table(&rows), details(&rows, &run));
    let intro = format!(
        "Z1–Z3: one run of [`benches/zero_idle.rs`](benches/zero_idle.rs), {:.0} s. Trace ({TRACE_SECONDS} s, \
         `gpuinfer simulate`'s generator, seed {TRACE_SEED}): {TRACE}; {} requests in {bursts} bursts (gaps over \
         the idle TTL). It is replayed through `gpuinfer dev` with one engine always on, then on demand (scaler \
         tick 1 s, idle TTL {IDLE_TTL_SECONDS} s, at most {MAX_ENGINES} engines). Engines: {}; \"simulate predicted\": its \
         model of our policy, given the measured engine times. Z3: a cold tier's first request → its result, \
         against the engine's own start + one warm request, direct; the ratio column is gpuinfer's part.",
        started.elapsed().as_secs_f64(),
        arrivals.len(),
        setups.join(", ")
    );
    if let Some(path) = output {
        write_rows(&path, &rows, OWNED, &run);
        write_intro(&path, SECTION, &intro);
    }
}
