//! `gpuinfer dev` starting its engines on demand (`--small-engine-cmd`), each proof run with the engine simulator (a
//! start delay like a model load) and with the real llama.cpp engine (`scripts/local-engine.sh serve`): zero
//! engine processes while idle, one started by a request and stopped after the idle TTL; a burst scaled out to the
//! maximum and back in with nothing lost; an engine killed mid-request replaced, every request ending once; no
//! engine outliving a `gpuinfer dev` killed with SIGKILL, and a restart completing its requests. Also: an engine
//! slower to stop than its wrapper shell is given its grace.

use std::path::Path;
use std::time::{Duration, Instant};

use gpuinfer::{Queue, QueueCounts};
use serde_json::Value;

use crate::support::process::ChildProcess;
use crate::support::{eventually, free_port, result_document};

/// Time one request takes in the engine.
const LATENCY_MS: u64 = 300;
/// The engine's "model load" before it listens.
const START_DELAY_MS: u64 = 1000;
/// Seconds a tier must need fewer engines before one is stopped.
const IDLE_TTL_SECONDS: u64 = 2;

/// The engine a test's tier starts on demand.
#[derive(Clone, Copy)]
enum EngineKind {
    /// The engine simulator, each request taking this many milliseconds, after a start delay like a model load.
    Simulator { latency_ms: u64 },
    /// The engine simulator behind a wrapper shell that takes a second to shut down after SIGTERM, as a script
    /// around a real server may, in a shell list (`…; exit`), so the engine command's own shell is its parent
    /// and exits at SIGTERM first.
    SlowToStop,
    /// The real llama.cpp engine of scripts/local-engine.sh, in the foreground, with this many slots.
    LlamaCpp { slots: u32 },
    /// The engine simulator generating a request's whole `max_tokens` (up to 400), this many milliseconds a token.
    Paced { token_ms: u64 },
}

/// The engine simulator's command line.
fn simulator_command(latency_ms: u64) -> String {
    format!(
        "{} --listen 127.0.0.1:{{port}} --latency-ms {latency_ms} --start-delay-ms {START_DELAY_MS}",
        env!("CARGO_BIN_EXE_engine-simulator")
    )
}

impl EngineKind {
    /// The engine command, `{port}` left for dev to fill in.
    fn command(&self) -> String {
        match self {
            EngineKind::Simulator { latency_ms } => simulator_command(*latency_ms),
            EngineKind::Paced { token_ms } => {
                format!("{} --completion-tokens 400 --token-ms {token_ms}", simulator_command(5))
            }
            EngineKind::SlowToStop => format!(
                "sh -c 'trap \"sleep 1; echo slow-stop-engine: stopped >&2; exit 0\" TERM; {} & wait'; exit",
                simulator_command(LATENCY_MS)
            ),
            EngineKind::LlamaCpp { slots } => {
                format!("{}/scripts/local-engine.sh serve --port {{port}} --slots {slots}", env!("CARGO_MANIFEST_DIR"))
            }
        }
    }

    /// What the engine writes on stderr once it has shut down cleanly after SIGTERM, if it says so.
    fn clean_stop_line(&self) -> Option<&'static str> {
        match self {
            EngineKind::Simulator { .. } | EngineKind::Paced { .. } => None,
            EngineKind::SlowToStop => Some("slow-stop-engine: stopped"),
            EngineKind::LlamaCpp { .. } => Some("local_engine.py: stopped"),
        }
    }

    /// What an engine process's command line contains.
    fn program(&self) -> &'static str {
        match self {
            EngineKind::Simulator { .. } | EngineKind::Paced { .. } => "engine-simulator",
            EngineKind::SlowToStop => "slow-stop-engine",
            EngineKind::LlamaCpp { .. } => "local_engine.py",
        }
    }
}

struct OnDemand {
    dev: ChildProcess,
    program: &'static str,
    url: String,
    /// In the environment of this test's engines only: how they are told from every other process.
    marker: String,
    http: reqwest::Client,
}

