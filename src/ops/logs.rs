//! `dispatch logs WORKER`: which worker a name means, where its stdout and stderr are, and
//! whether it has ended. Offline: the coordinator's state, the worker's own journal and its
//! files; never a Slurm call, nothing written.
//!
//! A name, a submission id or a short id may mean several workers (two pools, a name used
//! again): that is a usage error naming each. The output is the worker's evidence directory's
//! `stdout` and `stderr`, where the step's (pool) or batch job's (`submit`) `--output` and
//! `--error` point. It has ended when its own journal records the payload's exit or the
//! supervisor's end, or when the coordinator's state has it over (`ended`). `cli::logs` prints
//! the file and follows it by polling.

use std::path::{Path, PathBuf};

use serde::Serialize;
use uuid::Uuid;

use super::error::OpError;
use crate::event::Event;
use crate::journal::{self, JournalError};
use crate::next::Next::{self, Jobs};
use crate::state::pool::WorkerState;
use crate::state::State;
use crate::worker::dirs::WorkerDirs;

/// Submissions of one name kept from a journal scan (for workers the state has dropped);
/// more than this is ambiguous anyway, and the message names this many.
const MAX_CANDIDATES: usize = 16;

/// Where a worker's output is: the step's (pool) or the batch job's (`submit`) `--output` and
/// `--error`, both in its evidence directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogPaths {
    pub stdout: String,
    pub stderr: String,
}

impl LogPaths {
    pub fn of(dirs: &WorkerDirs) -> LogPaths {
        Self::in_evidence(&dirs.evidence)
    }

    /// The files in a worker's evidence directory.
    pub fn in_evidence(evidence: &Path) -> LogPaths {
        // As `display()` shows them, without a formatter: `pool status` makes thousands.
        let s = |name: &str| {
            evidence
                .join(name)
                .into_os_string()
                .into_string()
                .unwrap_or_else(|p| p.to_string_lossy().into_owned())
        };
        LogPaths {
            stdout: s("stdout"),
            stderr: s("stderr"),
        }
    }
}

/// One worker a name may mean.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub worker: String,
    pub submission_id: Uuid,
    /// `None` for a `dispatch submit` worker.
    pub pool: Option<String>,
    /// As the reducers have it now (`ended` when only the journal still knows it).
    pub state: String,
}

impl Candidate {
    pub fn dirs(&self, state_dir: &Path) -> WorkerDirs {
        WorkerDirs::of(state_dir, self.pool.as_deref(), self.submission_id)
    }

    fn describe(&self) -> String {
        format!(
            "{} submission {} ({})",
            self.pool
                .as_deref()
                .map_or("dispatch submit,".to_owned(), |p| format!("pool {p},")),
            self.submission_id,
            self.state
        )
    }
}

/// Whether `key` names this submission: its worker name, its submission id, or the id's first
/// 8 hex digits (the short id the listings print).
pub fn names(key: &str, worker: &str, submission_id: Uuid) -> bool {
    if worker == key {
        return true;
    }
    if let Ok(id) = Uuid::parse_str(key) {
        return id == submission_id;
    }
    key.len() == 8
        && key.bytes().all(|b| b.is_ascii_hexdigit())
        && submission_id
            .simple()
            .to_string()
            .starts_with(&key.to_ascii_lowercase())
}

/// Every worker in the state that `key` may mean, newest first per pool, pools before `submit`
/// workers; only those of `pool` when it is given.
pub fn candidates(state: &State, key: &str, pool: Option<&str>) -> Vec<Candidate> {
    let named = |worker: &str, id| names(key, worker, id);
    workers_where(state, pool, named)
        .take(MAX_CANDIDATES)
        .collect()
}

