//! `dispatch reconcile`: replay the journal against Slurm, record what is observed, resolve what
//! can be proven. Costs one job listing, one step listing per pool and at most one accounting
//! query, however many workers there are (plus a by-id look at a job missing from a listing of
//! several, which alone proves nothing). A failed query, or an empty answer, changes nothing.

use serde::Serialize;

use super::context::{micros_to_local, snapshot_quietly, Ctx};
use super::error::OpError;
use super::pool::{
    active_worker, ingest_worker_journal, locked, process_alive, reconcile_creation,
    release_proven, step_name, CreationReconciled,
};
use crate::event::jobs::{JobSubmitFailed, JobSubmitted, JobTerminal};
use crate::event::pool::{PoolAllocationEnded, WorkerLaunchFailed, WorkerStepObserved};
use crate::event::Event;
use crate::event::Micros;
use crate::failpoint;
use crate::policy::reconcile::{self, JobSeen, Lost, PoolObservation, SrunSeen, WorkerObservation};
use crate::slurm::{AcctQuery, Answer, JobId, JobName, JobQuery, Lookup, Scheduler};
use crate::state::jobs::{JobWorker, JobWorkerState};
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
}

#[derive(Debug, Serialize)]
pub struct ListedJob {
    pub submission_id: String,
    pub job_id: u64,
    /// Slurm's state word (`PENDING`, `RUNNING`, …).
    pub state: String,
    /// Slurm's reason (`%r`: `Priority`, `Resources`, `None`, …).
    pub reason: String,
    /// The node list, once it has one.
    pub node: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Resolved {
    /// `None` for a one-job-per-worker submission (`dispatch submit`).
    pub pool: Option<String>,
    pub worker: String,
    pub submission_id: String,
    pub proof: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct Unresolved {
    pub pool: Option<String>,
    pub worker: String,
    pub submission_id: String,
    pub state: &'static str,
    /// What would settle it, when reconcile knows (only a proof missing that an ordinary
    /// later event supplies, or `dispatch forget`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// At most this many jobs missing from a listing of several ids are asked about one by one
/// in one run (each such job is rare: it ended longer than MinJobAge ago).
const MAX_SINGLE_ID_FOLLOW_UPS: usize = 16;

fn job_of(id: u64) -> Option<JobId> {
    u32::try_from(id).ok().and_then(JobId::new)
}

pub async fn reconcile<S: Scheduler>(
    ctx: &Ctx<S>,
    only_pool: Option<&str>,
) -> Result<ReconcileReport, OpError> {
    let calls_before = ctx.sched.call_counts();
    // Decided from a first look, with the lock released while Slurm answers (issue 11); each
    // append takes the lock and checks first that what it is about is still as it was seen.
    let loaded = {
        let (writer, loaded) = ctx.lock_and_load()?;
        drop(writer);
        loaded
    };
    let state = &loaded.state;
    // Idle pools too until their allocation is recorded over, so `pool status` stops counting
    // down a dead one.
    let pools: Vec<_> = state
        .pools
        .pools
        .values()
        .filter(|p| {
            (!p.active.is_empty() || p.ended.is_none()) && only_pool.is_none_or(|n| p.name == n)
        })
        .collect();
    let mut report = ReconcileReport::default();
    reconcile_jobs(ctx, state, &mut report).await?;
    for c in state.pools.creations.values() {
        if only_pool.is_none_or(|n| c.intent.pool == n) {
            report.creations.push(reconcile_creation(ctx, c).await);
        }
    }
    // A creation attached just now is a pool this run does not list: the next one does.
    if pools.is_empty() {
        report.slurm_calls = ctx.sched.call_counts().since(&calls_before).total();
        return Ok(report);
    }
    let jobs: Vec<JobId> = pools
        .iter()
        .filter_map(|p| job_of(p.allocation.job_id))
        .collect();
    let listing = ctx.sched.list_jobs(&JobQuery::ids(jobs.clone())).await;
    let since = pools
        .iter()
        .map(|p| p.allocation.start_time)
        .min()
        .expect("pools is not empty");
    let mut accounting = None;
    let mut follow_ups = 0;
    for pool in pools {
        let Some(job) = job_of(pool.allocation.job_id) else {
            continue;
        };
        // A job missing from a listing of several ids is not proof (past MinJobAge squeue
        // simply omits it, and so does a controller that answers nothing): ask about it alone,
        // where "Invalid job id" is an answer.
        let alone;
        let mut listed = listing.job(job);
        if matches!(listed, Lookup::NotListed)
            && jobs.len() > 1
            && follow_ups < MAX_SINGLE_ID_FOLLOW_UPS
        {
            follow_ups += 1;
            alone = ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
            listed = alone.job(job);
        }
        let over = matches!(listed, Lookup::Gone(_))
            || listed.live().is_some_and(|r| r.state.is_terminal());
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
        let mut obs = reconcile::observe_pool(job, &listed, steps.as_ref());
        let now = ctx.now();
        let here = crate::event::current_host();
        let own: Vec<_> = pool
            .active
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
                            SrunSeen::Exited(format!(
                                "(pid {}) is no longer running on {here}",
                                s.pid
                            ))
                        }
                    }
                    _ => SrunSeen::NotKnown,
                };
                WorkerObservation {
                    step_from_supervisor: r
                        .and_then(|r| r.started.as_ref())
                        .and_then(|s| s.step_id),
                    payload_exited: r.is_some_and(|r| r.exited.is_some()),
                    supervisor_started,
                    srun,
                    since_launch: std::time::Duration::from_micros(
                        u64::try_from(now.0 - w.submitted_at.0).unwrap_or(0),
                    ),
                    others_steps: pool
                        .active
                        .values()
                        .filter(|x| x.submission_id != w.submission_id)
                        .chain(pool.finished.iter())
                        .filter_map(|x| x.step_id)
                        .collect(),
                }
            })
            .collect();
        let judge = |obs: &PoolObservation| -> Vec<_> {
            pool.active
                .values()
                .zip(&own)
                .map(|(w, o)| {
                    (
                        w,
                        reconcile::verdict(w, &step_name(&pool.name, &w.name), obs, o),
                    )
                })
                .collect()
        };
        let mut verdicts = judge(&obs);
        // Accounting only when the cheap listings left something unproven; one query serves
        // every pool.
        let unsettled = verdicts
            .iter()
            .any(|(_, v)| v.terminal.is_none() && !v.running);
        if unsettled && obs.allocation_over.is_none() {
            if accounting.is_none() {
                let q = AcctQuery {
                    jobs: jobs.clone(),
                    names: vec![],
                    since: micros_to_local(since),
                };
                accounting = Some(ctx.sched.accounting(&q).await);
            }
            if let Some(Answer::Live(rows)) = &accounting {
                reconcile::add_accounting(&mut obs, job, rows);
                verdicts = judge(&obs);
            }
        }
        if let Some(how) = &obs.allocation_over {
            let ended = PoolAllocationEnded {
                pool: pool.name.clone(),
                job_id: pool.allocation.job_id,
                proof: how.clone(),
            };
            locked(ctx, |writer, now| {
                let same = now
                    .pools
                    .pools
                    .get(&pool.name)
                    .is_some_and(|p| p.allocation == pool.allocation && p.ended.is_none());
                if same {
                    writer.append_one(Event::PoolAllocationEnded(ended))?;
                }
                Ok(())
            })?;
        }
        for (w, v) in verdicts {
            report.observed += 1;
            let id = w.submission_id;
            // What the verdict was about: the worker still holds budget with the step it had
            // when Slurm was asked (a step recorded since may be missing from that listing).
            let unchanged = |now: &State| {
                active_worker(now, &pool.name, id).is_some_and(|x| x.step_id == w.step_id)
            };
            if let Some(step_id) = v.observe_step {
                locked(ctx, |writer, now| {
                    if unchanged(now) {
                        writer.append_one(Event::WorkerStepObserved(WorkerStepObserved {
                            submission_id: id,
                            step_id,
                        }))?;
                    }
                    Ok(())
                })?;
            }
            if let Some(proof) = v.terminal {
                failpoint::hit("reconcile-before-terminal");
                // The step this run may just have recorded counts as the one it saw.
                let seen = |x: &crate::state::pool::Worker| {
                    x.step_id == w.step_id || (x.step_id.is_some() && x.step_id == v.observe_step)
                };
                if release_proven(ctx, &pool.name, id, &proof, seen)? {
                    report.resolved.push(Resolved {
                        pool: Some(pool.name.clone()),
                        worker: w.name.clone(),
                        submission_id: id.to_string(),
                        proof,
                        job_id: None,
                    });
                }
                continue;
            }
            if let Some(proof) = v.never_ran {
                let failed = locked(ctx, |writer, now| {
                    if !unchanged(now) || w.step_id.is_some() {
                        return Ok(false);
                    }
                    writer.append_one(Event::WorkerLaunchFailed(WorkerLaunchFailed {
                        submission_id: id,
                        definite: true,
                        reason: proof.clone(),
                    }))?;
                    Ok(true)
                })?;
                if failed {
                    report.resolved.push(Resolved {
                        pool: Some(pool.name.clone()),
                        worker: w.name.clone(),
                        submission_id: id.to_string(),
                        proof,
                        job_id: None,
                    });
                }
                continue;
            }
            locked(ctx, |writer, now| {
                ingest_worker_journal(writer, now, &pool.name, id, &ctx.pools_dir(), false)
            })?;
            if v.observe_step.is_none() && w.step_id.is_none() {
                report.unknown.push(Unresolved {
                    pool: Some(pool.name.clone()),
                    worker: w.name.clone(),
                    submission_id: id.to_string(),
                    state: w.state.as_str(),
                    why: None,
                });
            }
        }
    }
    snapshot_quietly(&ctx.journal_dir());
    report.slurm_calls = ctx.sched.call_counts().since(&calls_before).total();
    Ok(report)
}

