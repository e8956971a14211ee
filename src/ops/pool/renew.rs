//! Renewal of a created pool (`pool create --renew`), done by `reconcile` only: nothing waits
//! in a long-lived process, and every step is idempotent and crash-safe.
//!
//! When the pool's allocation nears its end or is proven over (`policy::renewal::due`):
//! `PoolRenewalIntent` (a job name unique to the generation, the creation's shape) → an salloc
//! (`--no-shell`, without `--immediate`, `--dependency=afterany:<job>` unless `--renew-overlap`
//! or the job is proven over) started in its own session with its stderr in a file
//! (`slurm::held_salloc`, without `--hold`): the call returns once salloc names its job, and
//! salloc waits on for the grant → `PoolRenewalJob`. The intent is decided under the writer's
//! lock and checked again there: never two successors in flight. A later `reconcile`, once
//! the successor runs, the last allocation is proven over and its workers released with proof
//! (`policy::renewal::may_adopt`): every check `pool attach` makes → `PoolRenewed` (the pool's
//! allocation, dispatch's own, its generation one more), before that run's continuations.
//! A successor whose salloc gave no answer is found by its name (`policy::reconcile::find_lost`)
//! or proven never made after salloc's limit plus the settle margin; one Slurm refuses in
//! words waiting does not change stops the renewal (`PoolRenewalStopped`), with the reason.
//! Any other definite failure (never made, over before it was the pool's) is asked again by
//! the next run, but only `policy::renewal::FAILED_RENEWALS_STOP` times in a row: then the
//! renewal stops too, naming the last failure.

use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use super::create::{
    alloc_request, creation_job_name, creation_prefix, job_over, look_by_name, watermark_now,
    CreateRequest,
};
use super::{journal_id, locked, read_facts};
use crate::event::host::current_host;
use crate::event::pool::*;
use crate::event::Event;
use crate::failpoint;
use crate::ops::context::{append_if, await_proof, await_proof_soon, Ctx, STOP_PROOF_TIMEOUT};
use crate::ops::error::OpError;
use crate::policy::holder::Holder;
use crate::policy::pool::check_allocation;
use crate::policy::pool_create::{never_runs, seen_by_id, CreationSeen};
use crate::policy::reconcile::{self as reconcile_policy, Lost};
use crate::policy::renewal::{self as policy, Due};
use crate::slurm::{ActionError, JobId, JobName, JobQuery, MemoryMb, Scheduler, SlurmDuration};
use crate::state::pool::{Pool, Renewal, Successor};
use crate::state::State;

/// What `reconcile` did about one renewing pool.
#[derive(Debug, Serialize)]
pub struct RenewalReconciled {
    pub pool: String,
    /// The allocation this is about (the next one's number when one is asked for).
    pub generation: u32,
    pub outcome: RenewalOutcome,
    pub job_id: Option<JobId>,
    pub detail: String,
    /// The next allocation as this run's listing showed it (`pool status --refresh` shows
    /// it); absent when it was not listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SuccessorListed>,
}

/// Slurm's state word and reason (`%r`) for a renewal's next allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SuccessorListed {
    pub state: String,
    pub reason: String,
}

/// Where a pool's renewal stands after `reconcile` looked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RenewalOutcome {
    /// The next allocation is not due yet.
    NotDue,
    /// The next allocation was asked for now.
    Asked,
    /// It is asked for and does not run yet, or the last one is not over yet.
    Waiting,
    /// This run ended the last allocation early, its workers all over (with proof); the next
    /// one starts once Slurm has ended it.
    EndedEarly,
    /// It is the pool's allocation now.
    Renewed,
    /// It ended, or was never made, without becoming the pool's: another may be asked.
    Failed,
    /// Renewal is over for good (a bound, or a refusal).
    Stopped,
    Unknown,
}

crate::display_as_serde!(RenewalOutcome);

