//! `dispatch reconcile`: replay the journal against Slurm, record what is observed, resolve what
//! can be proven. Costs one job listing, one step listing per pool and at most one accounting
//! query, however many workers there are (plus a by-id look at a job missing from a listing of
//! several, which alone proves nothing). A failed query, or an empty answer, changes nothing.
//!
//! Three phases; the journal lock is released while Slurm answers.
//! - Observe: every Slurm call and file read goes into an observation. A `PoolLook` holds the
//!   pool's `PoolObservation` and a `WorkerSeen` per active worker (its own journal, its srun).
//!   `JobsObservation` covers the workers of `dispatch submit`.
//! - Judge: pure, in `policy::reconcile`. `judge_pool` and `judge_jobs` take the observations
//!   and the time, and give a `PoolJudgement` or a `JobDecision` per worker.
//! - Record: each append under the lock, after checking that its subject is still as seen.
//!
//! `sacct` is asked only when a pool's first judgement `wants_accounting`; that pool is then
//! judged again. The by-id looks are at most `MAX_SINGLE_ID_FOLLOW_UPS` (16) a run. For the
//! workers of `dispatch submit`: one listing of the known job ids, one `squeue --me
//! --states=all` to find by name the jobs of unanswered sbatch calls, and `sacct` (by id, by
//! name) only for what those left unproven. A lost submission may lack only one proof: a job
//! given out after it settled (`JobDecision::wants_watermark`). Then `ops::watermark` makes
//! one (intent, held `sbatch`, its id, `scancel`), once a run, and the jobs are judged again on
//! the state that records it. Beacons a killed run left are cancelled first (`watermark::sweep`).

use std::time::Duration;

use serde::Serialize;

use super::context::{append_if, micros_to_local, Ctx};
use super::error::OpError;
use super::pool::{
    active_worker, locked, process_alive, reconcile_creation, release_proven, srun_refused_launch,
    step_name, worker_journal_news, CreationReconciled,
};
use super::successor::follow_due;
use crate::event::jobs::{JobSubmitFailed, JobSubmitted, JobTerminal};
use crate::event::pool::{
    PoolAllocationEnded, PoolNodeLost, WorkerLaunchFailed, WorkerStepObserved,
};
use crate::event::Event;
use crate::event::Micros;
use crate::failpoint;
use crate::policy::lineage::{InGrace, Scope};
use crate::policy::reconcile::{
    self, JobDecision, JobSeen, JobsObservation, PoolJudgement, PoolObservation, SrunSeen, Verdict,
    WorkerObservation, WorkerSeen,
};
use crate::slurm::{
    AcctQuery, AcctRow, Answer, JobId, JobName, JobQuery, JobRow, Lookup, Scheduler,
};
use crate::slurm::{StepKind, StepRow};
use crate::state::jobs::JobWorker;
use crate::state::pool::{Pool, Worker};
use crate::state::State;
use crate::worker::dirs::WorkerDirs;
use crate::worker::report;

#[derive(Debug, Default, Serialize)]
pub struct ReconcileReport {
    pub observed: u64,
    pub resolved: Vec<Resolved>,
    pub unknown: Vec<Unresolved>,
    pub slurm_calls: u64,
    /// What this run's job listing showed of each `dispatch submit` worker's job that it
    /// listed (its Slurm state and reason now): an observation, not a recorded fact.
    pub listed: Vec<ListedJob>,
    /// `pool create`s in flight that this run looked at (their job found by name, attached,
    /// or proven over).
    pub creations: Vec<CreationReconciled>,
    /// The watermark job this run made because a lost `dispatch submit` needed one, if it
    /// tried (`ops::watermark`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watermark: Option<WatermarkNote>,
    /// Workers a node failure ended, submitted again (`--resubmit-on-node-failure`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resubmitted: Vec<crate::ops::pool::Resubmission>,
    /// Workers proven over that asked to be continued (`--continue N`): continued, refused,
    /// or waiting (for room, or for their pool).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub continued: Vec<crate::ops::continuation::Continuation>,
    /// `dispatch submit` jobs Slurm requeued, seen with a larger `Restarts=` than recorded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requeued: Vec<Requeued>,
    /// Pools whose allocation Slurm preempted and whose grace runs (`pool status --refresh`
    /// shows "preempted, ends at …"): an observation, not a recorded fact.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preempted: Vec<PoolPreempted>,
    /// Pools created with `--renew`: their next allocation asked for, adopted, or waited for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub renewals: Vec<crate::ops::pool::RenewalReconciled>,
}

