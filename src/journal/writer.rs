//! The journal writer: exclusive lock (this host's `flock`, then the cross-host lease of
//! [`super::lease`]), one write plus fdatasync per commit with the segment's end checked before
//! and after, segment rotation, torn-tail repair on open, and poisoning on any write or sync
//! error.
//!
//! One appender at a time: no command shares a writer between threads, so there is no group
//! commit (it was ~300 lines of queueing that only a bench used).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use uuid::Uuid;

use super::checkpoint;
use super::error::JournalError;
use super::files::{create_private_dir, fsync_dir, io_err};
use super::frame::{self, Chain};
use super::lease::{self, Lease};
use super::repair::{cut_torn_tail, unrecorded_repair};
use super::scan::{self, Status, MAX_WRITE_BYTES};
use super::segment::{self, SegmentHeader, FORMAT_VERSION};
use crate::event::{self, Actor, Event, Genesis, JournalMerged, Micros, Recovered, Vocabulary};
use crate::failpoint;

/// Name of the lock file inside the journal directory.
pub const LOCK_FILE: &str = "LOCK";
/// Random (version 4) event ids for a whole commit from one getrandom(2) call. `Uuid::new_v4`
/// makes one call per id: a million for a million-event batch.
#[derive(Default)]
struct RandomIds {
    bytes: Vec<u8>,
    used: usize,
}

impl RandomIds {
    /// Make `n` ids ready, with fresh randomness.
    fn refill(&mut self, n: usize) {
        self.bytes.clear();
        self.bytes.resize(n * 16, 0);
        self.used = 0;
        if fill_random(&mut self.bytes).is_err() {
            // `next` then falls back to `Uuid::new_v4`, which has its own sources.
            self.bytes.clear();
        }
    }

    fn next(&mut self) -> Uuid {
        match self.bytes.get(self.used..self.used + 16) {
            Some(b) => {
                self.used += 16;
                uuid::Builder::from_random_bytes(b.try_into().expect("16 bytes")).into_uuid()
            }
            None => Uuid::new_v4(),
        }
    }
}

