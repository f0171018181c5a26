//! Wake on arrival: when work is enqueued for a tier whose service has no task running or asked for, its first
//! task is asked for at once, rather than at the scaler's next minute and an alarm's period after it.
//!
//! # Why setting the desired count is safe beside the step scaling that owns it
//!
//! The wake sets the service's desired count to 1 (ECS UpdateService), and only after reading it as 0
//! (DescribeServices), so it never lowers a count. Application Auto Scaling's step policies change the desired
//! count *by* their step (`ChangeInCapacity`), from whatever it is when the alarm fires, so a count set outside
//! them is simply where the next step starts. And the scaler's metric is taken from the desired count
//! (`1 + TasksNeeded − DesiredTasks`, see the module above): a backlog of 1,000 on the woken tier asks for the
//! tasks still missing (not one more), and while any message waits TasksNeeded is at least 1, so the metric never
//! falls below 1 and the scale-in alarm (below 1 for the whole idle window) cannot undo the wake before the work
//! is served. The other calls the AWS docs offer are worse here: raising the scalable target's minimum
//! (RegisterScalableTarget) does change the current capacity at once, but the minimum must then be lowered again by
//! someone, or the tier never returns to zero; invoking the scaler only publishes a metric, which the scale-out
//! alarm reads at its next period.
//!
//! # Why it is cheap
//!
//! Each tier is looked at (one DescribeServices) at most once per `recheck`, one look at a time: arrivals during
//! a look or within `recheck` after it skip the look. A burst of 1,000 requests into one router makes one
//! DescribeServices and at most one UpdateService per tier; each further router (a Lambda execution environment)
//! makes at most one of each per `recheck`. A tier whose tasks keep failing to start is not woken (the scaler
//! asks nothing for it either: each failed start costs an instance's launch).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::contract::tier::{PerTier, Tier};
use crate::ports::{ArrivalWake, FirstTask, START_FAILURES_TO_STOP, Service, ServiceTasks, TaskCounts};

/// Least time between two looks at a tier's task counts on AWS (a DescribeServices each).
pub(crate) const AWS_RECHECK: Duration = Duration::from_secs(10);

/// What one arrival did for its tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Looked at within `recheck`, or being looked at now.
    Skipped,
    /// The service already has a task running or asked for.
    Awake,
    /// The desired count was 0: the first task was asked for.
    AskedForFirstTask,
    /// The service's tasks keep failing to start: nothing asked for.
    StartsFailing,
    /// A call failed (logged): the scaler's next tick asks for capacity instead.
    Failed,
}

/// Whether a service with these counts is woken: no task asked for (a task still running at desired 0 is being
/// stopped), and its starts not failing.
pub(crate) fn wakes(counts: &TaskCounts) -> Wake {
    if counts.desired > 0 {
        Wake::Awake
    } else if counts.failed_starts >= START_FAILURES_TO_STOP {
        Wake::StartsFailing
    } else {
        Wake::AskedForFirstTask
    }
}

/// Wakes each tier's service on arrival; shared by every entry that enqueues work.
pub(crate) struct WakeOnArrival {
    tiers: PerTier<TierWake>,
    tasks: Arc<dyn ServiceTasks>,
    first_task: Arc<dyn FirstTask>,
    recheck: Duration,
}

struct TierWake {
    service: Service,
    /// When the tier was last looked at; held during a look, so that concurrent arrivals skip it, not wait.
    looked_at: tokio::sync::Mutex<Option<Instant>>,
}

impl WakeOnArrival {
    /// Reads task counts from `tasks`, asks `first_task` for a tier's first task, looks at a tier at most once per
    /// `recheck`.
    pub(crate) fn new(
        services: PerTier<Service>,
        tasks: Arc<dyn ServiceTasks>,
        first_task: Arc<dyn FirstTask>,
        recheck: Duration,
    ) -> Self {
        let tier = |service| TierWake { service, looked_at: tokio::sync::Mutex::new(None) };
        WakeOnArrival {
            tiers: PerTier { small: tier(services.small), large: tier(services.large) },
            tasks,
            first_task,
            recheck,
        }
    }

    /// Work was just enqueued for `tier`: asks for its first task if it has none (see the module documentation).
    pub(crate) async fn arrived(&self, tier: Tier) -> Wake {
        let wake = self.tiers.get(tier);
        let Ok(mut looked_at) = wake.looked_at.try_lock() else { return Wake::Skipped };
        if looked_at.is_some_and(|at| at.elapsed() < self.recheck) {
            return Wake::Skipped;
        }
        *looked_at = Some(Instant::now());
        let service = &wake.service;
        let outcome = match self.tasks.task_counts(service).await {
            Ok(counts) => wakes(&counts),
            Err(error) => {
                tracing::warn!(%tier, service = %service.name, %error, "wake on arrival: cannot read the task counts; the scaler's next tick decides");
                return Wake::Failed;
            }
        };
        match outcome {
            Wake::AskedForFirstTask => match self.first_task.ask_for_first_task(service).await {
                Ok(()) => {
                    tracing::info!(%tier, service = %service.name, "wake on arrival: the tier had no task; asked for its first one");
                    Wake::AskedForFirstTask
                }
                Err(error) => {
                    tracing::warn!(%tier, service = %service.name, %error, "wake on arrival: cannot ask for the first task; the scaler's next tick does");
                    Wake::Failed
                }
            },
            Wake::StartsFailing => {
                tracing::warn!(%tier, service = %service.name, "wake on arrival: the tier's tasks keep failing to start; not woken");
                Wake::StartsFailing
            }
            other => other,
        }
    }
}

#[async_trait]
impl ArrivalWake for WakeOnArrival {
    async fn enqueued(&self, tier: Tier) {
        self.arrived(tier).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! The wake on arrival: once per tier for a burst, never on a tier that has tasks or keeps failing to start, and
    //! the scaler's next decisions after it neither double the capacity nor undo it while work waits.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;

    use super::{Wake, WakeOnArrival, wakes};
    use crate::contract::tier::{PerTier, Tier};
    use crate::ports::START_FAILURES_TO_STOP;
    use crate::ports::{FirstTask, FleetError, QueueCounts, Service, ServiceTasks, TaskCounts};
    use crate::scaler::decision::{Readings, ScalingPolicy, decide};

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
        assert_eq!(
            wake.arrived(Tier::Large).await,
            Wake::Awake,
            "the fake's one count is already 1: looked at, not asked"
        );
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
}
