//! `gpuinfer simulate`: replay one traffic trace against the AWS sample's scaling policy and ours, for one tier or
//! both, print the side-by-side table, and optionally plot tasks and backlog over time.

use std::path::PathBuf;

use anyhow::{Context, bail, ensure};
use clap::ValueEnum;

use crate::cmd::args::{PolicyArgs, TierSetting};
use crate::contract::tier::{PerTier, Tier};
use crate::scaler::simulate::TierModel;
use crate::scaler::simulate::event_loop::{self, Timing};
use crate::scaler::simulate::plot::{self, TierSeries};
use crate::scaler::simulate::policy::PolicyKind;
use crate::scaler::simulate::report::{self, Column, Summary};
use crate::scaler::simulate::trace::{self, RawArrival, Traffic};
use crate::scaler::simulate::{HOUR, SECOND, seconds};

/// Requests per hour of each generated trace unless --rate says otherwise.
const DEFAULT_POISSON_RATE: f64 = 60.0;
const DEFAULT_BURSTY_RATE: f64 = 600.0;
const DEFAULT_DIURNAL_RATE: f64 = 60.0;
/// The AWS sample's README: ~7 min for g6e.xlarge + Mistral-7B, 15–20 min for g6e.48xlarge + Llama-2-70B.
const DEFAULT_COLD_START_MINUTES: PerTier<f64> = PerTier { small: 7.0, large: 17.0 };
/// The AWS sample's README: a small request took ~5 s once warm; the large model is assumed six times slower.
const DEFAULT_SERVICE_SECONDS: PerTier<f64> = PerTier { small: 5.0, large: 30.0 };
/// Requests one task serves at once unless configured.
const DEFAULT_TASK_CONCURRENCY: u32 = 8;
/// On-demand g6e.xlarge and g6e.48xlarge.
const DEFAULT_PRICE_PER_HOUR: PerTier<f64> = PerTier { small: 1.01, large: 13.35 };
/// The AWS sample's template: scale-in alarm evaluation periods and scale-in cooldowns.
const DEFAULT_SCALE_IN_PERIODS: PerTier<u32> = PerTier { small: 5, large: 10 };
const DEFAULT_SCALE_IN_COOLDOWN_SECONDS: PerTier<u64> = PerTier { small: 300, large: 600 };

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
    /// The traffic: generated, or read from --csv.
    #[arg(long, env = "SIM_TRACE", value_enum, default_value = "bursty")]
    pub(crate) trace: TraceKind,
    /// Arrivals for `--trace csv`: a line per request, `seconds` or `seconds,tier` (seconds from the start).
    #[arg(long, env = "SIM_CSV")]
    pub(crate) csv: Option<PathBuf>,
    /// Seed of the random generator: the same seed gives the same trace and the same tier split.
    #[arg(long, env = "SIM_RANDOM_SEED", default_value_t = 1)]
    pub(crate) random_seed: u64,
    /// Hours of generated traffic.
    #[arg(long, env = "SIM_HOURS", default_value_t = 24.0)]
    pub(crate) hours: f64,
    /// Hours simulated after the last arrival could come, so both policies can drain and scale in.
    #[arg(long, env = "SIM_TAIL_HOURS", default_value_t = 2.0)]
    pub(crate) tail_hours: f64,
    #[arg(long, env = "SIM_RATE", help = format!(
        "Requests per hour: the Poisson rate, the rate during a burst, or the diurnal daily mean [default: poisson \
         {DEFAULT_POISSON_RATE}, bursty {DEFAULT_BURSTY_RATE}, diurnal {DEFAULT_DIURNAL_RATE}]"
    ))]
    pub(crate) rate: Option<f64>,
    /// Bursty traffic: mean length of a burst, in minutes.
    #[arg(long, env = "SIM_BURST_MINUTES", default_value_t = 10.0)]
    pub(crate) burst_minutes: f64,
    /// Bursty traffic: mean silence between bursts, in minutes.
    #[arg(long, env = "SIM_GAP_MINUTES", default_value_t = 110.0)]
    pub(crate) gap_minutes: f64,
    /// Diurnal traffic: the busiest hour of the day.
    #[arg(long, env = "SIM_PEAK_HOUR", default_value_t = 14.0)]
    pub(crate) peak_hour: f64,
    /// Tiers to simulate, repeated or comma-separated.
    #[arg(long = "tier", env = "SIM_TIERS", value_enum, value_delimiter = ',', default_values_t = Tier::ALL)]
    pub tiers: Vec<Tier>,
    /// With both tiers: the share of requests the trace does not assign that go to the large tier.
    #[arg(long, env = "SIM_LARGE_SHARE", default_value_t = 0.2)]
    pub(crate) large_share: f64,
    #[arg(long, env = "SIM_COLD_START_MINUTES", value_delimiter = ',', help = format!(
        "Minutes from a task being asked for to its first request [default: {}]",
        TierSetting::per_tier(&DEFAULT_COLD_START_MINUTES)
    ))]
    pub(crate) cold_start_minutes: Vec<TierSetting<f64>>,
    #[arg(long, env = "SIM_SERVICE_SECONDS", value_delimiter = ',', help = format!(
        "Seconds one request takes on a warm task [default: {}]", TierSetting::per_tier(&DEFAULT_SERVICE_SECONDS)
    ))]
    pub(crate) service_seconds: Vec<TierSetting<f64>>,
    #[arg(long, env = "SIM_TASK_CONCURRENCY", value_delimiter = ',', help = format!(
        "Requests one task serves at once [default: {DEFAULT_TASK_CONCURRENCY}]"
    ))]
    pub(crate) task_concurrency: Vec<TierSetting<u32>>,
    #[arg(long, env = "SIM_PRICE_PER_HOUR", value_delimiter = ',', help = format!(
        "Dollars per task-hour [default: small={} (g6e.xlarge), large={} (g6e.48xlarge)]",
        DEFAULT_PRICE_PER_HOUR.small, DEFAULT_PRICE_PER_HOUR.large
    ))]
    pub(crate) price_per_hour: Vec<TierSetting<f64>>,
    #[arg(long, env = "SIM_SCALE_IN_PERIODS", value_delimiter = ',', help = format!(
        "The idle window: scaler periods the scale-in alarm must see below its threshold [default: {}]",
        TierSetting::per_tier(&DEFAULT_SCALE_IN_PERIODS)
    ))]
    pub(crate) scale_in_periods: Vec<TierSetting<u32>>,
    #[arg(long, env = "SIM_SCALE_IN_COOLDOWN_SECONDS", value_delimiter = ',', help = format!(
        "Seconds after a scale-in before the next one [default: {}]",
        TierSetting::per_tier(&DEFAULT_SCALE_IN_COOLDOWN_SECONDS)
    ))]
    pub(crate) scale_in_cooldown_seconds: Vec<TierSetting<u64>>,
    /// GPU memory utilization (percent) the AWS sample's metric reads while a task runs (vLLM reserves ~90 %).
    #[arg(long, env = "SIM_SAMPLE_GPU_MEMORY", default_value_t = 90.0)]
    pub(crate) sample_gpu_memory: f64,
    /// Seconds between two scaler runs: also the alarms' period.
    #[arg(long, env = "SIM_SCALER_PERIOD_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) scaler_period_seconds: u64,
    /// Hours a request may wait in the queue before it is dropped (the 1-day retention).
    #[arg(long, env = "SIM_RETENTION_HOURS", default_value_t = 24.0)]
    pub(crate) retention_hours: f64,
    /// Also draw tasks and backlog over time, both policies, into this SVG file.
    #[arg(long, env = "SIM_PLOT")]
    pub(crate) plot: Option<PathBuf>,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

