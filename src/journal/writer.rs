//! The journal writer: exclusive lock, one write plus fdatasync per commit, group commit,
//! segment rotation, torn-tail repair on open, and poisoning on any write or sync error.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use fs2::FileExt;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::error::JournalError;
use super::frame::{self, Chain};
use super::scan::{self, Status, MAX_WRITE_BYTES};
use super::segment::{self, SegmentHeader, FORMAT_VERSION};
use crate::event::{self, Actor, Event, Genesis, Micros, Recovered};
use crate::failpoint;

/// Name of the lock file inside the journal directory.
pub const LOCK_FILE: &str = "LOCK";
/// Random (version 4) event ids for a whole commit from one getrandom(2) call. `Uuid::new_v4`
/// makes one call per id: 16 system calls on the critical path of a 16-way group commit, and a
/// million for a million-event batch.
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
        let rest = &mut buf[at..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        at += n as usize;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn fill_random(_: &mut [u8]) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// A counter that threads wait on to change, with a ring that wakes all of them in one go.
#[derive(Default)]
struct Bell {
    rung: std::sync::atomic::AtomicU32,
    #[cfg(not(target_os = "linux"))]
    lock: Mutex<()>,
    #[cfg(not(target_os = "linux"))]
    cv: Condvar,
}

impl Bell {
    fn rung(&self) -> u32 {
        self.rung.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Returns once the bell has rung since `rung()` returned `seen`, or spuriously.
    #[cfg(target_os = "linux")]
    fn wait(&self, seen: u32) {
        // SAFETY: FUTEX_WAIT reads the aligned u32 behind the atomic, which `self` keeps alive
        // for the call, and sleeps only while it still equals `seen`; no timeout.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.rung.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                seen,
                std::ptr::null::<libc::timespec>(),
            );
        }
    }

    #[cfg(target_os = "linux")]
    fn ring(&self) {
        self.rung.fetch_add(1, std::sync::atomic::Ordering::Release);
        // SAFETY: FUTEX_WAKE only uses the address as a key; it does not dereference it.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.rung.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX,
            );
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn wait(&self, seen: u32) {
        let g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.rung() == seen {
            drop(self.cv.wait(g));
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn ring(&self) {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.rung.fetch_add(1, std::sync::atomic::Ordering::Release);
        self.cv.notify_all();
    }
}

/// The longest a group-commit leader waits for appenders it just answered to come back.
const MAX_GATHER: Duration = Duration::from_millis(2);
/// Segments roll over once they would grow past this many bytes.
pub const DEFAULT_MAX_SEGMENT_BYTES: u64 = 64 << 20;

#[derive(Clone, Debug)]
pub struct Options {
    pub max_segment_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_segment_bytes: DEFAULT_MAX_SEGMENT_BYTES,
        }
    }
}

/// What the writer did when it opened the journal.
#[derive(Clone, Debug, Default)]
pub struct Opened {
    pub created: bool,
    pub repaired: Option<Recovered>,
}

/// Counters since the writer opened: how well group commit is doing.
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
    poisoned: Option<String>,
    stats: Stats,
    buf: Vec<u8>,
    payload: Vec<u8>,
    ids: RandomIds,
}

/// One request's frames: the bytes, where each frame ends, what each commits, the new chain.
type Framed = (Vec<u8>, Vec<usize>, Vec<Committed>, Chain);

struct Request {
    ticket: u64,
    events: Vec<Event>,
    slot: Arc<Slot>,
}

type Outcome = Result<Vec<Committed>, JournalError>;

/// Where the leader leaves one request's outcome. Per request rather than one shared list:
/// the answered threads then collect their results without queueing on a shared lock.
struct Slot {
    outcome: Mutex<Option<Outcome>>,
    thread: ThreadId,
}

#[derive(Default)]
struct Queue {
    next_ticket: u64,
    pending: Vec<Request>,
    leader_active: bool,
    /// Threads the last commit answered that have not appended since. While any is still on
    /// its way back, a new leader waits a little for it (see `gather`).
    returning: Vec<ThreadId>,
    /// How long the last commit's write and fdatasync took: the scale of that wait.
    last_commit: Duration,
    /// A leader is waiting in `gather`: arrivals must signal `arrived`.
    gathering: bool,
}

