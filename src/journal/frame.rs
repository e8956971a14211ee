//! The record frame: fixed 24-byte header, MessagePack payload, 32-byte chain, frame CRC.
//!
//! ```text
//! 0      u32 LE  sync magic 0x31464A44 ("DJF1")
//! 4      u32 LE  payload length L (at most MAX_PAYLOAD)
//! 8      u64 LE  seq
//! 16     u16 LE  kind
//! 18     u16 LE  flags
//! 20     u32 LE  header CRC: CRC-32 of bytes 0..20
//! 24     L       payload
//! 24+L   32      chain: SHA-256(previous chain || bytes 0..20 || payload)
//! 56+L   u32 LE  frame CRC: CRC-32 of bytes 0..56+L
//! ```

use std::cell::Cell;

use sha2::{Digest, Sha256};

pub const FRAME_MAGIC: u32 = 0x3146_4A44;
pub const HEADER_LEN: usize = 24;
pub const CHAIN_LEN: usize = 32;
/// Bytes a frame adds around its payload.
pub const OVERHEAD: usize = HEADER_LEN + CHAIN_LEN + 4;
/// The largest payload a writer accepts and a reader believes.
pub const MAX_PAYLOAD: usize = 1 << 20;

pub type Chain = [u8; CHAIN_LEN];

/// The chain value before the first frame of a journal: it binds the chain to the journal id.
pub fn genesis_chain(journal_id: &[u8; 16]) -> Chain {
    let mut h = Sha256::new();
    h.update(b"dispatch journal v1");
    h.update(journal_id);
    h.finalize().into()
}

pub fn next_chain(prev: &Chain, header: &[u8], payload: &[u8]) -> Chain {
    debug_assert!(header.len() == 20);
    let mut h = Sha256::new();
    h.update(prev);
    h.update(header);
    h.update(payload);
    h.finalize().into()
}

/// Append one frame to `out` and return its chain value.
pub fn encode(
    out: &mut Vec<u8>,
    prev: &Chain,
    seq: u64,
    kind: u16,
    flags: u16,
    payload: &[u8],
) -> Chain {
    assert!(
        payload.len() <= MAX_PAYLOAD,
        "payload cap is checked by the writer"
    );
    let start = out.len();
    out.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    let header_crc = crc32fast::hash(&out[start..start + 20]);
    out.extend_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(payload);
    let chain = next_chain(prev, &out[start..start + 20], payload);
    out.extend_from_slice(&chain);
    let frame_crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&frame_crc.to_le_bytes());
    debug_assert_eq!(out.len() - start, payload.len() + OVERHEAD);
    chain
}

thread_local! {
    static CRC_BYTES: Cell<u64> = const { Cell::new(0) };
}

/// Note `n` bytes fed to CRC-32 while reading frames on this thread.
pub(crate) fn count_crc_bytes(n: usize) {
    CRC_BYTES.with(|c| c.set(c.get().wrapping_add(n as u64)));
}

/// CRC-32 of `bytes`, counted in [`crc_bytes_on_this_thread`].
pub(crate) fn counted_crc(bytes: &[u8]) -> u32 {
    count_crc_bytes(bytes.len());
    crc32fast::hash(bytes)
}

/// How many bytes frame decoding and the damage scan have run through CRC-32 on this thread
/// so far. A cost meter, not a clock: it lets a test prove that a scan's work is linear in
/// the bytes it was given, whatever the frame headers in them claim.
pub fn crc_bytes_on_this_thread() -> u64 {
    CRC_BYTES.with(Cell::get)
}

/// A frame whose CRCs are valid. Its seq and chain still have to be checked by the caller.
#[derive(Clone, Copy, Debug)]
pub struct FrameRef<'a> {
    pub seq: u64,
    pub kind: u16,
    pub flags: u16,
    pub header: &'a [u8],
    pub payload: &'a [u8],
    pub chain: &'a [u8],
}

