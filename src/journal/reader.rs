//! Replay: scan the journal, decode every valid frame and fold it into state, through the
//! newest snapshot that agrees with the journal.

use std::path::Path;

use super::error::JournalError;
use super::scan::{self, Resume, Scan, Status};
use super::snapshot::{self, Covers};
use crate::event::{self, Envelope};
use crate::state::State;

/// Replay that passes this many events beyond the newest snapshot writes a new one.
pub const SNAPSHOT_EVERY: u64 = 10_000;

/// Decode every valid frame from `resume` on and hand it to `visit`. Stops at the first
/// damage, which the returned scan describes, or at the first error `visit` returns.
pub fn replay(
    dir: &Path,
    resume: Option<&Resume>,
    mut visit: impl FnMut(Envelope) -> Result<(), JournalError>,
) -> Result<Scan, JournalError> {
    let mut failure = None;
    let scan = scan::scan(dir, resume, |f| {
        let result = event::decode_payload(f.seq, f.kind, f.flags, f.payload)
            .map_err(|e| JournalError::Undecodable {
                seq: f.seq,
                reason: e.to_string(),
            })
            .and_then(&mut visit);
        match result {
            Ok(()) => true,
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    })
    .map_err(|source| JournalError::Io {
        path: dir.to_owned(),
        what: "read journal".to_owned(),
        source,
    })?;
    match failure {
        Some(e) => Err(e),
        None => Ok(scan),
    }
}

/// Reduced state with the scan that produced it.
#[derive(Debug)]
pub struct Loaded {
    pub state: State,
    pub scan: Scan,
    /// The seq of the snapshot used, if one was.
    pub snapshot_seq: Option<u64>,
    /// Why the newest snapshot was not used, if there was one.
    pub snapshot_rejected: Option<String>,
}

/// Load state through the newest valid snapshot plus the tail. Refuses a corrupt or tampered
/// journal. A torn tail is read up to the last valid frame (only a writer repairs it).
pub fn load(dir: &Path) -> Result<Loaded, JournalError> {
    if super::segment::list(dir).map_or(true, |s| s.is_empty()) {
        return Err(JournalError::Missing(dir.to_owned()));
    }
    let mut snapshot_rejected = None;
    let mut start: Option<(Covers, State)> = None;
    if let Some((_, path)) = snapshot::list(dir).ok().and_then(|l| l.into_iter().next()) {
        let candidate = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| snapshot::decode(&b))
            .and_then(|(covers, state)| {
                snapshot::matches_journal(dir, &covers).map(|()| (covers, state))
            });
        match candidate {
            Ok(c) => start = Some(c),
            Err(why) => snapshot_rejected = Some(format!("{}: {why}", path.display())),
        }
    }
    let (mut state, resume, snapshot_seq) = match start {
        Some((covers, state)) => {
            let frame_len = frame_len_at(dir, &covers)?;
            let resume = Resume {
                journal_id: covers.journal_id,
                segment_no: covers.segment_no,
                offset: covers.frame_offset + frame_len,
                next_seq: covers.seq + 1,
                chain: covers.chain,
                last_frame_offset: covers.frame_offset,
            };
            (state, Some(resume), Some(covers.seq))
        }
        None => (State::default(), None, None),
    };
    let scan = replay(dir, resume.as_ref(), |env| Ok(state.apply(&env)?))?;
    if matches!(scan.status, Status::Corrupt | Status::Tampered) {
        return Err(JournalError::Damaged {
            dir: dir.to_owned(),
            status: scan.status,
            damage: scan
                .damage
                .clone()
                .expect("damaged scans carry their damage"),
        });
    }
    Ok(Loaded {
        state,
        scan,
        snapshot_seq,
        snapshot_rejected,
    })
}

fn frame_len_at(dir: &Path, covers: &Covers) -> Result<u64, JournalError> {
    // `matches_journal` already decoded this frame; the payload length sits at offset 4.
    use std::io::{Read, Seek, SeekFrom};
    let path = dir.join(super::segment::file_name(covers.segment_no));
    let io = |source| JournalError::Io {
        path: path.clone(),
        what: "read segment".to_owned(),
        source,
    };
    let mut f = std::fs::File::open(&path).map_err(io)?;
    f.seek(SeekFrom::Start(covers.frame_offset + 4))
        .map_err(io)?;
    let mut len = [0u8; 4];
    f.read_exact(&mut len).map_err(io)?;
    Ok(u64::from(u32::from_le_bytes(len)) + super::frame::OVERHEAD as u64)
}

/// Write a snapshot of `loaded` if enough events passed since the one it started from.
/// A failure is returned as a warning for the caller to print: snapshots are optional.
pub fn snapshot_if_due(dir: &Path, loaded: &Loaded) -> Result<Option<std::path::PathBuf>, String> {
    let Some(head) = &loaded.scan.head else {
        return Ok(None);
    };
    let since = head.last_seq - loaded.snapshot_seq.unwrap_or(0);
    if since < SNAPSHOT_EVERY || loaded.scan.status != Status::Clean {
        return Ok(None);
    }
    snapshot_now(dir, loaded).map(Some)
}

pub fn snapshot_now(dir: &Path, loaded: &Loaded) -> Result<std::path::PathBuf, String> {
    let head = loaded.scan.head.as_ref().ok_or("the journal is empty")?;
    let frame_offset = head
        .last_frame_offset
        .ok_or("the last segment has no frame yet")?;
    let covers = Covers {
        journal_id: head.journal_id,
        seq: head.last_seq,
        chain: head.chain,
        segment_no: head.segment_no,
        frame_offset,
    };
    debug_assert_eq!(loaded.state.events, head.last_seq);
    snapshot::write(dir, &covers, &loaded.state)
}
