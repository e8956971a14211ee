//! Memory sizes as Slurm prints and accepts them, held in whole megabytes (MiB, Slurm's
//! "M").
//!
//! Accepted: `500M`, `16G`, `1T`, `64K`, `1.50G`, bare numbers (MB). Suffixes K, M, G, T,
//! P in either case. Kilobyte and fractional values round *up* to whole MB, so a
//! reservation is never under-counted.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::digits::parse_u64;
use super::error::{ParseError, Parsed};

/// At most this many fractional digits (`1.50G`); Slurm prints two.
const MAX_FRACTION_DIGITS: usize = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MemoryMb(u64);

impl MemoryMb {
    pub const fn new(mb: u64) -> MemoryMb {
        MemoryMb(mb)
    }

    pub fn get(self) -> u64 {
        self.0
    }

    pub fn parse(s: &str) -> Result<MemoryMb, ParseError> {
        let err = |reason: &str| ParseError::new(Parsed::Memory, s, reason);
        let (number, unit_kib): (&str, u128) = match s.as_bytes().last() {
            Some(b'K' | b'k') => (&s[..s.len() - 1], 1),
            Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 10),
            Some(b'G' | b'g') => (&s[..s.len() - 1], 1 << 20),
            Some(b'T' | b't') => (&s[..s.len() - 1], 1 << 30),
            Some(b'P' | b'p') => (&s[..s.len() - 1], 1 << 40),
            Some(_) => (s, 1 << 10),
            None => return Err(err("empty")),
        };
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => {
                if f.is_empty() || f.len() > MAX_FRACTION_DIGITS {
                    return Err(err("bad fraction"));
                }
                (i, Some(f))
            }
            None => (number, None),
        };
        let int = parse_u64(int_part).map_err(|e| err(e.reason()))?;
        let mut kib = u128::from(int) * unit_kib;
        if let Some(f) = frac_part {
            let frac = parse_u64(f).map_err(|e| err(e.reason()))?;
            // f has at most 6 digits, so the power fits and the product cannot overflow u128.
            let scale = 10u128.pow(f.len() as u32);
            kib += (u128::from(frac) * unit_kib).div_ceil(scale);
        }
        let mb = kib.div_ceil(1024);
        u64::try_from(mb)
            .map(MemoryMb)
            .map_err(|_| err("memory size too large"))
    }

    /// `--mem` argument: an explicit `M` so no site default unit applies.
    pub fn to_slurm_arg(self) -> String {
        format!("{}M", self.0)
    }
}

impl fmt::Display for MemoryMb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}M", self.0)
    }
}

impl FromStr for MemoryMb {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        MemoryMb::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    fn mb(s: &str) -> u64 {
        MemoryMb::parse(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .get()
    }

    #[test]
    fn units() {
        assert_eq!(mb("500M"), 500);
        assert_eq!(mb("500"), 500);
        assert_eq!(mb("0"), 0);
        assert_eq!(mb("16G"), 16 * 1024);
        assert_eq!(mb("1T"), 1024 * 1024);
        assert_eq!(mb("1P"), 1024 * 1024 * 1024);
        assert_eq!(mb("2048K"), 2);
        assert_eq!(mb("1K"), 1, "kilobytes round up");
        assert_eq!(mb("16000M"), 16000);
        assert_eq!(mb("16g"), 16 * 1024);
        assert_eq!(mb("1.50G"), 1536);
        assert_eq!(mb("0.001M"), 1, "fractions round up");
    }

    #[test]
    fn overflow_and_garbage_are_refused() {
        assert_eq!(mb("18446744073709551615"), u64::MAX);
        for s in [
            "",
            "M",
            "G",
            "-1G",
            "+1G",
            "1.G",
            ".5G",
            "1.5.5G",
            "1GB",
            "1 G",
            " 1G",
            "١G",
            "1.1234567G",
            "18446744073709551615P",
            "99999999999999999999",
        ] {
            let e = MemoryMb::parse(s).expect_err(s);
            assert_eq!(e.raw, s);
        }
    }

    #[test]
    fn slurm_arg() {
        assert_eq!(MemoryMb::new(100).to_slurm_arg(), "100M");
    }

    quickcheck! {
        fn prop_round_trip(n: u64) -> bool {
            let m = MemoryMb::new(n);
            MemoryMb::parse(&m.to_string()) == Ok(m)
        }

        fn prop_never_panics(s: String) -> bool {
            let _ = MemoryMb::parse(&s);
            true
        }

        fn prop_never_panics_on_size_alphabet(picks: Vec<u8>) -> bool {
            const ALPHABET: &[u8] = b"0123456789.KMGTPkmgtp9";
            let s: String = picks.iter().map(|p| ALPHABET[*p as usize % ALPHABET.len()] as char).collect();
            let _ = MemoryMb::parse(&s);
            true
        }
    }
}
