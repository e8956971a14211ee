//! `dispatch submit`: the ordinary path, one `sbatch` job per worker. The worker owns its whole
//! allocation. Intent first; an sbatch without an answer is recorded as "may exist" and keeps
//! its budget until `dispatch reconcile` finds the job by name or proves it over.
//!
//! The job is named `<job_name_prefix><worker>-<8 hex of the submission id>`. The name and
//! sbatch's time limit (`JobNamed`) are in the receipt's commit, beside the intent and the
//! assets bound. The receipt is written under the journal lock; sbatch runs without it. Its
//! outcome is appended under the lock again, unless `reconcile` found the job by name
//! meanwhile (`record_outcome`). The batch script is `exec "$@"`: the worker's command travels
//! as sbatch's script arguments, so no shell ever parses it. `submit_dry_run` makes every
//! check `submit` makes before its receipt, then asks `sbatch --test-only`.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::Serialize;
use uuid::Uuid;

use super::context::{
    append_if, await_proof, grace_seconds, locked, micros_to_local, recorded_release_proof,
    request_grace, stop_grace, Ctx, STOP_PROOF_TIMEOUT, STOP_WRAP_UP,
};
use super::error::OpError;
use super::spec::{Bound, ContinueAsk, Continues, WorkerSpec};
use crate::config::Target;
use crate::event::jobs::*;
use crate::event::pool::WorkerContinued;
use crate::event::Event;
use crate::failpoint;
use crate::next::Next::{self, Reconcile};
use crate::policy::pool::Refusal;
use crate::slurm::{
    ActionError, BatchPayload, BatchRequest, JobId, JobName, Placement, Scheduler, SlurmDuration,
};
use crate::state::jobs::*;
use crate::worker::dirs::WorkerDirs;
use crate::worker::supervisor;

/// The batch script: it runs its arguments, unchanged. sbatch passes them through as argv, so
/// no shell ever parses the worker's command.
const BATCH_SCRIPT: &str =
    "#!/bin/sh\n# dispatch: run the arguments sbatch was given, unchanged.\nexec \"$@\"\n";

#[derive(Clone, Debug)]
pub struct JobSubmitRequest {
    /// `job_name_prefix` from the config: the start of every job name dispatch submits.
    pub job_name_prefix: String,
    pub target_name: Option<String>,
    pub target: Option<Target>,
    pub time: SlurmDuration,
    pub spec: WorkerSpec,
    /// A continuation asked for (`--continue N`).
    pub continuation: Option<ContinueAsk>,
    /// The predecessor this submission continues (by `reconcile`).
    pub continues: Option<Continues>,
}

#[derive(Debug, Serialize)]
pub struct JobSubmitReport {
    pub worker: String,
    pub submission_id: String,
    pub job_id: Option<JobId>,
}

/// The Slurm job name of one submission: `<prefix><worker>-<first 8 hex digits of the
/// submission id>`. Unique to the submission, so reconcile's search by name can only find the
/// job this submission made, and the worker's name can be used again once it is resolved.
pub fn job_name(prefix: &str, worker: &str, submission_id: Uuid) -> String {
    format!(
        "{prefix}{worker}-{}",
        &submission_id.simple().to_string()[..8]
    )
}

pub fn jobs_dir<S: Scheduler>(ctx: &Ctx<S>) -> std::path::PathBuf {
    ctx.state_dir.join("jobs")
}

/// What `submit` and `submit --dry-run` check of a request before anything else, and the
/// identity a submission of it gets.
struct Checked {
    time_s: u64,
    submission_id: Uuid,
    worker: String,
    name: JobName,
}

fn check_request(req: &JobSubmitRequest) -> Result<Checked, OpError> {
    let spec = &req.spec;
    spec.check()?;
    let time_s = req
        .time
        .as_secs()
        .ok_or_else(|| OpError::Usage(format!("--time {} is not a finite duration", req.time)))?;
    let budgets = spec.budgets;
    let need_s = budgets.shutdown_window_s() + i64::from(budgets.min_run_s);
    if (time_s as i64) < need_s {
        return Err(Refusal::TimeLimitTooShort { time_s, need_s }.into());
    }
    let submission_id = Uuid::new_v4();
    let worker = spec.name(submission_id);
    let name = JobName::new(job_name(&req.job_name_prefix, &worker, submission_id))
        .map_err(|e| OpError::Usage(e.to_string()))?;
    Ok(Checked {
        time_s,
        submission_id,
        worker,
        name,
    })
}

