//! Memory sizes as Slurm prints and accepts them, held in whole megabytes (MiB, Slurm's
//! "M").
//!
//! Two parsers: [`MemoryMb::parse_request`] reads what a user gives (sbatch's `--mem`
//! grammar), [`MemoryMb::parse`] what Slurm prints. The latter accepts: `500M`, `16G`, `1T`, `64K`, `1.50G`, bare numbers (MB). Suffixes K, M, G, T,
//! P in either case. Kilobyte and fractional values round *up* to whole MB, so a
//! reservation is never under-counted.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::digits::parse_u64;
use super::error::{ParseError, Parsed};

/// The forms [`MemoryMb::parse_request`] takes, as its refusals and `--help` name them.
pub const MEMORY_REQUEST_FORMS: &str = "give whole MB (512) or a whole number with a unit K, \
M, G or T, optionally followed by B, in either case: 512M, 512MB, 4G, 4GB, 1T";

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

    /// A size as a user gives it (a flag, the config's `mem`), in the grammar of sbatch's
    /// `--mem` on Slurm 22.05 and 24.11 alike: digits, then at most one unit K, M, G or T,
    /// then at most one B after the unit, in either case (`4GB` is `4G`; `4B` is refused).
    /// Kilobytes round up to whole MB, as Slurm rounds them. What sbatch takes only through
    /// strtoll's leniency (a leading blank or sign) is refused as the typo it likely is, and
    /// so are fractions and P, which Slurm prints but sbatch refuses.
    pub fn parse_request(s: &str) -> Result<MemoryMb, ParseError> {
        let err = |reason: &str| {
            ParseError::new(
                Parsed::Memory,
                s,
                format!("{reason}; {MEMORY_REQUEST_FORMS}"),
            )
        };
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = s.split_at(digits);
        let shift = match unit.to_ascii_uppercase().as_str() {
            "K" | "KB" => 0,
            "" | "M" | "MB" => 10,
            "G" | "GB" => 20,
            "T" | "TB" => 30,
            _ => return Err(err("not a whole number with an optional unit")),
        };
        let number = parse_u64(number).map_err(|e| err(e.reason()))?;
        let mb = (u128::from(number) << shift).div_ceil(1024);
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

    /// What `sbatch --mem` did with each form on the dev clusters (22.05.8 and 24.11.5 alike,
    /// `sbatch --hold` then `scontrol show job`'s MinMemoryNode).
    #[test]
    fn request_accepts_what_sbatch_accepts() {
        let r = |s: &str| {
            MemoryMb::parse_request(s)
                .unwrap_or_else(|e| panic!("{s}: {e}"))
                .get()
        };
        for (s, want) in [
            ("4GB", 4096),
            ("512MB", 512),
            ("4gb", 4096),
            ("4G", 4096),
            ("512M", 512),
            ("512m", 512),
            ("512", 512),
            ("2048", 2048),
            ("1024m", 1024),
            ("100K", 1),
            ("100KB", 1),
            ("1025K", 2),
            ("2kb", 1),
            ("2Mb", 2),
            ("2mB", 2),
            ("1T", 1 << 20),
            ("1TB", 1 << 20),
            ("04G", 4096),
            ("0", 0),
            ("0G", 0),
        ] {
            assert_eq!(r(s), want, "{s}");
        }
    }

    /// What sbatch refuses ("Invalid --mem specification"), and forms it takes only through
    /// strtoll's leniency (a leading blank or sign), which dispatch refuses as typos.
    #[test]
    fn request_refuses_what_sbatch_refuses() {
        for s in [
            "",
            "G",
            "GB",
            "4B",
            "4GiB",
            "4Mi",
            "4.5G",
            "1.50G",
            "1P",
            "1PB",
            "4Gx",
            "4GBB",
            "4bB",
            "4MBb",
            "4G ",
            "4 ",
            "0x10",
            "1e3",
            "-1",
            "+4G",
            " 4G",
            "\t4G",
            "١G",
            "99999999999999999999",
            "18446744073709551615T",
        ] {
            let e = MemoryMb::parse_request(s).expect_err(s);
            assert_eq!(e.raw, s);
            assert!(e.reason.contains("512M, 512MB, 4G, 4GB"), "{s}: {e}");
        }
    }

    /// The grammar sbatch's `--mem` takes, written out a second way: digits, then at most
    /// one of K, M, G, T (either case), then at most one B (either case) after a unit.
    fn sbatch_model(s: &str) -> Option<u128> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = s.split_at(digits);
        let n: u128 = number.parse().ok()?;
        let shift = match unit.to_ascii_uppercase().as_str() {
            "" | "M" | "MB" => 10,
            "K" | "KB" => 0,
            "G" | "GB" => 20,
            "T" | "TB" => 30,
            _ => return None,
        };
        Some((n << shift).div_ceil(1024))
    }

    quickcheck! {
        fn prop_request_matches_the_sbatch_model(picks: Vec<u8>) -> bool {
            const ALPHABET: &[u8] = b"0123456789KMGTPBkmgtpbi .+-";
            let s: String = picks.iter().map(|p| ALPHABET[*p as usize % ALPHABET.len()] as char).collect();
            let want = sbatch_model(&s).and_then(|mb| u64::try_from(mb).ok());
            MemoryMb::parse_request(&s).ok().map(MemoryMb::get) == want
        }

        fn prop_request_takes_every_unit_in_either_case(n: u32, unit: u8, b: u8, upper: bool) -> bool {
            let unit = ["", "K", "M", "G", "T"][unit as usize % 5];
            let b = if unit.is_empty() { "" } else { ["", "B"][b as usize % 2] };
            let text = format!("{n}{unit}{b}");
            let text = if upper { text } else { text.to_ascii_lowercase() };
            MemoryMb::parse_request(&text).ok().map(|m| u128::from(m.get())) == sbatch_model(&text)
        }

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
