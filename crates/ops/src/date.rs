//! Calendar dates (proleptic Gregorian, no time zone) for waiver expiry: a thin wrapper
//! around `jiff::civil::Date` that keeps the `YYYY-MM-DD` text form (in policy files, JSON
//! and reports) and the error messages that name the policy field. A waiver expiring on day
//! D applies through D and no longer from D + 1. Only valid dates in years 1..=9999 can be
//! constructed. It leaves out time of day and time zones: "today" is the caller's choice
//! (the CLI uses the UTC date).

use crate::error::OpsError;
use jiff::civil;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A date `YYYY-MM-DD` in years 1..=9999; ordered chronologically; serialized as that
/// string. Built only through [`Date::parse`], [`Date::from_days_since_epoch`] or
/// [`Date::today_utc`], so it is always a real calendar day.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Date(civil::Date);

/// The first and last day a [`Date`] can be: 0001-01-01 and 9999-12-31, and the epoch.
const FIRST: civil::Date = civil::Date::constant(1, 1, 1);
const LAST: civil::Date = civil::Date::constant(9999, 12, 31);
const EPOCH: civil::Date = civil::Date::constant(1970, 1, 1);
/// Days from the epoch to [`FIRST`] and to [`LAST`] (Python: `date(1, 1, 1).toordinal()`
/// is 1 and `date(1970, 1, 1).toordinal()` 719 163; checked against jiff in the tests).
const FIRST_DAY: i64 = -719_162;
const LAST_DAY: i64 = 2_932_896;

impl Date {
    /// Parse `YYYY-MM-DD` (exactly four, two and two ASCII digits); `source_name` and
    /// `field` name the value in errors, which say whether the shape, the month or the day
    /// is wrong.
    pub fn parse(s: &str, source_name: &str, field: &str) -> Result<Date, OpsError> {
        let bad = |why: &str| OpsError::invalid(source_name, field, s, why);
        let shape = || bad("expected a date YYYY-MM-DD");
        let parts: Vec<&str> = s.trim().split('-').collect();
        let [y, m, d] = parts.as_slice() else {
            return Err(shape());
        };
        if y.len() != 4 || m.len() != 2 || d.len() != 2 {
            return Err(shape());
        }
        let num = |p: &str| -> Result<i16, OpsError> {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                p.parse::<i16>().map_err(|_| shape())
            } else {
                Err(shape())
            }
        };
        let (y, m, d) = (num(y)?, num(m)?, num(d)?);
        if y < 1 || !(1..=12).contains(&m) {
            return Err(bad("no such month"));
        }
        // Both are two digits here, so they fit an i8.
        civil::Date::new(y, m as i8, d as i8)
            .map(Date)
            .map_err(|_| bad("no such day in that month"))
    }

    /// The civil date `days` after 1970-01-01 (negative: before it), clamped to
    /// 0001-01-01..=9999-12-31.
    pub fn from_days_since_epoch(days: i64) -> Date {
        let span = jiff::Span::new().days(days.clamp(FIRST_DAY, LAST_DAY));
        Date(EPOCH.checked_add(span).unwrap_or(LAST))
    }

    /// Today's date in UTC from the system clock.
    pub fn today_utc() -> Date {
        let today = jiff::tz::Offset::UTC
            .to_datetime(jiff::Timestamp::now())
            .date();
        Date(today.clamp(FIRST, LAST))
    }

    /// The year, 1..=9999.
    pub fn year(self) -> i32 {
        i32::from(self.0.year())
    }

    /// The month, 1..=12.
    pub fn month(self) -> u32 {
        self.0.month() as u32
    }

    /// The day of the month, 1..=its number of days.
    pub fn day(self) -> u32 {
        self.0.day() as u32
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}",
            self.year(),
            self.month(),
            self.day()
        )
    }
}

impl From<Date> for String {
    fn from(d: Date) -> String {
        d.to_string()
    }
}

impl TryFrom<String> for Date {
    type Error = OpsError;
    fn try_from(s: String) -> Result<Date, OpsError> {
        Date::parse(&s, "date", "date")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_order_and_epoch_days() {
        let a = Date::parse("2024-02-29", "p", "f").unwrap();
        let b = Date::parse("2024-03-01", "p", "f").unwrap();
        assert!(a < b);
        assert_eq!(a.to_string(), "2024-02-29");
        let e = Date::parse("2023-02-29", "policy.toml", "waiver[0].expires").unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("policy.toml")
                && m.contains("waiver[0].expires")
                && m.contains("2023-02-29"),
            "{m}"
        );
        assert!(Date::parse("2024-13-01", "p", "f").is_err());
        assert!(Date::parse("24-1-1", "p", "f").is_err());
        assert!(Date::parse("2024-01-+1", "p", "f").is_err());
        // 1970-01-01 is day 0; 2000-03-01 is day 11017 (30 years = 10957 days incl. 7 leap
        // days 1972..1996, + 31 (Jan) + 29 (Feb 2000, leap) = 11017).
        assert_eq!(Date::from_days_since_epoch(0).to_string(), "1970-01-01");
        assert_eq!(
            Date::from_days_since_epoch(11_017).to_string(),
            "2000-03-01"
        );
        assert_eq!(Date::from_days_since_epoch(-1).to_string(), "1969-12-31");
    }

    #[test]
    fn only_real_days_in_years_1_to_9999() {
        let why = |s: &str| Date::parse(s, "p", "f").unwrap_err().to_string();
        assert!(why("2024-13-01").contains("no such month"));
        assert!(why("2024-00-10").contains("no such month"));
        assert!(why("0000-01-01").contains("no such month"));
        assert!(why("2024-04-31").contains("no such day"));
        assert!(why("2024-04-00").contains("no such day"));
        assert!(why("2024-4-30").contains("YYYY-MM-DD"));
        assert!(why("2024-04-30T00:00").contains("YYYY-MM-DD"));
        let d = Date::parse(" 2024-04-30 ", "p", "f").unwrap();
        assert_eq!((d.year(), d.month(), d.day()), (2024, 4, 30));
        // The ends of the range, and far outside it: clamped to the ends.
        let days = |d: civil::Date| d.since((jiff::Unit::Day, EPOCH)).unwrap().get_days();
        assert_eq!(
            (days(FIRST), days(LAST)),
            (FIRST_DAY as i32, LAST_DAY as i32)
        );
        assert_eq!(Date::from_days_since_epoch(FIRST_DAY).0, FIRST);
        assert_eq!(Date::from_days_since_epoch(LAST_DAY).0, LAST);
        assert_eq!(
            Date::from_days_since_epoch(i64::MIN).to_string(),
            "0001-01-01"
        );
        assert_eq!(
            Date::from_days_since_epoch(i64::MAX).to_string(),
            "9999-12-31"
        );
        // Serde: the string form, and a bad string is refused.
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, "\"2024-04-30\"");
        assert_eq!(serde_json::from_str::<Date>(&json).unwrap(), d);
        assert!(serde_json::from_str::<Date>("\"2024-02-30\"").is_err());
        let today = Date::today_utc();
        assert!(today > Date::parse("2020-01-01", "p", "f").unwrap());
    }
}
