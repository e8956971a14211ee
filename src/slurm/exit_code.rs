//! `ExitCode=code:signal` as scontrol and sacct print it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::digits::parse_u32_canonical;
use super::error::{ParseError, Parsed};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExitCode {
    /// The exit status of the process (0 when it was killed by a signal).
    pub code: u32,
    /// The signal that ended it, 0 for none.
    pub signal: u32,
}

impl ExitCode {
    pub fn parse(s: &str) -> Result<ExitCode, ParseError> {
        let (c, sig) = s
            .split_once(':')
            .ok_or_else(|| ParseError::new(Parsed::ExitCode, s, "expected code:signal"))?;
        let n = |t: &str| {
            parse_u32_canonical(t)
                .map_err(|e| ParseError::new(Parsed::ExitCode, s, format!("{t:?}: {}", e.reason())))
        };
        Ok(ExitCode {
            code: n(c)?,
            signal: n(sig)?,
        })
    }
}

impl fmt::Display for ExitCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.code, self.signal)
    }
}

impl FromStr for ExitCode {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        ExitCode::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    #[test]
    fn parses_what_slurm_prints() {
        for (s, code, signal) in [
            ("0:0", 0, 0),
            ("3:0", 3, 0),
            ("0:9", 0, 9),
            ("0:125", 0, 125),
        ] {
            assert_eq!(ExitCode::parse(s), Ok(ExitCode { code, signal }), "{s}");
        }
        for s in ["", "0", ":0", "0:", "0:0:0", "a:0", "٣:0", " 3:0", "03:0"] {
            assert_eq!(ExitCode::parse(s).unwrap_err().raw, s);
        }
    }

    quickcheck! {
        fn prop_round_trip(code: u32, signal: u32) -> bool {
            let e = ExitCode { code, signal };
            ExitCode::parse(&e.to_string()) == Ok(e)
        }
        fn prop_never_panics(s: String) -> bool {
            let _ = ExitCode::parse(&s);
            true
        }
    }
}
