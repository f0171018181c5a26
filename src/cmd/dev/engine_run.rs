//! One engine of the local fleet, from start to stop: its command in a process group of its own on a loopback
//! port, guarded so it never outlives `gpuinfer dev`; /health until it answers; its worker pool; SIGTERM, then
//! SIGKILL after a grace.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::cmd::dev::fleet_state::{Managed, PoolOutputs, lock};
use crate::engine::client::EngineClient;
use crate::ports::Engine;
use crate::worker::cold_start::{Start, StartedBy};
use crate::worker::slots::Slots;
use crate::worker::{Stopped, Worker};

/// What the engine command's `{port}` placeholder is replaced with: the engine's loopback port.
pub(crate) const PORT_PLACEHOLDER: &str = "{port}";
/// Time a stopping engine has to exit after SIGTERM before its process group gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often a stopping engine's process group is checked for processes still running.
const GROUP_EXIT_POLL: Duration = Duration::from_millis(100);
/// How often a starting engine's /health is probed.
const HEALTH_POLL: Duration = Duration::from_millis(100);
/// One engine's life: start, wait for /health, run its worker pool, stop.
pub(super) struct EngineRun {
    pub(super) managed: Arc<Managed>,
    pub(super) outputs: PoolOutputs,
    pub(super) start_timeout: Duration,
    pub(super) setpriv: bool,
    pub(super) shutdown: CancellationToken,
    pub(super) id: u64,
    pub(super) port: u16,
    pub(super) stop: CancellationToken,
}

/// How an engine's start ended.
enum Started {
    Healthy,
    TimedOut,
    Exited(String),
    Stopped,
}

impl EngineRun {
    pub(super) async fn run(self, reason: String) {
        let tier = self.managed.spec.tier;
        let (id, port) = (self.id, self.port);
        let spawned = Instant::now();
        let spawned_at = SystemTime::now();
        let mut child = match self.command().spawn() {
            Ok(child) => child,
            Err(error) => {
                tracing::error!(%tier, engine = id, %error, "cannot start an engine: is `sh` on the PATH?");
                self.finish(false, true);
                return;
            }
        };
        let pid = child.id().unwrap_or_default();
        // Held until the engine is stopped: its guard kills the process group when this pipe closes.
        let _guard_pipe = child.stdin.take();
        tracing::info!(%tier, engine = id, port, pid, %reason, "starting an engine");
        let mut engine = self.managed.spec.engine.clone();
        engine.base_url = format!("http://127.0.0.1:{port}");
        let client = match EngineClient::new(&engine) {
            Ok(client) => client,
            Err(error) => {
                tracing::error!(%tier, engine = id, %error, "cannot build the engine client");
                terminate(pid, &mut child).await;
                self.finish(false, true);
                return;
            }
        };
        let started = tokio::select! {
            healthy = tokio::time::timeout(self.start_timeout, wait_healthy(&client)) => {
                if healthy.is_ok() { Started::Healthy } else { Started::TimedOut }
            }
            status = child.wait() => Started::Exited(status.map_or_else(|e| e.to_string(), |s| s.to_string())),
            () = self.stop.cancelled() => Started::Stopped,
        };
        let waited_ms = spawned.elapsed().as_millis() as u64;
        match started {
            Started::Healthy => {}
            Started::TimedOut | Started::Exited(_) => {
                let why = match started {
                    Started::Exited(status) => format!("its process exited ({status}) before answering /health"),
                    _ => format!("no answer on /health within {} s", self.start_timeout.as_secs()),
                };
                tracing::error!(%tier, engine = id, port, waited_ms, reason = why, "an engine failed to start; counted as a failed start");
                terminate(pid, &mut child).await;
                self.finish(false, true);
                return;
            }
            Started::Stopped => {
                tracing::info!(%tier, engine = id, port, waited_ms, reason = self.stop_reason(), "engine stopped before it was healthy");
                terminate(pid, &mut child).await;
                self.finish(false, false);
                return;
            }
        }
        tracing::info!(%tier, engine = id, port, pid, cold_start_ms = waited_ms, "engine healthy: its worker pool starts");
        let worker = Worker::new(
            self.managed.spec.lanes.clone(),
            Arc::clone(&self.outputs.store),
            Arc::new(client),
            self.managed.spec.worker.clone(),
            self.outputs.metrics.clone(),
        )
        .with_webhooks(self.outputs.webhooks.clone())
        .with_openai_events(self.outputs.events.clone())
        .with_start(Start::new(spawned_at, StartedBy::DevEngine));
        self.healthy(worker.slots());
        let engine_gone = CancellationToken::new();
        let mut pool = tokio::spawn(worker.with_engine_gone(engine_gone.clone()).run(self.stop.clone()));
        let stopped = tokio::select! {
            stopped = &mut pool => stopped,
            status = child.wait() => {
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                tracing::warn!(%tier, engine = id, port, %status, "engine process exited: its worker pool gives its messages back now");
                engine_gone.cancel();
                pool.await
            }
        };
        let lost = !matches!(stopped, Ok(Stopped::Drained));
        terminate(pid, &mut child).await;
        let uptime_s = spawned.elapsed().as_secs();
        if lost {
            tracing::warn!(%tier, engine = id, port, uptime_s, "engine lost: its messages are back in the queue; the next decision replaces it");
        } else {
            tracing::info!(%tier, engine = id, port, uptime_s, reason = self.stop_reason(), "engine stopped");
        }
        self.finish(lost, false);
    }

