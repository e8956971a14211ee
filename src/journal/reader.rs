//! Replay: scan the journal, decode every valid frame and fold it into state, through the
//! newest snapshot that agrees with the journal.

use std::path::Path;

use super::error::JournalError;
use super::files::{io_err, open_no_follow};
use super::scan::{self, Resume, Scan, Status};
use super::snapshot::Fold;
use super::snapshot::{self, Covers};
use crate::event::{self, Envelope, Event, PayloadDecoder, Vocabulary};

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
    visit: impl FnMut(Envelope) -> Result<(), JournalError>,
) -> Result<Scan, JournalError> {
    replay_of::<Event>(dir, resume, visit)
}

/// [`replay`] of a journal of vocabulary `E` (a worker's own journal: `WorkerEvent`).
pub fn replay_of<E: Vocabulary>(
    dir: &Path,
    resume: Option<&Resume>,
    mut visit: impl FnMut(Envelope<E>) -> Result<(), JournalError>,
) -> Result<Scan, JournalError> {
    // Every segment is checked (ours, written by nobody else, not a link) before any is read.
    crate::statedir::trust::check_journal(dir)?;
    let mut decoder = PayloadDecoder::<E>::new();
    let pipeline = worth_pipelining(dir, resume);
    let replayed = replay_frames(dir, resume, pipeline, |seq, kind, flags, payload| {
        let env = decoder
            .decode(seq, kind, flags, payload)
            .map_err(|e| undecodable(seq, e))?;
        visit(env)
    });
    classified(dir, resume, replayed)
}

/// A payload the visitor could not decode is damage: the verdict, its offset and the head
/// before it are the classifier's ([`scan::classify`]), as for any other damage.
fn classified(
    dir: &Path,
    resume: Option<&Resume>,
    replayed: Result<Scan, JournalError>,
) -> Result<Scan, JournalError> {
    match replayed {
        Err(JournalError::Undecodable { .. }) => {
            let scan =
                scan::classify(dir, resume, |_| true).map_err(io_err(dir, "read journal"))?;
            debug_assert_eq!(scan.status(), Status::Corrupt, "the classifier agrees");
            Ok(scan)
        }
        other => other,
    }
}

/// [`replay`] with each envelope lent to `visit` instead of given: the decoder then reuses
/// one envelope, and an unchanged actor costs nothing. What folds into state should use this.
pub fn replay_ref(
    dir: &Path,
    resume: Option<&Resume>,
    visit: impl FnMut(&Envelope) -> Result<(), JournalError>,
) -> Result<Scan, JournalError> {
    crate::statedir::trust::check_journal(dir)?;
    replay_ref_checked(dir, resume, visit)
}