pub struct Config {
    description: String,
    arrivals: Vec<RawArrival>,
    tiers: Vec<Tier>,
    models: PerTier<TierModel>,
    timing: Timing,
    large_share: f64,
    random_seed: u64,
    plot: Option<PathBuf>,
}

impl Args {
    pub fn into_config(self) -> anyhow::Result<Config> {
        ensure!(self.hours > 0.0 && self.tail_hours >= 0.0, "--hours must be above 0 and --tail-hours at least 0");
        ensure!((0.0..=1.0).contains(&self.large_share), "--large-share must be between 0 and 1");
        ensure!(self.retention_hours > 0.0, "--retention-hours must be above 0");
        let duration = seconds(self.hours * 3600.0);
        let (arrivals, description) = self.arrivals(duration)?;
        let end = arrivals.iter().map(|a| a.0).max().unwrap_or(0).max(duration) + seconds(self.tail_hours * 3600.0);
        let models = PerTier { small: self.model(Tier::Small)?, large: self.model(Tier::Large)? };
        let mut tiers = self.tiers;
        tiers.dedup();
        Ok(Config {
            description,
            arrivals,
            tiers,
            models,
            timing: Timing {
                period: self.scaler_period_seconds * SECOND,
                retention: seconds(self.retention_hours * 3600.0),
                end,
            },
            large_share: self.large_share,
            random_seed: self.random_seed,
            plot: self.plot,
        })
    }