/// The one writer of a journal. Holds the directory's exclusive lock until dropped.
/// Shareable between threads: concurrent appends are committed together (group commit).
pub struct Writer {
    dir: PathBuf,
    opts: Options,
    actor: Actor,
    opened: Opened,
    core: Mutex<Core>,
    queue: Mutex<Queue>,
    arrived: Condvar,
    /// Rung when a commit's outcomes are in their slots and leadership is free again.
    answered: Bell,
    _lock: File,
}

fn io_err(path: &Path, what: &str) -> impl FnOnce(std::io::Error) -> JournalError {
    let path = path.to_owned();
    let what = what.to_owned();
    move |source| JournalError::Io { path, what, source }
}

/// Create `dir` (and parents) with owner-only permissions if missing.
pub fn create_private_dir(dir: &Path) -> Result<(), JournalError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir, "create directory"))
}

pub fn fsync_dir(dir: &Path) -> Result<(), JournalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir, "fsync directory"))
}

impl Writer {
    /// Open the journal in `dir` for writing, creating it if absent and repairing a torn tail.
    /// Blocks until the exclusive lock is free. A corrupt or tampered journal is refused.
    pub fn open(dir: &Path, opts: Options) -> Result<Writer, JournalError> {
        Self::open_as(dir, opts, Actor::current())
    }