impl OnDemand {
    /// `gpuinfer dev` whose small tier (and so the large one) starts engine simulators on demand; once it answers.
    async fn start(data: &Path, engine: EngineKind, flags: &[&str]) -> OnDemand {
        let marker = format!("GPUINFER_TEST_ENGINE={}", uuid::Uuid::new_v4());
        let command = format!("{marker} {}", engine.command());
        let address = format!("127.0.0.1:{}", free_port());
        let data_dir = data.display().to_string();
        let ttl = IDLE_TTL_SECONDS.to_string();
        let mut args = vec![
            "dev",
            "--listen",
            &address,
            "--data-dir",
            &data_dir,
            "--classifier",
            "none",
            "--small-engine-cmd",
            &command,
            "--engine-idle-ttl-seconds",
            &ttl,
            "--engine-start-timeout-seconds",
            "120",
            "--engine-loss-window-seconds",
            "2",
        ];
        args.extend(flags);
        if !flags.contains(&"--scaler-interval") {
            args.extend(["--scaler-interval", "1"]);
        }
        let dev = ChildProcess::gpuinfer(&args, &[("RUST_LOG", "info".into())], &data.join("log"));
        let on_demand = OnDemand {
            dev,
            program: engine.program(),
            url: format!("http://{address}"),
            marker,
            http: reqwest::Client::new(),
        };
        crate::support::router_listening(&on_demand.http, &on_demand.url).await;
        on_demand
    }

    /// The pids of this test's live engine processes.
    fn engines(&self) -> Vec<u32> {
        engine_pids(self.program, &self.marker)
    }

    /// Waits until exactly `count` engine processes run.
    async fn engines_become(&self, count: usize, limit: Duration) -> Vec<u32> {
        let what = format!("{count} engine process(es) (log {})", self.dev.log());
        eventually(limit, &what, || std::future::ready(Some(self.engines()).filter(|pids| pids.len() == count))).await
    }

    /// Sends a request for up to `max_tokens` tokens to the small tier; its id.
    async fn send(&self, prompt: &str, max_tokens: u32) -> String {
        self.send_on(prompt, max_tokens, "normal").await
    }