#[cfg(target_os = "linux")]
fn fill_random(buf: &mut [u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match crate::sys::getrandom(&mut buf[at..]) {
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn fill_random(_: &mut [u8]) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Segments roll over once they would grow past this many bytes.
pub const DEFAULT_MAX_SEGMENT_BYTES: u64 = 64 << 20;

#[derive(Clone, Debug)]
pub struct Options {
    pub max_segment_bytes: u64,
}

/// The environment variable that sets the segment size (bytes), for tests and operators who
/// want multi-segment journals without writing 64 MiB.
pub const SEGMENT_BYTES_ENV: &str = "DISPATCH_SEGMENT_BYTES";
/// The smallest segment size the setting accepts: a header and a few frames.
pub const MIN_SEGMENT_BYTES: u64 = 4096;

// How the size limits relate, checked when the crate compiles: a segment holds its header and
// at least one frame of any size (the writer rotates only a segment that has a frame), a
// commit's one write holds at least one whole frame, and the default segment holds a write.
const _: () = assert!(MIN_SEGMENT_BYTES as usize > segment::SEGMENT_HEADER_LEN);
const _: () = assert!(frame::MAX_PAYLOAD + frame::OVERHEAD <= MAX_WRITE_BYTES);
const _: () = assert!(DEFAULT_MAX_SEGMENT_BYTES as usize >= MAX_WRITE_BYTES);

impl Options {
    /// The segment size `DISPATCH_SEGMENT_BYTES` asks for, raised to [`MIN_SEGMENT_BYTES`];
    /// the default when it is unset or not a number (which is warned about).
    pub fn segment_bytes_from(value: Option<&str>) -> u64 {
        match value.map(str::trim) {
            None | Some("") => DEFAULT_MAX_SEGMENT_BYTES,
            Some(v) => match v.parse::<u64>() {
                Ok(n) => n.max(MIN_SEGMENT_BYTES),
                Err(_) => {
                    tracing::warn!(
                        "{SEGMENT_BYTES_ENV}={v:?} is not a byte count; segments stay at {DEFAULT_MAX_SEGMENT_BYTES} bytes"
                    );
                    DEFAULT_MAX_SEGMENT_BYTES
                }
            },
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        let value = std::env::var(SEGMENT_BYTES_ENV).ok();
        Options {
            max_segment_bytes: Options::segment_bytes_from(value.as_deref()),
        }
    }
}

/// What the writer did when it opened the journal.
#[derive(Clone, Debug, Default)]
pub struct Opened {
    pub created: bool,
    pub repaired: Option<Recovered>,
    /// A fork merged by this open ([`JournalWriter::open_merging_forks`] only).
    pub merged: Option<JournalMerged>,
}

/// How much of the journal a writer's open classifies, and what it does with a fork.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// From the last point a writer verified (§7.2): the open of every command.
    FromCheckpoint,
    /// The whole journal: `journal init` and `journal repair` of a journal that is not forked.
    Everything,
    /// The whole journal, and a fork is merged (§8.1): `journal repair`.
    EverythingAndMerge,
}

/// Merge the fork `scan` found and classify the journal again: the merge leaves it clean, or
/// the open refuses it as any damage.
fn merge_and_rescan<E: Vocabulary>(
    dir: &Path,
    scan: &scan::Scan,
    actor: &Actor,
) -> Result<(JournalMerged, scan::Scan), JournalError> {
    let scan::Outcome::Forked(_, fork) = &scan.outcome else {
        unreachable!("only a forked scan is merged")
    };
    let head = scan.head.as_ref().expect("a fork has a trunk");
    let merged = super::merge::merge_fork::<E>(&head.segment_path, fork, actor)?;
    let rescan = scan::classify(dir, None, |_| true).map_err(io_err(dir, "read journal"))?;
    assert_ne!(
        rescan.status(),
        Status::Forked,
        "a merged fork is a line: every frame continues the one before it"
    );
    Ok((merged, rescan))
}

/// Counters since the writer opened: events, write(2) calls and fdatasync(2) calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub events: u64,
    pub writes: u64,
    pub syncs: u64,
}

/// An event that is on disk: its seq, id and time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    pub seq: u64,
    pub id: Uuid,
    pub time: Micros,
}

struct Core {
    file: File,
    journal_id: [u8; 16],
    next_seq: u64,
    chain: Chain,
    segment_no: u64,
    segment_len: u64,
    /// Where the last frame of the current segment starts, once it has one.
    last_frame_offset: Option<u64>,
    poisoned: Option<String>,
    stats: Stats,
    buf: Vec<u8>,
    payload: Vec<u8>,
    ids: RandomIds,
}

/// The one writer of a journal. Holds the directory's exclusive lock until dropped.
/// Appends from several threads are serialised (each is its own commit). `E` is the journal's
/// vocabulary: [`Writer`] writes the coordinator's, `JournalWriter<WorkerEvent>` a worker's own.
pub struct JournalWriter<E: Vocabulary> {
    vocabulary: std::marker::PhantomData<fn(E)>,
    dir: PathBuf,
    opts: Options,
    actor: Actor,
    opened: Opened,
    core: Mutex<Core>,
    /// Dropped before `_lock`: the cross-host lease goes first, this host's `flock` last.
    lease: Lease,
    _lock: File,
}

/// The writer of the coordinator's journal.
pub type Writer = JournalWriter<Event>;

impl<E: Vocabulary> JournalWriter<E> {
    /// Open the journal in `dir` for writing, creating it if absent and repairing a torn tail.
    /// Blocks until the exclusive lock is free. A corrupt or tampered journal is refused.
    pub fn open(dir: &Path, opts: Options) -> Result<Self, JournalError> {
        Self::open_as(dir, opts, Actor::current())
    }

    /// [`Writer::open`] that classifies the whole journal, whatever the checkpoint says: for
    /// `journal repair` and `journal init`, which an operator runs to learn the journal's
    /// state, so that damage anywhere (not only where a crash can leave it) refuses them.
    pub fn open_checking_everything(dir: &Path, opts: Options) -> Result<Self, JournalError> {
        Self::open_with(dir, opts, Actor::current(), Check::Everything)
    }

    /// [`Writer::open_checking_everything`] that merges a forked journal (§8.1) instead of
    /// refusing it: for `journal repair` only, which an operator runs to get out of a fork.
    pub fn open_merging_forks(dir: &Path, opts: Options) -> Result<Self, JournalError> {
        Self::open_with(dir, opts, Actor::current(), Check::EverythingAndMerge)
    }

    pub fn open_as(dir: &Path, opts: Options, actor: Actor) -> Result<Self, JournalError> {
        Self::open_with(dir, opts, actor, Check::FromCheckpoint)
    }

    fn open_with(
        dir: &Path,
        opts: Options,
        actor: Actor,
        check: Check,
    ) -> Result<Self, JournalError> {
        let (lock, lease) = lock_journal(dir)?;
        let mut opened = Opened::default();
        let (head, torn) = classify_for_open::<E>(dir, check, &actor, &mut opened)?;
        let core = match &head {
            None => {
                opened.created = true;
                create_journal::<E>(dir, &opts, &actor, &lease)?
            }
            Some(head) => {
                let (core, repaired) = reopen_at(head, torn.as_ref())?;
                opened.repaired = repaired;
                core
            }
        };
        let needs_genesis = core.next_seq == 1;
        debug_assert!(
            !needs_genesis || core.chain == frame::genesis_chain(&core.journal_id),
            "a journal without a frame ends at its genesis chain"
        );
        let journal_id = core.journal_id;
        let writer = JournalWriter {
            vocabulary: std::marker::PhantomData,
            dir: dir.to_owned(),
            opts,
            actor,
            opened,
            core: Mutex::new(core),
            lease,
            _lock: lock,
        };
        if needs_genesis {
            writer.append(vec![E::genesis(Genesis {
                journal_id: Uuid::from_bytes(journal_id),
                format_version: FORMAT_VERSION,
            })])?;
        }
        if let Some(recovered) = &writer.opened.repaired {
            writer.append(vec![E::recovered(recovered.clone())])?;
        }
        Ok(writer)
    }

    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    pub fn journal_id(&self) -> Uuid {
        Uuid::from_bytes(self.lock_core().journal_id)
    }

    /// The seq the next event will get.
    pub fn next_seq(&self) -> u64 {
        self.lock_core().next_seq
    }

    pub fn stats(&self) -> Stats {
        self.lock_core().stats
    }

    fn lock_core(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the core poisons the mutex; the writer then refuses to write.
        match self.core.lock() {
            Ok(g) => g,
            Err(p) => {
                let mut g = p.into_inner();
                g.poisoned
                    .get_or_insert_with(|| "a writer thread panicked".to_owned());
                g
            }
        }
    }

    /// Append events durably: when this returns `Ok`, they are written and fdatasynced, in order,
    /// with consecutive seqs, in one commit.
    pub fn append(&self, events: Vec<E>) -> Result<Vec<Committed>, JournalError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut core = self.lock_core();
        // A panic while committing leaves the mutex poisoned; `lock_core` then refuses.
        core.commit(&self.dir, &self.opts, &self.actor, &events, &self.lease)
    }

    pub fn append_one(&self, event: E) -> Result<Committed, JournalError> {
        let mut c = self.append(vec![event])?;
        Ok(c.pop().expect("one event in, one out"))
    }
}

