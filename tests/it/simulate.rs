//! The simulator: seeded traces, the alarm and step-scaling rules, and the two policies on the AWS sample's failure
//! modes (a lone request, a tier that never goes back to zero) and on bursty traffic; our wake on arrival, warm
//! windows and idle windows; `gpuinfer simulate` and what it prints.

use gpuinfer::{
    ScalingPolicy, Tier, simulate::HOUR, simulate::MINUTE, simulate::Millis, simulate::SECOND, simulate::TierModel,
    simulate::autoscaling::ScalableTarget, simulate::cold_start::ColdStart, simulate::event_loop,
    simulate::event_loop::Run, simulate::event_loop::Timing, simulate::policy::LARGEST_STEP, simulate::policy::Policy,
    simulate::policy::PolicyKind, simulate::report::Summary, simulate::trace, simulate::trace::Traffic,
    simulate::warm_window::WarmWindow,
};

pub(crate) fn small_tier() -> TierModel {
    TierModel {
        tier: Tier::Small,
        cold_start: ColdStart::from_seconds([360.0, 30.0, 25.0, 5.0]),
        service_time: 5 * SECOND,
        concurrency: 8,
        price_per_hour: 1.01,
        scaling: ScalingPolicy::new(5, 0, 10, 80.0).unwrap(),
        scale_in_periods: 5,
        scale_in_cooldown: 300 * SECOND,
        gpu_memory_when_running: 90.0,
        warm_window: None,
    }
}

