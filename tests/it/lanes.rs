//! Priority lanes, slot by slot: the share as a table, then a worker over the embedded lanes and the engine
//! simulator (which records the order requests reach it): high first, one slot in five to normal, no free slot
//! left idle, no lane waiting behind the other's long poll.

use std::time::{Duration, Instant};

use crate::support::rig::{Rig, config, rig};
use gpuinfer::{Priority, Queue, RequestId, Status, WorkerConfig, simulator::Behavior};
use serde_json::json;

/// A request whose prompt names its lane.
fn request(lane: Priority, i: usize) -> (RequestId, serde_json::Value) {
    let id = RequestId::new_v4();
    (id, json!({"requestId": id, "prompt": format!("{lane} {i}"), "maxTokens": 4, "priority": lane}))
}

/// A worker with `slots`, started once `high` and `normal` requests wait in their lanes.
async fn preloaded(slots: usize, high: usize, normal: usize, latency: Duration) -> (Rig, Vec<RequestId>) {
    let ids = std::sync::Mutex::new(Vec::new());
    let behavior = Behavior { latency, ..Behavior::default() };
    let worker = WorkerConfig { concurrency: slots, ..config() };
    let rig = Rig::start(behavior, worker, None, |lanes| {
        let ids = &ids;
        async move {
            for (lane, count) in [(Priority::High, high), (Priority::Normal, normal)] {
                for i in 0..count {
                    let (id, body) = request(lane, i);
                    lanes.get(lane).send(&body.to_string()).await.unwrap();
                    ids.lock().unwrap().push(id);
                }
            }
        }
    })
    .await;
    (rig, ids.into_inner().unwrap())
}

/// The lane of each request, in the order the engine received them: "H" or "N".
fn lane_order(rig: &Rig) -> String {
    rig.engine.prompts().iter().map(|p| if p.starts_with("high") { 'H' } else { 'N' }).collect()
}

