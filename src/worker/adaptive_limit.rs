//! The worker's adaptive in-flight limit: how many requests it keeps inside the engine at once. It grows while the
//! engine has free generation slots and shrinks as soon as requests queue inside it beyond a small allowance, read
//! from the engine's /metrics; without them, from the time per generated token (additive increase, multiplicative
//! decrease when it rises well above its best).
//! - Start: `INITIAL_LIMIT` (8). On an engine that keeps abandoned requests (llama.cpp), which could not give back
//!   what it queued ahead of a high-priority request: the slots it has free, as its /props reports them, else 1
//!   (`AdaptiveLimit::start_on`).
//! - Readings: the worker reads the engine's load every 250 ms, every 50 ms in the first climb
//!   (`worker::limit_loop`).
//! - Growth, up to the ceiling: while every slot of the limit was used and fewer requests wait than the allowance
//!   (none when it is 0 or 1); on llama.cpp only once the engine counts every request sent. In the first climb
//!   (until requests first queue) the limit doubles each reading on an engine that drops abandoned requests (8 to 256
//!   in five readings), else grows by half (8 to 256 within nine); after it, by one.
//! - Queueing: once more requests wait than the allowance while the limit is used, it becomes the most the engine
//!   ran in its last `CAPACITY_READINGS` (8) readings (our share of it, beside another client), plus the allowance:
//!   at once in the first climb, later after two such readings in a row. It then holds for `HOLD_READINGS` (30 s)
//!   and tries one more.
//! - Allowance: one request queued per 16 running on an engine that drops abandoned requests (none below 16 slots);
//!   one on llama.cpp while it runs two or more (`QUEUE_ALLOWANCE_DIVISOR`).
//! - Without gauges: every `LATENCY_WINDOW` (8) finished requests, the limit grows while time per token stays within
//!   `LATENCY_TOLERANCE` (2×) of its best, and is multiplied by `BACKOFF` (0.8) above it. It settles near the slots
//!   (0.6–2.1× of them in the tests below).

use crate::contract::engine_load::EngineLoad;

/// The limit a worker starts at (then raised by half, or doubled, while the engine takes everything, up to the
/// ceiling).
pub(crate) const INITIAL_LIMIT: usize = 8;
/// Readings of the engine's load after a decrease before the limit grows again: at one reading every 250 ms,
/// 30 s with nothing queued inside the engine, then one more request to see if it still has room.
const HOLD_READINGS: u32 = 120;
/// Time per token above this multiple of its best means requests are queueing inside the engine. Above
/// the slowdown a full batch costs per token (a GPU decodes a full batch somewhat slower than one request).
const LATENCY_TOLERANCE: f64 = 2.0;
/// Requests finished between two decisions of the latency fallback.
const LATENCY_WINDOW: usize = 8;
/// On queueing seen through latency, the limit is multiplied by this.
const BACKOFF: f64 = 0.8;
/// Readings of the engine's load its capacity is taken from: the most it ran in any of them. One reading can
/// catch the engine between a request that finished and the next it starts (llama.cpp has shown 3 of 8 slots
/// running with 17 requests waiting), and taking that for its capacity would hold the limit far below it.
const CAPACITY_READINGS: usize = 8;

/// The limit keeps a queue inside the engine, so a slot that frees refills from it at the engine's next scheduling
/// step, not after the worker's round trip to store a result and start the next request (llama.cpp starts its next
/// decode step as soon as a request ends: a request sent on that release waits a whole step). On an engine that drops
/// abandoned requests: one request per this many it runs (none below 16 slots). Those have generated nothing, so a
/// high-priority request moves ahead of them at once (see `RequestRun::wait_for_slot`), and any beyond the limit are pulled
/// back; below 16 slots, a high-priority request that finds none free takes a young request's slot instead, and one
/// queued there would leave it waiting inside the engine for up to a whole generation. On an engine that keeps
/// abandoned requests (llama.cpp), where no slot can be taken back: one request while it runs two or more. A
/// high-priority request then takes the second slot that frees instead of the first, and both free within one
/// generation.
const QUEUE_ALLOWANCE_DIVISOR: u64 = 16;