/// A pool's allocation in a preemption's grace.
#[derive(Clone, Debug, Serialize)]
pub struct PoolPreempted {
    pub pool: String,
    pub job_id: JobId,
    #[serde(flatten)]
    pub preempted: Preempted,
}

/// A watermark job made (its id) or tried (why there is none).
#[derive(Debug, Serialize)]
pub struct WatermarkNote {
    pub job_id: Option<JobId>,
    pub detail: String,
}

/// Another run of a `dispatch submit` worker's job, seen by this run (`JobRequeued`).
#[derive(Debug, Serialize)]
pub struct Requeued {
    pub worker: String,
    pub submission_id: String,
    pub job_id: JobId,
    /// `Restarts=`: the run seen is the `restarts + 1`th of the job id.
    pub restarts: u32,
    pub proof: String,
}

#[derive(Debug, Serialize)]
pub struct ListedJob {
    pub submission_id: String,
    pub job_id: JobId,
    /// Slurm's state word (`PENDING`, `RUNNING`, …).
    pub state: String,
    /// Slurm's reason (`%r`: `Priority`, `Resources`, `None`, …).
    pub reason: String,
    /// The node list, once it has one.
    pub node: Option<String>,
    /// Slurm preempted it and its grace runs: when, and when it is killed (`scontrol show
    /// job`'s `PreemptTime` and `EndTime`); null otherwise.
    pub preempted: Option<Preempted>,
}

pub use crate::slurm::Preempted;

/// At most this many jobs listed with their end pulled forward are asked about (`scontrol show
/// job`) in one run: each is in a preemption's grace, which lasts minutes.
const MAX_PREEMPTION_LOOKS: usize = 16;

/// Whether the job `row` lists is in a preemption's grace: asked only when the listing hints
/// at it (its end pulled forward), and said only when `scontrol show job` shows `PreemptTime`.
pub async fn preemption_of<S: Scheduler>(
    ctx: &Ctx<S>,
    row: &JobRow,
    looks: &mut usize,
) -> Option<Preempted> {
    if !row.end_pulled_forward() || *looks >= MAX_PREEMPTION_LOOKS {
        return None;
    }
    *looks += 1;
    grace_of(ctx, row.job_id).await
}

/// Whether job `job` is in a preemption's grace, as `scontrol show job` shows it (one call):
/// for a job whose listing hinted at it (`JobRow::end_pulled_forward`).
pub async fn grace_of<S: Scheduler>(ctx: &Ctx<S>, job: JobId) -> Option<Preempted> {
    let Answer::Live(details) = ctx.sched.show_job(job).await else {
        return None;
    };
    details.iter().find(|d| d.job_id == job)?.preemption()
}

#[derive(Debug, Serialize)]
pub struct Resolved {
    /// `None` for a one-job-per-worker submission (`dispatch submit`).
    pub pool: Option<String>,
    pub worker: String,
    pub submission_id: String,
    pub proof: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<JobId>,
}

/// An unresolved submission's state: a pool worker's or a `dispatch submit` job's, shown by
/// its word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnresolvedState {
    Pool(crate::state::pool::WorkerState),
    Job(crate::state::jobs::JobWorkerState),
}

impl crate::state::Word for UnresolvedState {
    fn as_str(self) -> &'static str {
        match self {
            UnresolvedState::Pool(s) => s.as_str(),
            UnresolvedState::Job(s) => s.as_str(),
        }
    }
}

impl std::fmt::Display for UnresolvedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(crate::state::Word::as_str(*self))
    }
}