/// What `submit` decides from the journal before its receipt, and `submit --dry-run` reports:
/// no other active worker of the name, the assets bound, the job's directories, which must not
/// be another user's or a link (exit 3). Writes nothing.
fn plan<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &JobSubmitRequest,
    state: &crate::state::State,
    checked: &Checked,
) -> Result<(Bound, WorkerDirs), OpError> {
    let worker = &checked.worker;
    if state.jobs.active.values().any(|j| j.worker == *worker) {
        return Err(OpError::Refused(Refusal::DuplicateJobWorker {
            worker: worker.clone(),
        }));
    }
    let bound = req
        .spec
        .bind(state, &ctx.state_dir, checked.submission_id)?;
    let dirs = WorkerDirs::for_job(&jobs_dir(ctx), checked.submission_id);
    dirs.check(&ctx.state_dir)?;
    Ok((bound, dirs))
}

pub async fn submit<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &JobSubmitRequest,
) -> Result<JobSubmitReport, OpError> {
    let checked = check_request(req)?;
    let (submission_id, worker) = (checked.submission_id, &checked.worker);
    // Decide and write the receipt under the lock; sbatch runs without it (it can take its
    // whole timeout), and the outcome is appended under the lock again.
    let (bound, dirs) = locked(ctx, |writer, state| {
        if let Some(c) = &req.continues {
            still_waiting(state, &c.continued, worker)?;
        }
        let (bound, dirs) = plan(ctx, req, state, &checked)?;
        // The durable receipt, with the assets the worker uses in the same commit.
        writer.append(receipt(ctx, req, &bound, &checked))?;
        Ok((bound, dirs))
    })?;
    failpoint::hit("submit-after-intent");
    let failed = |definite, reason| {
        let failed = JobSubmitFailed {
            submission_id,
            definite,
            reason,
        };
        record_outcome(ctx, Event::JobSubmitFailed(failed))
    };
    let script = dirs.root.join("batch.sh");
    if let Err(e) = write_batch_script(ctx, &dirs, &script) {
        failed(true, format!("cannot prepare {}: {e}", dirs.root.display()))?;
        return Err(OpError::Failed(format!(
            "worker {worker}: cannot prepare {}: {e}; nothing was submitted",
            dirs.root.display()
        )));
    }
    let batch = batch_for(ctx, req, &bound, &checked, &dirs, script);
    failpoint::hit("submit-before-sbatch");
    let outcome = ctx.sched.submit_batch(&batch).await;
    failpoint::hit("submit-after-sbatch");
    let job_id = match outcome {
        Ok(s) => s.job_id,
        Err(e) => {
            let definite = e.nothing_happened();
            failed(definite, e.to_string())?;
            return Err(sbatch_failed(&e, definite, &checked));
        }
    };
    record_outcome(
        ctx,
        Event::JobSubmitted(JobSubmitted {
            submission_id,
            job_id,
            how: "sbatch".to_owned(),
        }),
    )?;
    ctx.snapshot_quietly();
    Ok(JobSubmitReport {
        worker: checked.worker,
        submission_id: submission_id.to_string(),
        job_id: Some(job_id),
    })
}

