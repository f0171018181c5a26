//! The event loop of one tier under one policy. Requests join a FIFO queue and leave it when a running task
//! has a free slot (or expire after the retention); tasks start cold and serve `concurrency` requests at once;
//! every scaler period the alarms act on the metric's past datapoints, ECS starts or stops tasks to match the
//! desired count, and the scaler publishes a new datapoint. Under our policy, an arrival on a tier at zero asks for
//! a task at once; a warm window moves the scalable target's minimum at the ticks it starts and ends. On Spot
//! (`spot`), a launch may wait for capacity (with the fallback, an On-Demand task serves meanwhile) and a serving
//! task may be interrupted: it drains, and a new one starts.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::autoscaling::ScalableTarget;
use super::capacity::{Capacity, SpotModel};
use super::policy::{Observation, Policy, PolicyKind};
use super::tier_model::TierModel;
use super::time::{HOUR, Millis};

/// The seed of Spot's chances (a launch without capacity, the time to an interruption).
const SPOT_SEED: u64 = 56;
use crate::ports::{QueueCounts, TaskCounts};

/// The clock of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The scaler's schedule and the alarms' period.
    pub period: Millis,
    /// Messages older than this are dropped by the queue (SQS MessageRetentionPeriod).
    pub retention: Millis,
    /// Where the run stops; work still queued or running then counts as unfinished.
    pub end: Millis,
}

/// The state at one scaler tick, for plots and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at: Millis,
    /// Tasks billed: starting, serving or finishing their last requests.
    pub tasks: u32,
    pub desired: u32,
    /// Requests waiting for a task.
    pub(crate) backlog: u64,
}

/// Everything a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub samples: Vec<Sample>,
    /// Arrival to completion of every served request, sorted.
    pub latencies: Vec<Millis>,
    pub(crate) requests: u64,
    pub unfinished: u64,
    pub expired: u64,
    /// Sum of every task's lifetime, cold start included.
    pub task_time: Millis,
    pub(crate) time_at_zero: Millis,
    /// When the first task was asked for; None if none was.
    pub first_task_asked: Option<Millis>,
    /// Of `task_time`, the Spot tasks' (fallback tasks are On-Demand).
    pub spot_time: Millis,
    /// Spot interruption notices.
    pub interruptions: u64,
}

/// Both policies' runs on the same arrivals.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub sample: Run,
    pub ours: Run,
}

impl Comparison {
    pub fn get(&self, kind: PolicyKind) -> &Run {
        match kind {
            PolicyKind::Sample => &self.sample,
            PolicyKind::Ours => &self.ours,
        }
    }
}

/// Runs the AWS sample's policy and ours on one tier over the same `arrivals` (sorted times).
pub fn compare(model: &TierModel, timing: &Timing, arrivals: &[Millis]) -> Comparison {
    let run_with = |kind| run(model, &Policy::new(kind, model), timing, arrivals);
    Comparison { sample: run_with(PolicyKind::Sample), ours: run_with(PolicyKind::Ours) }
}

/// Runs one tier under one policy over `arrivals` (sorted times), on On-Demand capacity.
pub fn run(model: &TierModel, policy: &Policy, timing: &Timing, arrivals: &[Millis]) -> Run {
    run_on(model, policy, timing, arrivals, &Capacity::OnDemand)
}

/// Runs one tier under one policy over `arrivals` (sorted times) on `capacity`; Spot's chances drawn from a fixed
/// seed, so a run repeats.
pub fn run_on(model: &TierModel, policy: &Policy, timing: &Timing, arrivals: &[Millis], capacity: &Capacity) -> Run {
    let mut simulation = Simulation::new(model, policy, timing, capacity);
    let mut requests = 0;
    for &at in arrivals.iter().filter(|&&at| at <= timing.end) {
        simulation.schedule(at, Event::Arrival);
        requests += 1;
    }
    simulation.schedule(0, Event::Tick);
    while let Some(Reverse((at, event))) = simulation.events.pop() {
        simulation.advance(at);
        match event {
            Event::Finished { task, arrived } => simulation.finish(task, arrived),
            Event::Ready { task } => simulation.ready(task),
            Event::SpotStarved { task } => simulation.fall_back(task),
            Event::FallbackEnds { task } | Event::Interrupted { task } => simulation.stop(task, &event),
            Event::Arrival => simulation.arrive(),
            Event::Tick => simulation.tick(),
        }
        simulation.dispatch();
    }
    simulation.advance(timing.end);
    simulation.into_run(requests)
}

