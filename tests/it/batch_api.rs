//! The OpenAI Batch API, driven by the official `openai` Python client (tests/openai/batch_client.py, installed by
//! scripts/openai-client.sh): on `gpuinfer dev` with the real llama.cpp engine, with the engine simulator for cancel
//! and kill -9 mid-batch, and as router + worker on SQS + S3 (moto) with a worker killed mid-batch.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::dev::Dev;
use crate::support::engine_process::EngineProcess;
use crate::support::process::ChildProcess;
use crate::support::{eventually, free_port, moto};

const KEY: &str = "batch-test-key";
/// The project of `KEY` where a test names it (`--api-key PROJECT=KEY`): that of the batches it writes itself.
const PROJECT: &str = "batch-tests";

/// The venv python with the pinned openai client; a test that needs it fails (never skips) without it.
pub(crate) fn python() -> String {
    std::env::var("GPUINFER_TEST_OPENAI_PYTHON").unwrap_or_else(|_| {
        panic!(
            "this test needs the openai Python client: run scripts/test.sh, or set \
             GPUINFER_TEST_OPENAI_PYTHON=$(scripts/openai-client.sh install)"
        )
    })
}

/// Runs one command of the client against `base` and returns the JSON object it printed.
async fn client(base: &str, args: &[&str]) -> Value {
    let base_args = ["--base-url", base, "--api-key", KEY];
    crate::openai_events::openai_script("batch_client.py", &[&base_args[..], args].concat()).await
}

async fn submit(base: &str, args: &[&str]) -> String {
    let submitted = client(base, &[&["submit"], args].concat()).await;
    submitted["batch_id"].as_str().expect("a batch id").to_owned()
}

/// Waits until at least `lines` lines of the batch have completed.
async fn completed_at_least(base: &str, batch: &str, lines: u64) {
    eventually(Duration::from_secs(60), "lines of the batch to complete", || async move {
        let progress = client(base, &["progress", "--batch", batch]).await;
        (progress["counts"]["completed"].as_u64().unwrap_or(0) >= lines).then_some(())
    })
    .await;
}

fn ids(prefix: &str, count: usize) -> Vec<String> {
    let mut ids: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
    ids.sort();
    ids
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

/// `gpuinfer dev` with the tests' API key (of `PROJECT`) and `flags`, in front of the engine simulator started with
/// `engine_flags`.
struct DevOnSimulator {
    dev: Dev,
    engine: EngineProcess,
    data: tempfile::TempDir,
}

async fn dev_on_simulator(engine_flags: &[&str], flags: &[&str]) -> DevOnSimulator {
    let engine = EngineProcess::start(engine_flags);
    let data = tempfile::tempdir().unwrap();
    let key = format!("{PROJECT}={KEY}");
    let dev = Dev::start(data.path(), free_port(), &engine.url, &[&["--api-key", &key], flags].concat());
    dev.ready(&reqwest::Client::new()).await;
    DevOnSimulator { dev, engine, data }
}

pub(crate) fn engine_url() -> String {
    std::env::var("GPUINFER_TEST_ENGINE_URL").unwrap_or_else(|_| {
        panic!("this test needs the real local engine: run scripts/test.sh (GPUINFER_TEST_ENGINE_URL)")
    })
}

/// files.create → batches.create → retrieve until completed → files.content, on llama.cpp: every line once in
/// the output, a line the engine refuses (longer than its context) in the error file, the batch still completed;
/// and the refusals: a malformed file (OpenAI's error shape), a batch whose lines fail validation (failed, with
/// each line's error), an unknown batch (404), a wrong API key (401).
#[tokio::test]
#[ignore = "needs the local engine and the openai client: scripts/test.sh"]
async fn the_openai_client_runs_a_batch_on_gpuinfer_dev_with_llama_cpp() {
    let data = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let dev = Dev::start(data.path(), free_port(), &engine_url(), &["--api-key", KEY, "--classifier", "none"]);
    dev.ready(&http).await;
    let batch = submit(&dev.url, &["--lines", "6", "--failing-lines", "1"]).await;
    let done = client(&dev.url, &["wait", "--batch", &batch, "--timeout", "240"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["counts"], serde_json::json!({ "total": 7, "completed": 6, "failed": 1 }), "{done}");
    assert_eq!(strings(&done["output_ids"]), ids("req-", 6), "{done}");
    assert_eq!(strings(&done["error_ids"]), ["too-long-0"], "{done}");
    assert_eq!(strings(&done["error_codes"]), ["400"], "the engine's refusal, as an HTTP answer: {done}");
    assert_eq!(done["duplicates"], 0);

    let refused = client(&dev.url, &["refusals"]).await;
    assert!(refused["malformed_file"].as_str().unwrap().starts_with("file: line 2: not valid JSON"), "{refused}");
    assert_eq!(refused["invalid_lines_status"], "failed", "{refused}");
    assert_eq!(refused["invalid_lines_errors"], serde_json::json!([[2, "custom_id"], [3, "body.model"]]), "{refused}");
    assert!(refused["unknown_part"].as_str().unwrap().contains("was never added"), "{refused}");
    assert_eq!(refused["unknown_batch"], "404");
    assert_eq!(refused["wrong_key"], "401");

    // The API key guards the pipeline's own API as well; `gpuinfer submit` sends it from the same variable.
    let submit = |key: Option<&str>| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"));
        command.args(["submit", "--url", &dev.url, "--wait", "--timeout-seconds", "120", "Say hi."]);
        command.env_remove("GPUINFER_API_KEY").envs(key.map(|k| ("GPUINFER_API_KEY", k)));
        command.output()
    };
    let refused = submit(None).await.unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("401"), "{}", String::from_utf8_lossy(&refused.stderr));
    let answered = submit(Some(KEY)).await.unwrap();
    assert!(answered.status.success(), "{}", String::from_utf8_lossy(&answered.stderr));
}

