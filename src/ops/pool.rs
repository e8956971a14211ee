//! `dispatch pool attach|submit|status|stop-worker|detach`.
//!
//! Each command: lock the journal → load state → ask Slurm → decide (policy) → append the intent
//! → act → append the outcome. Budget is only released by a proof event.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use uuid::Uuid;

use super::context::{snapshot_quietly, Ctx};
use super::error::OpError;
use super::facts::allocation_facts;
use crate::event::{Event, Micros};
use crate::failpoint;
use crate::journal::Writer;
use crate::policy::pool::{self as policy, AllocationFacts, Budgets, Refusal, WorkerAsk};
use crate::slurm::{
    Answer, JobId, JobName, MemoryMb, Scheduler, Signal, StepId, StepKind, StepRequest,
};
use crate::state::pool::*;
use crate::state::State;
use crate::worker::dirs::{check_name, WorkerDirs};
use crate::worker::report;
use crate::worker::supervisor;

/// How long `pool submit` looks for the new step before calling the outcome unknown.
pub const STEP_DISCOVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `pool stop-worker` waits, after the final cancel, for proof that the step ended.
pub const STOP_PROOF_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(250);

fn job_id(alloc: &Allocation) -> Result<JobId, OpError> {
    u32::try_from(alloc.job_id)
        .ok()
        .and_then(JobId::new)
        .ok_or_else(|| {
            OpError::Failed(format!(
                "recorded job id {} is not a Slurm job id",
                alloc.job_id
            ))
        })
}

pub fn step_name(pool: &str, worker: &str) -> String {
    format!("{pool}.{worker}")
}

/// Ask Slurm about an allocation. Gone becomes facts that every check refuses.
async fn read_facts<S: Scheduler>(ctx: &Ctx<S>, job: JobId) -> Result<AllocationFacts, OpError> {
    match ctx.sched.show_job(job).await {
        Answer::Live(details) => {
            let d = details
                .iter()
                .find(|d| d.job_id == job && d.array_job_id.is_none())
                .or(details.first())
                .ok_or_else(|| OpError::Failed(format!("scontrol show job {job} answered nothing usable")))?;
            Ok(allocation_facts(d))
        }
        Answer::Gone => Err(OpError::Refused(Refusal::NotRunning {
            job_id: u64::from(job.get()),
            state: "unknown to Slurm (finished and forgotten, or never existed)".to_owned(),
        })),
        Answer::Unknown(e) => Err(OpError::Failed(format!(
            "cannot read job {job} from Slurm ({e}); nothing was done. Try again when `scontrol show job {job}` answers"
        ))),
    }
}

#[derive(Debug, Serialize)]
pub struct AttachReport {
    pub pool: String,
    pub allocation: AllocationView,
}

#[derive(Debug, Serialize)]
pub struct AllocationView {
    pub job_id: u64,
    pub node: String,
    pub user: String,
    pub start_time: String,
    pub end_time: String,
    pub cpus: u32,
    pub mem_mb: u64,
    pub partition: String,
    pub account: String,
    pub qos: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_left: Option<i64>,
}

impl AllocationView {
    fn of(a: &Allocation, now: Option<Micros>) -> AllocationView {
        AllocationView {
            job_id: a.job_id,
            node: a.node.clone(),
            user: a.user.clone(),
            start_time: a.start_time.to_rfc3339(),
            end_time: a.end_time.to_rfc3339(),
            cpus: a.cpus,
            mem_mb: a.mem_mb,
            partition: a.partition.clone(),
            account: a.account.clone(),
            qos: a.qos.clone(),
            seconds_left: now.map(|n| (a.end_time.secs() - n.secs()).max(0)),
        }
    }
}

pub async fn attach<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    job: JobId,
) -> Result<AttachReport, OpError> {
    check_name("pool", pool).map_err(OpError::Usage)?;
    let (writer, loaded) = ctx.lock_and_load()?;
    let facts = read_facts(ctx, job).await?;
    let allocation =
        policy::check_attach(&loaded.state.pools, pool, &facts, &ctx.caller, ctx.now())?;
    writer.append_one(Event::PoolAttached(PoolAttached {
        pool: pool.to_owned(),
        allocation: allocation.clone(),
    }))?;
    Ok(AttachReport {
        pool: pool.to_owned(),
        allocation: AllocationView::of(&allocation, None),
    })
}

#[derive(Debug, Serialize)]
pub struct DetachReport {
    pub pool: String,
    pub job_id: u64,
}

