//! The local engine fleet: engines started on demand on one machine, one worker pool per engine, scaled by each scaler tick's `TasksNeeded` and stopped after an idle TTL.
//!
//! It is the `ServiceTasks` of `gpuinfer dev` when a tier has an engine command (`--small-engine-cmd`): the
//! scaler reads its running and desired engines as it reads an ECS service's tasks, and [`EngineFleet::apply`]
//! acts on the decision, as Application Auto Scaling does on AWS. Each engine is a command line run through
//! `sh -c` in its own process group on a free loopback port; its worker pool starts once it answers /health and
//! is drained before the engine is stopped (SIGTERM to the group, SIGKILL after a grace). The engine never
//! outlives `gpuinfer dev`: the group is killed when dev stops, and when dev dies without cleanup (`kill -9`),
//! a guard in the group, reading a pipe only dev holds, sees it close and kills the group; `setpriv --pdeathsig`
//! (util-linux), when present, kills the group's shell as well.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::process::{Child, Command};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::contract::tier::{Lanes, Tier};
use crate::engine::client::{EngineClient, EngineConfig};
use crate::infra::metrics::Emf;
use crate::ports::{Engine, FleetError, GpuUtilization, Queue, ResultStore, Service, ServiceTasks, TaskCounts};
use crate::scaler::{START_FAILURES_TO_STOP, TierOutcome, TierReport};
use crate::worker::callbacks::webhook::Webhooks;
use crate::worker::slots::Slots;
use crate::worker::{Stopped, Worker, WorkerConfig};

/// Engines per tier at most, unless configured (`--max-engines`).
pub const DEFAULT_MAX_ENGINES: u32 = 1;
/// Seconds a tier must need fewer engines before one is stopped, unless configured (`--engine-idle-ttl-seconds`).
pub const DEFAULT_IDLE_TTL_SECONDS: u64 = 300;
/// Seconds an engine has to answer /health after its start, unless configured (`--engine-start-timeout-seconds`).
pub const DEFAULT_START_TIMEOUT_SECONDS: u64 = 600;
/// What the engine command's `{port}` placeholder is replaced with: the engine's loopback port.
pub const PORT_PLACEHOLDER: &str = "{port}";
/// Time a stopping engine has to exit after SIGTERM before its process group gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often a stopping engine's process group is checked for processes still running.
const GROUP_EXIT_POLL: Duration = Duration::from_millis(100);
/// How often a starting engine's /health is probed.
const HEALTH_POLL: Duration = Duration::from_millis(100);
/// Least time between two looks for a tier without engines that has work, after queue changes.
const COLD_LOOK_INTERVAL: Duration = Duration::from_millis(50);

/// A tier whose engines are started on demand.
pub struct EngineTier {
    pub tier: Tier,
    /// Run through `sh -c`, `{port}` replaced with the engine's port.
    pub command: String,
    pub max_engines: u32,
    /// The engine client's settings; its URL is each engine's own.
    pub engine: EngineConfig,
    pub worker: WorkerConfig,
    pub lanes: Lanes<Arc<dyn Queue>>,
}

/// The fleet-wide settings.
#[derive(Debug, Clone)]
pub struct FleetSettings {
    pub idle_ttl: Duration,
    pub start_timeout: Duration,
}

/// Where every worker pool sends results, metrics and callbacks.
#[derive(Clone)]
pub struct PoolOutputs {
    pub store: Arc<dyn ResultStore>,
    pub metrics: Emf,
    pub webhooks: Webhooks,
}

/// One engine the fleet holds: starting, running, or stopping.
struct Slot {
    port: u16,
    healthy: bool,
    stopping: bool,
    stop: CancellationToken,
    /// Its worker pool's requests in flight and in-flight limit, once the pool runs.
    pool: Option<Arc<Slots>>,
}

#[derive(Default)]
struct TierState {
    engines: BTreeMap<u64, Slot>,
    next_id: u64,
    /// Starts that failed in a row (reset by an engine that answers): the scaler stops asking after a few.
    failed_starts: u32,
    /// Engines lost since the last decision; the next starts replace them.
    lost: u32,
    /// Since when the tier has needed fewer engines than it holds.
    fewer_needed_since: Option<Instant>,
    /// The status last logged, so a line is written only when it changes.
    last_status: Option<TierStatus>,
}

/// What a tier's status line shows: engines wanted, in each phase, and the messages waiting for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TierStatus {
    desired: usize,
    starting: usize,
    running: usize,
    draining: usize,
    queue_depth: u64,
}

impl TierState {
    fn status(&self, desired: usize, queue_depth: u64) -> TierStatus {
        let mut status = TierStatus { desired, starting: 0, running: 0, draining: 0, queue_depth };
        for slot in self.engines.values() {
            match (slot.stopping, slot.healthy) {
                (true, _) => status.draining += 1,
                (false, true) => status.running += 1,
                (false, false) => status.starting += 1,
            }
        }
        status
    }