/// [`replay_ref`] in a journal directory already checked by `trust::check_journal`.
fn replay_ref_checked(
    dir: &Path,
    resume: Option<&Resume>,
    mut visit: impl FnMut(&Envelope) -> Result<(), JournalError>,
) -> Result<Scan, JournalError> {
    let mut decoder = PayloadDecoder::<Event>::new();
    let pipeline = worth_pipelining(dir, resume);
    let replayed = replay_frames(dir, resume, pipeline, |seq, kind, flags, payload| {
        let env = decoder
            .decode_ref(seq, kind, flags, payload)
            .map_err(|e| undecodable(seq, e))?;
        visit(env)
    });
    classified(dir, resume, replayed)
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
        .map_err(io_err(dir, "read journal"))?;
        failure.map_or(Ok(scan), Err)
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
    .map_err(io_err(dir, "read journal"))?;
    classified(dir, resume, failure.map_or(Ok(scan), Err))
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
/// copied out of the segment buffer (one small memcpy a frame) so that the scan can reuse it.
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
                    outcome = Some(result.map_err(io_err(dir, "read journal")));
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
#[derive(Clone, Debug)]
pub struct Loaded<S> {
    pub state: S,
    pub scan: Scan,
    /// The seq of the snapshot used, if one was.
    pub snapshot_seq: Option<u64>,
    /// Why the newest snapshot was not used, if there was one.
    pub snapshot_rejected: Option<String>,
}

/// Load state through the newest valid snapshot plus the tail. Refuses a corrupt or tampered
/// journal. A torn tail is read up to the last valid frame (only a writer repairs it).
pub fn load<S: Fold>(dir: &Path) -> Result<Loaded<S>, JournalError> {
    // Segments and snapshots alike: checked before any is read.
    crate::statedir::trust::check_journal(dir)?;
    if super::segment::list(dir).map_or(true, |s| s.is_empty()) {
        return Err(JournalError::Missing(dir.to_owned()));
    }
    let mut snapshot_rejected = None;
    let mut start: Option<(Covers, S)> = None;
    if let Some((name_seq, path)) = snapshot::list(dir).ok().and_then(|l| l.into_iter().next()) {
        let candidate = read_no_follow(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| snapshot::decode(&b))
            .and_then(|(covers, state)| {
                snapshot::check_name(name_seq, &covers)?;
                snapshot::matches_journal(dir, &covers).map(|()| (covers, state))
            });
        match candidate {
            Ok(c) => start = Some(c),
            Err(why) => snapshot_rejected = Some(format!("{}: {why}", path.display())),
        }
    }
    let (state, resume, snapshot_seq) = match start {
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
        None => (S::default(), None, None),
    };
    let loaded = folded(dir, state, resume, snapshot_seq, snapshot_rejected)?;
    tracing::debug!(
        "journal {} read whole: {} events after snapshot {:?}",
        dir.display(),
        loaded.scan.events,
        loaded.snapshot_seq
    );
    Ok(loaded)
}

/// `loaded` brought up to the journal's head: only the frames appended since it was read are
/// folded in, once its last frame is found where it was read and with the same chain (the
/// check a snapshot passes before it is used); else a whole [`load`]. So a command that takes
/// the lock again after a wait reads what others appended meanwhile, not the journal again.
pub fn catch_up<S: Fold>(dir: &Path, loaded: Loaded<S>) -> Result<Loaded<S>, JournalError> {
    crate::statedir::trust::check_journal(dir)?;
    match loaded
        .scan
        .head
        .as_ref()
        .and_then(|head| resume_after(dir, head))
    {
        Some(resume) => {
            let caught_up = folded(
                dir,
                loaded.state,
                Some(resume),
                loaded.snapshot_seq,
                loaded.snapshot_rejected,
            )?;
            let events = caught_up.scan.events;
            tracing::debug!("journal {} caught up: {events} events", dir.display());
            Ok(caught_up)
        }
        None => load(dir),
    }
}

/// Where to go on from `head`, if its last frame is still in the journal as it was read.
fn resume_after(dir: &Path, head: &scan::Head) -> Option<Resume> {
    let covers = Covers {
        journal_id: head.journal_id,
        seq: head.last_seq,
        chain: head.chain,
        segment_no: head.segment_no,
        frame_offset: head.last_frame_offset?,
    };
    snapshot::matches_journal(dir, &covers).ok()?;
    head.resume()
}

/// `state` (as of `resume`, or empty) with every frame after `resume` folded in.
fn folded<S: Fold>(
    dir: &Path,
    mut state: S,
    resume: Option<Resume>,
    snapshot_seq: Option<u64>,
    snapshot_rejected: Option<String>,
) -> Result<Loaded<S>, JournalError> {
    let scan = replay_ref_checked(dir, resume.as_ref(), |env| Ok(state.fold(env)?))?;
    scan.refusal(dir)?;
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
    let mut f = open_no_follow(&path).map_err(io_err(&path, "read segment"))?;
    f.seek(SeekFrom::Start(covers.frame_offset + 4))
        .map_err(io_err(&path, "read segment"))?;
    let mut len = [0u8; 4];
    f.read_exact(&mut len)
        .map_err(io_err(&path, "read segment"))?;
    Ok(u64::from(u32::from_le_bytes(len)) + super::frame::OVERHEAD as u64)
}

fn read_no_follow(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_no_follow(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Whether a snapshot may be due, from the head the last closing writer left (`CHECKPOINT`)
/// and the newest snapshot's seq (its file name): a checkpoint-sized read (no link followed) and a listing, so a command
/// loads the journal again only when a snapshot is due. `true` when it cannot tell. Only a
/// hint: the checkpoint is not verified here, and a snapshot is written from a verified load.
pub fn snapshot_may_be_due(dir: &Path) -> bool {
    use super::checkpoint::{Checkpoint, CHECKPOINT_FILE, CHECKPOINT_LEN};
    use std::io::Read;
    let mut bytes = Vec::with_capacity(CHECKPOINT_LEN);
    let head = open_no_follow(&dir.join(CHECKPOINT_FILE))
        .and_then(|f| f.take(CHECKPOINT_LEN as u64).read_to_end(&mut bytes))
        .ok()
        .and_then(|_| Checkpoint::decode(&bytes).ok())
        .map(|c| c.last_seq);
    let newest = snapshot::list(dir)
        .ok()
        .map(|l| l.iter().map(|(seq, _)| *seq).max().unwrap_or(0));
    match (head, newest) {
        (Some(head), Some(newest)) => head.saturating_sub(newest) >= SNAPSHOT_EVERY,
        _ => true,
    }
}

/// Write a snapshot of `loaded` if enough events passed since the one it started from.
/// A failure is returned as a warning for the caller to print: snapshots are optional.
pub fn snapshot_if_due<S: Fold>(
    dir: &Path,
    loaded: &Loaded<S>,
) -> Result<Option<std::path::PathBuf>, String> {
    let Some(head) = &loaded.scan.head else {
        return Ok(None);
    };
    let since = head.last_seq - loaded.snapshot_seq.unwrap_or(0);
    if since < SNAPSHOT_EVERY || loaded.scan.status() != Status::Clean {
        return Ok(None);
    }
    snapshot_now(dir, loaded).map(Some)
}

pub fn snapshot_now<S: Fold>(dir: &Path, loaded: &Loaded<S>) -> Result<std::path::PathBuf, String> {
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
    debug_assert_eq!(loaded.state.events(), head.last_seq);
    snapshot::write(dir, &covers, &loaded.state)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use uuid::Uuid;

    use super::*;
    use crate::event::pool::{WorkerLaunched, WorkerSubmitIntent, WorkerTerminal};
    use crate::event::{Actor, Event};
    use crate::journal::frame;
    use crate::journal::segment;
    use crate::journal::{Options, Writer};

    /// Enough events for several pipeline batches, over many small segments.
    const EVENTS: u64 = 2_500;

    fn event(i: u64) -> Event {
        let id = Uuid::from_u128(u128::from(i / 3));
        match i % 3 {
            0 => Event::WorkerSubmitIntent(WorkerSubmitIntent {
                pool: "p".to_owned(),
                worker: format!("w{i}"),
                submission_id: id,
                cpus: 1,
                mem_mb: 10,
                publication_timeout_s: 5,
                command: vec!["true".to_owned()],
            }),
            1 => Event::WorkerLaunched(WorkerLaunched {
                submission_id: id,
                srun_pid: i as u32,
            }),
            _ => Event::WorkerTerminal(WorkerTerminal {
                submission_id: id,
                proof: "done".to_owned(),
            }),
        }
    }

    /// A journal written by three processes (three actors), in batches of varied size.
    fn build(dir: &Path) {
        let mut i = 0;
        for session in 0..3u32 {
            let actor = Actor {
                user: "u".to_owned(),
                host: "h".to_owned(),
                pid: 100 + session,
                command: vec!["dispatch".to_owned(), format!("s{session}")],
            };
            let opts = Options {
                max_segment_bytes: 16 << 10,
            };
            let w = Writer::open_as(dir, opts, actor).unwrap();
            let mut size = 1;
            while i < EVENTS * (u64::from(session) + 1) / 3 {
                let n = size.min(EVENTS * (u64::from(session) + 1) / 3 - i);
                w.append((i..i + n).map(event).collect()).unwrap();
                i += n;
                size = size * 3 % 97 + 1;
            }
        }
        assert!(segment::list(dir).unwrap().len() > 5);
    }

    /// The hint reads the closing writer's checkpoint against the newest snapshot; without a
    /// checkpoint it cannot tell, and says a snapshot may be due.
    #[test]
    fn a_snapshot_is_due_only_ten_thousand_events_after_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path());
        assert!(
            !snapshot_may_be_due(dir.path()),
            "2,500 events, no snapshot"
        );
        let head = |seq| crate::journal::checkpoint::Checkpoint {
            journal_id: [1; 16],
            segment_no: 1,
            segment_len: 100,
            last_seq: seq,
            last_frame_offset: 64,
            chain: crate::journal::frame::Chain::default(),
        };
        crate::journal::checkpoint::write(dir.path(), &head(SNAPSHOT_EVERY)).unwrap();
        assert!(snapshot_may_be_due(dir.path()));
        std::fs::write(dir.path().join(snapshot::file_name(5)), b"").unwrap();
        assert!(
            !snapshot_may_be_due(dir.path()),
            "one event short after snapshot 5"
        );
        std::fs::remove_file(dir.path().join(crate::journal::checkpoint::CHECKPOINT_FILE)).unwrap();
        assert!(
            snapshot_may_be_due(dir.path()),
            "no checkpoint: cannot tell"
        );
    }

    type Summary = (Status, u64, Option<scan::Head>, Option<scan::Damage>);

    fn summary(s: &Scan) -> Summary {
        (s.status(), s.events, s.head.clone(), s.damage().cloned())
    }

    /// Envelopes visited and the outcome, with errors as text (JournalError is not Eq).
    type Run = (Vec<Envelope>, Result<Summary, String>);

    /// Replay `dir` the way `how` names, with a visit that fails at `fail_at`.
    fn run(dir: &Path, resume: Option<&Resume>, fail_at: Option<u64>, how: &str) -> Run {
        let mut seen = Vec::new();
        let mut visit = |env: &Envelope| {
            if Some(env.seq) == fail_at {
                return Err(JournalError::Missing(format!("stop at {}", env.seq).into()));
            }
            seen.push(env.clone());
            Ok(())
        };
        let result = match how {
            "reference" => replay_sequential(dir, resume, |env| visit(&env)),
            "replay" => replay(dir, resume, |env| visit(&env)),
            "replay_ref" => replay_ref(dir, resume, &mut visit),
            "pipelined" | "single" | "pipelined_ref" => {
                let mut decoder = PayloadDecoder::new();
                let replayed =
                    replay_frames(dir, resume, how != "single", |seq, kind, flags, p| {
                        let env = match how {
                            "pipelined_ref" => decoder.decode_ref(seq, kind, flags, p).cloned(),
                            _ => decoder.decode(seq, kind, flags, p),
                        };
                        visit(&env.map_err(|e| undecodable(seq, e))?)
                    });
                classified(dir, resume, replayed)
            }
            _ => unreachable!(),
        };
        (seen, result.map(|s| summary(&s)).map_err(|e| e.to_string()))
    }

    /// Every path, from the start and from resume points, with and without a failing visit,
    /// gives what the single-threaded decode_payload path gives. Returns the reference.
    fn all_paths_agree(dir: &Path) -> Run {
        let full = scan::scan(dir, None, |_| true).unwrap();
        let mut resumes = vec![None];
        for k in [1, 2, 700, 1500, full.events.saturating_sub(1), full.events] {
            if k == 0 || k > full.events {
                continue;
            }
            let at = scan::scan(dir, None, |f| f.seq < k).unwrap();
            resumes.push(Some(at.head.unwrap().resume().unwrap()));
        }
        let mut reference = None;
        for resume in &resumes {
            for fail_at in [None, Some(1), Some(1030), Some(2000)] {
                let want = run(dir, resume.as_ref(), fail_at, "reference");
                for how in [
                    "replay",
                    "replay_ref",
                    "pipelined",
                    "single",
                    "pipelined_ref",
                ] {
                    let got = run(dir, resume.as_ref(), fail_at, how);
                    assert_eq!(
                        got.1, want.1,
                        "{how}, resume {resume:?}, fail at {fail_at:?}"
                    );
                    assert!(got.0 == want.0, "{how}: other envelopes");
                }
                if resume.is_none() && fail_at.is_none() {
                    reference = Some(want);
                }
            }
            // A resumed scan ends where the full one does, whatever it read to get there.
            if let Some(r) = resume {
                let part = scan::scan(dir, Some(r), |_| true).unwrap();
                assert_eq!(
                    (part.status(), &part.head, &part.damage()),
                    (full.status(), &full.head, &full.damage())
                );
                assert_eq!(part.events + r.next_seq - 1, full.events);
            }
        }
        reference.unwrap()
    }

    fn segment_path(dir: &Path, i: usize) -> std::path::PathBuf {
        segment::list(dir).unwrap()[i].1.clone()
    }

    fn last_segment(dir: &Path) -> std::path::PathBuf {
        segment::list(dir).unwrap().pop().unwrap().1
    }

    /// Offsets of the frames in a segment file.
    fn frames(path: &Path) -> Vec<(usize, usize)> {
        let b = std::fs::read(path).unwrap();
        let mut at = segment::SEGMENT_HEADER_LEN;
        let mut out = Vec::new();
        while let Ok(f) = frame::decode(&b[at..]) {
            out.push((at, f.len()));
            at += f.len();
        }
        out
    }

    fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
        let mut b = std::fs::read(path).unwrap();
        f(&mut b);
        std::fs::write(path, b).unwrap();
    }

    fn fresh() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path());
        dir
    }

    #[test]
    fn clean_journal() {
        let dir = fresh();
        let (seen, result) = all_paths_agree(dir.path());
        let (status, events, ..) = result.unwrap();
        assert_eq!((status, events), (Status::Clean, EVENTS + 1));
        assert_eq!(seen.len() as u64, EVENTS + 1);
    }

    #[test]
    fn torn_tails() {
        for cut in [1, 7, 30] {
            let dir = fresh();
            edit(&last_segment(dir.path()), |b| b.truncate(b.len() - cut));
            let (_, result) = all_paths_agree(dir.path());
            assert_eq!(result.unwrap().0, Status::TornTail, "cut {cut}");
        }
        for tail in [vec![0u8; 300], b"garbage after the last frame".to_vec()] {
            let dir = fresh();
            edit(&last_segment(dir.path()), |b| b.extend_from_slice(&tail));
            let (_, result) = all_paths_agree(dir.path());
            assert_eq!(result.unwrap().0, Status::TornTail);
        }
    }

    #[test]
    fn corrupt_journals() {
        // A flipped byte in a segment that is not the last.
        let dir = fresh();
        let seg = segment_path(dir.path(), 2);
        let (at, len) = frames(&seg)[3];
        edit(&seg, |b| b[at + len / 2] ^= 0x40);
        assert_eq!(all_paths_agree(dir.path()).1.unwrap().0, Status::Corrupt);
        // Spec §8: the damaged span runs to the next valid frame, in any segment.
        let damage = scan::scan(dir.path(), None, |_| true)
            .unwrap()
            .damage()
            .cloned()
            .unwrap();
        assert_eq!((damage.offset, damage.bytes), (at as u64, len as u64));
        // With nothing valid after it, to the end of that file.
        let dir = fresh();
        let seg = segment_path(dir.path(), 2);
        let (at, _) = frames(&seg)[3];
        let size = std::fs::metadata(&seg).unwrap().len();
        edit(&seg, |b| b[at..].iter_mut().for_each(|x| *x ^= 0x40));
        let damage = scan::scan(dir.path(), None, |_| true)
            .unwrap()
            .damage()
            .cloned()
            .unwrap();
        assert_eq!((damage.offset, damage.bytes), (at as u64, size - at as u64));

        // In the last segment, with valid frames after it.
        let dir = fresh();
        let seg = last_segment(dir.path());
        let (at, _) = frames(&seg)[1];
        edit(&seg, |b| b[at + 30] ^= 0x01);
        assert_eq!(all_paths_agree(dir.path()).1.unwrap().0, Status::Corrupt);

        // A damaged segment header, and a missing segment.
        let dir = fresh();
        edit(&segment_path(dir.path(), 3), |b| b[40] ^= 0x01);
        assert_eq!(all_paths_agree(dir.path()).1.unwrap().0, Status::Corrupt);
        let dir = fresh();
        std::fs::remove_file(segment_path(dir.path(), 4)).unwrap();
        assert_eq!(all_paths_agree(dir.path()).1.unwrap().0, Status::Corrupt);
    }

    #[test]
    fn damaged_header_of_the_segment_resumed_in() {
        let dir = fresh();
        let seg = segment_path(dir.path(), 2);
        let (at, len) = frames(&seg)[2];
        let no = segment::parse_file_name(seg.file_name().unwrap().to_str().unwrap()).unwrap();
        let before = scan::scan(dir.path(), None, |_| true).unwrap();
        let at_frame = scan::scan(dir.path(), None, |f| {
            f.seq
                < segment::SegmentHeader::decode(&std::fs::read(&seg).unwrap())
                    .unwrap()
                    .first_seq
                    + 2
        })
        .unwrap();
        let h = at_frame.head.unwrap();
        assert_eq!((h.segment_no, h.segment_len), (no, (at + len) as u64));
        let resume = h.resume().unwrap();
        assert_eq!(before.status(), Status::Clean);
        edit(&seg, |b| b[5] ^= 0x01);
        let file_len = std::fs::metadata(&seg).unwrap().len();
        let got = scan::scan(dir.path(), Some(&resume), |_| true).unwrap();
        let damage = got.damage().unwrap();
        // As when the whole file was read: the header's damage spans the whole file.
        assert_eq!(got.status(), Status::Corrupt);
        assert_eq!((damage.offset, damage.bytes), (0, file_len));
        let want = run(dir.path(), Some(&resume), None, "reference");
        assert_eq!(run(dir.path(), Some(&resume), None, "pipelined"), want);
    }

    #[test]
    fn tampered_journal() {
        // Change a payload byte and fix both CRCs: only the chain can tell.
        let dir = fresh();
        let seg = segment_path(dir.path(), 3);
        let (at, len) = frames(&seg)[4];
        edit(&seg, |b| {
            let f = &mut b[at..at + len];
            f[frame::HEADER_LEN + 3] ^= 0x01;
            let crc = crc32fast::hash(&f[..len - 4]);
            f[len - 4..].copy_from_slice(&crc.to_le_bytes());
        });
        assert_eq!(all_paths_agree(dir.path()).1.unwrap().0, Status::Tampered);
    }

    /// A visitor that panics must not leave the scanning thread blocked on a full channel.
    #[test]
    fn a_panicking_visitor_unwinds_through_the_pipeline() {
        let dir = fresh();
        let result = std::panic::catch_unwind(|| {
            replay_frames(dir.path(), None, true, |seq, _, _, _| {
                assert!(seq < 5, "visitor gives up at seq {seq}");
                Ok(())
            })
        });
        assert!(result.is_err());
        // And the journal is still replayable afterwards.
        assert_eq!(
            run(dir.path(), None, None, "pipelined").0.len() as u64,
            EVENTS + 1
        );
    }

    #[test]
    fn undecodable_payload_behind_a_valid_chain() {
        let dir = fresh();
        let s = scan::scan(dir.path(), None, |_| true).unwrap();
        let h = s.head.unwrap();
        let mut buf = Vec::new();
        frame::encode(&mut buf, &h.chain, h.last_seq + 1, 111, 0, b"\x94\x01\xc4");
        edit(&h.segment_path, |b| b.extend_from_slice(&buf));
        let (seen, result) = all_paths_agree(dir.path());
        let (status, events, ..) = result.unwrap();
        assert_eq!((status, events), (Status::Corrupt, h.last_seq));
        assert_eq!(seen.len() as u64, h.last_seq);
        let classified = scan::classify(dir.path(), None, |_| true).unwrap();
        assert!(classified
            .damage()
            .unwrap()
            .reason
            .contains("does not decode"));
    }
}