impl Core {
    fn new(
        file: File,
        journal_id: [u8; 16],
        next_seq: u64,
        chain: Chain,
        segment_no: u64,
        segment_len: u64,
        last_frame_offset: Option<u64>,
    ) -> Core {
        Core {
            file,
            journal_id,
            next_seq,
            chain,
            segment_no,
            segment_len,
            last_frame_offset,
            poisoned: None,
            stats: Stats::default(),
            buf: Vec::with_capacity(64 << 10),
            payload: Vec::with_capacity(4 << 10),
            ids: RandomIds::default(),
        }
    }

    fn commit<E: Vocabulary>(
        &mut self,
        dir: &Path,
        opts: &Options,
        actor: &Actor,
        events: &[E],
        lease: &Lease,
    ) -> Result<Vec<Committed>, JournalError> {
        if let Some(why) = &self.poisoned {
            return Err(JournalError::Poisoned(why.clone()));
        }

        self.ids.refill(events.len());
        // Frames are built against the current head, which moves only after fdatasync.
        let (ends, committed, new_chain) =
            self.frame_events(actor, events, self.next_seq, self.chain)?;
        let mut written = Ok(());
        if self.segment_len + self.buf.len() as u64 > opts.max_segment_bytes
            && self.segment_len > segment::SEGMENT_HEADER_LEN as u64
        {
            written = self.rotate(dir);
        }
        let segment_start = self.segment_len;
        let last_start = ends.len().checked_sub(2).map_or(0, |i| ends[i]);
        if written.is_ok() {
            written = self.write_frames(&ends, lease).and_then(|()| self.sync());
        }
        if written.is_ok() {
            // The frames must be where they were written, and the last of them the end.
            let new_last = segment_start + last_start as u64;
            written = self.check_tail_is(new_last, new_chain, true);
        }
        match written {
            Ok(()) => {
                // What a reader will check of these frames, checked before the caller is told.
                assert_eq!(committed.len(), events.len(), "one frame per event");
                assert_eq!(ends.len(), events.len(), "one frame end per event");
                assert!(
                    ends.windows(2).all(|w| w[0] < w[1]),
                    "frames are laid end to end"
                );
                assert!(
                    committed
                        .iter()
                        .enumerate()
                        .all(|(i, c)| c.seq == self.next_seq + i as u64),
                    "seqs run on from the head by one"
                );
                self.last_frame_offset = Some(segment_start + last_start as u64);
                self.stats.events += committed.len() as u64;
                self.next_seq += committed.len() as u64;
                self.chain = new_chain;
                Ok(committed)
            }
            Err(e) => {
                // The reason alone: `Poisoned` says itself that the writer stopped. A moved
                // tail keeps its own kind: what it says is what the user must do.
                let why = match e {
                    JournalError::Poisoned(why) => why,
                    moved @ (JournalError::TailMoved { .. } | JournalError::Lease(_)) => {
                        self.poisoned = Some(moved.to_string());
                        return Err(moved);
                    }
                    other => other.to_string(),
                };
                self.poisoned = Some(why.clone());
                Err(JournalError::Poisoned(why))
            }
        }
    }

