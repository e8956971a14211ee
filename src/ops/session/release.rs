//! `dispatch session release`: detach when another session holds the same job, otherwise
//! cancel it, and forget it only once scancel succeeded. A job a renewal replaced and never
//! saw end is settled too: forgotten once Slurm shows it gone, cancelled while it still runs.
//!
//! The cancel: intent → `scancel` → a bounded wait (30 s) for squeue to show the job gone,
//! recorded as the proof → released. A scancel with no answer is exit 4 (outcome unknown); one
//! that said no is exit 1; both leave the record as it was. Success is a proof, not the
//! record's word: the sweep then probes by name, and adopts and cancels every other live job
//! of this name and target that no other session holds (a record restored from an older copy
//! names an ended job while a newer one runs). At most `SWEEP_ROUNDS` (3) rounds, until a
//! listing shows none (`also_released` in the report). A probe that cannot vouch for that is
//! exit 4.

use serde::Serialize;

use super::{
    adopt_or_vouch, adopted, command_for, lock_session, name_probe, session, vouch_absence, Env,
    OpError, Resolved,
};
use crate::event::session::{
    SessionCancelFailed, SessionCancelIntent, SessionCleared, SessionDetached, SessionKey,
    SessionReleased, SessionSubmitFailed,
};
use crate::event::Event;
use crate::failpoint;
use crate::next::Next::Sessions;
use crate::ops::poll::Poller;
use crate::policy::session::ended::ended;
use crate::policy::session::release::left_alone;
use crate::policy::session::{Probe, Seen};
use crate::slurm::{ActionError, JobId, Scheduler};
use crate::state::State;

/// What a release would do, for the prompt.
#[derive(Clone, Debug)]
pub struct ReleasePlan {
    pub key: SessionKey,
    pub job: Option<JobId>,
    pub node: Option<String>,
    /// Other sessions holding the same job: release then only detaches.
    pub holders: Vec<SessionKey>,
    /// A submission may have created a job the record cannot name; release looks it up by
    /// name first.
    pub may_exist: bool,
    /// The job a renewal replaced, still recorded (its end was never seen).
    pub replaced: Option<JobId>,
}

/// What release did with the job a renewal replaced.
#[derive(Clone, Debug, Serialize)]
pub struct ReplacedOutcome {
    pub job_id: JobId,
    pub action: ReplacedAction,
    pub proof: Option<String>,
}

