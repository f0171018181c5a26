//! The simulator: seeded traces, the alarm and step-scaling rules, and the two policies on the AWS sample's failure
//! modes (a lone request, a tier that never goes back to zero) and on bursty traffic; `gpuinfer simulate`.

use gpuinfer::contract::tier::Tier;
use gpuinfer::scaler::ScalingPolicy;
use gpuinfer::scaler::simulate::TierModel;
use gpuinfer::scaler::simulate::autoscaling::ScalableTarget;
use gpuinfer::scaler::simulate::event_loop::{self, Run, Timing};
use gpuinfer::scaler::simulate::policy::{LARGEST_STEP, Policy, PolicyKind};
use gpuinfer::scaler::simulate::report::Summary;
use gpuinfer::scaler::simulate::trace::{self, Traffic};
use gpuinfer::scaler::simulate::{HOUR, MINUTE, Millis, SECOND};

fn small_tier() -> TierModel {
    TierModel {
        tier: Tier::Small,
        cold_start: 7 * MINUTE,
        service_time: 5 * SECOND,
        concurrency: 8,
        price_per_hour: 1.01,
        scaling: ScalingPolicy::new(5, 0, 10, 80.0).unwrap(),
        scale_in_periods: 5,
        scale_in_cooldown: 300 * SECOND,
        gpu_memory_when_running: 90.0,
    }
}

fn timing(end: Millis) -> Timing {
    Timing { period: MINUTE, retention: 24 * HOUR, end }
}

/// When the run last went to zero tasks and stayed there; None if it ends with tasks.
fn settled_at_zero(run: &Run) -> Option<Millis> {
    let last_busy = run.samples.iter().rposition(|s| s.tasks > 0);
    match last_busy {
        None => Some(0),
        Some(index) => run.samples.get(index + 1).map(|s| s.at),
    }
}

fn bursty(seed: u64) -> Vec<Millis> {
    let traffic = Traffic::Bursty { rate: 600.0, burst_minutes: 10.0, gap_minutes: 110.0 };
    let arrivals = trace::generate(traffic, 24 * HOUR, &mut fastrand::Rng::with_seed(seed));
    arrivals.into_iter().map(|(at, _)| at).collect()
}

#[test]
fn a_lone_request_is_never_served_by_the_sample_and_served_by_ours_which_then_returns_to_zero() {
    let model = small_tier();
    let comparison = event_loop::compare(&model, &timing(26 * HOUR), &[0]);

    let sample = &comparison.sample;
    assert!(sample.latencies.is_empty(), "the sample serves nothing: 1/5 = 0.2 never crosses 1.0");
    assert_eq!(sample.expired, 1, "the request expires after the 1-day retention");
    assert!(sample.samples.iter().all(|s| s.tasks == 0));

    let ours = &comparison.ours;
    assert_eq!(ours.latencies.len(), 1);
    let latency = ours.latencies[0];
    assert!(
        latency <= MINUTE + model.cold_start + model.service_time,
        "one period, a cold start, the request: {latency}"
    );
    let idle_window = (model.scale_in_periods as u64 + 2) * MINUTE;
    let zero = settled_at_zero(ours).expect("ours returns to zero");
    assert!(zero <= latency + idle_window, "back to zero at {zero} ms, served at {latency} ms");
    assert_eq!(ours.task_time, zero - MINUTE, "one task, from the first alarm to the scale-in");
}

