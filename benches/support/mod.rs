//! What the benchmarks share: child processes killed when dropped, free ports, the engine's load read during a run,
//! and the table of rows.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpuinfer::contract::engine_load::EngineLoad;
use gpuinfer::engine::load;

use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// Completion tokens each benchmark request asks for.
pub const TOKENS: u32 = 48;

/// One row of the table: ours against its reference, measured in the same run.
pub struct Row {
    pub id: &'static str,
    pub what: String,
    pub ours: String,
    pub reference: String,
    pub ratio: f64,
    pub target: &'static str,
    /// None where the issue sets no target and the row is there to be read.
    pub met: Option<bool>,
}

/// A child process killed when dropped.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Process {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Adds a row and shows it at once, so a long run reports as it goes.
pub fn report(rows: &mut Vec<Row>, row: Row) {
    eprintln!(
        "  {} {}: {} vs {} → {:.2} (target {})",
        row.id, row.what, row.ours, row.reference, row.ratio, row.target
    );
    rows.push(row);
}

pub fn table(rows: &[Row]) -> String {
    let mut out =
        String::from("| | what | ours | reference | ratio | target | met |\n|---|---|---|---|---:|---|---|\n");
    for r in rows {
        out += &line(r);
    }
    out
}

/// A row's line of the table, its line break included.
fn line(r: &Row) -> String {
    let met = match r.met {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "—",
    };
    format!("| {} | {} | {} | {} | {:.2} | {} | {met} |\n", r.id, r.what, r.ours, r.reference, r.ratio, r.target)
}

/// The start of a row's line that names it: its id and what it measures.
fn named(id: &str, what: &str) -> String {
    format!("| {id} | {what} |")
}

/// The part of what a row measures that rows of one kind share: its text up to the first comma
/// ("worker on SQS + S3 (moto on idle CPU only) vs direct").
fn kind_of(what: &str) -> &str {
    what.split_once(',').map_or(what, |(kind, _)| kind)
}

/// `document` with `rows` written into its first table, every other line kept: a row whose id and what are in the
/// table replaces that line; a new one goes before the first row of its kind (same id, same text up to the first
/// comma of what it measures), after the new rows of that kind written before it, or at the table's end.
pub fn with_rows(document: &str, rows: &[Row]) -> String {
    let start = document.find("\n|").map_or(document.len(), |at| at + 1);
    let end = after_first_table(document, start);
    let mut lines: Vec<String> = document[start..end].split_inclusive('\n').map(str::to_owned).collect();
    let mut last_new: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for row in rows {
        let (name, kind) = (named(row.id, &row.what), named(row.id, kind_of(&row.what)));
        let position = |prefix: &str| lines.iter().position(|l| l.starts_with(prefix));
        let at = if let Some(at) = position(&name) {
            lines[at] = line(row);
            continue;
        } else if let Some(at) = last_new.get(&kind).and_then(|last| position(last)) {
            at + 1
        } else {
            let same_kind = lines.iter().position(|l| {
                l.strip_prefix(&format!("| {} | ", row.id)).is_some_and(|what| kind_of(what) == kind_of(&row.what))
            });
            same_kind.unwrap_or(lines.len())
        };
        lines.insert(at, line(row));
        last_new.insert(kind, name);
    }
    format!("{}{}{}", &document[..start], lines.concat(), &document[end..])
}

pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|kb| kb.parse::<f64>().ok()))
        .map_or(0.0, |kb| kb / 1_048_576.0);
    format!("{cores} cores ({cpu}), {memory:.0} GiB memory")
}

/// A markdown document with the generated part of the section under `heading` (from the heading to the end of its
/// first table) replaced by `section`, the paragraphs written by hand after that table kept; or `section` added at
/// the end.
fn with_section(document: &str, heading: &str, section: &str) -> String {
    let Some(start) = document.find(heading) else { return format!("{}\n\n{section}", document.trim_end()) };
    format!("{}{}\n{}", &document[..start], section.trim_end(), &document[after_first_table(document, start)..])
}

/// Where the first markdown table at or after `from` ends (after its last row's line break); the document's end
/// when there is none.
pub fn after_first_table(document: &str, from: usize) -> usize {
    let mut offset = from;
    let mut in_table = false;
    for line in document[from..].split_inclusive('\n') {
        let row = line.starts_with('|');
        if in_table && !row {
            return offset;
        }
        in_table |= row;
        offset += line.len();
    }
    document.len()
}

/// The engine simulator's settings that make it behave as a GPU engine: 10 ms per token at batch 1, 30 % slower
/// at a full batch, completions as long as asked for.
pub const GPU_LIKE: &[&str] = &["--completion-tokens", "100000", "--token-ms", "10", "--batch-slowdown", "0.3"];