/// Cancel mid-batch: the lines not yet run are dropped, what finished is in the output, and the engine is not
/// asked for the dropped lines.
#[tokio::test]
#[ignore = "needs the openai client: scripts/test.sh"]
async fn a_batch_canceled_midway_keeps_what_finished_and_runs_nothing_more() {
    let DevOnSimulator { dev, engine, data: _data } =
        dev_on_simulator(&["--latency-ms", "300", "--slots", "2"], &["--concurrency", "2", "--fixed-concurrency"])
            .await;
    let batch = submit(&dev.url, &["--lines", "40"]).await;
    completed_at_least(&dev.url, &batch, 2).await;
    let canceled = client(&dev.url, &["cancel", "--batch", &batch]).await;
    assert!(["cancelling", "cancelled"].contains(&canceled["status"].as_str().unwrap()), "{canceled}");
    let done = client(&dev.url, &["wait", "--batch", &batch, "--timeout", "30"]).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    let completed = done["counts"]["completed"].as_u64().unwrap();
    assert!((2..40).contains(&completed), "{done}");
    assert_eq!(strings(&done["output_ids"]).len() as u64, completed, "{done}");
    assert_eq!(strings(&done["error_ids"]), Vec::<String>::new(), "canceled lines are in neither file: {done}");
    let calls_then = engine.calls().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = engine.calls().await;
    assert_eq!(calls, calls_then, "the engine was asked for lines of a canceled batch");
    // Beyond the completed lines: the 2 in flight at the cancel, and at most 2 more a worker took while the cancel
    // was being written (both aborted once their cancel document appeared).
    assert!(calls <= completed + 4, "{calls} engine calls for {completed} completed lines");
}

