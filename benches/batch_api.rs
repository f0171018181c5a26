//! The Batch API on one machine, side by side in one run: a 10,000-line batch through `gpuinfer dev` on the engine
//! simulator (64 slots, GPU-like) against the engine driven directly at its best concurrency; the time from the
//! batch's last line ending to the poll that sees it `completed`; and the router's memory while a 200 MB batch file
//! goes up and comes back down, against its memory idle. Writes its rows (B1–B3) into BENCHMARKS.md's table and
//! details in place, and the first paragraph of its "Batch API" section.
//!
//! Run through scripts/bench.sh (release build).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

mod support;
use support::{
    GPU_LIKE, Row, TOKENS, best_direct, details, drive_engine, free_port, gpuinfer, memory, report, run_label,
    simulator, table, write_intro, write_rows,
};

const SLOTS: usize = 64;
const LINES: usize = 10_000;
/// How often the benchmark polls the batch, as a client would.
const POLL: Duration = Duration::from_millis(100);
/// The size of the file whose upload and download are watched: just under OpenAI's 200 MB limit.
const LARGE_FILE_BYTES: usize = 199 * 1024 * 1024;
const SECTION: &str = "## Batch API";
/// The ids of this benchmark's rows: a row of these ids that a run did not write is dropped.
const OWNED: &[&str] = &["B1", "B2", "B3"];

fn line(i: usize, prompt: &str) -> String {
    let body = json!({"model": "small", "prompt": prompt, "max_tokens": TOKENS, "temperature": 0.7});
    json!({"custom_id": format!("line-{i}"), "method": "POST", "url": "/v1/completions", "body": body}).to_string()
}

/// A multipart/form-data body uploading `bytes` as a batch file; its content type and bytes.
fn multipart(bytes: &[u8]) -> (String, Vec<u8>) {
    let mut body = b"--BENCH\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--BENCH\r\n".to_vec();
    body.extend_from_slice(b"Content-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n");
    body.extend_from_slice(b"Content-Type: application/octet-stream\r\n\r\n");
    body.extend_from_slice(bytes);
    body.extend_from_slice(b"\r\n--BENCH--\r\n");
    ("multipart/form-data; boundary=BENCH".into(), body)
}

async fn upload(http: &reqwest::Client, base: &str, bytes: &[u8]) -> String {
    let (content_type, body) = multipart(bytes);
    let answer =
        http.post(format!("{base}/v1/files")).header("content-type", content_type).body(body).send().await.unwrap();
    assert_eq!(answer.status(), 200, "upload refused: {}", answer.text().await.unwrap());
    answer.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

async fn start_dev(engine: &str, data: &Path) -> (support::Process, String) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let dev = gpuinfer(
        &["dev", "--listen", &listen, "--small-engine-url", engine, "--classifier", "none"],
        &[("GPUINFER_DATA_DIR", data.display().to_string())],
    );
    let base = format!("http://{listen}");
    while reqwest::get(format!("{base}/healthz")).await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (dev, base)
}

/// The batch's throughput and how long after its last line ended a poll saw it completed.
struct BatchRun {
    tokens_per_s: f64,
    seconds: f64,
    last_line_to_completed_ms: f64,
    finishing_call_ms: f64,
}

/// Uploads a `LINES`-line file, creates a batch and polls it every `POLL` until completed.
async fn run_batch(engine: &str) -> BatchRun {
    let data = tempfile::tempdir().unwrap();
    let (_dev, base) = start_dev(engine, data.path()).await;
    let http = reqwest::Client::new();
    let file: String = (0..LINES).map(|i| line(i, &format!("Benchmark request {i}: tell a story.")) + "\n").collect();
    let started = Instant::now();
    let file_id = upload(&http, &base, file.as_bytes()).await;
    let ask = json!({"input_file_id": file_id, "endpoint": "/v1/completions", "completion_window": "24h"});
    let batch: Value = http.post(format!("{base}/v1/batches")).json(&ask).send().await.unwrap().json().await.unwrap();
    let id = batch["id"].as_str().unwrap().to_owned();
    let (batch, finishing_call) = loop {
        tokio::time::sleep(POLL).await;
        let call = Instant::now();
        let batch: Value = http.get(format!("{base}/v1/batches/{id}")).send().await.unwrap().json().await.unwrap();
        if batch["status"] == "completed" {
            break (batch, call.elapsed());
        }
        // Answered at once `validating`, then admitted; `finalizing` while its files are built.
        assert!(
            ["validating", "in_progress", "finalizing"].contains(&batch["status"].as_str().unwrap_or_default()),
            "{batch}"
        );
    };
    let seen = SystemTime::now();
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(batch["request_counts"]["completed"], LINES, "{batch}");
    let last_line = last_mark(&data.path().join("results/batch-lines").join(&id));
    let output = batch["output_file_id"].as_str().unwrap();
    let content = http.get(format!("{base}/v1/files/{output}/content")).send().await.unwrap().text().await.unwrap();
    let tokens: u64 = content
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["response"]["body"]["usage"]["completion_tokens"]
                .as_u64()
                .unwrap()
        })
        .sum();
    BatchRun {
        tokens_per_s: tokens as f64 / seconds,
        seconds,
        last_line_to_completed_ms: seen.duration_since(last_line).unwrap_or_default().as_secs_f64() * 1000.0,
        finishing_call_ms: finishing_call.as_secs_f64() * 1000.0,
    }
}

