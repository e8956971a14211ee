//! `dispatch reconcile`: replay the journal against Slurm, record what is observed, resolve what
//! can be proven. Costs one job listing, one step listing per pool and at most one accounting
//! query, however many workers there are. A failed query changes nothing.

use serde::Serialize;

use super::context::{micros_to_local, snapshot_quietly, Ctx};
use super::error::OpError;
use super::pool::{ingest_worker_journal, step_name, sweep_publication};
use crate::event::Event;
use crate::failpoint;
use crate::policy::reconcile::{self, AcctStep, PoolObservation, WorkerObservation};
use crate::slurm::{AcctQuery, Answer, JobId, JobQuery, Scheduler, StepKind};
use crate::state::jobs::{JobSubmitted, JobTerminal, JobWorkerState};
use crate::state::pool::{WorkerStepObserved, WorkerTerminal};
use crate::state::State;
use crate::worker::dirs::WorkerDirs;
use crate::worker::report;

#[derive(Debug, Serialize)]
pub struct ReconcileReport {
    pub observed: u64,
    pub resolved: Vec<Resolved>,
    pub unknown: Vec<Unresolved>,
    pub slurm_calls: u64,
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
}

fn job_of(id: u64) -> Option<JobId> {
    u32::try_from(id).ok().and_then(JobId::new)
}

