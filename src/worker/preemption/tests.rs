//! Which running request gives its slot up, and when.

use std::time::Duration;

use super::Preemption;

/// Whether `preemptible` has been asked to give its slot up, without waiting.
async fn was_asked(preemptible: &mut super::Preemptible) -> bool {
    tokio::time::timeout(Duration::from_millis(20), preemptible.asked()).await.is_ok()
}

#[tokio::test]
async fn a_high_priority_request_takes_the_youngest_slot_and_each_is_asked_once() {
    let preemption = Preemption::new();
    let mut oldest = preemption.register();
    let mut youngest = preemption.register();
    assert!(preemption.for_high_priority(), "before any request finished, any age will do");
    assert!(was_asked(&mut youngest).await);
    assert!(!was_asked(&mut oldest).await);
    assert!(preemption.for_high_priority());
    assert!(was_asked(&mut oldest).await);
    assert!(!preemption.for_high_priority(), "nothing left to ask");
    assert!(!preemption.any_running());
}

#[tokio::test]
async fn a_request_past_half_the_typical_engine_time_keeps_its_slot() {
    let preemption = Preemption::new();
    preemption.observe(Duration::from_millis(80));
    assert_eq!(preemption.patience(), Duration::from_millis(20));
    let mut running = preemption.register();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!preemption.for_high_priority(), "it has run 50 ms of a typical 80: waiting costs less");
    assert!(!was_asked(&mut running).await);
    assert!(preemption.any_running());
    let mut young = preemption.register();
    assert!(preemption.for_high_priority(), "a request that just started loses little");
    assert!(was_asked(&mut young).await);
}

#[tokio::test]
async fn the_typical_engine_time_moves_with_each_finished_request() {
    let preemption = Preemption::new();
    assert_eq!(preemption.patience(), Duration::ZERO, "no patience before any request finished");
    preemption.observe(Duration::from_millis(400));
    preemption.observe(Duration::from_millis(900));
    assert_eq!(preemption.patience(), Duration::from_millis(125), "(0.8 × 400 + 0.2 × 900) ÷ 4");
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
    assert!(was_asked(&mut third).await && was_asked(&mut second).await);
    assert!(!was_asked(&mut first).await);
    assert_eq!(preemption.pull_back(5), 1, "only one is left");
    assert!(was_asked(&mut first).await);
}