/// Every renewing pool (or `only_pool`) as it is now: its successor settled, adopted, or
/// asked for when due. Never an error for one pool's Slurm trouble: it stays as it is.
/// `preempted`: the allocations this run saw in Slurm's preemption grace.
pub(crate) async fn renew_due<S: Scheduler>(
    ctx: &Ctx<S>,
    only_pool: Option<&str>,
    preempted: &[JobId],
) -> Result<Vec<RenewalReconciled>, OpError> {
    let state = ctx.load()?.state;
    let in_grace = |p: &Pool| preempted.contains(&p.allocation.job_id);
    let mut out = Vec::new();
    for p in state.pools.pools.values() {
        let Some(r) = &p.renewal else { continue };
        if r.stopped.is_some() || only_pool.is_some_and(|n| n != p.name) {
            continue;
        }
        let line = match &r.successor {
            Some(s) => match settle_successor(ctx, p, s, in_grace(p)).await? {
                l if l.outcome == RenewalOutcome::EndedEarly => after_early_end(ctx, l).await?,
                l => l,
            },
            None => match policy::due(p, ctx.now()) {
                None => continue,
                Some(Due::Later(at)) => line(p, r.generation + 1, RenewalOutcome::NotDue, None)
                    .detail(format!("asked for from {}", at.to_rfc3339())),
                Some(Due::Stop(reason)) => stop(ctx, p, reason)?,
                Some(Due::Ask { generation, after }) => {
                    ask(ctx, &state, p, r, (generation, after)).await?
                }
            },
        };
        out.push(line);
    }
    Ok(out)
}

fn line(
    p: &Pool,
    generation: u32,
    outcome: RenewalOutcome,
    job: Option<JobId>,
) -> RenewalReconciled {
    RenewalReconciled {
        pool: p.name.clone(),
        generation,
        outcome,
        job_id: job,
        detail: String::new(),
        slurm: None,
    }
}

impl RenewalReconciled {
    fn detail(mut self, detail: String) -> RenewalReconciled {
        self.detail = detail;
        self
    }

    fn listed(mut self, state: &str, reason: &str) -> RenewalReconciled {
        self.slurm = Some(SuccessorListed {
            state: state.to_owned(),
            reason: reason.to_owned(),
        });
        self
    }
}

/// `PoolRenewalStopped` for `p` (once), and its line.
fn stop<S: Scheduler>(
    ctx: &Ctx<S>,
    p: &Pool,
    reason: String,
) -> Result<RenewalReconciled, OpError> {
    let stopped = Event::PoolRenewalStopped(PoolRenewalStopped {
        pool: p.name.clone(),
        reason: reason.clone(),
    });
    let renewing = |s: &State| {
        s.pools
            .pools
            .get(&p.name)
            .and_then(|x| x.renewal.as_ref())
            .is_some_and(|r| r.stopped.is_none())
    };
    append_if(ctx, renewing, vec![stopped])?;
    let generation = p.renewal.as_ref().map_or(1, |r| r.generation);
    Ok(line(p, generation, RenewalOutcome::Stopped, None).detail(reason))
}

/// The salloc of the next allocation: the creation's request again, under the generation's
/// own name, without `--immediate` (it waits in the queue), after `after` if given.
fn successor_request(
    r: &Renewal,
    name: JobName,
    holder: &Holder,
    after: Option<JobId>,
) -> Result<crate::slurm::AllocRequest, OpError> {
    let c = &r.request;
    let shape = r.shape.as_ref();
    let req = CreateRequest {
        pool: c.pool.clone(),
        job_name_prefix: String::new(),
        cpus: c.cpus,
        mem: MemoryMb::new(c.mem_mb),
        time: SlurmDuration::from_secs(c.time_s),
        partition: c.partition.clone(),
        account: c.account.clone(),
        qos: c.qos.clone(),
        nodelist: c.nodelist.clone(),
        nodes: shape.map_or(1, |s| s.nodes),
        gpus_per_node: shape.map_or(0, |s| s.gpus_per_node),
        wait: Duration::from_secs(1),
        renew: None,
    };
    let mut alloc = alloc_request(&req, name, holder)?;
    alloc.immediate_secs = None;
    if let Some(job) = after {
        alloc.extra.push(format!("--dependency=afterany:{job}"));
    }
    Ok(alloc)
}

