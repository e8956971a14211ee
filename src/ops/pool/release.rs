//! `dispatch pool release`: the end of a pool dispatch created. `PoolReleaseIntent` (no worker
//! is submitted from here on) → every worker sent SIGTERM, then each stopped with proof as
//! `stop_worker` stops it (their graces side by side: the one asked, else each its own) →
//! `scancel` of the allocation → proof it is gone → the workers a stop could not settle
//! released with that proof (no step outlives its allocation) → `PoolReleased` (the pool is
//! forgotten). A pool attached to the user's allocation is refused (exit 3: `pool detach`). A
//! creation that never became a pool is cancelled the same way: its job, known or found by
//! name, proven gone.

use std::time::Duration;

use serde::Serialize;

use super::create::{creation_failed, find_job, job_over, Found, Progress};
use super::locked;
use super::renew::{renewal_failed, successor_job, RenewalOutcome};
use super::stop::{begin_stop, finish_stop};
use crate::event::pool::*;
use crate::event::Event;
use crate::failpoint;
use crate::names::check_path_name;
use crate::next::Next;
use crate::ops::context::{await_proof, Ctx, STOP_PROOF_TIMEOUT};
use crate::ops::error::OpError;
use crate::policy::pool_create::{self as policy, ReleasePlan};
use crate::slurm::{JobId, JobName, Scheduler};
use crate::state::pool::*;

#[derive(Debug, Serialize)]
pub struct ReleaseReport {
    pub pool: String,
    /// The allocation cancelled (or found over); none when no job of the creation was ever
    /// known (it made none, or one `scancel --name` cancelled).
    pub job_id: Option<JobId>,
    /// What proved it gone (or never made).
    pub proof: String,
    /// The workers released, each with what proved its step over.
    pub workers: Vec<ReleasedWorker>,
    /// The next allocation a renewal had asked for, ended too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub successor: Option<EndedSuccessor>,
}

#[derive(Debug, Serialize)]
pub struct EndedSuccessor {
    /// None when no job of it was ever known (cancelled by its name).
    pub job_id: Option<JobId>,
    pub proof: String,
}

#[derive(Debug, Serialize)]
pub struct ReleasedWorker {
    pub worker: String,
    pub submission_id: String,
    pub proof: String,
}

pub async fn release<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    grace: Option<Duration>,
    progress: Progress<'_>,
) -> Result<ReleaseReport, OpError> {
    check_path_name("pool", pool).map_err(OpError::Usage)?;
    let state = ctx.lock_and_load()?.1.state;
    match policy::check_release(&state.pools, pool)? {
        ReleasePlan::Creation(c) => release_creation(ctx, c, progress).await,
        ReleasePlan::Pool(p) => release_pool(ctx, p, grace, progress).await,
    }
}

/// A creation that is not a pool yet: cancel its job (found by name if salloc gave no id),
/// prove it gone, and record the creation over.
async fn release_creation<S: Scheduler>(
    ctx: &Ctx<S>,
    c: &Creation,
    progress: Progress<'_>,
) -> Result<ReleaseReport, OpError> {
    let pool = c.intent.pool.clone();
    let job = match find_job(ctx, c, true, progress).await? {
        Found::Job(job) => job,
        Found::Nothing(job_id, proof) => {
            return Ok(ReleaseReport {
                pool,
                job_id,
                proof,
                workers: Vec::new(),
                successor: None,
            })
        }
        // Nothing proves that its salloc made nothing (a lost answer, and listings that
        // cannot tell an empty answer from a lie), so no later create may run; releasing
        // is the way out: cancel whatever carries its name. scancel by name acts on every
        // job of that name, so once it answered, nothing of this creation is left to run.
        Found::Unknown(why) => return release_by_name(ctx, c, &why).await,
    };
    let proof = cancel_and_prove(ctx, &pool, job).await?;
    creation_released(ctx, c, proof, Some(job))
}

/// [`release_creation`] of a creation whose job nobody can name: `scancel --me --name=N`,
/// then the creation recorded over (definite: nothing of that name is left to run).
async fn release_by_name<S: Scheduler>(
    ctx: &Ctx<S>,
    c: &Creation,
    why: &str,
) -> Result<ReleaseReport, OpError> {
    let pool = c.intent.pool.clone();
    let name =
        JobName::new(c.intent.job_name.clone()).map_err(|e| OpError::Failed(e.to_string()))?;
    if let Err(e) = cancel_named(ctx, &name).await {
        return Err(OpError::Unknown(format!(
            "{why}. Cancelling whatever is named {name} failed too ({e}); the creation stays \
             recorded. Run {} again",
            Next::PoolRelease(&pool)
        )));
    }
    failpoint::hit("pool-release-after-cancel");
    let proof = format!(
        "scancel --me --name={name} answered: any allocation of this creation is cancelled \
         (its salloc's outcome was never known)"
    );
    creation_released(ctx, c, proof, None)
}