    /// The same on the lane of `priority`.
    async fn send_on(&self, prompt: &str, max_tokens: u32, priority: &str) -> String {
        let id = gpuinfer::RequestId::new_v4();
        let body =
            serde_json::json!({ "requestId": id, "prompt": prompt, "maxTokens": max_tokens, "priority": priority })
                .to_string();
        let response = self
            .http
            .post(format!("{}/infer", self.url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
        id.to_string()
    }

    /// Asserts that the log tells of exactly one end ("request finished") for each of `ids`.
    fn assert_each_finished_once(&self, ids: &[String]) {
        let log = self.dev.log();
        for id in ids {
            let ends = log.lines().filter(|l| l.contains("request finished") && l.contains(id.as_str())).count();
            assert_eq!(ends, 1, "request {id} finished {ends} times: {log}");
        }
    }

    async fn document(&self, id: &str, limit: Duration) -> Value {
        result_document(&self.http, &self.url, id, limit).await
    }

    /// The small tier's status lines logged so far, each as its `key=value` fields.
    fn small_statuses(&self) -> Vec<String> {
        self.dev
            .log()
            .lines()
            .filter(|line| line.contains("engine fleet status") && line.contains("tier=small"))
            .map(|line| line.split_once("engine fleet status").map_or("", |(_, fields)| fields).trim().to_owned())
            .collect()
    }

    /// Waits until the small tier's last status line reads `fields`.
    async fn small_status_becomes(&self, fields: &str, limit: Duration) {
        let what = format!("the status `{fields}` (log {})", self.dev.log());
        eventually(limit, &what, || {
            std::future::ready(self.small_statuses().last().filter(|last| last.ends_with(fields)).map(|_| ()))
        })
        .await
    }
}

/// Live (not zombie) processes whose command line names `program` and whose environment holds `marker`.
fn engine_pids(program: &str, marker: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(program) {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if String::from_utf8_lossy(&environ).split('\0').any(|variable| variable == marker) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Whether `pid` is a process that has not exited (a zombie waiting for its parent's wait has).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, None | Some("Z" | "X"))
}

fn assert_success(document: &Value) {
    assert_eq!(document["status"], "success", "{document}");
}

/// Idle → no engine; one request → one engine started → its result → back to zero engines after the idle TTL.
async fn idle_then_one_request_then_idle(engine: EngineKind, result_limit: Duration) {
    let data = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let name = engine.program();
    let clean_stop_line = engine.clean_stop_line();
    let dev = OnDemand::start(data.path(), engine, &[]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(dev.engines().is_empty(), "an engine runs with nothing to do: {}", dev.dev.log());

    let sent = Instant::now();
    let id = dev.send("The capital of France is", 16).await;
    let document = dev.document(&id, result_limit).await;
    let to_result = sent.elapsed();
    assert_success(&document);
    assert_eq!(dev.engines().len(), 1, "{}", dev.dev.log());
    let log = dev.dev.log();
    assert!(log.contains("starting an engine"), "{log}");
    let cold_start_ms = log
        .lines()
        .find_map(|line| {
            line.split_once("cold_start_ms=").and_then(|(_, rest)| rest.split(' ').next()?.parse::<u64>().ok())
        })
        .unwrap_or_else(|| panic!("no cold_start_ms logged: {log}"));
    let statuses = dev.small_statuses();
    assert!(statuses.iter().any(|s| s.starts_with("tier=small desired=1 starting=1 running=0")), "{statuses:?}");

    dev.engines_become(0, Duration::from_secs(IDLE_TTL_SECONDS + 30)).await;
    dev.small_status_becomes("desired=0 starting=0 running=0 draining=0 queue_depth=0", Duration::from_secs(10)).await;
    let log = dev.dev.log();
    assert!(log.contains("engine stopped") && !log.contains("engine still running after SIGTERM"), "{log}");
    // Not killed once its wrapper script has exited: the engine had its grace to shut down.
    assert!(clean_stop_line.is_none_or(|line| log.contains(line)), "{log}");
    let statuses = dev.small_statuses();
    assert!(statuses.iter().any(|s| s.contains("running=1")), "no status line with the engine running: {statuses:?}");
    crate::support::report_figure(&format!(
        "engine fleet ({name}): first request on a cold tier → result in {:.1} s, of which engine spawn → healthy \
         {:.1} s; idle → 1 engine → 0 engines in {:.1} s",
        to_result.as_secs_f64(),
        cold_start_ms as f64 / 1000.0,
        started.elapsed().as_secs_f64()
    ));
}

/// Wake on arrival, the code path the router takes on AWS: with the scaler ticking every 10 minutes, a request
/// on an idle tier starts its engine at once, not at the next tick.
#[tokio::test]
async fn a_request_on_an_idle_tier_starts_its_engine_at_once_not_at_the_next_scaler_tick() {
    let data = tempfile::tempdir().unwrap();
    let engine = EngineKind::Simulator { latency_ms: LATENCY_MS };
    let dev = OnDemand::start(data.path(), engine, &["--scaler-interval", "600"]).await;
    // The scaler's first tick (at its start) has passed with nothing to do.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(dev.engines().is_empty(), "an engine runs with nothing to do: {}", dev.dev.log());
    let sent = Instant::now();
    let id = dev.send("The capital of France is", 16).await;
    dev.engines_become(1, Duration::from_secs(5)).await;
    assert_success(&dev.document(&id, Duration::from_secs(30)).await);
    let log = dev.dev.log();
    assert!(log.contains("wake on arrival: the tier had no task; asked for its first one"), "{log}");
    crate::support::report_figure(&format!(
        "engine fleet: scaler ticking every 600 s, a request on an idle tier → its result in {:.1} s (wake on arrival)",
        sent.elapsed().as_secs_f64()
    ));
}

#[tokio::test]
async fn an_idle_tier_runs_no_engine_until_a_request_starts_one_and_stops_it_after_the_idle_ttl() {
    idle_then_one_request_then_idle(EngineKind::Simulator { latency_ms: LATENCY_MS }, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn an_engine_slower_to_stop_than_its_wrapper_gets_its_grace_before_sigkill() {
    idle_then_one_request_then_idle(EngineKind::SlowToStop, Duration::from_secs(30)).await;
}

#[tokio::test]
#[ignore = "needs the local engine installed: scripts/test.sh"]
async fn a_real_llama_cpp_engine_is_started_for_a_request_and_stopped_after_the_idle_ttl() {
    idle_then_one_request_then_idle(EngineKind::LlamaCpp { slots: 2 }, Duration::from_secs(180)).await;
}

/// A burst of 16 requests scales the tier out to its maximum of two engines and back to none once drained, every
/// request answered.
async fn a_burst_scales_out_and_back_in(engine: EngineKind, max_tokens: u32, limit: Duration) {
    let data = tempfile::tempdir().unwrap();
    let dev = OnDemand::start(data.path(), engine, &["--max-engines", "small=2", "--concurrency", "2"]).await;
    let mut ids = Vec::new();
    for n in 0..16 {
        ids.push(dev.send(&format!("Count from {n} to 100:"), max_tokens).await);
    }
    let most = eventually(limit, "two engines during the burst", || {
        std::future::ready(Some(dev.engines().len()).filter(|&n| n == 2))
    })
    .await;
    let mut highest = most;
    for id in &ids {
        let document = dev.document(id, limit).await;
        assert_success(&document);
        highest = highest.max(dev.engines().len());
    }
    assert_eq!(highest, 2, "never more engines than --max-engines");
    let log = dev.dev.log();
    let saturation_read = log.lines().filter_map(|line| line.split_once(" summary=")).any(|(_, summary)| {
        let summary: Value = serde_json::from_str(summary.trim()).unwrap_or_default();
        summary["tier"] == "small" && summary["gpuUtilization"].as_f64().is_some_and(|percent| percent > 0.0)
    });
    assert!(saturation_read, "the engines' saturation (in flight ÷ limit) stands for GPU utilization: {log}");
    dev.engines_become(0, Duration::from_secs(IDLE_TTL_SECONDS + 30)).await;
    dev.assert_each_finished_once(&ids);
}

#[tokio::test]
async fn a_burst_scales_out_to_the_maximum_and_back_in_with_nothing_lost() {
    a_burst_scales_out_and_back_in(EngineKind::Simulator { latency_ms: 1000 }, 16, Duration::from_secs(60)).await;
}

#[tokio::test]
#[ignore = "needs the local engine installed: scripts/test.sh"]
async fn a_burst_scales_real_llama_cpp_engines_out_to_the_maximum_and_back_in_with_nothing_lost() {
    a_burst_scales_out_and_back_in(EngineKind::LlamaCpp { slots: 2 }, 32, Duration::from_secs(240)).await;
}

/// Four long requests on one engine; the engine is killed with SIGKILL while they run (no result stored yet):
/// a replacement starts, and each request ends exactly once, nothing left in the queue.
async fn an_engine_killed_mid_request_is_replaced(engine: EngineKind, max_tokens: u32, limit: Duration) {
    let data = tempfile::tempdir().unwrap();
    let dev = OnDemand::start(data.path(), engine, &[]).await;
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(dev.send(&format!("Count from {n} to 1000:"), max_tokens).await);
    }
    // Once its worker pool runs, let the requests reach the engine, then kill it mid-generation.
    dev.small_status_becomes("running=1 draining=0 queue_depth=4", limit).await;
    let pids = dev.engines_become(1, limit).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let unanswered = ids.iter().filter(|id| !data.path().join("results").join(format!("{id}.json")).exists()).count();
    assert!(unanswered > 0, "every request finished before the kill: the test proves nothing");
    let killed = std::process::Command::new("kill").args(["-KILL", &pids[0].to_string()]).status().unwrap();
    assert!(killed.success());
    let replacement = eventually(limit, "a replacement engine", || {
        std::future::ready(dev.engines().into_iter().find(|pid| *pid != pids[0]))
    })
    .await;
    assert_ne!(replacement, pids[0]);
    for id in &ids {
        let answered = tokio::time::timeout(limit, dev.document(id, limit + Duration::from_secs(1))).await;
        let document = answered.unwrap_or_else(|_| panic!("no document for {id}; dev's log:\n{}", dev.dev.log()));
        assert_success(&document);
    }
    let log = dev.dev.log();
    assert!(log.contains("replacing a lost engine"), "{log}");
    assert!(log.contains("engine process exited: its worker pool gives its messages back now"), "{log}");
    dev.assert_each_finished_once(&ids);
    let queues = gpuinfer::LocalBackends::open(data.path()).unwrap();
    let lanes = queues.lane_handles(gpuinfer::Tier::Small);
    let counts = lanes.high.counts().await.unwrap() + lanes.normal.counts().await.unwrap();
    assert_eq!(counts, QueueCounts::default(), "messages still queued after every request ended");
    crate::support::report_figure(&format!(
        "engine fleet ({}): engine SIGKILLed with {unanswered} of 4 requests unanswered → replaced, each ended once",
        dev.program
    ));
}

#[tokio::test]
async fn an_engine_killed_mid_request_is_replaced_and_every_request_ends_once() {
    an_engine_killed_mid_request_is_replaced(EngineKind::Simulator { latency_ms: 3000 }, 16, Duration::from_secs(60))
        .await;
}

#[tokio::test]
#[ignore = "needs the local engine installed: scripts/test.sh"]
async fn a_real_llama_cpp_engine_killed_mid_generation_is_replaced_and_every_request_ends_once() {
    an_engine_killed_mid_request_is_replaced(EngineKind::LlamaCpp { slots: 2 }, 400, Duration::from_secs(240)).await;
}

/// `gpuinfer dev` killed with SIGKILL while its engine runs requests: the engine dies with it; a new `gpuinfer dev`
/// on the same data directory starts an engine again and completes every request.
async fn an_engine_dies_with_a_killed_dev(engine: EngineKind, max_tokens: u32, limit: Duration) {
    let data = tempfile::tempdir().unwrap();
    let flags = ["--visibility-timeout", "5"];
    let mut dev = OnDemand::start(data.path(), engine, &flags).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(dev.send(&format!("Count from {n} to 1000:"), max_tokens).await);
    }
    dev.small_status_becomes("running=1 draining=0 queue_depth=3", limit).await;
    let pids = dev.engines_become(1, limit).await;
    dev.dev.kill(); // SIGKILL: no cleanup of any kind
    eventually(Duration::from_secs(10), "the engine to die with gpuinfer dev", || {
        std::future::ready(Some(()).filter(|()| !alive(pids[0]) && dev.engines().is_empty()))
    })
    .await;
    let restarted = OnDemand::start(data.path(), engine, &flags).await;
    for id in &ids {
        assert_success(&restarted.document(id, limit).await);
    }
    restarted.engines_become(0, Duration::from_secs(IDLE_TTL_SECONDS + 30)).await;
}

#[tokio::test]
async fn an_engine_does_not_outlive_a_killed_dev_and_a_restart_completes_its_requests() {
    an_engine_dies_with_a_killed_dev(EngineKind::Simulator { latency_ms: 5000 }, 16, Duration::from_secs(60)).await;
}

#[tokio::test]
#[ignore = "needs the local engine installed: scripts/test.sh"]
async fn a_real_llama_cpp_engine_does_not_outlive_a_killed_dev_and_a_restart_completes_its_requests() {
    an_engine_dies_with_a_killed_dev(EngineKind::LlamaCpp { slots: 2 }, 400, Duration::from_secs(240)).await;
}

/// A worker that starts in front of a backlog (every scale from zero) does not send it into an engine that keeps
/// what it queues (llama.cpp: nothing queued inside it can be taken back): `normals` requests sent before the tier's
/// engine of `slots` slots is up, a high-priority one half a second after its worker pool started on them. The
/// high-priority request ends after at most `slots + 1` of them: those running and one queued inside the engine.
async fn a_high_request_behind_a_cold_start_backlog(slots: u32, normals: usize) {
    let data = tempfile::tempdir().unwrap();
    let dev = OnDemand::start(data.path(), EngineKind::LlamaCpp { slots }, &[]).await;
    let mut normal = Vec::new();
    for i in 0..normals {
        normal.push(dev.send(&format!("Write a short story about the number {i}."), 48).await);
    }
    // Posted once the worker has started on the backlog, as a client's next request would be.
    let started = || std::future::ready(dev.dev.log().contains("its worker pool starts").then_some(()));
    eventually(Duration::from_secs(120), "the engine's worker pool to start", started).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let high = dev.send_on("Say hello.", 48, "high").await;
    let limit = Duration::from_secs(300);
    let high_ended = dev.document(&high, limit).await["timestamp"].as_str().unwrap().to_owned();
    let mut before = 0;
    for id in &normal {
        let ended = dev.document(id, limit).await["timestamp"].as_str().unwrap().to_owned();
        before += usize::from(ended < high_ended);
    }
    let most = slots as usize + 1;
    assert!(
        before <= most,
        "with {slots} slots the high request ended after {before} of the {normals} (at most {most}; log {})",
        dev.dev.log()
    );
}

/// At a first limit of 8 the high-priority request ended after 8 of the 12.
#[tokio::test]
#[ignore = "needs the local engine installed: scripts/test.sh"]
async fn a_high_priority_request_behind_a_cold_start_backlog_on_two_llama_cpp_slots_waits_for_at_most_three_of_it() {
    a_high_request_behind_a_cold_start_backlog(2, 12).await;
}

#[tokio::test]
#[ignore = "needs the local engine installed: scripts/test.sh"]
async fn a_high_priority_request_behind_a_cold_start_backlog_on_four_llama_cpp_slots_waits_for_at_most_five_of_it() {
    a_high_request_behind_a_cold_start_backlog(4, 20).await;
}

/// A Spot interruption drill (`POST /dev/drills/spot-interruption?tier=small`): refused while the tier has no engine;
/// then its engine gets the notice, its worker pool lets the request whose budget fits the drain finish and hands the
/// one that does not back at once, and the engine that replaces it ends that one: each request once, none lost.
#[tokio::test]
async fn a_spot_interruption_drill_gives_back_what_cannot_finish_and_a_new_engine_ends_it() {
    let limit = Duration::from_secs(60);
    let data = tempfile::tempdir().unwrap();
    let dev = OnDemand::start(data.path(), EngineKind::Paced { token_ms: 50 }, &["--drain-timeout-seconds", "3"]).await;
    let drill = || dev.http.post(format!("{}/dev/drills/spot-interruption?tier=small", dev.url)).send();
    let idle = drill().await.unwrap();
    assert_eq!(idle.status(), 409, "no engine yet");
    assert!(idle.text().await.unwrap().contains("has no engine running"));
    // One generation gives the worker the engine's pace (8 tokens, 0.4 s).
    let warm = dev.send("warm", 8).await;
    assert_success(&dev.document(&warm, limit).await);
    let fits = dev.send("fits the drain", 20).await; // 1 s
    let outlasts = dev.send("outlasts the drain", 400).await; // 20 s
    tokio::time::sleep(Duration::from_millis(500)).await;
    let noticed = drill().await.unwrap();
    assert_eq!(noticed.status(), 202, "{}", noticed.text().await.unwrap());
    let fits = dev.document(&fits, limit).await;
    assert_success(&fits);
    assert_eq!(fits["attempts"], 1, "{fits}");
    let outlasts_document = dev.document(&outlasts, limit).await;
    assert_success(&outlasts_document);
    assert_eq!(outlasts_document["attempts"], 2, "ended by the replacement engine: {outlasts_document}");
    let log = dev.dev.log();
    assert!(log.contains("Spot interruption drill: notice given"), "{log}");
    assert!(log.contains("its token budget outlasts the drain"), "{log}");
    dev.assert_each_finished_once(&[warm, outlasts]);
}
