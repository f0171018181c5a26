//! The worker's adaptive in-flight limit against the engine simulator's slots, read through the simulator's /metrics:
//! with default settings a backlog fills every slot and leaves next to nothing queued inside the engine, where a
//! fixed limit above the slots queues the rest there; the limit is reported as an EMF metric. On an engine that keeps
//! abandoned requests, one request waits inside it, and the slots it reports are filled at once.

use std::time::Duration;

use crate::support::request_body;
use crate::support::rig::{Rig, config};
use gpuinfer::{EngineLoad, Queue, Tier, WorkerConfig, parse_engine_load, simulator::Behavior};

const SLOTS: usize = 16;
const BACKLOG: usize = 200;

/// The engine's load every 20 ms while a worker drains a backlog of `BACKLOG` requests.
async fn loads_while_draining(config: WorkerConfig) -> (Rig, Vec<EngineLoad>) {
    let behavior = Behavior { slots: SLOTS, latency: Duration::from_millis(200), ..Behavior::default() };
    loads_on(behavior, config, BACKLOG).await
}

/// The same on an engine of `behavior`, with a backlog of `backlog` requests.
async fn loads_on(behavior: Behavior, config: WorkerConfig, backlog: usize) -> (Rig, Vec<EngineLoad>) {
    let rig = Rig::start(behavior, config, None, |lanes| async move {
        let bodies: Vec<String> = (0..backlog).map(|n| request_body(&format!("backlog {n}")).1).collect();
        for chunk in bodies.chunks(10) {
            assert!(lanes.normal.send_many(chunk).await.iter().all(Result::is_ok));
        }
    })
    .await;
    let http = reqwest::Client::new();
    let mut loads = Vec::new();
    while rig.engine.calls() < backlog as u64 {
        let text = http.get(format!("{}/metrics", rig.engine.url)).send().await.unwrap().text().await.unwrap();
        loads.push(parse_engine_load(&text).unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rig.drained().await;
    (rig, loads)
}

fn mean_waiting(loads: &[EngineLoad]) -> f64 {
    loads.iter().map(|load| load.waiting as f64).sum::<f64>() / loads.len() as f64
}

#[tokio::test]
async fn with_default_settings_a_backlog_fills_every_engine_slot_without_queueing_inside_the_engine() {
    let defaults = WorkerConfig::new(Tier::Small);
    let (rig, loads) = loads_while_draining(WorkerConfig { concurrency: defaults.concurrency, ..config() }).await;
    let most_running = loads.iter().map(|load| load.running).max().unwrap();
    assert_eq!(most_running, SLOTS as u64, "every slot used: {loads:?}");
    let full = loads.iter().filter(|load| load.running == SLOTS as u64).count();
    assert!(full * 2 >= loads.len(), "the engine full most of the time: {full} of {} readings", loads.len());
    let waiting = mean_waiting(&loads);
    assert!(waiting <= 2.0, "{waiting:.1} requests queued inside the engine on average: {loads:?}");
    let limits: Vec<f64> = rig
        .emf
        .json_lines()
        .iter()
        .filter_map(|line| line.get("InFlightLimit").and_then(serde_json::Value::as_f64))
        .collect();
    assert!(limits.iter().any(|&limit| limit >= SLOTS as f64), "InFlightLimit reported: {limits:?}");
    rig.stop().await;
}

#[tokio::test]
async fn a_fixed_limit_above_the_slots_queues_the_rest_inside_the_engine() {
    let fixed = WorkerConfig { concurrency: 4 * SLOTS, adaptive: false, ..config() };
    let (rig, loads) = loads_while_draining(fixed).await;
    let waiting = mean_waiting(&loads);
    assert!(waiting >= SLOTS as f64, "{waiting:.1} queued on average with a fixed limit of {}", 4 * SLOTS);
    rig.stop().await;
}

/// The same on an engine that keeps abandoned requests and reports its slots, as llama.cpp does, drained by a worker
/// of default concurrency.
async fn loads_on_llama_like(slots: usize, latency: Duration, backlog: usize) -> (Rig, Vec<EngineLoad>) {
    let behavior = Behavior { slots, latency, keeps_abandoned: true, ..Behavior::default() };
    let defaults = WorkerConfig::new(Tier::Small);
    loads_on(behavior, WorkerConfig { concurrency: defaults.concurrency, ..config() }, backlog).await
}

/// On an engine that keeps abandoned requests (llama.cpp) the limit keeps one request queued inside it, so a slot
/// that frees refills at the engine's next step (see `adaptive_limit`), and no more: none could be taken back for a
/// high-priority request.
#[tokio::test]
async fn on_an_engine_that_keeps_abandoned_requests_one_request_waits_inside_it() {
    let slots = 4;
    let (rig, loads) = loads_on_llama_like(slots, Duration::from_millis(200), BACKLOG).await;
    let settled = &loads[loads.len() / 3..loads.len() * 2 / 3];
    let with_one_waiting = settled.iter().filter(|load| load.waiting == 1).count();
    assert!(with_one_waiting * 2 >= settled.len(), "one request waiting most of the time: {settled:?}");
    assert!(settled.iter().all(|load| load.waiting <= 1 && load.running as usize <= slots), "{settled:?}");
    rig.stop().await;
}

/// On an engine that keeps abandoned requests and reports its slots (llama.cpp's /props), a backlog fills them at
/// once, as a client driving the engine directly would. Climbing from one instead (1, 2, 3, 5, a reading apart) cost
/// llama.cpp about a tenth of its throughput, where a fixed limit did not (BENCHMARKS.md, P1).
#[tokio::test]
async fn an_engine_that_reports_its_slots_gets_them_all_at_once() {
    let slots = 4;
    let (rig, loads) = loads_on_llama_like(slots, Duration::from_millis(300), 12).await;
    // Readings are 20 ms apart: the first three once the engine runs any span the limit loop's first reading.
    let first: Vec<&EngineLoad> = loads.iter().skip_while(|load| load.running == 0).take(3).collect();
    assert!(first.iter().any(|load| load.running == slots as u64), "every slot at once: {loads:?}");
    assert!(loads.iter().all(|load| load.waiting <= 1), "never more than one queued inside it: {loads:?}");
    rig.stop().await;
}
