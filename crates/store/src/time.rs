//! UTC civil time from Unix seconds, for run ids and human-readable timestamps, through
//! `jiff` (its `Timestamp` and the UTC offset; no time-zone database). Proleptic Gregorian
//! calendar; no local time zones, no leap seconds. Seconds outside jiff's range (years
//! -9999..=9999) are clamped to its ends.

use jiff::{civil::DateTime, tz::Offset, Timestamp};

/// Seconds since the Unix epoch now (0 if the system clock is before 1970).
pub fn now_unix_s() -> i64 {
    Timestamp::now().as_second().max(0)
}

/// The UTC date and time of Unix seconds `secs` (clamped to jiff's range).
fn utc(secs: i64) -> DateTime {
    let ts = Timestamp::from_second(secs).unwrap_or(if secs < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    });
    Offset::UTC.to_datetime(ts)
}

/// `(year, month, day, hour, minute, second)` in UTC for Unix seconds.
pub fn utc_fields(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let t = utc(secs);
    (
        i64::from(t.year()),
        t.month() as u32,
        t.day() as u32,
        t.hour() as u32,
        t.minute() as u32,
        t.second() as u32,
    )
}

/// `YYYY-MM-DD HH:MM:SSZ` for Unix seconds.
pub fn utc_text(secs: i64) -> String {
    let (y, m, d, hh, mm, ss) = utc_fields(secs);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_checked_dates() {
        let day = |d: i64| {
            let (y, m, dd, ..) = utc_fields(d * 86_400);
            (y, m, dd)
        };
        assert_eq!(day(0), (1970, 1, 1));
        // 2000-03-01 is day 11 017: 30 years of 365 days + 7 leap days (72..96) = 10 957,
        // plus 31 (Jan) + 29 (Feb 2000, a leap year) = 11 017.
        assert_eq!(day(11_017), (2000, 3, 1));
        assert_eq!(day(-1), (1969, 12, 31));
        // 1 796 262 052 s = 20 790 days + 6 052 s (1 h 40 min 52 s) -> 2026-12-03 01:40:52Z
        // (python3: datetime.datetime.utcfromtimestamp(1796262052)).
        assert_eq!(utc_text(1_796_262_052), "2026-12-03 01:40:52Z");
        // 2024-02-29 12:34:56 UTC = 1709210096 (a leap day).
        assert_eq!(utc_text(1_709_210_096), "2024-02-29 12:34:56Z");
        assert_eq!(utc_text(-1), "1969-12-31 23:59:59Z");
        // Out of range: clamped, never a panic.
        assert!(
            utc_text(i64::MAX).starts_with("9999-12-"),
            "{}",
            utc_text(i64::MAX)
        );
        assert!(
            utc_text(i64::MIN).starts_with("-9999-01-"),
            "{}",
            utc_text(i64::MIN)
        );
        assert!(now_unix_s() > 1_700_000_000);
    }
}