    /// Logs the tier's status line after a scaler tick, when it differs from the last one logged.
    fn log_status_change(&mut self, tier: Tier, desired: usize, queue_depth: u64) {
        let status = self.status(desired, queue_depth);
        if self.last_status == Some(status) {
            return;
        }
        self.last_status = Some(status);
        let TierStatus { desired, starting, running, draining, queue_depth } = status;
        tracing::info!(%tier, desired, starting, running, draining, queue_depth, "engine fleet status");
    }
}

struct Managed {
    spec: EngineTier,
    state: Arc<Mutex<TierState>>,
}

/// The engines of the tiers that have an engine command; a tier without one runs a fixed pool (one task).
pub struct EngineFleet {
    /// Each tier's service name, as the scaler asks for it.
    services: Vec<(String, Tier)>,
    managed: Vec<Arc<Managed>>,
    outputs: PoolOutputs,
    settings: FleetSettings,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    /// `setpriv`, when it is installed: the engine's shell gets SIGKILL when dev dies.
    setpriv: bool,
}

impl EngineFleet {
    pub fn new(
        services: Vec<(String, Tier)>,
        tiers: Vec<EngineTier>,
        outputs: PoolOutputs,
        settings: FleetSettings,
        shutdown: CancellationToken,
    ) -> Self {
        let setpriv = setpriv_installed();
        if !setpriv {
            tracing::warn!(
                "setpriv (util-linux) is not installed: an engine's shell is not killed by the kernel when gpuinfer dev dies (its guard still stops the engine)"
            );
        }
        let managed =
            tiers.into_iter().map(|spec| Arc::new(Managed { spec, state: Arc::default() })).collect::<Vec<_>>();
        EngineFleet { services, managed, outputs, settings, shutdown, tasks: TaskTracker::new(), setpriv }
    }

    fn managed(&self, tier: Tier) -> Option<&Arc<Managed>> {
        self.managed.iter().find(|m| m.spec.tier == tier)
    }

    /// Acts on one scaler tick: starts engines up to each tier's `TasksNeeded` (at most its maximum), and stops
    /// the surplus once the tier has needed fewer for the idle TTL.
    pub fn apply(&self, reports: &[TierReport]) {
        if self.shutdown.is_cancelled() {
            return;
        }
        for report in reports {
            let (Some(managed), TierOutcome::Decided { readings, decision }) =
                (self.managed(report.tier), &report.outcome)
            else {
                continue;
            };
            let tier = report.tier;
            let needed = decision.tasks_needed.min(managed.spec.max_engines) as usize;
            let messages = readings.queue.visible + readings.queue.in_flight + readings.queue.delayed;
            let mut state = lock(&managed.state);
            let active: Vec<(u64, bool)> =
                state.engines.iter().filter(|(_, s)| !s.stopping).map(|(id, s)| (*id, s.healthy)).collect();
            let lost = std::mem::take(&mut state.lost);
            if needed > active.len() {
                state.fewer_needed_since = None;
                for _ in active.len()..needed {
                    let reason = if lost > 0 {
                        "replacing a lost engine".to_owned()
                    } else {
                        format!("{messages} message(s) need {needed} engine(s); {} running or starting", active.len())
                    };
                    self.start(managed, &mut state, reason);
                }
            } else if needed == active.len() {
                state.fewer_needed_since = None;
            } else {
                let since = *state.fewer_needed_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.settings.idle_ttl {
                    state.fewer_needed_since = None;
                    self.stop_surplus(tier, &mut state, active, needed);
                }
            }
            state.log_status_change(tier, needed, messages);
        }
    }

    /// Stops the engines beyond `needed`: those still starting first (they hold no work), then the newest.
    fn stop_surplus(&self, tier: Tier, state: &mut TierState, mut active: Vec<(u64, bool)>, needed: usize) {
        active.sort_by_key(|&(id, healthy)| (healthy, std::cmp::Reverse(id)));
        let count = active.len() - needed;
        for (id, _) in active.into_iter().take(count) {
            if let Some(slot) = state.engines.get_mut(&id) {
                slot.stopping = true;
                slot.stop.cancel();
                tracing::info!(
                    %tier,
                    engine = id,
                    port = slot.port,
                    reason = format!("{needed} engine(s) needed for the idle TTL of {} s", self.settings.idle_ttl.as_secs()),
                    "stopping an engine: draining its worker pool first"
                );
            }
        }
    }

    /// Notifies `tick_now` (the scaler's) as soon as a tier with no engine has a message waiting, so its first
    /// request starts an engine at once rather than at the next scaler tick. Looks after each change of the
    /// embedded queues (`changes`), until shutdown.
    pub async fn wake_cold_tiers(self: Arc<Self>, changes: Arc<Notify>, tick_now: Arc<Notify>) {
        loop {
            // Enabled before the look, so a change during it is not missed.
            let changed = changes.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.a_cold_tier_has_work().await {
                tick_now.notify_one();
            }
            tokio::select! {
                () = changed => {}
                () = self.shutdown.cancelled() => return,
            }
            tokio::time::sleep(COLD_LOOK_INTERVAL).await;
        }
    }