    /// Encode the events as consecutive frames into `buf`, returning where each frame ends.
    /// Either all of them fit the payload cap or `buf` holds nothing to write.
    fn frame_events<E: Vocabulary>(
        &mut self,
        actor: &Actor,
        events: &[E],
        first_seq: u64,
        mut chain: Chain,
    ) -> Result<(Vec<usize>, Vec<Committed>, Chain), JournalError> {
        self.buf.clear();
        let mut ends = Vec::with_capacity(events.len());
        let mut committed = Vec::with_capacity(events.len());
        for (i, ev) in events.iter().enumerate() {
            let seq = first_seq + i as u64;
            let time = Micros::now();
            let id = self.ids.next();
            self.payload.clear();
            event::encode_payload(&mut self.payload, time, &id, actor, ev)?;
            if self.payload.len() > frame::MAX_PAYLOAD {
                self.buf.clear();
                return Err(JournalError::PayloadTooLarge {
                    kind: ev.kind_name(),
                    bytes: self.payload.len(),
                });
            }
            // Only an `Unknown` event (its payload and flags given whole) can break a rule.
            if let Some(reason) = super::scan::rule_fault(seq, ev.flags(), &self.payload) {
                self.buf.clear();
                return Err(JournalError::Unwritable {
                    kind: ev.kind_name(),
                    reason,
                });
            }
            let start = self.buf.len();
            chain = frame::encode(
                &mut self.buf,
                &chain,
                seq,
                ev.kind(),
                ev.flags(),
                &self.payload,
            );
            debug_assert!(
                self.buf.len() - start <= frame::MAX_PAYLOAD + frame::OVERHEAD,
                "a frame within its limit"
            );
            ends.push(self.buf.len());
            committed.push(Committed { seq, id, time });
        }
        Ok((ends, committed, chain))
    }

    /// Write `buf` (frames ending at `ends`) in as few `write`s as the cap allows: no single
    /// write exceeds [`MAX_WRITE_BYTES`] (the torn-tail classifier relies on it), and each
    /// ends on a frame boundary.
    fn write_frames(&mut self, ends: &[usize], lease: &Lease) -> Result<(), JournalError> {
        let mut start = 0;
        let mut prev_end = 0;
        for &end in ends {
            if prev_end > start && end - start > MAX_WRITE_BYTES {
                self.write_span(start, prev_end, lease)?;
                start = prev_end;
            }
            prev_end = end;
        }
        if prev_end > start {
            self.write_span(start, prev_end, lease)?;
        }
        self.buf.clear();
        Ok(())
    }

    fn write_span(&mut self, from: usize, to: usize, lease: &Lease) -> Result<(), JournalError> {
        failpoint::hit("journal-before-write");
        // Right before the write: nothing goes past a tail this writer did not read, nor
        // without the lease (a writer stopped past its lease was taken over meanwhile).
        lease.check()?;
        if from == 0 {
            self.check_tail(false)?;
        } else {
            // Earlier writes of this commit are in the file already.
            self.check_len(true)?;
        }
        // Armed, the write goes out in two halves with the failpoint between them; when the
        // failpoint lets the process live, the second half completes the write.
        let mut at = from;
        if failpoint::armed("journal-torn-write") {
            at = from + (to - from) / 2;
            self.file
                .write_all(&self.buf[from..at])
                .map_err(poison_err("write"))?;
            failpoint::hit("journal-torn-write");
        }
        self.file
            .write_all(&self.buf[at..to])
            .map_err(poison_err("write"))?;
        self.segment_len += (to - from) as u64;
        self.stats.writes += 1;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), JournalError> {
        failpoint::hit("journal-before-sync");
        self.file.sync_data().map_err(poison_err("fdatasync"))?;
        self.stats.syncs += 1;
        failpoint::hit("journal-after-sync");
        Ok(())
    }

    /// Check that the segment ends where this writer left it (before a write) or where its
    /// last write should have left it (after `fdatasync`, `written`): its length, and the chain
    /// stored at its end (which commits to the last frame's seq and everything before it).
    fn check_tail(&self, written: bool) -> Result<(), JournalError> {
        match self.last_frame_offset {
            Some(last) => self.check_tail_is(last, self.chain, written),
            None => self.check_tail_at(self.segment_len, SEGMENT_CHAIN_AT, self.chain, written),
        }
    }

    /// [`Core::check_tail`] for a segment whose last frame starts at `last_frame` and ends at
    /// `segment_len` with `chain`.
    fn check_tail_is(
        &self,
        last_frame: u64,
        chain: Chain,
        written: bool,
    ) -> Result<(), JournalError> {
        assert!(last_frame + frame::OVERHEAD as u64 <= self.segment_len);
        let chain_at = self.segment_len - FRAME_CHAIN_FROM_END;
        self.check_tail_at(self.segment_len, chain_at, chain, written)
    }

    /// The length half of [`Core::check_tail`], between two writes of one commit (whose first
    /// write's end has no chain this writer kept).
    fn check_len(&self, written: bool) -> Result<(), JournalError> {
        match self.file.metadata() {
            Ok(m) if m.len() == self.segment_len => Ok(()),
            found => Err(JournalError::TailMoved {
                segment: segment::file_name(self.segment_no),
                expected_len: self.segment_len,
                expected_chain: "(mid-commit)".to_owned(),
                found: found.map_or_else(
                    |e| format!("a segment that cannot be examined ({e})"),
                    |m| format!("{} bytes", m.len()),
                ),
                written,
            }),
        }
    }

