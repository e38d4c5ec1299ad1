//! When a schedule ticks: a cron expression read in an IANA time zone, giving instants.
//!
//! A tick is an instant (a UTC second), never a reading of some host's clock: every host computes
//! the same ticks from the same expression, and the time zone database is compiled in, so hosts
//! whose images carry different tzdata (or none) agree too.
//!
//! Daylight saving follows the Open Cron Pattern Specification, as the `croner` crate implements
//! it:
//!
//! - a fixed time of day that a spring-forward skips (`30 2 * * *` on the night 02:00 becomes
//!   03:00) fires once, at the first valid time after the gap (03:00);
//! - a fixed time of day that a fall-back repeats (`30 1 * * *` on the night 02:00 becomes
//!   01:00) fires once, at its first occurrence;
//! - an interval (`*/15 * * * *`, a wildcard or a step in the seconds, minutes or hours) keeps
//!   its pace in real time: none in the skipped hour, and both passes of the repeated one, each
//!   pass's ticks distinct instants.
//!
//! A leaf: it knows cron and time zones, nothing of qhost.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// A parsed cron expression in its time zone.
#[derive(Clone, Debug)]
pub struct Calendar {
    cron: Cron,
    zone: TimeZone,
    text: String,
    zone_name: String,
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.zone_name == other.zone_name
    }
}

impl Eq for Calendar {}

/// How far ahead a first tick is looked for before an expression counts as one that never fires
/// (`0 0 30 2 *`, the 30th of February).
const HORIZON_YEARS: i16 = 30;

impl Calendar {
    /// Parses `cron` (five fields, or six with seconds first) in the zone `zone`; the error says
    /// what is wrong, for a user.
    pub fn parse(cron: &str, zone: &str) -> Result<Self, String> {
        let fields = cron.split_whitespace().count();
        if !cron.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
            return Err(format!(
                "`{cron}` has {fields} fields: five (minute hour day month weekday), or six with seconds first"
            ));
        }
        let parsed = parse_cron(cron).map_err(|e| explain(cron, &e))?;
        let tz = TimeZone::get(zone).map_err(|_| unknown_zone(zone))?;
        let calendar = Calendar {
            cron: parsed,
            zone: tz,
            text: cron.to_string(),
            zone_name: zone.to_string(),
        };
        let now = Timestamp::now();
        match calendar.next_after(now) {
            Some(t)
                if t.as_second() - now.as_second() <= i64::from(HORIZON_YEARS) * 366 * 86_400 =>
            {
                Ok(calendar)
            }
            _ => Err(format!(
                "`{cron}` never fires (no tick in the next {HORIZON_YEARS} years in {zone})"
            )),
        }
    }

    /// The expression as written.
    pub fn cron(&self) -> &str {
        &self.text
    }

    /// The time zone's name as written.
    pub fn zone(&self) -> &str {
        &self.zone_name
    }

    /// The first tick strictly after `after`.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let from = whole_second(after).to_zoned(self.zone.clone());
        (self.cron.find_next_occurrence(&from, false).ok()).map(|z| z.timestamp())
    }

    /// The ticks in `(after, until]`, oldest first, at most `limit` of them.
    pub fn between(&self, after: Timestamp, until: Timestamp, limit: usize) -> Vec<Timestamp> {
        let mut ticks = Vec::new();
        let mut at = after;
        while ticks.len() < limit {
            match self.next_after(at) {
                Some(t) if t <= until => {
                    ticks.push(t);
                    at = t;
                }
                _ => break,
            }
        }
        ticks
    }
}

/// `t` without its fraction of a second (ticks are whole seconds).
fn whole_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

fn parse_cron(cron: &str) -> Result<Cron, croner::errors::CronError> {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(cron)
}

/// The nicknames the parser takes.
const NICKNAMES: [&str; 6] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@hourly",
];

/// Each field's name and range, minute first (a six-field expression has seconds before).
const FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day of the month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("weekday", "0-7 or SUN-SAT, 0 and 7 both Sunday"),
];

