//! UTC civil time from Unix seconds, for run ids and human-readable timestamps. Proleptic
//! Gregorian calendar; no time zones, no leap seconds.

/// Seconds since the Unix epoch now (0 if the system clock is before 1970).
pub fn now_unix_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `(year, month, day)` of the civil date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `(year, month, day, hour, minute, second)` in UTC for Unix seconds.
pub fn utc_fields(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400) as u32;
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
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
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        // 2000-03-01 is day 11 017: 30 years of 365 days + 7 leap days (72..96) = 10 957,
        // plus 31 (Jan) + 29 (Feb 2000, a leap year) = 11 017.
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        // 1 796 262 052 s = 20 790 days + 6 052 s (1 h 40 min 52 s) -> 2026-12-03 01:40:52Z
        // (python3: datetime.datetime.utcfromtimestamp(1796262052)).
        assert_eq!(utc_text(1_796_262_052), "2026-12-03 01:40:52Z");
    }
}
