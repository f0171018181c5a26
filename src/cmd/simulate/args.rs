//! `gpuinfer simulate`'s flags, in groups, and the run they are checked and built into.

use std::path::PathBuf;

use anyhow::{Context, bail, ensure};
use clap::ValueEnum;

use crate::cmd::args::{PolicyArgs, TierSetting};
use crate::contract::tier::{PerTier, Tier};
use crate::scaler::simulate::TierModel;
use crate::scaler::simulate::capacity::SpotModel;
use crate::scaler::simulate::cold_start::ColdStart;
use crate::scaler::simulate::event_loop::Timing;
use crate::scaler::simulate::trace::{self, RawArrival, Traffic};
use crate::scaler::simulate::warm_window::{Hours, WarmWindow};
use crate::scaler::simulate::{MINUTE, Millis, SECOND, seconds};

/// Requests per hour of each generated trace unless --rate says otherwise.
const DEFAULT_POISSON_RATE: f64 = 60.0;
const DEFAULT_BURSTY_RATE: f64 = 600.0;
const DEFAULT_DIURNAL_RATE: f64 = 60.0;
/// A cold start by phase, in seconds. The AWS sample's README states the totals, ~7 min for g6e.xlarge + Mistral-7B
/// and 15–20 min for g6e.48xlarge + Llama-2-70B (17 here), and for the small tier ~5 min of the 7 for ECS Managed
/// Instances to provision the instance; it states no other phase, so the rest of each split is assumed.
const DEFAULT_TASK_START_SECONDS: PerTier<f64> = PerTier { small: 360.0, large: 480.0 };
const DEFAULT_WEIGHTS_SECONDS: PerTier<f64> = PerTier { small: 30.0, large: 300.0 };
const DEFAULT_ENGINE_START_SECONDS: PerTier<f64> = PerTier { small: 25.0, large: 235.0 };
const DEFAULT_FIRST_REQUEST_SECONDS: PerTier<f64> = PerTier { small: 5.0, large: 5.0 };
/// The AWS sample's README: a small request took ~5 s once warm; the large model is assumed six times slower.
const DEFAULT_SERVICE_SECONDS: PerTier<f64> = PerTier { small: 5.0, large: 30.0 };
/// Requests one task serves at once unless configured.
const DEFAULT_TASK_CONCURRENCY: u32 = 8;
/// On-demand g6e.xlarge and g6e.48xlarge.
const DEFAULT_PRICE_PER_HOUR: PerTier<f64> = PerTier { small: 1.01, large: 13.35 };
/// The AWS sample's template: scale-in alarm evaluation periods and scale-in cooldowns.
const DEFAULT_SCALE_IN_PERIODS: PerTier<u32> = PerTier { small: 5, large: 10 };
const DEFAULT_SCALE_IN_COOLDOWN_SECONDS: PerTier<u64> = PerTier { small: 300, large: 600 };
/// The idle windows our policy is compared at, in minutes: the template's least, the small tier's and the large's.
const DEFAULT_IDLE_WINDOWS: [u32; 3] = [1, 5, 10];

/// Each tier's cold start by default: the phases above, and their sum in minutes for --cold-start-minutes.
fn default_cold_start(tier: Tier) -> [f64; 4] {
    [
        &DEFAULT_TASK_START_SECONDS,
        &DEFAULT_WEIGHTS_SECONDS,
        &DEFAULT_ENGINE_START_SECONDS,
        &DEFAULT_FIRST_REQUEST_SECONDS,
    ]
    .map(|phase| *phase.get(tier))
}