    pub fn open_as(dir: &Path, opts: Options, actor: Actor) -> Result<Writer, JournalError> {
        // Before anything is created or opened: a journal that another user could have
        // written, or that a link leads elsewhere, is neither read nor written.
        crate::statedir::trust::check_journal(dir)?;
        create_private_dir(dir)?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(io_err(&lock_path, "open lock file"))?;
        lock.lock_exclusive().map_err(io_err(&lock_path, "lock"))?;

        let scan = scan::scan(dir, None, |_| true).map_err(io_err(dir, "read journal"))?;
        let mut opened = Opened::default();
        let mut torn = None;
        match scan.status {
            Status::Clean => {}
            Status::TornTail => torn = scan.damage.clone(),
            Status::Corrupt | Status::Tampered => {
                return Err(JournalError::Damaged {
                    dir: dir.to_owned(),
                    status: scan.status,
                    damage: scan.damage.expect("damaged scans carry their damage"),
                })
            }
        }
        let core = match &scan.head {
            None => {
                opened.created = true;
                let journal_id = *Uuid::new_v4().as_bytes();
                let chain = frame::genesis_chain(&journal_id);
                let (file, len) = create_segment(dir, journal_id, 1, 1, chain)?;
                Core::new(file, journal_id, 1, chain, 1, len)
            }
            Some(head) => {
                if let Some(damage) = &torn {
                    opened.repaired =
                        Some(cut_torn_tail(&head.segment_path, head.segment_len, damage)?);
                } else {
                    opened.repaired = unrecorded_repair(&head.segment_path, head.segment_len)?;
                }
                let file = OpenOptions::new()
                    .append(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&head.segment_path)
                    .map_err(io_err(&head.segment_path, "open segment"))?;
                Core::new(
                    file,
                    head.journal_id,
                    head.last_seq + 1,
                    head.chain,
                    head.segment_no,
                    head.segment_len,
                )
            }
        };
        let needs_genesis = core.next_seq == 1;
        let journal_id = core.journal_id;
        let writer = Writer {
            dir: dir.to_owned(),
            opts,
            actor,
            opened,
            core: Mutex::new(core),
            queue: Mutex::new(Queue::default()),
            arrived: Condvar::new(),
            answered: Bell::default(),
            _lock: lock,
        };
        if needs_genesis {
            writer.append(vec![Event::Genesis(Genesis {
                journal_id: Uuid::from_bytes(journal_id),
                format_version: FORMAT_VERSION,
            })])?;
        }
        if let Some(recovered) = &writer.opened.repaired {
            writer.append(vec![Event::Recovered(recovered.clone())])?;
        }
        Ok(writer)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
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

    pub fn head_chain(&self) -> Chain {
        self.lock_core().chain
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
    /// with consecutive seqs. Concurrent callers share one write and one fdatasync.
    pub fn append(&self, events: Vec<Event>) -> Result<Vec<Committed>, JournalError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let me = std::thread::current().id();
        let slot = Arc::new(Slot {
            outcome: Mutex::new(None),
            thread: me,
        });
        {
            let mut q = self.lock_queue();
            let ticket = q.next_ticket;
            q.next_ticket += 1;
            q.pending.push(Request {
                ticket,
                events,
                slot: Arc::clone(&slot),
            });
            if let Some(i) = q.returning.iter().position(|t| *t == me) {
                q.returning.swap_remove(i);
                if q.gathering && q.returning.is_empty() {
                    self.arrived.notify_one();
                }
            }
        }
        loop {
            // Read before looking, so that a ring after the look is not missed.
            let rung = self.answered.rung();
            if let Some(outcome) = slot
                .outcome
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
            {
                return outcome;
            }
            let mut q = self.lock_queue();
            if q.leader_active {
                drop(q);
                self.answered.wait(rung);
                continue;
            }
            q.leader_active = true;
            q = self.gather(q);
            let batch = std::mem::take(&mut q.pending);
            drop(q);
            let slots: Vec<(u64, Arc<Slot>)> = batch
                .iter()
                .map(|r| (r.ticket, Arc::clone(&r.slot)))
                .collect();
            let started = Instant::now();
            // A panic while committing must not leave the other appenders waiting for a leader
            // that is gone: they get an error, the writer is poisoned, then the panic goes on.
            let committed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut core = self.lock_core();
                core.commit(&self.dir, &self.opts, &self.actor, batch)
            }));
            let (outcomes, panicked) = match committed {
                Ok(outcomes) => (outcomes, None),
                Err(payload) => {
                    let why = "a journal commit panicked; nothing more is written by this process";
                    self.lock_core()
                        .poisoned
                        .get_or_insert_with(|| why.to_owned());
                    let failed = slots
                        .iter()
                        .map(|(t, _)| (*t, Err(JournalError::Poisoned(why.to_owned()))))
                        .collect();
                    (failed, Some(payload))
                }
            };
            let took = started.elapsed();
            let mut q = self.lock_queue();
            q.returning = slots.iter().map(|(_, s)| s.thread).collect();
            q.last_commit = took;
            q.leader_active = false;
            drop(q);
            for (ticket, outcome) in outcomes {
                let (_, s) = slots
                    .iter()
                    .find(|(t, _)| *t == ticket)
                    .expect("one outcome per request");
                *s.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
            }
            // One wake for all: the answered threads, and those that arrived during the commit
            // (one of which takes the lead). Waking them one by one let each preempt the
            // leader in turn; on this 2-vCPU VM that alone added ~40 µs to every commit cycle.
            self.answered.ring();
            if let Some(payload) = panicked {
                std::panic::resume_unwind(payload);
            }
        }
    }

    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Before taking the batch, give the threads the last commit just answered a moment to
    /// append again. Without this, N busy appenders split into two alternating groups (those
    /// answered by commit k queue up behind those that arrived during it), so each fdatasync
    /// carries about N/2 events instead of N. The wait is bounded by the last commit's
    /// duration and ends early as soon as all of them are back, or when none arrives for a
    /// quarter of it; a lone appender (answered and already back) never waits.
    fn gather<'a>(&'a self, mut q: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
        if q.returning.is_empty() {
            return q;
        }
        let limit = q.last_commit.min(MAX_GATHER);
        let gap = limit / 4;
        let start = Instant::now();
        q.gathering = true;
        let mut seen = q.pending.len();
        while !q.returning.is_empty() {
            let elapsed = start.elapsed();
            if elapsed >= limit {
                break;
            }
            q = self
                .arrived
                .wait_timeout(q, gap.min(limit - elapsed))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if q.pending.len() == seen {
                break;
            }
            seen = q.pending.len();
        }
        q.gathering = false;
        q
    }

    pub fn append_one(&self, event: Event) -> Result<Committed, JournalError> {
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
    ) -> Core {
        Core {
            file,
            journal_id,
            next_seq,
            chain,
            segment_no,
            segment_len,
            poisoned: None,
            stats: Stats::default(),
            buf: Vec::with_capacity(64 << 10),
            payload: Vec::with_capacity(4 << 10),
            ids: RandomIds::default(),
        }
    }

    fn commit(
        &mut self,
        dir: &Path,
        opts: &Options,
        actor: &Actor,
        batch: Vec<Request>,
    ) -> Vec<(u64, Outcome)> {
        if let Some(why) = &self.poisoned {
            let why = why.clone();
            return batch
                .into_iter()
                .map(|r| (r.ticket, Err(JournalError::Poisoned(why.clone()))))
                .collect();
        }
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut accepted: Vec<(u64, Vec<Committed>)> = Vec::with_capacity(batch.len());
        // Frames are built against a provisional head, committed to `self` only after fdatasync.
        let mut next_seq = self.next_seq;
        let mut chain = self.chain;
        self.buf.clear();
        self.ids.refill(batch.iter().map(|r| r.events.len()).sum());
        let mut written = Ok(());
        for request in batch {
            match self.frame_request(actor, &request.events, next_seq, chain) {
                Err(e) => outcomes.push((request.ticket, Err(e))),
                Ok((frames, ends, committed, new_chain)) => {
                    if written.is_ok()
                        && self.segment_len + (self.buf.len() + frames.len()) as u64
                            > opts.max_segment_bytes
                        && self.segment_len + self.buf.len() as u64
                            > segment::SEGMENT_HEADER_LEN as u64
                    {
                        written = self
                            .flush_and_sync()
                            .and_then(|()| self.rotate(dir, next_seq, chain));
                    }
                    // No single write exceeds MAX_WRITE_BYTES (the torn-tail classifier relies
                    // on it): flush at frame boundaries, however large the request.
                    let mut start = 0;
                    for end in ends {
                        if written.is_ok()
                            && !self.buf.is_empty()
                            && self.buf.len() + (end - start) > MAX_WRITE_BYTES
                        {
                            written = self.flush();
                        }
                        self.buf.extend_from_slice(&frames[start..end]);
                        start = end;
                    }
                    next_seq += committed.len() as u64;
                    chain = new_chain;
                    accepted.push((request.ticket, committed));
                }
            }
        }
        if written.is_ok() {
            written = self.flush_and_sync();
        }
        match written {
            Ok(()) => {
                self.stats.events += next_seq - self.next_seq;
                self.next_seq = next_seq;
                self.chain = chain;
                outcomes.extend(accepted.into_iter().map(|(t, c)| (t, Ok(c))));
            }
            Err(e) => {
                // The reason alone: `Poisoned` says itself that the writer stopped.
                let why = match e {
                    JournalError::Poisoned(why) => why,
                    other => other.to_string(),
                };
                self.poisoned = Some(why.clone());
                outcomes.extend(
                    accepted
                        .into_iter()
                        .map(|(t, _)| (t, Err(JournalError::Poisoned(why.clone())))),
                );
            }
        }
        outcomes
    }

    /// Encode one request's events as frames. Either all of them fit the payload cap or none
    /// is framed.
    fn frame_request(
        &mut self,
        actor: &Actor,
        events: &[Event],
        first_seq: u64,
        mut chain: Chain,
    ) -> Result<Framed, JournalError> {
        let mut frames = Vec::new();
        let mut ends = Vec::with_capacity(events.len());
        let mut committed = Vec::with_capacity(events.len());
        for (i, ev) in events.iter().enumerate() {
            let seq = first_seq + i as u64;
            let time = Micros::now();
            let id = self.ids.next();
            self.payload.clear();
            event::encode_payload(&mut self.payload, time, &id, actor, ev)?;
            if self.payload.len() > frame::MAX_PAYLOAD {
                return Err(JournalError::PayloadTooLarge {
                    kind: ev.kind_name(),
                    bytes: self.payload.len(),
                });
            }
            chain = frame::encode(
                &mut frames,
                &chain,
                seq,
                ev.kind(),
                ev.flags(),
                &self.payload,
            );
            ends.push(frames.len());
            committed.push(Committed { seq, id, time });
        }
        Ok((frames, ends, committed, chain))
    }

    fn flush(&mut self) -> Result<(), JournalError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        failpoint::hit("journal-before-write");
        // Armed, the write goes out in two halves with the failpoint between them; when the
        // failpoint lets the process live, the second half completes the write.
        let mut written = 0;
        if failpoint::armed("journal-torn-write") {
            written = self.buf.len() / 2;
            self.file
                .write_all(&self.buf[..written])
                .map_err(poison_err("write"))?;
            failpoint::hit("journal-torn-write");
        }
        self.file
            .write_all(&self.buf[written..])
            .map_err(poison_err("write"))?;
        self.segment_len += self.buf.len() as u64;
        self.stats.writes += 1;
        self.buf.clear();
        Ok(())
    }

    fn flush_and_sync(&mut self) -> Result<(), JournalError> {
        self.flush()?;
        failpoint::hit("journal-before-sync");
        self.file.sync_data().map_err(poison_err("fdatasync"))?;
        self.stats.syncs += 1;
        failpoint::hit("journal-after-sync");
        Ok(())
    }

    fn rotate(&mut self, dir: &Path, first_seq: u64, chain: Chain) -> Result<(), JournalError> {
        let (file, len) =
            create_segment(dir, self.journal_id, self.segment_no + 1, first_seq, chain)?;
        self.file = file;
        self.segment_no += 1;
        self.segment_len = len;
        Ok(())
    }
}

