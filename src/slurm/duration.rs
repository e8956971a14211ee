//! Slurm durations: time limits, time left, elapsed time.
//!
//! Output forms (squeue `%L %l %M`, scontrol `TimeLimit RunTime`, sacct `Elapsed
//! Timelimit`): `D-HH:MM:SS`, `H:MM:SS`, `M:SS`, and the words `UNLIMITED`, `INVALID`
//! (time left once past the limit), `N/A`, `NOT_SET`, `Partition_Limit`. The words are
//! variants, never a magic number of seconds.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::digits::parse_u64;
use super::error::{ParseError, Parsed};

const SECS_PER_DAY: u64 = 86_400;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SlurmDuration {
    /// A finite span in whole seconds.
    Finite(u64),
    Unlimited,
    /// squeue's `%L` once the limit has passed and the job is not yet killed.
    Invalid,
    NotApplicable,
    NotSet,
    PartitionLimit,
}

impl SlurmDuration {
    pub fn from_secs(secs: u64) -> SlurmDuration {
        SlurmDuration::Finite(secs)
    }

    pub fn as_secs(self) -> Option<u64> {
        match self {
            SlurmDuration::Finite(s) => Some(s),
            _ => None,
        }
    }

    /// Parses the forms Slurm prints.
    pub fn parse(s: &str) -> Result<SlurmDuration, ParseError> {
        match s {
            "UNLIMITED" => return Ok(SlurmDuration::Unlimited),
            "INVALID" => return Ok(SlurmDuration::Invalid),
            "N/A" => return Ok(SlurmDuration::NotApplicable),
            "NOT_SET" => return Ok(SlurmDuration::NotSet),
            "Partition_Limit" => return Ok(SlurmDuration::PartitionLimit),
            _ => {}
        }
        let err = |reason: &str| ParseError::new(Parsed::Duration, s, reason);
        let (days, clock) = match s.split_once('-') {
            Some((d, rest)) => (Some(num(d, s)?), rest),
            None => (None, s),
        };
        let parts: Vec<&str> = clock.split(':').collect();
        let (h, m, sec) = match (days, parts.as_slice()) {
            (Some(_), [h, m, sec]) => {
                if h.len() > 2 {
                    return Err(err("hours after a day count have at most 2 digits"));
                }
                let h = num(h, s)?;
                if h >= 24 {
                    return Err(err("hours after a day count must be below 24"));
                }
                (h, two_digits(m, s)?, two_digits(sec, s)?)
            }
            (None, [h, m, sec]) => (num(h, s)?, two_digits(m, s)?, two_digits(sec, s)?),
            (None, [m, sec]) => (0, num(m, s)?, two_digits(sec, s)?),
            _ => return Err(err("expected [D-]H:MM:SS, M:SS or a keyword")),
        };
        let total = days
            .unwrap_or(0)
            .checked_mul(SECS_PER_DAY)
            .and_then(|d| h.checked_mul(3600).and_then(|h| d.checked_add(h)))
            .and_then(|t| m.checked_mul(60).and_then(|m| t.checked_add(m)))
            .and_then(|t| t.checked_add(sec))
            .ok_or_else(|| err("duration too large"))?;
        Ok(SlurmDuration::Finite(total))
    }