/// The engine simulator: `slots` parallel slots.
pub fn simulator(slots: usize, extra: &[&str]) -> (Process, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_engine-simulator"))
        .args(["--listen", "127.0.0.1:0", "--slots", &slots.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the engine simulator");
    let mut url = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut url).unwrap();
    assert!(url.starts_with("http://"), "the engine simulator did not start with {extra:?}");
    (Process(child), url.trim().to_owned())
}

/// The engine's load, from its /metrics.
pub async fn engine_load(http: &reqwest::Client, engine: &str) -> EngineLoad {
    let text = http.get(format!("{engine}/metrics")).send().await.unwrap().text().await.unwrap();
    load::parse(&text).expect("the engine's /metrics names its running and waiting")
}

/// How often `loads_during` reads the engine's load.
const LOAD_READING: std::time::Duration = std::time::Duration::from_millis(50);

/// Runs `work` while another task reads the engine's load from its /metrics every 50 ms (llama.cpp answers between
/// two decode steps, so there once a step at most); what `work` returned, and the readings.
pub async fn loads_during<T>(engine: &str, work: impl Future<Output = T>) -> (T, Vec<EngineLoad>) {
    let done = Arc::new(AtomicBool::new(false));
    let (http, engine, stop) = (reqwest::Client::new(), engine.to_owned(), Arc::clone(&done));
    let reader = tokio::spawn(async move {
        let mut readings = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            readings.push(engine_load(&http, &engine).await);
            tokio::time::sleep(LOAD_READING).await;
        }
        readings
    });
    let output = work.await;
    done.store(true, Ordering::Relaxed);
    (output, reader.await.unwrap())
}

/// The mean of `of` over the readings (0 with none).
pub fn mean_of(readings: &[EngineLoad], of: impl Fn(&EngineLoad) -> u64) -> f64 {
    readings.iter().map(of).sum::<u64>() as f64 / readings.len().max(1) as f64
}

/// Writes `section` (a markdown section under `heading`) into the document at `path`, replacing its earlier version.
pub fn write_section(path: &Path, heading: &str, section: &str) {
    let document = std::fs::read_to_string(path).unwrap_or_default();
    std::fs::write(path, with_section(&document, heading, section)).unwrap();
    eprintln!("wrote the section \"{heading}\" of {}", path.display());
}

/// `gpuinfer <args>` with its output discarded (warnings only).
pub fn gpuinfer(args: &[&str], env: &[(&str, String)]) -> Process {
    gpuinfer_build(env!("CARGO_BIN_EXE_gpuinfer"), args, env, None)
}

/// The inference container's build of gpuinfer (`--profile container --no-default-features`, as the Dockerfile
/// builds it), which scripts/bench.sh builds and names in BENCH_CONTAINER_GPUINFER.
pub fn container_build() -> String {
    std::env::var("BENCH_CONTAINER_GPUINFER")
        .expect("BENCH_CONTAINER_GPUINFER: the container build of gpuinfer (scripts/bench.sh builds it)")
}

/// `binary <args>`, a build of gpuinfer, with its logs discarded (warnings only), and its EMF metric lines (its
/// standard output) written to `metrics` if given, else discarded.
pub fn gpuinfer_build(binary: &str, args: &[&str], env: &[(&str, String)], metrics: Option<&Path>) -> Process {
    gpuinfer_logged(binary, args, env, metrics, None)
}

/// `gpuinfer_build`, its warnings (its logs at level warn, its standard error) written to `warnings` if given.
pub fn gpuinfer_logged(
    binary: &str,
    args: &[&str],
    env: &[(&str, String)],
    metrics: Option<&Path>,
    warnings: Option<&Path>,
) -> Process {
    let file = |path: Option<&Path>| path.map_or_else(Stdio::null, |path| std::fs::File::create(path).unwrap().into());
    let mut command = Command::new(binary);
    command.args(args).envs(env.iter().cloned()).env("RUST_LOG", "warn").stdout(file(metrics)).stderr(file(warnings));
    Process(command.spawn().expect("start gpuinfer"))
}

/// Total completion tokens per second when `concurrency` clients drive the engine directly.
pub async fn drive_engine(url: &str, concurrency: usize, requests: usize) -> f64 {
    let requests = requests.min(concurrency * 20);
    let http = reqwest::Client::new();
    let slots = Arc::new(Semaphore::new(concurrency));
    let started = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..requests {
        let (http, slots, url) = (http.clone(), Arc::clone(&slots), url.to_owned());
        calls.spawn(async move {
            let _slot = slots.acquire_owned().await.unwrap();
            let body = json!({"model": "m", "prompt": format!("Benchmark request {i}: tell a story."), "max_tokens": TOKENS, "temperature": 0.7});
            let answer: Value = http.post(format!("{url}/v1/completions")).json(&body).send().await.unwrap().json().await.unwrap();
            answer["usage"]["completion_tokens"].as_u64().unwrap()
        });
    }
    let mut tokens = 0;
    while let Some(done) = calls.join_next().await {
        tokens += done.unwrap();
    }
    tokens as f64 / started.elapsed().as_secs_f64()
}

/// The best direct throughput over a few concurrencies, and the concurrency that gave it.
pub async fn best_direct(url: &str, concurrencies: &[usize], requests: usize) -> (f64, usize) {
    let mut best = (0.0, 0);
    for &c in concurrencies {
        let rate = drive_engine(url, c, requests).await;
        eprintln!("  direct at concurrency {c}: {rate:.1} tok/s");
        if rate > best.0 {
            best = (rate, c);
        }
    }
    best
}

/// A process's memory from /proc, in MiB: resident (and its peak), and what the resident part is made of.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub rss: f64,
    pub peak: f64,
    /// Private memory: heap, stacks, the queue's page cache.
    pub anon: f64,
    /// Pages of the binary and shared libraries mapped in: shared and clean, dropped first under pressure.
    pub file: f64,
}

pub fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap()
            .parse::<f64>()
            .unwrap()
            / 1024.0
    };
    Memory { rss: field("VmRSS:"), peak: field("VmHWM:"), anon: field("RssAnon:"), file: field("RssFile:") }
}