/// Ask for allocation `generation` of `p`: the intent (checked under the lock: still the same
/// allocation, no successor, not released), the salloc, its job.
async fn ask<S: Scheduler>(
    ctx: &Ctx<S>,
    state: &State,
    p: &Pool,
    r: &Renewal,
    (generation, after): (u32, Option<JobId>),
) -> Result<RenewalReconciled, OpError> {
    let renewal_id = Uuid::new_v4();
    let prefix = creation_prefix(&r.request).unwrap_or_default();
    let name = JobName::new(creation_job_name(&prefix, &p.name, renewal_id))
        .map_err(|e| OpError::Failed(e.to_string()))?;
    let holder = Holder::new(journal_id(state), &current_host(), &p.name);
    let alloc = successor_request(r, name.clone(), &holder, after)?;
    // The driver's timeout is the salloc's time to name its job; it then waits on.
    let limit = ctx.sched.longest_call();
    let intent = PoolRenewalIntent {
        pool: p.name.clone(),
        renewal_id,
        generation,
        job_name: name.as_str().to_owned(),
        salloc_limit_s: u32::try_from(limit.as_secs_f64().ceil() as u64).unwrap_or(u32::MAX),
        previous_job_id: p.allocation.job_id,
        after,
    };
    // Decided again under the lock as it was decided: no successor in flight, not released,
    // and the same dependency (the allocation's end not recorded meanwhile).
    let unchanged = |s: &State| {
        s.pools.pools.get(&p.name).is_some_and(|x| {
            x.allocation == p.allocation
                && policy::due(x, ctx.now()) == Some(Due::Ask { generation, after })
        })
    };
    if !append_if(
        ctx,
        unchanged,
        vec![Event::PoolRenewalIntent(intent.clone())],
    )? {
        return Ok(line(p, generation, RenewalOutcome::Waiting, None)
            .detail("another command changed the pool meanwhile; nothing was asked".to_owned()));
    }
    failpoint::hit("pool-renew-after-intent");
    let log = salloc_log(ctx, &intent)?;
    let answer = ctx.sched.allocate_held(&alloc, &log).await;
    failpoint::hit("pool-renew-after-salloc");
    record_answer(ctx, p, &intent, answer)
}

/// What the renewal's salloc answered, recorded: its job, a refusal (renewal stops), or an
/// unclear answer (the job, if named, is followed; else it is looked for by name).
fn record_answer<S: Scheduler>(
    ctx: &Ctx<S>,
    p: &Pool,
    intent: &PoolRenewalIntent,
    answer: Result<crate::slurm::HeldAllocation, ActionError>,
) -> Result<RenewalReconciled, OpError> {
    let (generation, after) = (intent.generation, intent.after);
    let asked = line(p, generation, RenewalOutcome::Asked, None);
    match answer {
        Ok(held) => {
            record_job(ctx, intent, held.job_id, "salloc")?;
            failpoint::hit("pool-renew-after-job");
            let how = after
                .map(|j| format!(", to start after job {j} ends"))
                .unwrap_or_default();
            Ok(RenewalReconciled {
                job_id: Some(held.job_id),
                ..asked
            }
            .detail(format!("allocation {} asked for{how}", held.job_id)))
        }
        Err(e) if e.nothing_happened() => {
            let reason = format!("Slurm refused the next allocation: {e}");
            renewal_failed(ctx, intent, true, reason.clone())?;
            stop(ctx, p, reason)
        }
        Err(ActionError::Unknown { error, job_hint }) => {
            let why = format!("salloc gave no clear answer: {error}");
            renewal_failed(ctx, intent, false, why.clone())?;
            if let Some(job) = job_hint {
                record_job(ctx, intent, job, "hint")?;
            }
            Ok(RenewalReconciled {
                outcome: RenewalOutcome::Unknown,
                job_id: job_hint,
                ..asked
            }
            .detail(why))
        }
        Err(e) => {
            renewal_failed(ctx, intent, false, e.to_string())?;
            Ok(RenewalReconciled {
                outcome: RenewalOutcome::Unknown,
                ..asked
            }
            .detail(e.to_string()))
        }
    }
}

/// Where the salloc of renewal `intent` writes its stderr (it outlives this process).
fn salloc_log<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &PoolRenewalIntent,
) -> Result<std::path::PathBuf, OpError> {
    let pools = ctx.pools_dir();
    let dir = pools.join(".renewals");
    let base = pools.parent().unwrap_or(&pools);
    crate::statedir::trust::create_below(base, &dir)
        .map_err(|e| OpError::Failed(format!("renewal log directory: {e}")))?;
    Ok(dir.join(format!("{}.log", intent.job_name)))
}

/// The successor of `p` in flight, as `s`, still in the journal now.
fn successor_now<'s>(state: &'s State, intent: &PoolRenewalIntent) -> Option<&'s Successor> {
    state
        .pools
        .pools
        .get(&intent.pool)?
        .renewal
        .as_ref()?
        .successor
        .as_ref()
        .filter(|s| s.intent.renewal_id == intent.renewal_id)
}