/// The workers in the state that `keep` keeps (by name and submission id), newest first per
/// pool, pools before `submit` workers; only those of `pool` when it is given.
pub(crate) fn workers_where<'s>(
    state: &'s State,
    pool: Option<&'s str>,
    keep: impl Fn(&str, Uuid) -> bool + Copy + 's,
) -> impl Iterator<Item = Candidate> + 's {
    let pools = state.pools.pools.values();
    let pooled = pools
        .filter(move |p| pool.is_none_or(|n| p.name == n))
        .flat_map(move |p| {
            let workers = p.active.values().chain(p.finished.iter().rev());
            workers
                .filter(move |w| keep(&w.name, w.submission_id))
                .map(|w| Candidate {
                    worker: w.name.clone(),
                    submission_id: w.submission_id,
                    pool: Some(p.name.clone()),
                    state: w.state.as_str().to_owned(),
                })
        });
    let jobs = state
        .jobs
        .active
        .values()
        .chain(state.jobs.finished.iter().rev());
    let jobs = jobs.filter(move |j| pool.is_none() && keep(&j.worker, j.submission_id));
    pooled.chain(jobs.map(|j| Candidate {
        worker: j.worker.clone(),
        submission_id: j.submission_id,
        pool: None,
        state: j.state.as_str().to_owned(),
    }))
}

/// The submission intents `key` may mean in the whole journal, newest first: for workers the
/// reduced state has dropped (their pool detached, or long finished), which can only have ended.
fn candidates_in_journal(
    journal_dir: &Path,
    key: &str,
    pool: Option<&str>,
) -> Result<Vec<Candidate>, JournalError> {
    let named = |worker: &str, id| names(key, worker, id);
    intents_where(journal_dir, u64::MAX, pool, MAX_CANDIDATES, named)
}

/// The newest `max` submission intents up to seq `last_seq` that `keep` keeps (by name and
/// submission id), newest first; only those of `pool` when it is given.
pub(crate) fn intents_where(
    journal_dir: &Path,
    last_seq: u64,
    pool: Option<&str>,
    max: usize,
    keep: impl Fn(&str, Uuid) -> bool,
) -> Result<Vec<Candidate>, JournalError> {
    let mut found = Vec::new();
    journal::replay(journal_dir, None, |env| {
        if env.seq > last_seq {
            return Ok(());
        }
        let (worker, submission_id, in_pool) = match &env.event {
            Event::WorkerSubmitIntent(e) => (&e.worker, e.submission_id, Some(&e.pool)),
            Event::JobSubmitIntent(e) => (&e.worker, e.submission_id, None),
            _ => return Ok(()),
        };
        if keep(worker, submission_id) && pool.is_none_or(|p| in_pool.is_some_and(|q| q == p)) {
            if found.len() == max {
                found.remove(0);
            }
            found.push(Candidate {
                worker: worker.clone(),
                submission_id,
                pool: in_pool.cloned(),
                state: crate::state::ENDED.to_owned(),
            });
        }
        Ok(())
    })?;
    found.reverse();
    Ok(found)
}

/// The one worker `key` names (within `pool` when given). None is exit 3 (not found); several
/// (the same name in two pools, or used again) is exit 2, naming each and how to pick one.
pub fn resolve(
    state: &State,
    journal_dir: &Path,
    key: &str,
    pool: Option<&str>,
) -> Result<Candidate, OpError> {
    let mut found = candidates(state, key, pool);
    if found.is_empty() {
        found = candidates_in_journal(journal_dir, key, pool)?;
    }
    match found.len() {
        0 => Err(OpError::NotFound(format!(
            "no worker {key:?}{} (by name or submission id); {} lists pool workers, {Jobs} those \
             started as their own jobs",
            pool.map(|p| format!(" in pool {p:?}")).unwrap_or_default(),
            Next::PoolStatus(None)
        ))),
        1 => Ok(found.remove(0)),
        _ => {
            let pools: std::collections::BTreeSet<_> = found.iter().map(|c| &c.pool).collect();
            let how = if pools.len() > 1 {
                "name the pool (`--pool POOL`) or the submission id"
            } else {
                "name the submission id (or its first 8 hex digits)"
            };
            Err(OpError::Usage(format!(
                "worker {key:?} names {} workers: {}; {how}",
                found.len(),
                found
                    .iter()
                    .map(Candidate::describe)
                    .collect::<Vec<_>>()
                    .join("; ")
            )))
        }
    }
}

