//! The classifier port, and what every classifier shares: the instruction a model is asked with, how its one-word answer reads, and the
//! ERROR report of its failures (the first, then at most one per interval).

use std::fmt::Display;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::contract::tier::Tier;

#[derive(Debug, thiserror::Error)]
#[error("classifier failed: {0}")]
pub struct ClassifyError(pub String);

/// Decides the tier of a request in the ambiguous zone.
#[async_trait]
pub trait Classifier: Send + Sync {
    async fn classify(&self, text: &str) -> Result<Tier, ClassifyError>;
}

pub(crate) const INSTRUCTION: &str = "You route requests between a small fast language model and a large capable one. \
Reply with exactly one word: \"small\" if the small model can answer the request well (simple questions, \
short factual answers, light rewriting), or \"large\" if it needs deep reasoning, long analysis, code or \
expert knowledge.";

/// Reads the tier from a model's one-word answer; anything else is a failure (→ small upstream).
pub(crate) fn parse_answer(answer: &str) -> Option<Tier> {
    let word: String = answer.trim().chars().take_while(|c| c.is_alphabetic()).collect::<String>().to_lowercase();
    Tier::parse(&word)
}

/// How often a classifier that keeps failing is reported at ERROR: its first failure, then at most one per this
/// interval (sooner when it starts failing for another reason). Every failure still falls back to small, is logged
/// at WARN with its request and counted in `ClassifierFallbacks` by the router.
pub(crate) const FAILURE_REPORT_INTERVAL: Duration = Duration::from_secs(300);

/// One classifier's failures, reported at ERROR with what to do about them, so a stack whose classifier cannot be
/// invoked says so once, not once per request.
#[derive(Debug)]
pub(crate) struct FailureReports {
    interval: Duration,
    state: Mutex<Reported>,
}

#[derive(Debug, Default)]
struct Reported {
    /// When the last report was, and of which kind of failure.
    last: Option<(Instant, &'static str)>,
    /// Failures since then that were not reported.
    unreported: u64,
}

impl Default for FailureReports {
    fn default() -> Self {
        FailureReports::new(FAILURE_REPORT_INTERVAL)
    }
}

impl FailureReports {
    pub(crate) fn new(interval: Duration) -> Self {
        FailureReports { interval, state: Mutex::default() }
    }

    /// Notes a failure of `kind` at `now`: Some(failures left unreported since the last report) when this one is to
    /// be reported, None when a report of the same kind is younger than the interval.
    pub(crate) fn note(&self, kind: &'static str, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let due = match state.last {
            None => true,
            Some((at, last_kind)) => last_kind != kind || now.saturating_duration_since(at) >= self.interval,
        };
        if !due {
            state.unreported += 1;
            return None;
        }
        state.last = Some((now, kind));
        Some(std::mem::take(&mut state.unreported))
    }

    /// Logs `failure` (what happened and what to do) at ERROR when it is due; `model` names what was asked (a model,
    /// an inference profile or an endpoint).
    pub(crate) fn report(&self, classifier: &'static str, model: &str, kind: &'static str, failure: &dyn Display) {
        if let Some(unreported) = self.note(kind, Instant::now()) {
            tracing::error!(
                classifier,
                model,
                failure = kind,
                unreported,
                "the {classifier} classifier failed, so ambiguous requests go to the small tier: {failure}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests of `ports/classifier.rs`.

    use super::*;

    #[test]
    fn a_failing_classifier_is_reported_first_then_once_per_interval_or_when_it_fails_otherwise() {
        let reports = FailureReports::new(Duration::from_secs(300));
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        assert_eq!(reports.note("access-denied", at(0)), Some(0), "the first failure is reported");
        assert_eq!(reports.note("access-denied", at(1)), None);
        assert_eq!(reports.note("access-denied", at(299)), None);
        assert_eq!(reports.note("access-denied", at(300)), Some(2), "one per interval, with the count it left out");
        assert_eq!(reports.note("access-denied", at(301)), None);
        assert_eq!(reports.note("needs-inference-profile", at(302)), Some(1), "a new reason is reported at once");
        assert_eq!(reports.note("needs-inference-profile", at(303)), None);
    }
}
