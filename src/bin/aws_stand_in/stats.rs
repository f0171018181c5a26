//! The stand-in's own cost, for `GET /stand-in/stats`: the calls it has answered and the CPU time its process has
//! spent, so a benchmark can tell the emulator's share of a run from the worker's.

use std::sync::atomic::{AtomicU64, Ordering};

/// Clock ticks per second of /proc's CPU times: USER_HZ, which Linux fixes at 100 for user space on every
/// architecture it exposes /proc to (proc(5): "divide by sysconf(_SC_CLK_TCK)").
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug, Default)]
pub(crate) struct Stats {
    calls: AtomicU64,
}

impl Stats {
    /// One more SQS or S3 call answered.
    pub(crate) fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// `{"calls": N, "cpu_seconds": X}`: X is the process's user + system CPU time, or null where /proc cannot
    /// tell it.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({ "calls": self.calls.load(Ordering::Relaxed), "cpu_seconds": cpu_seconds() })
    }
}

/// User + system CPU time of this process, every thread's (fields 14 and 15 of /proc/self/stat).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: the fields after it follow its last ')'.
    let mut after_name = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    // utime is field 14 (the 12th after the name, which follows field 2), stime field 15.
    let utime: u64 = after_name.nth(11)?.parse().ok()?;
    let stime: u64 = after_name.next()?.parse().ok()?;
    Some((utime + stime) as f64 / TICKS_PER_SECOND)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_process_has_spent_some_cpu_and_counts_calls() {
        let stats = Stats::default();
        stats.count();
        let json = stats.json();
        assert_eq!(json["calls"], 1);
        assert!(json["cpu_seconds"].as_f64().is_some_and(|s| s >= 0.0), "{json}");
    }
}