/// Append sbatch's outcome for a submission whose receipt this command wrote, re-checked
/// under the lock: while sbatch ran without it, `reconcile` may have found the job by its
/// name (then the same answer is not written twice). A submission reconcile proved never
/// created while this sbatch still ran (it would have to outlive its timeout and the settle
/// margin) is no longer held: a job sbatch made after all is named, with how to cancel it.
fn record_outcome<S: Scheduler>(ctx: &Ctx<S>, outcome: Event) -> Result<(), OpError> {
    let (submission_id, made) = match &outcome {
        Event::JobSubmitted(e) => (e.submission_id, Some(e.job_id)),
        Event::JobSubmitFailed(e) => (e.submission_id, None),
        other => unreachable!("not a submission outcome: {other:?}"),
    };
    locked(ctx, |writer, state| {
        match state.jobs.active.get(&submission_id) {
            Some(j) => match (j.job_id, made) {
                (None, _) => {
                    writer.append_one(outcome)?;
                    Ok(())
                }
                (Some(found), Some(job)) if found != job => Err(OpError::Failed(format!(
                    "submission {submission_id}: sbatch answered job {job}, but {Reconcile} \
                     found job {found} by its name; cancel the one `squeue --me` does not show \
                     as {}",
                    j.job_name()
                ))),
                // reconcile's answer from the job's name stands: it is at least as new
                _ => Ok(()),
            },
            None => match made {
                Some(job) => Err(OpError::Failed(format!(
                    "sbatch created job {job} after {Reconcile} had proven submission \
                     {submission_id} never created; nothing tracks it: cancel it with \
                     `scancel {job}`"
                ))),
                None => Ok(()),
            },
        }
    })
}

/// The sbatch request of job worker `worker`: its batch script with the supervisor's command
/// line as the script's arguments, so no shell parses it.
fn batch_for<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &JobSubmitRequest,
    bound: &Bound,
    checked: &Checked,
    dirs: &WorkerDirs,
    script: std::path::PathBuf,
) -> BatchRequest {
    let (spec, budgets) = (&req.spec, req.spec.budgets);
    let deadline_after = checked.time_s as i64 - budgets.shutdown_window_s();
    let publish_dir = jobs_dir(ctx).join("published");
    let args = supervisor::command_line(
        &ctx.exe,
        &ctx.state_dir,
        &supervisor::SupervisorArgs {
            submission_id: checked.submission_id,
            worker: &checked.worker,
            pool: None,
            dirs,
            publish_dir: &publish_dir,
            deadline: format!("+{deadline_after}"),
            budgets,
            append_only_glob: spec.append_only_glob.as_deref(),
            assets: &bound.assets,
            resume: req.continues.as_ref().map(|c| &c.resume),
        },
        &spec.command,
    );
    batch_request(
        req,
        checked.name.clone(),
        BatchPayload::Script { path: script, args },
        dirs,
    )
}

/// The durable receipt of job worker `worker`: its intent, the assets bound, and its job name
/// with sbatch's time limit (`JobNamed`), in one commit.
fn receipt<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &JobSubmitRequest,
    bound: &Bound,
    checked: &Checked,
) -> Vec<Event> {
    let spec = &req.spec;
    let submission_id = checked.submission_id;
    let intent = Event::JobSubmitIntent(JobSubmitIntent {
        submission_id,
        worker: checked.worker.clone(),
        target: req.target_name.clone(),
        cpus: spec.cpus,
        mem_mb: spec.mem.get(),
        time_s: checked.time_s,
        publication_timeout_s: spec.budgets.publication_timeout_s,
        command: spec.command.clone(),
    });
    let mut receipt = bound.receipt(intent, submission_id);
    receipt.push(Event::JobNamed(JobNamed {
        submission_id,
        job_name: checked.name.as_str().to_owned(),
        sbatch_limit_s: u32::try_from(ctx.sched.longest_call().as_secs_f64().ceil() as u64)
            .unwrap_or(u32::MAX),
    }));
    let (continues, ask) = (req.continues.as_ref(), req.continuation.as_ref());
    receipt.extend(super::spec::continuation_events(
        continues,
        ask,
        submission_id,
    ));
    if ask.is_some() {
        receipt.push(Event::JobRequest(job_request(req, checked)));
    }
    receipt
}

/// A continuation is made once: another `reconcile` may have made it, or refused it,
/// meanwhile (then the predecessor no longer waits).
pub(crate) fn still_waiting(
    state: &crate::state::State,
    continued: &WorkerContinued,
    worker: &str,
) -> Result<(), OpError> {
    let waiting = state.jobs.continuations.asked.get(&continued.predecessor);
    if waiting.is_none_or(|c| c.ended.is_none()) {
        return Err(OpError::Failed(format!(
            "worker {worker} (submission {}) was continued or refused by another command \
             meanwhile; nothing was submitted",
            continued.predecessor
        )));
    }
    Ok(())
}