fn default_cold_start_minutes() -> PerTier<f64> {
    let minutes = |tier| default_cold_start(tier).iter().sum::<f64>() / 60.0;
    PerTier { small: minutes(Tier::Small), large: minutes(Tier::Large) }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TraceKind {
    /// Arrivals at a constant rate.
    Poisson,
    /// Bursts at --rate separated by silences (on/off).
    Bursty,
    /// A daily cycle peaking at --peak-hour, silent twelve hours later.
    Diurnal,
    /// Arrival times from --csv.
    Csv,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    trace: TraceArgs,
    #[command(flatten)]
    span: SpanArgs,
    #[command(flatten)]
    cold_start: ColdStartArgs,
    #[command(flatten)]
    task: TaskArgs,
    #[command(flatten)]
    warm: WarmArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    spot: SpotArgs,
}

/// The traffic: which trace, and the shape of a generated one.
#[derive(Debug, clap::Args)]
pub(super) struct TraceArgs {
    /// The traffic: generated, or read from --csv.
    #[arg(long, env = "SIM_TRACE", value_enum, default_value = "bursty")]
    trace: TraceKind,
    /// Arrivals for `--trace csv`: a line per request, `seconds` or `seconds,tier` (seconds from the start).
    #[arg(long, env = "SIM_CSV")]
    csv: Option<PathBuf>,
    #[arg(long, env = "SIM_RATE", help = format!(
        "Requests per hour: the Poisson rate, the rate during a burst, or the diurnal daily mean [default: poisson \
         {DEFAULT_POISSON_RATE}, bursty {DEFAULT_BURSTY_RATE}, diurnal {DEFAULT_DIURNAL_RATE}]"
    ))]
    rate: Option<f64>,
    /// Bursty traffic: mean length of a burst, in minutes.
    #[arg(long, env = "SIM_BURST_MINUTES", default_value_t = 10.0)]
    burst_minutes: f64,
    /// Bursty traffic: mean silence between bursts, in minutes.
    #[arg(long, env = "SIM_GAP_MINUTES", default_value_t = 110.0)]
    gap_minutes: f64,
    /// Diurnal traffic: the busiest hour of the day.
    #[arg(long, env = "SIM_PEAK_HOUR", default_value_t = 14.0)]
    peak_hour: f64,
}

/// What is simulated: how long, which tiers, the scaler's period, the queue's retention, and the output.
#[derive(Debug, clap::Args)]
pub(super) struct SpanArgs {
    /// Seed of the random generator: the same seed gives the same trace and the same tier split.
    #[arg(long, env = "SIM_RANDOM_SEED", default_value_t = 1)]
    random_seed: u64,
    /// Hours of generated traffic.
    #[arg(long, env = "SIM_HOURS", default_value_t = 24.0)]
    hours: f64,
    /// Hours simulated after the last arrival could come, so both policies can drain and scale in.
    #[arg(long, env = "SIM_TAIL_HOURS", default_value_t = 2.0)]
    tail_hours: f64,
    /// Tiers to simulate, repeated or comma-separated.
    #[arg(long = "tier", env = "SIM_TIERS", value_enum, value_delimiter = ',', default_values_t = Tier::ALL)]
    tiers: Vec<Tier>,
    /// With both tiers: the share of requests the trace does not assign that go to the large tier.
    #[arg(long, env = "SIM_LARGE_SHARE", default_value_t = 0.2)]
    large_share: f64,
    /// Seconds between two scaler runs: also the alarms' period.
    #[arg(long, env = "SIM_SCALER_PERIOD_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    scaler_period_seconds: u64,
    /// Hours a request may wait in the queue before it is dropped (the 1-day retention).
    #[arg(long, env = "SIM_RETENTION_HOURS", default_value_t = 24.0)]
    retention_hours: f64,
    /// Idle windows, in minutes, to compare our policy at: how long a tier with nothing to do waits before it scales
    /// in (the template's ScaleInIdleMinutes, LargeModelScaleInIdleMinutes).
    #[arg(long, env = "SIM_IDLE_WINDOWS", value_delimiter = ',', default_values_t = DEFAULT_IDLE_WINDOWS,
        value_parser = clap::value_parser!(u32).range(1..=1440))]
    idle_windows: Vec<u32>,
    /// Also draw tasks and backlog over time, both policies, into this SVG file.
    #[arg(long, env = "SIM_PLOT")]
    plot: Option<PathBuf>,
}

