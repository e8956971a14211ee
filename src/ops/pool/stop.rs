//! `dispatch pool stop-worker`, and the release of a worker whose step is proven over (shared
//! with reconcile): its journal ingested, its leftovers cleaned, its budget released.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use super::{
    active_worker, locked, numbered_step_named, step_name, sweep_publication, worker_journal_news,
};
use crate::event::pool::*;
use crate::event::Event;
use crate::failpoint;
use crate::next::Next::{self, Reconcile};
use crate::ops::context::{
    append_if, await_proof, grace_seconds, recorded_release_proof, request_grace, stop_grace, Ctx,
    STOP_PROOF_TIMEOUT, STOP_WRAP_UP,
};
use crate::ops::error::OpError;
use crate::policy::node as node_policy;
use crate::policy::pool::Refusal;
use crate::policy::reconcile as reconcile_policy;
use crate::slurm::{Answer, JobId, JobQuery, Scheduler, Signal, StepId, StepKind};
use crate::state::pool::*;
use crate::state::State;
use crate::worker::dirs::WorkerDirs;
use crate::worker::{cleanup, report};

#[derive(Debug, Serialize)]
pub struct StopReport {
    pub pool: String,
    pub worker: String,
    pub submission_id: String,
    pub step_id: Option<String>,
    #[serde(serialize_with = "crate::state::word")]
    pub state: WorkerState,
    pub proof: Option<String>,
    /// The worker was released before this stop (by an earlier stop, reconcile or release):
    /// nothing was signalled, and `proof` is the proof recorded then.
    pub already_released: bool,
}

/// A stop of a worker already released is success, as `scancel` of an ended job is: the most
/// recent finished worker of that name, if its step was proven over.
fn already_released(
    journal_dir: &Path,
    state: &State,
    pool: &str,
    worker: &str,
) -> Option<StopReport> {
    let p = state.pools.pools.get(pool)?;
    let w = p.finished.iter().rev().find(|w| w.name == worker)?;
    (w.state == WorkerState::Released).then(|| StopReport {
        pool: pool.to_owned(),
        worker: worker.to_owned(),
        submission_id: w.submission_id.to_string(),
        step_id: w.step().map(|s| s.to_string()),
        state: WorkerState::Released,
        proof: recorded_release_proof(journal_dir, w.submission_id),
        already_released: true,
    })
}

fn find_worker<'a>(
    state: &'a State,
    pool: &str,
    worker: &str,
) -> Result<(&'a Pool, &'a Worker), OpError> {
    let p = state.pools.pools.get(pool).ok_or_else(|| Refusal::NoPool {
        pool: pool.to_owned(),
    })?;
    let w = p.active.values().find(|w| w.name == worker);
    let w = w.ok_or_else(|| {
        OpError::NotFound(format!(
            "pool {pool:?} has no worker {worker:?} holding budget; {} lists them",
            Next::PoolStatus(Some(&pool))
        ))
    })?;
    Ok((p, w))
}

/// Is `step` (seen before) over? Proof only (`policy::reconcile::step_over`): its job listed
/// beside a step listing without it, the job over (terminal state, "Invalid job id"). An empty
/// answer alone proves nothing: a lying or misconfigured controller gives one too.
async fn step_proven_over<S: Scheduler>(ctx: &Ctx<S>, step: StepId) -> Option<String> {
    let StepKind::Numbered(n) = step.step else {
        return None;
    };
    let steps = ctx.sched.list_steps(step.job).await;
    let jobs = ctx.sched.list_jobs(&JobQuery::ids(vec![step.job])).await;
    let obs = reconcile_policy::observe_pool(step.job, &jobs.job(step.job), Some(&steps));
    reconcile_policy::step_over(n, true, &obs)
}