/// The one-job-per-worker submissions: the known ids in one listing, the user's jobs (with
/// those that ended) for submissions whose sbatch gave no answer, and accounting only for what
/// those left unproven: one query by id, one by name.
/// Reconcile the `dispatch submit` workers only (`dispatch jobs --refresh`): the same path as
/// [`reconcile`] takes for them, without asking about any pool.
pub async fn reconcile_jobs_only<S: Scheduler>(ctx: &Ctx<S>) -> Result<ReconcileReport, OpError> {
    let calls_before = ctx.sched.call_counts();
    let loaded = {
        let (writer, loaded) = ctx.lock_and_load()?;
        drop(writer);
        loaded
    };
    let mut report = ReconcileReport::default();
    reconcile_jobs(ctx, &loaded.state, &mut report).await?;
    report.slurm_calls = ctx.sched.call_counts().since(&calls_before).total();
    Ok(report)
}

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
        .filter_map(|j| j.job_id.and_then(job_of).map(|id| (*j, id)))
        .collect();
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

    for (j, id) in &known {
        if let Some(row) = by_id.job(*id).live() {
            report.listed.push(ListedJob {
                submission_id: j.submission_id.to_string(),
                job_id: u64::from(id.get()),
                state: row.state.to_string(),
                reason: row.reason.clone(),
                node: row.node_list.clone(),
            });
        }
    }
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
    let names: Vec<JobName> = unfound
        .iter()
        .filter_map(|j| JobName::new(j.job_name()).ok())
        .collect();
    let acct_by_name = match unfound.iter().map(|j| j.submitted_at).min() {
        Some(since) if !names.is_empty() => {
            let margin = Micros(reconcile::SETTLE_MARGIN.as_micros() as i64);
            Some(
                ctx.sched
                    .accounting(&AcctQuery {
                        jobs: vec![],
                        names,
                        since: micros_to_local(Micros(since.0 - margin.0)),
                    })
                    .await,
            )
        }
        _ => None,
    };

    let now = ctx.now();
    let mut follow_ups = 0;
    for j in active {
        report.observed += 1;
        let resolved = |proof: String, job_id: Option<u64>| Resolved {
            pool: None,
            worker: j.worker.clone(),
            submission_id: j.submission_id.to_string(),
            proof,
            job_id,
        };
        let unresolved = || Unresolved {
            pool: None,
            worker: j.worker.clone(),
            submission_id: j.submission_id.to_string(),
            state: j.state.as_str(),
            why: None,
        };
        if let Some(id) = j.job_id {
            let Some(job) = job_of(id) else { continue };
            let rows = acct_by_id.as_ref().and_then(|a| a.as_ref().live());
            let mut seen = reconcile::job_seen(job, &by_id.job(job), rows.map(Vec::as_slice));
            if seen == JobSeen::Unproven
                && known.len() > 1
                && matches!(by_id.job(job), Lookup::NotListed)
                && follow_ups < MAX_SINGLE_ID_FOLLOW_UPS
            {
                follow_ups += 1;
                let alone = ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
                seen = reconcile::job_seen(job, &alone.job(job), None);
            }
            match seen {
                JobSeen::Over(proof) => {
                    record_job(
                        ctx,
                        j,
                        Event::JobTerminal(JobTerminal {
                            submission_id: j.submission_id,
                            proof: proof.clone(),
                        }),
                    )?;
                    report.resolved.push(resolved(proof, Some(id)));
                }
                JobSeen::Live => {}
                JobSeen::Unproven => {
                    if j.state == JobWorkerState::Unknown {
                        report.unknown.push(unresolved());
                    }
                }
            }
            continue;
        }
        let settle = reconcile::settle_delay(j.named.as_ref().map(|n| n.sbatch_limit_s));
        let watermark = reconcile::watermark(
            reconcile::settled_at(j.submitted_at, settle),
            recorded_job_ids(state),
        );
        match reconcile::find_lost(
            j.job_name(),
            j.submitted_at,
            now,
            settle,
            watermark,
            &mine,
            acct_by_name.as_ref(),
        ) {
            Lost::Found { job, how, over } => {
                let job_id = u64::from(job.get());
                let mut events = vec![Event::JobSubmitted(JobSubmitted {
                    submission_id: j.submission_id,
                    job_id,
                    how: "name".to_owned(),
                })];
                // One commit: the job found, and (when it has ended) its release. Checked as
                // one against the state reconcile saw; a second look would see the first
                // event and take the worker for changed.
                if let Some(over) = &over {
                    events.push(Event::JobTerminal(JobTerminal {
                        submission_id: j.submission_id,
                        proof: over.clone(),
                    }));
                }
                record_job_events(ctx, j, events)?;
                let proof = match over {
                    Some(over) => format!("{how}; {over}"),
                    None => how,
                };
                report.resolved.push(resolved(proof, Some(job_id)));
            }
            Lost::NeverCreated(proof) => {
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
            Lost::Unknown(why) => report.unknown.push(Unresolved {
                why: why.map(|why| {
                    format!(
                        "{why}; it resolves once a job submitted later (any `dispatch submit`) \
                         is listed beside it, or the operator gives it up: `dispatch forget {} \
                         --reason TEXT`",
                        j.worker
                    )
                }),
                ..unresolved()
            }),
        }
    }
    Ok(())
}

/// The `dispatch submit` jobs whose ids are known, with the time of their intent (the
/// watermark's candidates): active ones and the finished ones the state remembers.
pub(crate) fn recorded_job_ids(state: &State) -> impl Iterator<Item = (Micros, u64)> + '_ {
    state
        .jobs
        .active
        .values()
        .chain(state.jobs.finished.iter())
        .filter_map(|j| j.job_id.map(|id| (j.submitted_at, id)))
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
    locked(ctx, |writer, now| {
        let same = now
            .jobs
            .active
            .get(&j.submission_id)
            .is_some_and(|x| x.state == j.state && x.job_id == j.job_id);
        if same {
            writer.append(events)?;
        }
        Ok(())
    })
}