/// Why the worker's output cannot grow any more, if it cannot: its own journal recorded the
/// payload's exit (or the supervisor's end), or the coordinator's state has it over. Files
/// only: following a worker costs the controller nothing.
pub fn ended(state: Option<&State>, dirs: &WorkerDirs, c: &Candidate) -> Option<String> {
    if let Ok(Some(r)) = crate::worker::report::read(&dirs.evidence) {
        // How it ended, in the words every view uses (a non-zero exit is `failed`).
        let outcome = r
            .payload_outcome()
            .map(|o| format!(" ({o})"))
            .unwrap_or_default();
        if let Some(e) = &r.exited {
            return Some(match (e.code, e.signal) {
                (Some(code), _) => format!("the payload exited with code {code}{outcome}"),
                (None, Some(sig)) => format!("the payload was killed by signal {sig}{outcome}"),
                (None, None) => format!("the payload exited{outcome}"),
            });
        }
        if r.finished.is_some() {
            return Some(format!("the supervisor finished{outcome}"));
        }
        if r.refused.is_some() {
            return Some("the supervisor refused to start the payload".to_owned());
        }
    }
    let state = state?;
    if let Some(why) = launch_failure(state, c) {
        return Some(format!("its launch failed: {why}"));
    }
    let now = match &c.pool {
        Some(_) => pool_worker(state, c).map(|w| {
            (
                w.state == WorkerState::Exited || !w.state.holds_budget(),
                w.state.as_str(),
            )
        }),
        None => state
            .jobs
            .active
            .get(&c.submission_id)
            .map(|j| (false, j.state.as_str()))
            .or_else(|| {
                state
                    .jobs
                    .finished
                    .iter()
                    .find(|j| j.submission_id == c.submission_id)
                    .map(|j| (true, j.state.as_str()))
            }),
    };
    match now {
        Some((true, s)) => Some(format!("the coordinator records it {s}")),
        Some((false, _)) => None,
        None => Some("the coordinator no longer holds it".to_owned()),
    }
}

/// The pool worker `c` means, active or finished, as the state holds it.
fn pool_worker<'s>(state: &'s State, c: &Candidate) -> Option<&'s crate::state::pool::Worker> {
    let p = state.pools.pools.get(c.pool.as_deref()?)?;
    p.active.get(&c.submission_id).or_else(|| {
        p.finished
            .iter()
            .find(|w| w.submission_id == c.submission_id)
    })
}

/// Why the launch of pool worker `c` failed, as the state recorded it (for a launch Slurm
/// refused, srun's own words): its step never ran, so it has no output to show.
pub fn launch_failure(state: &State, c: &Candidate) -> Option<String> {
    pool_worker(state, c)?.launch_failure.clone()
}

/// The file to read: `stderr` or `stdout` of the worker's evidence directory, after checking
/// the directories on the way are ours (never following a link planted there).
pub fn log_file(state_dir: &Path, dirs: &WorkerDirs, stderr: bool) -> Result<PathBuf, OpError> {
    dirs.check(state_dir)?;
    Ok(dirs.evidence.join(if stderr { "stderr" } else { "stdout" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_a_worker_by_name_full_id_or_short_id() {
        let id = Uuid::parse_str("0b5e7c1e-8a1f-4a55-9f6e-0d4b8e2a9c11").unwrap();
        assert!(names("w1", "w1", id));
        assert!(names("0b5e7c1e-8a1f-4a55-9f6e-0d4b8e2a9c11", "w1", id));
        assert!(names("0b5e7c1e", "w1", id));
        assert!(names("0B5E7C1E", "w1", id));
        assert!(!names("0b5e7c1f", "w1", id));
        assert!(!names("0b5e7c", "w1", id), "only the 8-digit short id");
        assert!(!names("w2", "w1", id));
    }
}