/// The request again, for the successor `reconcile` submits.
fn job_request(req: &JobSubmitRequest, checked: &Checked) -> JobRequest {
    let (spec, budgets, target) = (&req.spec, &req.spec.budgets, req.target.as_ref());
    JobRequest {
        submission_id: checked.submission_id,
        job_name_prefix: req.job_name_prefix.clone(),
        target: req.target_name.clone(),
        partition: target.map(|t| t.partition.clone()),
        account: target.map(|t| t.account.clone()),
        qos: target.and_then(|t| t.qos.clone()),
        time_s: checked.time_s,
        command: spec.command.clone(),
        publication_timeout_s: budgets.publication_timeout_s,
        native_state_s: budgets.native_state_s,
        cleanup_s: budgets.cleanup_s,
        grace_s: budgets.grace_s,
        source: spec.source.clone(),
        image: spec.image.clone(),
        append_only_glob: spec.append_only_glob.clone(),
        trial: spec.trial.clone(),
    }
}

/// The worker's directories and its batch script (`exec "$@"`), written and fsynced at
/// `script`, never through a link.
fn write_batch_script<S: Scheduler>(
    ctx: &Ctx<S>,
    dirs: &WorkerDirs,
    script: &Path,
) -> std::io::Result<()> {
    dirs.create(&ctx.state_dir)
        .map_err(std::io::Error::other)
        .and_then(|()| {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(0o700)
                .custom_flags(libc::O_NOFOLLOW)
                .open(script)?;
            f.write_all(BATCH_SCRIPT.as_bytes())?;
            f.sync_all()
        })
}

/// What a failed sbatch means to the user: nothing submitted (`definite`), or an unknown
/// outcome that reconcile settles by the job's name.
fn sbatch_failed(e: &ActionError, definite: bool, checked: &Checked) -> OpError {
    let (worker, submission_id, name) = (&checked.worker, checked.submission_id, &checked.name);
    if definite {
        OpError::Failed(format!(
            "worker {worker}: {e}; nothing was submitted: its budget is released and the \
             name {worker:?} can be used again"
        ))
    } else {
        OpError::Unknown(format!(
            "worker {worker} (submission {submission_id}): sbatch gave no clear answer ({e}); a job named \
             {:?} may exist and keeps its budget. Run {Reconcile} to find it by name",
            name.as_str()
        ))
    }
}

/// The sbatch request of one worker's job: placement from its target, the evidence files.
fn batch_request(
    req: &JobSubmitRequest,
    name: JobName,
    payload: BatchPayload,
    dirs: &WorkerDirs,
) -> BatchRequest {
    let target = req.target.as_ref();
    let mut batch = BatchRequest::new(name, payload);
    batch.placement = Placement {
        partition: target.map(|t| t.partition.clone()),
        account: target.map(|t| t.account.clone()),
        qos: target.and_then(|t| t.qos.clone()),
        time: Some(req.time),
        nodes: Some(1),
        cpus_per_task: Some(req.spec.cpus),
        mem: Some(req.spec.mem),
    };
    batch.output = Some(dirs.evidence.join("stdout"));
    batch.error = Some(dirs.evidence.join("stderr"));
    batch.chdir = Some(dirs.checkout.clone());
    // A job Slurm requeues anyway starts its batch script again with the same files: appended
    // to, the first run's stdout and stderr stay (Slurm truncates them by default).
    batch.extra = vec!["--no-requeue".to_owned(), "--open-mode=append".to_owned()];
    batch
}

/// What `submit` would do (docs/cli.md, `submit --dry-run`).
#[derive(Debug, Serialize)]
pub struct JobSubmitPlan {
    pub dry_run: bool,
    pub worker: String,
    pub job_name: String,
    pub target: Option<String>,
    pub cpus: u32,
    pub mem_mb: u64,
    pub time_s: u64,
    /// What `sbatch --test-only` said: when and where the job would start.
    pub would_start: String,
    pub nodes: String,
    pub partition: String,
}