#[derive(Debug, Serialize)]
pub struct Unresolved {
    pub pool: Option<String>,
    pub worker: String,
    pub submission_id: String,
    #[serde(serialize_with = "crate::state::word")]
    pub state: UnresolvedState,
    /// What would settle it, when reconcile knows (only a proof missing that an ordinary
    /// later event supplies, or `dispatch forget`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// At most this many jobs missing from a listing of several ids are asked about one by one
/// in one run (each such job is rare: it ended longer than MinJobAge ago).
const MAX_SINGLE_ID_FOLLOW_UPS: usize = 16;

pub async fn reconcile<S: Scheduler>(
    ctx: &Ctx<S>,
    only_pool: Option<&str>,
) -> Result<ReconcileReport, OpError> {
    let calls_before = ctx.sched.call_counts();
    let loaded = first_look(ctx)?;
    let state = &loaded.state;
    // Idle pools too until their allocation is recorded over, so `pool status` stops counting
    // down a dead one.
    let pools: Vec<&Pool> = state
        .pools
        .pools
        .values()
        .filter(|p| {
            (!p.active.is_empty() || p.ended.is_none()) && only_pool.is_none_or(|n| p.name == n)
        })
        .collect();
    let mut report = ReconcileReport::default();
    super::watermark::sweep(ctx, state, ctx.now()).await?;
    reconcile_jobs(ctx, state, &mut report).await?;
    // Only a job worker that asked can be continued here; pool workers after their pools.
    if !state.jobs.continuations.asked.is_empty() {
        report.continued = follow_due(ctx, Scope::Jobs, &[]).await?.continued;
    }
    for c in state.pools.creations.values() {
        if only_pool.is_none_or(|n| c.intent.pool == n) {
            report.creations.push(reconcile_creation(ctx, c).await);
        }
    }
    // A creation attached just now is a pool this run does not list: the next one does.
    if !pools.is_empty() {
        reconcile_pools(ctx, &pools, &mut report).await?;
        ctx.snapshot_quietly();
    }
    // After the pools' proofs (a renewal waits for the last allocation's workers released),
    // before the continuations (which go to the allocation a renewal made the pool's).
    if state.pools.pools.values().any(|p| p.renewal.is_some()) {
        let preempted: Vec<JobId> = report.preempted.iter().map(|x| x.job_id).collect();
        report.renewals = crate::ops::pool::renew_due(ctx, only_pool, &preempted).await?;
    }
    // After the pools' proofs and renewals (a continuation goes to the allocation a renewal made
    // the pool's); a continuation waiting for a pool that is gone is still listed. Only a
    // worker that asked for either can become due: otherwise no second look at the journal on
    // reconcile's path.
    let resubmittable = !pools.is_empty() && !state.pools.requests.is_empty();
    if !state.jobs.continuations.asked.is_empty() || resubmittable {
        let in_grace: Vec<InGrace<'_>> = (report.preempted.iter())
            .map(|p| InGrace {
                pool: &p.pool,
                job_id: p.job_id,
                until: p.preempted.until(),
            })
            .collect();
        let followed = follow_due(ctx, Scope::Pools(only_pool), &in_grace).await?;
        report.continued.extend(followed.continued);
        report.resubmitted = followed.resubmitted;
    }
    report.slurm_calls = ctx.sched.call_counts().since(&calls_before).total();
    Ok(report)
}

/// The state as a first look sees it. Decided from it with the lock released while Slurm
/// answers (issue 11); each append takes the lock and checks first that what it is about is
/// still as it was seen.
fn first_look<S: Scheduler>(ctx: &Ctx<S>) -> Result<crate::journal::Loaded<State>, OpError> {
    Ok(ctx.lock_and_load()?.1)
}

/// Every pool in turn: observe (its allocation and steps in Slurm, its workers' own journals),
/// judge (`policy::reconcile::judge_pool`; accounting asked only when that left something
/// unproven, then judged again), record.
async fn reconcile_pools<S: Scheduler>(
    ctx: &Ctx<S>,
    pools: &[&Pool],
    report: &mut ReconcileReport,
) -> Result<(), OpError> {
    let jobs: Vec<JobId> = pools.iter().map(|p| p.allocation.job_id).collect();
    let mut shared = PoolsLook {
        listing: ctx.sched.list_jobs(&JobQuery::ids(jobs.clone())).await,
        jobs,
        since: pools
            .iter()
            .map(|p| p.allocation.start_time)
            .min()
            .expect("pools is not empty"),
        accounting: None,
        follow_ups: 0,
        preemption_looks: 0,
    };
    for pool in pools {
        let job = pool.allocation.job_id;
        let mut look = observe_pool(ctx, pool, job, &mut shared).await;
        if let Some(preempted) = look.preempted.take() {
            report.preempted.push(PoolPreempted {
                pool: pool.name.clone(),
                job_id: job,
                preempted,
            });
        }
        // An end squeue forgot names no state: accounting's names the cause.
        if reconcile::end_unnamed(&look.slurm) {
            if let Some(rows) = shared.accounting(ctx).await {
                reconcile::name_the_end(&mut look.slurm, job, rows);
            }
        }
        let mut judgement = reconcile::judge_pool(pool, &look.slurm, &look.workers, look.at);
        if judgement.wants_accounting() {
            if let Some(rows) = shared.accounting(ctx).await {
                reconcile::add_accounting(&mut look.slurm, job, rows);
                judgement = reconcile::judge_pool(pool, &look.slurm, &look.workers, look.at);
            }
        }
        record_pool(ctx, pool, &look.workers, &judgement, report)?;
    }
    Ok(())
}

/// What every pool's look shares: one job listing of all their allocations, and at most one
/// accounting query, asked for the first pool that needs it.
struct PoolsLook {
    jobs: Vec<JobId>,
    listing: Answer<Vec<JobRow>>,
    /// The earliest allocation's start: accounting is asked from then on.
    since: Micros,
    accounting: Option<Answer<Vec<AcctRow>>>,
    /// Jobs missing from the listing asked about one by one so far.
    follow_ups: usize,
    /// Allocations asked about for their preemption so far (`preemption_of`).
    preemption_looks: usize,
}

impl PoolsLook {
    /// Accounting's rows, asked once for every pool; `None` when it did not answer.
    async fn accounting<S: Scheduler>(&mut self, ctx: &Ctx<S>) -> Option<&[AcctRow]> {
        if self.accounting.is_none() {
            let q = AcctQuery {
                jobs: self.jobs.clone(),
                names: vec![],
                since: micros_to_local(self.since),
            };
            self.accounting = Some(ctx.sched.accounting(&q).await);
        }
        match &self.accounting {
            Some(Answer::Live(rows)) => Some(rows),
            _ => None,
        }
    }
}

/// What one pool's look saw: Slurm's answers about its allocation, each active worker's own
/// evidence, and when.
struct PoolLook<'a> {
    slurm: PoolObservation,
    workers: Vec<WorkerSeen<'a>>,
    at: Micros,
    /// The allocation is in a preemption's grace.
    preempted: Option<Preempted>,
}