    fn check_tail_at(
        &self,
        len: u64,
        chain_at: u64,
        chain: Chain,
        written: bool,
    ) -> Result<(), JournalError> {
        let mut stored = [0u8; 32];
        let found = match self.file.metadata() {
            Err(e) => format!("a segment that cannot be examined ({e})"),
            Ok(m) if m.len() != len => format!("{} bytes", m.len()),
            Ok(_) => {
                match std::os::unix::fs::FileExt::read_exact_at(&self.file, &mut stored, chain_at) {
                    Err(e) => format!("a segment that cannot be read ({e})"),
                    Ok(()) if stored == chain => return Ok(()),
                    Ok(()) => format!("chain {}", hex::encode(stored)),
                }
            }
        };
        Err(JournalError::TailMoved {
            segment: segment::file_name(self.segment_no),
            expected_len: len,
            expected_chain: hex::encode(chain),
            found,
            written,
        })
    }

    /// Start the next segment, continuing the head.
    fn rotate(&mut self, dir: &Path) -> Result<(), JournalError> {
        debug_assert!(
            self.last_frame_offset.is_some(),
            "only a segment with a frame is rotated"
        );
        let (file, len) = create_segment(
            dir,
            self.journal_id,
            self.segment_no + 1,
            self.next_seq,
            self.chain,
        )?;
        self.file = file;
        self.segment_no += 1;
        self.segment_len = len;
        self.last_frame_offset = None;
        Ok(())
    }
}

impl<E: Vocabulary> Drop for JournalWriter<E> {
    /// Record where the journal ends, for the next writer's open (§7.2). Best effort: a
    /// checkpoint that is missing or stale only makes that open check more.
    fn drop(&mut self) {
        let core = self.lock_core();
        let (Some(last_frame_offset), None) = (core.last_frame_offset, &core.poisoned) else {
            return;
        };
        let c = checkpoint::Checkpoint {
            journal_id: core.journal_id,
            segment_no: core.segment_no,
            segment_len: core.segment_len,
            last_seq: core.next_seq - 1,
            last_frame_offset,
            chain: core.chain,
        };
        if let Err(e) = checkpoint::write(&self.dir, &c) {
            tracing::warn!("journal checkpoint not written (optional): {e}");
        }
    }
}

/// Where a segment header keeps the chain its first frame continues (journal-format.md §3).
const SEGMENT_CHAIN_AT: u64 = 48;
/// How far from a frame's end its chain value starts: the chain, then the frame CRC (§4).
const FRAME_CHAIN_FROM_END: u64 = (frame::CHAIN_LEN + 4) as u64;

/// Take the journal's locks, this host's `flock` on `LOCK` then the cross-host lease, once
/// the directory is trusted: a journal that another user could have written, or that a link
/// leads elsewhere, is neither read nor written, so the check comes before anything is created.
fn lock_journal(dir: &Path) -> Result<(File, Lease), JournalError> {
    crate::statedir::trust::check_journal(dir)?;
    create_private_dir(dir)?;
    let lock_path = dir.join(LOCK_FILE);
    let lock =
        super::files::open_lock_file(&lock_path).map_err(io_err(&lock_path, "open lock file"))?;
    let settings = lease::Settings::from_env();
    lock_this_host(&lock, &lock_path, settings)?;
    let lease = Lease::acquire(dir, settings)?;
    Ok((lock, lease))
}

/// Classify the journal as `check` asks (merging a fork if it says so, recorded in
/// `opened`): its head, and the torn tail to cut if there is one. Any other damage refuses.
fn classify_for_open<E: Vocabulary>(
    dir: &Path,
    check: Check,
    actor: &Actor,
    opened: &mut Opened,
) -> Result<(Option<scan::Head>, Option<scan::Damage>), JournalError> {
    // What a crash can have damaged is after the last point a writer verified and
    // recorded (§7.2): from there the tail is classified as a full scan would classify it.
    // Without a checkpoint that holds, the whole journal is.
    let trusted = match (check == Check::FromCheckpoint).then(|| checkpoint::trusted_point(dir)) {
        None => None,
        Some(Ok(point)) => Some(point),
        Some(Err(why)) => {
            tracing::debug!("journal checkpoint not used: {why}");
            None
        }
    };
    let mut scan =
        scan::classify(dir, trusted.as_ref(), |_| true).map_err(io_err(dir, "read journal"))?;
    if scan.status() == Status::Forked && check == Check::EverythingAndMerge {
        let (merged, rescan) = merge_and_rescan::<E>(dir, &scan, actor)?;
        opened.merged = Some(merged);
        scan = rescan;
    }
    scan.refusal(dir)?;
    let torn = scan.damage().cloned();
    Ok((scan.head, torn))
}

/// Start a new journal: a fresh id and its first segment, starting from the genesis chain and
/// holding the `Genesis` event before it takes its name (journal-format.md §7). A reader never
/// sees a journal whose creation is not complete: before the name, there is no journal at all.
/// A segment with its header only would read as a journal at seq 0 that the genesis then
/// continues, and a reader that took it for the journal (the coordinator ingesting a worker's)
/// would find the chain it noted at seq 0 gone.
fn create_journal<E: Vocabulary>(
    dir: &Path,
    opts: &Options,
    actor: &Actor,
    lease: &Lease,
) -> Result<Core, JournalError> {
    let journal_id = *Uuid::new_v4().as_bytes();
    let chain = frame::genesis_chain(&journal_id);
    let (file, len, tmp) = start_segment(dir, journal_id, 1, 1, chain)?;
    let mut core = Core::new(file, journal_id, 1, chain, 1, len, None);
    let genesis = E::genesis(Genesis {
        journal_id: Uuid::from_bytes(journal_id),
        format_version: FORMAT_VERSION,
    });
    core.commit(dir, opts, actor, &[genesis], lease)?;
    put_in_place_once(&tmp, &dir.join(segment::file_name(1)))?;
    fsync_dir(dir)?;
    Ok(core)
}

