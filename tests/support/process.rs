//! Child processes of a test (`gpuinfer worker`, `gpuinfer dev`, a moto server): signals, exit, logs; killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use super::eventually;

/// A running child process whose stderr goes to a log file.
#[derive(Debug)]
pub(crate) struct ChildProcess {
    child: Child,
    log: PathBuf,
}

impl ChildProcess {
    /// Spawns `command` with stdout discarded and stderr appended to `log`.
    pub(crate) fn spawn(command: &mut Command, log: &Path) -> Self {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("open the log file");
        let child = command.stdout(Stdio::null()).stderr(file).spawn().expect("spawn the child process");
        ChildProcess { child, log: log.to_owned() }
    }

    /// `gpuinfer <args…>` (the binary under test) with its stderr appended to `log`.
    pub(crate) fn gpuinfer(args: &[&str], envs: &[(&str, String)], log: &Path) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gpuinfer"));
        command.args(args).envs(envs.iter().map(|(k, v)| (*k, v)));
        Self::spawn(&mut command, log)
    }

    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL and reap: no cleanup of any kind, as in a crash or an out-of-memory kill.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends a signal by name (`TERM`, `STOP`, `CONT`…) without waiting.
    pub(crate) fn signal(&self, name: &str) {
        let status = Command::new("kill").args([&format!("-{name}"), &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -{name} {}", self.child.id());
    }

    /// Waits for the process to exit; panics with the end of its log after `limit`.
    pub(crate) async fn exited_within(&mut self, limit: Duration) -> ExitStatus {
        let Self { child, log } = self;
        let what = format!("pid {} to exit (log {})", child.id(), log.display());
        eventually(limit, &what, || std::future::ready(child.try_wait().unwrap())).await
    }

    /// Everything the process has logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