/// Ask Slurm about pool `pool`'s allocation `job` and its steps, and read its active workers'
/// journals. Changes nothing.
async fn observe_pool<'a, S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &'a Pool,
    job: JobId,
    shared: &mut PoolsLook,
) -> PoolLook<'a> {
    // A job missing from a listing of several ids is not proof (past MinJobAge squeue simply
    // omits it, and so does a controller that answers nothing): ask about it alone, where
    // "Invalid job id" is an answer.
    let alone;
    let mut listed = shared.listing.job(job);
    if matches!(listed, Lookup::NotListed)
        && shared.jobs.len() > 1
        && shared.follow_ups < MAX_SINGLE_ID_FOLLOW_UPS
    {
        shared.follow_ups += 1;
        alone = ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
        listed = alone.job(job);
    }
    let over =
        matches!(listed, Lookup::Gone(_)) || listed.live().is_some_and(|r| r.state.is_terminal());
    let steps = if over {
        None
    } else {
        let steps = ctx.sched.list_steps(job).await;
        if let Answer::Unknown(e) = &steps {
            tracing::warn!(
                "step listing of job {job} failed ({e}); pool {} is left as it is",
                pool.name
            );
        }
        Some(steps)
    };
    // Slurm drops a failed node from a `--no-kill` job and that node's steps in one move, but
    // the job listing above was taken before the step listing: a seen step absent now may have
    // gone with its node after the job was listed. Asked again, the job tells of the same
    // moment as the steps, and the proof names the lost node.
    let again;
    if matches!(listed, Lookup::Listed(_)) && lost_a_seen_step(pool, job, steps.as_ref()) {
        again = ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
        if let fresh @ Lookup::Listed(_) = again.job(job) {
            listed = fresh;
        }
    }
    let preempted = match listed.live() {
        Some(row) => preemption_of(ctx, row, &mut shared.preemption_looks).await,
        None => None,
    };
    let slurm = reconcile::observe_pool(job, &listed, steps.as_ref());
    let at = ctx.now();
    PoolLook {
        slurm,
        workers: observe_workers(ctx, pool),
        at,
        preempted,
    }
}

/// Whether a step listing of a pool spread over nodes lacks a step one of its workers was seen
/// running as.
fn lost_a_seen_step(pool: &Pool, job: JobId, steps: Option<&Answer<Vec<StepRow>>>) -> bool {
    let (Some(Answer::Live(rows)), Some(_)) = (steps, &pool.spread) else {
        return false;
    };
    let listed = |step: u32| {
        rows.iter()
            .any(|r| r.id.job == job && r.id.step == StepKind::Numbered(step))
    };
    pool.active
        .values()
        .any(|w| w.step_id.is_some_and(|step| !listed(step)))
}