/// Open the last segment for appending at `head`, cutting the torn tail first (or finding a
/// repair that did not record itself): the repair for the writer to record.
fn reopen_at(
    head: &scan::Head,
    torn: Option<&scan::Damage>,
) -> Result<(Core, Option<Recovered>), JournalError> {
    debug_assert!(
        head.segment_len >= segment::SEGMENT_HEADER_LEN as u64,
        "a head lies past its segment's header"
    );
    let repaired = match torn {
        Some(damage) => Some(cut_torn_tail(&head.segment_path, head.segment_len, damage)?),
        None => unrecorded_repair(&head.segment_path, head.segment_len)?,
    };
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&head.segment_path)
        .map_err(io_err(&head.segment_path, "open segment"))?;
    let core = Core::new(
        file,
        head.journal_id,
        head.last_seq + 1,
        head.chain,
        head.segment_no,
        head.segment_len,
        head.last_frame_offset,
    );
    Ok((core, repaired))
}

/// Take this host's exclusive `flock` on `LOCK`, waiting at most the lease settings' wait (the
/// same bound as the cross-host lease that follows it).
fn lock_this_host(lock: &File, path: &Path, settings: lease::Settings) -> Result<(), JournalError> {
    let began = std::time::Instant::now();
    let mut pauses = lease::lock_pauses();
    let mut told = false;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err(path, "lock")(e)),
            Err(std::fs::TryLockError::WouldBlock) => {}
        }
        let waited = began.elapsed();
        if waited >= settings.wait {
            return Err(lease::LeaseError::Busy {
                dir: path.parent().unwrap_or(path).to_owned(),
                holder: "another dispatch command on this host".to_owned(),
                waited_s: waited.as_secs(),
            }
            .into());
        }
        if !told && waited >= std::time::Duration::from_secs(1) {
            told = true;
            tracing::warn!(
                "waiting for another dispatch command on this host to finish writing the journal \
                 ({}; giving up after {} s: --wait-lock)",
                path.display(),
                settings.wait.as_secs()
            );
        }
        std::thread::sleep(pauses.next_delay().min(settings.wait - waited));
    }
}

fn poison_err(what: &'static str) -> impl FnOnce(std::io::Error) -> JournalError {
    move |e| JournalError::Poisoned(format!("{what} failed: {e}"))
}

/// Move a new segment into place, never over one that exists: a second writer that rotated
/// at the same time (the locks failing) must not replace the first one's segment. `link` fails
/// when the name exists and is atomic on the file systems clusters use; where hard links are
/// not supported, an existence check before the rename narrows the window instead.
fn put_in_place_once(tmp: &Path, path: &Path) -> Result<(), JournalError> {
    match std::fs::hard_link(tmp, path) {
        Ok(()) => {
            std::fs::remove_file(tmp).map_err(io_err(tmp, "remove linked temp segment"))?;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = std::fs::remove_file(tmp);
            Err(JournalError::TailMoved {
                segment: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                expected_len: 0,
                expected_chain: "(a segment not yet made)".to_owned(),
                found: "that another writer made it first".to_owned(),
                written: false,
            })
        }
        Err(_) if !path.exists() => {
            std::fs::rename(tmp, path).map_err(io_err(path, "rename segment into place"))
        }
        Err(e) => Err(io_err(path, "link segment into place")(e)),
    }
}

/// Create a segment durably: header to a temp file, fsync, link into place, fsync the
/// directory.
fn create_segment(
    dir: &Path,
    journal_id: [u8; 16],
    segment_no: u64,
    first_seq: u64,
    prev_chain: Chain,
) -> Result<(File, u64), JournalError> {
    let (file, len, tmp) = start_segment(dir, journal_id, segment_no, first_seq, prev_chain)?;
    put_in_place_once(&tmp, &dir.join(segment::file_name(segment_no)))?;
    fsync_dir(dir)?;
    Ok((file, len))
}