#[test]
fn the_sample_never_returns_to_zero_under_the_90_percent_memory_reading_and_ours_does() {
    let model = small_tier();
    let burst: Vec<Millis> = (0..10).map(|i| i * SECOND).collect();
    let comparison = event_loop::compare(&model, &timing(12 * HOUR), &burst);

    let sample = &comparison.sample;
    assert_eq!(sample.latencies.len(), 10);
    let first_task = sample.samples.iter().position(|s| s.tasks > 0).unwrap();
    assert!(sample.samples[first_task..].iter().all(|s| s.tasks > 0), "the sample never scales back to zero");
    assert_eq!(sample.samples.last().unwrap().tasks, 10, "it climbs to MaxTaskCount and stays");

    let ours = &comparison.ours;
    assert_eq!(ours.latencies.len(), 10);
    assert!(settled_at_zero(ours).unwrap() < HOUR);
    assert!(ours.task_time * 10 < sample.task_time);

    let honest_memory = TierModel { gpu_memory_when_running: 5.0, ..small_tier() };
    let sample_without_the_reading =
        event_loop::run(&honest_memory, &Policy::new(PolicyKind::Sample, &honest_memory), &timing(12 * HOUR), &burst);
    assert!(settled_at_zero(&sample_without_the_reading).is_some(), "the memory reading is what holds the sample up");
}

#[test]
fn on_bursty_traffic_ours_serves_everything_for_no_more_than_the_sample() {
    for seed in [1, 2, 3] {
        let arrivals = bursty(seed);
        let model = small_tier();
        let comparison = event_loop::compare(&model, &timing(26 * HOUR), &arrivals);
        let (theirs, ours) = (
            Summary::of(&comparison.sample, model.price_per_hour),
            Summary::of(&comparison.ours, model.price_per_hour),
        );
        assert_eq!(ours.served, arrivals.len() as u64, "random seed {seed}");
        assert_eq!(ours.unfinished + ours.expired, 0);
        assert!(
            ours.dollars <= theirs.dollars,
            "random seed {seed}: ours ${} vs sample ${}",
            ours.dollars,
            theirs.dollars
        );
        assert!(settled_at_zero(&comparison.ours).is_some(), "ours ends the day at zero");
    }
}

#[test]
fn runs_are_deterministic_for_a_random_seed() {
    assert_eq!(bursty(7), bursty(7));
    assert_ne!(bursty(7), bursty(8));
    let model = small_tier();
    let arrivals = bursty(7);
    assert_eq!(
        event_loop::compare(&model, &timing(26 * HOUR), &arrivals),
        event_loop::compare(&model, &timing(26 * HOUR), &arrivals)
    );

    let raw = trace::generate(Traffic::Poisson { rate: 120.0 }, HOUR, &mut fastrand::Rng::with_seed(3));
    let split = |seed| trace::split_by_tier(&raw, &Tier::ALL, 0.25, &mut fastrand::Rng::with_seed(seed));
    let (first, again) = (split(5), split(5));
    assert_eq!((first.small.clone(), first.large.clone()), (again.small, again.large));
    assert_eq!(first.small.len() + first.large.len(), raw.len());
    assert!(!first.large.is_empty() && first.large.len() < first.small.len());
}

#[test]
fn generators_keep_their_shape() {
    let mut rng = fastrand::Rng::with_seed(11);
    let poisson = trace::generate(Traffic::Poisson { rate: 600.0 }, 10 * HOUR, &mut rng);
    assert!((5_700..6_300).contains(&poisson.len()), "{}", poisson.len());
    assert!(poisson.windows(2).all(|w| w[0].0 <= w[1].0));

    let diurnal = trace::generate(Traffic::Diurnal { rate: 600.0, peak_hour: 14.0 }, 24 * HOUR, &mut rng);
    let in_hour = |h: u64| diurnal.iter().filter(|(at, _)| (h * HOUR..(h + 1) * HOUR).contains(at)).count();
    assert!(in_hour(14) > 1_000 && in_hour(2) < 20, "peak {} trough {}", in_hour(14), in_hour(2));

    let bursts =
        trace::generate(Traffic::Bursty { rate: 600.0, burst_minutes: 10.0, gap_minutes: 110.0 }, 24 * HOUR, &mut rng);
    let quiet_minutes = (0..24 * 60).filter(|m| !bursts.iter().any(|(at, _)| at / MINUTE == *m)).count();
    assert!(quiet_minutes > 20 * 60, "mostly silent: {quiet_minutes} quiet minutes");
}

