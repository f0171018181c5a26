//! The wake on arrival: once per tier for a burst, never on a tier that has tasks or keeps failing to start, and
//! the scaler's next decisions after it neither double the capacity nor undo it while work waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use super::{Wake, WakeOnArrival, wakes};
use crate::contract::tier::{PerTier, Tier};
use crate::ports::{FirstTask, FleetError, QueueCounts, Service, ServiceTasks, TaskCounts};
use crate::scaler::{Readings, START_FAILURES_TO_STOP, ScalingPolicy, decide};

/// A service as ECS keeps it: DescribeServices reads its counts (each read counted, slowed by `read_delay`),
/// UpdateService to 1 sets its desired count (counted).
struct FakeService {
    counts: std::sync::Mutex<TaskCounts>,
    reads: AtomicU32,
    updates: AtomicU32,
    read_delay: Duration,
}

impl FakeService {
    fn with(counts: TaskCounts, read_delay: Duration) -> Arc<Self> {
        Arc::new(FakeService {
            counts: std::sync::Mutex::new(counts),
            reads: AtomicU32::new(0),
            updates: AtomicU32::new(0),
            read_delay,
        })
    }

    fn calls(&self) -> (u32, u32) {
        (self.reads.load(Ordering::SeqCst), self.updates.load(Ordering::SeqCst))
    }
}

#[async_trait]
impl ServiceTasks for FakeService {
    async fn task_counts(&self, _service: &Service) -> Result<TaskCounts, FleetError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.read_delay).await;
        Ok(*self.counts.lock().unwrap())
    }
}

#[async_trait]
impl FirstTask for FakeService {
    async fn ask_for_first_task(&self, _service: &Service) -> Result<(), FleetError> {
        self.updates.fetch_add(1, Ordering::SeqCst);
        self.counts.lock().unwrap().desired = 1;
        Ok(())
    }
}

fn waker(service: &Arc<FakeService>, recheck: Duration) -> Arc<WakeOnArrival> {
    let services = PerTier {
        small: Service::of_tier("c", "s-{tier}", Tier::Small),
        large: Service::of_tier("c", "s-{tier}", Tier::Large),
    };
    Arc::new(WakeOnArrival::new(services, service.clone(), service.clone(), recheck))
}

fn counts(running: u32, desired: u32, failed_starts: u32) -> TaskCounts {
    TaskCounts { running, desired, failed_starts }
}

#[test]
fn only_a_service_with_nothing_asked_for_and_starts_not_failing_is_woken() {
    assert_eq!(wakes(&counts(0, 0, 0)), Wake::AskedForFirstTask);
    assert_eq!(wakes(&counts(1, 0, 0)), Wake::AskedForFirstTask, "a task stopping at desired 0 holds no capacity");
    assert_eq!(wakes(&counts(0, 1, 0)), Wake::Awake, "a task cold-starting is capacity asked for");
    assert_eq!(wakes(&counts(3, 5, 0)), Wake::Awake, "never lowers a count");
    assert_eq!(wakes(&counts(0, 0, START_FAILURES_TO_STOP)), Wake::StartsFailing);
    assert_eq!(wakes(&counts(0, 0, START_FAILURES_TO_STOP - 1)), Wake::AskedForFirstTask);
}

#[tokio::test]
async fn a_burst_of_a_thousand_arrivals_looks_once_and_asks_once() {
    let service = FakeService::with(counts(0, 0, 0), Duration::from_millis(20));
    let wake = waker(&service, Duration::from_secs(10));
    let arrivals = (0..1000).map(|_| {
        let wake = Arc::clone(&wake);
        tokio::spawn(async move { wake.arrived(Tier::Small).await })
    });
    let mut outcomes = Vec::new();
    for arrival in arrivals {
        outcomes.push(arrival.await.unwrap());
    }
    assert_eq!(service.calls(), (1, 1), "one DescribeServices and one UpdateService for the burst");
    assert_eq!(outcomes.iter().filter(|&&o| o == Wake::AskedForFirstTask).count(), 1);
    assert_eq!(outcomes.iter().filter(|&&o| o == Wake::Skipped).count(), 999);
    assert_eq!(service.counts.lock().unwrap().desired, 1, "one task asked for, not a thousand");
}

#[tokio::test]
async fn a_tier_is_looked_at_again_after_the_recheck_and_each_tier_on_its_own() {
    let service = FakeService::with(counts(0, 0, 0), Duration::ZERO);
    let wake = waker(&service, Duration::from_millis(50));
    assert_eq!(wake.arrived(Tier::Small).await, Wake::AskedForFirstTask);
    assert_eq!(wake.arrived(Tier::Small).await, Wake::Skipped);
    assert_eq!(wake.arrived(Tier::Large).await, Wake::Awake, "the fake's one count is already 1: looked at, not asked");
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(wake.arrived(Tier::Small).await, Wake::Awake, "looked at again: a task is asked for already");
    assert_eq!(service.calls(), (3, 1));
}

#[tokio::test]
async fn a_tier_whose_starts_keep_failing_is_not_woken() {
    let service = FakeService::with(counts(0, 0, START_FAILURES_TO_STOP), Duration::ZERO);
    let wake = waker(&service, Duration::ZERO);
    assert_eq!(wake.arrived(Tier::Large).await, Wake::StartsFailing);
    assert_eq!(service.calls(), (1, 0));
}

/// After the wake (desired 1, the task still cold-starting), the scaler's next ticks: one request keeps the one
/// task (metric 1: neither alarm), a burst asks only for the tasks still missing, and the tier is let go only
/// once nothing waits or runs.
#[test]
fn the_scalers_next_decisions_neither_double_nor_undo_a_wake() {
    let policy = ScalingPolicy::new(5, 0, 10, 80.0).unwrap();
    let woken = |visible, in_flight| Readings {
        queue: QueueCounts { visible, in_flight, delayed: 0 },
        tasks: counts(0, 1, 0),
        gpu_utilization: None,
    };
    let one = decide(&woken(1, 0), &policy);
    assert_eq!((one.tasks_needed, one.change, one.scaling_metric), (1, 0, 1.0), "one request: the woken task only");
    let burst = decide(&woken(1000, 0), &policy);
    assert_eq!((burst.tasks_needed, burst.change), (10, 9), "the maximum, counting the woken task once");
    let served = decide(&woken(0, 0), &policy);
    assert!(served.scaling_metric < 1.0, "nothing waiting: the scale-in alarm may start its idle window");
}
