//! Warm windows: hours of the day, on weekdays or every day, when a tier keeps at least one task, as the
//! template's scheduled actions do (MinCapacity 1 at the window's start, back to MinTaskCount at its end).
//! Simulated time 0 is a Monday, 00:00 UTC.

use std::fmt;
use std::str::FromStr;

use super::time::{HOUR, Millis};

const DAY: i64 = 24 * HOUR as i64;
const WEEK: i64 = 7 * DAY;

/// Hours of the day, local time: `8-18` is from 08:00 to 18:00; `off` is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hours {
    start: u32,
    end: u32,
}

impl Hours {
    pub const OFF: Hours = Hours { start: 0, end: 0 };

    pub fn is_off(&self) -> bool {
        self.start == self.end
    }
}

impl FromStr for Hours {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.trim() == "off" {
            return Ok(Hours::OFF);
        }
        let hours =
            text.split_once('-').and_then(|(start, end)| Some((start.trim().parse().ok()?, end.trim().parse().ok()?)));
        match hours {
            Some((start, end)) if start < end && end <= 24 => Ok(Hours { start, end }),
            _ => Err(format!("`{text}`: expected hours START-END with START < END <= 24 (`8-18`), or `off`")),
        }
    }
}

impl fmt::Display for Hours {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:00-{:02}:00", self.start, self.end)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmWindow {
    pub hours: Hours,
    /// Saturday and Sunday too, not only Monday to Friday.
    pub weekends: bool,
    /// The window's time zone, as hours from UTC.
    pub utc_offset_hours: f64,
}

impl WarmWindow {
    /// Whether simulated time `at` falls in the window.
    pub fn contains(&self, at: Millis) -> bool {
        let local = (at as i64 + (self.utc_offset_hours * HOUR as f64).round() as i64).rem_euclid(WEEK);
        let (day, time_of_day) = (local / DAY, local % DAY);
        let hours = i64::from(self.hours.start) * HOUR as i64..i64::from(self.hours.end) * HOUR as i64;
        (self.weekends || day < 5) && hours.contains(&time_of_day)
    }
}

/// The window's days and time zone (its hours are each column's).
impl fmt::Display for WarmWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = if self.weekends { "every day" } else { "Monday to Friday" };
        write!(f, "{days}, UTC{:+}", self.utc_offset_hours)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
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
}