impl FrameRef<'_> {
    pub fn len(&self) -> usize {
        self.payload.len() + OVERHEAD
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn chain_value(&self) -> Chain {
        self.chain.try_into().expect("32 bytes")
    }
}

/// Why the bytes at an offset are not a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameFault {
    /// The bytes end inside the frame.
    Short,
    BadMagic,
    BadHeaderCrc,
    /// A header with a valid CRC claims a payload above the cap.
    TooLong(u32),
    BadFrameCrc,
}

impl FrameFault {
    pub fn describe(self) -> String {
        match self {
            FrameFault::Short => "the file ends inside a frame".to_owned(),
            FrameFault::BadMagic => "no frame magic".to_owned(),
            FrameFault::BadHeaderCrc => "frame header CRC mismatch".to_owned(),
            FrameFault::TooLong(n) => format!("frame claims a {n}-byte payload, above the cap"),
            FrameFault::BadFrameCrc => "frame CRC mismatch".to_owned(),
        }
    }
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The whole length (60 + L) of the frame that starts at `bytes[0]`, when its header is valid
/// and `bytes` holds all of it; the frame CRC is left to the caller. Never panics.
pub(crate) fn check_header(bytes: &[u8]) -> Result<usize, FrameFault> {
    if bytes.len() < 4 {
        return Err(FrameFault::Short);
    }
    if u32_at(bytes, 0) != FRAME_MAGIC {
        return Err(FrameFault::BadMagic);
    }
    if bytes.len() < HEADER_LEN {
        return Err(FrameFault::Short);
    }
    if counted_crc(&bytes[..20]) != u32_at(bytes, 20) {
        return Err(FrameFault::BadHeaderCrc);
    }
    let len = u32_at(bytes, 4);
    if len as usize > MAX_PAYLOAD {
        return Err(FrameFault::TooLong(len));
    }
    let total = len as usize + OVERHEAD;
    if bytes.len() < total {
        return Err(FrameFault::Short);
    }
    Ok(total)
}

/// Decode the frame that starts at `bytes[0]`. Never panics, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<FrameRef<'_>, FrameFault> {
    let total = check_header(bytes)?;
    if counted_crc(&bytes[..total - 4]) != u32_at(bytes, total - 4) {
        return Err(FrameFault::BadFrameCrc);
    }
    let payload_end = total - CHAIN_LEN - 4;
    Ok(FrameRef {
        seq: u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")),
        kind: u16::from_le_bytes([bytes[16], bytes[17]]),
        flags: u16::from_le_bytes([bytes[18], bytes[19]]),
        header: &bytes[..20],
        payload: &bytes[HEADER_LEN..payload_end],
        chain: &bytes[payload_end..payload_end + CHAIN_LEN],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_then_decode() {
        let prev = genesis_chain(&[7; 16]);
        let mut buf = Vec::new();
        let chain = encode(&mut buf, &prev, 42, 3, 1, b"hello");
        assert_eq!(buf.len(), 5 + OVERHEAD);
        let f = decode(&buf).unwrap();
        assert_eq!(
            (f.seq, f.kind, f.flags, f.payload),
            (42, 3, 1, &b"hello"[..])
        );
        assert_eq!(f.chain_value(), chain);
        assert_eq!(next_chain(&prev, f.header, f.payload), chain);
    }

    #[test]
    fn every_cut_is_short_and_every_flip_is_caught() {
        let mut buf = Vec::new();
        encode(&mut buf, &[0; 32], 1, 1, 0, b"payload bytes");
        for cut in 0..buf.len() {
            let fault = decode(&buf[..cut]).unwrap_err();
            assert!(
                cut < 4 || fault == FrameFault::Short,
                "cut {cut}: {fault:?}"
            );
        }
        for at in 0..buf.len() {
            let mut b = buf.clone();
            b[at] ^= 0x01;
            assert!(decode(&b).is_err(), "flip at {at} went unnoticed");
        }
    }
}