pub async fn reconcile<S: Scheduler>(
    ctx: &Ctx<S>,
    only_pool: Option<&str>,
) -> Result<ReconcileReport, OpError> {
    let calls_before = ctx.sched.call_counts();
    let (writer, loaded) = ctx.lock_and_load()?;
    let state = &loaded.state;
    let pools: Vec<_> = state
        .pools
        .pools
        .values()
        .filter(|p| !p.active.is_empty() && only_pool.is_none_or(|n| p.name == n))
        .collect();
    let mut report = ReconcileReport {
        observed: 0,
        resolved: Vec::new(),
        unknown: Vec::new(),
        slurm_calls: 0,
    };
    reconcile_jobs(ctx, &writer, state, &mut report).await?;
    if pools.is_empty() {
        drop(writer);
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
    for pool in pools {
        let Some(job) = job_of(pool.allocation.job_id) else {
            continue;
        };
        let mut obs = PoolObservation::default();
        // squeue by id: a successful answer without the job proves it left the queue.
        if let Answer::Gone = listing.job(job) {
            obs.allocation_over = Some(format!("job {job} is no longer in squeue"));
        }
        if obs.allocation_over.is_none() {
            obs.steps = match ctx.sched.list_steps(job).await {
                Answer::Live(rows) => Some(
                    rows.iter()
                        .filter_map(|r| match r.id.step {
                            StepKind::Numbered(n) if r.id.job == job => Some((n, r.name.clone())),
                            _ => None,
                        })
                        .collect(),
                ),
                Answer::Gone => Some(Vec::new()),
                Answer::Unknown(e) => {
                    tracing::warn!(
                        "step listing of job {job} failed ({e}); pool {} is left as it is",
                        pool.name
                    );
                    None
                }
            };
        }
        let own: Vec<_> = pool
            .active
            .values()
            .map(|w| {
                let dirs = WorkerDirs::new(&ctx.pools_dir(), &pool.name, w.submission_id);
                // Evidence only: a tree that is not trusted is not read (status shows why).
                let trusted = dirs.check(&ctx.pools_dir()).is_ok();
                let r = trusted
                    .then(|| report::read(&dirs.evidence).ok().flatten())
                    .flatten();
                WorkerObservation {
                    step_from_supervisor: r
                        .as_ref()
                        .and_then(|r| r.started.as_ref())
                        .and_then(|s| s.step_id),
                    payload_exited: r.as_ref().is_some_and(|r| r.exited.is_some()),
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
                    since: micros_to_local(since),
                };
                accounting = Some(ctx.sched.accounting(&q).await);
            }
            if let Some(Answer::Live(rows)) = &accounting {
                let job_row = rows
                    .iter()
                    .find(|r| r.id_raw.step().is_none() && r.id_raw.job().base() == job);
                if let Some(j) = job_row.filter(|j| j.state.is_terminal()) {
                    obs.allocation_over = Some(format!("accounting shows job {job} {}", j.state));
                }
                obs.accounting = Some(
                    rows.iter()
                        .filter(|r| r.id_raw.job().base() == job)
                        .filter_map(|r| match r.id_raw.step() {
                            Some(StepKind::Numbered(n)) => Some(AcctStep {
                                step: n,
                                name: r.name.clone(),
                                state: r.state.to_string(),
                                terminal: r.state.is_terminal(),
                            }),
                            _ => None,
                        })
                        .collect(),
                );
                verdicts = judge(&obs);
            }
        }
        for (w, v) in verdicts {
            report.observed += 1;
            if let Some(step_id) = v.observe_step {
                writer.append_one(Event::WorkerStepObserved(WorkerStepObserved {
                    submission_id: w.submission_id,
                    step_id,
                }))?;
            }
            match v.terminal {
                Some(proof) => {
                    ingest_worker_journal(
                        &writer,
                        state,
                        &pool.name,
                        w.submission_id,
                        &ctx.pools_dir(),
                        true,
                    )?;
                    failpoint::hit("reconcile-before-terminal");
                    writer.append_one(Event::WorkerTerminal(WorkerTerminal {
                        submission_id: w.submission_id,
                        proof: proof.clone(),
                    }))?;
                    sweep_publication(&ctx.pools_dir(), &pool.name, w);
                    report.resolved.push(Resolved {
                        pool: Some(pool.name.clone()),
                        worker: w.name.clone(),
                        submission_id: w.submission_id.to_string(),
                        proof,
                        job_id: None,
                    });
                }
                None => {
                    ingest_worker_journal(
                        &writer,
                        state,
                        &pool.name,
                        w.submission_id,
                        &ctx.pools_dir(),
                        false,
                    )?;
                    if v.observe_step.is_none() && w.step_id.is_none() {
                        report.unknown.push(Unresolved {
                            pool: Some(pool.name.clone()),
                            worker: w.name.clone(),
                            submission_id: w.submission_id.to_string(),
                            state: w.state.as_str(),
                        });
                    }
                }
            }
        }
    }
    drop(writer);
    snapshot_quietly(&ctx.journal_dir());
    report.slurm_calls = ctx.sched.call_counts().since(&calls_before).total();
    Ok(report)
}

/// The one-job-per-worker submissions: at most two listings (the known ids, and the user's
/// jobs for submissions whose sbatch gave no answer), however many there are.
async fn reconcile_jobs<S: Scheduler>(
    ctx: &Ctx<S>,
    writer: &crate::journal::Writer,
    state: &State,
    report: &mut ReconcileReport,
) -> Result<(), OpError> {
    let active: Vec<_> = state.jobs.active.values().collect();
    if active.is_empty() {
        return Ok(());
    }
    let known: Vec<JobId> = active
        .iter()
        .filter_map(|j| j.job_id.and_then(job_of))
        .collect();
    let by_id = if known.is_empty() {
        None
    } else {
        Some(ctx.sched.list_jobs(&JobQuery::ids(known)).await)
    };
    let lost = active.iter().any(|j| j.job_id.is_none());
    let mine = if lost {
        Some(ctx.sched.list_jobs(&JobQuery::mine()).await)
    } else {
        None
    };
    for j in active {
        report.observed += 1;
        let resolved = |proof: String, job_id: Option<u64>| Resolved {
            pool: None,
            worker: j.worker.clone(),
            submission_id: j.submission_id.to_string(),
            proof,
            job_id,
        };
        match (j.job_id, &by_id, &mine) {
            (Some(id), Some(listing), _) => {
                let Some(job) = job_of(id) else { continue };
                let proof = match listing.job(job) {
                    Answer::Gone => Some(format!("job {job} is no longer known to squeue")),
                    Answer::Live(row) if row.state.is_terminal() => {
                        Some(format!("squeue shows job {job} {}", row.state))
                    }
                    _ => None,
                };
                if let Some(proof) = proof {
                    writer.append_one(Event::JobTerminal(JobTerminal {
                        submission_id: j.submission_id,
                        proof: proof.clone(),
                    }))?;
                    report.resolved.push(resolved(proof, Some(id)));
                }
            }
            (None, _, Some(Answer::Live(rows))) => {
                // Newest first: the job this submission made, if it made one.
                let found = rows
                    .iter()
                    .filter(|r| r.name == j.worker)
                    .filter_map(|r| r.plain_id())
                    .max_by_key(|id| id.get());
                match found {
                    Some(job) => {
                        writer.append_one(Event::JobSubmitted(JobSubmitted {
                            submission_id: j.submission_id,
                            job_id: u64::from(job.get()),
                            how: "name".to_owned(),
                        }))?;
                        report.resolved.push(resolved(
                            format!("found job {job} by its name {:?}", j.worker),
                            Some(u64::from(job.get())),
                        ));
                    }
                    None => report.unknown.push(Unresolved {
                        pool: None,
                        worker: j.worker.clone(),
                        submission_id: j.submission_id.to_string(),
                        state: j.state.as_str(),
                    }),
                }
            }
            _ => {
                if j.state == JobWorkerState::Unknown || j.job_id.is_none() {
                    report.unknown.push(Unresolved {
                        pool: None,
                        worker: j.worker.clone(),
                        submission_id: j.submission_id.to_string(),
                        state: j.state.as_str(),
                    });
                }
            }
        }
    }
    Ok(())
}
