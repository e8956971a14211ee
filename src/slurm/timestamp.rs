//! Slurm timestamps: `2026-11-29T16:12:52` (local time, no zone) or a word.

use std::fmt;

use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
use serde::{Deserialize, Serialize};

use super::digits::parse_u32;
use super::error::{ParseError, Parsed};

/// Serialized as the text Slurm prints (chrono's serde feature is not enabled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SlurmTime {
    /// A wall-clock time in the cluster's local time zone, as Slurm printed it.
    At(NaiveDateTime),
    /// `Unknown` (e.g. the end of a running job in sacct, the start of a pending job).
    Unknown,
    /// `N/A`.
    NotApplicable,
    /// `None` (e.g. `SuspendTime=None`), or squeue's `NONE` (`%e` of a job without a time
    /// limit: it has no end time).
    None,
}

impl SlurmTime {
    pub fn parse(s: &str) -> Result<SlurmTime, ParseError> {
        match s {
            "Unknown" => return Ok(SlurmTime::Unknown),
            "N/A" => return Ok(SlurmTime::NotApplicable),
            "None" | "NONE" => return Ok(SlurmTime::None),
            _ => {}
        }
        let err = |reason: &str| ParseError::new(Parsed::Timestamp, s, reason);
        let b = s.as_bytes();
        if b.len() != 19
            || b[4] != b'-'
            || b[7] != b'-'
            || b[10] != b'T'
            || b[13] != b':'
            || b[16] != b':'
        {
            return Err(err("expected YYYY-MM-DDTHH:MM:SS"));
        }
        // The length and separators above are ASCII, so these slices are on char
        // boundaries only if the digits are ASCII too; `get` refuses otherwise.
        let field = |a: usize, z: usize| {
            s.get(a..z)
                .ok_or_else(|| err("not ASCII"))
                .and_then(|t| parse_u32(t).map_err(|e| err(e.reason())))
        };
        let (y, mo, d) = (field(0, 4)?, field(5, 7)?, field(8, 10)?);
        let (h, mi, se) = (field(11, 13)?, field(14, 16)?, field(17, 19)?);
        let date = NaiveDate::from_ymd_opt(y as i32, mo, d).ok_or_else(|| err("no such date"))?;
        let time = NaiveTime::from_hms_opt(h, mi, se).ok_or_else(|| err("no such time"))?;
        Ok(SlurmTime::At(NaiveDateTime::new(date, time)))
    }

    pub fn at(self) -> Option<NaiveDateTime> {
        match self {
            SlurmTime::At(t) => Some(t),
            _ => None,
        }
    }
}

impl Serialize for SlurmTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SlurmTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        SlurmTime::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// `#[serde(with = ...)]` for a bare `NaiveDateTime` in Slurm's text form.
pub mod naive_text {
    use chrono::NaiveDateTime;
    use serde::{Deserialize, Deserializer, Serializer};

    use super::{format_slurm_time, SlurmTime};

    pub fn serialize<S: Serializer>(t: &NaiveDateTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_slurm_time(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<NaiveDateTime, D::Error> {
        let text = String::deserialize(d)?;
        match SlurmTime::parse(&text) {
            Ok(SlurmTime::At(t)) => Ok(t),
            Ok(other) => Err(serde::de::Error::custom(format!("not a time: {other}"))),
            Err(e) => Err(serde::de::Error::custom(e)),
        }
    }
}

/// The Slurm command-line form, as `--starttime` accepts it.
pub fn format_slurm_time(t: NaiveDateTime) -> String {
    t.format("%Y-%m-%dT%H:%M:%S").to_string()
}

impl fmt::Display for SlurmTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlurmTime::At(t) => f.write_str(&format_slurm_time(*t)),
            SlurmTime::Unknown => f.write_str("Unknown"),
            SlurmTime::NotApplicable => f.write_str("N/A"),
            SlurmTime::None => f.write_str("None"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    #[test]
    fn parses() {
        let t = SlurmTime::parse("2026-11-29T16:12:52").unwrap();
        assert_eq!(t.to_string(), "2026-11-29T16:12:52");
        assert_eq!(SlurmTime::parse("Unknown"), Ok(SlurmTime::Unknown));
        assert_eq!(SlurmTime::parse("N/A"), Ok(SlurmTime::NotApplicable));
        assert_eq!(SlurmTime::parse("None"), Ok(SlurmTime::None));
        // squeue's %e of a job without a time limit (recorded: real-squeue-jobs-unlimited).
        assert_eq!(SlurmTime::parse("NONE"), Ok(SlurmTime::None));
        for s in [
            "",
            "2026-11-29",
            "2026-11-29 16:12:52",
            "2026-13-29T16:12:52",
            "2026-02-30T00:00:00",
            "2026-11-29T24:00:00",
            "２０２６-11-29T16:12:5",
            "2026-11-29T16:12:5é",
            "+026-11-29T16:12:52",
        ] {
            assert_eq!(SlurmTime::parse(s).unwrap_err().raw, s, "{s}");
        }
    }

    #[test]
    fn serde_as_text() {
        let t = SlurmTime::parse("2026-11-29T16:12:52").unwrap();
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2026-11-29T16:12:52\""
        );
        assert_eq!(
            serde_json::from_str::<SlurmTime>("\"Unknown\"").unwrap(),
            SlurmTime::Unknown
        );
        assert!(serde_json::from_str::<SlurmTime>("\"later\"").is_err());
    }

    quickcheck! {
        fn prop_never_panics(s: String) -> bool {
            let _ = SlurmTime::parse(&s);
            true
        }
        fn prop_round_trip(secs: u32) -> bool {
            let t = chrono::DateTime::from_timestamp(i64::from(secs), 0).unwrap().naive_utc();
            SlurmTime::parse(&format_slurm_time(t)) == Ok(SlurmTime::At(t))
        }
    }
}
