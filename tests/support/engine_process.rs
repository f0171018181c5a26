//! The engine simulator as a child process (the engine-simulator binary), for tests that SIGKILL their engine.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A running engine-simulator process; killed when dropped.
#[derive(Debug)]
pub(crate) struct EngineProcess {
    child: Child,
    pub url: String,
}

impl EngineProcess {
    /// Starts the simulator on a free loopback port with these extra flags (e.g. `--latency-ms 500`).
    pub(crate) fn start(flags: &[&str]) -> Self {
        let mut child = Command::new(binary())
            .args(["--listen", "127.0.0.1:0"])
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the engine-simulator process");
        let mut url = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut url).expect("its URL");
        EngineProcess { child, url: url.trim().to_owned() }
    }

    /// SIGKILL: no connection is closed politely, as when the GPU under an engine falls off the bus.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The body of the last generation request the simulator received, as the engine reads it.
    pub(crate) async fn last_request(&self) -> Value {
        let stats: Value = reqwest::get(format!("{}/simulator/stats", self.url)).await.unwrap().json().await.unwrap();
        stats["lastRequest"].clone()
    }

    /// Requests received so far (`/simulator/stats`).
    pub(crate) async fn calls(&self) -> u64 {
        self.stat("calls").await
    }

    /// One counter of `/simulator/stats`: calls, inFlight, maxInFlight, failed, hung, garbled.
    pub(crate) async fn stat(&self, name: &str) -> u64 {
        let stats: Value = reqwest::get(format!("{}/simulator/stats", self.url)).await.unwrap().json().await.unwrap();
        stats[name].as_u64().unwrap_or_else(|| panic!("no {name} in {stats}"))
    }
}

impl Drop for EngineProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The engine-simulator binary (src/bin/engine-simulator.rs), which cargo builds for every integration test.
fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_engine-simulator")
}
