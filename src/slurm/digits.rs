//! ASCII-digit number parsing shared by every parser.
//!
//! `str::parse::<u32>` accepts a leading `+`; Python-style `isdigit` would accept other
//! scripts' digits. Slurm prints neither, so anything but `0-9` is refused here.

/// Why a digit string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigitsError {
    Empty,
    NotAsciiDigit,
    LeadingZero,
    TooLarge,
}

impl DigitsError {
    pub fn reason(self) -> &'static str {
        match self {
            DigitsError::Empty => "empty number",
            DigitsError::NotAsciiDigit => "not made of ASCII digits 0-9",
            DigitsError::LeadingZero => "leading zero",
            DigitsError::TooLarge => "number too large",
        }
    }
}

/// Parses `0-9`+ into a u64, refusing overflow. Leading zeros are allowed (`00:10:00`).
pub fn parse_u64(s: &str) -> Result<u64, DigitsError> {
    if s.is_empty() {
        return Err(DigitsError::Empty);
    }
    let mut value: u64 = 0;
    for b in s.bytes() {
        if !b.is_ascii_digit() {
            return Err(DigitsError::NotAsciiDigit);
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(DigitsError::TooLarge)?;
    }
    Ok(value)
}

/// Like [`parse_u64`] for u32.
pub fn parse_u32(s: &str) -> Result<u32, DigitsError> {
    let v = parse_u64(s)?;
    u32::try_from(v).map_err(|_| DigitsError::TooLarge)
}

/// Canonical form: no leading zero unless the number is `0` itself. Used for ids, whose
/// Display must round-trip.
pub fn parse_u32_canonical(s: &str) -> Result<u32, DigitsError> {
    if s.len() > 1 && s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(DigitsError::LeadingZero);
    }
    parse_u32(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_only() {
        assert_eq!(parse_u64("0123"), Ok(123));
        assert_eq!(parse_u64(""), Err(DigitsError::Empty));
        assert_eq!(parse_u64("+1"), Err(DigitsError::NotAsciiDigit));
        assert_eq!(parse_u64("-1"), Err(DigitsError::NotAsciiDigit));
        assert_eq!(parse_u64(" 1"), Err(DigitsError::NotAsciiDigit));
        // Arabic-Indic and fullwidth digits are digits to Unicode, not to Slurm.
        assert_eq!(parse_u64("١٢٣"), Err(DigitsError::NotAsciiDigit));
        assert_eq!(parse_u64("１２"), Err(DigitsError::NotAsciiDigit));
        assert_eq!(parse_u64("12_345"), Err(DigitsError::NotAsciiDigit));
    }

    #[test]
    fn overflow_is_refused() {
        assert_eq!(parse_u64("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(
            parse_u64("18446744073709551616"),
            Err(DigitsError::TooLarge)
        );
        assert_eq!(parse_u32("4294967295"), Ok(u32::MAX));
        assert_eq!(parse_u32("4294967296"), Err(DigitsError::TooLarge));
        assert_eq!(parse_u64(&"9".repeat(100)), Err(DigitsError::TooLarge));
    }

    #[test]
    fn canonical_refuses_leading_zero() {
        assert_eq!(parse_u32_canonical("0"), Ok(0));
        assert_eq!(parse_u32_canonical("10"), Ok(10));
        assert_eq!(parse_u32_canonical("010"), Err(DigitsError::LeadingZero));
    }
}