pub fn detach<S: Scheduler>(ctx: &Ctx<S>, pool: &str) -> Result<DetachReport, OpError> {
    let (writer, loaded) = ctx.lock_and_load()?;
    policy::check_detach(&loaded.state.pools, pool)?;
    let job_id = loaded.state.pools.pools[pool].allocation.job_id;
    writer.append_one(Event::PoolDetached(PoolDetached {
        pool: pool.to_owned(),
    }))?;
    Ok(DetachReport {
        pool: pool.to_owned(),
        job_id,
    })
}

/// What `pool submit` was asked to run.
#[derive(Clone, Debug)]
pub struct SubmitRequest {
    pub pool: String,
    pub worker: Option<String>,
    pub cpus: u32,
    pub mem: MemoryMb,
    pub budgets: Budgets,
    pub grace_s: u32,
    pub command: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct SubmitReport {
    pub pool: String,
    pub worker: String,
    pub submission_id: String,
    pub state: &'static str,
    pub step_id: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Check the live allocation; after a refusal by an allocation of the same incarnation, read it
/// again and run every check once more before refusing.
async fn inspect_for_submit<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &Pool,
    ask: &WorkerAsk,
) -> Result<AllocationFacts, OpError> {
    let job = job_id(&pool.allocation)?;
    let facts = read_facts(ctx, job).await?;
    let first = policy::check_submit(pool, &facts, ask, &ctx.caller, ctx.now());
    match first {
        Ok(()) => Ok(facts),
        Err(Refusal::IncarnationChanged { .. }) => Err(first.unwrap_err().into()),
        Err(refusal) if facts.start_time == Some(pool.allocation.start_time) => {
            tracing::info!("live metadata refused ({refusal}); re-inspecting once");
            let again = read_facts(ctx, job).await?;
            policy::check_submit(pool, &again, ask, &ctx.caller, ctx.now())?;
            Ok(again)
        }
        Err(refusal) => Err(refusal.into()),
    }
}

pub async fn submit<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
) -> Result<SubmitReport, OpError> {
    check_name("pool", &req.pool).map_err(OpError::Usage)?;
    if let Some(w) = &req.worker {
        check_name("worker", w).map_err(OpError::Usage)?;
    }
    if req.command.is_empty() {
        return Err(OpError::Usage("no command given after --".to_owned()));
    }
    let submission_id = Uuid::new_v4();
    let worker = req
        .worker
        .clone()
        .unwrap_or_else(|| format!("w-{}", &submission_id.simple().to_string()[..8]));
    let (writer, loaded) = ctx.lock_and_load()?;
    let pool = loaded
        .state
        .pools
        .pools
        .get(&req.pool)
        .ok_or_else(|| Refusal::NoPool {
            pool: req.pool.clone(),
        })?;
    let ask = WorkerAsk {
        name: worker.clone(),
        cpus: req.cpus,
        mem_mb: req.mem.get(),
        budgets: req.budgets,
    };
    inspect_for_submit(ctx, pool, &ask).await?;
    let job = job_id(&pool.allocation)?;
    let name = step_name(&req.pool, &worker);
    let step_name_checked =
        JobName::new(name.clone()).map_err(|e| OpError::Usage(e.to_string()))?;
    let dirs = WorkerDirs::new(&ctx.pools_dir(), &req.pool, submission_id);
    let deadline = policy::early_shutdown_deadline(pool.allocation.end_time, &req.budgets);

    // The durable receipt: from here on the worker holds budget.
    writer.append_one(Event::WorkerSubmitIntent(WorkerSubmitIntent {
        pool: req.pool.clone(),
        worker: worker.clone(),
        submission_id,
        cpus: req.cpus,
        mem_mb: req.mem.get(),
        publication_timeout_s: req.budgets.publication_timeout_s,
        command: req.command.clone(),
    }))?;
    failpoint::hit("pool-submit-after-intent");
    let mut report = SubmitReport {
        pool: req.pool.clone(),
        worker: worker.clone(),
        submission_id: submission_id.to_string(),
        state: WorkerState::Submitted.as_str(),
        step_id: None,
        warnings: Vec::new(),
    };
    if let Err(e) = dirs.create() {
        writer.append_one(Event::WorkerLaunchFailed(WorkerLaunchFailed {
            submission_id,
            definite: true,
            reason: format!(
                "cannot create worker directories under {}: {e}",
                dirs.root.display()
            ),
        }))?;
        return Err(OpError::Failed(format!(
            "worker {worker}: cannot create its directories under {}: {e}; nothing was launched and its budget is released",
            dirs.root.display()
        )));
    }
    let command = supervisor::command_line(
        &ctx.exe,
        submission_id,
        &dirs.evidence,
        &deadline.secs().to_string(),
        req.grace_s,
        &req.command,
    );
    let mut step = StepRequest::new(job, step_name_checked, req.cpus, req.mem, command);
    // Without --overlap Slurm gives each worker CPUs no other worker holds, and the step's
    // cpuset confines it to them; with --overlap, workers were seen sharing CPU 0. The budget
    // check above keeps the steps from waiting on each other. No --cpu-bind: `cores` made
    // Slurm 22.05 fail to lay out a 3-CPU task on a node declaring more CPUs than it has.
    step.overlap = false;
    step.output = Some(dirs.evidence.join("stdout"));
    step.error = Some(dirs.evidence.join("stderr"));
    step.chdir = Some(dirs.checkout.clone());
    step.client_log = Some(dirs.evidence.join("srun-client.log"));
    step.env = vec![
        (
            "DISPATCH_WORKSPACE".to_owned(),
            dirs.checkout.clone().into_os_string(),
        ),
        (
            "DISPATCH_RUNTIME_DIR".to_owned(),
            dirs.runtime.clone().into_os_string(),
        ),
        (
            "DISPATCH_CACHE_DIR".to_owned(),
            dirs.cache.clone().into_os_string(),
        ),
        (
            "DISPATCH_STATE_DIR".to_owned(),
            dirs.state.clone().into_os_string(),
        ),
    ];
    failpoint::hit("pool-submit-before-launch");
    let launched = ctx.sched.launch_step(&step).await;
    let srun_pid = match launched {
        Ok(l) => l.srun_pid,
        Err(e) => {
            let definite = e.nothing_happened();
            writer.append_one(Event::WorkerLaunchFailed(WorkerLaunchFailed {
                submission_id,
                definite,
                reason: e.to_string(),
            }))?;
            return Err(if definite {
                OpError::Failed(format!(
                    "worker {worker}: {e}; nothing was launched and its budget is released"
                ))
            } else {
                OpError::Unknown(format!(
                    "worker {worker} (submission {submission_id}): srun gave no answer ({e}); its budget stays \
                     held. Run `dispatch reconcile` to resolve it"
                ))
            });
        }
    };
    writer.append_one(Event::WorkerLaunched(WorkerLaunched {
        submission_id,
        srun_pid,
    }))?;
    failpoint::hit("pool-submit-after-launch");
    report.state = WorkerState::Running.as_str();

    match discover_step(ctx, job, &name, &dirs, srun_pid).await {
        Discovery::Found(step_no) => {
            writer.append_one(Event::WorkerStepObserved(WorkerStepObserved {
                submission_id,
                step_id: step_no,
            }))?;
            report.step_id = Some(format!("{job}.{step_no}"));
        }
        Discovery::CreationFailed(reason) => {
            writer.append_one(Event::WorkerLaunchFailed(WorkerLaunchFailed {
                submission_id,
                definite: true,
                reason: reason.clone(),
            }))?;
            return Err(OpError::Failed(format!(
                "worker {worker}: Slurm refused to create its step: {reason}; its budget is released"
            )));
        }
        Discovery::NotSeen(why) => {
            // Launched, but not yet proven: this is not a failure (the step may be pending).
            report.warnings.push(format!(
                "step {name} not seen yet ({why}); `dispatch reconcile` or `dispatch pool status --refresh` will find it"
            ));
        }
    }
    drop(writer);
    snapshot_quietly(&ctx.journal_dir());
    Ok(report)
}

