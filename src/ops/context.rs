//! What every operation needs: where state lives, who is asking, how to reach Slurm, the clock.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use chrono::{Local, NaiveDateTime, TimeZone};

use super::error::OpError;
use super::poll::Poller;
use crate::event::{Event, Micros};
use crate::journal::{self, Committed, Loaded, Options, Writer};
use crate::slurm::Scheduler;
use crate::state::State;
use crate::statedir::Checked;
use crate::worker::stop_request::MAX_GRACE_S;

/// Where an operation says what it is doing while it waits (stderr in the CLI), one line at a
/// time, as it happens: the one progress sink of pools, jobs and sessions. What is said once the
/// operation is over travels in its report instead (`warnings`); a wait whose progress the CLI
/// draws itself takes a typed value (`pool::room::WaitProgress`).
pub type Progress<'a> = &'a (dyn Fn(&str) + Send + Sync);

pub struct Ctx<S: Scheduler> {
    pub state_dir: Checked,
    pub sched: S,
    /// The Unix user name of the caller: the owner every allocation must have.
    pub caller: String,
    /// The dispatch executable that worker steps run (`dispatch worker run`).
    pub exe: PathBuf,
    /// The state as this command last read it. A command reads the journal whole once; when it
    /// reads again (after a wait, under the lock again) it folds in only what was appended
    /// since (`journal::reader::catch_up`). Taken out while in use, so two uses at once each
    /// read for themselves.
    read: Mutex<Option<Loaded<State>>>,
    /// Whether the state directory was made ready for writing (`Ctx::writer`) in this command.
    prepared: AtomicBool,
}

impl<S: Scheduler> Ctx<S> {
    pub fn new(state_dir: Checked, sched: S, caller: String, exe: PathBuf) -> Ctx<S> {
        Ctx {
            state_dir,
            sched,
            caller,
            exe,
            read: Mutex::new(None),
            prepared: AtomicBool::new(false),
        }
    }

    pub fn journal_dir(&self) -> PathBuf {
        self.state_dir.journal_dir()
    }

    /// Take the journal's writer lock (creating the journal if needed) and load state.
    pub fn lock_and_load(&self) -> Result<(Writer, Loaded<State>), OpError> {
        let writer = self.writer()?;
        let loaded = self.with_state(Loaded::clone)?;
        Ok((writer, loaded))
    }

    /// Append one event that no decision under the lock needs (the intent or outcome of a Slurm
    /// call whose deciding is serialized otherwise, e.g. by a session's token lock): take the
    /// writer, append durably, release. A decision that reads the state and appends on what it
    /// read goes through [`locked`] instead.
    pub fn append(&self, event: Event) -> Result<Committed, OpError> {
        let writer = Writer::open(&self.journal_dir(), Options::default())?;
        Ok(writer.append_one(event)?)
    }

    /// Load state without the lock (read-only commands).
    pub fn load(&self) -> Result<Loaded<State>, OpError> {
        self.with_state(Loaded::clone)
    }

    /// The state as the journal holds it now, without the lock; an empty one before the journal
    /// exists (read-only commands and dry runs).
    pub fn read_state(&self) -> Result<State, OpError> {
        match self.with_state(|loaded| loaded.state.clone()) {
            Err(OpError::Journal(journal::JournalError::Missing(_))) => Ok(State::default()),
            read => read,
        }
    }

    /// Write a snapshot if one is due. Optional work: a failure is a warning, never an error.
    pub fn snapshot_quietly(&self) {
        if !journal::reader::snapshot_may_be_due(&self.journal_dir()) {
            return;
        }
        if let Err(e) = self.with_state(|_| ()) {
            tracing::warn!("snapshot not written (optional): {e}");
        }
    }

    pub fn now(&self) -> Micros {
        Micros::now()
    }

    pub fn pools_dir(&self) -> PathBuf {
        self.state_dir.join("pools")
    }

    /// The writer lock, the state directory and journal made first if missing.
    fn writer(&self) -> Result<Writer, OpError> {
        let first = !self.prepared.load(Ordering::Relaxed);
        if first {
            self.state_dir.prepare()?;
        }
        let writer = Writer::open(&self.journal_dir(), Options::default())?;
        if first {
            // Whatever the command, the temporary files of asset adds that were killed go.
            super::asset_files::sweep_dead_temps(&super::asset_files::assets_dir(&self.state_dir));
            self.prepared.store(true, Ordering::Relaxed);
        }
        Ok(writer)
    }

