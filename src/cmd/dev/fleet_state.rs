//! What the local engine fleet knows of each tier it starts engines for: the tier's engine command and worker
//! settings, each engine's phase (starting, running, stopping) and its worker pool's slots, the tier's status line.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::callbacks::openai_events::OpenAiEvents;
use crate::callbacks::webhook::Webhooks;
use crate::contract::tier::{Lanes, Tier};
use crate::engine::client::EngineConfig;
use crate::infra::metrics::Emf;
use crate::ports::{Queue, ResultStore};
use crate::worker::WorkerConfig;
use crate::worker::slots::Slots;

/// A tier whose engines are started on demand.
pub(crate) struct EngineTier {
    pub tier: Tier,
    /// Run through `sh -c`, `{port}` replaced with the engine's port.
    pub command: String,
    pub(crate) max_engines: u32,
    /// The engine client's settings; its URL is each engine's own.
    pub(crate) engine: EngineConfig,
    pub(crate) worker: WorkerConfig,
    pub lanes: Lanes<Arc<dyn Queue>>,
}

/// The fleet-wide settings.
#[derive(Debug, Clone)]
pub(crate) struct FleetSettings {
    pub(crate) idle_ttl: Duration,
    pub(crate) start_timeout: Duration,
}

/// Where every worker pool sends results, metrics and callbacks.
#[derive(Clone)]
pub(crate) struct PoolOutputs {
    pub store: Arc<dyn ResultStore>,
    pub metrics: Emf,
    pub(crate) webhooks: Webhooks,
    pub(crate) events: Option<OpenAiEvents>,
}

/// One engine the fleet holds: starting, running, or stopping.
pub(super) struct Slot {
    pub(super) port: u16,
    pub(super) healthy: bool,
    pub(super) stopping: bool,
    pub(super) stop: CancellationToken,
    /// Its worker pool's requests in flight and in-flight limit, once the pool runs.
    pub(super) pool: Option<Arc<Slots>>,
}

impl Slot {
    /// Marks the engine stopping and tells its run to drain its worker pool, then stop it.
    pub(super) fn stop(&mut self) {
        self.stopping = true;
        self.stop.cancel();
    }
}

#[derive(Default)]
pub(super) struct TierState {
    pub(super) engines: BTreeMap<u64, Slot>,
    pub(super) next_id: u64,
    /// Starts that failed in a row (reset by an engine that answers): the scaler stops asking after a few.
    pub(super) failed_starts: u32,
    /// Engines lost since the last decision; the next starts replace them.
    pub(super) lost: u32,
    /// Since when the tier has needed fewer engines than it holds.
    pub(super) fewer_needed_since: Option<Instant>,
    /// The status last logged, so a line is written only when it changes.
    pub(super) last_status: Option<TierStatus>,
}

/// What a tier's status line shows: engines wanted, in each phase, and the messages waiting for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TierStatus {
    desired: usize,
    starting: usize,
    running: usize,
    draining: usize,
    queue_depth: u64,
}

impl TierState {
    pub(super) fn status(&self, desired: usize, queue_depth: u64) -> TierStatus {
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
    pub(super) fn log_status_change(&mut self, tier: Tier, desired: usize, queue_depth: u64) {
        let status = self.status(desired, queue_depth);
        if self.last_status == Some(status) {
            return;
        }
        self.last_status = Some(status);
        let TierStatus { desired, starting, running, draining, queue_depth } = status;
        tracing::info!(%tier, desired, starting, running, draining, queue_depth, "engine fleet status");
    }
}

pub(super) struct Managed {
    pub(super) spec: EngineTier,
    pub(super) state: Arc<Mutex<TierState>>,
}

pub(super) fn lock(state: &Mutex<TierState>) -> MutexGuard<'_, TierState> {
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