/// At one instant, completions free slots before new tasks and arrivals use them; the tick comes last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Finished { task: usize, arrived: Millis },
    Ready { task: usize },
    // Spot: a task still waiting for capacity after the bound; its fallback's end; an interruption notice.
    SpotStarved { task: usize },
    FallbackEnds { task: usize },
    Interrupted { task: usize },
    Arrival,
    Tick,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskKind {
    OnDemand,
    Spot,
    /// On-Demand, started for a Spot task that waits for capacity; outside the desired count.
    Fallback,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskState {
    Starting,
    Serving,
    /// Stopped by a scale-in while busy: takes no new request and stops after its last one.
    Draining,
    Stopped(Millis),
}

#[derive(Debug, Clone)]
struct Task {
    launched: Millis,
    kind: TaskKind,
    /// A Spot task's fallback task, while it has one.
    fallback: Option<usize>,
    state: TaskState,
    /// Requests in flight.
    busy: u32,
    /// Time with a request in flight in this scaler period, up to `busy_since` (the last time `busy` left 0).
    busy_time: Millis,
    busy_since: Millis,
}

impl Task {
    /// Counts toward the desired count.
    fn is_active(&self) -> bool {
        self.kind != TaskKind::Fallback && matches!(self.state, TaskState::Starting | TaskState::Serving)
    }

    fn is_billed(&self) -> bool {
        !matches!(self.state, TaskState::Stopped(_))
    }

    /// The share of the period ending `now` this task had a request in flight; starts the next period.
    fn take_busy_share(&mut self, now: Millis, period: Millis) -> f64 {
        if self.busy > 0 {
            self.busy_time += now - self.busy_since;
            self.busy_since = now;
        }
        let share = (self.busy_time as f64 / period as f64).min(1.0);
        self.busy_time = 0;
        share
    }
}

struct Simulation<'a> {
    model: &'a TierModel,
    policy: &'a Policy,
    timing: &'a Timing,
    now: Millis,
    events: BinaryHeap<Reverse<(Millis, Event)>>,
    waiting: VecDeque<Millis>,
    tasks: Vec<Task>,
    target: ScalableTarget,
    seen: Seen,
    spot: Option<SpotPlay>,
}

/// Spot as a run plays it: its assumptions and the seeded draws of its chances.
struct SpotPlay {
    model: SpotModel,
    rng: fastrand::Rng,
}

/// What a run has seen so far: the samples, every served request's latency, the requests dropped, the time with no
/// task.
#[derive(Default)]
struct Seen {
    samples: Vec<Sample>,
    latencies: Vec<Millis>,
    expired: u64,
    time_at_zero: Millis,
    interruptions: u64,
    /// The scaling metric's datapoints, as the alarms read them.
    datapoints: Vec<f64>,
}

impl<'a> Simulation<'a> {
    fn new(model: &'a TierModel, policy: &'a Policy, timing: &'a Timing, capacity: &Capacity) -> Self {
        Simulation {
            model,
            policy,
            timing,
            now: 0,
            events: BinaryHeap::new(),
            waiting: VecDeque::new(),
            tasks: Vec::new(),
            target: ScalableTarget::new(model.scaling.min_tasks(), model.scaling.max_tasks()),
            seen: Seen::default(),
            spot: match capacity {
                Capacity::OnDemand => None,
                Capacity::Spot(spot) => Some(SpotPlay { model: *spot, rng: fastrand::Rng::with_seed(SPOT_SEED) }),
            },
        }
    }

    fn schedule(&mut self, at: Millis, event: Event) {
        if at <= self.timing.end {
            self.events.push(Reverse((at, event)));
        }
    }

    /// Moves the clock to `at`, counting the time spent with no task at all.
    fn advance(&mut self, at: Millis) {
        if !self.tasks.iter().any(Task::is_billed) {
            self.seen.time_at_zero += at - self.now;
        }
        self.now = at;
    }

