//! `gpuinfer simulate`: replay one traffic trace against the AWS sample's scaling policy and ours, for one tier or
//! both, print the side-by-side table, a lone request's time by phase, our policy's cost and p95 by idle window and
//! with a warm window, on Spot (modelled), and optionally plot tasks and backlog over time.

mod args;

pub(crate) use args::{Args, Config};

use crate::contract::tier::Tier;
use crate::scaler::simulate::TierModel;
use crate::scaler::simulate::event_loop;
use crate::scaler::simulate::lone_request;
use crate::scaler::simulate::plot::{self, TierSeries};
use crate::scaler::simulate::policy::PolicyKind;
use crate::scaler::simulate::report::{self, Column, Summary};
use crate::scaler::simulate::spot;
use crate::scaler::simulate::trade;
use crate::scaler::simulate::warm_window::WarmWindow;
use crate::scaler::simulate::{HOUR, MINUTE, SECOND};

pub(crate) fn run(config: Config) -> anyhow::Result<()> {
    let arrivals = &config.trace.of_tier;
    let results: Vec<(Tier, event_loop::Comparison)> = config
        .tiers
        .iter()
        .map(|&tier| (tier, event_loop::compare(config.models.get(tier), &config.timing, arrivals.get(tier))))
        .collect();

    println!(
        "{}; requests: {} ({}); simulated for {:.1} h\n",
        config.trace.description,
        config.trace.requests,
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
    println!("cost of every tier: sample ${:.2}, ours ${:.2}\n", totals[0], totals[1]);

    let models: Vec<&TierModel> = config.tiers.iter().map(|&tier| config.models.get(tier)).collect();
    let lone: Vec<lone_request::Column<'_>> = models
        .iter()
        .flat_map(|&model| {
            let requests = lone_request::compare(model, &config.timing);
            requests.map(|(kind, request)| lone_request::Column {
                heading: format!("{} · {}", model.tier, kind.name()),
                model,
                request,
            })
        })
        .collect();
    println!("A lone request on an idle tier, phase by phase:\n\n{}\n", lone_request::table(&lone));

    let idle: Vec<Column> = models
        .iter()
        .flat_map(|model| trade::idle_windows(model, &config.timing, arrivals.get(model.tier), &config.idle_windows))
        .collect();
    println!(
        "Ours by idle window (minutes with nothing to do before a tier scales in):\n\n{}\n",
        report::trade_table(&idle)
    );

    let windows: Vec<(&TierModel, WarmWindow)> =
        models.iter().filter_map(|&model| Some((model, (*config.warm_windows.get(model.tier))?))).collect();
    if let Some((_, window)) = windows.first() {
        let warm: Vec<Column> = windows
            .iter()
            .flat_map(|(model, window)| trade::warm_window(model, *window, &config.timing, arrivals.get(model.tier)))
            .collect();
        println!("Ours with a warm window ({window}):\n\n{}\n", report::trade_table(&warm));
    }
    let spot = config.spot;
    let bound = spot.fallback_after.unwrap_or_default();
    let runs: Vec<(Tier, Vec<Column>)> = results
        .iter()
        .map(|(tier, compared)| {
            let model = config.models.get(*tier);
            (*tier, spot::runs(model, compared, spot, &config.timing, arrivals.get(*tier)))
        })
        .collect();
    println!(
        "On Spot, modelled (assumed, not measured: Spot at {:.0} % of the On-Demand price, {} interruptions a task-hour, \
         a launch without Spot capacity {:.0} % of the time for {:.0} min; fallback after {:.0} min):\n\n{}\n",
        spot.price_fraction * 100.0,
        spot.interruptions_per_hour,
        spot.shortage * 100.0,
        spot.shortage_wait as f64 / MINUTE as f64,
        bound as f64 / MINUTE as f64,
        spot::table(&runs)
    );
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
