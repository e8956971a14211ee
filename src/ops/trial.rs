//! `dispatch trial open|verdict|show` and `dispatch trials`: acceptance trials.
//!
//! A verdict is journaled with the evidence it rests on: for every worker of the trial, its
//! state, the outcome its own journal records, and the SHA-256 of its published manifest. A
//! `passed` verdict is refused unless every worker has ended, completed and published evidence
//! that still verifies now; `failed` can always be recorded. Neither is ever replaced.
//!
//! The verdict gathers each worker's evidence itself (its published manifest is re-verified
//! now); `policy::trial` decides whether it supports a pass.

use crate::statedir::Checked;
use std::path::Path;

use serde::Serialize;
use uuid::Uuid;

use super::context::Ctx;
use super::error::OpError;
use super::inspect::{self, InspectReport};
use crate::event::trial::*;
use crate::event::Event;
use crate::journal;
use crate::names::check_path_name;
use crate::policy::trial::{self as policy, TrialRefusal};
use crate::slurm::Scheduler;
use crate::state::pool::WorkerState;
use crate::state::trial::*;
use crate::state::State;
use crate::worker::dirs::WorkerDirs;
use crate::worker::publish;
use crate::worker::report::{self, Publication};

#[derive(Debug, Serialize)]
pub struct TrialView {
    pub trial: String,
    pub opened_at: String,
    pub pin: Option<String>,
    pub follows: Option<String>,
    pub note: String,
    pub workers: Vec<TrialWorkerView>,
    pub verdict: Option<VerdictView>,
}

#[derive(Debug, Serialize)]
pub struct TrialWorkerView {
    pub submission_id: String,
    pub worker: String,
    pub pool: Option<String>,
    /// As the reduced state has it, or `ended` once it no longer holds the worker.
    pub state: String,
}

/// A trial worker's state now: as the reduced state has it, or `ended` once it is dropped.
fn state_now(state: &State, w: &TrialWorker) -> String {
    if w.forgotten {
        return WorkerState::Forgotten.as_str().to_owned();
    }
    inspect::find(state, &w.submission_id.to_string())
        .map_or_else(|| crate::state::ENDED.to_owned(), |f| f.state)
}

#[derive(Debug, Serialize)]
pub struct VerdictView {
    #[serde(serialize_with = "crate::state::word")]
    pub verdict: Verdict,
    pub reason: String,
    pub at: String,
    pub evidence: Vec<TrialEvidence>,
}

pub fn view(state: &State, t: &Trial) -> TrialView {
    TrialView {
        trial: t.name.clone(),
        opened_at: t.opened_at.to_rfc3339(),
        pin: t.pin.clone(),
        follows: t.follows.clone(),
        note: t.note.clone(),
        workers: t
            .workers
            .iter()
            .map(|w| TrialWorkerView {
                submission_id: w.submission_id.to_string(),
                worker: w.worker.clone(),
                pool: w.pool.clone(),
                state: state_now(state, w),
            })
            .collect(),
        verdict: t.judgement.as_ref().map(|j| VerdictView {
            verdict: j.verdict,
            reason: j.reason.clone(),
            at: j.at.to_rfc3339(),
            evidence: j.evidence.clone(),
        }),
    }
}

pub struct OpenRequest {
    pub trial: String,
    pub pin: Option<String>,
    pub follows: Option<String>,
    pub note: String,
}

/// The longest `--note`, `--pin` or `--reason` kept in the journal, in bytes.
pub const MAX_TEXT: usize = 4096;

fn check_text(what: &str, text: &str) -> Result<(), OpError> {
    if text.len() > MAX_TEXT {
        return Err(OpError::Usage(format!(
            "{what} is {} bytes; at most {MAX_TEXT} are kept (put longer text in a file and \
             name the file)",
            text.len()
        )));
    }
    Ok(())
}

pub fn open<S: Scheduler>(ctx: &Ctx<S>, req: &OpenRequest) -> Result<TrialView, OpError> {
    check_path_name("trial", &req.trial).map_err(OpError::Usage)?;
    check_text("--note", &req.note)?;
    check_text("--pin", req.pin.as_deref().unwrap_or(""))?;
    let (writer, loaded) = ctx.lock_and_load()?;
    policy::check_open(&loaded.state.trials, &req.trial, req.follows.as_deref())
        .map_err(refused)?;
    let opened = TrialOpened {
        trial: req.trial.clone(),
        pin: req.pin.clone(),
        follows: req.follows.clone(),
        note: req.note.clone(),
    };
    let committed = writer.append_one(Event::TrialOpened(opened.clone()))?;
    let mut trials = Trials::default();
    trials.opened(committed.time, &opened);
    Ok(view(&loaded.state, &trials.trials[&req.trial]))
}