    fn finish(&mut self, task: usize, arrived: Millis) {
        self.seen.latencies.push(self.now - arrived);
        let now = self.now;
        if let Some(task) = self.tasks.get_mut(task) {
            task.busy -= 1;
            if task.busy == 0 {
                task.busy_time += now - task.busy_since;
                if task.state == TaskState::Draining {
                    task.state = TaskState::Stopped(now);
                }
            }
        }
    }

    /// A request joins the queue; under our policy, a tier at zero is woken at once.
    fn arrive(&mut self) {
        self.waiting.push_back(self.now);
        if self.policy.wakes_on_arrival() && self.target.desired() == 0 {
            self.target.wake();
            self.reconcile();
        }
    }

    fn ready(&mut self, index: usize) {
        let Some(task) = self.tasks.get_mut(index).filter(|task| task.state == TaskState::Starting) else { return };
        task.state = TaskState::Serving;
        let (kind, fallback) = (task.kind, task.fallback);
        let Some(SpotPlay { model: spot, rng }) = self.spot.as_mut().filter(|_| kind == TaskKind::Spot) else { return };
        let (bound, rate, draw) = (spot.fallback_after, spot.interruptions_per_hour, rng.f64());
        if let (Some(fallback), Some(bound)) = (fallback, bound) {
            self.schedule(self.now + bound, Event::FallbackEnds { task: fallback });
        }
        if rate > 0.0 {
            // Exponentially distributed time to the next interruption.
            let hours = -(1.0 - draw).ln() / rate;
            self.schedule(self.now + (hours * HOUR as f64) as Millis, Event::Interrupted { task: index });
        }
    }

    /// A Spot task still waiting for capacity: an On-Demand task starts for it.
    fn fall_back(&mut self, index: usize) {
        if self.tasks[index].state != TaskState::Starting || self.tasks[index].fallback.is_some() {
            return;
        }
        let fallback = self.launch(TaskKind::Fallback, self.model.cold_start.total());
        self.tasks[index].fallback = Some(fallback);
    }

    /// Stops a task for `why` (its Spot task served the bound, or an interruption notice): it drains; an
    /// interruption is counted, and the next reconcile starts the task that replaces it.
    fn stop(&mut self, index: usize, why: &Event) {
        let task = &mut self.tasks[index];
        if !matches!(task.state, TaskState::Serving | TaskState::Starting) {
            return;
        }
        self.seen.interruptions += u64::from(matches!(why, Event::Interrupted { .. }));
        task.state = if task.busy > 0 { TaskState::Draining } else { TaskState::Stopped(self.now) };
        self.reconcile();
    }

    /// A new task of `kind`, serving after `start`; its index.
    fn launch(&mut self, kind: TaskKind, start: Millis) -> usize {
        let now = self.now;
        self.tasks.push(Task {
            launched: now,
            kind,
            fallback: None,
            state: TaskState::Starting,
            busy: 0,
            busy_time: 0,
            busy_since: now,
        });
        let index = self.tasks.len() - 1;
        self.schedule(self.now + start, Event::Ready { task: index });
        index
    }

    /// Hands waiting requests to serving tasks with free slots, dropping those past the retention.
    fn dispatch(&mut self) {
        while let Some(&arrived) = self.waiting.front() {
            if self.now - arrived >= self.timing.retention {
                self.waiting.pop_front();
                self.seen.expired += 1;
                continue;
            }
            let concurrency = self.model.concurrency;
            let Some(index) = self.tasks.iter().position(|t| t.state == TaskState::Serving && t.busy < concurrency)
            else {
                return;
            };
            self.waiting.pop_front();
            let task = &mut self.tasks[index];
            if task.busy == 0 {
                task.busy_since = self.now;
            }
            task.busy += 1;
            self.schedule(self.now + self.model.service_time, Event::Finished { task: index, arrived });
        }
    }

