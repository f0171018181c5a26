//! A lone request on an idle tier, phase by phase, under each policy: the wait until a task is asked for, each
//! phase of that task's cold start, then the request itself, up to its result written.

use super::cold_start::PHASES;
use super::event_loop::{self, Timing};
use super::policy::PolicyKind;
use super::report::{latency, markdown};
use super::tier_model::TierModel;
use super::time::{HOUR, Millis};

/// One request arriving at time 0 on a tier at zero, under one policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoneRequest {
    /// From the arrival to the first task asked for; None if none ever is.
    pub asked_after: Option<Millis>,
    /// From the arrival to the result; None if it is never served.
    pub latency: Option<Millis>,
}

/// Both policies on one request at time 0, run until after the queue's retention would have dropped it.
pub fn compare(model: &TierModel, timing: &Timing) -> [(PolicyKind, LoneRequest); 2] {
    let comparison = event_loop::compare(model, &Timing { end: timing.retention + HOUR, ..*timing }, &[0]);
    PolicyKind::BOTH.map(|kind| {
        let run = comparison.get(kind);
        (kind, LoneRequest { asked_after: run.first_task_asked, latency: run.latencies.first().copied() })
    })
}

/// One column of the phase table.
#[derive(Debug, Clone)]
pub(crate) struct Column<'a> {
    pub(crate) heading: String,
    pub(crate) model: &'a TierModel,
    pub(crate) request: LoneRequest,
}

/// The Markdown table: a row per phase, one column per tier and policy; phases of a request never served are dashes.
pub(crate) fn table(columns: &[Column<'_>]) -> String {
    let headings: Vec<&str> = columns.iter().map(|c| c.heading.as_str()).collect();
    let served = |c: &Column<'_>, phase: Millis| latency(c.request.latency.map(|_| phase));
    let never = |value: Option<Millis>| value.map_or_else(|| "never".to_owned(), |ms| latency(Some(ms)));
    let mut rows = vec![("until a task is asked for", columns.iter().map(|c| never(c.request.asked_after)).collect())];
    for (index, phase) in PHASES.iter().enumerate() {
        rows.push((phase, columns.iter().map(|c| served(c, c.model.cold_start.phases[index])).collect()));
    }
    rows.push(("first result written", columns.iter().map(|c| served(c, c.model.service_time)).collect()));
    rows.push(("arrival to result", columns.iter().map(|c| never(c.request.latency)).collect()));
    markdown(&headings, rows)
}