enum Discovery {
    Found(u32),
    CreationFailed(String),
    NotSeen(String),
}

/// Is `pid` a running (not zombie) process on this host?
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the last ')' (the command name may contain one).
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Find the step a detached srun created: by name in the step listing, or by the step id the
/// supervisor recorded (for a step that ended between two listings).
async fn discover_step<S: Scheduler>(
    ctx: &Ctx<S>,
    job: JobId,
    name: &str,
    dirs: &WorkerDirs,
    srun_pid: u32,
) -> Discovery {
    let started = Instant::now();
    let mut last_unknown = None;
    // A step usually appears within ~50 ms: look often at first, then back off.
    let mut pause = Duration::from_millis(20);
    loop {
        match ctx.sched.list_steps(job).await {
            Answer::Live(rows) => {
                if let Some(n) = rows.iter().find_map(|r| match (r.name == name, r.id.step) {
                    (true, StepKind::Numbered(n)) => Some(n),
                    _ => None,
                }) {
                    return Discovery::Found(n);
                }
            }
            Answer::Gone => {}
            Answer::Unknown(e) => last_unknown = Some(e.to_string()),
        }
        if let Ok(Some(r)) = report::read(&dirs.evidence) {
            if let Some(step) = r.started.and_then(|s| s.step_id) {
                return Discovery::Found(step);
            }
        }
        if !process_alive(srun_pid) {
            let log =
                std::fs::read_to_string(dirs.evidence.join("srun-client.log")).unwrap_or_default();
            if let Some(line) = log.lines().find(|l| l.contains("Unable to create step")) {
                return Discovery::CreationFailed(line.trim().to_owned());
            }
            // srun is gone without saying why and no step was seen: one last look above is all
            // the listing can give; the supervisor's journal may still show up.
            if started.elapsed() > Duration::from_secs(2) {
                return Discovery::NotSeen(format!(
                    "the srun client (pid {srun_pid}) exited; see {}",
                    dirs.evidence.join("srun-client.log").display()
                ));
            }
        }
        if started.elapsed() > STEP_DISCOVERY_TIMEOUT {
            return Discovery::NotSeen(last_unknown.unwrap_or_else(|| "still pending".to_owned()));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(POLL);
    }
}

#[derive(Debug, Serialize)]
pub struct StopReport {
    pub pool: String,
    pub worker: String,
    pub submission_id: String,
    pub step_id: Option<String>,
    pub state: &'static str,
    pub proof: Option<String>,
}

fn find_worker<'a>(
    state: &'a State,
    pool: &str,
    worker: &str,
) -> Result<(&'a Pool, &'a Worker), OpError> {
    let p = state.pools.pools.get(pool).ok_or_else(|| Refusal::NoPool {
        pool: pool.to_owned(),
    })?;
    let w = p.active.values().find(|w| w.name == worker).ok_or_else(|| {
        OpError::Failed(format!(
            "pool {pool:?} has no worker {worker:?} holding budget; `dispatch pool status {pool}` lists them"
        ))
    })?;
    Ok((p, w))
}