fn record_job<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &PoolRenewalIntent,
    job: JobId,
    how: &str,
) -> Result<(), OpError> {
    let recorded = Event::PoolRenewalJob(PoolRenewalJob {
        pool: intent.pool.clone(),
        renewal_id: intent.renewal_id,
        job_id: job,
        how: how.to_owned(),
    });
    let unrecorded = |s: &State| successor_now(s, intent).is_some_and(|x| x.job_id.is_none());
    append_if(ctx, unrecorded, vec![recorded]).map(drop)
}

/// `PoolRenewalFailed` for `intent` if it is still in flight.
pub(super) fn renewal_failed<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &PoolRenewalIntent,
    definite: bool,
    reason: String,
) -> Result<(), OpError> {
    let failed = Event::PoolRenewalFailed(PoolRenewalFailed {
        pool: intent.pool.clone(),
        renewal_id: intent.renewal_id,
        definite,
        reason,
    });
    append_if(ctx, |s| successor_now(s, intent).is_some(), vec![failed]).map(drop)
}

/// The job of successor `s`: the one recorded, else looked for once by its name (found, proven
/// never made after salloc's limit plus the settle margin, or not known yet).
pub(super) async fn successor_job<S: Scheduler>(
    ctx: &Ctx<S>,
    s: &Successor,
) -> Result<Result<JobId, (RenewalOutcome, String)>, OpError> {
    if let Some(job) = s.job_id {
        return Ok(Ok(job));
    }
    let intent = &s.intent;
    let settle = reconcile_policy::settle_delay(Some(intent.salloc_limit_s));
    let settled_at = reconcile_policy::settled_at(s.since, settle);
    let now = ctx.now();
    let watermark = watermark_now(ctx, settled_at)?;
    let (mine, sacct) = look_by_name(ctx, &intent.job_name, s.since, now >= settled_at).await;
    let found = reconcile_policy::find_lost(
        &intent.job_name,
        s.since,
        now,
        settle,
        watermark,
        &mine,
        sacct.as_ref(),
    );
    match found {
        Lost::Found { job, over, .. } => {
            record_job(ctx, intent, job, "name")?;
            match over {
                Some(over) => {
                    renewal_failed(ctx, intent, true, over.clone())?;
                    Ok(Err((RenewalOutcome::Failed, over)))
                }
                None => Ok(Ok(job)),
            }
        }
        Lost::NeverCreated(proof) => {
            renewal_failed(ctx, intent, true, proof.clone())?;
            Ok(Err((RenewalOutcome::Failed, proof)))
        }
        Lost::Unknown(why) => Ok(Err((
            RenewalOutcome::Unknown,
            format!(
                "the allocation asked as {:?} is not found yet{}",
                intent.job_name,
                why.map(|w| format!(" ({w})")).unwrap_or_default()
            ),
        ))),
    }
}

/// Successor `s` of `p`: found, then over (recorded), waiting, never to run (cancelled, and
/// renewal stopped), or running and adopted once `p` may take it.
async fn settle_successor<S: Scheduler>(
    ctx: &Ctx<S>,
    p: &Pool,
    s: &Successor,
    preempted: bool,
) -> Result<RenewalReconciled, OpError> {
    let generation = s.intent.generation;
    let job = match successor_job(ctx, s).await? {
        Ok(job) => job,
        Err((outcome, detail)) => return Ok(line(p, generation, outcome, None).detail(detail)),
    };
    let at = |outcome| line(p, generation, outcome, Some(job));
    let listed = ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
    match seen_by_id(job, &listed.job(job), None) {
        CreationSeen::Over(proof) => {
            let reason = format!("allocation {job} ended before it was the pool's: {proof}");
            renewal_failed(ctx, &s.intent, true, reason.clone())?;
            Ok(at(RenewalOutcome::Failed).detail(reason))
        }
        CreationSeen::Unknown => {
            Ok(at(RenewalOutcome::Unknown).detail(format!("squeue: {listed:?}")))
        }
        CreationSeen::Waiting { state, reason } => {
            match never_runs(&crate::slurm::JobState::parse(&state), &reason) {
                Some(change) => {
                    never_to_run(ctx, p, s, job, format!("PENDING ({reason}): {change}")).await
                }
                None => Ok(end_early(ctx, p, job, preempted).await?.unwrap_or_else(|| {
                    at(RenewalOutcome::Waiting)
                        .detail(format!("allocation {job} is {state} ({reason})"))
                        .listed(&state, &reason)
                })),
            }
        }
        CreationSeen::Running => match policy::may_adopt(p) {
            Err(why) => Ok(end_early(ctx, p, job, preempted).await?.unwrap_or_else(|| {
                at(RenewalOutcome::Waiting)
                    .detail(format!("allocation {job} runs; {why}"))
                    .listed("RUNNING", "None")
            })),
            Ok((cause, proof)) => adopt(ctx, p, s, job, (cause.as_str(), proof)).await,
        },
    }
}