/// `pool stop-worker POOL WORKER [--grace SECS]`: TERM with the grace (`asked`, else the
/// worker's own: `ops::context::stop_grace`), then proof, else cancel and proof, then release.
pub async fn stop_worker<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    worker: &str,
    asked: Option<Duration>,
) -> Result<StopReport, OpError> {
    let begun = begin_stop(ctx, pool, worker, asked).await?;
    finish_stop(ctx, begun).await
}

/// A stop begun: the worker was already released, or its step was sent SIGTERM.
pub(super) enum Begun {
    Already(StopReport),
    Signalled(Signalled),
}

/// A step sent SIGTERM at `termed`, its payload given `grace`.
pub(super) struct Signalled {
    pool: String,
    worker: String,
    submission_id: Uuid,
    step: StepId,
    step_no: u32,
    grace: Duration,
    termed: tokio::time::Instant,
}

/// The first half of a stop: the worker found, its step known, the intent with its grace, the
/// grace told to its supervisor, SIGTERM. Several stops begun at once run their graces side by
/// side (`pool release`).
pub(super) async fn begin_stop<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    worker: &str,
    asked: Option<Duration>,
) -> Result<Begun, OpError> {
    // Decide what to stop from a first look; every append below takes the lock again and
    // checks that the worker is still as this stop saw it. The grace and the proof polls
    // happen with the lock released (issue 11).
    let state = ctx.lock_and_load()?.1.state;
    let (p, w) = match find_worker(&state, pool, worker) {
        Ok(found) => found,
        Err(e) => {
            return already_released(&ctx.journal_dir(), &state, pool, worker)
                .map(Begun::Already)
                .ok_or(e)
        }
    };
    let job = w.job_id.unwrap_or(p.allocation.job_id);
    let submission_id = w.submission_id;
    let step_no = known_step(ctx, pool, worker, job, w.step_id, submission_id).await?;
    let step = StepId::new(job, StepKind::Numbered(step_no));
    let dirs = WorkerDirs::new(&ctx.pools_dir(), pool, submission_id);
    let grace_s = grace_seconds(stop_grace(&ctx.state_dir, &dirs, asked));
    write_stop_intent(ctx, pool, worker, submission_id, step_no, grace_s)?;
    failpoint::hit("pool-stop-after-intent");
    request_grace(&ctx.state_dir, &dirs, grace_s);
    if let Err(e) = ctx.sched.signal_step(step, Signal::Term).await {
        tracing::warn!("scancel --signal=TERM {step}: {e}");
    }
    failpoint::hit("pool-stop-after-term");
    Ok(Begun::Signalled(Signalled {
        pool: pool.to_owned(),
        worker: worker.to_owned(),
        submission_id,
        step,
        step_no,
        grace: Duration::from_secs(u64::from(grace_s)),
        termed: tokio::time::Instant::now(),
    }))
}

/// The second half: proof within the grace from the TERM (and the wrap-up), else cancel and
/// proof; then the release with that proof.
pub(super) async fn finish_stop<S: Scheduler>(
    ctx: &Ctx<S>,
    begun: Begun,
) -> Result<StopReport, OpError> {
    let s = match begun {
        Begun::Already(report) => return Ok(report),
        Begun::Signalled(s) => s,
    };
    let (pool, worker, step) = (s.pool.as_str(), s.worker.as_str(), s.step);
    // Asked at least once, however long ago the TERM was (a stop finished after others).
    let left = (s.termed + s.grace + STOP_WRAP_UP)
        .saturating_duration_since(tokio::time::Instant::now())
        .max(Duration::from_millis(1));
    let mut proof = await_proof(left, || step_proven_over(ctx, step)).await;
    // What scancel answered, if this stop had to cancel: the message must not claim a cancel
    // that nobody confirmed.
    let mut cancel_failed = None;
    if proof.is_none() {
        if let Err(e) = ctx.sched.cancel_step(step).await {
            tracing::warn!("scancel {step}: {e}");
            cancel_failed = Some(e);
        }
        failpoint::hit("pool-stop-after-cancel");
        proof = await_proof(STOP_PROOF_TIMEOUT, || step_proven_over(ctx, step)).await;
    }
    let Some(proof) = proof else {
        let cancel = match cancel_failed {
            None => "was cancelled (scancel answered)".to_owned(),
            Some(e) => format!("was asked to cancel, but the cancel's outcome is unknown ({e})"),
        };
        return Err(OpError::Unknown(format!(
            "step {step} of worker {worker} {cancel}, and the step is not proven over; its budget \
             stays held. Run {Reconcile} to resolve it, or stop it again"
        )));
    };
    // Released by this stop, or by a reconcile that proved the same meanwhile: either way
    // it is released.
    release_proven(ctx, pool, s.submission_id, &proof, |w| {
        w.step_id.is_none_or(|n| n == s.step_no)
    })?;
    ctx.snapshot_quietly();
    Ok(StopReport {
        pool: pool.to_owned(),
        worker: worker.to_owned(),
        submission_id: s.submission_id.to_string(),
        step_id: Some(step.to_string()),
        state: WorkerState::Released,
        proof: Some(proof),
        already_released: false,
    })
}