pub(crate) fn timing(end: Millis) -> Timing {
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

pub(crate) fn bursty(seed: u64) -> Vec<Millis> {
    let traffic = Traffic::Bursty { rate: 600.0, burst_minutes: 10.0, gap_minutes: 110.0 };
    let arrivals = trace::generate(traffic, 24 * HOUR, &mut fastrand::Rng::with_seed(seed));
    arrivals.into_iter().map(|(at, _)| at).collect()
}

/// Arrival to result when a task is asked for at the arrival: the cold start's own phases, then the request.
fn at_the_hardwares_speed(model: &TierModel) -> Millis {
    model.cold_start.total() + model.service_time
}

#[test]
fn a_lone_request_is_never_served_by_the_sample_and_served_by_ours_which_then_returns_to_zero() {
    let model = small_tier();
    let comparison = event_loop::compare(&model, &timing(26 * HOUR), &[0]);

    let sample = &comparison.sample;
    assert!(sample.latencies.is_empty(), "the sample serves nothing: 1/5 = 0.2 never crosses 1.0");
    assert_eq!(sample.expired, 1, "the request expires after the 1-day retention");
    assert!(sample.samples.iter().all(|s| s.tasks == 0));
    assert_eq!(sample.first_task_asked, None, "the sample has no wake on arrival: it never asks for a task");

    let ours = &comparison.ours;
    assert_eq!(ours.latencies.len(), 1);
    let latency = ours.latencies[0];
    assert!(
        latency.abs_diff(at_the_hardwares_speed(&model)) <= 10 * SECOND,
        "the cold start's phases and the request, nothing waiting for the scaler: {latency} ms"
    );
    let idle_window = (model.scale_in_periods as u64 + 2) * MINUTE;
    let zero = settled_at_zero(ours).expect("ours returns to zero");
    assert!(zero <= latency + idle_window, "back to zero at {zero} ms, served at {latency} ms");
    assert_eq!(ours.task_time, zero, "one task, from the arrival to the scale-in");
}

/// The router's UpdateService on a tier at zero asks for a task at the arrival, between two scaler minutes; the
/// scaler reads the desired count, so its next datapoint asks for nothing more and no second task starts.
#[test]
fn ours_wakes_a_tier_at_zero_on_arrival_and_asks_for_no_second_task() {
    let model = small_tier();
    for at in [0, 30 * SECOND, 59 * SECOND, 3 * HOUR + 17 * SECOND] {
        let ours = event_loop::run(&model, &Policy::new(PolicyKind::Ours, &model), &timing(6 * HOUR), &[at]);
        assert_eq!(ours.first_task_asked, Some(at), "asked for at the arrival");
        assert_eq!(ours.latencies, [at_the_hardwares_speed(&model)], "arrival at {at} ms");
        assert!(ours.samples.iter().all(|s| s.desired <= 1 && s.tasks <= 1), "arrival at {at} ms: one task only");
    }
    let large = TierModel { cold_start: ColdStart::from_seconds([480.0, 300.0, 235.0, 5.0]), ..small_tier() };
    let comparison = event_loop::compare(&large, &timing(26 * HOUR), &[45 * SECOND]);
    assert_eq!(comparison.ours.latencies, [at_the_hardwares_speed(&large)]);
    assert!(comparison.sample.latencies.is_empty(), "the sample still never serves it");
}

#[test]
fn a_warm_window_keeps_one_task_through_its_hours_and_lets_the_tier_go_at_its_end() {
    let office = WarmWindow { hours: "8-18".parse().unwrap(), weekends: false, utc_offset_hours: 0.0 };
    let model = TierModel { warm_window: Some(office), ..small_tier() };
    let ours = |model: &TierModel, arrivals: &[Millis]| {
        event_loop::run(model, &Policy::new(PolicyKind::Ours, model), &timing(24 * HOUR), arrivals)
    };
    let noon = ours(&model, &[12 * HOUR]);
    assert_eq!(noon.latencies, [model.service_time], "a warm task serves at once");
    assert_eq!(noon.first_task_asked, Some(8 * HOUR), "the window's start asks for the task");
    let tasks_at = |run: &Run, at: Millis| run.samples.iter().find(|s| s.at == at).unwrap().tasks;
    assert_eq!((tasks_at(&noon, 8 * HOUR - MINUTE), tasks_at(&noon, 17 * HOUR)), (0, 1));
    let gone = settled_at_zero(&noon).unwrap();
    assert!((18 * HOUR..=18 * HOUR + 2 * MINUTE).contains(&gone), "back to zero at the end: {gone} ms");
    assert_eq!(noon.task_time, gone - 8 * HOUR);

    let night = ours(&model, &[2 * HOUR]);
    assert_eq!(night.latencies, [at_the_hardwares_speed(&model)], "outside the window, a cold start as ever");
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
        "On Spot, modelled (assumed, not measured: Spot at 35 % of the On-Demand price",
        "| | small $ per million requests | small p95 | large $ per million requests | large p95 |",
        "| ours, Spot + fallback | $",
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

/// `gpuinfer simulate` with `args`, its stdout; panics if it fails.
fn simulate(args: &[&str]) -> String {
    let output =
        std::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer")).arg("simulate").args(args).output().unwrap();
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

fn assert_prints(stdout: &str, lines: &[&str]) {
    for line in lines {
        assert!(stdout.lines().any(|l| l == *line), "{line}\nnot in\n{stdout}");
    }
}

#[test]
fn the_command_prints_a_lone_request_by_phase_ours_at_the_hardwares_speed_and_the_samples_never() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("one.csv");
    std::fs::write(&csv, "0,small\n").unwrap();
    let one = ["--trace", "csv", "--csv", csv.to_str().unwrap(), "--tier", "small", "--hours", "25"];
    assert_prints(
        &simulate(&one),
        &[
            "| | small · sample | small · ours |",
            "| until a task is asked for | never | 0 s |",
            "| task start: instance launch + image pull | — | 6.0 min |",
            "| weights on disk | — | 30 s |",
            "| engine healthy | — | 25 s |",
            "| first request received | — | 5 s |",
            "| first result written | — | 5 s |",
            "| arrival to result | never | 7.1 min |",
            "| never served: expired after the retention | 1 | 0 |",
        ],
    );
    let total = simulate(&[&one[..], &["--cold-start-minutes", "small=5"]].concat());
    assert_prints(
        &total,
        &["| task start: instance launch + image pull | — | 4.3 min |", "| arrival to result | never | 5.1 min |"],
    );
    let phases = ["--task-start-seconds", "60", "--weights-seconds", "0", "--engine-start-seconds", "0"];
    let phases = simulate(&[&one[..], &phases, &["--first-request-seconds", "small=3"]].concat());
    assert_prints(&phases, &["| first request received | — | 3 s |", "| arrival to result | never | 68 s |"]);
}

#[test]
fn the_command_prints_cost_and_p95_by_idle_window_and_with_a_warm_window() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("noon.csv");
    std::fs::write(&csv, "43200,small\n").unwrap();
    let noon = ["--trace", "csv", "--csv", csv.to_str().unwrap(), "--tier", "small", "--hours", "25"];
    let stdout = simulate(&[&noon[..], &["--idle-windows", "1,10", "--warm-hours", "small=8-18"]].concat());
    assert_prints(
        &stdout,
        &[
            "| | small · 1 min idle | small · 10 min idle |",
            "| completion latency p95 | 7.1 min | 7.1 min |",
            "Ours with a warm window (Monday to Friday, UTC+0):",
            "| | small · ours | small · ours, warm 08:00-18:00 |",
            "| completion latency p95 | 7.1 min | 5 s |",
        ],
    );
    let cost = |heading: &str| {
        let table = &stdout[stdout.find(heading).unwrap()..];
        let row = table.lines().find(|l| l.starts_with("| cost |")).unwrap().to_owned();
        row.split(" | $").skip(1).map(|c| c.trim_end_matches(" |").parse::<f64>().unwrap()).collect::<Vec<_>>()
    };
    let idle = cost("Ours by idle window");
    assert!(idle[0] < idle[1], "a shorter idle window costs less: {idle:?}");
    let warm = cost("Ours with a warm window");
    assert!(warm[0] < warm[1], "the window's hours are paid for: {warm:?}");
    assert!(!simulate(&noon).contains("warm window"), "no window by default");

    let wrong = std::process::Command::new(env!("CARGO_BIN_EXE_gpuinfer"))
        .args(["simulate", "--warm-hours", "18-8"])
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("START < END"));
}