#[derive(Debug, Clone)]
pub(crate) struct AdaptiveLimit {
    limit: usize,
    ceiling: usize,
    /// Raised by half while true (doubled on an engine that drops abandoned requests: there the requests it queues
    /// beyond the limit are pulled back for free); cleared the first time the engine queues, then the limit grows
    /// one at a time.
    slow_start: bool,
    /// Requests queued inside the engine at the previous reading: after the slow start, a decrease needs two
    /// readings that agree, so a request caught between its arrival and the engine's next scheduling step is not
    /// taken for queueing.
    previous_waiting: u64,
    /// Readings left before the limit may grow again after a decrease: it stays where the engine had no queue.
    hold: u32,
    /// Requests the engine ran at each of the last `CAPACITY_READINGS` readings (a ring, oldest overwritten).
    recent_running: [u64; CAPACITY_READINGS],
    /// How many readings so far: where the next one goes in `recent_running`.
    readings: usize,
    /// The least mean time per token (seconds) of a latency window. Against a best that moved with the limit,
    /// a queue that never drains would look normal; it is learned again only when the limit is down to 1 and
    /// still above it (the workload changed).
    best_per_token: Option<f64>,
    /// Time per token of the requests finished since the last latency decision.
    window: Vec<f64>,
}

impl AdaptiveLimit {
    /// A limit starting at `INITIAL_LIMIT` (at most `ceiling`), never above `ceiling`, never below 1.
    pub(crate) fn new(ceiling: usize) -> Self {
        let ceiling = ceiling.max(1);
        AdaptiveLimit {
            limit: INITIAL_LIMIT.min(ceiling),
            ceiling,
            slow_start: true,
            previous_waiting: 0,
            hold: 0,
            recent_running: [0; CAPACITY_READINGS],
            readings: 0,
            best_per_token: None,
            window: Vec::with_capacity(LATENCY_WINDOW),
        }
    }