/// A cold start, phase by phase, or as a whole.
#[derive(Debug, clap::Args)]
pub(super) struct ColdStartArgs {
    #[arg(long, env = "SIM_TASK_START_SECONDS", value_delimiter = ',', help = format!(
        "Cold start, phase 1: seconds from a task asked for to its container started (instance launch + image \
         pull); the AWS sample states ~5 min to provision a g6e.xlarge, the rest is assumed [default: {}]",
        TierSetting::per_tier(&DEFAULT_TASK_START_SECONDS)
    ))]
    task_start_seconds: Vec<TierSetting<f64>>,
    #[arg(long, env = "SIM_WEIGHTS_SECONDS", value_delimiter = ',', help = format!(
        "Cold start, phase 2: seconds to the model's weights on disk (assumed) [default: {}]",
        TierSetting::per_tier(&DEFAULT_WEIGHTS_SECONDS)
    ))]
    weights_seconds: Vec<TierSetting<f64>>,
    #[arg(long, env = "SIM_ENGINE_START_SECONDS", value_delimiter = ',', help = format!(
        "Cold start, phase 3: seconds to the engine healthy, its weights in GPU memory (assumed) [default: {}]",
        TierSetting::per_tier(&DEFAULT_ENGINE_START_SECONDS)
    ))]
    engine_start_seconds: Vec<TierSetting<f64>>,
    #[arg(long, env = "SIM_FIRST_REQUEST_SECONDS", value_delimiter = ',', help = format!(
        "Cold start, phase 4: seconds to the worker receiving its first request (assumed) [default: {}]",
        TierSetting::per_tier(&DEFAULT_FIRST_REQUEST_SECONDS)
    ))]
    first_request_seconds: Vec<TierSetting<f64>>,
    #[arg(long, env = "SIM_COLD_START_MINUTES", value_delimiter = ',', help = format!(
        "A tier's whole cold start, in minutes: its four phases scaled to add up to this. The defaults add up to the \
         AWS sample's stated ~7 min (small) and 15-20 min (large) [default: {}]",
        TierSetting::per_tier(&default_cold_start_minutes())
    ))]
    cold_start_minutes: Vec<TierSetting<f64>>,
}

/// A warm task: its speed, size, price, and the AWS sample's scale-in alarm.
#[derive(Debug, clap::Args)]
pub(super) struct TaskArgs {
    #[arg(long, env = "SIM_SERVICE_SECONDS", value_delimiter = ',', help = format!(
        "Seconds one request takes on a warm task (a lone request's last phase, to its first result written) \
         [default: {}]",
        TierSetting::per_tier(&DEFAULT_SERVICE_SECONDS)
    ))]
    service_seconds: Vec<TierSetting<f64>>,
    #[arg(long, env = "SIM_TASK_CONCURRENCY", value_delimiter = ',', help = format!(
        "Requests one task serves at once [default: {DEFAULT_TASK_CONCURRENCY}]"
    ))]
    task_concurrency: Vec<TierSetting<u32>>,
    #[arg(long, env = "SIM_PRICE_PER_HOUR", value_delimiter = ',', help = format!(
        "Dollars per task-hour [default: small={} (g6e.xlarge), large={} (g6e.48xlarge)]",
        DEFAULT_PRICE_PER_HOUR.small, DEFAULT_PRICE_PER_HOUR.large
    ))]
    price_per_hour: Vec<TierSetting<f64>>,
    #[arg(long, env = "SIM_SCALE_IN_PERIODS", value_delimiter = ',', help = format!(
        "The idle window: scaler periods the scale-in alarm must see below its threshold [default: {}]",
        TierSetting::per_tier(&DEFAULT_SCALE_IN_PERIODS)
    ))]
    scale_in_periods: Vec<TierSetting<u32>>,
    #[arg(long, env = "SIM_SCALE_IN_COOLDOWN_SECONDS", value_delimiter = ',', help = format!(
        "Seconds after a scale-in before the next one [default: {}]",
        TierSetting::per_tier(&DEFAULT_SCALE_IN_COOLDOWN_SECONDS)
    ))]
    scale_in_cooldown_seconds: Vec<TierSetting<u64>>,
    /// GPU memory utilization (percent) the AWS sample's metric reads while a task runs (vLLM reserves ~90 %).
    #[arg(long, env = "SIM_SAMPLE_GPU_MEMORY", default_value_t = 90.0)]
    sample_gpu_memory: f64,
}

/// The warm window: hours a tier keeps a task.
#[derive(Debug, clap::Args)]
pub(super) struct WarmArgs {
    /// Hours of the day a tier keeps a task warm, in --utc-offset's time, Monday to Friday unless --warm-weekends:
    /// `8-18`, or per tier `small=8-18` (the template's WarmWindowStart and WarmWindowEnd); prints our policy's cost
    /// and p95 with and without the window [default: off]
    #[arg(long, env = "SIM_WARM_HOURS", value_delimiter = ',')]
    warm_hours: Vec<TierSetting<Hours>>,
    /// The warm window holds on Saturday and Sunday too.
    #[arg(long, env = "SIM_WARM_WEEKENDS")]
    warm_weekends: bool,
    /// The warm window's time zone, in hours from UTC; simulated time starts on a Monday at 00:00 UTC.
    #[arg(long, env = "SIM_UTC_OFFSET", default_value_t = 0.0, allow_hyphen_values = true)]
    utc_offset: f64,
}

