//! entrypoint.sh for real: engine (the engine double via ENGINE_CMD) + `gpuinfer worker`, supervised together.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::support::{eventually, free_port, request_body};
use gpuinfer::local::LocalBackends;
use gpuinfer::ports::{Queue, ResultStore};
use gpuinfer::vocabulary::{Priority, Tier};

fn start(data_dir: &std::path::Path, port: u16) -> Child {
    Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/entrypoint.sh"))
        .env("GPUINFER", env!("CARGO_BIN_EXE_gpuinfer"))
        .env(
            "ENGINE_CMD",
            format!("{} --listen 127.0.0.1:{port} --latency-ms 300", env!("CARGO_BIN_EXE_engine-double")),
        )
        .env("ENGINE_PORT", port.to_string())
        .env("MODEL_NAME", "double-model")
        .env("MODEL_S3_PATH", "s3://none/none/")
        .env("GPUINFER_DATA_DIR", data_dir)
        .env("WAIT_TIME_SECONDS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run entrypoint.sh")
}

async fn exit_within(child: &mut Child, limit: Duration) -> ExitStatus {
    eventually(limit, "entrypoint.sh to exit", || std::future::ready(child.try_wait().unwrap())).await
}

fn signal(signal: &str, target: &str) {
    let status = Command::new("pkill").args([signal, "-f", target]).status().unwrap();
    assert!(status.success(), "pkill {signal} -f {target}");
}

#[tokio::test]
async fn the_worker_serves_then_drains_on_sigterm_and_the_container_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let backends = LocalBackends::open(dir.path()).unwrap();
    let queue = backends.lane_queue(Tier::Small, Priority::Normal, Duration::from_secs(300), 3);
    let port = free_port();
    let mut container = start(dir.path(), port);
    let (id, body) = request_body("served through the entrypoint");
    queue.send(&body).await.unwrap();
    let store = backends.store.clone();
    eventually(Duration::from_secs(30), "a result", || {
        let store = store.clone();
        async move { store.get(id).await.unwrap() }
    })
    .await;

    // SIGTERM while a slow request is in flight: the worker finishes it before anything stops.
    let (late, body) = request_body("in flight at SIGTERM");
    queue.send(&body).await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    Command::new("kill").args(["-TERM", &container.id().to_string()]).status().unwrap();
    let status = exit_within(&mut container, Duration::from_secs(20)).await;
    assert!(status.success(), "a drained container exits 0, got {status}");
    assert!(backends.store.get(late).await.unwrap().is_some(), "the request in flight finished before exit");
    let engine_gone = Command::new("pgrep").args(["-f", &format!("127.0.0.1:{port}")]).status().unwrap();
    assert!(!engine_gone.success(), "the engine was stopped too");
}

#[tokio::test]
async fn an_engine_crash_stops_the_worker_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut container = start(dir.path(), port);
    let health = format!("http://127.0.0.1:{port}/health");
    eventually(Duration::from_secs(20), "the engine to answer", || {
        let request = reqwest::get(health.clone());
        async move { request.await.ok().filter(|r| r.status().is_success()).map(|_| ()) }
    })
    .await;
    signal("-KILL", &format!("engine-double --listen 127.0.0.1:{port}"));
    let status = exit_within(&mut container, Duration::from_secs(20)).await;
    assert!(!status.success(), "an engine crash must fail the container so ECS replaces it, got {status}");
}

#[tokio::test]
async fn a_bad_model_path_is_refused_before_anything_starts() {
    let output = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/entrypoint.sh"))
        .env("GPUINFER", env!("CARGO_BIN_EXE_gpuinfer"))
        .env("MODEL_NAME", "m")
        .env("MODEL_S3_PATH", "/local/path")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains("MODEL_S3_PATH must be an s3:// URI"));
    let output =
        Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/entrypoint.sh")).env_remove("MODEL_NAME").output().unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("MODEL_NAME must name the model"));
}