    /// A limit that stays at `limit` (at least 1).
    pub(crate) fn fixed(limit: usize) -> Self {
        AdaptiveLimit { limit: limit.max(1), ..Self::new(limit) }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Whether the limit is still in its first climb (raised by half each reading, until the engine queues).
    pub(crate) fn climbing(&self) -> bool {
        self.slow_start
    }

    /// The limit for the first requests, from the engine's load before any is sent and the `slots` it reports. An
    /// engine that keeps the requests queued inside it (it cannot give one back: llama.cpp) would hold a backlog sent
    /// at the initial limit in its own queue, ahead of any high-priority request that comes next, and a worker starts
    /// in front of a backlog at every scale from zero. There the limit starts at the slots it has free, all sent at
    /// once as a client driving the engine directly would (climbing from one cost llama.cpp about a tenth of its
    /// throughput, where a fixed limit did not: BENCHMARKS.md P1), and then grows one at a time; an engine that does
    /// not say is filled from one by the slow start. On an engine that drops abandoned requests, those queued beyond
    /// the limit are pulled back: the initial limit stands.
    pub(crate) fn start_on(&mut self, load: EngineLoad, slots: Option<u64>) -> usize {
        if load.drops_abandoned {
            return self.limit;
        }
        match slots {
            Some(slots) => {
                let free = slots.saturating_sub(load.running + load.waiting);
                self.limit = usize::try_from(free).unwrap_or(usize::MAX).clamp(1, self.ceiling);
                self.slow_start = false;
            }
            None => self.limit = 1,
        }
        self.limit
    }

    /// One reading of the engine's load, `in_flight` the most of our requests that ran at once since the previous
    /// reading (so a limit filled between two readings counts as used, whatever requests were being replaced at
    /// either); returns the new limit. With more requests waiting inside the engine than its queue allowance (in
    /// the slow start at once, then in two readings in a row) while the limit is in use, the limit becomes our
    /// share of the engine's capacity plus the allowance, and holds for `HOLD_READINGS`. With fewer waiting and
    /// every slot of the limit used, the limit grows; on an engine that keeps abandoned requests, only once the
    /// engine counts every one of ours: a reading taken before it counted the requests just sent says nothing of
    /// its free slots, and what it queues beyond them could not be taken back (an engine that drops them gives them
    /// back for free, and one that answers within microseconds would never be seen holding them). Waiting seen
    /// while the limit is not in use is another client's (a second worker pool on the same engine), and changes
    /// nothing.
    pub(crate) fn on_engine_load(&mut self, load: EngineLoad, in_flight: usize) -> usize {
        let waiting = if self.slow_start { load.waiting } else { load.waiting.min(self.previous_waiting) };
        self.previous_waiting = load.waiting;
        self.recent_running[self.readings % CAPACITY_READINGS] = load.running;
        self.readings += 1;
        self.hold = self.hold.saturating_sub(1);
        let allowance = queue_allowance(load);
        let limit_used = in_flight >= self.limit;
        if waiting > allowance && limit_used {
            self.slow_start = false;
            self.hold = HOLD_READINGS;
            let capacity = self.recent_running.iter().copied().max().unwrap_or_default();
            let allowance = usize::try_from(allowance).unwrap_or(0);
            self.limit = share_of_capacity(capacity, load, in_flight).saturating_add(allowance).clamp(1, self.limit);
        } else if load.waiting < allowance.max(1) && limit_used && self.hold == 0 && free_slots_seen(load, in_flight) {
            self.grow(load.drops_abandoned);
        }
        self.limit
    }

    /// One finished request, for an engine without load gauges: its engine time and the tokens it generated.
    /// Every `LATENCY_WINDOW` requests, decides on their mean time per token; returns the limit.
    pub(crate) fn on_latency(&mut self, seconds: f64, completion_tokens: u64, in_flight: usize) -> usize {
        self.window.push(seconds / completion_tokens.max(1) as f64);
        if self.window.len() < LATENCY_WINDOW {
            return self.limit;
        }
        let mean = self.window.iter().sum::<f64>() / self.window.len() as f64;
        self.window.clear();
        let best = match self.best_per_token {
            Some(best) if self.limit > 1 || mean <= best * LATENCY_TOLERANCE => best.min(mean),
            _ => mean,
        };
        self.best_per_token = Some(best);
        if mean > best * LATENCY_TOLERANCE {
            self.slow_start = false;
            self.limit = ((self.limit as f64 * BACKOFF).floor() as usize).max(1);
        } else if in_flight + 1 >= self.limit {
            self.grow(false);
        }
        self.limit
    }

    fn grow(&mut self, doubling: bool) {
        let grown = match (self.slow_start, doubling) {
            (true, true) => self.limit * 2,
            (true, false) => self.limit + self.limit.div_ceil(2),
            (false, _) => self.limit + 1,
        };
        self.limit = grown.min(self.ceiling);
    }
}

/// The requests the limit may keep waiting inside the engine (see `QUEUE_ALLOWANCE_DIVISOR`).
fn queue_allowance(load: EngineLoad) -> u64 {
    if load.drops_abandoned { load.running / QUEUE_ALLOWANCE_DIVISOR } else { u64::from(load.running >= 2) }
}

/// Whether a reading without a queue shows free slots: on an engine that keeps abandoned requests, only if it
/// counts at least as many requests as we have in flight (it has seen every one we sent).
fn free_slots_seen(load: EngineLoad, in_flight: usize) -> bool {
    load.drops_abandoned || load.running + load.waiting >= in_flight as u64
}

/// With requests waiting the engine is full: its `capacity` is what it runs (the most of its recent readings;
/// requests still waiting at a later reading are not taken off again). Ours is the share of it our requests make
/// of everything sent to the engine; all of it when we are its only client.
fn share_of_capacity(capacity: u64, load: EngineLoad, in_flight: usize) -> usize {
    let sent = load.running + load.waiting;
    let share = capacity.saturating_mul(in_flight as u64) / sent.max(1);
    usize::try_from(share.min(capacity)).unwrap_or(usize::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! The adaptive limit against a model engine of `slots` generation slots kept saturated by a backlog: from the engine's
    //! gauges it settles at the slots and one request queued inside the engine, never above the ceiling; from latency alone
    //! it settles near them (within the latency tolerance); transient waiting is not taken for queueing.

    use super::{AdaptiveLimit, INITIAL_LIMIT};
    use crate::contract::engine_load::EngineLoad;

    /// What an engine with `slots` slots reports while `in_flight` requests are sent to it.
    fn load(slots: usize, in_flight: usize) -> EngineLoad {
        let running = in_flight.min(slots);
        EngineLoad { running: running as u64, waiting: (in_flight - running) as u64, ..EngineLoad::default() }
    }

    /// Readings of a saturated engine (the worker always fills its limit); the limits after each.
    fn settle_on_gauges(slots: usize, ceiling: usize, readings: usize) -> Vec<usize> {
        let mut limit = AdaptiveLimit::new(ceiling);
        (0..readings)
            .map(|_| {
                let in_flight = limit.limit();
                limit.on_engine_load(load(slots, in_flight), in_flight)
            })
            .collect()
    }

    #[test]
    fn from_the_engine_gauges_the_limit_settles_at_the_engine_slots_and_one_queued() {
        for slots in [2, 8, 64, 256] {
            let limits = settle_on_gauges(slots, 1024, 600);
            assert!(limits[30..].iter().all(|&l| l == slots + 1), "{slots} slots: {limits:?}");
        }
        // One slot: a request queued behind it would make a high-priority one wait two whole generations. The limit
        // tries one more after each hold, and takes it back two readings later.
        let limits = settle_on_gauges(1, 1024, 600);
        let above = limits[30..].iter().filter(|&&l| l > 1).count();
        assert!(limits[30..].iter().all(|&l| l <= 2) && above * 50 <= limits.len(), "1 slot: {limits:?}");
    }

    #[test]
    fn the_limit_grows_to_256_slots_within_a_few_readings() {
        let limits = settle_on_gauges(256, 1024, 12);
        let first_full = limits.iter().position(|&l| l >= 256).unwrap();
        assert!(first_full <= 9, "{limits:?}");
    }

    #[test]
    fn on_an_engine_that_drops_abandoned_requests_the_first_climb_doubles_and_settles_at_the_slots() {
        let mut limit = AdaptiveLimit::new(1024);
        let mut limits = Vec::new();
        for _ in 0..8 {
            let in_flight = limit.limit();
            let reading = EngineLoad { drops_abandoned: true, ..load(256, in_flight) };
            limits.push(limit.on_engine_load(reading, in_flight));
        }
        assert_eq!(limits[..6], [16, 32, 64, 128, 256, 512], "doubled each reading until the engine queues");
        assert_eq!(limits[6..], [272, 272], "then its capacity and a queue of one in 16: {limits:?}");
    }

    #[test]
    fn on_an_engine_that_drops_abandoned_requests_a_queue_of_one_in_16_is_kept_inside_it_and_none_below_16_slots() {
        for (slots, queued) in [(8, 0), (16, 1), (64, 4), (256, 16)] {
            let mut limit = AdaptiveLimit::new(1024);
            let mut limits = Vec::new();
            for _ in 0..400 {
                let in_flight = limit.limit();
                limits.push(
                    limit.on_engine_load(EngineLoad { drops_abandoned: true, ..load(slots, in_flight) }, in_flight),
                );
            }
            let settled = &limits[30..];
            assert!(
                settled.iter().all(|&l| l >= slots + queued && l <= slots + queued + 1),
                "{slots} slots: {limits:?}"
            );
        }
        // An engine that keeps abandoned requests gets a queue of one, whatever its slots (none could be taken back).
        assert!(settle_on_gauges(256, 1024, 400)[30..].iter().all(|&l| l == 257));
    }

    #[test]
    fn the_ceiling_bounds_the_limit_and_the_start() {
        assert!(settle_on_gauges(256, 32, 40).iter().all(|&l| l <= 32));
        assert_eq!(AdaptiveLimit::new(4).limit(), 4);
        assert_eq!(AdaptiveLimit::new(1024).limit(), INITIAL_LIMIT);
        assert_eq!(AdaptiveLimit::new(0).limit(), 1);
    }

    #[test]
    fn the_limit_does_not_grow_while_it_is_not_used() {
        let mut limit = AdaptiveLimit::new(256);
        for _ in 0..20 {
            limit.on_engine_load(load(256, 3), 3);
        }
        assert_eq!(limit.limit(), INITIAL_LIMIT);
    }

    #[test]
    fn after_the_slow_start_waiting_seen_in_one_reading_only_does_not_shrink_the_limit() {
        let mut limit = AdaptiveLimit::new(64);
        limit.on_engine_load(EngineLoad { running: 6, waiting: 2, ..EngineLoad::default() }, 8);
        let before = limit.limit();
        assert_eq!(before, INITIAL_LIMIT - 1, "in the slow start, one reading is enough: 6 slots and one queued");
        limit.on_engine_load(EngineLoad { running: 3, waiting: 0, ..EngineLoad::default() }, 5);
        limit.on_engine_load(EngineLoad { running: 3, waiting: 2, ..EngineLoad::default() }, 5);
        assert_eq!(limit.limit(), before);
        limit.on_engine_load(EngineLoad { running: 3, waiting: 0, ..EngineLoad::default() }, 5);
        assert_eq!(limit.limit(), before);
        limit.on_engine_load(EngineLoad { running: 7, waiting: 4, ..EngineLoad::default() }, 8);
        limit.on_engine_load(EngineLoad { running: 7, waiting: 3, ..EngineLoad::default() }, 8);
        assert_eq!(
            limit.limit(),
            6,
            "two readings agreeing that requests wait: our 8 of the 10 sent of its 7 slots, and one"
        );
    }

    #[test]
    fn on_an_engine_that_keeps_abandoned_requests_a_reading_before_it_counted_our_latest_does_not_grow_the_limit() {
        // 8 requests in flight, but llama.cpp (which keeps abandoned requests) counts 5: the other 3 have not reached
        // its scheduler yet.
        let mut limit = AdaptiveLimit::new(2048);
        limit.on_engine_load(EngineLoad { running: 5, waiting: 0, ..EngineLoad::default() }, 8);
        assert_eq!(limit.limit(), INITIAL_LIMIT, "free slots are only free once the engine has every request we sent");
        limit.on_engine_load(EngineLoad { running: 8, waiting: 0, ..EngineLoad::default() }, 8);
        assert_eq!(limit.limit(), 12, "once it counts all 8 and none waits, it may have more slots");
        // An engine that drops abandoned requests gives an overshoot back for free: its readings are taken as they come.
        let mut limit = AdaptiveLimit::new(2048);
        limit.on_engine_load(EngineLoad { running: 0, waiting: 0, drops_abandoned: true }, 8);
        assert_eq!(limit.limit(), 16);
    }

    #[test]
    fn one_reading_of_fewer_requests_running_than_the_engine_runs_does_not_take_the_limit_below_its_capacity() {
        // llama.cpp's 8 slots, seen full; then one reading between requests: 3 running, 17 waiting, 25 in flight.
        let mut limit = AdaptiveLimit::new(2048);
        limit.on_engine_load(load(8, 8), 8);
        limit.on_engine_load(load(8, 12), 12);
        assert_eq!(limit.limit(), 9);
        for _ in 0..2 {
            limit.on_engine_load(EngineLoad { running: 3, waiting: 17, ..EngineLoad::default() }, 25);
        }
        assert_eq!(limit.limit(), 9, "the most it ran in its recent readings is its capacity (and one queued)");
    }

    /// Seconds per token on a model GPU engine: 10 ms at batch 1, 30 % slower at a full batch, and a request that
    /// waits for a slot waits for the requests ahead of it.
    fn seconds_per_token(slots: usize, in_flight: usize) -> f64 {
        let running = in_flight.min(slots) as f64;
        let batch = 0.010 * (1.0 + 0.3 * running / slots as f64);
        batch * (in_flight as f64 / slots as f64).max(1.0)
    }

    #[test]
    fn from_latency_alone_the_limit_settles_near_the_engine_slots() {
        for slots in [8, 64, 256] {
            let mut limit = AdaptiveLimit::new(1024);
            let mut history = Vec::new();
            for _ in 0..4000 {
                let in_flight = limit.limit();
                history.push(limit.on_latency(48.0 * seconds_per_token(slots, in_flight), 48, in_flight));
            }
            let settled = &history[3000..];
            let mean = settled.iter().sum::<usize>() as f64 / settled.len() as f64;
            assert!(mean >= slots as f64 * 0.6 && mean <= slots as f64 * 2.1, "{slots} slots: mean limit {mean}");
        }
    }

    #[test]
    fn from_latency_a_slower_workload_is_learned_again_once_the_limit_is_down_to_one() {
        let mut limit = AdaptiveLimit::new(64);
        for _ in 0..64 {
            let in_flight = limit.limit();
            limit.on_latency(48.0 * seconds_per_token(64, in_flight), 48, in_flight);
        }
        // Every request now takes ten times longer (say, long prompts): the limit falls to 1, then grows again.
        let mut history = Vec::new();
        for _ in 0..2000 {
            let in_flight = limit.limit();
            history.push(limit.on_latency(480.0 * seconds_per_token(64, in_flight), 48, in_flight));
        }
        assert!(history.contains(&1), "{history:?}");
        assert!(*history.last().unwrap() >= 32, "{:?}", &history[history.len() - 50..]);
    }

    #[test]
    fn requests_still_waiting_at_later_readings_do_not_shrink_the_limit_again() {
        // A slow engine: the 4 requests above its 8 slots wait for several readings before a slot frees.
        let mut limit = AdaptiveLimit::new(64);
        limit.on_engine_load(load(8, 8), 8);
        assert_eq!(limit.limit(), 12);
        for _ in 0..20 {
            limit.on_engine_load(load(8, 12), 12);
        }
        assert_eq!(limit.limit(), 9, "the limit is what the engine runs, its capacity, and one queued, not less");
    }

    #[test]
    fn two_pools_on_one_engine_each_take_their_share_and_an_idle_one_is_left_alone() {
        // 32 slots, 64 requests sent to the engine by two pools: 32 running, 32 waiting.
        let mut busy = AdaptiveLimit::new(64);
        for _ in 0..3 {
            let in_flight = busy.limit();
            busy.on_engine_load(
                EngineLoad { running: in_flight as u64, waiting: 0, ..EngineLoad::default() },
                in_flight,
            );
        }
        assert_eq!(busy.limit(), 27);
        busy.on_engine_load(EngineLoad { running: 32, waiting: 32, ..EngineLoad::default() }, 27);
        assert_eq!(busy.limit(), 14, "its 27 of the 64 sent: its share of the 32 slots, and one queued");
        let mut idle = AdaptiveLimit::new(64);
        for _ in 0..5 {
            idle.on_engine_load(EngineLoad { running: 32, waiting: 32, ..EngineLoad::default() }, 0);
        }
        assert_eq!(idle.limit(), INITIAL_LIMIT, "another pool's queue does not shrink an unused limit");
    }

    #[test]
    fn in_front_of_a_backlog_an_engine_that_keeps_what_it_queues_is_filled_from_one_and_never_queues_more_than_one() {
        // A 2-slot llama.cpp at a worker's start, a backlog waiting: every reading finds the limit filled.
        let mut limit = AdaptiveLimit::new(1024);
        assert_eq!(limit.start_on(load(2, 0), None), 1, "starts at one, not at {INITIAL_LIMIT}");
        let limits: Vec<usize> = (0..40)
            .map(|_| {
                let in_flight = limit.limit();
                limit.on_engine_load(load(2, in_flight), in_flight)
            })
            .collect();
        assert_eq!(limits[..2], [2, 3], "its slots within two readings, then one queued inside it: {limits:?}");
        assert!(limits.iter().all(|&l| l <= 3), "never more than one queued inside it: {limits:?}");

        let mut dropping = AdaptiveLimit::new(1024);
        let reading = EngineLoad { drops_abandoned: true, ..load(2, 0) };
        assert_eq!(
            dropping.start_on(reading, Some(2)),
            INITIAL_LIMIT,
            "an engine that gives queued requests back starts as before"
        );
    }

    #[test]
    fn an_engine_that_reports_its_slots_is_filled_at_once_and_then_keeps_one_queued() {
        // An 8-slot llama.cpp (/props) at a worker's start, a backlog waiting.
        let mut limit = AdaptiveLimit::new(1024);
        assert_eq!(limit.start_on(load(8, 0), Some(8)), 8, "every slot at once");
        let limits: Vec<usize> = (0..40)
            .map(|_| {
                let in_flight = limit.limit();
                limit.on_engine_load(load(8, in_flight), in_flight)
            })
            .collect();
        assert!(limits.iter().all(|&l| l == 9), "one queued inside it from the first reading, never more: {limits:?}");

        // Another client runs 3 of them: only the free ones; and never above the ceiling.
        let busy = EngineLoad { running: 3, ..EngineLoad::default() };
        assert_eq!(AdaptiveLimit::new(1024).start_on(busy, Some(8)), 5);
        assert_eq!(AdaptiveLimit::new(4).start_on(load(8, 0), Some(8)), 4);
        let full = EngineLoad { running: 8, waiting: 2, ..EngineLoad::default() };
        assert_eq!(AdaptiveLimit::new(1024).start_on(full, Some(8)), 1, "at least one");
    }
}