crate::words! {
    pub enum ReplacedAction {
        /// Slurm shows it gone.
        Cleared => "cleared",
        /// Cancelled and forgotten.
        Released => "released",
        /// Another session holds it.
        Detached => "detached",
        /// It could not be checked; still recorded.
        Unknown => "unknown",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReleaseAction {
    Nothing,
    Detached,
    Released,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReleaseReport {
    pub mirror: String,
    pub target: String,
    pub action: ReleaseAction,
    pub job_id: Option<JobId>,
    pub holders: Vec<String>,
    /// What showed the job ended (or that it is not confirmed yet).
    pub proof: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced: Option<ReplacedOutcome>,
    /// Other live jobs of this session's name and target, found by name after the recorded
    /// one and cancelled (a record restored from an older copy, another state directory).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also_released: Vec<AlsoReleased>,
    /// Warnings for stderr.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct AlsoReleased {
    pub job_id: JobId,
    pub proof: String,
}

fn plan_of(state: &State, key: SessionKey) -> ReleasePlan {
    let s = session(state, &key);
    let job = s.and_then(|s| s.job_id());
    ReleasePlan {
        holders: job
            .map(|j| state.sessions.holders(j, Some(&key)))
            .unwrap_or_default(),
        node: s.and_then(|s| s.job.as_ref()).and_then(|j| j.node.clone()),
        may_exist: s.is_some_and(|s| s.may_have_unknown_job()),
        replaced: s.and_then(|s| s.replaced),
        job,
        key,
    }
}

/// Settle the job a renewal replaced: forget it if Slurm shows it gone, detach from it if
/// another session holds it, cancel it if it still runs; leave it recorded, with a note, if
/// Slurm cannot tell.
async fn settle_replaced<S: Scheduler>(
    env: &Env<'_, S>,
    state: &State,
    key: &SessionKey,
    job: JobId,
    warnings: &mut Vec<String>,
) -> Result<ReplacedOutcome, OpError> {
    let outcome = |action, proof| ReplacedOutcome {
        job_id: job,
        action,
        proof,
    };
    let holders: Vec<String> = state
        .sessions
        .holders(job, Some(key))
        .iter()
        .map(SessionKey::to_string)
        .collect();
    if !holders.is_empty() {
        env.ctx.append(Event::SessionDetached(SessionDetached {
            session: key.clone(),
            job_id: job,
            holders,
        }))?;
        return Ok(outcome(ReplacedAction::Detached, None));
    }
    match env.probe(job).await {
        Probe::Gone { state } => {
            // The session moved on from it: squeue's word only, accounting is not asked.
            let proof = ended(job, state.as_ref(), None).reason();
            env.ctx.append(Event::SessionCleared(SessionCleared {
                session: key.clone(),
                job_id: job,
                reason: format!("the job a renewal replaced is gone ({proof})"),
            }))?;
            Ok(outcome(ReplacedAction::Cleared, Some(proof)))
        }
        Probe::Live { .. } => {
            let cancelled = cancel(env, key, job).await?;
            Ok(outcome(ReplacedAction::Released, Some(cancelled.proof)))
        }
        Probe::Unknown(e) => {
            let proof = format!("squeue failed: {e}");
            warnings.push(format!(
                "could not check job {job}, which a renewal replaced ({proof}); it stays \
                 recorded: run {} again",
                command_for("release", key)
            ));
            Ok(outcome(ReplacedAction::Unknown, Some(proof)))
        }
    }
}

/// Read-only: what `release` would do now.
pub fn plan<S: Scheduler>(
    env: &Env<'_, S>,
    mirror: &str,
    target: &str,
) -> Result<ReleasePlan, OpError> {
    let r = env.resolve_recorded(mirror, target)?;
    Ok(plan_of(&env.ctx.read_state()?, r.key))
}

/// Release. `expected` is the job the user agreed to (from [`plan`]); if the session holds
/// another by now, nothing is done.
pub async fn release<S: Scheduler>(
    env: &Env<'_, S>,
    mirror: &str,
    target: &str,
    expected: Option<JobId>,
) -> Result<ReleaseReport, OpError> {
    let r = env.resolve_recorded(mirror, target)?;
    let (_lock, state) = lock_session(env, &r.token)?;
    let mut plan = plan_of(&state, r.key.clone());
    unchanged_since_asked(&r, &plan, expected)?;
    let mut warnings = Vec::new();
    let replaced = match plan.replaced {
        Some(old) => Some(settle_replaced(env, &state, &r.key, old, &mut warnings).await?),
        None => None,
    };
    if plan.job.is_none() && plan.may_exist && !r.configured {
        return Err(cannot_look_up(env, &r));
    }
    if plan.job.is_none() && r.configured {
        find_unrecorded(env, &state, &r, &mut plan, &mut warnings).await?;
    }
    let mut report = ReleaseReport::new(&r.key, plan.job, replaced, warnings);
    // Jobs the sweep leaves alone: those proven gone or cancelled here, and those other
    // sessions hold (detached, not cancelled).
    let mut settled: Vec<JobId> = report.replaced.iter().map(|o| o.job_id).collect();
    if let Some(job) = plan.job {
        settled.push(job);
        release_job(env, &r.key, job, &plan.holders, &mut report).await?;
    }
    if r.configured && plan.job.is_some() {
        sweep(env, &state, &r, &mut settled, &mut report).await?;
    } else if !r.configured {
        report.warnings.push(format!(
            "target {:?} is no longer configured, so no other job of {} could be looked up by \
             name: `squeue --me --name={}`",
            r.key.target, r.key, r.job_name
        ));
    }
    Ok(report)
}

impl ReleaseReport {
    /// Nothing released yet.
    fn new(
        key: &SessionKey,
        job: Option<JobId>,
        replaced: Option<ReplacedOutcome>,
        warnings: Vec<String>,
    ) -> ReleaseReport {
        ReleaseReport {
            mirror: key.mirror.clone(),
            target: key.target.clone(),
            action: ReleaseAction::Nothing,
            job_id: job,
            holders: Vec::new(),
            proof: None,
            replaced,
            also_released: Vec::new(),
            warnings,
        }
    }
}

/// The session must still hold the job the user agreed to release.
fn unchanged_since_asked(
    r: &Resolved<'_>,
    plan: &ReleasePlan,
    expected: Option<JobId>,
) -> Result<(), OpError> {
    if plan.job == expected {
        return Ok(());
    }
    Err(OpError::Failed(format!(
        "session {} changed while you were asked (it now holds {}); nothing was done. \
         Run {} again",
        r.key,
        plan.job.map_or("no job".into(), |j| format!("job {j}")),
        command_for("release", &r.key)
    )))
}

/// A submission may have created a job the record cannot name, and only the configured
/// target could find it by name.
fn cannot_look_up<S: Scheduler>(env: &Env<'_, S>, r: &Resolved<'_>) -> OpError {
    OpError::Usage(format!(
        "an earlier submission for {} may have created a job, and target {:?} is no longer \
         in {}: put it back to look the job up by name, or `squeue --me --name={}`",
        r.key,
        r.key.target,
        env.config_path.display(),
        r.job_name
    ))
}

/// No record of a job (never launched here, a lost or restored state directory, an ambiguous
/// submission): ask Slurm by name, as a launch would, before saying "nothing". A job found is
/// put into `plan`; a proven absence settles an ambiguous submission.
async fn find_unrecorded<S: Scheduler>(
    env: &Env<'_, S>,
    state: &State,
    r: &Resolved<'_>,
    plan: &mut ReleasePlan,
    warnings: &mut Vec<String>,
) -> Result<(), OpError> {
    let (probe, adopted) = adopt_or_vouch(env, r).await?;
    warnings.extend(probe.warnings.iter().cloned());
    match (adopted, probe.cannot_vouch()) {
        (Some((job, _)), _) => {
            warnings.push(format!(
                "no job was recorded for {}; found job {job} of it by name, releasing it",
                r.key
            ));
            plan.job = Some(job);
            plan.holders = state.sessions.holders(job, Some(&r.key));
        }
        (None, Some(why)) => {
            return Err(OpError::Unknown(format!(
                "no job is recorded for {}, and {why}; nothing was done. Retry {}, or \
                 look with `squeue --me --name={}`",
                r.key,
                command_for("release", &r.key),
                r.job_name
            )));
        }
        (None, None) => {
            if let Some(sub) = session(state, &r.key).and_then(|s| s.submission.clone()) {
                env.ctx
                    .append(Event::SessionSubmitFailed(SessionSubmitFailed {
                        session: r.key.clone(),
                        submission_id: sub.submission_id,
                        may_exist: false,
                        job_hint: sub.job_hint,
                        reason: "the name probe found no job of this target".into(),
                    }))?;
            }
        }
    }
    Ok(())
}

/// The session's job: cancelled, or only detached from when other sessions hold it too.
async fn release_job<S: Scheduler>(
    env: &Env<'_, S>,
    key: &SessionKey,
    job: JobId,
    holders: &[SessionKey],
    report: &mut ReleaseReport,
) -> Result<(), OpError> {
    let holders: Vec<String> = holders.iter().map(SessionKey::to_string).collect();
    if holders.is_empty() {
        let cancelled = cancel(env, key, job).await?;
        report.warnings.extend(cancelled.warnings);
        report.action = ReleaseAction::Released;
        report.proof = Some(cancelled.proof);
    } else {
        env.ctx.append(Event::SessionDetached(SessionDetached {
            session: key.clone(),
            job_id: job,
            holders: holders.clone(),
        }))?;
        report.action = ReleaseAction::Detached;
        report.holders = holders;
    }
    Ok(())
}

/// Rounds of the sweep: each cancels what the last probe showed; past them, jobs of this
/// session keep appearing (something else keeps submitting) and release says so.
const SWEEP_ROUNDS: usize = 3;

/// After the recorded job: every live job of this session's name and target that no other
/// session holds is adopted and cancelled, until a name probe shows none (the success of a
/// release is that proof). A probe that cannot vouch for that is an unknown outcome.
async fn sweep<S: Scheduler>(
    env: &Env<'_, S>,
    state: &State,
    r: &Resolved<'_>,
    settled: &mut Vec<JobId>,
    report: &mut ReleaseReport,
) -> Result<(), OpError> {
    for _ in 0..SWEEP_ROUNDS {
        let exclude = left_alone(&state.sessions, &r.key, settled);
        let live = still_running(env, r, &exclude, report).await?;
        if live.is_empty() {
            return Ok(());
        }
        for (job, seen) in live {
            release_stray(env, r, job, &seen, report).await?;
            settled.push(job);
        }
    }
    Err(OpError::Failed(format!(
        "{} of {}; but after {SWEEP_ROUNDS} rounds new jobs of this session's name and target \
         keep appearing (is another dispatch launching it?): `squeue --me --name={}`",
        released_what(report),
        r.key,
        r.job_name
    )))
}

/// The live jobs of this session's name and target a name probe shows, `exclude` left out;
/// none only when the probe (or, for an empty listing, its corroboration) vouches for it.
async fn still_running<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    exclude: &[JobId],
    report: &ReleaseReport,
) -> Result<Vec<(JobId, Seen)>, OpError> {
    let mut probe = name_probe(env, r, exclude).await;
    let none_left = probe
        .plan
        .as_ref()
        .is_some_and(|p| p.this_targets().next().is_none());
    if none_left {
        vouch_absence(env, r, &mut probe).await;
    }
    if let Some(why) = probe.cannot_vouch() {
        return Err(OpError::Unknown(format!(
            "{} of {}; but {why}, so it is not known whether another job of this session \
             still runs. Retry {}, or look with `squeue --me --name={}`",
            released_what(report),
            r.key,
            command_for("release", &r.key),
            r.job_name
        )));
    }
    Ok(probe
        .plan
        .iter()
        .flat_map(|p| p.this_targets())
        .map(|(job, seen)| (job, seen.clone()))
        .collect())
}

/// A stray job of this session found by the sweep: adopted (journaled), then cancelled.
async fn release_stray<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    job: JobId,
    seen: &Seen,
    report: &mut ReleaseReport,
) -> Result<(), OpError> {
    env.ctx
        .append(adopted(&r.key, job, seen, "release_sweep", None))?;
    report.warnings.push(format!(
        "job {job} ({}) of {} also runs under this session's name and target \
         (a record restored from an older copy, or another state directory); cancelling it",
        seen.state, r.key
    ));
    let cancelled = cancel(env, &r.key, job).await?;
    report.warnings.extend(cancelled.warnings);
    report.also_released.push(AlsoReleased {
        job_id: job,
        proof: cancelled.proof,
    });
    if report.action == ReleaseAction::Nothing {
        report.action = ReleaseAction::Released;
    }
    Ok(())
}

fn released_what(report: &ReleaseReport) -> String {
    let mut jobs: Vec<u32> = report.job_id.into_iter().map(JobId::get).collect();
    jobs.extend(report.also_released.iter().map(|a| a.job_id.get()));
    match (report.action, jobs.is_empty()) {
        (_, true) => "nothing was released".into(),
        (ReleaseAction::Detached, _) => {
            format!("detached from job {}", report.job_id.map_or(0, JobId::get))
        }
        _ => format!("released job(s) {jobs:?}"),
    }
}

pub struct Cancelled {
    pub proof: String,
    /// Warnings for stderr.
    pub warnings: Vec<String>,
}

/// `scancel J`, bracketed, then a bounded wait for squeue to show it gone. The session forgets
/// the job only when scancel succeeded; a failure leaves the record as it was.
pub async fn cancel<S: Scheduler>(
    env: &Env<'_, S>,
    key: &SessionKey,
    job: JobId,
) -> Result<Cancelled, OpError> {
    env.ctx
        .append(Event::SessionCancelIntent(SessionCancelIntent {
            session: key.clone(),
            job_id: job,
        }))?;
    failpoint::hit("session-after-cancel-intent");
    let result = env.ctx.sched.cancel_job(job).await;
    failpoint::hit("session-after-cancel");
    let failed = |definite: bool, reason: String| SessionCancelFailed {
        session: key.clone(),
        job_id: job,
        definite,
        reason,
    };
    let retry = command_for("release", key);
    let report = match result {
        Ok(report) if report.status.success() => report,
        Ok(report) => {
            let reason = format!(
                "scancel returned {}: {}",
                report.status,
                report.stderr.trim()
            );
            env.ctx
                .append(Event::SessionCancelFailed(failed(true, reason.clone())))?;
            return Err(OpError::Failed(format!(
                "{reason}. Session {key} still holds job {job}; retry {retry}"
            )));
        }
        Err(ActionError::Unknown { error, .. }) => {
            let reason = error.to_string();
            env.ctx
                .append(Event::SessionCancelFailed(failed(false, reason.clone())))?;
            return Err(OpError::Unknown(format!(
                "scancel {job} gave no answer ({reason}); the job may or may not be cancelled. \
                 Session {key} still holds it; retry {retry}"
            )));
        }
        Err(e) => {
            let reason = e.to_string();
            env.ctx
                .append(Event::SessionCancelFailed(failed(true, reason.clone())))?;
            return Err(OpError::Failed(format!(
                "scancel {job} was not run: {reason}. Session {key} still holds it"
            )));
        }
    };
    let mut warnings = Vec::new();
    if !report.stderr.trim().is_empty() {
        warnings.push(format!("scancel: {}", report.stderr.trim()));
    }
    let proof = prove_gone(env, job).await;
    if proof.starts_with("unconfirmed") {
        warnings.push(format!(
            "job {job} accepted the cancel but is not shown gone yet ({proof}); \
             {Sessions} lists it until it is"
        ));
    }
    env.ctx.append(Event::SessionReleased(SessionReleased {
        session: key.clone(),
        job_id: job,
        proof: proof.clone(),
    }))?;
    Ok(Cancelled { proof, warnings })
}

async fn prove_gone<S: Scheduler>(env: &Env<'_, S>, job: JobId) -> String {
    let mut poll = Poller::within(
        env.waits.poll_first,
        env.waits.poll_max,
        env.waits.gone_budget,
    );
    loop {
        let last = match env.probe(job).await {
            // Its own cancel ended it, or Slurm already had (PREEMPTED, TIMEOUT): squeue's
            // word says which; accounting is not asked after a cancel.
            Probe::Gone { state } => return ended(job, state.as_ref(), None).reason(),
            Probe::Live { state, .. } => format!("still {state}"),
            Probe::Unknown(e) => format!("squeue failed: {e}"),
        };
        if poll.expired() {
            return format!(
                "unconfirmed after {} s: {last}",
                env.waits.gone_budget.as_secs()
            );
        }
        poll.pause().await;
    }
}
