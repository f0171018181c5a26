//! `gpuinfer dev` as a child process on a loopback port, in front of an engine; killed when dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::eventually;

pub(crate) struct Dev {
    pub child: Child,
    /// The router's base URL.
    pub url: String,
}

impl Dev {
    /// Starts `gpuinfer dev` on `port` with its data in `data_dir`, the small tier's engine at `engine`, and `flags`.
    pub(crate) fn start(data_dir: &Path, port: u16, engine: &str, flags: &[&str]) -> Dev {
        let child = Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
            .args(["dev", "--listen", &format!("127.0.0.1:{port}"), "--small-engine-url", engine])
            .arg("--data-dir")
            .arg(data_dir)
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start gpuinfer dev");
        Dev { child, url: format!("http://127.0.0.1:{port}") }
    }

    /// Waits until the router answers /healthz.
    pub(crate) async fn ready(&self, http: &reqwest::Client) {
        let url = format!("{}/healthz", self.url);
        eventually(Duration::from_secs(20), "gpuinfer dev to listen", || {
            let request = http.get(&url).send();
            async move { request.await.ok().filter(|r| r.status().is_success()).map(|_| ()) }
        })
        .await;
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