/// kill -9 of `gpuinfer dev` mid-batch, then a new one on the same data: every line exactly once in the output.
#[tokio::test]
#[ignore = "needs the openai client: scripts/test.sh"]
async fn a_batch_survives_kill_9_of_gpuinfer_dev_with_every_line_once() {
    let engine = EngineProcess::start(&["--latency-ms", "300", "--slots", "4"]);
    let data = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let flags = ["--api-key", KEY, "--concurrency", "4", "--fixed-concurrency", "--visibility-timeout", "3"];
    let port = free_port();
    let mut dev = Dev::start(data.path(), port, &engine.url, &flags);
    dev.ready(&http).await;
    let batch = submit(&dev.url, &["--lines", "24"]).await;
    completed_at_least(&dev.url, &batch, 3).await;
    dev.child.kill().unwrap();
    dev.child.wait().unwrap();
    let dev = Dev::start(data.path(), port, &engine.url, &flags);
    dev.ready(&http).await;
    let done = client(&dev.url, &["wait", "--batch", &batch, "--timeout", "60"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["counts"], serde_json::json!({ "total": 24, "completed": 24, "failed": 0 }), "{done}");
    assert_eq!(strings(&done["output_ids"]), ids("req-", 24), "{done}");
    assert_eq!(done["duplicates"], 0, "{done}");
}

/// Router and worker as deployed (SQS + S3, on moto): the file goes up in parts through the Uploads API
/// (`uploads.upload_file_chunked`), the worker is killed with SIGKILL mid-batch and replaced, and every line is in
/// the output exactly once.
#[tokio::test]
#[ignore = "needs moto and the openai client: scripts/test.sh"]
async fn router_and_worker_on_sqs_and_s3_run_a_batch_through_a_worker_crash() {
    let engine = EngineProcess::start(&["--latency-ms", "300", "--slots", "4"]);
    let logs = tempfile::tempdir().unwrap();
    let name = moto::unique("batch-api");
    let (small, dlq) = moto::lanes_with_dlq(&format!("{name}-small"), 3, 5).await;
    let (large, _) = moto::lanes_with_dlq(&format!("{name}-large"), 3, 5).await;
    let bucket = moto::bucket(&name).await;
    let destination = format!("s3://{bucket}/results/");
    let mut env = moto::child_env();
    env.extend([("OUTPUT_DESTINATION", destination.clone()), ("GPUINFER_API_KEY", KEY.to_owned())]);
    let mut router_env = env.clone();
    router_env.extend([
        ("SMALL_QUEUE_URL", small.normal.clone()),
        ("SMALL_HIGH_QUEUE_URL", small.high.clone()),
        ("LARGE_QUEUE_URL", large.normal.clone()),
        ("LARGE_HIGH_QUEUE_URL", large.high.clone()),
        ("SMALL_BATCH_QUEUE_URL", small.batch.clone()),
        ("LARGE_BATCH_QUEUE_URL", large.batch.clone()),
        ("CLASSIFIER", "none".to_owned()),
    ]);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _router =
        ChildProcess::gpuinfer(&["router", "--listen", &listen], &router_env, &logs.path().join("router.log"));
    let mut worker_env = env.clone();
    worker_env.extend([
        ("REQUEST_QUEUE_URL", small.normal.clone()),
        ("HIGH_QUEUE_URL", small.high.clone()),
        ("BATCH_QUEUE_URL", small.batch.clone()),
        ("DLQ_URL", dlq.clone()),
        ("ENGINE_URL", engine.url.clone()),
    ]);
    let worker_args = [
        "worker",
        "--tier",
        "small",
        "--concurrency",
        "4",
        "--fixed-concurrency",
        "--visibility-timeout",
        "3",
        "--wait-time-seconds",
        "1",
    ];
    let worker_log = logs.path().join("worker.log");
    let mut worker = ChildProcess::gpuinfer(&worker_args, &worker_env, &worker_log);
    let base = format!("http://{listen}");
    crate::support::router_listening(&reqwest::Client::new(), &base).await;

    let batch = submit(&base, &["--lines", "24", "--endpoint", "chat", "--chunked-part-bytes", "1000"]).await;
    completed_at_least(&base, &batch, 3).await;
    worker.kill();
    let _worker = ChildProcess::gpuinfer(&worker_args, &worker_env, &worker_log);
    let done = client(&base, &["wait", "--batch", &batch, "--timeout", "90"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["counts"], serde_json::json!({ "total": 24, "completed": 24, "failed": 0 }), "{done}");
    assert_eq!(strings(&done["output_ids"]), ids("req-", 24), "{done}");
    assert_eq!(done["duplicates"], 0, "{done}");
    let output = done["output_file_id"].as_str().unwrap();
    let keys = moto::keys(&moto::s3().await, &bucket, &format!("results/files/{output}")).await;
    assert_eq!(keys.len(), 2, "the output file and its record are in the results bucket: {keys:?}");
}

/// A router that stops midway through a batch's admission (here after enqueueing 2 of its 5 lines, whose results
/// are in) leaves a batch no worker would finish: once the stopped step's claim is old, the upkeep goes on from where
/// it stopped, within a minute, and only the 3 lines not enqueued run.
#[tokio::test]
#[ignore = "needs the openai client: scripts/test.sh"]
async fn a_batch_whose_router_stopped_midway_through_its_enqueue_is_taken_up_where_it_stopped_within_a_minute() {
    let DevOnSimulator { dev, engine, data } = dev_on_simulator(&["--latency-ms", "20"], &[]).await;
    let results = data.path().join("results");
    // What the stopped router left: the batch in progress, its step's claim made just now, 2 lines run.
    let id = stored_batch(&results, 5, chrono::Utc::now().timestamp(), 86_400, Some(2));
    for line in 0..2 {
        store_success(&results, &id, line);
    }
    let started = Instant::now();
    let done = client(&dev.url, &["wait", "--batch", &id, "--timeout", "60"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(strings(&done["output_ids"]), ids("req-", 5), "{done}");
    assert_eq!(done["duplicates"], 0, "{done}");
    assert_eq!(engine.calls().await, 3, "only the lines not enqueued before the stop run");
    assert!(started.elapsed() < Duration::from_secs(60), "taken up after {:?}", started.elapsed());
}

/// Line `line` of batch `batch` ended as a worker ends it: its success document, then its mark. The batch has no
/// line key (as one created before its lines had one): the request id is from batch and line alone.
fn store_success(results: &std::path::Path, batch: &str, line: u32) {
    let id = gpuinfer::BatchLine { id: batch.to_owned(), line }.request_id(None);
    let usage = serde_json::json!({"promptTokens": 1, "completionTokens": 1, "totalTokens": 2});
    let result = serde_json::json!({"text": "ok", "usage": usage, "finishReason": "stop"});
    let document = serde_json::json!({"requestId": id, "status": "success", "result": result});
    std::fs::write(results.join(format!("{id}.json")), document.to_string()).unwrap();
    std::fs::create_dir_all(results.join(format!("batch-lines/{batch}"))).unwrap();
    std::fs::write(results.join(format!("batch-lines/{batch}/{line:08}.succeeded")), "").unwrap();
}

/// Interactive requests overtake a batch: a normal request sent while a batch's lines fill every slot of the engine
/// starts at the next free slot, not after the batch's remaining lines (which share no queue with it).
#[tokio::test]
#[ignore = "needs the openai client: scripts/test.sh"]
async fn an_interactive_request_overtakes_the_lines_of_a_running_batch() {
    let DevOnSimulator { dev, engine: _engine, data: _data } =
        dev_on_simulator(&["--latency-ms", "300", "--slots", "2"], &["--concurrency", "2", "--fixed-concurrency"])
            .await;
    const LINES: u32 = 60;
    let batch = submit(&dev.url, &["--lines", &LINES.to_string()]).await;
    completed_at_least(&dev.url, &batch, 2).await;
    let sent = Instant::now();
    let body = serde_json::json!({ "prompt": "An interactive question.", "maxTokens": 4 });
    let http = reqwest::Client::new();
    let accepted: Value = http
        .post(format!("{}/infer", dev.url))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = accepted["requestId"].as_str().expect("accepted").to_owned();
    let url = format!("{}/results/{id}", dev.url);
    eventually(Duration::from_secs(30), "the interactive request's result", || {
        let request = http.get(&url).bearer_auth(KEY).send();
        async move { request.await.ok().filter(|r| r.status() == 200).map(|_| ()) }
    })
    .await;
    let waited = sent.elapsed();
    // Read at once, over HTTP: while the Python client starts (a second or two on a loaded machine), the batch runs on.
    let batch_url = format!("{}/v1/batches/{batch}", dev.url);
    let progress: Value = http.get(batch_url).bearer_auth(KEY).send().await.unwrap().json().await.unwrap();
    let completed = progress["request_counts"]["completed"].as_u64().unwrap();
    // At least 15 lines still queued: behind them it would have waited 2.25 s or more.
    assert!(completed <= 45, "the batch was nearly done when the request ended, which proves nothing: {progress}");
    // Behind the batch it would have waited for the lines still queued, at 2 slots and 300 ms each.
    let behind_the_batch = Duration::from_millis(300) * (LINES - completed as u32) / 2;
    assert!(
        waited < Duration::from_secs(2) && waited < behind_the_batch,
        "{waited:?}, with {completed} of {LINES} lines done"
    );
}

/// A batch as a router saves it in progress, written straight into `results` (a data directory's results folder):
/// `lines` completion lines, started at `started` (Unix seconds), expiring `window` seconds later, admitted whole, or
/// with its enqueue stopped before line `stopped_at` by a step that claimed it at `started`; `PROJECT`'s. Its id.
fn stored_batch(
    results: &std::path::Path,
    lines: usize,
    started: i64,
    window: i64,
    stopped_at: Option<usize>,
) -> String {
    use gpuinfer::{FileObject, content_key, record_key};
    let text: String = (0..lines)
        .map(|i| {
            let body = serde_json::json!({"model": "small", "prompt": format!("line {i}"), "max_tokens": 4});
            serde_json::json!({"custom_id": format!("req-{i}"), "method": "POST", "url": "/v1/completions", "body": body})
                .to_string()
                + "\n"
        })
        .collect();
    let file = FileObject::new(gpuinfer::new_object_id("file-"), text.len() as u64, "in.jsonl".into(), "batch");
    std::fs::create_dir_all(results.join("files")).unwrap();
    std::fs::create_dir_all(results.join("batches/running")).unwrap();
    std::fs::write(results.join(content_key(&file.id)), &text).unwrap();
    std::fs::write(results.join(record_key(&file.id)), serde_json::to_vec(&file).unwrap()).unwrap();
    let id = gpuinfer::new_object_id("batch_");
    let batch = serde_json::json!({
        "id": id, "object": "batch", "endpoint": "/v1/completions", "errors": null, "input_file_id": file.id,
        "completion_window": "24h", "status": "in_progress", "output_file_id": null, "error_file_id": null,
        "created_at": started, "in_progress_at": started, "expires_at": started + window, "finalizing_at": null,
        "completed_at": null, "failed_at": null, "expired_at": null, "cancelling_at": null, "cancelled_at": null,
        "request_counts": {"total": lines, "completed": 0, "failed": 0}, "metadata": null, "owner": PROJECT,
    });
    std::fs::write(results.join(format!("batches/{id}.json")), batch.to_string()).unwrap();
    std::fs::write(results.join(format!("batches/running/{id}")), "").unwrap();
    if let Some(line) = stopped_at {
        let offset: usize = text.split_inclusive('\n').take(line).map(str::len).sum();
        let at = serde_json::json!({"offset": offset, "number": line, "index": line});
        let progress = serde_json::json!({"enqueueing": true, "at": at, "errors": [], "claimed_at": started});
        std::fs::write(results.join(format!("batches/{id}.admission")), progress.to_string()).unwrap();
    }
    id
}

/// A batch whose completion window ends with lines not run: the poll after the end expires it; each line not run
/// is in the error file as `batch_expired`, and none of them is run afterwards.
#[tokio::test]
#[ignore = "needs the openai client: scripts/test.sh"]
async fn a_batch_past_its_completion_window_expires_with_each_line_not_run_in_the_error_file() {
    let DevOnSimulator { dev, engine, data } = dev_on_simulator(&["--latency-ms", "20"], &[]).await;
    // Saved and marked enqueued 25 hours ago, with none of its lines queued: they can no longer run.
    let id = stored_batch(&data.path().join("results"), 4, chrono::Utc::now().timestamp() - 25 * 3600, 86_400, None);
    let done = client(&dev.url, &["wait", "--batch", &id, "--timeout", "30"]).await;
    assert_eq!(done["status"], "expired", "{done}");
    assert_eq!(strings(&done["error_ids"]), ids("req-", 4), "{done}");
    assert_eq!(strings(&done["error_codes"]), ["batch_expired"], "{done}");
    assert_eq!(done["counts"], serde_json::json!({ "total": 4, "completed": 0, "failed": 4 }), "{done}");
    assert_eq!(engine.calls().await, 0);

    // One whose lines all ended within the window, polled only after it: completed, not expired.
    let results = data.path().join("results");
    let finished = stored_batch(&results, 2, chrono::Utc::now().timestamp() - 25 * 3600, 86_400, None);
    for line in 0..2 {
        // Saved as a batch created before its lines had a secret key: ids from batch and line alone.
        store_success(&results, &finished, line);
    }
    let done = client(&dev.url, &["wait", "--batch", &finished, "--timeout", "30"]).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(strings(&done["output_ids"]), ids("req-", 2), "{done}");
}