/// Spot capacity, modelled (`scaler::simulate::spot`): every value an assumption, none measured.
#[derive(Debug, clap::Args)]
pub(super) struct SpotArgs {
    /// A Spot task-hour's price as a fraction of the On-Demand one. Assumed: 0.35 (65 % off); AWS states Spot runs
    /// "at up to a 90% discount compared to On-Demand prices" (AWS Containers blog, "Optimize cost for container
    /// workloads with ECS capacity providers and EC2 Spot Instances"); g6e's own varies by Region and hour.
    #[arg(long, env = "SIM_SPOT_PRICE_FRACTION", default_value_t = 0.35)]
    spot_price_fraction: f64,
    /// Interruptions per Spot task-hour. Assumed: 0.0003, the Spot Instance Advisor's highest band (over 20 % of
    /// instances reclaimed in a month) as a rate: 0.2 / 730 h.
    #[arg(long, env = "SIM_SPOT_INTERRUPTIONS_PER_HOUR", default_value_t = 0.0003)]
    spot_interruptions_per_hour: f64,
    /// The chance a Spot launch finds no Spot capacity. Assumed, no public figure: 0.2.
    #[arg(long, env = "SIM_SPOT_SHORTAGE", default_value_t = 0.2)]
    spot_shortage: f64,
    /// Minutes such a launch waits for Spot capacity. Assumed: 30.
    #[arg(long, env = "SIM_SPOT_SHORTAGE_MINUTES", default_value_t = 30.0)]
    spot_shortage_minutes: f64,
    /// Minutes a Spot task may wait before the fallback starts an On-Demand one (the template's SpotFallbackMinutes).
    #[arg(long, env = "SIM_SPOT_FALLBACK_MINUTES", default_value_t = 5.0)]
    spot_fallback_minutes: f64,
}

impl SpotArgs {
    fn model(&self) -> anyhow::Result<SpotModel> {
        ensure!((0.0..=1.0).contains(&self.spot_price_fraction), "--spot-price-fraction must be between 0 and 1");
        ensure!((0.0..=1.0).contains(&self.spot_shortage), "--spot-shortage must be between 0 and 1");
        ensure!(self.spot_interruptions_per_hour >= 0.0, "--spot-interruptions-per-hour must be at least 0");
        Ok(SpotModel {
            price_fraction: self.spot_price_fraction,
            interruptions_per_hour: self.spot_interruptions_per_hour,
            shortage: self.spot_shortage,
            shortage_wait: seconds(self.spot_shortage_minutes * 60.0),
            fallback_after: Some(seconds(self.spot_fallback_minutes * 60.0)),
        })
    }
}

/// A run of the simulation, checked and built from the flags.
pub struct Config {
    pub(super) trace: Arrivals,
    pub(super) tiers: Vec<Tier>,
    pub(super) models: PerTier<TierModel>,
    pub(super) idle_windows: Vec<u32>,
    pub(super) warm_windows: PerTier<Option<WarmWindow>>,
    pub(super) timing: Timing,
    pub(super) plot: Option<PathBuf>,
    /// The Spot assumptions, with the fallback's bound.
    pub(super) spot: SpotModel,
}

/// The traffic simulated: each tier's arrivals, how many in all, and a line that says where they came from.
pub(super) struct Arrivals {
    pub(super) description: String,
    pub(super) requests: usize,
    pub(super) of_tier: PerTier<Vec<Millis>>,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        let Args { trace, span, cold_start, task, warm, policy, spot } = self;
        ensure!(span.hours > 0.0 && span.tail_hours >= 0.0, "--hours must be above 0 and --tail-hours at least 0");
        ensure!((0.0..=1.0).contains(&span.large_share), "--large-share must be between 0 and 1");
        ensure!(span.retention_hours > 0.0, "--retention-hours must be above 0");
        ensure!((-12.0..=14.0).contains(&warm.utc_offset), "--utc-offset must be between -12 and 14 hours");
        let duration = seconds(span.hours * 3600.0);
        let (arrivals, description) = trace.arrivals(&span, duration)?;
        let end = arrivals.iter().map(|a| a.0).max().unwrap_or(0).max(duration) + seconds(span.tail_hours * 3600.0);
        let model = |tier| task.model(tier, cold_start.of(tier), &policy);
        let models = PerTier { small: model(Tier::Small)?, large: model(Tier::Large)? };
        let warm_windows = PerTier { small: warm.window(Tier::Small), large: warm.window(Tier::Large) };
        let mut tiers = span.tiers;
        tiers.dedup();
        let mut rng = fastrand::Rng::with_seed(span.random_seed);
        Ok(Config {
            trace: Arrivals {
                description,
                requests: arrivals.len(),
                of_tier: trace::split_by_tier(&arrivals, &tiers, span.large_share, &mut rng),
            },
            tiers,
            models,
            idle_windows: span.idle_windows,
            warm_windows,
            timing: Timing {
                period: span.scaler_period_seconds * SECOND,
                retention: seconds(span.retention_hours * 3600.0),
                end,
            },
            plot: span.plot,
            spot: spot.model()?,
        })
    }
}