#[test]
fn csv_traces_name_seconds_and_optionally_a_tier() {
    let arrivals = trace::parse_csv("seconds,tier\n# a comment\n\n90,large\n1.5\n30, small\n").unwrap();
    assert_eq!(arrivals, [(1_500, None), (30_000, Some(Tier::Small)), (90_000, Some(Tier::Large))]);
    let error = trace::parse_csv("1\nsoon\n").unwrap_err();
    assert_eq!(error.line, 2);
    assert!(trace::parse_csv("1,medium\n").unwrap_err().problem.contains("medium"));
    let split = trace::split_by_tier(&arrivals, &[Tier::Small], 0.5, &mut fastrand::Rng::with_seed(1));
    assert_eq!((split.small, split.large), (vec![1_500, 30_000], vec![90_000]), "a named tier wins");
}

#[test]
fn our_steps_change_capacity_by_exactly_metric_minus_one() {
    let ours = Policy::new(PolicyKind::Ours, &small_tier());
    for difference in -(LARGEST_STEP + 3)..=LARGEST_STEP + 3 {
        let metric = 1.0 + difference as f64;
        let expected = difference.clamp(-LARGEST_STEP, LARGEST_STEP);
        let out = ours.scale_out.policy.adjustment(metric - ours.scale_out.alarm.threshold);
        let scale_in = ours.scale_in.policy.adjustment(metric - ours.scale_in.alarm.threshold);
        match difference {
            0 => assert!(!ours.scale_out.alarm.in_alarm(&[metric]) && !ours.scale_in.alarm.in_alarm(&[metric; 5])),
            d if d > 0 => assert_eq!(out, Some(expected), "metric {metric}"),
            _ => assert_eq!(scale_in, Some(expected), "metric {metric}"),
        }
    }
    let sample = Policy::new(PolicyKind::Sample, &small_tier());
    assert_eq!(sample.scale_out.policy.adjustment(8.0 - 1.0), Some(1), "the sample adds one task for 40 queued");
    assert!(!sample.scale_in.alarm.in_alarm(&[0.5; 5]), "and scales in only below 0.1");
    assert!(!sample.scale_in.alarm.in_alarm(&[0.0; 4]), "for the whole window");
}

#[test]
fn the_scalable_target_follows_application_auto_scaling_cooldowns() {
    let mut target = ScalableTarget::new(0, 10);
    target.apply(0, 2, 300 * SECOND);
    assert_eq!(target.desired(), 2);
    target.apply(60 * SECOND, 2, 300 * SECOND);
    assert_eq!(target.desired(), 2, "the same step within the cooldown adds nothing");
    target.apply(120 * SECOND, 3, 300 * SECOND);
    assert_eq!(target.desired(), 3, "a larger step within the cooldown adds the difference");
    target.apply(500 * SECOND, 20, 0);
    assert_eq!(target.desired(), 10, "never above the maximum");
    target.apply(600 * SECOND, -4, 300 * SECOND);
    target.apply(700 * SECOND, -4, 300 * SECOND);
    assert_eq!(target.desired(), 6, "scale-in waits for its cooldown");
    target.apply(700 * SECOND, 1, 0);
    assert_eq!(target.desired(), 7, "a scale-out does not");
    target.apply(900 * SECOND, -20, 300 * SECOND);
    assert_eq!(target.desired(), 0, "never below the minimum");
}

#[test]
fn the_command_prints_the_table_and_writes_the_plot() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("bursty.svg");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(["simulate", "--trace", "bursty", "--random-seed", "4", "--plot"])
        .arg(&plot)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    for expected in [
        "| | small · sample | small · ours | large · sample | large · ours |",
        "| cost |",
        "| completion latency p99 |",
    ] {
        assert!(stdout.contains(expected), "{expected} in\n{stdout}");
    }
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("small tier: tasks") && svg.contains("large tier: backlog"));

    let csv = dir.path().join("one.csv");
    std::fs::write(&csv, "0,small\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(["simulate", "--trace", "csv", "--tier", "small", "--hours", "25", "--csv"])
        .arg(&csv)
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains("| never served: expired after the retention | 1 | 0 |"), "{stdout}");
}
