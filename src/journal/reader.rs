//! Replay: scan the journal, decode every valid frame and fold it into state, through the
//! newest snapshot that agrees with the journal.

use std::path::Path;

use super::error::JournalError;
use super::scan::{self, Resume, Scan, Status};
use super::snapshot::{self, Covers};
use crate::event::{self, Envelope, PayloadDecoder};
use crate::state::State;

/// Replay that passes this many events beyond the newest snapshot writes a new one.
pub const SNAPSHOT_EVERY: u64 = 10_000;

/// Decode every valid frame from `resume` on and hand it to `visit`. Stops at the first
/// damage, which the returned scan describes, or at the first error `visit` returns.
///
/// With more than one core and more than [`PIPELINE_MIN_BYTES`] to read, a second thread
/// reads, CRCs and chain-checks frames (the unchanged [`scan::scan`]) while this one decodes
/// and visits them; the result is the same as [`replay_sequential`]'s in every case.
pub fn replay(
    dir: &Path,
    resume: Option<&Resume>,
    mut visit: impl FnMut(Envelope) -> Result<(), JournalError>,
) -> Result<Scan, JournalError> {
    let mut decoder = PayloadDecoder::new();
    let pipeline = worth_pipelining(dir, resume);
    replay_frames(dir, resume, pipeline, |seq, kind, flags, payload| {
        let env = decoder
            .decode(seq, kind, flags, payload)
            .map_err(|e| undecodable(seq, e))?;
        visit(env)
    })
}

/// [`replay`] with each envelope lent to `visit` instead of given: the decoder then reuses
/// one envelope, and an unchanged actor costs nothing. What folds into state should use this.
pub fn replay_ref(
    dir: &Path,
    resume: Option<&Resume>,
    mut visit: impl FnMut(&Envelope) -> Result<(), JournalError>,
) -> Result<Scan, JournalError> {
    let mut decoder = PayloadDecoder::new();
    let pipeline = worth_pipelining(dir, resume);
    replay_frames(dir, resume, pipeline, |seq, kind, flags, payload| {
        let env = decoder
            .decode_ref(seq, kind, flags, payload)
            .map_err(|e| undecodable(seq, e))?;
        visit(env)
    })
}

/// Every valid frame's seq, kind, flags and payload, in order, to `on_frame`: on two threads
/// with `pipeline`, else on this one.
fn replay_frames(
    dir: &Path,
    resume: Option<&Resume>,
    pipeline: bool,
    mut on_frame: impl FnMut(u64, u16, u16, &[u8]) -> Result<(), JournalError>,
) -> Result<Scan, JournalError> {
    if pipeline {
        pipelined(dir, resume, on_frame)
    } else {
        let mut failure = None;
        let scan = scan::scan(dir, resume, |f| {
            match on_frame(f.seq, f.kind, f.flags, f.payload) {
                Ok(()) => true,
                Err(e) => {
                    failure = Some(e);
                    false
                }
            }
        })
        .map_err(io_error(dir))?;
        failure.map_or(Ok(scan), Err)
    }
}

fn io_error(dir: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    |source| JournalError::Io {
        path: dir.to_owned(),
        what: "read journal".to_owned(),
        source,
    }
}

fn undecodable(seq: u64, e: event::PayloadError) -> JournalError {
    JournalError::Undecodable {
        seq,
        reason: e.to_string(),
    }
}