fn poison_err(what: &'static str) -> impl FnOnce(std::io::Error) -> JournalError {
    move |e| JournalError::Poisoned(format!("{what} failed: {e}"))
}

/// Create a segment durably: header to a temp file, fsync, rename, fsync the directory.
fn create_segment(
    dir: &Path,
    journal_id: [u8; 16],
    segment_no: u64,
    first_seq: u64,
    prev_chain: Chain,
) -> Result<(File, u64), JournalError> {
    let header = SegmentHeader {
        format_version: FORMAT_VERSION,
        journal_id,
        segment_no,
        first_seq,
        prev_chain,
        created_micros: Micros::now().0,
    }
    .encode();
    let path = dir.join(segment::file_name(segment_no));
    let tmp = dir.join(format!("{}.tmp", segment::file_name(segment_no)));
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err(&tmp, "create segment"))?;
    f.write_all(&header)
        .map_err(io_err(&tmp, "write segment header"))?;
    f.sync_all().map_err(io_err(&tmp, "fsync segment"))?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(io_err(&path, "rename segment into place"))?;
    fsync_dir(dir)?;
    let file = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(io_err(&path, "open segment"))?;
    Ok((file, header.len() as u64))
}

/// A repair that cut the tail and then stopped before appending its `Recovered` event leaves the
/// saved tail `<segment>.torn-<len>-…` with `len` equal to the segment's length (a recorded
/// repair appends after the cut, so the segment grows past it). Returns the event to append.
fn unrecorded_repair(segment: &Path, len: u64) -> Result<Option<Recovered>, JournalError> {
    let dir = segment.parent().expect("segments live in a directory");
    let name = segment
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("segment");
    let prefix = format!("{name}.torn-{len}-");
    let entries = std::fs::read_dir(dir).map_err(io_err(dir, "list journal directory"))?;
    for entry in entries {
        let entry = entry.map_err(io_err(dir, "list journal directory"))?;
        let Some(saved_as) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !saved_as.starts_with(&prefix) {
            continue;
        }
        let tail = std::fs::read(entry.path()).map_err(io_err(&entry.path(), "read saved tail"))?;
        return Ok(Some(Recovered {
            segment: name.to_owned(),
            offset: len,
            length: tail.len() as u64,
            sha256: event::Sha256Digest(Sha256::digest(&tail).into()),
            saved_as,
            reason: "recorded by a later open: the repair that cut this tail stopped before recording it"
                .to_owned(),
        }));
    }
    Ok(None)
}