/// `submit --dry-run`: every check `submit` makes before its receipt, then `sbatch --test-only`
/// with the same placement (the job's script is written only after the receipt, so the test
/// wraps a no-op: a script's contents do not change where a job fits). No lock, nothing
/// journaled or created, no job submitted.
pub async fn submit_dry_run<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &JobSubmitRequest,
) -> Result<JobSubmitPlan, OpError> {
    let spec = &req.spec;
    let checked = check_request(req)?;
    let state = ctx.read_state()?;
    let (_, dirs) = plan(ctx, req, &state, &checked)?;
    let Checked {
        time_s,
        worker,
        name,
        ..
    } = checked;
    let batch = batch_request(req, name.clone(), BatchPayload::Wrap(":".to_owned()), &dirs);
    let tested = ctx.sched.test_batch(&batch).await.map_err(|e| {
        OpError::Failed(format!(
            "worker {worker}: `sbatch --test-only` says the job would not go: {e}; nothing was submitted"
        ))
    })?;
    Ok(JobSubmitPlan {
        dry_run: true,
        worker,
        job_name: name.as_str().to_owned(),
        target: req.target_name.clone(),
        cpus: spec.cpus,
        mem_mb: spec.mem.get(),
        time_s,
        would_start: tested.start,
        nodes: tested.nodes,
        partition: tested.partition,
    })
}

#[derive(Debug, Serialize)]
pub struct JobStopReport {
    pub worker: String,
    pub submission_id: String,
    pub job_id: JobId,
    #[serde(serialize_with = "crate::state::word")]
    pub state: JobWorkerState,
    pub proof: Option<String>,
    /// The worker was released before this stop: nothing was signalled, and `proof` is the
    /// proof recorded then.
    pub already_released: bool,
}

/// Is job `job` over? Proof only (`policy::reconcile::job_seen`): a terminal state, or "Invalid
/// job id" for it; accounting is asked only when squeue answered without the job, which alone
/// proves nothing (a lying or misconfigured controller answers exit 0 with nothing too).
async fn job_proven_over<S: Scheduler>(
    ctx: &Ctx<S>,
    job: crate::slurm::JobId,
    since: chrono::NaiveDateTime,
) -> Option<String> {
    use crate::policy::reconcile::{job_seen, JobSeen};
    use crate::slurm::{AcctQuery, JobQuery, Lookup};
    let listing = ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
    let listed = listing.job(job);
    let accounting = match listed {
        Lookup::NotListed => {
            let q = AcctQuery {
                jobs: vec![job],
                names: vec![],
                since,
            };
            ctx.sched.accounting(&q).await.live()
        }
        _ => None,
    };
    match job_seen(job, &listed, accounting.as_deref()) {
        JobSeen::Over(proof) => Some(proof),
        JobSeen::Live | JobSeen::Unproven => None,
    }
}

/// The newest worker of this name, if it was released: its submission and job.
fn released_before(jobs: &Jobs, worker: &str) -> Option<(Uuid, JobId)> {
    let j = jobs.last_finished(worker)?;
    // Released without a job (its sbatch proven to have made none): nothing was stopped,
    // `not_active` says what it was.
    let job_id = j.job_id?;
    (j.state == JobWorkerState::Released).then_some((j.submission_id, job_id))
}

/// Why `stop` has nothing to stop: what the journal last knew of a worker of that name.
fn not_active(jobs: &Jobs, worker: &str) -> OpError {
    match jobs.last_finished(worker) {
        Some(j) if j.state == JobWorkerState::Failed => OpError::Failed(format!(
            "worker {worker} failed at submission and never ran: {}. No job exists and no \
             budget is held; the name {worker:?} can be used again",
            j.failure
                .as_deref()
                .unwrap_or("the submission failed definitely")
        )),
        Some(j) => OpError::Failed(format!(
            "worker {worker} is already over ({}); nothing to stop",
            j.state.as_str()
        )),
        None => OpError::NotFound(format!(
            "no worker {worker:?} started by dispatch submit holds budget; {} shows what the \
             journal knows of that name (a pool's worker is stopped with {})",
            Next::Inspect(&worker),
            Next::PoolStopWorker(Some(&worker))
        )),
    }
}

