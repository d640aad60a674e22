//! Calendar dates (proleptic Gregorian, no time zone) for waiver expiry. A waiver expiring
//! on day D applies through D and no longer from D + 1. It leaves out time of day and time
//! zones: "today" is the caller's choice (the CLI uses the UTC date).

use crate::error::OpsError;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A date `YYYY-MM-DD`; ordered chronologically; serialized as that string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Date {
    /// Year, 1..=9999.
    pub year: i32,
    /// Month, 1..=12.
    pub month: u32,
    /// Day of month, 1..=days in that month.
    pub day: u32,
}

fn is_leap(y: i32) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i32, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        _ => 28,
    }
}

impl Date {
    /// Parse `YYYY-MM-DD`; `source_name` and `field` name the value in errors.
    pub fn parse(s: &str, source_name: &str, field: &str) -> Result<Date, OpsError> {
        let bad = |why: &str| OpsError::invalid(source_name, field, s, why);
        let parts: Vec<&str> = s.trim().split('-').collect();
        if parts.len() != 3 || parts[0].len() != 4 || parts[1].len() != 2 || parts[2].len() != 2 {
            return Err(bad("expected a date YYYY-MM-DD"));
        }
        let num = |p: &str| -> Result<u32, OpsError> {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                p.parse::<u32>()
                    .map_err(|_| bad("expected a date YYYY-MM-DD"))
            } else {
                Err(bad("expected a date YYYY-MM-DD"))
            }
        };
        let (y, m, d) = (num(parts[0])? as i32, num(parts[1])?, num(parts[2])?);
        if y < 1 || !(1..=12).contains(&m) {
            return Err(bad("no such month"));
        }
        if d < 1 || d > days_in_month(y, m) {
            return Err(bad("no such day in that month"));
        }
        Ok(Date {
            year: y,
            month: m,
            day: d,
        })
    }

    /// The civil date `days` after 1970-01-01 (Hinnant's `civil_from_days`).
    pub fn from_days_since_epoch(days: i64) -> Date {
        let (y, m, d) = tensorforge_store::time::civil_from_days(days);
        Date {
            year: y as i32,
            month: m,
            day: d,
        }
    }

    /// Today's date in UTC from the system clock (1970-01-01 if the clock is before it).
    pub fn today_utc() -> Date {
        Date::from_days_since_epoch(tensorforge_store::time::now_unix_s().div_euclid(86_400))
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
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
}
