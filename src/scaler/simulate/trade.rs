//! What a setting of our policy trades on the same arrivals as the main table: cost against p95 latency at each
//! idle window (the minutes before an idle tier scales in), and with or without a warm window.

use super::event_loop::{self, Timing};
use super::policy::{Policy, PolicyKind};
use super::report::{Column, Summary};
use super::tier_model::TierModel;
use super::time::{MINUTE, Millis};
use super::warm_window::WarmWindow;

/// A column per idle window of `minutes`: the scale-in alarm's periods for that long.
pub(crate) fn idle_windows(model: &TierModel, timing: &Timing, arrivals: &[Millis], minutes: &[u32]) -> Vec<Column> {
    let columns = minutes.iter().map(|&idle| {
        let periods = (u64::from(idle) * MINUTE).div_ceil(timing.period).max(1) as usize;
        let model = TierModel { scale_in_periods: periods, ..model.clone() };
        Column { heading: format!("{} · {idle} min idle", model.tier), summary: ours(&model, timing, arrivals) }
    });
    columns.collect()
}

/// Two columns: ours without and with `window`.
pub(crate) fn warm_window(model: &TierModel, window: WarmWindow, timing: &Timing, arrivals: &[Millis]) -> [Column; 2] {
    let (cold, warm) =
        (TierModel { warm_window: None, ..model.clone() }, TierModel { warm_window: Some(window), ..model.clone() });
    [
        Column { heading: format!("{} · ours", model.tier), summary: ours(&cold, timing, arrivals) },
        Column {
            heading: format!("{} · ours, warm {}", model.tier, window.hours),
            summary: ours(&warm, timing, arrivals),
        },
    ]
}

/// Our policy's run of `arrivals` under `model`, summed up.
fn ours(model: &TierModel, timing: &Timing, arrivals: &[Millis]) -> Summary {
    let run = event_loop::run(model, &Policy::new(PolicyKind::Ours, model), timing, arrivals);
    Summary::of(&run, model.price_per_hour)
}