/// Each active worker of `pool`, in order, with what its own journal says and whether its
/// srun still runs (on this host).
fn observe_workers<'a, S: Scheduler>(ctx: &Ctx<S>, pool: &'a Pool) -> Vec<WorkerSeen<'a>> {
    let here = crate::event::current_host();
    pool.active
        .values()
        .map(|w| {
            let dirs = WorkerDirs::new(&ctx.pools_dir(), &pool.name, w.submission_id);
            // Evidence only: a tree that is not trusted is not read (status shows why).
            let trusted = dirs.check(&ctx.pools_dir()).is_ok();
            let read = trusted.then(|| report::read(&dirs.evidence));
            let r = read
                .as_ref()
                .and_then(|r| r.as_ref().ok())
                .and_then(|r| r.as_ref());
            let supervisor_started = match &read {
                Some(Ok(None)) => Some(false),
                Some(Ok(Some(r))) => Some(r.started.is_some()),
                _ => None,
            };
            // The srun's pid means something only on the host that started it.
            let srun = match &w.srun {
                Some(s) if s.host == here => {
                    if process_alive(s.pid) {
                        SrunSeen::Running
                    } else {
                        SrunSeen::Exited(format!("(pid {}) is no longer running on {here}", s.pid))
                    }
                }
                _ => SrunSeen::NotKnown,
            };
            WorkerSeen {
                worker: w,
                step_name: step_name(&pool.name, &w.name),
                own: WorkerObservation {
                    step_from_supervisor: r
                        .and_then(|r| r.started.as_ref())
                        .and_then(|s| s.step_id),
                    payload_exited: r.is_some_and(|r| r.exited.is_some()),
                    supervisor_started,
                    srun,
                    since_launch: Duration::ZERO,
                    others_steps: pool
                        .active
                        .values()
                        .filter(|x| x.submission_id != w.submission_id)
                        .chain(pool.finished_in_this_allocation())
                        .filter_map(|x| x.step_id)
                        .collect(),
                    srun_launch_refused: (supervisor_started == Some(false))
                        .then(|| srun_refused_launch(&dirs, pool.allocation.job_id))
                        .flatten(),
                },
            }
        })
        .collect()
}

/// `PoolAllocationEnded` for `pool`'s allocation, proven over by `proof`, unless another
/// command recorded it, or the pool changed allocation, meanwhile.
pub(crate) fn record_allocation_ended<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &Pool,
    proof: &str,
) -> Result<(), OpError> {
    let ended = PoolAllocationEnded {
        pool: pool.name.clone(),
        job_id: pool.allocation.job_id,
        proof: proof.to_owned(),
    };
    let same = |now: &State| {
        now.pools
            .pools
            .get(&pool.name)
            .is_some_and(|p| p.allocation == pool.allocation && p.ended.is_none())
    };
    append_if(ctx, same, vec![Event::PoolAllocationEnded(ended)]).map(drop)
}

/// Append what the judgement of `pool` decided: the allocation's end, then each worker's
/// verdict (`workers`, in the judgement's order).
fn record_pool<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &Pool,
    workers: &[WorkerSeen<'_>],
    judgement: &PoolJudgement,
    report: &mut ReconcileReport,
) -> Result<(), OpError> {
    if let Some(how) = &judgement.allocation_over {
        record_allocation_ended(ctx, pool, how)?;
    }
    if !judgement.nodes_lost.is_empty() {
        locked(ctx, |writer, now| {
            let Some(p) = now
                .pools
                .pools
                .get(&pool.name)
                .filter(|p| p.allocation == pool.allocation)
            else {
                return Ok(());
            };
            // Another reconcile may have recorded a loss meanwhile: each is recorded once.
            let known = |node: &str| p.spread.as_ref().is_some_and(|s| s.lost.contains_key(node));
            let lost: Vec<Event> = judgement
                .nodes_lost
                .iter()
                .filter(|(node, _)| !known(node))
                .map(|(node, proof)| {
                    Event::PoolNodeLost(PoolNodeLost {
                        pool: pool.name.clone(),
                        job_id: pool.allocation.job_id,
                        node: node.clone(),
                        proof: proof.clone(),
                    })
                })
                .collect();
            if !lost.is_empty() {
                writer.append(lost)?;
            }
            Ok(())
        })?;
    }
    for (seen, v) in workers.iter().zip(&judgement.verdicts) {
        report.observed += 1;
        record_worker(ctx, &pool.name, seen.worker, v, report)?;
    }
    Ok(())
}