#[tokio::test]
async fn one_slot_fills_from_high_first_and_gives_every_fifth_start_to_normal() {
    let (rig, ids) = preloaded(1, 10, 10, Duration::from_millis(20)).await;
    for id in ids {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    assert_eq!(lane_order(&rig), "HHHHNHHHHNHHNNNNNNNN");
    assert_eq!(rig.engine.max_in_flight(), 1);
    rig.stop().await;
}

#[tokio::test]
async fn under_sustained_high_load_normal_still_gets_its_share_of_every_slot() {
    let (rig, ids) = preloaded(4, 40, 10, Duration::from_millis(40)).await;
    for id in ids {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    // Requests started together reach the engine in any order, so the share is checked over windows.
    let order = lane_order(&rig);
    let normals = order[..40].matches('N').count();
    assert!((6..=10).contains(&normals), "about one in five of the first 40 starts is normal (8): {order}");
    for window in order.as_bytes()[..40].windows(10) {
        assert!(window.contains(&b'N'), "normal waits no more than ten starts while high has work: {order}");
    }
    assert_eq!(&order[..4], "HHHH", "the first free slots all go to high: {order}");
    assert_eq!(rig.engine.max_in_flight(), 4, "every slot used, never more");
    rig.stop().await;
}

#[tokio::test]
async fn with_one_lane_empty_the_other_fills_every_slot() {
    for lane in Priority::ALL {
        let (high, normal) = if lane == Priority::High { (9, 0) } else { (0, 9) };
        let (rig, ids) = preloaded(3, high, normal, Duration::from_millis(300)).await;
        for id in ids {
            assert_eq!(rig.result(id).await.status, Status::Success);
        }
        assert_eq!(rig.engine.max_in_flight(), 3, "{lane} alone fills all three slots");
        rig.stop().await;
    }
}

#[tokio::test]
async fn a_long_poll_on_one_lane_never_holds_up_the_other() {
    let worker = WorkerConfig { concurrency: 1, wait_time: Duration::from_secs(15), ..config() };
    let rig = rig(Behavior::default(), worker).await;
    tokio::time::sleep(Duration::from_millis(300)).await; // both lanes are now long-polled, one slot free
    for lane in [Priority::Normal, Priority::High, Priority::Normal] {
        let (id, body) = request(lane, 0);
        let sent = Instant::now();
        rig.send_to(lane, &body).await;
        assert_eq!(rig.result(id).await.status, Status::Success);
        assert!(sent.elapsed() < Duration::from_secs(2), "{lane} waited {:?} behind a long poll", sent.elapsed());
    }
    rig.stop().await;
}

#[tokio::test]
async fn both_lanes_answering_at_once_for_one_free_slot_never_overfill_it() {
    let behavior = Behavior { latency: Duration::from_millis(700), ..Behavior::default() };
    let worker = WorkerConfig { concurrency: 1, wait_time: Duration::from_secs(15), ..config() };
    let rig = rig(behavior, worker).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (high, high_body) = request(Priority::High, 0);
    let (normal, normal_body) = request(Priority::Normal, 0);
    rig.send_to(Priority::High, &high_body).await;
    rig.send_to(Priority::Normal, &normal_body).await;
    for id in [high, normal] {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    assert_eq!(rig.engine.max_in_flight(), 1, "the second message waited for the slot");
    // When the normal message takes the slot first, the high-priority one takes it back at once (see
    // `preemption`): the normal request then runs a second time, and only its first, abandoned call is aborted.
    let reruns = rig.engine.calls() - 2;
    assert!(reruns <= 1, "each ran once, the normal one at most twice: {} calls", rig.engine.calls());
    assert_eq!(rig.engine.aborted(), reruns, "a second run only after the first gave its slot up");
    rig.drained().await;
    rig.stop().await;
}

/// Sends `count` requests to `lane` now; their ids.
async fn send_now(rig: &Rig, lane: Priority, count: usize) -> Vec<RequestId> {
    let mut ids = Vec::new();
    for i in 0..count {
        let (id, body) = request(lane, i);
        rig.send_to(lane, &body).await;
        ids.push(id);
    }
    ids
}

#[tokio::test]
async fn a_high_priority_request_takes_the_slot_of_a_young_normal_one_which_runs_again_once() {
    let behavior = Behavior { latency: Duration::from_millis(1500), slots: 2, ..Behavior::default() };
    let worker = WorkerConfig { concurrency: 2, ..config() };
    let rig = rig(behavior, worker).await;
    let normals = send_now(&rig, Priority::Normal, 2).await;
    rig.engine_called(2).await;
    let sent = Instant::now();
    let high = send_now(&rig, Priority::High, 1).await;
    assert_eq!(rig.result(high[0]).await.status, Status::Success);
    assert!(
        sent.elapsed() < Duration::from_millis(2400),
        "the high-priority request started at once (1.5 s), not after a normal one (3 s): {:?}",
        sent.elapsed()
    );
    assert_eq!(rig.engine.aborted(), 1, "one normal request gave its slot up");
    for id in normals {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    assert_eq!(rig.engine.calls(), 4, "the normal request that gave its slot up ran again, once");
    assert_eq!(rig.engine.max_in_flight(), 2, "never more requests in the engine than its slots");
    rig.stop().await;
}

/// Requests that all started together finish together: a high-priority request that comes halfway through them
/// would wait most of a request for a slot. It takes the youngest's slot at once instead (the typical engine time,
/// 1.5 s, is known from the first two requests); waiting a quarter of that and then sparing a request past half of
/// it, it finished after 2.3 s.
#[tokio::test]
async fn a_high_priority_request_halfway_through_requests_that_started_together_takes_a_slot_at_once() {
    let behavior = Behavior { latency: Duration::from_millis(1500), slots: 2, ..Behavior::default() };
    let rig = rig(behavior, WorkerConfig { concurrency: 2, ..config() }).await;
    for id in send_now(&rig, Priority::Normal, 2).await {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    let normals = send_now(&rig, Priority::Normal, 2).await;
    rig.engine_called(4).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let sent = Instant::now();
    let high = send_now(&rig, Priority::High, 1).await;
    assert_eq!(rig.result(high[0]).await.status, Status::Success);
    assert!(sent.elapsed() < Duration::from_millis(2000), "it started at once (1.5 s): {:?}", sent.elapsed());
    assert_eq!(rig.engine.aborted(), 1, "the youngest normal request gave its slot up");
    for id in normals {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    rig.stop().await;
}

/// A request pulled back from the engine's queue lost nothing, so it may still give its slot up to a high-priority
/// request once: here both requests running are such, started together halfway before the high one comes. Spared
/// as requests displaced once already, they held the high one up until the first finished, 2.3 s in all.
#[tokio::test]
async fn a_request_pulled_back_from_the_engines_queue_may_still_give_its_slot_up_to_a_high_priority_one() {
    let behavior = Behavior { latency: Duration::from_millis(1500), slots: 2, ..Behavior::default() };
    let rig = rig(behavior, WorkerConfig { concurrency: 4, ..config() }).await;
    let normals = send_now(&rig, Priority::Normal, 4).await;
    rig.engine_called(6).await; // 4, then the 2 pulled back, together as the first 2 finish
    tokio::time::sleep(Duration::from_millis(700)).await;
    let sent = Instant::now();
    let high = send_now(&rig, Priority::High, 1).await;
    assert_eq!(rig.result(high[0]).await.status, Status::Success);
    assert!(sent.elapsed() < Duration::from_millis(2000), "it started at once (1.5 s): {:?}", sent.elapsed());
    assert_eq!(rig.engine.aborted(), 1, "one pulled-back request gave its slot up");
    for id in normals {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    rig.stop().await;
}

/// A request that gave its slot up to a high-priority one, then was canceled while it waited for another, never
/// reaches the engine again: the worker checks for a stored document before every engine call, not only the first.
#[tokio::test]
async fn a_request_canceled_after_giving_its_slot_up_is_not_sent_to_the_engine_again() {
    let behavior = Behavior { latency: Duration::from_millis(1500), slots: 1, ..Behavior::default() };
    let rig = rig(behavior, WorkerConfig { concurrency: 1, ..config() }).await;
    let normal = send_now(&rig, Priority::Normal, 1).await;
    rig.engine_called(1).await;
    let high = send_now(&rig, Priority::High, 1).await;
    let engine = &rig.engine;
    crate::support::eventually(Duration::from_secs(5), "the normal request to give its slot up", || async {
        (engine.aborted() == 1).then_some(())
    })
    .await;
    let canceled = rig.cancel(normal[0]).await;
    assert_eq!(rig.result(high[0]).await.status, Status::Success);
    rig.drained().await;
    assert_eq!(rig.engine.calls(), 2, "the canceled request was not sent again: {:?}", rig.engine.prompts());
    assert_eq!(rig.document(normal[0]).await, canceled, "the cancel stays the request's document");
    rig.stop().await;
}

/// llama.cpp keeps running a request whose client hung up (measured on the local engine): aborting one would free
/// nothing and run it twice, so on such an engine a high-priority request waits for the next slot.
#[tokio::test]
async fn on_an_engine_that_keeps_abandoned_requests_no_request_gives_its_slot_up() {
    let behavior =
        Behavior { latency: Duration::from_millis(1000), slots: 2, keeps_abandoned: true, ..Behavior::default() };
    let worker = WorkerConfig { concurrency: 2, ..config() };
    let rig = rig(behavior, worker).await;
    let normals = send_now(&rig, Priority::Normal, 4).await;
    rig.engine_called(2).await;
    let sent = Instant::now();
    let high = send_now(&rig, Priority::High, 1).await;
    assert_eq!(rig.result(high[0]).await.status, Status::Success);
    assert!(sent.elapsed() >= Duration::from_millis(1500), "it waited for the next slot: {:?}", sent.elapsed());
    for id in normals {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    assert_eq!(rig.engine.aborted(), 0);
    assert_eq!(rig.engine.calls(), 5, "every request reached the engine once");
    rig.stop().await;
}

#[tokio::test]
async fn requests_the_engine_queues_beyond_the_limit_are_pulled_back_from_it() {
    // The limit starts at 8 on a 2-slot engine: 6 requests wait inside the engine until the first reading.
    let behavior = Behavior { latency: Duration::from_millis(800), slots: 2, ..Behavior::default() };
    let worker = WorkerConfig { concurrency: 8, ..config() };
    let rig = rig(behavior, worker).await;
    let normals = send_now(&rig, Priority::Normal, 8).await;
    rig.engine_called(14).await; // 8, then the 6 pulled back, one by one as slots free
    for id in normals {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    assert_eq!(rig.engine.aborted(), 0, "only requests waiting inside the engine were pulled back");
    assert_eq!(rig.engine.calls(), 14);
    rig.stop().await;
}

/// On an engine of 32 slots the limit keeps two requests queued inside it (one in 16; see `adaptive_limit`). A
/// high-priority request moves ahead of them at once, without waiting its patience: they are pulled back, having generated nothing, and it reaches the engine, to wait there for the next
/// generation slot only.
#[tokio::test]
async fn a_high_priority_request_moves_ahead_of_the_requests_queued_inside_the_engine() {
    let latency = Duration::from_millis(3000);
    let behavior = Behavior { latency, slots: 32, ..Behavior::default() };
    let worker = WorkerConfig { concurrency: 64, ..config() };
    let rig = rig(behavior, worker).await;
    let normals = send_now(&rig, Priority::Normal, 100).await;
    // The first climb sends 64 and pulls 30 back; they and 2 more are sent when the first 32 finish. Then, with a
    // typical engine time known, wait until 2 have waited inside the engine for two of the worker's readings.
    rig.engine_called(96).await;
    let mut steady_since = Instant::now();
    while steady_since.elapsed() < Duration::from_millis(500) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if rig.engine.waiting() != 2 {
            steady_since = Instant::now();
        }
    }
    let sent = Instant::now();
    let high = send_now(&rig, Priority::High, 1).await;
    while !rig.engine.prompts().iter().any(|p| p.starts_with("high")) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reached_engine = sent.elapsed();
    assert_eq!(rig.result(high[0]).await.status, Status::Success);
    let waited = sent.elapsed();
    for id in normals {
        assert_eq!(rig.result(id).await.status, Status::Success);
    }
    assert!(reached_engine < Duration::from_millis(400), "it reached the engine at once: {reached_engine:?}");
    assert_eq!(rig.engine.aborted(), 0, "no generation was lost: only queued requests were pulled back");
    assert!(waited < latency * 2 + Duration::from_millis(500), "the next slot's wait and its own run: {waited:?}");
    rig.stop().await;
}