/// Is `step` over? Proof only: absent from a successful listing after it was seen, or a
/// terminal state in accounting.
async fn step_proven_over<S: Scheduler>(ctx: &Ctx<S>, step: StepId) -> Option<String> {
    match ctx.sched.list_steps(step.job).await {
        Answer::Live(rows) if !rows.iter().any(|r| r.id == step) => {
            Some(format!("step {step} absent from a successful step listing"))
        }
        Answer::Gone => Some(format!(
            "step {step} absent from a successful step listing (no steps run)"
        )),
        _ => None,
    }
}

pub async fn stop_worker<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    worker: &str,
    grace: Duration,
) -> Result<StopReport, OpError> {
    let (writer, loaded) = ctx.lock_and_load()?;
    let (p, w) = find_worker(&loaded.state, pool, worker)?;
    let job = job_id(&p.allocation)?;
    let submission_id = w.submission_id;
    let mut step_no = w.step_id;
    if step_no.is_none() {
        // Not seen at submit time: look once more, by name.
        let name = step_name(pool, worker);
        if let Answer::Live(rows) = ctx.sched.list_steps(job).await {
            step_no = rows.iter().find_map(|r| match (r.name == name, r.id.step) {
                (true, StepKind::Numbered(n)) => Some(n),
                _ => None,
            });
            if let Some(n) = step_no {
                writer.append_one(Event::WorkerStepObserved(WorkerStepObserved {
                    submission_id,
                    step_id: n,
                }))?;
            }
        }
    }
    let Some(step_no) = step_no else {
        return Err(OpError::Unknown(format!(
            "worker {worker} has no known step yet, so there is nothing to cancel safely; its budget stays held. \
             Run `dispatch reconcile`, then stop it again"
        )));
    };
    let step = StepId::new(job, StepKind::Numbered(step_no));
    writer.append_one(Event::WorkerStopIntent(WorkerStopIntent {
        submission_id,
        grace_s: grace.as_secs() as u32,
    }))?;
    failpoint::hit("pool-stop-after-intent");
    if let Err(e) = ctx.sched.signal_step(step, Signal::Term).await {
        tracing::warn!("scancel --signal=TERM {step}: {e}");
    }
    failpoint::hit("pool-stop-after-term");
    let mut proof = None;
    let until = Instant::now() + grace;
    while proof.is_none() && Instant::now() < until {
        tokio::time::sleep(POLL.min(grace)).await;
        proof = step_proven_over(ctx, step).await;
    }
    if proof.is_none() {
        if let Err(e) = ctx.sched.cancel_step(step).await {
            tracing::warn!("scancel {step}: {e}");
        }
        failpoint::hit("pool-stop-after-cancel");
        let until = Instant::now() + STOP_PROOF_TIMEOUT;
        while proof.is_none() && Instant::now() < until {
            tokio::time::sleep(POLL).await;
            proof = step_proven_over(ctx, step).await;
        }
    }
    let mut report = StopReport {
        pool: pool.to_owned(),
        worker: worker.to_owned(),
        submission_id: submission_id.to_string(),
        step_id: Some(step.to_string()),
        state: WorkerState::Stopping.as_str(),
        proof: proof.clone(),
    };
    let Some(proof) = proof else {
        return Err(OpError::Unknown(format!(
            "step {step} of worker {worker} was cancelled but is not yet proven over; its budget stays held. \
             Run `dispatch reconcile` to resolve it"
        )));
    };
    record_exit_if_reported(
        &writer,
        &loaded.state,
        pool,
        submission_id,
        &ctx.pools_dir(),
    )?;
    writer.append_one(Event::WorkerTerminal(WorkerTerminal {
        submission_id,
        proof,
    }))?;
    report.state = WorkerState::Released.as_str();
    drop(writer);
    snapshot_quietly(&ctx.journal_dir());
    Ok(report)
}