    /// The scaler's minute: a warm window's scheduled action, then alarms act on past datapoints, ECS follows, a
    /// new datapoint is published.
    fn tick(&mut self) {
        if let Some(window) = &self.model.warm_window {
            let floor = u32::from(window.contains(self.now));
            self.target.set_min(self.model.scaling.min_tasks().max(floor));
        }
        for rule in [&self.policy.scale_out, &self.policy.scale_in] {
            if let Some(change) = rule.triggered(&self.seen.datapoints) {
                self.target.apply(self.now, change, rule.policy.cooldown);
            }
        }
        self.reconcile();
        let observation = self.observe();
        self.seen.datapoints.push(self.policy.metric(&observation));
        self.seen.samples.push(Sample {
            at: self.now,
            tasks: self.tasks.iter().filter(|t| t.is_billed()).count() as u32,
            desired: self.target.desired(),
            backlog: self.waiting.len() as u64,
        });
        self.schedule(self.now + self.timing.period, Event::Tick);
    }

    /// Starts or stops tasks to match the desired count; stops tasks still starting first (newest first),
    /// then idle ones, then busy ones, which finish their requests before they stop.
    fn reconcile(&mut self) {
        let desired = self.target.desired() as usize;
        let mut active: Vec<usize> = (0..self.tasks.len()).filter(|&i| self.tasks[i].is_active()).collect();
        for _ in active.len()..desired {
            let cold = self.model.cold_start.total();
            let Some(SpotPlay { model: spot, rng }) = self.spot.as_mut() else {
                self.launch(TaskKind::OnDemand, cold);
                continue;
            };
            let (starved, wait, bound) = (rng.f64() < spot.shortage, spot.shortage_wait, spot.fallback_after);
            let index = self.launch(TaskKind::Spot, cold + if starved { wait } else { 0 });
            if let (true, Some(bound)) = (starved, bound) {
                self.schedule(self.now + bound, Event::SpotStarved { task: index });
            }
        }
        let excess = active.len().saturating_sub(desired);
        active.sort_by_key(|&i| {
            let task = &self.tasks[i];
            (task.state == TaskState::Serving, task.busy, Reverse(task.launched))
        });
        for index in active.into_iter().take(excess) {
            let task = &mut self.tasks[index];
            task.state = if task.busy > 0 { TaskState::Draining } else { TaskState::Stopped(self.now) };
            let fallback = task.fallback.take().map(|index| &mut self.tasks[index]);
            if let Some(fallback) = fallback.filter(|f| matches!(f.state, TaskState::Starting | TaskState::Serving)) {
                fallback.state = if fallback.busy > 0 { TaskState::Draining } else { TaskState::Stopped(self.now) };
            }
        }
    }

    /// What the scaler reads now; starts the next utilization period of every task.
    fn observe(&mut self) -> Observation {
        let (now, period) = (self.now, self.timing.period);
        // The service's own tasks: a fallback task belongs to another service.
        let shares: Vec<(bool, f64)> = self
            .tasks
            .iter_mut()
            .map(|t| (t.state == TaskState::Serving && t.kind != TaskKind::Fallback, t.take_busy_share(now, period)))
            .collect();
        let serving: Vec<f64> = shares.into_iter().filter(|&(serving, _)| serving).map(|(_, share)| share).collect();
        let running = serving.len() as u32;
        let in_flight: u32 = self.tasks.iter().map(|t| t.busy).sum();
        Observation {
            queue: QueueCounts { visible: self.waiting.len() as u64, in_flight: u64::from(in_flight), delayed: 0 },
            tasks: TaskCounts { running, desired: self.target.desired(), failed_starts: 0 },
            gpu_utilization: (running > 0).then(|| 100.0 * serving.iter().sum::<f64>() / f64::from(running)),
        }
    }

    fn into_run(mut self, requests: u64) -> Run {
        let end = self.timing.end;
        let in_flight: u64 = self.tasks.iter().map(|t| u64::from(t.busy)).sum();
        let lifetime = |t: &Task| match t.state {
            TaskState::Stopped(at) => at - t.launched,
            _ => end - t.launched,
        };
        let task_time = self.tasks.iter().map(lifetime).sum();
        let spot_time = self.tasks.iter().filter(|t| t.kind == TaskKind::Spot).map(lifetime).sum();
        self.seen.latencies.sort_unstable();
        Run {
            samples: self.seen.samples,
            latencies: self.seen.latencies,
            requests,
            unfinished: self.waiting.len() as u64 + in_flight,
            expired: self.seen.expired,
            task_time,
            time_at_zero: self.seen.time_at_zero,
            first_task_asked: self.tasks.first().map(|t| t.launched),
            spot_time,
            interruptions: self.seen.interruptions,
        }
    }
}
