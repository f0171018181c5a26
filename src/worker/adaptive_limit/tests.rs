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
            limits
                .push(limit.on_engine_load(EngineLoad { drops_abandoned: true, ..load(slots, in_flight) }, in_flight));
        }
        let settled = &limits[30..];
        assert!(settled.iter().all(|&l| l >= slots + queued && l <= slots + queued + 1), "{slots} slots: {limits:?}");
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
        busy.on_engine_load(EngineLoad { running: in_flight as u64, waiting: 0, ..EngineLoad::default() }, in_flight);
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