/// What one worker of the trial left, and whether its published evidence verifies now.
fn evidence_of(state_dir: &Path, state: &State, w: &TrialWorker) -> (TrialEvidence, bool) {
    let dirs = WorkerDirs::of(state_dir, w.pool.as_deref(), w.submission_id);
    let mut e = TrialEvidence {
        submission_id: w.submission_id,
        worker: w.worker.clone(),
        state: state_now(state, w),
        outcome: None,
        published_dir: None,
        manifest_sha256: None,
    };
    // A tree that is not trusted leaves no evidence: `passed` is then refused.
    if dirs.check(state_dir).is_err() {
        return (e, false);
    }
    let Ok(Some(r)) = report::read(&dirs.evidence) else {
        return (e, false);
    };
    e.outcome = r.outcome().map(|o| o.as_str().to_owned());
    let mut verifies = false;
    if let Some(Publication::Published(p)) = r.publication {
        verifies = publish::verify_recorded(Path::new(&p.dir), &p.manifest_sha256).is_ok();
        e.published_dir = Some(p.dir);
        e.manifest_sha256 = Some(p.manifest_sha256);
    }
    (e, verifies)
}

pub fn judge<S: Scheduler>(
    ctx: &Ctx<S>,
    trial: &str,
    verdict: Verdict,
    reason: &str,
) -> Result<TrialView, OpError> {
    check_text("--reason", reason)?;
    let (writer, loaded) = ctx.lock_and_load()?;
    let state = &loaded.state;
    let t = state
        .trials
        .trials
        .get(trial)
        .ok_or_else(|| refused(TrialRefusal::Unknown(trial.to_owned())))?;
    let mut evidence = Vec::with_capacity(t.workers.len());
    let mut problems = Vec::new();
    for w in &t.workers {
        let (e, verifies) = evidence_of(&ctx.state_dir, state, w);
        problems.extend(policy::evidence_problem(&e, verifies));
        evidence.push(e);
    }
    policy::check_verdict(t, verdict, &problems).map_err(refused)?;
    let judged = TrialJudged {
        trial: trial.to_owned(),
        verdict,
        reason: reason.to_owned(),
        evidence,
    };
    let committed = writer.append_one(Event::TrialJudged(judged.clone()))?;
    let mut t = t.clone();
    t.judgement = Some(Judgement {
        verdict,
        reason: judged.reason,
        at: committed.time,
        evidence: judged.evidence,
    });
    Ok(view(state, &t))
}

/// Every trial, in name order (offline). No journal yet means no trials.
pub fn list(state_dir: &Checked) -> Result<Vec<TrialView>, OpError> {
    let loaded = match journal::load::<State>(&crate::statedir::journal_dir(state_dir)) {
        Ok(l) => l,
        Err(crate::journal::JournalError::Missing(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let s = &loaded.state;
    Ok(s.trials.trials.values().map(|t| view(s, t)).collect())
}

#[derive(Debug, Serialize)]
pub struct TrialShow {
    #[serde(flatten)]
    pub trial: TrialView,
    /// The forensic view of each worker (`dispatch inspect`), where the state still knows it.
    pub inspected: Vec<InspectReport>,
}

/// Every trial as it was at a replay's cut (`--at`).
pub fn list_at(at: &crate::state::replay::At) -> Vec<TrialView> {
    let s = &at.state;
    s.trials.trials.values().map(|t| view(s, t)).collect()
}

/// One trial with every worker's timeline and own journal (offline).
pub fn show(state_dir: &Checked, trial: &str) -> Result<TrialShow, OpError> {
    let loaded = journal::load(&crate::statedir::journal_dir(state_dir))?;
    show_in(state_dir, trial, &loaded.state, None)
}

/// [`show`] as it was at a replay's cut (`--at`).
pub fn show_at(
    state_dir: &Checked,
    trial: &str,
    at: &crate::state::replay::At,
) -> Result<TrialShow, OpError> {
    show_in(state_dir, trial, &at.state, Some(at))
}

fn show_in(
    state_dir: &Checked,
    trial: &str,
    s: &State,
    at: Option<&crate::state::replay::At>,
) -> Result<TrialShow, OpError> {
    let t = s
        .trials
        .trials
        .get(trial)
        .ok_or_else(|| refused(TrialRefusal::Unknown(trial.to_owned())))?;
    let mut inspected = Vec::new();
    for w in &t.workers {
        let key = w.submission_id.to_string();
        match inspect::inspect_in(state_dir, &key, s, at.map(|at| (at.seq, at.now))) {
            Ok(r) => inspected.push(r),
            Err(inspect::InspectError::NotFound(_)) => {}
            Err(inspect::InspectError::Journal(e)) => return Err(e.into()),
        }
    }
    Ok(TrialShow {
        trial: view(s, t),
        inspected,
    })
}

/// The trial a new worker joins, checked; the join event goes in its receipt's commit.
pub fn join(state: &State, trial: &str, submission_id: Uuid) -> Result<Event, OpError> {
    policy::check_join(&state.trials, trial).map_err(refused)?;
    Ok(Event::TrialWorkerJoined(TrialWorkerJoined {
        trial: trial.to_owned(),
        submission_id,
    }))
}

fn refused(r: TrialRefusal) -> OpError {
    OpError::TrialRefused(r)
}
