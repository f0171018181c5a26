//! The side-by-side table of `gpuinfer simulate`, one column per tier and policy, in Markdown: GPU
//! instance-hours and dollars, requests served and never served, completion latency, time at zero tasks; and the
//! shorter tables of a trade (cost and p95 only).

use super::event_loop::Run;
use super::time::{HOUR, MINUTE, Millis, SECOND, hours};

/// The numbers of one column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub(crate) instance_hours: f64,
    pub dollars: f64,
    pub requests: u64,
    pub served: u64,
    /// Still queued or being served when the run ended.
    pub unfinished: u64,
    /// Dropped by the queue after the retention period.
    pub expired: u64,
    pub latency: Percentiles,
    pub(crate) hours_at_zero: f64,
    pub(crate) peak_tasks: u32,
}

/// Completion latency (arrival to result) percentiles; None when nothing was served.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    pub(crate) p50: Option<Millis>,
    pub p95: Option<Millis>,
    pub(crate) p99: Option<Millis>,
}

impl Summary {
    pub fn of(run: &Run, price_per_hour: f64) -> Self {
        let instance_hours = hours(run.task_time);
        Summary {
            instance_hours,
            dollars: instance_hours * price_per_hour,
            requests: run.requests,
            served: run.latencies.len() as u64,
            unfinished: run.unfinished,
            expired: run.expired,
            latency: Percentiles {
                p50: percentile(&run.latencies, 50),
                p95: percentile(&run.latencies, 95),
                p99: percentile(&run.latencies, 99),
            },
            hours_at_zero: hours(run.time_at_zero),
            peak_tasks: run.samples.iter().map(|s| s.tasks).max().unwrap_or(0),
        }
    }
}

/// One column of the table.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    pub(crate) heading: String,
    pub(crate) summary: Summary,
}

type Row = (&'static str, fn(&Summary) -> String);

const ROWS: [Row; 11] = [
    ("GPU instance-hours", |s| format!("{:.1}", s.instance_hours)),
    ("cost", |s| format!("${:.2}", s.dollars)),
    ("requests", |s| s.requests.to_string()),
    ("served", |s| s.served.to_string()),
    ("never served: still queued or running at the end", |s| s.unfinished.to_string()),
    ("never served: expired after the retention", |s| s.expired.to_string()),
    ("completion latency p50", |s| latency(s.latency.p50)),
    ("completion latency p95", |s| latency(s.latency.p95)),
    ("completion latency p99", |s| latency(s.latency.p99)),
    ("time at zero tasks", |s| format!("{:.1} h", s.hours_at_zero)),
    ("most tasks at once", |s| s.peak_tasks.to_string()),
];

/// The rows of a trade: what a setting costs, and what it does to the slow end of the latency.
const TRADE_ROWS: [Row; 2] = [ROWS[1], ROWS[7]];

/// The Markdown table: one row per measure, one column per tier and policy.
pub(crate) fn table(columns: &[Column]) -> String {
    summary_table(columns, &ROWS)
}

/// The Markdown table of a trade: cost and p95 latency, one column per setting.
pub(crate) fn trade_table(columns: &[Column]) -> String {
    summary_table(columns, &TRADE_ROWS)
}

fn summary_table(columns: &[Column], rows: &[Row]) -> String {
    let headings: Vec<&str> = columns.iter().map(|c| c.heading.as_str()).collect();
    let rows = rows.iter().map(|(label, value)| (*label, columns.iter().map(|c| value(&c.summary)).collect()));
    markdown(&headings, rows)
}

/// A Markdown table: a heading per column, and each row's label and cells.
pub(crate) fn markdown<'a>(headings: &[&str], rows: impl IntoIterator<Item = (&'a str, Vec<String>)>) -> String {
    let mut lines = vec![format!("| | {} |", headings.join(" | ")), format!("|---|{}", "---:|".repeat(headings.len()))];
    lines.extend(rows.into_iter().map(|(label, cells)| format!("| {label} | {} |", cells.join(" | "))));
    lines.join("\n")
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[Millis], percent: usize) -> Option<Millis> {
    let rank = (sorted.len() * percent).div_ceil(100);
    sorted.get(rank.saturating_sub(1)).copied()
}

/// A duration as the tables print it: seconds, minutes or hours; a dash for none.
pub(crate) fn latency(value: Option<Millis>) -> String {
    match value {
        None => "—".into(),
        Some(ms) if ms < 2 * MINUTE => format!("{:.0} s", ms as f64 / SECOND as f64),
        Some(ms) if ms < 2 * HOUR => format!("{:.1} min", ms as f64 / MINUTE as f64),
        Some(ms) => format!("{:.1} h", hours(ms)),
    }
}