/// Append what verdict `v` decided about worker `w` of pool `pool`: a step learned, its
/// release with proof, a launch proven never to have run, or what its own journal says.
fn record_worker<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    w: &Worker,
    v: &Verdict,
    report: &mut ReconcileReport,
) -> Result<(), OpError> {
    let id = w.submission_id;
    let resolved = |proof: &str| Resolved {
        pool: Some(pool.to_owned()),
        worker: w.name.clone(),
        submission_id: id.to_string(),
        proof: proof.to_owned(),
        job_id: None,
    };
    // What the verdict was about: the worker still holds budget with the step it had when
    // Slurm was asked (a step recorded since may be missing from that listing).
    let unchanged =
        |now: &State| active_worker(now, pool, id).is_some_and(|x| x.step_id == w.step_id);
    if let Some(step_id) = v.observe_step {
        let seen = WorkerStepObserved {
            submission_id: id,
            step_id,
        };
        append_if(ctx, unchanged, vec![Event::WorkerStepObserved(seen)])?;
    }
    if let Some(proof) = &v.terminal {
        failpoint::hit("reconcile-before-terminal");
        // The step this run may just have recorded counts as the one it saw.
        let seen = |x: &Worker| {
            x.step_id == w.step_id || (x.step_id.is_some() && x.step_id == v.observe_step)
        };
        if release_proven(ctx, pool, id, proof, seen)? {
            report.resolved.push(resolved(proof));
        }
        return Ok(());
    }
    // A step proven never to have run had no step recorded; one Slurm refused to launch may
    // have had (srun announced it).
    let launch_failure = (v.never_ran.as_ref().map(|p| (p, w.step_id.is_none())))
        .or(v.launch_refused.as_ref().map(|p| (p, true)));
    if let Some((proof, stepless_or_refused)) = launch_failure {
        let failed = Event::WorkerLaunchFailed(WorkerLaunchFailed {
            submission_id: id,
            definite: true,
            reason: proof.clone(),
        });
        if append_if(
            ctx,
            |now| unchanged(now) && stepless_or_refused,
            vec![failed],
        )? {
            report.resolved.push(resolved(proof));
        }
        return Ok(());
    }
    locked(ctx, |writer, now| {
        writer.append(worker_journal_news(now, pool, id, &ctx.pools_dir(), false))?;
        Ok(())
    })?;
    if v.observe_step.is_none() && w.step_id.is_none() {
        report.unknown.push(Unresolved {
            pool: Some(pool.to_owned()),
            worker: w.name.clone(),
            submission_id: id.to_string(),
            state: UnresolvedState::Pool(w.state),
            why: None,
        });
    }
    Ok(())
}

/// Reconcile the `dispatch submit` workers only (`dispatch jobs --refresh`): the same path as
/// [`reconcile`] takes for them, without asking about any pool.
pub async fn reconcile_jobs_only<S: Scheduler>(ctx: &Ctx<S>) -> Result<ReconcileReport, OpError> {
    let calls_before = ctx.sched.call_counts();
    let loaded = first_look(ctx)?;
    let mut report = ReconcileReport::default();
    reconcile_jobs(ctx, &loaded.state, &mut report).await?;
    report.slurm_calls = ctx.sched.call_counts().since(&calls_before).total();
    Ok(report)
}