/// TERM to job `job`'s batch step, its grace, then `scancel J`: the proof that it is over
/// (accounting from `since` on), if one came in time; else what is known of the cancel.
async fn end_job<S: Scheduler>(
    ctx: &Ctx<S>,
    job: crate::slurm::JobId,
    grace_s: u32,
    since: chrono::NaiveDateTime,
) -> Result<String, String> {
    use crate::slurm::{Signal, StepId, StepKind};
    let grace = std::time::Duration::from_secs(u64::from(grace_s));
    if let Err(e) = ctx
        .sched
        .signal_step(StepId::new(job, StepKind::Batch), Signal::Term)
        .await
    {
        tracing::warn!("scancel --signal=TERM {job}.batch: {e}");
    }
    if let Some(proof) =
        await_proof(grace + STOP_WRAP_UP, || job_proven_over(ctx, job, since)).await
    {
        return Ok(proof);
    }
    let cancel = match ctx.sched.cancel_job(job).await {
        Ok(_) => "was cancelled (scancel answered)".to_owned(),
        Err(e) => {
            tracing::warn!("scancel {job}: {e}");
            format!("was asked to cancel, but the cancel's outcome is unknown ({e})")
        }
    };
    failpoint::hit("stop-after-cancel");
    await_proof(STOP_PROOF_TIMEOUT, || job_proven_over(ctx, job, since))
        .await
        .ok_or(cancel)
}

/// `dispatch stop WORKER`: the worker owns its allocation, so stopping it ends its job: SIGTERM
/// to the batch step (the supervisor passes it on), the grace, then `scancel J`. Its budget
/// returns once the job is proven over.
pub async fn stop<S: Scheduler>(
    ctx: &Ctx<S>,
    worker: &str,
    asked: Option<std::time::Duration>,
) -> Result<JobStopReport, OpError> {
    // Decide under the lock and record the intent; the grace and the proof polls happen with
    // the lock released, and the release re-checks the worker (issue 11).
    let decided = locked(ctx, |writer, state| {
        let jobs = &state.jobs;
        let Some(j) = jobs.active.values().find(|j| j.worker == worker) else {
            // Stopping what is already stopped is success, as `scancel` of an ended job is.
            return released_before(jobs, worker)
                .map(Err)
                .ok_or_else(|| not_active(jobs, worker));
        };
        let Some(job_id) = j.job_id else {
            return Err(OpError::Unknown(format!(
                "worker {worker} has no known job yet (its sbatch gave no answer); its budget stays held. \
                 Run {Reconcile} to find the job by name, then stop it again"
            )));
        };
        let dirs = WorkerDirs::of(&ctx.state_dir, None, j.submission_id);
        let grace_s = grace_seconds(stop_grace(&ctx.state_dir, &dirs, asked));
        writer.append_one(Event::JobStopIntent(JobStopIntent {
            submission_id: j.submission_id,
            grace_s,
        }))?;
        Ok(Ok((j.submission_id, job_id, j.submitted_at, grace_s)))
    })?;
    let (submission_id, job, submitted_at, grace_s) = match decided {
        Ok(stop) => stop,
        Err((id, job_id)) => {
            return Ok(JobStopReport {
                worker: worker.to_owned(),
                submission_id: id.to_string(),
                job_id,
                state: JobWorkerState::Released,
                // Read with the lock released: a replay of the journal.
                proof: recorded_release_proof(&ctx.journal_dir(), id),
                already_released: true,
            });
        }
    };
    failpoint::hit("stop-after-intent");
    let dirs = WorkerDirs::of(&ctx.state_dir, None, submission_id);
    request_grace(&ctx.state_dir, &dirs, grace_s);
    let proof = match end_job(ctx, job, grace_s, micros_to_local(submitted_at)).await {
        Ok(proof) => proof,
        Err(cancel) => {
            return Err(OpError::Unknown(format!(
                "job {job} of worker {worker} {cancel}, and the job is not proven over; its budget \
                 stays held. Run {Reconcile} to resolve it, or stop it again"
            )))
        }
    };
    // Released by this stop, or by a reconcile that proved the same meanwhile.
    let terminal = Event::JobTerminal(JobTerminal {
        submission_id,
        proof: proof.clone(),
    });
    append_if(
        ctx,
        |s| s.jobs.active.contains_key(&submission_id),
        vec![terminal],
    )?;
    Ok(JobStopReport {
        worker: worker.to_owned(),
        submission_id: submission_id.to_string(),
        job_id: job,
        state: JobWorkerState::Released,
        proof: Some(proof),
        already_released: false,
    })
}
