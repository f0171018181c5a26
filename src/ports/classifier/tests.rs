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