/// When the last line's mark was written.
fn last_mark(marks: &PathBuf) -> SystemTime {
    std::fs::read_dir(marks).unwrap().map(|e| e.unwrap().metadata().unwrap().modified().unwrap()).max().unwrap()
}

/// The highest resident memory of `pid`, sampled every 10 ms while `work` runs.
async fn peak_rss_during<T>(pid: u32, work: impl std::future::Future<Output = T>) -> (T, f64) {
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut peak: f64 = 0.0;
            while !done.load(Ordering::SeqCst) {
                peak = peak.max(memory(pid).rss);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak.max(memory(pid).rss)
        })
    };
    let value = work.await;
    done.store(true, Ordering::SeqCst);
    (value, sampler.await.unwrap())
}

/// The router's resident memory idle, and its peak while a file of `LARGE_FILE_BYTES` goes up and comes down.
async fn large_file_memory(engine: &str) -> (f64, f64, f64) {
    let data = tempfile::tempdir().unwrap();
    let (dev, base) = start_dev(engine, data.path()).await;
    let http = reqwest::Client::new();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = memory(dev.pid()).rss;
    let one = line(0, &"word ".repeat(860));
    let lines = LARGE_FILE_BYTES / (one.len() + 1);
    let file: String = (0..lines).map(|i| line(i, &"word ".repeat(860)) + "\n").collect();
    let (file_id, up) = peak_rss_during(dev.pid(), upload(&http, &base, file.as_bytes())).await;
    drop(file);
    let download = async {
        let mut response = http.get(format!("{base}/v1/files/{file_id}/content")).send().await.unwrap();
        let mut bytes = 0;
        while let Some(chunk) = response.chunk().await.unwrap() {
            bytes += chunk.len();
        }
        bytes
    };
    let (bytes, down) = peak_rss_during(dev.pid(), download).await;
    assert!(bytes >= LARGE_FILE_BYTES - 8192, "downloaded {bytes} bytes");
    (idle, up, down)
}

#[tokio::main]
async fn main() {
    let write = std::env::args().skip_while(|a| a != "--write").nth(1).map(PathBuf::from);
    let (_simulator, engine) = simulator(SLOTS, GPU_LIKE);
    drive_engine(&engine, SLOTS, SLOTS).await;
    eprintln!("B1: the engine driven directly, best concurrency");
    let (direct_before, best) = best_direct(&engine, &[32, 64, 128], 20 * SLOTS).await;
    eprintln!("B1: a {LINES}-line batch through gpuinfer dev");
    let run = run_batch(&engine).await;
    let direct_after = drive_engine(&engine, best, 20 * SLOTS).await;
    let direct = (direct_before + direct_after) / 2.0;
    let mut rows = Vec::new();
    let ratio = run.tokens_per_s / direct;
    report(
        &mut rows,
        Row {
            id: "B1",
            what: format!("{LINES}-line batch, simulator, {SLOTS} slots"),
            ours: format!("{:.0} tok/s", run.tokens_per_s),
            reference: format!("{direct:.0} tok/s"),
            ratio,
            target: "≥ 0.95",
            met: Some(ratio >= 0.95),
            capped_by: None,
            details: format!(
                "{TOKENS} tokens; upload → completed {:.1} s. Direct, concurrency {best}, before / after: \
                 {direct_before:.0} / {direct_after:.0}.",
                run.seconds
            ),
        },
    );
    report(
        &mut rows,
        Row {
            id: "B2",
            what: "batch's last line → `completed` seen".into(),
            ours: format!("{:.0} ms", run.last_line_to_completed_ms),
            reference: format!("{:.0} ms", run.finishing_call_ms),
            ratio: run.last_line_to_completed_ms / run.finishing_call_ms.max(1.0),
            target: "none",
            met: None,
            capped_by: None,
            // The method (the poll's interval, the reference) is the section's.
            details: String::new(),
        },
    );
    eprintln!("B3: a {} MiB file up and down", LARGE_FILE_BYTES / (1024 * 1024));
    let (idle, up, down) = large_file_memory(&engine).await;
    let peak = up.max(down);
    report(
        &mut rows,
        Row {
            id: "B3",
            what: format!("router memory, {} MiB batch file", LARGE_FILE_BYTES / (1024 * 1024)),
            ours: format!("{peak:.1} MiB"),
            reference: format!("{idle:.1} MiB idle"),
            ratio: peak / idle,
            target: "≤ 2×",
            met: Some(peak <= 2.0 * idle),
            capped_by: None,
            details: format!("Up {up:.1} MiB, down {down:.1} MiB."),
        },
    );
    let run = run_label();
    println!("{}\n{}", table(&rows), details(&rows, &run));
    let intro = format!(
        "B1–B3: one run of [`benches/batch_api.rs`](benches/batch_api.rs), release build. The batch of \
         `/v1/completions` lines is uploaded, created and polled (every {} ms) over HTTP as OpenAI's client does. B2: the last line's end → the poll that \
         sees `completed`, against that finishing call, which builds the files; B3: `gpuinfer dev`'s resident \
         memory, peak ÷ idle.",
        POLL.as_millis()
    );
    if let Some(path) = write {
        write_rows(&path, &rows, OWNED, &run);
        write_intro(&path, SECTION, &intro);
    }
}
