//! The engine double as a child process (examples/engine-double.rs), for tests that SIGKILL their engine.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// A running engine-double process; killed when dropped.
#[derive(Debug)]
pub struct EngineProcess {
    child: Child,
    pub url: String,
}

impl EngineProcess {
    /// Starts the double on a free loopback port with these extra flags (e.g. `--latency-ms 500`).
    pub fn start(flags: &[&str]) -> Self {
        let mut child = Command::new(binary())
            .args(["--listen", "127.0.0.1:0"])
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the engine-double process");
        let mut url = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut url).expect("its URL");
        EngineProcess { child, url: url.trim().to_owned() }
    }

    /// SIGKILL: no connection is closed politely, as when the GPU under an engine falls off the bus.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Requests received so far (`/double/stats`).
    pub async fn calls(&self) -> u64 {
        let stats: Value = reqwest::get(format!("{}/double/stats", self.url)).await.unwrap().json().await.unwrap();
        stats["calls"].as_u64().unwrap()
    }
}

impl Drop for EngineProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The example's executable, built once per test process (a no-op when `cargo test` has built it already).
fn binary() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cargo.args(["build", "--quiet", "--example", "engine-double", "--message-format=json"]);
        let test_profile_dir =
            std::env::current_exe().unwrap().parent().and_then(|deps| deps.parent()).map(|dir| dir.to_owned());
        if test_profile_dir.is_some_and(|dir| dir.ends_with("release")) {
            cargo.arg("--release");
        }
        let output = cargo.stderr(Stdio::inherit()).output().expect("run cargo build --example engine-double");
        assert!(output.status.success(), "cargo build --example engine-double failed");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|message| message["target"]["name"] == "engine-double" && message["executable"].is_string())
            .and_then(|message| message["executable"].as_str().map(PathBuf::from))
            .expect("cargo reports the engine-double executable")
    })
}