    /// `f` of the state as the journal holds it now: read whole the first time, caught up
    /// after. Every read keeps the replay tail bounded: past `SNAPSHOT_EVERY` events since the
    /// newest snapshot it writes one (optional work).
    fn with_state<T>(&self, f: impl FnOnce(&Loaded<State>) -> T) -> Result<T, OpError> {
        let dir = self.journal_dir();
        let last = self.read.lock().ok().and_then(|mut read| read.take());
        let mut loaded = match last {
            Some(last) => journal::reader::catch_up(&dir, last)?,
            None => journal::load(&dir)?,
        };
        match journal::reader::snapshot_if_due(&dir, &loaded) {
            Ok(Some(_)) => loaded.snapshot_seq = loaded.scan.head.as_ref().map(|h| h.last_seq),
            Ok(None) => {}
            Err(e) => tracing::warn!("snapshot not written (optional): {e}"),
        }
        let out = f(&loaded);
        if let Ok(mut read) = self.read.lock() {
            *read = Some(loaded);
        }
        Ok(out)
    }
}

/// A Slurm wall-clock time (cluster local time) as microseconds since the epoch.
pub fn local_to_micros(t: NaiveDateTime) -> Option<Micros> {
    Local
        .from_local_datetime(&t)
        .earliest()
        .map(|dt| Micros(dt.timestamp_micros()))
}

/// Microseconds since the epoch as a Slurm wall-clock time (for `sacct --starttime`).
pub fn micros_to_local(t: Micros) -> NaiveDateTime {
    Local
        .timestamp_micros(t.0)
        .earliest()
        .map(|dt| dt.naive_local())
        .unwrap_or_default()
}

/// How long a stop waits after the grace it gave the payload before it cancels: the supervisor
/// needs a moment to kill a payload that ignored the TERM, record how it ended and clean up.
/// A step that ends sooner is proven over sooner; only a step that does not end waits it out.
pub const STOP_WRAP_UP: std::time::Duration = std::time::Duration::from_secs(10);

/// A stop's grace in whole seconds, as its intent records it (the CLI bounds it to
/// [`crate::worker::stop_request::MAX_GRACE_S`]).
pub fn grace_seconds(grace: std::time::Duration) -> u32 {
    let s = u32::try_from(grace.as_secs()).unwrap_or(u32::MAX);
    s.min(MAX_GRACE_S)
}

/// The grace a stop gives a worker's payload (`policy::node::stop_grace_s`): `asked`, else the
/// worker's own as its supervisor recorded it at its start in its own journal (read only in a
/// tree that is ours; a journal that cannot be read says nothing), else the default.
pub fn stop_grace(
    state_dir: &Path,
    dirs: &crate::worker::dirs::WorkerDirs,
    asked: Option<std::time::Duration>,
) -> std::time::Duration {
    let own = || {
        dirs.check(state_dir).ok()?.then_some(())?;
        let report = crate::worker::report::read(&dirs.evidence).ok()??;
        Some(report.started?.grace_s)
    };
    let asked = asked.map(grace_seconds);
    // Read only when none is asked: the asked grace wins whatever the journal says.
    let own = asked.is_none().then(own).flatten();
    let grace = crate::policy::node::stop_grace_s(asked, own.map(|s| s.min(MAX_GRACE_S)));
    std::time::Duration::from_secs(u64::from(grace))
}

/// Tell the worker's supervisor the grace this stop gives its payload (`worker::stop_request`),
/// once the stop intent recorded it and before the TERM. A tree that is not ours is never
/// written to; then, or when the write fails, the supervisor keeps the grace it was started
/// with, which is said here.
pub fn request_grace(state_dir: &Path, dirs: &crate::worker::dirs::WorkerDirs, grace_s: u32) {
    let written = dirs
        .check(state_dir)
        .map_err(|e| e.to_string())
        .and_then(|_| {
            crate::worker::stop_request::write(&dirs.root, grace_s).map_err(|e| e.to_string())
        });
    if let Err(e) = written {
        tracing::warn!(
            "cannot tell the worker's supervisor the stop's grace ({e}) in {}; it keeps the grace \
             it was submitted with",
            dirs.root.display()
        );
    }
}