/// Copy what the worker's own journal says about the payload's end into the pool journal.
pub(crate) fn record_exit_if_reported(
    writer: &Writer,
    state: &State,
    pool: &str,
    submission_id: Uuid,
    pools_dir: &Path,
) -> Result<bool, OpError> {
    let already = state
        .pools
        .pools
        .get(pool)
        .and_then(|p| p.active.get(&submission_id))
        .is_some_and(|w| w.state == WorkerState::Exited);
    if already {
        return Ok(false);
    }
    let dirs = WorkerDirs::new(pools_dir, pool, submission_id);
    match report::read(&dirs.evidence) {
        Ok(Some(r)) => {
            if let Some(e) = r.exited {
                writer.append_one(Event::WorkerExited(WorkerExited {
                    submission_id,
                    code: e.code,
                    signal: e.signal,
                }))?;
                return Ok(true);
            }
            Ok(false)
        }
        Ok(None) => Ok(false),
        Err(e) => {
            tracing::warn!("worker journal of {submission_id}: {e}");
            Ok(false)
        }
    }
}

#[derive(Debug, Serialize)]
pub struct StatusReport {
    pub pools: Vec<PoolView>,
}

#[derive(Debug, Serialize)]
pub struct PoolView {
    pub pool: String,
    pub allocation: AllocationView,
    pub capacity: Resources,
    pub reserved: Resources,
    pub workers: Vec<WorkerView>,
}

#[derive(Debug, Serialize)]
pub struct Resources {
    pub cpus: u64,
    pub mem_mb: u64,
}

#[derive(Debug, Serialize)]
pub struct WorkerView {
    pub name: String,
    pub submission_id: String,
    pub state: &'static str,
    pub cpus: u32,
    pub mem_mb: u64,
    pub step_id: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
}

impl WorkerView {
    fn of(job: u64, w: &Worker) -> WorkerView {
        WorkerView {
            name: w.name.clone(),
            submission_id: w.submission_id.to_string(),
            state: w.state.as_str(),
            cpus: w.cpus,
            mem_mb: w.mem_mb,
            step_id: w.step_id.map(|s| format!("{job}.{s}")),
            exit_code: w.exit_code,
            exit_signal: w.exit_signal,
        }
    }
}

/// The status of one pool or all, from state alone (no Slurm call).
pub fn status_of(state: &State, pool: Option<&str>, now: Micros) -> Result<StatusReport, OpError> {
    if let Some(p) = pool {
        if !state.pools.pools.contains_key(p) {
            return Err(Refusal::NoPool { pool: p.to_owned() }.into());
        }
    }
    let pools = state
        .pools
        .pools
        .values()
        .filter(|p| pool.is_none_or(|name| p.name == name))
        .map(|p| {
            let (cpus, mem_mb) = p.reserved();
            let job = p.allocation.job_id;
            let mut workers: Vec<WorkerView> =
                p.active.values().map(|w| WorkerView::of(job, w)).collect();
            workers.extend(p.finished.iter().map(|w| WorkerView::of(job, w)));
            PoolView {
                pool: p.name.clone(),
                allocation: AllocationView::of(&p.allocation, Some(now)),
                capacity: Resources {
                    cpus: u64::from(p.allocation.cpus),
                    mem_mb: p.allocation.mem_mb,
                },
                reserved: Resources { cpus, mem_mb },
                workers,
            }
        })
        .collect();
    Ok(StatusReport { pools })
}