    fn stop_reason(&self) -> &'static str {
        if self.shutdown.is_cancelled() { "gpuinfer dev is stopping" } else { "idle past its TTL" }
    }

    /// `setpriv --pdeathsig KILL -- sh -c <guarded command>` in a process group of its own, stdin a pipe from dev.
    fn command(&self) -> Command {
        let engine = self.managed.spec.command.replace(PORT_PLACEHOLDER, &self.port.to_string());
        let mut command = if self.setpriv {
            let mut command = Command::new("setpriv");
            command.args(["--pdeathsig", "KILL", "--", "sh", "-c"]);
            command
        } else {
            let mut command = Command::new("sh");
            command.arg("-c");
            command
        };
        command
            .arg(guarded(&engine))
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        command
    }

    /// Marks the engine running, its worker pool's slots known.
    fn healthy(&self, pool: Arc<Slots>) {
        let mut state = lock(&self.managed.state);
        state.failed_starts = 0;
        if let Some(slot) = state.engines.get_mut(&self.id) {
            slot.healthy = true;
            slot.pool = Some(pool);
        }
    }

    /// Forgets the engine; counts a failed start or a loss.
    fn finish(&self, lost: bool, failed_start: bool) {
        let mut state = lock(&self.managed.state);
        state.engines.remove(&self.id);
        state.lost += u32::from(lost);
        state.failed_starts += u32::from(failed_start);
    }
}

/// The engine command in a shell that also runs a guard: the guard reads the shell's stdin (a pipe only dev holds)
/// and, when it closes because dev is gone, kills the whole process group. SIGTERM to the shell is passed on to
/// the engine, and the shell exits with the engine.
fn guarded(engine: &str) -> String {
    format!(
        "exec 3<&0\n{{\n{engine}\n}} </dev/null 3<&- &\nengine=$!\n{{ read _ <&3; kill -KILL 0; }} </dev/null &\nguard=$!\n\
         trap 'kill -TERM $engine 2>/dev/null' TERM INT\n\
         wait $engine\nstatus=$?\nwhile kill -0 $engine 2>/dev/null; do wait $engine; status=$?; done\n\
         kill $guard 2>/dev/null\nexit $status\n"
    )
}

/// SIGTERM to the engine's process group, then SIGKILL to what is left after the grace; reaps the shell. The
/// grace lasts until the whole group has exited, not only the shell: an engine started by a wrapper (a script
/// that runs the server as its child) may still be shutting down when the shell is gone.
async fn terminate(pgid: u32, child: &mut Child) {
    if pgid == 0 {
        let _ = child.kill().await;
        return;
    }
    signal_group("TERM", pgid).await;
    let group_exited = async {
        let _ = child.wait().await;
        while signal_group("0", pgid).await {
            tokio::time::sleep(GROUP_EXIT_POLL).await;
        }
    };
    if tokio::time::timeout(STOP_GRACE, group_exited).await.is_err() {
        tracing::warn!(
            pgid,
            grace_s = STOP_GRACE.as_secs(),
            "engine still running after SIGTERM: SIGKILL to its process group"
        );
    }
    signal_group("KILL", pgid).await;
    let _ = child.wait().await;
}

/// Sends `signal` to every process of the group `pgid` (`kill -s SIGNAL -- -PGID`; no unsafe code here); whether
/// the group had a process to take it (signal "0" only asks that).
async fn signal_group(signal: &str, pgid: u32) -> bool {
    Command::new("kill")
        .args(["-s", signal, "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|status| status.success())
}

/// Polls /health until it answers.
async fn wait_healthy(client: &EngineClient) {
    while !client.healthy().await {
        tokio::time::sleep(HEALTH_POLL).await;
    }
}

pub(super) fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(super) fn setpriv_installed() -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("setpriv").is_file()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! The guard that stops an engine with gpuinfer dev.

    use super::guarded;

    #[tokio::test]
    async fn the_guarded_shell_passes_the_engines_exit_status_on() {
        // In a group of its own, and with its stdin held open: the guard kills its group when stdin closes.
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(guarded("sleep 0.2; exit 7"))
            .process_group(0)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let _stdin = child.stdin.take();
        assert_eq!(child.wait().await.unwrap().code(), Some(7));
    }
}