/// A segment under its temporary name (`segment-NNNNNNNN.djl.tmp`, which readers ignore):
/// its header written and `fsync`ed, the file open for appending, and that name. A file of that
/// name, left by a writer that died before moving it into place, is replaced.
fn start_segment(
    dir: &Path,
    journal_id: [u8; 16],
    segment_no: u64,
    first_seq: u64,
    prev_chain: Chain,
) -> Result<(File, u64, PathBuf), JournalError> {
    let header = SegmentHeader {
        format_version: FORMAT_VERSION,
        journal_id,
        segment_no,
        first_seq,
        prev_chain,
        created_micros: Micros::now().0,
    }
    .encode();
    let tmp = dir.join(format!("{}.tmp", segment::file_name(segment_no)));
    // Not `O_APPEND` (the temporary name is truncated): the file position after the header is
    // where the frames go.
    let mut f = super::files::private_file()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(io_err(&tmp, "create segment"))?;
    f.write_all(&header)
        .map_err(io_err(&tmp, "write segment header"))?;
    f.sync_all().map_err(io_err(&tmp, "fsync segment"))?;
    Ok((f, header.len() as u64, tmp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{test_actor as actor, test_launched as event};

    /// A writer on a fresh journal in `dir`, and its first segment.
    fn open(dir: &Path) -> (Writer, PathBuf) {
        let w = Writer::open_as(dir, Options::default(), actor()).unwrap();
        (w, dir.join(segment::file_name(1)))
    }

    /// The class and event count a scan of `dir` finds.
    fn scanned(dir: &Path) -> (Status, u64) {
        let scan = scan::scan(dir, None, |_| true).unwrap();
        (scan.status(), scan.events)
    }

    #[test]
    fn the_segment_size_setting_has_a_floor_and_ignores_nonsense() {
        for (setting, bytes) in [
            (None, DEFAULT_MAX_SEGMENT_BYTES),
            (Some(""), DEFAULT_MAX_SEGMENT_BYTES),
            (Some("1"), MIN_SEGMENT_BYTES),
            (Some(" 10000 "), 10_000),
            (Some("64M"), DEFAULT_MAX_SEGMENT_BYTES),
        ] {
            assert_eq!(Options::segment_bytes_from(setting), bytes, "{setting:?}");
        }
    }

    #[test]
    fn event_ids_are_distinct_random_v4_uuids() {
        let mut ids = RandomIds::default();
        let mut seen = std::collections::HashSet::new();
        for n in [1, 16, 300, 0, 5] {
            ids.refill(n);
            for _ in 0..n + 2 {
                let id = ids.next();
                assert_eq!(id.get_version(), Some(uuid::Version::Random));
                assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
                assert!(seen.insert(id), "{id} repeated");
            }
        }
    }

    #[test]
    fn no_single_write_exceeds_the_cap_however_large_the_request() {
        let dir = tempfile::tempdir().unwrap();
        let (w, seg) = open(dir.path());
        let before = w.stats();
        // 12 events of ~900 KB: ~10.8 MB in one request, more than one 8 MiB write holds.
        let big: Vec<Event> = (0..12)
            .map(|i| {
                Event::PoolDetached(crate::event::pool::PoolDetached {
                    pool: format!("{i}{}", "x".repeat(900_000)),
                })
            })
            .collect();
        w.append(big).unwrap();
        let after = w.stats();
        assert_eq!(after.syncs - before.syncs, 1, "still one commit");
        assert!(after.writes - before.writes >= 2, "{after:?}");
        assert!(std::fs::metadata(&seg).unwrap().len() > MAX_WRITE_BYTES as u64);
        drop(w);
        assert_eq!(scanned(dir.path()), (Status::Clean, 13));
    }

    #[test]
    fn a_lone_appender_gets_one_commit_per_append() {
        let dir = tempfile::tempdir().unwrap();
        let (w, _) = open(dir.path());
        let before = w.stats();
        for i in 0..20 {
            let c = w.append_one(event(i)).unwrap();
            assert_eq!(c.seq, 2 + u64::from(i));
        }
        let after = w.stats();
        assert_eq!(
            (after.events - before.events, after.syncs - before.syncs),
            (20, 20)
        );
    }

    #[test]
    fn an_oversized_event_refuses_its_whole_append_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (w, seg) = open(dir.path());
        let huge = Event::PoolDetached(crate::event::pool::PoolDetached {
            pool: "x".repeat(frame::MAX_PAYLOAD),
        });
        let len = std::fs::metadata(&seg).unwrap().len();
        let r = w.append(vec![event(1), huge]);
        assert!(
            matches!(r, Err(JournalError::PayloadTooLarge { .. })),
            "{r:?}"
        );
        assert_eq!(std::fs::metadata(&seg).unwrap().len(), len);
        // Not poisoned: the next append goes through with the next seq.
        assert_eq!(w.append_one(event(2)).unwrap().seq, 2);
        drop(w);
        assert_eq!(scanned(dir.path()), (Status::Clean, 2));
    }

    #[test]
    fn a_frame_a_reader_would_call_corrupt_is_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let (w, seg) = open(dir.path());
        let len = std::fs::metadata(&seg).unwrap().len();
        let whole = rmp_serde::to_vec(&(Micros(1), uuid::Uuid::nil(), actor(), (1u8,))).unwrap();
        let mut trailing = whole.clone();
        trailing.push(0xc0);
        for (flags, payload) in [(0x0002, whole.clone()), (0, trailing)] {
            let r = w.append(vec![
                event(1),
                Event::Unknown {
                    kind: 999,
                    flags,
                    payload,
                },
            ]);
            assert!(matches!(r, Err(JournalError::Unwritable { .. })), "{r:?}");
            assert_eq!(std::fs::metadata(&seg).unwrap().len(), len);
        }
        let ok = Event::Unknown {
            kind: 999,
            flags: 1,
            payload: whole,
        };
        assert_eq!(w.append_one(ok).unwrap().seq, 2);
        drop(w);
        assert_eq!(scanned(dir.path()), (Status::Clean, 2));
    }

    /// Another host's writer, the locks having failed: frames appended behind this one's back.
    fn append_behind_its_back(seg: &Path) {
        use std::io::Write as _;
        let mut f = OpenOptions::new().append(true).open(seg).unwrap();
        f.write_all(b"another writer's bytes").unwrap();
    }

    #[test]
    fn a_tail_that_moved_is_never_written_after() {
        let dir = tempfile::tempdir().unwrap();
        let (w, seg) = open(dir.path());
        w.append_one(event(1)).unwrap();
        append_behind_its_back(&seg);
        let moved = std::fs::read(&seg).unwrap();
        let e = w.append_one(event(2)).unwrap_err();
        assert!(
            matches!(e, JournalError::TailMoved { written: false, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("run it again"), "{e}");
        assert_eq!(std::fs::read(&seg).unwrap(), moved, "nothing written over");
        // And the writer stays stopped: its view of the journal is wrong.
        assert!(w.append_one(event(3)).is_err());
    }

    #[test]
    fn a_tail_that_moved_while_writing_is_said_after_the_sync() {
        let dir = tempfile::tempdir().unwrap();
        let (w, seg) = open(dir.path());
        let e = std::thread::scope(|s| {
            let writer = s.spawn(|| {
                crate::failpoint::arm_on_this_thread("journal-before-sync=sleep:400").unwrap();
                let r = w.append_one(event(1));
                crate::failpoint::disarm_on_this_thread();
                r
            });
            std::thread::sleep(std::time::Duration::from_millis(150));
            append_behind_its_back(&seg);
            writer.join().unwrap().unwrap_err()
        });
        assert!(
            matches!(e, JournalError::TailMoved { written: true, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("journal repair"), "{e}");
    }

    #[test]
    fn a_writer_whose_lease_was_taken_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (w, seg) = open(dir.path());
        let before = std::fs::read(&seg).unwrap();
        // What a takeover from another host leaves: the lease file is someone else's.
        let other =
            lease::Holder::parse(&std::fs::read(dir.path().join(lease::LEASE_FILE)).unwrap())
                .map(|h| lease::Holder {
                    token: Uuid::new_v4().to_string(),
                    host: "login2".into(),
                    ..h
                })
                .unwrap();
        // As a takeover does it: the old file moved away, a new one made.
        std::fs::remove_file(dir.path().join(lease::LEASE_FILE)).unwrap();
        std::fs::write(dir.path().join(lease::LEASE_FILE), other.render()).unwrap();
        let e = w.append_one(event(1)).unwrap_err();
        assert!(matches!(e, JournalError::Lease(_)), "{e}");
        assert!(e.to_string().contains("login2"), "{e}");
        assert_eq!(std::fs::read(&seg).unwrap(), before);
        drop(w);
        assert_eq!(
            std::fs::read(dir.path().join(lease::LEASE_FILE)).unwrap(),
            other.render(),
            "the new holder's lease stays"
        );
    }

    #[test]
    fn a_rotation_never_replaces_a_segment_another_writer_made() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            max_segment_bytes: MIN_SEGMENT_BYTES,
        };
        let w = Writer::open_as(dir.path(), opts, actor()).unwrap();
        let next = dir.path().join(segment::file_name(2));
        std::fs::write(&next, b"the other writer's segment").unwrap();
        let r = (0..200).try_for_each(|i| w.append_one(event(i)).map(drop));
        let e = r.unwrap_err();
        assert!(matches!(e, JournalError::TailMoved { .. }), "{e}");
        assert_eq!(std::fs::read(&next).unwrap(), b"the other writer's segment");
    }

    /// A journal being created is no journal until it is whole: a reader looking at every
    /// moment of a creation (each write paused) finds either no segment, or segment 1 with its
    /// Genesis; never a segment with its header alone, nor a torn Genesis.
    #[test]
    fn a_journal_is_never_seen_before_its_genesis() {
        use std::sync::atomic::{AtomicBool, Ordering};
        for round in 0..10 {
            let dir = tempfile::tempdir().unwrap();
            let done = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    crate::failpoint::arm_on_this_thread("journal-before-write=sleep:5").unwrap();
                    let w = Writer::open_as(dir.path(), Options::default(), actor()).unwrap();
                    assert!(w.opened().created);
                    done.store(true, Ordering::SeqCst);
                });
                while !done.load(Ordering::SeqCst) {
                    if segment::list(dir.path()).unwrap().is_empty() {
                        continue;
                    }
                    let (status, last_seq) = scanned(dir.path());
                    assert_eq!((status, last_seq), (Status::Clean, 1), "round {round}");
                }
            });
            assert_eq!(scanned(dir.path()), (Status::Clean, 1));
            let names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".tmp"))
                .collect();
            assert!(names.is_empty(), "round {round}: {names:?} left behind");
        }
    }
}