/// The one-job-per-worker submissions: observe (the known ids in one listing, the user's jobs
/// with those that ended for submissions whose sbatch gave no answer, accounting only for what
/// those left unproven: one query by id, one by name; then a job missing from a listing of
/// several, alone), judge (`policy::reconcile::judge_jobs`), record.
async fn reconcile_jobs<S: Scheduler>(
    ctx: &Ctx<S>,
    state: &State,
    report: &mut ReconcileReport,
) -> Result<(), OpError> {
    let active: Vec<&JobWorker> = state.jobs.active.values().collect();
    if active.is_empty() {
        return Ok(());
    }
    let known: Vec<(&JobWorker, JobId)> = active
        .iter()
        .filter_map(|j| j.job_id.map(|id| (*j, id)))
        .collect();
    let mut obs = observe_jobs(ctx, &active, &known).await;
    let mut looks = 0;
    for (j, id) in &known {
        if let Some(row) = obs.by_id.job(*id).live() {
            report.listed.push(ListedJob {
                submission_id: j.submission_id.to_string(),
                job_id: *id,
                state: row.state.to_string(),
                reason: row.reason.clone(),
                node: row.node_list.clone(),
                preempted: preemption_of(ctx, row, &mut looks).await,
            });
        }
    }
    let now = ctx.now();
    if known.len() > 1 {
        follow_up_jobs(ctx, known.iter().map(|(_, id)| *id), &mut obs).await;
    }
    for (_, job) in &known {
        if reconcile::wants_restarts(&obs, *job) {
            obs.details.push((*job, ctx.sched.show_job(*job).await));
        }
    }
    let wanted = reconcile::judge_jobs(state, &obs, now)
        .into_iter()
        .find_map(|(j, d)| d.wants_watermark().then(|| j.job_name_prefix()).flatten());
    if let Some(prefix) = wanted {
        // Only a job given out after the lost submissions settled was missing: make one, list
        // again (that listing shows it), and judge on the state that records it.
        match super::watermark::make(ctx, &prefix).await {
            Ok(job) => {
                obs.mine = ctx
                    .sched
                    .list_jobs(&JobQuery::mine_including_finished())
                    .await;
                report.watermark = Some(WatermarkNote {
                    job_id: Some(job),
                    detail: format!("made held and cancelled at once: job {job}"),
                });
                return record_job_decisions(ctx, &ctx.load()?.state, &obs, ctx.now(), report);
            }
            Err(e) => {
                report.watermark = Some(WatermarkNote {
                    job_id: None,
                    detail: e.to_string(),
                })
            }
        }
    }
    record_job_decisions(ctx, state, &obs, now, report)
}

/// Judge the `dispatch submit` workers of `state` from `obs` and record what was decided.
fn record_job_decisions<S: Scheduler>(
    ctx: &Ctx<S>,
    state: &State,
    obs: &JobsObservation,
    now: Micros,
    report: &mut ReconcileReport,
) -> Result<(), OpError> {
    for (j, decision) in reconcile::judge_jobs(state, obs, now) {
        report.observed += 1;
        let requeued = reconcile::requeued(j, obs);
        if let Some(r) = &requeued {
            report.requeued.push(Requeued {
                worker: j.worker.clone(),
                submission_id: j.submission_id.to_string(),
                job_id: r.job_id,
                restarts: r.restarts,
                proof: r.proof.clone(),
            });
        }
        record_job_decision(ctx, j, decision, requeued.map(Event::JobRequeued), report)?;
    }
    Ok(())
}

/// The listings and accounting queries of [`reconcile_jobs`], before any follow-up.
async fn observe_jobs<S: Scheduler>(
    ctx: &Ctx<S>,
    active: &[&JobWorker],
    known: &[(&JobWorker, JobId)],
) -> JobsObservation {
    let by_id = if known.is_empty() {
        Answer::Live(Vec::new())
    } else {
        let ids = known.iter().map(|(_, id)| *id).collect();
        ctx.sched.list_jobs(&JobQuery::ids(ids)).await
    };
    let lost: Vec<&JobWorker> = active
        .iter()
        .filter(|j| j.job_id.is_none())
        .copied()
        .collect();
    let mine = if lost.is_empty() {
        Answer::Live(Vec::new())
    } else {
        ctx.sched
            .list_jobs(&JobQuery::mine_including_finished())
            .await
    };
    let unlisted: Vec<(&JobWorker, JobId)> = known
        .iter()
        .filter(|(_, id)| matches!(by_id.job(*id), Lookup::NotListed))
        .copied()
        .collect();
    let acct_by_id = match unlisted.iter().map(|(j, _)| j.submitted_at).min() {
        Some(since) => Some(
            ctx.sched
                .accounting(&AcctQuery {
                    jobs: unlisted.iter().map(|(_, id)| *id).collect(),
                    names: vec![],
                    since: micros_to_local(since),
                })
                .await,
        ),
        None => None,
    };
    let unfound: Vec<&JobWorker> = lost
        .iter()
        .filter(|j| {
            mine.as_ref()
                .live()
                .is_none_or(|rows| !rows.iter().any(|r| r.name == j.job_name()))
        })
        .copied()
        .collect();
    JobsObservation {
        by_id,
        mine,
        acct_by_id,
        acct_by_name: accounting_by_name(ctx, &unfound).await,
        alone: Vec::new(),
        details: Vec::new(),
    }
}

