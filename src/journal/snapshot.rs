//! Snapshots of reduced state: an accelerator, never a source of truth.
//!
//! A snapshot names the frame it covers (segment, offset, seq) and that frame's chain value.
//! Loading checks that the journal still has exactly that frame there; any disagreement means
//! the snapshot is ignored and state is rebuilt by full replay.
//!
//! ```text
//! 0   8   magic "DISPSNAP"
//! 8   u16 snapshot format version (SNAPSHOT_VERSION)
//! 10  6   reserved (0)
//! 16  16  journal id
//! 32  u64 seq covered (the last event folded into the state)
//! 40  32  chain value of that event's frame
//! 72  u64 segment number holding that frame
//! 80  u64 offset of that frame in its segment
//! 88  u32 state length N
//! 92  u32 header CRC: CRC-32 of bytes 0..92
//! 96  N   state, MessagePack (rmp-serde, structs as arrays)
//! 96+N u32 CRC-32 of bytes 0..96+N
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

use super::files::fsync_dir;
use super::files::open_no_follow;
use super::frame::{self, Chain};
use super::segment;
use crate::event::{Envelope, ReduceError};

pub const SNAPSHOT_MAGIC: &[u8; 8] = b"DISPSNAP";
/// 2: job workers record their assets. 3: and their job name. 4: and why their submission
/// failed. 5: pools record their allocation's end and workers their srun. 6: pools record
/// creations in flight, who owns the allocation, and a release begun. (Job ids that were `u64`
/// becoming `slurm::JobId` changed no byte of a state: `tests/job_id_compat.rs` loads a version
/// 7 snapshot of the `u64` code and writes it back alike.) 8: every field of a pool worker
/// written. 9: a created pool's renewal (`--renew`), and the fields before it always written.
/// 10: a renewal's definite failures in a row (`Renewal::failed_in_row`, `last_failure`).
/// 11: a pool's end time, a renewal's last end and early end. 12: a pool worker's job
/// (`Worker::job_id`), and a renewal's count of workers finished in its allocation dropped.
pub const SNAPSHOT_VERSION: u16 = 12;
const HEADER_LEN: usize = 96;
/// Snapshots kept on disk; older ones are removed after a new one is in place.
pub const SNAPSHOTS_KEPT: usize = 2;
/// A state larger than this is not snapshotted (state is bounded far below it).
pub const MAX_STATE_BYTES: usize = 256 << 20;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Covers {
    pub journal_id: [u8; 16],
    pub seq: u64,
    pub chain: Chain,
    pub segment_no: u64,
    pub frame_offset: u64,
}

pub fn file_name(seq: u64) -> String {
    format!("snapshot-{seq:020}.dsnap")
}

fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("snapshot-")?.strip_suffix(".dsnap")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Snapshot files in `dir`, newest first.
pub fn list(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(seq) = entry.file_name().to_str().and_then(parse_file_name) {
            out.push((seq, entry.path()));
        }
    }
    out.sort_by_key(|e| std::cmp::Reverse(e.0));
    Ok(out)
}

/// What [`load`](super::load) folds the coordinator's journal into and a snapshot stores (`state::State`).
/// The journal knows it only by this: it can count, fold and (de)serialize it.
pub trait Fold: Default + serde::Serialize + serde::de::DeserializeOwned {
    /// Events folded, which is also the last seq folded.
    fn events(&self) -> u64;
    fn fold(&mut self, env: &Envelope) -> Result<(), ReduceError>;
}

pub fn encode<S: Fold>(covers: &Covers, state: &S) -> Result<Vec<u8>, String> {
    let body = rmp_serde::to_vec(state).map_err(|e| format!("state does not encode: {e}"))?;
    if body.len() > MAX_STATE_BYTES {
        return Err(format!(
            "state is {} bytes, above the snapshot cap",
            body.len()
        ));
    }
    let mut b = Vec::with_capacity(HEADER_LEN + body.len() + 4);
    b.extend_from_slice(SNAPSHOT_MAGIC);
    b.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    b.extend_from_slice(&[0u8; 6]);
    b.extend_from_slice(&covers.journal_id);
    b.extend_from_slice(&covers.seq.to_le_bytes());
    b.extend_from_slice(&covers.chain);
    b.extend_from_slice(&covers.segment_no.to_le_bytes());
    b.extend_from_slice(&covers.frame_offset.to_le_bytes());
    b.extend_from_slice(&(body.len() as u32).to_le_bytes());
    let crc = crc32fast::hash(&b[..92]);
    b.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(b.len(), HEADER_LEN);
    b.extend_from_slice(&body);
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    Ok(b)
}

