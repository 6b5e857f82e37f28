//! Wall-clock time as the ledger stores it (integers since the Unix epoch) and as people and
//! scripts read it (RFC 3339, UTC).
//!
//! Tests of time windows (the quota's, a key's TTL) freeze `now_ms` with `GROUNDIDX_FAKE_NOW_MS`,
//! the way `GROUNDIDX_CRASH_AT` arms a crash point: the real binary, no cargo feature, one load
//! when unset. `now_ns`, which the stat cache's racy-clean check reads, is never faked.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable that freezes `now_ms` at its value (milliseconds since the epoch).
pub const FAKE_NOW_ENV: &str = "GROUNDIDX_FAKE_NOW_MS";

static FAKE_NOW: OnceLock<Option<i64>> = OnceLock::new();

/// Milliseconds since the epoch, or the frozen time `GROUNDIDX_FAKE_NOW_MS` gives.
pub fn now_ms() -> i64 {
    fake_now_ms().unwrap_or_else(|| now_ns() / 1_000_000)
}

/// The frozen time `GROUNDIDX_FAKE_NOW_MS` gives, read once; `None` when unset (always, outside
/// the tests). The shared ledger freezes the database's clock at it too.
pub(crate) fn fake_now_ms() -> Option<i64> {
    *FAKE_NOW.get_or_init(|| std::env::var(FAKE_NOW_ENV).ok()?.trim().parse().ok())
}

/// Nanoseconds since the epoch.
pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// `2026-12-01T04:09:05.123Z` for milliseconds since the epoch.
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let day_secs = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        day_secs / 3600,
        day_secs % 3600 / 60,
        day_secs % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), after Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The start (ms) of the `window_secs`-second window that holds `now_ms`: windows are aligned
/// to the epoch, so every host and both ledgers count a quota in the same windows.
pub fn window_start(now_ms: i64, window_secs: u64) -> i64 {
    let window_ms = (window_secs as i64).max(1) * 1000;
    now_ms - now_ms.rem_euclid(window_ms)
}

/// What a duration looks like, for error messages.
pub const DURATION_FORMS: &str = "a duration such as 90s, 1h30m or 7d";

/// Parses a duration: a bare number of seconds (`90`), or `humantime`'s units, combined as
/// people write them (`90s`, `30m`, `1h30m`, `1.5h`, `24h`, `7d`, `2w`, `1h 30m`).
///
/// Every flag, variable and configuration key that holds a duration reads it here, so one
/// spelling works everywhere.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let seconds: u64 = text
            .parse()
            .map_err(|_| format!("{text:?} is too long for {DURATION_FORMS}"))?;
        return Ok(std::time::Duration::from_secs(seconds));
    }
    humantime::parse_duration(text)
        .map_err(|err| format!("{text:?} is not {DURATION_FORMS} ({err})"))
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn formats_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_796_098_145_000), "2026-12-01T04:09:05.000Z");
    }
}