/// `scancel --me --name=NAME`, accepted by scancel: then nothing of that name is left to run.
/// Otherwise why not (a failed or refused scancel proves nothing).
async fn cancel_named<S: Scheduler>(ctx: &Ctx<S>, name: &JobName) -> Result<(), String> {
    match ctx.sched.cancel_by_name(name).await {
        Ok(r) => r.not_accepted().map_or(Ok(()), Err),
        Err(e) => Err(e.to_string()),
    }
}

/// Record a creation over once `proof` says nothing of it is left to run (unless a newer
/// creation of the pool replaced it meanwhile), and report it.
fn creation_released<S: Scheduler>(
    ctx: &Ctx<S>,
    c: &Creation,
    proof: String,
    job_id: Option<JobId>,
) -> Result<ReleaseReport, OpError> {
    creation_failed(ctx, &c.intent, true, format!("released: {proof}"))?;
    Ok(ReleaseReport {
        pool: c.intent.pool.clone(),
        job_id,
        proof,
        workers: Vec::new(),
        successor: None,
    })
}

/// `scancel J`, then proof that J is over within [`STOP_PROOF_TIMEOUT`].
async fn cancel_and_prove<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    job: JobId,
) -> Result<String, OpError> {
    if let Some(proof) = job_over(ctx, job).await {
        return Ok(proof);
    }
    cancel_allocation(ctx, job).await;
    failpoint::hit("pool-release-after-cancel");
    await_proof(STOP_PROOF_TIMEOUT, || job_over(ctx, job))
        .await
        .ok_or_else(|| {
            OpError::Unknown(format!(
                "allocation {job} of pool {pool} was cancelled but is not yet proven gone; \
                 the pool stays recorded. Run {} again",
                Next::PoolRelease(&pool)
            ))
        })
}

/// `scancel J` of an allocation dispatch made: what scancel answered, as an outcome records it
/// (`accepted`; `refused` in scancel's words; `unknown` when it gave no answer). It proves
/// nothing: the end is proven by a later look.
pub(super) async fn cancel_allocation<S: Scheduler>(
    ctx: &Ctx<S>,
    job: JobId,
) -> (&'static str, String) {
    let answer = match ctx.sched.cancel_job(job).await {
        Ok(r) => match r.not_accepted() {
            None => return ("accepted", String::new()),
            Some(why) => ("refused", why),
        },
        Err(e) if e.nothing_happened() => ("refused", e.to_string()),
        Err(e) => ("unknown", e.to_string()),
    };
    tracing::warn!("scancel {job}: {}", answer.1);
    answer
}

/// Each active worker of `p` stopped as `stop-worker` stops it, while its allocation is not
/// recorded over: what each stop proved. Every worker is sent SIGTERM first, each with its
/// grace (`asked`, else its own), so that their graces run side by side: the release waits
/// for the longest, not for their sum. One that fails is only told to `progress`.
async fn stop_each_worker<S: Scheduler>(
    ctx: &Ctx<S>,
    p: &Pool,
    asked: Option<Duration>,
    progress: Progress<'_>,
) -> Vec<ReleasedWorker> {
    let mut workers = Vec::new();
    if p.ended.is_some() {
        return workers;
    }
    // One that cannot be proven stopped is released below with the allocation's end.
    let not_stopped = |name: &str, e: OpError| {
        progress(&format!(
            "worker {name} is not proven stopped ({e}); it is released once the allocation is \
             proven gone"
        ))
    };
    let mut begun = Vec::new();
    for w in p.active.values() {
        progress(&format!("stopping worker {} of pool {}", w.name, p.name));
        match begin_stop(ctx, &p.name, &w.name, asked).await {
            Ok(b) => begun.push((w, b)),
            Err(e) => not_stopped(&w.name, e),
        }
    }
    for (w, b) in begun {
        match finish_stop(ctx, b).await {
            Ok(r) => workers.push(ReleasedWorker {
                worker: w.name.clone(),
                submission_id: w.submission_id.to_string(),
                proof: r.proof.unwrap_or_default(),
            }),
            Err(e) => not_stopped(&w.name, e),
        }
    }
    workers
}

