//! A worker's slots for requests in flight, their number resizable while requests run: shrinking below what is in
//! flight takes effect as those requests finish. High-priority requests waiting for a slot get it first.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

#[derive(Debug)]
pub struct Slots {
    semaphore: Arc<Semaphore>,
    state: Mutex<SlotCount>,
    /// Notified when a slot comes free (given back, or added by a resize), so whoever fills slots does not wait for
    /// a request's task to end first: a request gives its slot back when the engine answers, before it stores the
    /// result.
    freed: Notify,
    /// Requests waiting in `take_first`: a slot freed while any waits goes to them.
    first_waiting: AtomicUsize,
}

#[derive(Debug)]
struct SlotCount {
    limit: usize,
    in_flight: usize,
    /// The most in flight since the last `take_peak`.
    peak: usize,
    /// Slots taken away while in use: that many finishing requests keep their slot from coming back.
    owed: usize,
}

/// One request's slot; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    slots: Arc<Slots>,
}

impl Slots {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Slots {
            semaphore: Arc::new(Semaphore::new(limit)),
            state: Mutex::new(SlotCount { limit, in_flight: 0, peak: 0, owed: 0 }),
            freed: Notify::new(),
            first_waiting: AtomicUsize::new(0),
        })
    }

    /// Resolves once a slot has come free, given back or added by a resize (at once if one did since the last
    /// call).
    pub(crate) async fn freed(&self) {
        self.freed.notified().await;
    }

    /// Slots free now.
    pub(crate) fn free(&self) -> usize {
        self.semaphore.available_permits()
    }

    pub fn in_flight(&self) -> usize {
        self.count().in_flight
    }

    pub(crate) fn limit(&self) -> usize {
        self.count().limit
    }

    /// The most requests in flight since the previous call (or since the start): whether the limit was filled
    /// between two readings of the engine's load, even if a request that finished had not been replaced yet at
    /// either reading.
    pub(crate) fn take_peak(&self) -> usize {
        let mut count = self.count();
        let peak = count.peak.max(count.in_flight);
        count.peak = count.in_flight;
        peak
    }

    /// A free slot now, if there is one.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<Slot> {
        let permit = Arc::clone(&self.semaphore).try_acquire_owned().ok()?;
        Some(self.taken(permit))
    }

    /// The next free slot (in the order asked for), after every `take_first` waiting.
    pub async fn take(self: &Arc<Self>) -> Slot {
        loop {
            let permit = self.acquire().await;
            if self.first_waiting.load(Ordering::Acquire) == 0 {
                return self.taken(permit);
            }
            // Given back to whoever waits first in line; this request goes to the back of it.
            drop(permit);
            tokio::task::yield_now().await;
        }
    }

    /// The next free slot, ahead of every `take` waiting (for high-priority requests).
    pub(crate) async fn take_first(self: &Arc<Self>) -> Slot {
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.first_waiting.fetch_add(1, Ordering::AcqRel);
        let _waiting = Waiting(&self.first_waiting);
        let permit = self.acquire().await;
        self.taken(permit)
    }

    async fn acquire(&self) -> OwnedSemaphorePermit {
        Arc::clone(&self.semaphore).acquire_owned().await.unwrap_or_else(|_| unreachable!("never closed"))
    }

    fn taken(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Slot {
        let mut count = self.count();
        count.in_flight += 1;
        count.peak = count.peak.max(count.in_flight);
        drop(count);
        Slot { permit: Some(permit), slots: Arc::clone(self) }
    }

    /// Sets the number of slots: new ones are free at once; removed ones are taken from the free slots first,
    /// then from requests in flight as they finish.
    pub(crate) fn resize(&self, limit: usize) {
        let mut count = self.count();
        if limit > count.limit {
            let added = limit - count.limit;
            let repaid = added.min(count.owed);
            count.owed -= repaid;
            self.semaphore.add_permits(added - repaid);
            if added > repaid {
                self.freed.notify_one();
            }
        } else {
            let removed = count.limit - limit;
            let forgotten = self.semaphore.forget_permits(removed);
            count.owed += removed - forgotten;
        }
        count.limit = limit;
    }

    fn count(&self) -> MutexGuard<'_, SlotCount> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Slot {
    /// Gives the slot back, or keeps it from coming back while slots are owed; under the lock, so a resize sees
    /// either the slot still held or given back, never in between.
    fn drop(&mut self) {
        let permit = self.permit.take();
        let mut count = self.slots.count();
        count.in_flight -= 1;
        if count.owed > 0 {
            count.owed -= 1;
            if let Some(permit) = permit {
                permit.forget();
            }
        } else {
            drop(permit);
            self.slots.freed.notify_one();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! Resizing a worker's slots while requests hold some of them, and the most they held between two readings.

    use super::Slots;

    #[tokio::test]
    async fn growing_frees_slots_at_once_and_shrinking_waits_for_requests_in_flight() {
        let slots = Slots::new(2);
        let first = slots.try_take().unwrap();
        let second = slots.try_take().unwrap();
        assert!(slots.try_take().is_none());
        slots.resize(4);
        assert_eq!(slots.free(), 2);
        let third = slots.try_take().unwrap();
        assert_eq!(slots.in_flight(), 3);

        slots.resize(1);
        assert_eq!(slots.free(), 0, "the free slot is removed at once");
        drop(first);
        drop(second);
        assert_eq!(slots.free(), 0, "two finishing requests keep their slots from coming back");
        drop(third);
        assert_eq!((slots.free(), slots.in_flight(), slots.limit()), (1, 0, 1));
    }

    #[tokio::test]
    async fn growing_again_repays_slots_owed_before_adding_free_ones() {
        let slots = Slots::new(3);
        let held: Vec<_> = (0..3).map(|_| slots.try_take().unwrap()).collect();
        slots.resize(1);
        slots.resize(2);
        assert_eq!(slots.free(), 0);
        drop(held);
        assert_eq!((slots.free(), slots.limit()), (2, 2));
    }

    #[tokio::test]
    async fn adding_slots_wakes_whoever_fills_them() {
        let slots = Slots::new(1);
        slots.resize(1);
        let quiet = tokio::time::timeout(std::time::Duration::from_millis(50), slots.freed()).await;
        assert!(quiet.is_err(), "no slot was added");
        slots.resize(3);
        tokio::time::timeout(std::time::Duration::from_secs(1), slots.freed()).await.expect("woken by the growth");
    }

    #[tokio::test]
    async fn a_slot_given_back_wakes_whoever_fills_slots_but_one_owed_to_a_shrink_does_not() {
        let slots = Slots::new(2);
        let (first, second) = (slots.try_take().unwrap(), slots.try_take().unwrap());
        slots.resize(1);
        drop(first);
        let quiet = tokio::time::timeout(std::time::Duration::from_millis(50), slots.freed()).await;
        assert!(quiet.is_err(), "the slot went to the shrink, none came free");
        drop(second);
        tokio::time::timeout(std::time::Duration::from_secs(1), slots.freed())
            .await
            .expect("woken by the slot given back");
    }

    #[tokio::test]
    async fn a_slot_freed_while_a_high_priority_request_waits_goes_to_it_first() {
        let slots = Slots::new(1);
        let held = slots.try_take().unwrap();
        let normal = tokio::spawn({
            let slots = std::sync::Arc::clone(&slots);
            async move { slots.take().await }
        });
        tokio::task::yield_now().await; // the normal request is first in line
        let high = tokio::spawn({
            let slots = std::sync::Arc::clone(&slots);
            async move { slots.take_first().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        drop(held);
        let high_slot = tokio::time::timeout(std::time::Duration::from_secs(1), high).await.unwrap().unwrap();
        assert!(!normal.is_finished(), "the normal request still waits");
        drop(high_slot);
        let normal_slot = tokio::time::timeout(std::time::Duration::from_secs(1), normal).await.unwrap().unwrap();
        assert_eq!(slots.in_flight(), 1);
        drop(normal_slot);
    }

    #[tokio::test]
    async fn the_peak_is_the_most_in_flight_since_it_was_last_taken() {
        let slots = Slots::new(4);
        let held: Vec<_> = (0..4).map(|_| slots.try_take().unwrap()).collect();
        drop(held);
        let one = slots.try_take().unwrap();
        assert_eq!(slots.in_flight(), 1);
        assert_eq!(slots.take_peak(), 4, "all four slots were filled, though only one is now");
        assert_eq!(slots.take_peak(), 1, "since then, only the one still held");
        drop(one);
        assert_eq!(slots.take_peak(), 1);
        assert_eq!(slots.take_peak(), 0);
    }
}
