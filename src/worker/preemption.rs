//! Normal and batch requests in the engine, youngest last, and how the youngest give their slot up: to a
//! high-priority request that waited for a slot while a young one ran, or when the engine queues requests beyond
//! the worker's share. A request that gives its slot up loses what it generated and waits for the next slot.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// Weight of the newest engine time in the typical one (an exponential moving average).
const TYPICAL_WEIGHT: f64 = 0.2;

#[derive(Debug, Default)]
pub(crate) struct Preemption {
    state: Mutex<State>,
    next_id: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// By the order they started (ids only grow): the youngest last.
    running: BTreeMap<u64, Running>,
    /// A finished request's typical engine time; None until one has finished.
    typical: Option<Duration>,
}

#[derive(Debug)]
struct Running {
    started: Instant,
    give_up: oneshot::Sender<()>,
}

/// One running request's place in the list; leaves it when dropped.
#[derive(Debug)]
pub(crate) struct Preemptible {
    id: u64,
    preemption: Arc<Preemption>,
    asked: oneshot::Receiver<()>,
}

impl Preemption {
    pub fn new() -> Arc<Self> {
        Arc::new(Preemption::default())
    }

    /// Enters a normal or batch request that starts now in its slot.
    pub(crate) fn register(self: &Arc<Self>) -> Preemptible {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (give_up, asked) = oneshot::channel();
        self.lock().running.insert(id, Running { started: Instant::now(), give_up });
        Preemptible { id, preemption: Arc::clone(self), asked }
    }

    /// Whether any normal or batch request may give its slot up.
    pub(crate) fn any_running(&self) -> bool {
        !self.lock().running.is_empty()
    }

    /// A finished request's engine time, into the typical one.
    pub(crate) fn observe(&self, engine_time: Duration) {
        let mut state = self.lock();
        state.typical = Some(match state.typical {
            Some(typical) => typical.mul_f64(1.0 - TYPICAL_WEIGHT) + engine_time.mul_f64(TYPICAL_WEIGHT),
            None => engine_time,
        });
    }

    /// How long a high-priority request waits for a slot before it may take one: a quarter of the typical engine
    /// time (none before a request has finished). Where slots turn over sooner, as when requests run staggered,
    /// it gets one without taking any.
    pub(crate) fn patience(&self) -> Duration {
        self.lock().typical.map_or(Duration::ZERO, |typical| typical / 4)
    }

    /// For a high-priority request that waited its patience: asks the youngest running request to give its slot
    /// up, if it started less than half the typical engine time ago (any age before a request has finished), so
    /// the engine work lost stays below what the high-priority request would otherwise wait; whether one was asked.
    pub(crate) fn for_high_priority(&self) -> bool {
        let mut state = self.lock();
        let typical = state.typical;
        let young = |running: &Running| typical.is_none_or(|typical| running.started.elapsed() < typical / 2);
        if !state.running.last_key_value().is_some_and(|(_, youngest)| young(youngest)) {
            return false;
        }
        state.running.pop_last().is_some_and(|(_, youngest)| youngest.give_up.send(()).is_ok())
    }

    /// Asks the `count` youngest running requests to give their slot up, whatever their age (the engine holds them
    /// waiting, so they lose nothing); how many were asked.
    pub(crate) fn pull_back(&self, count: usize) -> usize {
        let mut state = self.lock();
        (0..count)
            .map_while(|_| state.running.pop_last())
            .map(|(_, running)| running.give_up.send(()))
            .filter(Result::is_ok)
            .count()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Preemptible {
    /// Resolves when the request is asked to give its slot up; never, once it has left the list.
    pub(crate) async fn asked(&mut self) {
        if (&mut self.asked).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Preemptible {
    fn drop(&mut self) {
        self.preemption.lock().running.remove(&self.id);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