/// Release, with the end of allocation `job` (`proof`) as proof, every worker of `pool` that
/// still holds budget.
fn release_left<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    job: JobId,
    proof: &str,
) -> Result<Vec<ReleasedWorker>, OpError> {
    let mut workers = Vec::new();
    let state = ctx.lock_and_load()?.1.state;
    for w in state
        .pools
        .pools
        .get(pool)
        .into_iter()
        .flat_map(|x| x.active.values())
    {
        let why = format!("its allocation {job} is over: {proof}");
        if super::release_proven(ctx, pool, w.submission_id, &why, |_| true)? {
            workers.push(ReleasedWorker {
                worker: w.name.clone(),
                submission_id: w.submission_id.to_string(),
                proof: why,
            });
        }
    }
    Ok(workers)
}

async fn release_pool<S: Scheduler>(
    ctx: &Ctx<S>,
    p: &Pool,
    grace: Option<Duration>,
    progress: Progress<'_>,
) -> Result<ReleaseReport, OpError> {
    let pool = p.name.clone();
    let allocation = p.allocation.clone();
    let job = allocation.job_id;
    let same = |state: &crate::state::State| {
        state
            .pools
            .pools
            .get(&pool)
            .is_some_and(|x| x.allocation == allocation && x.created.is_some())
    };
    locked(ctx, |writer, state| {
        if !same(state) {
            return Err(OpError::Failed(format!(
                "pool {pool} changed while this release looked at it; nothing was done. \
                 {} shows it now",
                Next::PoolStatus(Some(&pool))
            )));
        }
        if !state.pools.pools[&pool].releasing {
            writer.append_one(Event::PoolReleaseIntent(PoolReleaseIntent {
                pool: pool.clone(),
                job_id: allocation.job_id,
            }))?;
        }
        Ok(())
    })?;
    failpoint::hit("pool-release-after-intent");
    let mut workers = stop_each_worker(ctx, p, grace, progress).await;
    failpoint::hit("pool-release-after-workers");
    let proof = match &p.ended {
        Some(ended) => ended.proof.clone(),
        None => cancel_and_prove(ctx, &pool, job).await?,
    };
    // What the stops did not settle: no step outlives its allocation.
    workers.extend(release_left(ctx, &pool, job, &proof)?);
    // The next allocation a renewal asked for, pending or running, ends with the pool.
    let successor = end_successor(ctx, &pool).await?;
    failpoint::hit("pool-release-before-record");
    locked(ctx, |writer, state| {
        if !same(state) {
            return Ok(());
        }
        let holding = state.pools.pools[&pool].active.len();
        if holding > 0 {
            return Err(OpError::Unknown(format!(
                "{holding} worker(s) of pool {pool} still hold budget after its allocation {job} \
                 was proven gone; run {} again",
                Next::PoolRelease(&pool)
            )));
        }
        writer.append_one(Event::PoolReleased(PoolReleased {
            pool: pool.clone(),
            job_id: allocation.job_id,
            proof: proof.clone(),
        }))?;
        Ok(())
    })?;
    ctx.snapshot_quietly();
    Ok(ReleaseReport {
        pool,
        job_id: Some(allocation.job_id),
        proof,
        workers,
        successor,
    })
}

/// The successor a renewal of `pool` has in flight (`releasing` is set: no other is asked
/// from here on): its job cancelled and proven gone, or, with no job known, every job of its
/// name cancelled; then recorded over.
async fn end_successor<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
) -> Result<Option<EndedSuccessor>, OpError> {
    let state = ctx.load()?.state;
    let Some(s) = state
        .pools
        .pools
        .get(pool)
        .and_then(|p| p.renewal.as_ref())
        .and_then(|r| r.successor.clone())
    else {
        return Ok(None);
    };
    let job = match successor_job(ctx, &s).await? {
        Ok(job) => Some(job),
        Err((RenewalOutcome::Failed, _)) => return Ok(None),
        Err(_) => None,
    };
    let proof = match job {
        Some(job) => cancel_and_prove(ctx, pool, job).await?,
        None => {
            let name = JobName::new(s.intent.job_name.clone())
                .map_err(|e| OpError::Failed(e.to_string()))?;
            cancel_named(ctx, &name).await.map_err(|e| {
                OpError::Unknown(format!(
                    "the next allocation of pool {pool} ({name}) could not be cancelled by \
                     name ({e}); the pool stays recorded. Run {} again",
                    Next::PoolRelease(&pool)
                ))
            })?;
            format!("scancel --me --name={name} answered: nothing of that name is left to run")
        }
    };
    failpoint::hit("pool-release-after-successor");
    renewal_failed(ctx, &s.intent, true, format!("released: {proof}"))?;
    Ok(Some(EndedSuccessor { job_id: job, proof }))
}
