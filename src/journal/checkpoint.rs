//! The writer's checkpoint (`journal/CHECKPOINT`, journal-format.md §7.2): where the journal
//! ended when the last writer closed it, so that the next writer's open checks only what a
//! crash can have damaged (the bytes after that point) instead of every frame.
//!
//! ```text
//! 0   8   magic "DISPCKPT"
//! 8   u16 checkpoint version (1)
//! 10  6   reserved (0)
//! 16  16  journal id
//! 32  u64 segment number of the head
//! 40  u64 length of that segment at the checkpoint (the end of the frame at 56..)
//! 48  u64 seq of the last frame (the head)
//! 56  u64 offset of that frame in its segment
//! 64  32  chain value of that frame
//! 96  u32 CRC-32 of bytes 0..96
//! ```
//!
//! It is never trusted blindly: [`trusted_point`] accepts it only if its CRC holds, its
//! journal id is the segments', its segment exists with at least that length, and that segment
//! holds, at the offset named, a valid frame with that seq and chain ending exactly at the
//! length named. Anything else (missing, stale past a rotation is fine, damaged, from another
//! journal, pointing past the end) means a full classification.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::frame::{self, Chain};
use super::scan::Resume;
use super::segment::{self, SegmentHeader, SEGMENT_HEADER_LEN};

pub const CHECKPOINT_FILE: &str = "CHECKPOINT";
pub const CHECKPOINT_MAGIC: &[u8; 8] = b"DISPCKPT";
pub const CHECKPOINT_VERSION: u16 = 1;
pub const CHECKPOINT_LEN: usize = 100;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub journal_id: [u8; 16],
    pub segment_no: u64,
    pub segment_len: u64,
    pub last_seq: u64,
    pub last_frame_offset: u64,
    pub chain: Chain,
}

impl Checkpoint {
    pub fn encode(&self) -> [u8; CHECKPOINT_LEN] {
        let mut b = [0u8; CHECKPOINT_LEN];
        b[0..8].copy_from_slice(CHECKPOINT_MAGIC);
        b[8..10].copy_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
        b[16..32].copy_from_slice(&self.journal_id);
        b[32..40].copy_from_slice(&self.segment_no.to_le_bytes());
        b[40..48].copy_from_slice(&self.segment_len.to_le_bytes());
        b[48..56].copy_from_slice(&self.last_seq.to_le_bytes());
        b[56..64].copy_from_slice(&self.last_frame_offset.to_le_bytes());
        b[64..96].copy_from_slice(&self.chain);
        let crc = crc32fast::hash(&b[..96]);
        b[96..100].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Checkpoint, String> {
        if b.len() != CHECKPOINT_LEN {
            return Err(format!("{} bytes, not {CHECKPOINT_LEN}", b.len()));
        }
        if &b[0..8] != CHECKPOINT_MAGIC {
            return Err("bad magic".to_owned());
        }
        if frame::u32_at(b, 96) != crc32fast::hash(&b[..96]) {
            return Err("CRC mismatch".to_owned());
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != CHECKPOINT_VERSION || b[10..16] != [0; 6] {
            return Err(format!(
                "version {version} or reserved bytes not understood"
            ));
        }
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Ok(Checkpoint {
            journal_id: b[16..32].try_into().expect("16 bytes"),
            segment_no: u64_at(32),
            segment_len: u64_at(40),
            last_seq: u64_at(48),
            last_frame_offset: u64_at(56),
            chain: b[64..96].try_into().expect("32 bytes"),
        })
    }
}

/// Replace the checkpoint atomically: a temporary file renamed over it. Not fsynced: it is
/// written only after the frames it names were fdatasynced, so whatever a crash leaves (the old
/// checkpoint, the new one, or an empty or partial file that fails its CRC) is either a point
/// that was verified or is rejected.
pub fn write(dir: &Path, c: &Checkpoint) -> std::io::Result<()> {
    let tmp = dir.join(format!("{CHECKPOINT_FILE}.tmp-{}", std::process::id()));
    let mut f = super::files::private_file()
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(&c.encode())?;
    drop(f);
    crate::failpoint::hit("journal-checkpoint-before-rename");
    std::fs::rename(&tmp, dir.join(CHECKPOINT_FILE))
}

/// Where the writer's open may start checking: the checkpoint, if every check holds.
pub fn trusted_point(dir: &Path) -> Result<Resume, String> {
    let mut bytes = Vec::new();
    super::files::open_no_follow(&dir.join(CHECKPOINT_FILE))
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| format!("no checkpoint: {e}"))?;
    let c = Checkpoint::decode(&bytes)?;
    // Segments are numbered 1, 2, 3 … without gaps (§1); the checkpoint's is one of them.
    let numbers: Vec<u64> = segment::list(dir)
        .map_err(|e| format!("list segments: {e}"))?
        .into_iter()
        .map(|(no, _)| no)
        .collect();
    if numbers.iter().copied().ne(1..=numbers.len() as u64) || c.segment_no > numbers.len() as u64 {
        return Err(
            "the segments are not 1..N without gaps, or the checkpoint's is not among them"
                .to_owned(),
        );
    }
    let path = dir.join(segment::file_name(c.segment_no));
    let mut f = super::files::open_no_follow(&path)
        .map_err(|e| format!("segment {} of the checkpoint: {e}", c.segment_no))?;
    let mut header = [0u8; SEGMENT_HEADER_LEN];
    f.read_exact(&mut header)
        .map_err(|e| format!("segment header: {e}"))?;
    let header = SegmentHeader::decode(&header).map_err(|e| e.describe())?;
    if header.journal_id != c.journal_id || header.segment_no != c.segment_no {
        return Err("the checkpoint names another journal or segment".to_owned());
    }
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    if c.segment_len > len || c.last_frame_offset < SEGMENT_HEADER_LEN as u64 {
        return Err(format!(
            "the checkpoint's segment length {} is past the file's {len}",
            c.segment_len
        ));
    }
    let frame_len = c
        .segment_len
        .checked_sub(c.last_frame_offset)
        .filter(|&n| n as usize <= frame::MAX_PAYLOAD + frame::OVERHEAD)
        .ok_or("the checkpoint's frame does not fit its segment length")?;
    let mut buf = vec![0u8; frame_len as usize];
    f.seek(SeekFrom::Start(c.last_frame_offset))
        .and_then(|_| f.read_exact(&mut buf))
        .map_err(|e| format!("read the checkpoint's frame: {e}"))?;
    let fr =
        frame::decode(&buf).map_err(|e| format!("the checkpoint's frame: {}", e.describe()))?;
    if fr.len() != buf.len() || fr.seq != c.last_seq || fr.chain != &c.chain[..] {
        return Err("the frame at the checkpoint is not the one it names".to_owned());
    }
    Ok(Resume {
        journal_id: c.journal_id,
        segment_no: c.segment_no,
        offset: c.segment_len,
        next_seq: c.last_seq + 1,
        chain: c.chain,
        last_frame_offset: c.last_frame_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_any_flip_is_rejected() {
        let c = Checkpoint {
            journal_id: [7; 16],
            segment_no: 3,
            segment_len: 4000,
            last_seq: 99,
            last_frame_offset: 3800,
            chain: [9; 32],
        };
        let b = c.encode();
        assert_eq!(Checkpoint::decode(&b), Ok(c));
        for at in 0..b.len() {
            let mut d = b;
            d[at] ^= 0x10;
            assert!(Checkpoint::decode(&d).is_err(), "flip at {at}");
        }
        assert!(Checkpoint::decode(&b[..99]).is_err());
    }
}