pub fn decode<S: Fold>(bytes: &[u8]) -> Result<(Covers, S), String> {
    if bytes.len() < HEADER_LEN + 4 || &bytes[..8] != SNAPSHOT_MAGIC {
        return Err("not a snapshot".to_owned());
    }
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if crc32fast::hash(&bytes[..92]) != u32_at(92) {
        return Err("snapshot header CRC mismatch".to_owned());
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != SNAPSHOT_VERSION {
        return Err(format!(
            "snapshot version {version} is not {SNAPSHOT_VERSION}"
        ));
    }
    if bytes[10..16] != [0; 6] {
        return Err("snapshot reserved bytes are not 0".to_owned());
    }
    let n = u32_at(88) as usize;
    if bytes.len() != HEADER_LEN + n + 4 {
        return Err("snapshot length does not match its header".to_owned());
    }
    if crc32fast::hash(&bytes[..HEADER_LEN + n]) != u32_at(HEADER_LEN + n) {
        return Err("snapshot CRC mismatch".to_owned());
    }
    let covers = Covers {
        journal_id: bytes[16..32].try_into().expect("16 bytes"),
        seq: u64_at(32),
        chain: bytes[40..72].try_into().expect("32 bytes"),
        segment_no: u64_at(72),
        frame_offset: u64_at(80),
    };
    let state: S = rmp_serde::from_slice(&bytes[HEADER_LEN..HEADER_LEN + n])
        .map_err(|e| format!("snapshot state does not decode: {e}"))?;
    if state.events() != covers.seq {
        return Err(format!(
            "snapshot state has {} events but claims seq {}",
            state.events(),
            covers.seq
        ));
    }
    Ok((covers, state))
}

/// Does the snapshot's file name (`snapshot-<S>.dsnap`) name the seq its header covers? A
/// snapshot renamed to look newer than it is would otherwise be tried first.
pub fn check_name(name_seq: u64, covers: &Covers) -> Result<(), String> {
    if name_seq != covers.seq {
        return Err(format!(
            "the file is named for seq {name_seq} but its header covers seq {}",
            covers.seq
        ));
    }
    Ok(())
}

/// Does the journal in `dir` hold, at the place the snapshot names, the frame it covers?
pub fn matches_journal(dir: &Path, covers: &Covers) -> Result<(), String> {
    let path = dir.join(segment::file_name(covers.segment_no));
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    // Only the segment header and the one frame are read: the segment can be 64 MiB, and
    // reading it whole would cost more than the rest of a load through the snapshot.
    let file = open_no_follow(&path).map_err(cannot)?;
    let len = file.metadata().map_err(cannot)?.len();
    let head = read_upto(&file, 0, segment::SEGMENT_HEADER_LEN as u64, len).map_err(cannot)?;
    let header = segment::SegmentHeader::decode(&head).map_err(|f| f.describe())?;
    if header.journal_id != covers.journal_id {
        return Err("snapshot belongs to another journal".to_owned());
    }
    let at = covers.frame_offset;
    if at < segment::SEGMENT_HEADER_LEN as u64 || at >= len {
        return Err("snapshot points outside its segment".to_owned());
    }
    // The frame's own header says how long it is; `frame::decode` looks at no byte past that
    // length, so reading up to it (or to the end of the file) decides exactly as the whole
    // rest of the segment would.
    let frame_head = read_upto(&file, at, frame::HEADER_LEN as u64, len).map_err(cannot)?;
    let claimed = frame_head
        .get(4..8)
        .map_or(0, |b| {
            u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize
        })
        .min(frame::MAX_PAYLOAD);
    let bytes = read_upto(&file, at, (claimed + frame::OVERHEAD) as u64, len).map_err(cannot)?;
    let f = frame::decode(&bytes).map_err(|fault| fault.describe())?;
    if f.seq != covers.seq || f.chain != covers.chain {
        return Err(format!(
            "the frame at the snapshot's offset is seq {} with another chain",
            f.seq
        ));
    }
    Ok(())
}

/// Up to `want` bytes of `file` from `at`, fewer where the file (of length `len`) ends.
fn read_upto(file: &std::fs::File, at: u64, want: u64, len: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let n = want.min(len.saturating_sub(at)) as usize;
    let mut buf = vec![0u8; n];
    file.read_exact_at(&mut buf, at)?;
    Ok(buf)
}

/// Write a snapshot atomically: temp file, fsync, rename, fsync the directory.
/// Then remove all but the newest [`SNAPSHOTS_KEPT`].
pub fn write<S: Fold>(dir: &Path, covers: &Covers, state: &S) -> Result<PathBuf, String> {
    let bytes = encode(covers, state)?;
    let path = dir.join(file_name(covers.seq));
    let tmp = dir.join(format!(
        "{}.tmp-{}",
        file_name(covers.seq),
        std::process::id()
    ));
    let result = (|| -> std::io::Result<()> {
        let mut f = super::files::private_file().open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write snapshot {}: {e}", path.display()));
    }
    fsync_dir(dir).map_err(|e| e.to_string())?;
    if let Ok(all) = list(dir) {
        for (_, old) in all.into_iter().skip(SNAPSHOTS_KEPT) {
            let _ = std::fs::remove_file(old);
        }
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::pool::PoolDetached;
    use crate::event::{test_actor, Event};
    use crate::journal::{scan, Options, Writer};

    /// A fold that only counts: the journal's own tests know no `State` either.
    #[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
    struct Counted(u64);

    impl Fold for Counted {
        fn events(&self) -> u64 {
            self.0
        }

        fn fold(&mut self, env: &crate::event::Envelope) -> Result<(), crate::event::ReduceError> {
            self.0 = env.seq;
            Ok(())
        }
    }

    /// `matches_journal` as it was, reading the whole segment: the reference.
    fn matches_reading_everything(dir: &Path, covers: &Covers) -> Result<(), String> {
        let path = dir.join(segment::file_name(covers.segment_no));
        let bytes =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let header = segment::SegmentHeader::decode(&bytes).map_err(|f| f.describe())?;
        if header.journal_id != covers.journal_id {
            return Err("snapshot belongs to another journal".to_owned());
        }
        let at = covers.frame_offset as usize;
        if at < segment::SEGMENT_HEADER_LEN || at >= bytes.len() {
            return Err("snapshot points outside its segment".to_owned());
        }
        let f = frame::decode(&bytes[at..]).map_err(|fault| fault.describe())?;
        if f.seq != covers.seq || f.chain != covers.chain {
            return Err(format!(
                "the frame at the snapshot's offset is seq {} with another chain",
                f.seq
            ));
        }
        Ok(())
    }

    #[test]
    fn matches_journal_decides_as_reading_the_whole_segment() {
        let dir = tempfile::tempdir().unwrap();
        let w = Writer::open_as(dir.path(), Options::default(), test_actor()).unwrap();
        let events = (0..40)
            .map(|i| {
                Event::PoolDetached(PoolDetached {
                    pool: "x".repeat(i * 7),
                })
            })
            .collect();
        w.append(events).unwrap();
        drop(w);
        let mut frames = Vec::new();
        let s = scan::scan(dir.path(), None, |f| {
            frames.push((f.seq, f.chain_value()));
            true
        })
        .unwrap();
        let head = s.head.unwrap();
        let path = head.segment_path.clone();
        let full_len = std::fs::metadata(&path).unwrap().len();
        let mut offsets = vec![0, 95, 96, full_len - 1, full_len, full_len + 10];
        let mut at = segment::SEGMENT_HEADER_LEN as u64;
        let bytes = std::fs::read(&path).unwrap();
        while let Ok(f) = frame::decode(&bytes[at as usize..]) {
            offsets.extend([at, at + 1, at + 4]);
            at += f.len() as u64;
        }
        let check = |dir: &Path| {
            for &offset in &offsets {
                for &(seq, chain) in [frames[0], frames[5], frames[40]].iter() {
                    for journal_id in [head.journal_id, [0; 16]] {
                        let covers = Covers {
                            journal_id,
                            seq,
                            chain,
                            segment_no: head.segment_no,
                            frame_offset: offset,
                        };
                        assert_eq!(
                            matches_journal(dir, &covers),
                            matches_reading_everything(dir, &covers),
                            "{covers:?}"
                        );
                    }
                }
            }
        };
        check(dir.path());
        // Cut inside the last frame, then inside the header.
        for len in [full_len - 3, full_len - 200, 60, 0] {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(len)
                .unwrap();
            check(dir.path());
        }
        std::fs::remove_file(&path).unwrap();
        check(dir.path());
    }

    /// A snapshot written by an older version (whose `State` had another shape) is ignored,
    /// never misread as today's, even with every CRC right.
    #[test]
    fn a_snapshot_of_an_older_version_is_ignored() {
        let covers = Covers {
            journal_id: [1; 16],
            seq: 0,
            chain: [0; 32],
            segment_no: 1,
            frame_offset: 96,
        };
        let mut bytes = encode(&covers, &Counted::default()).unwrap();
        assert!(decode::<Counted>(&bytes).is_ok());
        bytes[8..10].copy_from_slice(&(SNAPSHOT_VERSION - 1).to_le_bytes());
        let h = crc32fast::hash(&bytes[..92]);
        bytes[92..96].copy_from_slice(&h.to_le_bytes());
        let n = bytes.len() - 4;
        let c = crc32fast::hash(&bytes[..n]);
        bytes[n..].copy_from_slice(&c.to_le_bytes());
        let e = decode::<Counted>(&bytes).unwrap_err();
        let want = format!(
            "snapshot version {} is not {SNAPSHOT_VERSION}",
            SNAPSHOT_VERSION - 1
        );
        assert!(e.contains(&want), "{e}");
    }
}
