//! Unit tests of `scaler/simulate/warm_window.rs`.

use super::*;

fn window(hours: &str, weekends: bool, utc_offset_hours: f64) -> WarmWindow {
    WarmWindow { hours: hours.parse().unwrap(), weekends, utc_offset_hours }
}

#[test]
fn hours_parse_as_a_range_of_the_day_or_off() {
    assert_eq!("8-18".parse::<Hours>().unwrap(), Hours { start: 8, end: 18 });
    assert!("off".parse::<Hours>().unwrap().is_off());
    for wrong in ["18-8", "8-8", "0-25", "8", "a-b"] {
        assert!(wrong.parse::<Hours>().is_err(), "{wrong}");
    }
}

#[test]
fn a_weekday_window_holds_its_hours_monday_to_friday_in_its_offset() {
    let office = window("8-18", false, 0.0);
    assert!(!office.contains(7 * HOUR + 59 * 60_000), "Monday 07:59 UTC");
    assert!(office.contains(8 * HOUR), "Monday 08:00");
    assert!(!office.contains(18 * HOUR), "the end is not in the window");
    assert!(office.contains(4 * 24 * HOUR + 12 * HOUR), "Friday noon");
    assert!(!office.contains(5 * 24 * HOUR + 12 * HOUR), "Saturday noon");
    assert!(window("8-18", true, 0.0).contains(5 * 24 * HOUR + 12 * HOUR), "with weekends");
    assert!(office.contains(7 * 24 * HOUR + 9 * HOUR), "the next Monday");

    let new_york = window("8-18", false, -5.0);
    assert!(!new_york.contains(8 * HOUR), "Monday 08:00 UTC is 03:00 in UTC-5");
    assert!(new_york.contains(13 * HOUR), "Monday 13:00 UTC is 08:00 in UTC-5");
    assert!(!new_york.contains(2 * HOUR), "Monday 02:00 UTC is Sunday 21:00 in UTC-5");
    assert!(!window("off", true, 0.0).contains(12 * HOUR));
}