/// The step of worker `worker` (`recorded`, else found by its name once more and recorded):
/// without one there is nothing to cancel safely (exit 4).
async fn known_step<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    worker: &str,
    job: JobId,
    recorded: Option<u32>,
    submission_id: Uuid,
) -> Result<u32, OpError> {
    let mut step_no = recorded;
    if step_no.is_none() {
        // Not seen at submit time: look once more, by name.
        let name = step_name(pool, worker);
        if let Answer::Live(rows) = ctx.sched.list_steps(job).await {
            step_no = numbered_step_named(&rows, &name);
            if let Some(n) = step_no {
                let unseen = |state: &State| {
                    active_worker(state, pool, submission_id).is_some_and(|w| w.step_id.is_none())
                };
                let seen = WorkerStepObserved {
                    submission_id,
                    step_id: n,
                };
                append_if(ctx, unseen, vec![Event::WorkerStepObserved(seen)])?;
            }
        }
    }
    step_no.ok_or_else(|| {
        OpError::Unknown(format!(
            "worker {worker} has no known step yet, so there is nothing to cancel safely; its budget stays held. \
             Run {Reconcile}, then stop it again"
        ))
    })
}

/// `WorkerStopIntent`, if worker `worker` is still as this stop saw it (with no step, or step
/// `step_no`).
fn write_stop_intent<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    worker: &str,
    submission_id: Uuid,
    step_no: u32,
    grace_s: u32,
) -> Result<(), OpError> {
    locked(ctx, |writer, state| {
        match active_worker(state, pool, submission_id) {
            Some(w) if w.step_id.is_none_or(|s| s == step_no) => {}
            _ => {
                return Err(OpError::Failed(format!(
                    "worker {worker} changed while this stop looked for its step (another command \
                     settled it); nothing was signalled. {} shows it now",
                    Next::PoolStatus(Some(&pool))
                )))
            }
        }
        writer.append_one(Event::WorkerStopIntent(WorkerStopIntent {
            submission_id,
            grace_s,
        }))?;
        Ok(())
    })
}