/// How long the run that ended an allocation early waits for Slurm to start the next one (it
/// depends on the last one's end, and starts at the controller's next scheduling pass), so
/// that the same run renews the pool and continues its workers.
pub const SUCCESSOR_START_WAIT: Duration = Duration::from_secs(30);

/// After an early end (`ended`): the next allocation waited for until it runs (at most
/// [`SUCCESSOR_START_WAIT`]), then settled again from the journal as it is now: adopted, or
/// `ended` as it was.
async fn after_early_end<S: Scheduler>(
    ctx: &Ctx<S>,
    ended: RenewalReconciled,
) -> Result<RenewalReconciled, OpError> {
    let Some(job) = ended.job_id else {
        return Ok(ended);
    };
    let started = await_proof_soon(SUCCESSOR_START_WAIT, || async {
        let listed = ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
        let seen = seen_by_id(job, &listed.job(job), None);
        matches!(seen, CreationSeen::Running | CreationSeen::Over(_)).then(String::new)
    })
    .await;
    let state = ctx.load()?.state;
    let pool = state.pools.pools.get(&ended.pool);
    let Some((p, s)) = pool
        .and_then(|p| Some((p, p.renewal.as_ref()?.successor.as_ref()?)))
        .filter(|_| started.is_some())
    else {
        return Ok(ended);
    };
    // The early end is begun and answered: no decision of it is left to take.
    let next = settle_successor(ctx, p, s, false).await?;
    Ok(match next.outcome {
        RenewalOutcome::Renewed | RenewalOutcome::Failed | RenewalOutcome::Stopped => next,
        _ => ended,
    })
}

/// `p`'s allocation ended early, its successor `next` seen waiting or running (`preempted`:
/// the allocation is in Slurm's preemption grace, and is left to Slurm): once
/// `policy::may_end_early` says so, `PoolAllocationEndIntent` (decided again under the lock;
/// from then on no worker is placed there), `scancel`, its answer, and the end proven and
/// recorded. An end begun whose scancel was not answered accepted (a crash, a refusal, no
/// answer) is asked again. `None`: nothing to end.
async fn end_early<S: Scheduler>(
    ctx: &Ctx<S>,
    p: &Pool,
    next: JobId,
    preempted: bool,
) -> Result<Option<RenewalReconciled>, OpError> {
    let job = p.allocation.job_id;
    let begun = p
        .renewal
        .as_ref()
        .and_then(|r| r.ending.as_ref())
        .filter(|x| x.job_id == job && p.ended.is_none());
    let look = policy::LastLook {
        successor_live: Some(next),
        preempted,
    };
    let reason = match (begun, policy::may_end_early(p, look)) {
        (Some(x), _) if x.answer.as_ref().is_some_and(|(a, _)| a == "accepted") => return Ok(None),
        (Some(x), _) => x.reason.clone(),
        (None, Err(_)) => return Ok(None),
        (None, Ok(decided)) => {
            let intent = Event::PoolAllocationEndIntent(PoolAllocationEndIntent {
                pool: p.name.clone(),
                job_id: job,
                reason: decided.reason.clone(),
            });
            let still = |s: &State| {
                s.pools.pools.get(&p.name).is_some_and(|x| {
                    x.allocation == p.allocation && policy::may_end_early(x, look).is_ok()
                })
            };
            if !append_if(ctx, still, vec![intent])? {
                return Ok(None);
            }
            decided.reason
        }
    };
    failpoint::hit("pool-renew-end-after-intent");
    let (outcome, detail) = super::release::cancel_allocation(ctx, job).await;
    failpoint::hit("pool-renew-end-after-cancel");
    let answered = Event::PoolAllocationEndAnswered(PoolAllocationEndAnswered {
        pool: p.name.clone(),
        job_id: job,
        outcome: outcome.to_owned(),
        detail: detail.clone(),
    });
    let ending = |s: &State| {
        s.pools
            .pools
            .get(&p.name)
            .and_then(|x| x.renewal.as_ref()?.ending.as_ref())
            .is_some_and(|x| x.job_id == job)
    };
    append_if(ctx, ending, vec![answered])?;
    let generation = p.renewal.as_ref().map_or(1, |r| r.generation);
    let at = |o| line(p, generation + 1, o, Some(next));
    if outcome != "accepted" {
        return Ok(Some(at(RenewalOutcome::Unknown).detail(format!(
            "allocation {job} is to end early ({reason}), but scancel gave {outcome}: {detail}"
        ))));
    }
    let Some(proof) = await_proof_soon(STOP_PROOF_TIMEOUT, || job_over(ctx, job)).await else {
        return Ok(Some(at(RenewalOutcome::Waiting).detail(format!(
            "allocation {job} was cancelled early ({reason}); not yet proven over"
        ))));
    };
    crate::ops::reconcile::record_allocation_ended(ctx, p, &proof)?;
    Ok(Some(at(RenewalOutcome::EndedEarly).detail(format!(
        "allocation {job} ended early ({reason}): {proof}; allocation {next} follows"
    ))))
}

