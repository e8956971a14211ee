//! `dispatch inspect WORKER`: the forensic view of one worker, offline. Its timeline in the
//! coordinator's journal, the last event recorded about it, and what its own journal says (up
//! to any damage, which is shown, never repaired). No Slurm call, nothing written.

use crate::statedir::Checked;
use std::path::Path;

use serde::Serialize;
use uuid::Uuid;

use crate::event::{Envelope, Vocabulary, WorkerEvent};
use crate::journal::{self, JournalError, Status};
use crate::next::Next;
use crate::ops::logs::{self, Candidate as Found};
use crate::state::State;

/// Timeline entries kept per journal; a worker with more shows the newest ones.
pub const MAX_TIMELINE: usize = 10_000;

#[derive(Debug, Serialize)]
pub struct InspectReport {
    pub worker: String,
    pub submission_id: String,
    /// The pool, or `None` for a `dispatch submit` worker.
    pub pool: Option<String>,
    /// As the reducers have it now.
    pub state: String,
    /// How its payload ended (`policy::node::Outcome`: a non-zero exit is `failed`), and its
    /// exit code or the signal that ended it, as its own journal (else the coordinator's)
    /// recorded them; null while it runs or when nothing says.
    pub outcome: Option<crate::policy::node::Outcome>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub timeline: Vec<Entry>,
    pub last_event: Option<Entry>,
    /// Its lineage, when it continued another worker or was continued (`--continue N`): every
    /// generation, first first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<Link>,
    pub worker_journal: Option<WorkerJournal>,
    /// Why its launch failed, as its last `WorkerLaunchFailed` says (for a launch Slurm
    /// refused, srun's own words); null when none was recorded.
    pub launch_failure: Option<String>,
    /// Its output files (`dispatch logs` prints them).
    pub stdout: String,
    pub stderr: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Link {
    pub generation: u32,
    pub submission_id: String,
    /// Its Slurm job (`dispatch submit`), when the state still holds it.
    pub job_id: Option<crate::slurm::JobId>,
    /// The worker's state now, when the state still holds it.
    pub state: Option<String>,
    /// What ended the generation before it and made this one (`WorkerContinued`).
    pub continued_after: Option<String>,
    pub proof: Option<String>,
    /// The publication it resumed from, and whether from a crash-class state.
    pub resumed_from: Option<String>,
    pub from_crash_class: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    pub seq: u64,
    pub time: String,
    pub kind: &'static str,
    pub event: serde_json::Value,
}

impl Entry {
    fn of<E: Vocabulary>(env: &Envelope<E>) -> Entry {
        Entry {
            seq: env.seq,
            time: env.time.to_rfc3339(),
            kind: env.event.kind_name(),
            event: env.event.body_json(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct WorkerJournal {
    pub path: String,
    /// `clean`, `torn_tail` (the supervisor died mid-write), `corrupt` or `tampered`.
    pub status: Status,
    pub head: Option<String>,
    pub damage: Option<String>,
    pub events: Vec<Entry>,
    /// How its payload ended, as these events say (up to any damage).
    #[serde(skip)]
    ended: Ended,
}

/// What a worker's journals say of its payload's end.
#[derive(Clone, Debug, Default)]
struct Ended {
    refused: bool,
    /// Code, signal, interrupted.
    exited: Option<(Option<i32>, Option<i32>, bool)>,
    /// The supervisor's outcome and exit code.
    finished: Option<(String, i32)>,
}

impl Ended {
    fn offer(&mut self, e: &WorkerEvent) {
        match e {
            WorkerEvent::PreflightRefused(_) => self.refused = true,
            WorkerEvent::PayloadExited(x) => self.exited = Some((x.code, x.signal, x.interrupted)),
            WorkerEvent::SupervisorFinished(f) => {
                self.finished = Some((f.outcome.clone(), f.exit_code))
            }
            _ => {}
        }
    }

    /// The outcome, code and signal; `coordinator`: the exit the coordinator recorded, for a
    /// worker whose own journal says nothing of it.
    fn told(
        &self,
        coordinator: Option<(Option<i32>, Option<i32>)>,
    ) -> (
        Option<crate::policy::node::Outcome>,
        Option<i32>,
        Option<i32>,
    ) {
        use crate::policy::node::Outcome;
        let (code, signal) = self
            .exited
            .map(|(c, s, _)| (c, s))
            .or(coordinator)
            .unwrap_or_default();
        let outcome = match (&self.finished, self.exited) {
            (Some((word, exit)), _) => Outcome::told(Some(word), Some(*exit), signal),
            (None, Some((c, s, interrupted))) => Some(Outcome::of(false, c, s, interrupted)),
            (None, None) if self.refused => Some(Outcome::Refused),
            (None, None) => Outcome::told(None, code, signal),
        };
        (outcome, code, signal)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error(
        "no worker {0:?} in the journal (by name or submission id); {status} lists pool workers, \
         {dump} every submission",
        status = Next::PoolStatus(None),
        dump = Next::JournalDump(None)
    )]
    NotFound(String),
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// The newest worker named `key`, or the one with that submission id, active or finished.
pub(crate) fn find(state: &State, key: &str) -> Option<Found> {
    logs::workers_where(state, None, named(key)).next()
}

/// Whether a worker is the one `key` names: by its name or its whole submission id.
fn named(key: &str) -> impl Fn(&str, Uuid) -> bool + Copy + '_ {
    let id = Uuid::parse_str(key).ok();
    move |name, sid| id == Some(sid) || name == key
}

fn about(env: &Envelope, id: &str) -> bool {
    env.event
        .body_json()
        .get("submission_id")
        .and_then(|v| v.as_str())
        == Some(id)
}

fn keep(timeline: &mut Vec<Entry>, e: Entry) {
    if timeline.len() == MAX_TIMELINE {
        timeline.remove(0);
    }
    timeline.push(e);
}

pub fn inspect(state_dir: &Checked, key: &str) -> Result<InspectReport, InspectError> {
    let journal_dir = crate::statedir::journal_dir(state_dir);
    inspect_in(state_dir, key, &journal::load(&journal_dir)?.state, None)
}

/// [`inspect`] as it was at a replay's cut (`--at`): `state` is the state after it, and
/// neither journal shows an event past it (the worker's own by its time, `now`).
pub fn inspect_at(
    state_dir: &Checked,
    key: &str,
    at: &crate::state::replay::At,
) -> Result<InspectReport, InspectError> {
    inspect_in(state_dir, key, &at.state, Some((at.seq, at.now)))
}

/// [`inspect`] in a state already read (a trial shows each of its workers from one read).
pub(crate) fn inspect_in(
    state_dir: &Checked,
    key: &str,
    state: &State,
    until: Option<(u64, crate::event::Micros)>,
) -> Result<InspectReport, InspectError> {
    let journal_dir = crate::statedir::journal_dir(state_dir);
    let last_seq = until.map_or(u64::MAX, |(seq, _)| seq);
    let found = match find(state, key) {
        Some(f) => f,
        // A worker the reduced state has dropped (its pool detached, or long finished).
        None => logs::intents_where(&journal_dir, last_seq, None, 1, named(key))?
            .pop()
            .ok_or_else(|| InspectError::NotFound(key.to_owned()))?,
    };
    let id = found.submission_id.to_string();
    let mut timeline = Vec::new();
    let mut launch_failure = None;
    let mut exited = None;
    journal::replay(&journal_dir, None, |env| {
        if env.seq <= last_seq && about(&env, &id) {
            if let crate::event::Event::WorkerExited(e) = &env.event {
                exited = Some((e.code, e.signal));
            }
            keep(&mut timeline, Entry::of(&env));
            if let crate::event::Event::WorkerLaunchFailed(e) = &env.event {
                launch_failure = Some(e.reason.clone());
            }
        }
        Ok(())
    })?;
    let dirs = found.dirs(state_dir);
    dirs.check(state_dir).map_err(JournalError::from)?;
    let worker_journal = read_worker_journal(
        &crate::worker::supervisor::journal_dir(&dirs.evidence),
        until.map(|(_, now)| now),
    )?;
    let logs = super::logs::LogPaths::of(&dirs);
    let (outcome, exit_code, exit_signal) = worker_journal
        .as_ref()
        .map_or_else(Ended::default, |w| w.ended.clone())
        .told(exited);
    Ok(InspectReport {
        outcome,
        exit_code,
        exit_signal,
        chain: chain(state, found.submission_id),
        stdout: logs.stdout,
        stderr: logs.stderr,
        worker: found.worker,
        submission_id: id,
        pool: found.pool,
        state: found.state,
        last_event: timeline.last().cloned(),
        timeline,
        worker_journal,
        launch_failure,
    })
}

/// The generations of `id`'s lineage; empty when it is alone.
fn chain(state: &State, id: uuid::Uuid) -> Vec<Link> {
    let links = state.jobs.continuations.chain(id);
    if links.len() < 2 {
        return Vec::new();
    }
    links
        .into_iter()
        .map(|(sid, made)| {
            let job = state
                .jobs
                .active
                .get(&sid)
                .or_else(|| state.jobs.finished.iter().find(|j| j.submission_id == sid));
            let c = made.map(|g| &g.continued);
            Link {
                generation: c.map_or(1, |c| c.generation),
                submission_id: sid.to_string(),
                job_id: job.and_then(|j| j.job_id),
                state: job.map(|j| j.state.as_str().to_owned()),
                continued_after: c.map(|c| c.cause.clone()),
                proof: c.map(|c| c.proof.clone()),
                resumed_from: c.and_then(|c| c.published_dir.clone()),
                from_crash_class: c.is_some_and(|c| c.from_crash_class),
            }
        })
        .collect()
}

/// The worker's own journal up to its first damage, with the damage described; with `until`,
/// only its events recorded at or before that time.
fn read_worker_journal(
    dir: &Path,
    until: Option<crate::event::Micros>,
) -> Result<Option<WorkerJournal>, JournalError> {
    if journal::segment::list(dir).map_or(true, |s| s.is_empty()) {
        return Ok(None);
    }
    let mut events = Vec::new();
    let mut ended = Ended::default();
    let (status, head, damage) = match journal::reader::replay_of::<WorkerEvent>(dir, None, |env| {
        if until.is_none_or(|t| env.time <= t) {
            ended.offer(&env.event);
            keep(&mut events, Entry::of(&env));
        }
        Ok(())
    }) {
        Ok(scan) => (
            scan.status(),
            scan.head.as_ref().map(|h| hex::encode(h.chain)),
            scan.damage().map(|d| {
                format!(
                    "{} at {} offset {} ({} bytes)",
                    d.reason, d.segment, d.offset, d.bytes
                )
            }),
        ),
        Err(JournalError::Undecodable { seq, reason }) => (
            Status::Corrupt,
            None,
            Some(format!("event {seq} does not decode: {reason}")),
        ),
        Err(e) => return Err(e),
    };
    Ok(Some(WorkerJournal {
        path: dir.display().to_string(),
        status,
        head,
        damage,
        events,
        ended,
    }))
}
