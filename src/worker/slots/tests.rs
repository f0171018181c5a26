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
    tokio::time::timeout(std::time::Duration::from_secs(1), slots.freed()).await.expect("woken by the slot given back");
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