/// A successor that can never run (or that the pool may not take): cancelled, proven over,
/// recorded, and the renewal stopped with the reason.
async fn never_to_run<S: Scheduler>(
    ctx: &Ctx<S>,
    p: &Pool,
    s: &Successor,
    job: JobId,
    why: String,
) -> Result<RenewalReconciled, OpError> {
    if let Err(e) = ctx.sched.cancel_job(job).await {
        tracing::warn!("scancel {job}: {e}");
    }
    let Some(proof) = await_proof(STOP_PROOF_TIMEOUT, || job_over(ctx, job)).await else {
        return Ok(
            line(p, s.intent.generation, RenewalOutcome::Unknown, Some(job)).detail(format!(
                "allocation {job}: {why}; cancelled, not yet proven gone"
            )),
        );
    };
    let reason = format!("allocation {job}: {why}; cancelled: {proof}");
    renewal_failed(ctx, &s.intent, true, reason.clone())?;
    stop(ctx, p, reason)
}

/// The running successor `job` becomes `p`'s allocation, with every check `pool attach`
/// makes, in one commit with its nodes; an allocation the checks refuse is cancelled.
async fn adopt<S: Scheduler>(
    ctx: &Ctx<S>,
    p: &Pool,
    s: &Successor,
    job: JobId,
    (cause, proof): (&str, String),
) -> Result<RenewalReconciled, OpError> {
    let generation = s.intent.generation;
    let facts = match read_facts(ctx, job).await {
        Ok(f) => f,
        Err(OpError::Refused(refusal)) => {
            return never_to_run(ctx, p, s, job, refusal.to_string()).await
        }
        Err(e) => {
            return Ok(line(p, generation, RenewalOutcome::Unknown, Some(job)).detail(e.to_string()))
        }
    };
    let adopted = locked(ctx, |writer, state| {
        let Some(now) = state.pools.pools.get(&p.name) else {
            return Ok(None);
        };
        if now.allocation != p.allocation
            || successor_now(state, &s.intent).is_none()
            || policy::may_adopt(now).is_err()
        {
            return Ok(None);
        }
        match check_allocation(
            &state.pools,
            &facts,
            &ctx.caller,
            ctx.now(),
            crate::policy::pool::MIN_RENEWED_LIFETIME_S,
        ) {
            Ok(allocation) => {
                let mut events = vec![Event::PoolRenewed(PoolRenewed {
                    pool: p.name.clone(),
                    renewal_id: s.intent.renewal_id,
                    generation,
                    allocation: allocation.clone(),
                    previous_job_id: p.allocation.job_id,
                    cause: cause.to_owned(),
                    proof: proof.clone(),
                })];
                events.extend(super::attach::nodes_of(&p.name, &allocation, &facts));
                writer.append(events)?;
                Ok(Some(Ok(allocation)))
            }
            Err(refusal) => Ok(Some(Err(refusal))),
        }
    })?;
    match adopted {
        None => Ok(line(p, generation, RenewalOutcome::Waiting, Some(job))
            .detail("the pool changed meanwhile; the next reconcile looks again".to_owned())),
        Some(Err(refusal)) => never_to_run(ctx, p, s, job, refusal.to_string()).await,
        Some(Ok(a)) => {
            failpoint::hit("pool-renew-after-renewed");
            Ok(
                line(p, generation, RenewalOutcome::Renewed, Some(job)).detail(format!(
                    "allocation {job} on {} is pool {} now (the last ended: {cause}, {proof})",
                    a.node, p.name
                )),
            )
        }
    }
}