    /// Parses a time request as sbatch/salloc `--time` accept it: `M`, `M:S`, `H:M:S`,
    /// `D-H`, `D-H:M`, `D-H:M:S`, or `UNLIMITED`/`infinite`. For user configuration.
    pub fn parse_request(s: &str) -> Result<SlurmDuration, ParseError> {
        if s == "UNLIMITED" || s == "infinite" || s == "INFINITE" {
            return Ok(SlurmDuration::Unlimited);
        }
        let err = |reason: &str| ParseError::new(Parsed::Duration, s, reason);
        let (d, h, m, sec) = match s.split_once('-') {
            Some((d, rest)) => {
                let d = num(d, s)?;
                let parts: Vec<&str> = rest.split(':').collect();
                match parts.as_slice() {
                    [h] => (d, num(h, s)?, 0, 0),
                    [h, m] => (d, num(h, s)?, num(m, s)?, 0),
                    [h, m, sec] => (d, num(h, s)?, num(m, s)?, num(sec, s)?),
                    _ => return Err(err("too many ':' after the day count")),
                }
            }
            None => {
                let parts: Vec<&str> = s.split(':').collect();
                match parts.as_slice() {
                    [m] => (0, 0, num(m, s)?, 0),
                    [m, sec] => (0, 0, num(m, s)?, num(sec, s)?),
                    [h, m, sec] => (0, num(h, s)?, num(m, s)?, num(sec, s)?),
                    _ => return Err(err("too many ':'")),
                }
            }
        };
        let total = d
            .checked_mul(SECS_PER_DAY)
            .and_then(|t| h.checked_mul(3600).and_then(|h| t.checked_add(h)))
            .and_then(|t| m.checked_mul(60).and_then(|m| t.checked_add(m)))
            .and_then(|t| t.checked_add(sec))
            .ok_or_else(|| err("duration too large"))?;
        Ok(SlurmDuration::Finite(total))
    }
}

fn num(t: &str, whole: &str) -> Result<u64, ParseError> {
    parse_u64(t)
        .map_err(|e| ParseError::new(Parsed::Duration, whole, format!("{t:?}: {}", e.reason())))
}

fn two_digits(t: &str, whole: &str) -> Result<u64, ParseError> {
    if t.len() != 2 {
        return Err(ParseError::new(
            Parsed::Duration,
            whole,
            "minutes and seconds take two digits",
        ));
    }
    let v = num(t, whole)?;
    if v >= 60 {
        return Err(ParseError::new(
            Parsed::Duration,
            whole,
            "minutes and seconds must be below 60",
        ));
    }
    Ok(v)
}

/// Canonical form: `D-HH:MM:SS` with a day count, else `HH:MM:SS`. Both are accepted by
/// [`SlurmDuration::parse`] and by sbatch's `--time`.
impl fmt::Display for SlurmDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlurmDuration::Finite(total) => {
                let days = total / SECS_PER_DAY;
                let rest = total % SECS_PER_DAY;
                let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
                if days > 0 {
                    write!(f, "{days}-{h:02}:{m:02}:{s:02}")
                } else {
                    write!(f, "{h:02}:{m:02}:{s:02}")
                }
            }
            SlurmDuration::Unlimited => f.write_str("UNLIMITED"),
            SlurmDuration::Invalid => f.write_str("INVALID"),
            SlurmDuration::NotApplicable => f.write_str("N/A"),
            SlurmDuration::NotSet => f.write_str("NOT_SET"),
            SlurmDuration::PartitionLimit => f.write_str("Partition_Limit"),
        }
    }
}

impl FromStr for SlurmDuration {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        SlurmDuration::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{quickcheck, Arbitrary, Gen};

