//! The task response read: its ARN, and the image pull only when both of its instants are given, in order.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;

use super::parse;

const ARN: &str = "arn:aws:ecs:us-east-1:123456789012:task/inference/0123456789abcdef";

#[test]
fn the_pull_is_read_to_the_nanosecond() {
    let task = json!({"TaskARN": ARN, "PullStartedAt": "2020-10-02T00:43:06.202617438Z", "PullStoppedAt": "2020-10-02T00:43:06.31288465Z"});
    let read = parse(&task).unwrap();
    let started = UNIX_EPOCH + Duration::new(1_601_599_386, 202_617_438);
    assert_eq!(read.arn, ARN);
    assert_eq!(read.image_pull, Some((started, UNIX_EPOCH + Duration::new(1_601_599_386, 312_884_650))));
}

#[test]
fn a_pull_missing_an_instant_or_out_of_order_is_no_pull() {
    for (started, stopped) in [
        (None, Some("2020-10-02T00:43:06Z")),
        (Some("2020-10-02T00:43:07Z"), Some("2020-10-02T00:43:06Z")),
        (Some("0001-01-01T00:00:00Z"), Some("2020-10-02T00:43:06Z")),
    ] {
        let task = json!({"TaskARN": ARN, "PullStartedAt": started, "PullStoppedAt": stopped});
        assert_eq!(parse(&task).unwrap().image_pull, None, "{task}");
    }
}

#[test]
fn a_response_without_an_arn_is_refused() {
    assert!(parse(&json!({"PullStartedAt": "2020-10-02T00:43:06Z"})).is_err());
}