/// Accounting by name for the lost submissions the user's job listing did not find, from the
/// oldest one's intent less the settle margin; `None` when there are none.
async fn accounting_by_name<S: Scheduler>(
    ctx: &Ctx<S>,
    unfound: &[&JobWorker],
) -> Option<Answer<Vec<AcctRow>>> {
    let names: Vec<JobName> = unfound
        .iter()
        .filter_map(|j| JobName::new(j.job_name()).ok())
        .collect();
    let since = unfound.iter().map(|j| j.submitted_at).min()?;
    if names.is_empty() {
        return None;
    }
    let margin = Micros(reconcile::SETTLE_MARGIN.as_micros() as i64);
    let query = AcctQuery {
        jobs: vec![],
        names,
        since: micros_to_local(Micros(since.0 - margin.0)),
    };
    Some(ctx.sched.accounting(&query).await)
}

/// Ask alone about each known job the listing of several ids left unproven (not listed, and
/// accounting proves nothing), at most [`MAX_SINGLE_ID_FOLLOW_UPS`].
async fn follow_up_jobs<S: Scheduler>(
    ctx: &Ctx<S>,
    known: impl Iterator<Item = JobId>,
    obs: &mut JobsObservation,
) {
    for job in known {
        if obs.alone.len() >= MAX_SINGLE_ID_FOLLOW_UPS {
            break;
        }
        if obs.first_seen(job) == JobSeen::Unproven
            && matches!(obs.by_id.job(job), Lookup::NotListed)
        {
            let alone = ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
            obs.alone.push((job, alone));
        }
    }
}

/// Append what the judgement of job worker `j` decided, and report it.
fn record_job_decision<S: Scheduler>(
    ctx: &Ctx<S>,
    j: &JobWorker,
    decision: JobDecision,
    requeued: Option<Event>,
    report: &mut ReconcileReport,
) -> Result<(), OpError> {
    let resolved = |proof: String, job: Option<JobId>| Resolved {
        pool: None,
        worker: j.worker.clone(),
        submission_id: j.submission_id.to_string(),
        proof,
        job_id: job,
    };
    let terminal = |proof: &str| {
        Event::JobTerminal(JobTerminal {
            submission_id: j.submission_id,
            proof: proof.to_owned(),
        })
    };
    // Another run of its job, seen now: recorded first, and in the commit of its end.
    let runs = |then: Option<Event>| requeued.clone().into_iter().chain(then).collect();
    match decision {
        JobDecision::Nothing | JobDecision::Unknown(_) if requeued.is_some() => {
            record_job_events(ctx, j, runs(None))?;
        }
        _ => {}
    }
    match decision {
        JobDecision::Nothing => {}
        JobDecision::Over { job, proof } => {
            record_job_events(ctx, j, runs(Some(terminal(&proof))))?;
            report.resolved.push(resolved(proof, Some(job)));
        }
        JobDecision::Found { job, how, over } => {
            let mut events = vec![Event::JobSubmitted(JobSubmitted {
                submission_id: j.submission_id,
                job_id: job,
                how: "name".to_owned(),
            })];
            // One commit: the job found, and (when it has ended) its release. Checked as one
            // against the state reconcile saw; a second look would see the first event and
            // take the worker for changed.
            if let Some(over) = &over {
                events.push(terminal(over));
            }
            record_job_events(ctx, j, events)?;
            let proof = match over {
                Some(over) => format!("{how}; {over}"),
                None => how,
            };
            report.resolved.push(resolved(proof, Some(job)));
        }
        JobDecision::NeverCreated(proof) => {
            record_job(
                ctx,
                j,
                Event::JobSubmitFailed(JobSubmitFailed {
                    submission_id: j.submission_id,
                    definite: true,
                    reason: proof.clone(),
                }),
            )?;
            report.resolved.push(resolved(proof, None));
        }
        JobDecision::Unknown(why) => report.unknown.push(Unresolved {
            pool: None,
            worker: j.worker.clone(),
            submission_id: j.submission_id.to_string(),
            state: UnresolvedState::Job(j.state),
            why,
        }),
    }
    Ok(())
}

/// Append `event` about job worker `j` under the lock, if it is still as reconcile saw it
/// (same state and job id): another command may have settled it while Slurm answered.
fn record_job<S: Scheduler>(ctx: &Ctx<S>, j: &JobWorker, event: Event) -> Result<(), OpError> {
    record_job_events(ctx, j, vec![event])
}

/// [`record_job`] for events that go in one commit.
fn record_job_events<S: Scheduler>(
    ctx: &Ctx<S>,
    j: &JobWorker,
    events: Vec<Event>,
) -> Result<(), OpError> {
    let same = |now: &State| {
        now.jobs
            .active
            .get(&j.submission_id)
            .is_some_and(|x| x.state == j.state && x.job_id == j.job_id)
    };
    append_if(ctx, same, events).map(drop)
}