/// [`replay`] as it was before the pipeline and [`PayloadDecoder`]: one thread, every
/// payload through [`event::decode_payload`]. The reference the faster paths are tested and
/// benchmarked against.
pub fn replay_sequential(
    dir: &Path,
    resume: Option<&Resume>,
    mut visit: impl FnMut(Envelope) -> Result<(), JournalError>,
) -> Result<Scan, JournalError> {
    let mut failure = None;
    let scan = scan::scan(dir, resume, |f| {
        let result = event::decode_payload(f.seq, f.kind, f.flags, f.payload)
            .map_err(|e| undecodable(f.seq, e))
            .and_then(&mut visit);
        match result {
            Ok(()) => true,
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    })
    .map_err(io_error(dir))?;
    match failure {
        Some(e) => Err(e),
        None => Ok(scan),
    }
}

/// Below this many bytes to read, a second thread costs more than it saves.
pub const PIPELINE_MIN_BYTES: u64 = 1 << 20;

fn worth_pipelining(dir: &Path, resume: Option<&Resume>) -> bool {
    if std::thread::available_parallelism().map_or(true, |n| n.get() < 2) {
        return false;
    }
    let Ok(segments) = super::segment::list(dir) else {
        // The scan will meet the same error and report it.
        return false;
    };
    let mut bytes = 0u64;
    for (no, path) in segments.iter().rev() {
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        match resume {
            Some(r) if *no < r.segment_no => break,
            Some(r) if *no == r.segment_no => bytes += len.saturating_sub(r.offset),
            _ => bytes += len,
        }
        if bytes >= PIPELINE_MIN_BYTES {
            return true;
        }
    }
    false
}

/// Verified frames on their way from the scanning thread to the decoding one. Payloads are
/// copied out of the segment buffer (about 20 ns a frame) so that the scan can reuse it.
#[derive(Default)]
struct Batch {
    payloads: Vec<u8>,
    /// seq, kind, flags, end of the payload in `payloads`.
    frames: Vec<(u64, u16, u16, usize)>,
}

/// Frames per batch: enough to make channel traffic negligible, few enough (about 200 KB)
/// that a batch is still in cache when the decoding thread reaches it.
const BATCH_FRAMES: usize = 1024;
/// Batches in flight; with the recycled ones this bounds the memory the pipeline holds.
const BATCHES_QUEUED: usize = 8;

enum Message {
    Frames(Batch),
    Done(std::io::Result<Scan>),
}

/// [`replay_frames`] on two threads: this one decodes and visits, a scoped one scans.
///
/// The scanning thread runs [`scan::scan`] itself, so classification is that of the
/// sequential scan by construction. It may run ahead of the visitor; what it finds after the
/// first decode or visit failure is dropped, exactly as the sequential scan would never have
/// looked at it.
fn pipelined(
    dir: &Path,
    resume: Option<&Resume>,
    mut on_frame: impl FnMut(u64, u16, u16, &[u8]) -> Result<(), JournalError>,
) -> Result<Scan, JournalError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::sync_channel::<Message>(BATCHES_QUEUED);
        let (recycle_tx, recycle_rx) = mpsc::channel::<Batch>();
        let stop = &stop;
        let scanner = s.spawn(move || {
            let fresh = |recycled: &mpsc::Receiver<Batch>| {
                recycled.try_recv().unwrap_or_else(|_| Batch {
                    payloads: Vec::with_capacity(BATCH_FRAMES * 256),
                    frames: Vec::with_capacity(BATCH_FRAMES),
                })
            };
            let mut batch = fresh(&recycle_rx);
            let mut receiver_gone = false;
            let result = scan::scan(dir, resume, |f| {
                batch.payloads.extend_from_slice(f.payload);
                batch
                    .frames
                    .push((f.seq, f.kind, f.flags, batch.payloads.len()));
                if batch.frames.len() == BATCH_FRAMES {
                    let full = std::mem::replace(&mut batch, fresh(&recycle_rx));
                    if tx.send(Message::Frames(full)).is_err() {
                        receiver_gone = true;
                    }
                }
                !receiver_gone && !stop.load(Ordering::Relaxed)
            });
            if !receiver_gone && !batch.frames.is_empty() {
                let _ = tx.send(Message::Frames(batch));
            }
            let _ = tx.send(Message::Done(result));
        });

        let mut outcome = None;
        'receive: for message in rx.iter() {
            match message {
                Message::Frames(mut batch) => {
                    let mut start = 0;
                    for &(seq, kind, flags, end) in &batch.frames {
                        let payload = &batch.payloads[start..end];
                        start = end;
                        if let Err(e) = on_frame(seq, kind, flags, payload) {
                            stop.store(true, Ordering::Relaxed);
                            outcome = Some(Err(e));
                            break 'receive;
                        }
                    }
                    batch.payloads.clear();
                    batch.frames.clear();
                    let _ = recycle_tx.send(batch);
                }
                Message::Done(result) => {
                    outcome = Some(result.map_err(io_error(dir)));
                    break 'receive;
                }
            }
        }
        // Unblock a scanner waiting on a full channel, then wait for it to finish.
        drop(rx);
        if let Err(panic) = scanner.join() {
            std::panic::resume_unwind(panic);
        }
        outcome.expect("the scanner always ends with Done unless it panicked")
    })
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
    let scan = replay_ref(dir, resume.as_ref(), |env| Ok(state.apply(env)?))?;
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
