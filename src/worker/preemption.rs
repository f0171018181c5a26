//! Normal and batch requests in the engine, youngest last, and how the youngest give their slot up: to a
//! high-priority request that found no slot due soon, or when the engine queues requests beyond
//! the worker's share. A request that gives its slot up loses what it generated and waits for the next slot.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// Weight of the newest engine time in the typical one (an exponential moving average).
const TYPICAL_WEIGHT: f64 = 0.2;
/// A high-priority request waits at most this part of the typical engine time for a slot: one in `PATIENCE_PARTS`.
const PATIENCE_PARTS: u32 = 8;

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
    give_up: oneshot::Sender<GiveUp>,
}

/// Why a running request is asked to give its slot up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveUp {
    /// For a high-priority request: what it generated is lost.
    ForHighPriority,
    /// The engine holds it waiting beyond the worker's share: it lost nothing.
    PulledBack,
}

/// One running request's place in the list; leaves it when dropped.
#[derive(Debug)]
pub(crate) struct Preemptible {
    id: u64,
    preemption: Arc<Preemption>,
    asked: oneshot::Receiver<GiveUp>,
}

impl Preemption {
    pub(crate) fn new() -> Arc<Self> {
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

    /// How long a high-priority request waits for a slot before it takes one: an eighth of the typical engine time
    /// where the oldest running request is due to finish within that (the typical time less its age), as when
    /// requests run staggered; else none, as when they all started together, and the next slot is most of a request
    /// away. None before a request has finished.
    pub(crate) fn patience(&self) -> Duration {
        let state = self.lock();
        let Some(typical) = state.typical else { return Duration::ZERO };
        let due_soon = state
            .running
            .first_key_value()
            .is_none_or(|(_, oldest)| typical.saturating_sub(oldest.started.elapsed()) <= typical / PATIENCE_PARTS);
        if due_soon { typical / PATIENCE_PARTS } else { Duration::ZERO }
    }

    /// For a high-priority request that waited its patience: asks the youngest running request, whatever its age,
    /// to give its slot up (what it generated is lost: at most one request's engine time for each high-priority
    /// request, which waits at most an eighth of one); whether one was asked.
    pub(crate) fn for_high_priority(&self) -> bool {
        self.lock()
            .running
            .pop_last()
            .is_some_and(|(_, youngest)| youngest.give_up.send(GiveUp::ForHighPriority).is_ok())
    }

    /// Asks the `count` youngest running requests to give their slot up, whatever their age (the engine holds them
    /// waiting, so they lose nothing); how many were asked.
    pub(crate) fn pull_back(&self, count: usize) -> usize {
        let mut state = self.lock();
        (0..count)
            .map_while(|_| state.running.pop_last())
            .map(|(_, running)| running.give_up.send(GiveUp::PulledBack))
            .filter(Result::is_ok)
            .count()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Preemptible {
    /// Resolves when the request is asked to give its slot up, with why; never, once it has left the list.
    pub(crate) async fn asked(&mut self) -> GiveUp {
        match (&mut self.asked).await {
            Ok(why) => why,
            Err(_) => std::future::pending().await,
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
mod tests {
    //! Which running request gives its slot up, and when.

    use std::time::Duration;

    use super::{GiveUp, Preemption};

    /// Why `preemptible` has been asked to give its slot up, if it has, without waiting.
    async fn asked(preemptible: &mut super::Preemptible) -> Option<GiveUp> {
        tokio::time::timeout(Duration::from_millis(20), preemptible.asked()).await.ok()
    }

    #[tokio::test]
    async fn a_high_priority_request_takes_the_youngest_slot_and_each_is_asked_once() {
        let preemption = Preemption::new();
        let mut oldest = preemption.register();
        let mut youngest = preemption.register();
        assert!(preemption.for_high_priority());
        assert_eq!(asked(&mut youngest).await, Some(GiveUp::ForHighPriority));
        assert_eq!(asked(&mut oldest).await, None);
        assert!(preemption.for_high_priority());
        assert_eq!(asked(&mut oldest).await, Some(GiveUp::ForHighPriority));
        assert!(!preemption.for_high_priority(), "nothing left to ask");
        assert!(!preemption.any_running());
    }

    #[tokio::test]
    async fn a_high_priority_request_waits_only_where_the_oldest_request_is_due_to_finish_soon() {
        let preemption = Preemption::new();
        let _before = preemption.register();
        assert_eq!(preemption.patience(), Duration::ZERO, "no wait before any request finished");
        drop(_before);
        preemption.observe(Duration::from_millis(400));
        assert_eq!(preemption.patience(), Duration::from_millis(50), "nothing running: an eighth of 400 ms");
        let _oldest = preemption.register();
        assert_eq!(preemption.patience(), Duration::ZERO, "all started together: the next slot is 400 ms away");
        tokio::time::sleep(Duration::from_millis(360)).await;
        let _youngest = preemption.register();
        assert_eq!(preemption.patience(), Duration::from_millis(50), "the oldest is due within 50 ms: worth waiting");
    }

    #[tokio::test]
    async fn the_typical_engine_time_moves_with_each_finished_request() {
        let preemption = Preemption::new();
        preemption.observe(Duration::from_millis(400));
        preemption.observe(Duration::from_millis(900));
        assert_eq!(
            preemption.patience(),
            Duration::from_micros(62_500),
            "(0.8 × 400 + 0.2 × 900) ÷ 8, nothing running"
        );
    }

    #[tokio::test]
    async fn pulling_back_asks_the_youngest_whatever_their_age_and_a_finished_request_leaves_the_list() {
        let preemption = Preemption::new();
        preemption.observe(Duration::from_millis(1));
        let mut first = preemption.register();
        let finished = preemption.register();
        let mut second = preemption.register();
        let mut third = preemption.register();
        drop(finished);
        assert_eq!(preemption.pull_back(2), 2);
        assert_eq!(asked(&mut third).await, Some(GiveUp::PulledBack));
        assert_eq!(asked(&mut second).await, Some(GiveUp::PulledBack));
        assert_eq!(asked(&mut first).await, None);
        assert_eq!(preemption.pull_back(5), 1, "only one is left");
        assert_eq!(asked(&mut first).await, Some(GiveUp::PulledBack));
    }
}
