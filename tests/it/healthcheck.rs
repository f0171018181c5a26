//! `gpuinfer healthcheck` (the real binary) against the engine simulator: 0 when /health answers 2xx, 1 otherwise.

use std::process::Output;

use gpuinfer::{simulator::Behavior, simulator::EngineSimulator};

async fn healthcheck(engine_url: &str) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(["healthcheck", "--engine-url", engine_url, "--timeout-seconds", "1"])
        .output()
        .await
        .expect("run gpuinfer healthcheck")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn a_healthy_engine_exits_0() {
    let engine = EngineSimulator::start(Behavior::default()).await;
    let output = healthcheck(&engine.url).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), format!("the engine at {} is healthy", engine.url));
}

#[tokio::test]
async fn an_unhealthy_engine_exits_1_with_its_answer() {
    let engine = EngineSimulator::start(Behavior { healthy: false, ..Behavior::default() }).await;
    let output = healthcheck(&engine.url).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("is not healthy: engine unavailable: /health answered HTTP 503"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test]
async fn no_engine_exits_1_saying_it_cannot_connect() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let output = healthcheck(&format!("http://127.0.0.1:{port}")).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr(&output).contains("is not healthy: engine unavailable: cannot connect"), "{}", stderr(&output));
}