impl TraceArgs {
    /// The arrivals over `duration` and a line that says where they came from.
    fn arrivals(&self, span: &SpanArgs, duration: u64) -> anyhow::Result<(Vec<RawArrival>, String)> {
        let traffic = match self.trace {
            TraceKind::Csv => {
                let Some(path) = &self.csv else { bail!("--trace csv needs --csv FILE (SIM_CSV)") };
                let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
                let arrivals = trace::parse_csv(&text).with_context(|| format!("in {}", path.display()))?;
                return Ok((arrivals, format!("arrivals from {}", path.display())));
            }
            TraceKind::Poisson => Traffic::Poisson { rate: self.rate.unwrap_or(DEFAULT_POISSON_RATE) },
            TraceKind::Bursty => Traffic::Bursty {
                rate: self.rate.unwrap_or(DEFAULT_BURSTY_RATE),
                burst_minutes: self.burst_minutes,
                gap_minutes: self.gap_minutes,
            },
            TraceKind::Diurnal => {
                Traffic::Diurnal { rate: self.rate.unwrap_or(DEFAULT_DIURNAL_RATE), peak_hour: self.peak_hour }
            }
        };
        let mut rng = fastrand::Rng::with_seed(span.random_seed);
        let description = format!("{traffic} for {} h, random seed {}", span.hours, span.random_seed);
        Ok((trace::generate(traffic, duration, &mut rng), description))
    }
}

impl TaskArgs {
    fn model(&self, tier: Tier, cold_start: ColdStart, policy: &PolicyArgs) -> anyhow::Result<TierModel> {
        let concurrency = TierSetting::pick(&self.task_concurrency, tier, DEFAULT_TASK_CONCURRENCY);
        ensure!(concurrency > 0, "--task-concurrency must be at least 1");
        Ok(TierModel {
            tier,
            cold_start,
            service_time: seconds(TierSetting::pick(&self.service_seconds, tier, *DEFAULT_SERVICE_SECONDS.get(tier))),
            concurrency,
            price_per_hour: TierSetting::pick(&self.price_per_hour, tier, *DEFAULT_PRICE_PER_HOUR.get(tier)),
            scaling: policy.policy(tier)?,
            scale_in_periods: TierSetting::pick(&self.scale_in_periods, tier, *DEFAULT_SCALE_IN_PERIODS.get(tier))
                .max(1) as usize,
            scale_in_cooldown: TierSetting::pick(
                &self.scale_in_cooldown_seconds,
                tier,
                *DEFAULT_SCALE_IN_COOLDOWN_SECONDS.get(tier),
            ) * SECOND,
            gpu_memory_when_running: self.sample_gpu_memory,
            warm_window: None,
        })
    }
}

impl ColdStartArgs {
    /// The tier's phases as given or by default, scaled to --cold-start-minutes where that names the tier.
    fn of(&self, tier: Tier) -> ColdStart {
        let (defaults, flags) = (
            default_cold_start(tier),
            [&self.task_start_seconds, &self.weights_seconds, &self.engine_start_seconds, &self.first_request_seconds],
        );
        let phases = ColdStart::from_seconds(std::array::from_fn(|i| TierSetting::pick(flags[i], tier, defaults[i])));
        let minutes = TierSetting::pick(&self.cold_start_minutes, tier, phases.total() as f64 / MINUTE as f64);
        phases.scaled_to(seconds(minutes * 60.0))
    }
}

impl WarmArgs {
    fn window(&self, tier: Tier) -> Option<WarmWindow> {
        let hours = TierSetting::pick(&self.warm_hours, tier, Hours::OFF);
        (!hours.is_off()).then_some(WarmWindow {
            hours,
            weekends: self.warm_weekends,
            utc_offset_hours: self.utc_offset,
        })
    }
}