/// How long a stop waits, after its final cancel, for proof that the thing is over.
pub const STOP_PROOF_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How often [`await_proof`] asks.
const PROOF_POLL: std::time::Duration = std::time::Duration::from_millis(250);
/// [`await_proof_soon`]'s first pause: a `squeue` already shows a job `scancel` was answered
/// for as `CANCELLED`, and slurmctld starts a job whose dependency just ended at its next
/// pass (46-508 ms here).
const PROOF_FIRST_LOOK: std::time::Duration = std::time::Duration::from_millis(25);

/// Ask `prove` every quarter second (or `within`, if shorter) until it gives a proof or `within`
/// has passed. Used by the stops: TERM, then proof within the grace; else cancel, then proof
/// within [`STOP_PROOF_TIMEOUT`].
pub async fn await_proof<F, Fut>(within: std::time::Duration, prove: F) -> Option<String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    let poll = PROOF_POLL.min(within);
    await_proof_polled(Poller::within(poll, poll, within), prove).await
}

/// [`await_proof`] for what may be proven at once (a cancelled job's end, the start of the job
/// that waited for it), on a renewal's path from one allocation to the next: the first look
/// after [`PROOF_FIRST_LOOK`], the pauses doubling to a quarter second.
pub async fn await_proof_soon<F, Fut>(within: std::time::Duration, prove: F) -> Option<String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    let poller = Poller::within(PROOF_FIRST_LOOK.min(within), PROOF_POLL, within);
    await_proof_polled(poller, prove).await
}

/// Pause as `poll` says, then ask `prove`, until a proof or the end of `poll`'s budget. The
/// runtime's clock, not std's: the same in production, and a test runtime with paused time
/// (tests/simulation.rs) runs these waits without waiting.
async fn await_proof_polled<F, Fut>(mut poll: Poller, mut prove: F) -> Option<String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    while !poll.expired() {
        poll.pause().await;
        if let Some(proof) = prove().await {
            return Some(proof);
        }
    }
    None
}

/// The proof that released submission `id` (its `WorkerTerminal` or `JobTerminal`), read from
/// the journal: what a stop of a worker already released answers with. A replay, which only
/// that rare answer pays for; the reduced state keeps no proofs. `None` if none is found (or the
/// journal cannot be read: the answer then only lacks its proof).
pub fn recorded_release_proof(journal_dir: &Path, id: uuid::Uuid) -> Option<String> {
    let mut proof = None;
    let _ = journal::replay(journal_dir, None, |env| {
        match env.event {
            Event::WorkerTerminal(e) if e.submission_id == id => proof = Some(e.proof),
            Event::JobTerminal(e) if e.submission_id == id => proof = Some(e.proof),
            _ => {}
        }
        Ok(())
    });
    proof
}

/// Take the journal's writer lock, read the state as it is now, decide and append in `f`, and
/// release the lock. Nothing in `f` may wait (no Slurm call, no grace, no poll): a command that
/// waits does so between two of these, and re-checks what it decided when it takes the lock
/// again (issue 11: another command may have changed the state meanwhile).
pub(crate) fn locked<S: Scheduler, T>(
    ctx: &Ctx<S>,
    f: impl FnOnce(&Writer, &State) -> Result<T, OpError>,
) -> Result<T, OpError> {
    let writer = ctx.writer()?;
    ctx.with_state(|loaded| f(&writer, &loaded.state))?
}

/// [`locked`], appending `events` only while `still` holds of the state as it is now: another
/// command may have settled what they are about meanwhile, and then they would say nothing.
/// Whether they were appended.
pub(crate) fn append_if<S: Scheduler>(
    ctx: &Ctx<S>,
    still: impl FnOnce(&State) -> bool,
    events: Vec<Event>,
) -> Result<bool, OpError> {
    locked(ctx, |writer, state| {
        let still = still(state);
        if still {
            writer.append(events)?;
        }
        Ok(still)
    })
}