    /// Whether a tier with no engine (running or starting) has messages visible in its lanes; a tier whose starts
    /// keep failing is not counted (the scaler asks nothing for it until dev restarts).
    async fn a_cold_tier_has_work(&self) -> bool {
        for managed in &self.managed {
            let cold = {
                let state = lock(&managed.state);
                state.failed_starts < START_FAILURES_TO_STOP && state.engines.values().all(|slot| slot.stopping)
            };
            if !cold {
                continue;
            }
            for queue in managed.spec.lanes.all() {
                if queue.counts().await.is_ok_and(|counts| counts.visible > 0) {
                    return true;
                }
            }
        }
        false
    }

    /// Waits until every engine has stopped (after the shutdown token is cancelled).
    pub async fn stopped(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    fn start(&self, managed: &Arc<Managed>, state: &mut TierState, reason: String) {
        let port = match free_port() {
            Ok(port) => port,
            Err(error) => {
                tracing::error!(tier = %managed.spec.tier, %error, "cannot find a free loopback port for an engine");
                state.failed_starts += 1;
                return;
            }
        };
        let id = state.next_id;
        state.next_id += 1;
        let stop = self.shutdown.child_token();
        state.engines.insert(id, Slot { port, healthy: false, stopping: false, stop: stop.clone(), pool: None });
        let run = EngineRun {
            managed: Arc::clone(managed),
            outputs: self.outputs.clone(),
            start_timeout: self.settings.start_timeout,
            setpriv: self.setpriv,
            shutdown: self.shutdown.clone(),
            id,
            port,
            stop,
        };
        self.tasks.spawn(run.run(reason));
    }
}

#[async_trait]
impl ServiceTasks for EngineFleet {
    async fn task_counts(&self, service: &Service) -> Result<TaskCounts, FleetError> {
        let Some(&(_, tier)) = self.services.iter().find(|(name, _)| *name == service.name) else {
            return Err(FleetError::unavailable(format!("no local tier runs the service {}", service.name)));
        };
        let Some(managed) = self.managed(tier) else {
            return Ok(TaskCounts { running: 1, desired: 1, failed_starts: 0 });
        };
        let state = lock(&managed.state);
        let active = state.engines.values().filter(|s| !s.stopping);
        let (mut running, mut desired) = (0, 0);
        for slot in active {
            desired += 1;
            running += u32::from(slot.healthy);
        }
        Ok(TaskCounts { running, desired, failed_starts: state.failed_starts })
    }
}

/// The tier's saturation in place of GPU utilization: requests in flight as a share of the in-flight limit (the
/// engine's free slots, as the adaptive limit found them), averaged over the running engines; None with none.
#[async_trait]
impl GpuUtilization for EngineFleet {
    async fn compute_utilization(&self, service: &Service) -> Result<Option<f64>, FleetError> {
        let tier = self.services.iter().find(|(name, _)| *name == service.name).map(|(_, tier)| *tier);
        let Some(managed) = tier.and_then(|tier| self.managed(tier)) else { return Ok(None) };
        let state = lock(&managed.state);
        let shares: Vec<f64> = state
            .engines
            .values()
            .filter(|slot| !slot.stopping)
            .filter_map(|slot| slot.pool.as_ref())
            .map(|pool| pool.in_flight() as f64 / pool.limit().max(1) as f64)
            .collect();
        Ok((!shares.is_empty()).then(|| 100.0 * shares.iter().sum::<f64>() / shares.len() as f64))
    }
}

/// One engine's life: start, wait for /health, run its worker pool, stop.
struct EngineRun {
    managed: Arc<Managed>,
    outputs: PoolOutputs,
    start_timeout: Duration,
    setpriv: bool,
    shutdown: CancellationToken,
    id: u64,
    port: u16,
    stop: CancellationToken,
}

/// How an engine's start ended.
enum Started {
    Healthy,
    TimedOut,
    Exited(String),
    Stopped,
}

impl EngineRun {
    async fn run(self, reason: String) {
        let tier = self.managed.spec.tier;
        let (id, port) = (self.id, self.port);
        let spawned = Instant::now();
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
        .with_webhooks(self.outputs.webhooks.clone());
        self.healthy(worker.slots());
        let engine_gone = CancellationToken::new();
        let mut pool = tokio::spawn(worker.with_engine_gone(engine_gone.clone()).run(self.stop.clone()));
        let stopped = tokio::select! {
            stopped = &mut pool => stopped,
            status = child.wait() => {
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                tracing::warn!(%tier, engine = id, port, %status, "engine process exited: its worker pool hands its messages back now");
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

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn setpriv_installed() -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("setpriv").is_file()))
}

fn lock(state: &Mutex<TierState>) -> MutexGuard<'_, TierState> {
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
