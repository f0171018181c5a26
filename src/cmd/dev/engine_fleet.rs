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

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cmd::dev::engine_run::{EngineRun, free_port, setpriv_installed};
use crate::cmd::dev::fleet_state::{EngineTier, FleetSettings, Managed, PoolOutputs, Slot, TierState, lock};
use crate::contract::tier::Tier;
use crate::ports::{FirstTask, FleetError, GpuUtilization, Service, ServiceTasks, TaskCounts};
use crate::scaler::{TierOutcome, TierReport};

/// Why a drill found nothing to interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DrillRefused {
    /// The tier's engine is at a fixed URL: dev did not start it and cannot stop it.
    FixedEngine,
    /// The tier has no engine running now.
    NoEngine,
}

/// Engines per tier at most, unless configured (`--max-engines`).
pub(crate) const DEFAULT_MAX_ENGINES: u32 = 1;
/// Seconds a tier must need fewer engines before one is stopped, unless configured (`--engine-idle-ttl-seconds`).
pub(crate) const DEFAULT_IDLE_TTL_SECONDS: u64 = 300;
/// Seconds an engine has to answer /health after its start, unless configured (`--engine-start-timeout-seconds`).
pub(crate) const DEFAULT_START_TIMEOUT_SECONDS: u64 = 600;

/// The engines of the tiers that have an engine command; a tier without one runs a fixed pool (one task).
pub(crate) struct EngineFleet {
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
    pub(crate) fn new(
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
    pub(crate) fn apply(&self, reports: &[TierReport]) {
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
                slot.stop();
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

    /// A Spot interruption drill on `tier`: each of its running engines gets the notice a Spot instance's task gets
    /// (its worker pool drains: what cannot end within the drain is given back at once), then the engine is stopped,
    /// and the next tick replaces it if work remains, as ECS places the task elsewhere. The engines noticed, by id.
    pub(crate) fn interrupt(&self, tier: Tier) -> Result<Vec<u64>, DrillRefused> {
        let managed = self.managed(tier).ok_or(DrillRefused::FixedEngine)?;
        let drain = managed.spec.worker.drain_timeout.as_secs();
        let mut state = lock(&managed.state);
        let mut noticed = Vec::new();
        for (id, slot) in state.engines.iter_mut().filter(|(_, slot)| slot.healthy && !slot.stopping) {
            slot.stop();
            noticed.push(*id);
            tracing::warn!(%tier, engine = id, port = slot.port, drain_timeout_s = drain, "Spot interruption drill: notice given; the worker pool drains, then the engine stops");
        }
        if noticed.is_empty() {
            return Err(DrillRefused::NoEngine);
        }
        state.lost += noticed.len() as u32;
        Ok(noticed)
    }

    /// Waits until every engine has stopped (after the shutdown token is cancelled).
    pub(crate) async fn stopped(&self) {
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

/// A local tier's first task, as the router's wake on arrival asks for it: the scaler ticks at once, and the fleet
/// starts an engine on its decision ([`EngineFleet::apply`]), as Application Auto Scaling would on AWS.
pub(crate) struct TickNow(pub(crate) Arc<Notify>);

#[async_trait]
impl FirstTask for TickNow {
    async fn ask_for_first_task(&self, _service: &Service) -> Result<(), FleetError> {
        self.0.notify_one();
        Ok(())
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
