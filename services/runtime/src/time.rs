//! UTC timestamps as the services write them: ISO-8601 with an explicit
//! `+00:00` offset and microseconds, the fraction dropped when it is zero.

use time::{OffsetDateTime, UtcOffset, format_description::well_known::Rfc3339};

pub fn now_iso() -> String {
    format_iso(OffsetDateTime::now_utc())
}

pub fn format_iso(t: OffsetDateTime) -> String {
    let t = t.to_offset(UtcOffset::UTC);
    let micros = t.microsecond();
    let base = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    if micros == 0 {
        format!("{base}+00:00")
    } else {
        format!("{base}.{micros:06}+00:00")
    }
}

/// Reads the forms writers produce: with an offset, with `Z`, or without an
/// offset (read as UTC).
pub fn parse_iso(s: &str) -> Option<OffsetDateTime> {
    let s = s.trim();
    if let Ok(t) = OffsetDateTime::parse(s, &Rfc3339) {
        return Some(t);
    }
    // No offset: treat as UTC.
    OffsetDateTime::parse(&format!("{s}Z"), &Rfc3339).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn formats_like_the_reference() {
        assert_eq!(
            format_iso(datetime!(2026-07-23 10:00:00.123456 UTC)),
            "2026-07-23T10:00:00.123456+00:00"
        );
        assert_eq!(
            format_iso(datetime!(2026-07-23 10:00:00 UTC)),
            "2026-07-23T10:00:00+00:00"
        );
    }

    #[test]
    fn parses_offset_z_and_naive() {
        let a = parse_iso("2026-07-23T10:00:00.5+00:00").unwrap();
        let b = parse_iso("2026-07-23T10:00:00.5Z").unwrap();
        let c = parse_iso("2026-07-23T10:00:00.5").unwrap();
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert!(parse_iso("yesterday").is_none());
    }
}
