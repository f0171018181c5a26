//! `gpuinfer simulate`'s Spot model (`scaler::simulate::spot`): a launch without Spot capacity waits for it, or with
//! the fallback for its bound and an On-Demand task; Spot hours are billed at their fraction; an interrupted task
//! drains and is replaced with nothing lost; and on the bursty trace, Spot with the fallback meets the goal the
//! model was built for (at most half the sample's $ per million requests, p95 at most 1.2 × On-Demand's).

use gpuinfer::{
    simulate::HOUR, simulate::MINUTE, simulate::Millis, simulate::capacity::Capacity, simulate::capacity::SpotModel,
    simulate::event_loop, simulate::event_loop::Run, simulate::policy::Policy, simulate::policy::PolicyKind,
    simulate::report::Summary, simulate::spot,
};

use crate::simulate::{bursty, small_tier, timing};

const CALM: SpotModel = SpotModel {
    price_fraction: 0.35,
    interruptions_per_hour: 0.0,
    shortage: 0.0,
    shortage_wait: 30 * MINUTE,
    fallback_after: None,
};

fn ours(capacity: Capacity, arrivals: &[Millis]) -> Run {
    let model = small_tier();
    event_loop::run_on(&model, &Policy::new(PolicyKind::Ours, &model), &timing(26 * HOUR), arrivals, &capacity)
}

#[test]
fn a_launch_without_spot_capacity_waits_for_it_or_with_the_fallback_for_the_bound_and_an_on_demand_task() {
    let model = small_tier();
    let served_in = |run: Run| run.latencies[0];
    let starved = SpotModel { shortage: 1.0, ..CALM };
    let warm = model.cold_start.total() + model.service_time;
    assert_eq!(served_in(ours(Capacity::OnDemand, &[0])), warm);
    assert_eq!(served_in(ours(Capacity::Spot(starved), &[0])), 30 * MINUTE + warm, "Spot's wait, then its cold start");
    let fallback = ours(Capacity::Spot(starved.with_fallback(5 * MINUTE)), &[0]);
    assert_eq!(served_in(fallback.clone()), 5 * MINUTE + warm, "the bound, then an On-Demand task's cold start");
    assert!(fallback.spot_time < fallback.task_time, "the fallback's hours are On-Demand");
}

#[test]
fn spot_hours_cost_their_fraction_of_on_demand() {
    let (model, arrivals) = (small_tier(), bursty(3));
    let priced = |capacity| spot::priced(&model, &capacity, &timing(26 * HOUR), &arrivals);
    let (on_demand, spot) = (priced(Capacity::OnDemand), priced(Capacity::Spot(CALM)));
    assert!(on_demand.dollars > 0.0);
    assert!((spot.dollars - 0.35 * on_demand.dollars).abs() < 1e-6, "{} vs {}", spot.dollars, on_demand.dollars);
    assert_eq!(spot.latency, on_demand.latency, "Spot without shortage or interruption serves as On-Demand does");
}

#[test]
fn an_interrupted_task_drains_and_is_replaced_with_nothing_lost() {
    let arrivals = bursty(4);
    let run = ours(Capacity::Spot(SpotModel { interruptions_per_hour: 3.0, ..CALM }), &arrivals);
    assert!(run.interruptions > 0, "interrupted at 3 a task-hour");
    assert_eq!((run.unfinished, run.expired), (0, 0));
    assert_eq!(run.latencies.len(), arrivals.len(), "every request served");
}

/// The goal, on the model's default assumptions (`gpuinfer simulate`'s, every one stated in its output).
#[test]
fn on_the_bursty_trace_spot_with_fallback_costs_under_half_the_sample_at_a_p95_near_on_demands() {
    let (model, arrivals) = (small_tier(), bursty(1));
    let defaults = SpotModel { interruptions_per_hour: 0.0003, shortage: 0.2, ..CALM };
    let timing = timing(26 * HOUR);
    let sample = event_loop::run(&model, &Policy::new(PolicyKind::Sample, &model), &timing, &arrivals);
    let sample = Summary::of(&sample, model.price_per_hour);
    let on_demand = spot::priced(&model, &Capacity::OnDemand, &timing, &arrivals);
    let fallback = spot::priced(&model, &Capacity::Spot(defaults.with_fallback(5 * MINUTE)), &timing, &arrivals);
    let per_request = |s: &Summary| s.dollars / s.requests as f64;
    assert!(per_request(&fallback) <= 0.5 * per_request(&sample), "{fallback:?} vs {sample:?}");
    let p95 = |s: &Summary| s.latency.p95.unwrap() as f64;
    assert!(p95(&fallback) <= 1.2 * p95(&on_demand), "{fallback:?} vs {on_demand:?}");
}