/// Worker `id`'s step is proven over (`proof`): record what its own journal says, finish the
/// cleanup its supervisor could not, and release its budget (`WorkerTerminal`). Each append
/// takes the lock and checks the worker still holds budget; files are removed with the lock
/// released. Whether this call released it (false: another command had).
pub(crate) fn release_proven<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    id: Uuid,
    proof: &str,
    still: impl Fn(&Worker) -> bool,
) -> Result<bool, OpError> {
    let pools_dir = ctx.pools_dir();
    let terminal = Event::WorkerTerminal(WorkerTerminal {
        submission_id: id,
        proof: proof.to_owned(),
    });
    // With nothing left to clean (the supervisor cleaned up), the release is one commit:
    // what the worker's journal says, then the proof.
    let cleanup = locked(ctx, |writer, state| {
        let Some(w) = active_worker(state, pool, id).filter(|w| still(w)).cloned() else {
            return Ok(None);
        };
        let mut events = worker_journal_news(state, pool, id, &pools_dir, true);
        let planned = plan_leftover_cleanup(&pools_dir, pool, &w);
        match &planned {
            Some((intent, _, _)) => events.push(Event::WorkerCleanupIntent(intent.clone())),
            None => events.push(terminal.clone()),
        }
        writer.append(events)?;
        Ok(Some((planned, w)))
    })?;
    let planned = match cleanup {
        None => return Ok(false),
        Some((None, w)) => {
            sweep_publication(&pools_dir, pool, &w);
            return Ok(true);
        }
        Some((Some(planned), _)) => planned,
    };
    let done = {
        let (intent, plan, dirs) = planned;
        let deadline = std::time::Instant::now() + LEFTOVER_CLEANUP_BUDGET;
        let d = cleanup::run(
            &dirs,
            &plan,
            node_policy::StateClass::CrashClassPartial,
            &intent.reason,
            deadline,
        );
        WorkerCleanedUp {
            submission_id: id,
            removed: d.removed,
            kept: d.kept,
            state_class: d.state_class,
            errors: d.errors,
        }
    };
    let finished = locked(ctx, |writer, state| {
        let Some(w) = active_worker(state, pool, id).filter(|w| still(w)).cloned() else {
            return Ok(None);
        };
        writer.append(vec![Event::WorkerCleanedUp(done), terminal])?;
        Ok(Some(w))
    })?;
    match finished {
        Some(w) => {
            sweep_publication(&pools_dir, pool, &w);
            Ok(true)
        }
        None => Ok(false),
    }
}

/// How long the coordinator's cleanup of a worker's leftovers may take.
const LEFTOVER_CLEANUP_BUDGET: Duration = Duration::from_secs(60);

/// What the coordinator's cleanup of `w` (its step proven over) would do, if its supervisor
/// did not finish its own: the supervisor's rules (`cleanup_plan`) applied to what the
/// supervisor's journal says. Without a trusted journal the payload may have run and nothing
/// is known to be published, so the checkout stays. `None`: nothing to do (the supervisor
/// cleaned up, or this cleanup already ran), or the worker's tree is not trusted (then it is
/// not touched).
fn plan_leftover_cleanup(
    pools_dir: &Path,
    pool: &str,
    w: &Worker,
) -> Option<(WorkerCleanupIntent, node_policy::CleanupPlan, WorkerDirs)> {
    let dirs = WorkerDirs::new(pools_dir, pool, w.submission_id);
    dirs.check(pools_dir).ok()?;
    let r = if w.journal_damage.is_some() {
        None
    } else {
        report::read(&dirs.evidence).ok().flatten()
    };
    if r.as_ref().is_some_and(|r| r.cleaned.is_some()) {
        return None;
    }
    let leftovers = [&dirs.runtime, &dirs.cache]
        .iter()
        .any(|d| d.symlink_metadata().is_ok());
    if !leftovers && dirs.root.join(cleanup::STATE_CLASS_FILE).exists() {
        return None;
    }
    let payload_started = r.as_ref().is_none_or(|r| r.payload_pid.is_some());
    let published = r
        .as_ref()
        .is_some_and(|r| matches!(r.publication, Some(report::Publication::Published(_))));
    let plan = node_policy::cleanup_plan(payload_started, published);
    let intent = WorkerCleanupIntent {
        submission_id: w.submission_id,
        remove: plan.remove.iter().map(|s| s.to_string()).collect(),
        keep: plan.keep.iter().map(|s| s.to_string()).collect(),
        state_class: node_policy::StateClass::CrashClassPartial
            .as_str()
            .to_owned(),
        reason: "its supervisor did not finish its cleanup (killed, or never started); \
                 finished by the coordinator once its step was proven over"
            .to_owned(),
    };
    Some((intent, plan, dirs))
}