/// Why `cron`, which the parser refused with `error`, is not a cron expression: the field at
/// fault and its range where one field is, what to write instead of an unknown nickname.
fn explain(cron: &str, error: &croner::errors::CronError) -> String {
    let text = cron.trim();
    if text.starts_with('@') {
        let every = text.strip_prefix("@every ").map(str::trim);
        let instead = match every.and_then(|e| e.strip_suffix('s')?.parse::<u32>().ok()) {
            Some(n) if (1..60).contains(&n) && 60 % n == 0 => {
                format!("; every {n} s is `*/{n} * * * * *` (six fields, seconds first)")
            }
            _ => String::new(),
        };
        return format!(
            "`{text}` is not a cron expression: a nickname is one of {}{instead}",
            NICKNAMES.join(", ")
        );
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    let named = if fields.len() == 6 {
        std::iter::once(("second", "0-59")).chain(FIELDS).collect()
    } else {
        FIELDS.to_vec()
    };
    // The first field that fails with every other field a wildcard is the one at fault.
    let culprit = (0..fields.len()).find(|&i| {
        let alone: Vec<&str> = (0..fields.len())
            .map(|j| if j == i { fields[i] } else { "*" })
            .collect();
        parse_cron(&alone.join(" ")).is_err()
    });
    match culprit {
        Some(i) => {
            let (name, range) = named[i];
            format!(
                "`{text}` is not a cron expression: its {name} field `{}` is not valid ({range})",
                fields[i]
            )
        }
        None => format!("`{text}` is not a cron expression: {error}"),
    }
}

/// Why `zone` is not a time zone, with the closest IANA name when one is near.
fn unknown_zone(zone: &str) -> String {
    let db = jiff::tz::db();
    let closest = (db.available())
        .map(|name| {
            let name = name.as_str().to_string();
            (
                strsim::levenshtein(&zone.to_lowercase(), &name.to_lowercase()),
                name,
            )
        })
        .min();
    let near = match closest {
        Some((distance, name)) if distance <= 3 => format!(" (did you mean `{name}`?)"),
        _ => String::new(),
    };
    format!(
        "`{zone}` is not a time zone{near}: an IANA name such as `UTC`, `Europe/Berlin` or `America/New_York`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn ticks(cron: &str, zone: &str, from: &str, to: &str) -> Vec<String> {
        Calendar::parse(cron, zone)
            .unwrap()
            .between(at(from), at(to), 100)
            .iter()
            .map(|t| t.to_string())
            .collect()
    }

    #[test]
    fn five_fields_or_six_with_seconds() {
        assert_eq!(
            ticks(
                "0 9 1 * *",
                "UTC",
                "2026-11-15T00:00:00Z",
                "2027-01-15T00:00:00Z"
            ),
            ["2026-12-01T09:00:00Z", "2027-01-01T09:00:00Z"]
        );
        assert_eq!(
            ticks(
                "*/20 * * * * *",
                "UTC",
                "2026-12-04T10:00:00Z",
                "2026-12-04T10:01:00Z"
            ),
            [
                "2026-12-04T10:00:20Z",
                "2026-12-04T10:00:40Z",
                "2026-12-04T10:01:00Z"
            ]
        );
        let fraction = at("2026-12-04T10:00:19.700Z");
        let c = Calendar::parse("*/20 * * * * *", "UTC").unwrap();
        assert_eq!(c.next_after(fraction), Some(at("2026-12-04T10:00:20Z")));
    }

    #[test]
    fn bad_expressions_and_zones_say_what_is_wrong() {
        for (cron, zone, says) in [
            ("* * * *", "UTC", "has 4 fields"),
            ("0 0 0 * * * 2030", "UTC", "has 7 fields"),
            (
                "61 * * * *",
                "UTC",
                "its minute field `61` is not valid (0-59)",
            ),
            (
                "0 25 * * *",
                "UTC",
                "its hour field `25` is not valid (0-23)",
            ),
            (
                "0 0 9 * 8",
                "UTC",
                "its weekday field `8` is not valid (0-7 or SUN-SAT",
            ),
            (
                "0 0 9 13 *",
                "UTC",
                "its month field `13` is not valid (1-12",
            ),
            (
                "70 0 9 * * *",
                "UTC",
                "its second field `70` is not valid (0-59)",
            ),
            ("@every 5s", "UTC", "every 5 s is `*/5 * * * * *`"),
            ("@fortnightly", "UTC", "a nickname is one of @yearly"),
            (
                "0 9 * * *",
                "Mars/Olympus",
                "is not a time zone: an IANA name",
            ),
            (
                "0 9 * * *",
                "Europe/Berln",
                "(did you mean `Europe/Berlin`?)",
            ),
            ("0 0 30 2 *", "UTC", "never fires"),
        ] {
            let e = Calendar::parse(cron, zone).unwrap_err();
            assert!(e.contains(says), "{cron} {zone}: {e}");
        }
    }

    #[test]
    fn a_fixed_time_a_spring_forward_skips_fires_once_at_the_transition() {
        // Europe: 2026-03-29 02:00 CET becomes 03:00 CEST (01:00Z).
        assert_eq!(
            ticks(
                "30 2 * * *",
                "Europe/Berlin",
                "2026-03-28T00:00:00Z",
                "2026-03-30T23:59:59Z"
            ),
            [
                "2026-03-28T01:30:00Z", // 02:30 CET
                "2026-03-29T01:00:00Z", // 02:30 does not exist: 03:00 CEST, the transition
                "2026-03-30T00:30:00Z", // 02:30 CEST
            ]
        );
        // US: 2026-03-08 02:00 EST becomes 03:00 EDT (07:00Z).
        assert_eq!(
            ticks(
                "30 2 * * *",
                "America/New_York",
                "2026-03-07T12:00:00Z",
                "2026-03-09T12:00:00Z"
            ),
            [
                "2026-03-08T07:00:00Z", // 03:00 EDT
                "2026-03-09T06:30:00Z", // 02:30 EDT
            ]
        );
    }

    #[test]
    fn a_fixed_time_a_fall_back_repeats_fires_once() {
        // Europe: 2026-10-25 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
        assert_eq!(
            ticks(
                "30 2 * * *",
                "Europe/Berlin",
                "2026-10-24T12:00:00Z",
                "2026-10-26T12:00:00Z"
            ),
            [
                "2026-10-25T00:30:00Z", // 02:30 CEST, the first pass only
                "2026-10-26T01:30:00Z", // 02:30 CET
            ]
        );
        // US: 2026-11-01 02:00 EDT becomes 01:00 EST; 01:30 happens twice.
        assert_eq!(
            ticks(
                "30 1 * * *",
                "America/New_York",
                "2026-10-31T12:00:00Z",
                "2026-11-02T12:00:00Z"
            ),
            [
                "2026-11-01T05:30:00Z", // 01:30 EDT
                "2026-11-02T06:30:00Z", // 01:30 EST
            ]
        );
    }

    #[test]
    fn an_interval_keeps_its_pace_in_real_time_across_both_transitions() {
        // Every 30 minutes through New York's fall-back: 01:00 to 01:30 twice, each an instant.
        assert_eq!(
            ticks(
                "*/30 * * * *",
                "America/New_York",
                "2026-11-01T04:45:00Z",
                "2026-11-01T07:00:00Z"
            ),
            [
                "2026-11-01T05:00:00Z", // 01:00 EDT
                "2026-11-01T05:30:00Z", // 01:30 EDT
                "2026-11-01T06:00:00Z", // 01:00 EST
                "2026-11-01T06:30:00Z", // 01:30 EST
                "2026-11-01T07:00:00Z", // 02:00 EST
            ]
        );
        // Hourly through Berlin's spring-forward: 02:00 does not exist, nothing is doubled.
        assert_eq!(
            ticks(
                "0 * * * *",
                "Europe/Berlin",
                "2026-03-28T23:30:00Z",
                "2026-03-29T02:00:00Z"
            ),
            [
                "2026-03-29T00:00:00Z", // 01:00 CET
                "2026-03-29T01:00:00Z", // 03:00 CEST
                "2026-03-29T02:00:00Z", // 04:00 CEST
            ]
        );
    }
}
