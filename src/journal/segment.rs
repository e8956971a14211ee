//! Segment files: a 96-byte header, then frames. Named `segment-<no:08>.djl`.
//!
//! ```text
//! 0   8   magic "DISPJRNL"
//! 8   u16 format version (1)
//! 10  u16 header length (96)
//! 12  u32 flags (0)
//! 16  16  journal id (UUID bytes)
//! 32  u64 segment number (the first segment is 1)
//! 40  u64 first seq in this segment
//! 48  32  chain value before the first frame of this segment
//! 80  i64 created, microseconds since the Unix epoch
//! 88  u32 reserved (0)
//! 92  u32 header CRC: CRC-32 of bytes 0..92
//! ```

use std::path::{Path, PathBuf};

use super::frame::Chain;

pub const SEGMENT_MAGIC: &[u8; 8] = b"DISPJRNL";
pub const FORMAT_VERSION: u16 = 1;
pub const SEGMENT_HEADER_LEN: usize = 96;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub format_version: u16,
    pub journal_id: [u8; 16],
    pub segment_no: u64,
    pub first_seq: u64,
    pub prev_chain: Chain,
    pub created_micros: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderFault {
    Short,
    BadMagic,
    BadCrc,
    /// Written by a newer dispatch: readable only by that version.
    NewerVersion(u16),
    /// Version 0: no dispatch ever wrote it.
    NoSuchVersion(u16),
    /// Version 1 headers are 96 bytes; any other length is damage.
    BadLength(u16),
    /// Flags or reserved bytes that version 1 defines as 0 are not.
    NonZero(&'static str),
}

impl HeaderFault {
    pub fn describe(&self) -> String {
        match self {
            HeaderFault::Short => "file is shorter than a segment header".to_owned(),
            HeaderFault::BadMagic => "not a dispatch journal segment (bad magic)".to_owned(),
            HeaderFault::BadCrc => "segment header CRC mismatch".to_owned(),
            HeaderFault::NewerVersion(v) => format!(
                "segment has format version {v}; this dispatch reads version {FORMAT_VERSION}: upgrade dispatch"
            ),
            HeaderFault::NoSuchVersion(v) => {
                format!("segment header has format version {v}, which does not exist")
            }
            HeaderFault::BadLength(n) => format!(
                "segment header claims {n} bytes; a version {FORMAT_VERSION} header is {SEGMENT_HEADER_LEN}"
            ),
            HeaderFault::NonZero(field) => {
                format!("segment header {field} are not 0 (version {FORMAT_VERSION} defines none)")
            }
        }
    }
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[0..8].copy_from_slice(SEGMENT_MAGIC);
        b[8..10].copy_from_slice(&self.format_version.to_le_bytes());
        b[10..12].copy_from_slice(&(SEGMENT_HEADER_LEN as u16).to_le_bytes());
        b[16..32].copy_from_slice(&self.journal_id);
        b[32..40].copy_from_slice(&self.segment_no.to_le_bytes());
        b[40..48].copy_from_slice(&self.first_seq.to_le_bytes());
        b[48..80].copy_from_slice(&self.prev_chain);
        b[80..88].copy_from_slice(&self.created_micros.to_le_bytes());
        let crc = crc32fast::hash(&b[0..92]);
        b[92..96].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, HeaderFault> {
        if bytes.len() < 8 {
            return Err(HeaderFault::Short);
        }
        if &bytes[0..8] != SEGMENT_MAGIC {
            return Err(HeaderFault::BadMagic);
        }
        // A newer version may lay its header out differently (even where its CRC is), so the
        // version is read before anything else is believed (journal-format.md §3).
        if bytes.len() >= 10 {
            let format_version = u16::from_le_bytes([bytes[8], bytes[9]]);
            if format_version > FORMAT_VERSION {
                return Err(HeaderFault::NewerVersion(format_version));
            }
        }
        if bytes.len() < SEGMENT_HEADER_LEN {
            return Err(HeaderFault::Short);
        }
        let crc = u32::from_le_bytes(bytes[92..96].try_into().expect("4 bytes"));
        if crc32fast::hash(&bytes[0..92]) != crc {
            return Err(HeaderFault::BadCrc);
        }
        let format_version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if format_version != FORMAT_VERSION {
            return Err(HeaderFault::NoSuchVersion(format_version));
        }
        let header_len = u16::from_le_bytes([bytes[10], bytes[11]]);
        if usize::from(header_len) != SEGMENT_HEADER_LEN {
            return Err(HeaderFault::BadLength(header_len));
        }
        if bytes[12..16] != [0; 4] {
            return Err(HeaderFault::NonZero("flags"));
        }
        if bytes[88..92] != [0; 4] {
            return Err(HeaderFault::NonZero("reserved bytes"));
        }
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        Ok(SegmentHeader {
            format_version,
            journal_id: bytes[16..32].try_into().expect("16 bytes"),
            segment_no: u64_at(32),
            first_seq: u64_at(40),
            prev_chain: bytes[48..80].try_into().expect("32 bytes"),
            created_micros: u64_at(80) as i64,
        })
    }
}

pub fn file_name(segment_no: u64) -> String {
    format!("segment-{segment_no:08}.djl")
}

/// The segment number a file name stands for, if it is a segment's name.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("segment-")?.strip_suffix(".djl")?;
    if digits.len() < 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The segment files of a journal directory, in order.
pub fn list(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(no) = entry.file_name().to_str().and_then(parse_file_name) {
            segments.push((no, entry.path()));
        }
    }
    segments.sort();
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_damage() {
        let h = SegmentHeader {
            format_version: FORMAT_VERSION,
            journal_id: [9; 16],
            segment_no: 3,
            first_seq: 1001,
            prev_chain: [5; 32],
            created_micros: 1_700_000_000_000_000,
        };
        let b = h.encode();
        assert_eq!(SegmentHeader::decode(&b).unwrap(), h);
        for at in 0..b.len() {
            let mut d = b;
            d[at] ^= 0x80;
            assert!(SegmentHeader::decode(&d).is_err(), "flip at {at}");
        }
        assert_eq!(SegmentHeader::decode(b"hello"), Err(HeaderFault::Short));
        assert_eq!(
            SegmentHeader::decode(b"#!/bin/sh\necho hi\n"),
            Err(HeaderFault::BadMagic)
        );
    }

    #[test]
    fn names() {
        assert_eq!(file_name(12), "segment-00000012.djl");
        assert_eq!(parse_file_name("segment-00000012.djl"), Some(12));
        assert_eq!(parse_file_name("segment-00000012.djl.torn-1"), None);
        assert_eq!(parse_file_name("segment-12.djl"), None);
    }
}
