//! Spot capacity, modelled: what a tier's instances cost and how they fail when they are Spot. Every number here is
//! an assumption a user states on the command line (`gpuinfer simulate --spot-…`), none is measured: the price as a
//! fraction of On-Demand, interruptions per task-hour, how often a Spot launch finds no capacity and for how long,
//! and the fallback's bound. The table compares, on the same arrivals, the sample's policy (On-Demand) with ours on
//! On-Demand, on Spot, and on Spot with the On-Demand fallback: $ per million requests and p95 time to result.

use super::capacity::{Capacity, SpotModel};
use super::event_loop::{self, Comparison, Timing};
use super::policy::{Policy, PolicyKind};
use super::report::{self, Column, Summary};
use super::tier_model::TierModel;
use super::time::{Millis, hours};
use crate::contract::tier::Tier;

/// Our policy on `model`'s tier with `capacity`, summed up and priced: Spot hours at the Spot price.
pub fn priced(model: &TierModel, capacity: &Capacity, timing: &Timing, arrivals: &[Millis]) -> Summary {
    let policy = Policy::new(PolicyKind::Ours, model);
    let run = event_loop::run_on(model, &policy, timing, arrivals, capacity);
    let mut summary = Summary::of(&run, model.price_per_hour);
    if let Capacity::Spot(spot) = capacity {
        summary.dollars -= hours(run.spot_time) * model.price_per_hour * (1.0 - spot.price_fraction);
    }
    summary
}

/// One tier's runs: the sample's policy and ours on On-Demand (`compared`, already run on these arrivals), then ours
/// on Spot and on Spot with the fallback (after `spot`'s `fallback_after`).
pub(crate) fn runs(
    model: &TierModel,
    compared: &Comparison,
    spot: SpotModel,
    timing: &Timing,
    arrivals: &[Millis],
) -> Vec<Column> {
    let spot_only = Capacity::Spot(SpotModel { fallback_after: None, ..spot });
    let column = |heading: &str, summary| Column { heading: heading.into(), summary };
    vec![
        column("sample", Summary::of(&compared.sample, model.price_per_hour)),
        column("ours, On-Demand", Summary::of(&compared.ours, model.price_per_hour)),
        column("ours, Spot", priced(model, &spot_only, timing, arrivals)),
        column("ours, Spot + fallback", priced(model, &Capacity::Spot(spot), timing, arrivals)),
    ]
}

/// The Markdown table: a row per policy and capacity, each tier's $ per million requests and p95 time to result.
pub(crate) fn table(tiers: &[(Tier, Vec<Column>)]) -> String {
    let headings: Vec<String> =
        tiers.iter().flat_map(|(tier, _)| [format!("{tier} $ per million requests"), format!("{tier} p95")]).collect();
    let headings: Vec<&str> = headings.iter().map(String::as_str).collect();
    let per_million = |s: &Summary| match s.requests {
        0 => "—".to_owned(),
        n => format!("${:.0}", s.dollars / n as f64 * 1e6),
    };
    let names: Vec<&str> =
        tiers.first().map(|(_, runs)| runs.iter().map(|r| r.heading.as_str()).collect()).unwrap_or_default();
    let rows = names.into_iter().enumerate().map(|(i, name)| {
        let cells = tiers
            .iter()
            .flat_map(|(_, runs)| [per_million(&runs[i].summary), report::latency(runs[i].summary.latency.p95)])
            .collect();
        (name, cells)
    });
    report::markdown(&headings, rows)
}