    fn arrivals(&self, duration: u64) -> anyhow::Result<(Vec<RawArrival>, String)> {
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
        let mut rng = fastrand::Rng::with_seed(self.random_seed);
        let description = format!("{traffic} for {} h, random seed {}", self.hours, self.random_seed);
        Ok((trace::generate(traffic, duration, &mut rng), description))
    }

    fn model(&self, tier: Tier) -> anyhow::Result<TierModel> {
        let concurrency = TierSetting::pick(&self.task_concurrency, tier, DEFAULT_TASK_CONCURRENCY);
        ensure!(concurrency > 0, "--task-concurrency must be at least 1");
        Ok(TierModel {
            tier,
            cold_start: seconds(
                TierSetting::pick(&self.cold_start_minutes, tier, *DEFAULT_COLD_START_MINUTES.get(tier)) * 60.0,
            ),
            service_time: seconds(TierSetting::pick(&self.service_seconds, tier, *DEFAULT_SERVICE_SECONDS.get(tier))),
            concurrency,
            price_per_hour: TierSetting::pick(&self.price_per_hour, tier, *DEFAULT_PRICE_PER_HOUR.get(tier)),
            scaling: self.policy.policy(tier)?,
            scale_in_periods: TierSetting::pick(&self.scale_in_periods, tier, *DEFAULT_SCALE_IN_PERIODS.get(tier))
                .max(1) as usize,
            scale_in_cooldown: TierSetting::pick(
                &self.scale_in_cooldown_seconds,
                tier,
                *DEFAULT_SCALE_IN_COOLDOWN_SECONDS.get(tier),
            ) * SECOND,
            gpu_memory_when_running: self.sample_gpu_memory,
        })
    }
}

pub fn run(config: Config) -> anyhow::Result<()> {
    let mut rng = fastrand::Rng::with_seed(config.random_seed);
    let arrivals = trace::split_by_tier(&config.arrivals, &config.tiers, config.large_share, &mut rng);
    let results: Vec<(Tier, event_loop::Comparison)> = config
        .tiers
        .iter()
        .map(|&tier| (tier, event_loop::compare(config.models.get(tier), &config.timing, arrivals.get(tier))))
        .collect();

    println!(
        "{}; requests: {} ({}); simulated for {:.1} h\n",
        config.description,
        config.arrivals.len(),
        results.iter().map(|(tier, c)| format!("{tier} {}", c.sample.requests)).collect::<Vec<_>>().join(", "),
        config.timing.end as f64 / HOUR as f64,
    );
    let mut columns = Vec::new();
    let mut totals = [0.0; PolicyKind::BOTH.len()];
    for (tier, comparison) in &results {
        for (total, kind) in totals.iter_mut().zip(PolicyKind::BOTH) {
            let summary = Summary::of(comparison.get(kind), config.models.get(*tier).price_per_hour);
            *total += summary.dollars;
            columns.push(Column { heading: format!("{tier} · {}", kind.name()), summary });
        }
    }
    println!("{}\n", report::table(&columns));
    println!("cost of every tier: sample ${:.2}, ours ${:.2}", totals[0], totals[1]);
    println!(
        "scaler period {} s, retention {:.0} h; see docs/scaling.md for the model",
        config.timing.period / SECOND,
        config.timing.retention as f64 / HOUR as f64
    );
    if let Some(path) = &config.plot {
        let series: Vec<TierSeries<'_>> = results
            .iter()
            .map(|(tier, c)| TierSeries { tier: *tier, sample: &c.sample.samples, ours: &c.ours.samples })
            .collect();
        plot::write_svg(path, &series)?;
        println!("plot: {}", path.display());
    }
    Ok(())
}