    fn secs(s: &str) -> u64 {
        SlurmDuration::parse(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .as_secs()
            .unwrap_or_else(|| panic!("{s} is not finite"))
    }

    #[test]
    fn output_forms() {
        assert_eq!(secs("9:58"), 598);
        assert_eq!(secs("0:00"), 0);
        assert_eq!(secs("1:59"), 119);
        assert_eq!(secs("00:10:00"), 600);
        assert_eq!(secs("00:02:14"), 134);
        assert_eq!(secs("5:00:00"), 18_000);
        assert_eq!(secs("1-00:00:00"), 86_400);
        assert_eq!(secs("2-12:30:00"), 2 * 86_400 + 12 * 3600 + 1800);
        assert_eq!(secs("3-1:00:00"), 3 * 86_400 + 3600);
        assert_eq!(secs("100:00:00"), 360_000);
    }

    #[test]
    fn keywords_are_variants() {
        use SlurmDuration::*;
        for (s, v) in [
            ("UNLIMITED", Unlimited),
            ("INVALID", Invalid),
            ("N/A", NotApplicable),
            ("NOT_SET", NotSet),
            ("Partition_Limit", PartitionLimit),
        ] {
            assert_eq!(SlurmDuration::parse(s), Ok(v));
            assert_eq!(v.to_string(), s);
            assert_eq!(v.as_secs(), None);
        }
    }

    #[test]
    fn refusals() {
        for s in [
            "",
            "unlimited",
            "5",
            "1:2",
            "1:60",
            "1:5:00",
            "1-24:00:00",
            "1-100:00:00",
            "1-00:00",
            "-1:00",
            "1:00:00:00",
            "١:٠٠",
            "1: 00",
            "+1:00",
            "1-",
            "18446744073709551615:00:00",
            "99999999999999999-00:00:00",
        ] {
            let e = SlurmDuration::parse(s).expect_err(s);
            assert_eq!(e.raw, s);
        }
    }

    #[test]
    fn request_forms() {
        let r = |s: &str| SlurmDuration::parse_request(s).unwrap().as_secs().unwrap();
        assert_eq!(r("120"), 7200);
        assert_eq!(r("10:30"), 630);
        assert_eq!(r("02:00:00"), 7200);
        assert_eq!(r("1-2"), 86_400 + 7200);
        assert_eq!(r("1-2:30"), 86_400 + 7200 + 1800);
        assert_eq!(r("1-2:30:05"), 86_400 + 7200 + 1800 + 5);
        assert_eq!(
            SlurmDuration::parse_request("UNLIMITED"),
            Ok(SlurmDuration::Unlimited)
        );
        assert!(SlurmDuration::parse_request("1:2:3:4").is_err());
        assert!(SlurmDuration::parse_request("abc").is_err());
        assert!(SlurmDuration::parse_request("").is_err());
    }

    #[test]
    fn display_forms() {
        assert_eq!(SlurmDuration::Finite(598).to_string(), "00:09:58");
        assert_eq!(SlurmDuration::Finite(86_400 + 61).to_string(), "1-00:01:01");
    }

    #[derive(Clone, Debug)]
    struct AnyDuration(SlurmDuration);
    impl Arbitrary for AnyDuration {
        fn arbitrary(g: &mut Gen) -> Self {
            use SlurmDuration::*;
            AnyDuration(match u8::arbitrary(g) % 8 {
                0 => Unlimited,
                1 => Invalid,
                2 => NotApplicable,
                3 => NotSet,
                4 => PartitionLimit,
                // Any u64 that fits: the day count prints as a plain number.
                5 => Finite(u64::arbitrary(g)),
                _ => Finite(u64::from(u32::arbitrary(g))),
            })
        }
    }

    quickcheck! {
        fn prop_round_trip(d: AnyDuration) -> bool {
            SlurmDuration::parse(&d.0.to_string()) == Ok(d.0)
        }

        fn prop_request_accepts_display(secs: u32) -> bool {
            let d = SlurmDuration::Finite(u64::from(secs));
            SlurmDuration::parse_request(&d.to_string()) == Ok(d)
        }

        fn prop_never_panics(s: String) -> bool {
            let _ = SlurmDuration::parse(&s);
            let _ = SlurmDuration::parse_request(&s);
            true
        }

        fn prop_never_panics_on_clock_alphabet(picks: Vec<u8>) -> bool {
            const ALPHABET: &[u8] = b"0123456789:-9:0";
            let s: String = picks.iter().map(|p| ALPHABET[*p as usize % ALPHABET.len()] as char).collect();
            match SlurmDuration::parse(&s) {
                Ok(d) => SlurmDuration::parse(&d.to_string()) == Ok(d),
                Err(e) => e.raw == s,
            }
        }
    }
}