/// Cut the torn tail of `segment` at `valid_len`: keep the cut bytes in a file beside it, then
/// truncate and fsync. Returns the `Recovered` event to append.
pub(crate) fn cut_torn_tail(
    segment: &Path,
    valid_len: u64,
    damage: &scan::Damage,
) -> Result<Recovered, JournalError> {
    let bytes = std::fs::read(segment).map_err(io_err(segment, "read segment"))?;
    assert!(
        valid_len as usize <= bytes.len(),
        "the valid prefix lies inside the file"
    );
    let tail = &bytes[valid_len as usize..];
    let sha: [u8; 32] = Sha256::digest(tail).into();
    let dir = segment.parent().expect("segments live in a directory");
    let name = segment
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("segment");
    let saved_as = format!("{name}.torn-{valid_len}-{}", hex::encode(&sha[..6]));
    let saved_path = dir.join(&saved_as);
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&saved_path)
        .map_err(io_err(&saved_path, "save torn tail"))?;
    f.write_all(tail)
        .map_err(io_err(&saved_path, "save torn tail"))?;
    f.sync_all()
        .map_err(io_err(&saved_path, "fsync torn tail"))?;
    fsync_dir(dir)?;
    failpoint::hit("journal-repair-before-truncate");
    let seg = OpenOptions::new()
        .write(true)
        .open(segment)
        .map_err(io_err(segment, "open segment for repair"))?;
    seg.set_len(valid_len)
        .map_err(io_err(segment, "truncate torn tail"))?;
    seg.sync_all().map_err(io_err(segment, "fsync segment"))?;
    Ok(Recovered {
        segment: name.to_owned(),
        offset: valid_len,
        length: tail.len() as u64,
        sha256: event::Sha256Digest(sha),
        saved_as,
        reason: damage.reason.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::pool::WorkerLaunched;

    fn event(i: u32) -> Event {
        Event::WorkerLaunched(WorkerLaunched {
            submission_id: Uuid::from_u128(u128::from(i)),
            srun_pid: i,
        })
    }

    fn actor() -> Actor {
        Actor {
            user: "u".to_owned(),
            host: "h".to_owned(),
            pid: 1,
            command: Vec::new(),
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
        let w = Writer::open_as(dir.path(), Options::default(), actor()).unwrap();
        let before = w.stats();
        // 12 events of ~900 KB: ~10.8 MB in one request, more than one 8 MiB write holds.
        let big: Vec<Event> = (0..12)
            .map(|i| {
                Event::PoolDetached(crate::state::pool::PoolDetached {
                    pool: format!("{i}{}", "x".repeat(900_000)),
                })
            })
            .collect();
        w.append(big).unwrap();
        let after = w.stats();
        assert_eq!(after.syncs - before.syncs, 1, "still one commit");
        assert!(after.writes - before.writes >= 2, "{after:?}");
        let len = std::fs::metadata(dir.path().join(segment::file_name(1)))
            .unwrap()
            .len();
        assert!(len > MAX_WRITE_BYTES as u64);
        drop(w);
        let scan = scan::scan(dir.path(), None, |_| true).unwrap();
        assert_eq!((scan.status, scan.events), (Status::Clean, 13));
    }

    #[test]
    fn a_lone_appender_gets_one_commit_per_append() {
        let dir = tempfile::tempdir().unwrap();
        let w = Writer::open_as(dir.path(), Options::default(), actor()).unwrap();
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

    /// Appenders that stop at different times: the leader's wait for them must end (by the
    /// gap rule) and every append must be committed exactly once, in each thread's order.
    #[test]
    fn appenders_that_leave_do_not_stall_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let w = Writer::open_as(dir.path(), Options::default(), actor()).unwrap();
        let committed: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8u32)
                .map(|t| {
                    let w = &w;
                    s.spawn(move || {
                        (0..(t * 5 + 1))
                            .map(|i| w.append_one(event(t * 100 + i)).unwrap().seq)
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for mine in &committed {
            assert!(mine.windows(2).all(|p| p[0] < p[1]));
        }
        let mut all: Vec<u64> = committed.into_iter().flatten().collect();
        all.sort_unstable();
        let n = all.len() as u64;
        assert_eq!(all, (2..2 + n).collect::<Vec<_>>());
        // The writer's own Genesis event is seq 1.
        assert_eq!(w.stats().events, n + 1);
        let q = w.lock_queue();
        assert!(q.pending.is_empty() && !q.leader_active && !q.gathering);
    }
}
