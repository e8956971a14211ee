//! `dispatch pool attach|submit|status|stop-worker|detach`.
//!
//! Each command: lock the journal → load state → ask Slurm → decide (policy) → append the intent
//! → act → append the outcome. Budget is only released by a proof event.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use super::context::{await_proof, micros_to_local, snapshot_quietly, Ctx, STOP_PROOF_TIMEOUT};
use super::error::OpError;
use super::facts::allocation_facts;
use super::spec::WorkerSpec;
use crate::event::{Event, Micros};
use crate::failpoint;
use crate::journal::{JournalError, Writer};
use crate::names::check_path_name;
use crate::policy::node as node_policy;
use crate::policy::pool::{self as policy, AllocationFacts, Refusal, WorkerAsk};
use crate::policy::reconcile as reconcile_policy;
use crate::slurm::{
    AcctQuery, Answer, JobId, JobName, JobQuery, Scheduler, Signal, StepId, StepKind, StepRequest,
};
use crate::state::pool::*;
use crate::state::State;
use crate::worker::dirs::WorkerDirs;
use crate::worker::{cleanup, publish, report, supervisor};

/// How long `pool submit` looks for the new step before calling the outcome unknown.
pub const STEP_DISCOVERY_TIMEOUT: Duration = Duration::from_secs(20);
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

/// The number of the step called `name` in a step listing.
fn numbered_step_named(rows: &[crate::slurm::StepRow], name: &str) -> Option<u32> {
    rows.iter().find_map(|r| match (r.name == name, r.id.step) {
        (true, StepKind::Numbered(n)) => Some(n),
        _ => None,
    })
}

pub fn step_name(pool: &str, worker: &str) -> String {
    format!("{pool}.{worker}")
}

/// Where a pool's workers publish their workspace and evidence.
pub fn published_dir(pools_dir: &Path, pool: &str) -> std::path::PathBuf {
    pools_dir.join(pool).join("published")
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
        Answer::Gone(_) => Err(OpError::Refused(Refusal::NotRunning {
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
    /// `running`, or `ended` once the journal records the allocation proven over (status only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<&'static str>,
    /// What proved it over (`PoolAllocationEnded`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_proof: Option<String>,
}

impl AllocationView {
    fn of(
        a: &Allocation,
        now: Option<Micros>,
        ended: Option<&PoolAllocationEnded>,
    ) -> AllocationView {
        AllocationView {
            state: now.map(|_| if ended.is_some() { "ended" } else { "running" }),
            ended_proof: ended.map(|e| e.proof.clone()),
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
            // An allocation proven over has no time left, whatever its end time said.
            seconds_left: now
                .filter(|_| ended.is_none())
                .map(|n| (a.end_time.secs() - n.secs()).max(0)),
        }
    }
}

pub async fn attach<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    job: JobId,
) -> Result<AttachReport, OpError> {
    check_path_name("pool", pool).map_err(OpError::Usage)?;
    // The state directory and journal are checked (and made) before Slurm is asked.
    drop(ctx.lock_and_load()?);
    let facts = read_facts(ctx, job).await?;
    let allocation = locked(ctx, |writer, state| {
        let allocation = policy::check_attach(&state.pools, pool, &facts, &ctx.caller, ctx.now())?;
        writer.append_one(Event::PoolAttached(PoolAttached {
            pool: pool.to_owned(),
            allocation: allocation.clone(),
        }))?;
        Ok(allocation)
    })?;
    Ok(AttachReport {
        pool: pool.to_owned(),
        allocation: AllocationView::of(&allocation, None, None),
    })
}

/// Take the journal's writer lock, load the state as it is now, decide and append in `f`, and
/// release the lock. Nothing in `f` may wait (no Slurm call, no grace, no poll): a command that
/// waits does so between two of these, and re-checks what it decided when it takes the lock
/// again (issue 11: another command may have changed the state meanwhile).
pub(crate) fn locked<S: Scheduler, T>(
    ctx: &Ctx<S>,
    f: impl FnOnce(&Writer, &State) -> Result<T, OpError>,
) -> Result<T, OpError> {
    let (writer, loaded) = ctx.lock_and_load()?;
    f(&writer, &loaded.state)
}

/// The worker `submission_id` of `pool` while it still holds budget.
pub(crate) fn active_worker<'a>(state: &'a State, pool: &str, id: Uuid) -> Option<&'a Worker> {
    state.pools.pools.get(pool)?.active.get(&id)
}

/// Append `events` about worker `id` if it still holds budget (under the lock, as it is now);
/// once another command settled it, they would say nothing. Whether they were appended.
fn record<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    id: Uuid,
    events: Vec<Event>,
) -> Result<bool, OpError> {
    locked(ctx, |writer, state| {
        if active_worker(state, pool, id).is_none() {
            return Ok(false);
        }
        writer.append(events)?;
        Ok(true)
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
    pub spec: WorkerSpec,
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
    check_path_name("pool", &req.pool).map_err(OpError::Usage)?;
    let spec = &req.spec;
    spec.check()?;
    let submission_id = Uuid::new_v4();
    let worker = spec.name(submission_id);
    // A first look, to refuse early and to know what to ask Slurm; the lock is not held while
    // it answers. What counts is decided again under the lock, right before the receipt.
    let loaded = {
        let (writer, loaded) = ctx.lock_and_load()?;
        drop(writer);
        loaded
    };
    let pool = loaded
        .state
        .pools
        .pools
        .get(&req.pool)
        .ok_or_else(|| Refusal::NoPool {
            pool: req.pool.clone(),
        })?;
    let budgets = spec.budgets;
    let ask = WorkerAsk {
        name: worker.clone(),
        cpus: spec.cpus,
        mem_mb: spec.mem.get(),
        budgets,
    };
    spec.bind(&loaded.state, &ctx.state_dir, submission_id)?;
    let facts = inspect_for_submit(ctx, pool, &ask).await?;
    let allocation = pool.allocation.clone();
    let job = job_id(&allocation)?;
    let name = step_name(&req.pool, &worker);
    let step_name_checked =
        JobName::new(name.clone()).map_err(|e| OpError::Usage(e.to_string()))?;
    let dirs = WorkerDirs::new(&ctx.pools_dir(), &req.pool, submission_id);
    // Before the receipt: a pool tree that is another user's, or a link, refuses (exit 3).
    dirs.check(&ctx.state_dir)?;
    let deadline = policy::early_shutdown_deadline(allocation.end_time, &budgets);

    // The durable receipt: from here on the worker holds budget. The budget is read again under
    // the lock (another submit may have taken it while Slurm answered), and the assets it uses
    // go in the same commit (a released kind's fields never change, so they are their own event).
    let intent = Event::WorkerSubmitIntent(WorkerSubmitIntent {
        pool: req.pool.clone(),
        worker: worker.clone(),
        submission_id,
        cpus: spec.cpus,
        mem_mb: spec.mem.get(),
        publication_timeout_s: budgets.publication_timeout_s,
        command: spec.command.clone(),
    });
    let bound = locked(ctx, |writer, state| {
        let pool = state
            .pools
            .pools
            .get(&req.pool)
            .filter(|p| p.allocation == allocation)
            .ok_or_else(|| {
                OpError::Failed(format!(
                    "pool {} was detached or attached to another allocation while this submit asked \
                     Slurm; nothing was submitted. Check `dispatch pool status` and submit again",
                    req.pool
                ))
            })?;
        policy::check_submit(pool, &facts, &ask, &ctx.caller, ctx.now())?;
        let bound = spec.bind(state, &ctx.state_dir, submission_id)?;
        writer.append(bound.receipt(intent, submission_id))?;
        Ok(bound)
    })?;
    failpoint::hit("pool-submit-after-intent");
    let mut report = SubmitReport {
        pool: req.pool.clone(),
        worker: worker.clone(),
        submission_id: submission_id.to_string(),
        state: WorkerState::Submitted.as_str(),
        step_id: None,
        warnings: Vec::new(),
    };
    if let Err(e) = dirs.create(&ctx.state_dir) {
        record(
            ctx,
            &req.pool,
            submission_id,
            vec![Event::WorkerLaunchFailed(WorkerLaunchFailed {
                submission_id,
                definite: true,
                reason: format!(
                    "cannot create worker directories under {}: {e}",
                    dirs.root.display()
                ),
            })],
        )?;
        return Err(OpError::Failed(format!(
            "worker {worker}: cannot create its directories under {}: {e}; nothing was launched and its budget is released",
            dirs.root.display()
        )));
    }
    let publish_dir = published_dir(&ctx.pools_dir(), &req.pool);
    let command = supervisor::command_line(
        &ctx.exe,
        &ctx.state_dir,
        &supervisor::SupervisorArgs {
            submission_id,
            worker: &worker,
            pool: Some(&req.pool),
            dirs: &dirs,
            publish_dir: &publish_dir,
            deadline: deadline.secs().to_string(),
            budgets,
            append_only_glob: spec.append_only_glob.as_deref(),
            assets: &bound.assets,
        },
        &spec.command,
    );
    let mut step = StepRequest::new(job, step_name_checked, spec.cpus, spec.mem, command);
    // Without --overlap Slurm gives each worker CPUs no other worker holds, and the step's
    // cpuset confines it to them; with --overlap, workers were seen sharing CPU 0. The budget
    // check above keeps the steps from waiting on each other. No --cpu-bind: `cores` made
    // Slurm 22.05 fail to lay out a 3-CPU task on a node declaring more CPUs than it has.
    step.overlap = false;
    step.output = Some(dirs.evidence.join("stdout"));
    step.error = Some(dirs.evidence.join("stderr"));
    step.chdir = Some(dirs.checkout.clone());
    step.client_log = Some(dirs.evidence.join("srun-client.log"));
    // The supervisor sets the worker's DISPATCH_* variables for the payload: one place, and
    // nothing the coordinator's own environment holds can leak into them.
    failpoint::hit("pool-submit-before-launch");
    let launched = ctx.sched.launch_step(&step).await;
    let launched_at = tokio::time::Instant::now();
    let srun_pid = match launched {
        Ok(l) => l.srun_pid,
        Err(e) => {
            let definite = e.nothing_happened();
            record(
                ctx,
                &req.pool,
                submission_id,
                vec![Event::WorkerLaunchFailed(WorkerLaunchFailed {
                    submission_id,
                    definite,
                    reason: e.to_string(),
                })],
            )?;
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
    record(
        ctx,
        &req.pool,
        submission_id,
        vec![Event::WorkerLaunched(WorkerLaunched {
            submission_id,
            srun_pid,
        })],
    )?;
    failpoint::hit("pool-submit-after-launch");
    report.state = WorkerState::Running.as_str();

    let search = StepSearch {
        job,
        name: &name,
        dirs: &dirs,
        srun_pid,
        launched_at,
        since: allocation.start_time,
    };
    match discover_step(ctx, &search).await {
        Discovery::Found(step_no) => {
            // Unless reconcile recorded it (or settled the worker) meanwhile.
            locked(ctx, |writer, state| {
                match active_worker(state, &req.pool, submission_id) {
                    Some(w) if w.step_id != Some(step_no) => {
                        writer.append_one(Event::WorkerStepObserved(WorkerStepObserved {
                            submission_id,
                            step_id: step_no,
                        }))?;
                    }
                    _ => {}
                }
                Ok(())
            })?;
            report.step_id = Some(format!("{job}.{step_no}"));
        }
        Discovery::CreationFailed(reason) => {
            record(
                ctx,
                &req.pool,
                submission_id,
                vec![Event::WorkerLaunchFailed(WorkerLaunchFailed {
                    submission_id,
                    definite: true,
                    reason: reason.clone(),
                })],
            )?;
            return Err(OpError::Failed(format!(
                "worker {worker}: Slurm refused to create its step: {reason}; its budget is released"
            )));
        }
        Discovery::NeverRan(proof) => {
            record(
                ctx,
                &req.pool,
                submission_id,
                vec![Event::WorkerLaunchFailed(WorkerLaunchFailed {
                    submission_id,
                    definite: true,
                    reason: proof.clone(),
                })],
            )?;
            return Err(OpError::Failed(format!(
                "worker {worker}: {proof}; its budget is released. See {}",
                dirs.evidence.join("srun-client.log").display()
            )));
        }
        Discovery::NotSeen(why) => {
            // Launched, but neither seen nor proven never to have run: the outcome is unknown
            // (CLI.md: exit 4), and the budget stays held until reconcile settles it.
            snapshot_quietly(&ctx.journal_dir());
            return Err(OpError::Unknown(format!(
                "worker {worker} (submission {submission_id}): its step {name} was not seen within {} s \
                 ({why}); the launch outcome is unknown and its budget stays held. Run `dispatch \
                 reconcile` (or `dispatch pool status --refresh`) to resolve it",
                STEP_DISCOVERY_TIMEOUT.as_secs()
            )));
        }
    }
    snapshot_quietly(&ctx.journal_dir());
    Ok(report)
}

enum Discovery {
    Found(u32),
    CreationFailed(String),
    /// Proven never to have run (`policy::reconcile::step_never_ran`).
    NeverRan(String),
    NotSeen(String),
}

/// Is `pid` a running (not zombie) process on this host?
pub(crate) fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the last ')' (the command name may contain one).
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// How the srun this process started has ended, if it has: its exit status when it is our
/// child still to be reaped, else whether its pid still runs.
fn srun_ended(pid: u32) -> Option<String> {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return None;
    };
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG only reads and writes `status`, which outlives the call.
    let r = unsafe { libc::waitpid(raw, &mut status, libc::WNOHANG) };
    if r == raw {
        return Some(if libc::WIFEXITED(status) {
            format!("(pid {pid}) exited with code {}", libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            format!(
                "(pid {pid}) was killed by signal {}",
                libc::WTERMSIG(status)
            )
        } else {
            format!("(pid {pid}) ended")
        });
    }
    if r == 0 {
        return None;
    }
    // Not (or no longer) our child to reap: its pid tells. A reused pid reads as running,
    // which proves nothing: the safe side.
    (!process_alive(pid)).then(|| format!("(pid {pid}) is no longer running"))
}

/// What `pool submit` looks for after its srun started.
struct StepSearch<'a> {
    job: JobId,
    name: &'a str,
    dirs: &'a WorkerDirs,
    srun_pid: u32,
    /// The runtime's clock (see `await_proof`): a paused test runtime runs the poll at once.
    launched_at: tokio::time::Instant,
    /// The allocation's start: where accounting is asked from.
    since: Micros,
}

/// Find the step a detached srun created: by name in the step listing, or by the step id the
/// supervisor recorded (for a step that ended between two listings). When the srun has exited
/// without one, wait out the settle delay and ask whether together the evidence proves that the
/// step never ran.
async fn discover_step<S: Scheduler>(ctx: &Ctx<S>, search: &StepSearch<'_>) -> Discovery {
    let StepSearch {
        job,
        name,
        dirs,
        srun_pid,
        launched_at,
        ..
    } = *search;
    let mut last_unknown = None;
    let mut srun_exit: Option<String> = None;
    // A step usually appears within ~50 ms: look often at first, then back off.
    let mut pause = Duration::from_millis(20);
    loop {
        match ctx.sched.list_steps(job).await {
            Answer::Live(rows) => {
                if let Some(n) = numbered_step_named(&rows, name) {
                    return Discovery::Found(n);
                }
            }
            Answer::Gone(_) => {}
            Answer::Unknown(e) => last_unknown = Some(e.to_string()),
        }
        if let Ok(Some(r)) = report::read(&dirs.evidence) {
            if let Some(step) = r.started.and_then(|s| s.step_id) {
                return Discovery::Found(step);
            }
        }
        if srun_exit.is_none() {
            srun_exit = srun_ended(srun_pid);
        }
        if let Some(exit) = &srun_exit {
            let log =
                std::fs::read_to_string(dirs.evidence.join("srun-client.log")).unwrap_or_default();
            if let Some(line) = log.lines().find(|l| l.contains("Unable to create step")) {
                return Discovery::CreationFailed(line.trim().to_owned());
            }
            if launched_at.elapsed() >= reconcile_policy::NEVER_RAN_SETTLE {
                return match never_ran(ctx, search, exit).await {
                    Some(proof) => Discovery::NeverRan(proof),
                    None => Discovery::NotSeen(format!(
                        "the srun client {exit} and no step was seen, but that it never ran is \
                         not proven; see {}",
                        dirs.evidence.join("srun-client.log").display()
                    )),
                };
            }
        }
        if launched_at.elapsed() > STEP_DISCOVERY_TIMEOUT {
            return Discovery::NotSeen(last_unknown.unwrap_or_else(|| "still pending".to_owned()));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(POLL);
    }
}

/// Ask the questions [`reconcile_policy::step_never_ran`] needs: the step listing, the job
/// listing, accounting, and the supervisor's own journal.
async fn never_ran<S: Scheduler>(
    ctx: &Ctx<S>,
    search: &StepSearch<'_>,
    srun_exit: &str,
) -> Option<String> {
    let job = search.job;
    let steps = ctx.sched.list_steps(job).await;
    let jobs = ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
    let mut obs = reconcile_policy::observe_pool(job, &jobs.job(job), Some(&steps));
    let acct = ctx
        .sched
        .accounting(&AcctQuery {
            jobs: vec![job],
            names: vec![],
            since: micros_to_local(search.since),
        })
        .await;
    if let Answer::Live(rows) = &acct {
        reconcile_policy::add_accounting(&mut obs, job, rows);
    }
    let supervisor_started = supervisor_started(&ctx.pools_dir(), search.dirs);
    reconcile_policy::step_never_ran(
        search.name,
        &reconcile_policy::SrunSeen::Exited(srun_exit.to_owned()),
        supervisor_started,
        search.launched_at.elapsed(),
        &obs,
    )
}

/// Did the worker's supervisor record its start? `None` when its journal cannot be read (or
/// its tree is not trusted): then nothing is known.
pub(crate) fn supervisor_started(pools_dir: &Path, dirs: &WorkerDirs) -> Option<bool> {
    dirs.check(pools_dir).ok()?;
    match report::read(&dirs.evidence) {
        Ok(None) => Some(false),
        Ok(Some(r)) => Some(r.started.is_some()),
        Err(_) => None,
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
        OpError::NotFound(format!(
            "pool {pool:?} has no worker {worker:?} holding budget; `dispatch pool status {pool}` lists them"
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

pub async fn stop_worker<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    worker: &str,
    grace: Duration,
) -> Result<StopReport, OpError> {
    // Decide what to stop from a first look; every append below takes the lock again and
    // checks that the worker is still as this stop saw it. The grace and the proof polls
    // happen with the lock released (issue 11).
    let state = {
        let (writer, loaded) = ctx.lock_and_load()?;
        drop(writer);
        loaded.state
    };
    let (p, w) = find_worker(&state, pool, worker)?;
    let job = job_id(&p.allocation)?;
    let submission_id = w.submission_id;
    let mut step_no = w.step_id;
    if step_no.is_none() {
        // Not seen at submit time: look once more, by name.
        let name = step_name(pool, worker);
        if let Answer::Live(rows) = ctx.sched.list_steps(job).await {
            step_no = numbered_step_named(&rows, &name);
            if let Some(n) = step_no {
                locked(ctx, |writer, state| {
                    if active_worker(state, pool, submission_id)
                        .is_some_and(|w| w.step_id.is_none())
                    {
                        writer.append_one(Event::WorkerStepObserved(WorkerStepObserved {
                            submission_id,
                            step_id: n,
                        }))?;
                    }
                    Ok(())
                })?;
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
    locked(ctx, |writer, state| {
        match active_worker(state, pool, submission_id) {
            Some(w) if w.step_id.is_none_or(|s| s == step_no) => {}
            _ => {
                return Err(OpError::Failed(format!(
                    "worker {worker} changed while this stop looked for its step (another command \
                     settled it); nothing was signalled. `dispatch pool status {pool}` shows it now"
                )))
            }
        }
        writer.append_one(Event::WorkerStopIntent(WorkerStopIntent {
            submission_id,
            grace_s: grace.as_secs() as u32,
        }))?;
        Ok(())
    })?;
    failpoint::hit("pool-stop-after-intent");
    if let Err(e) = ctx.sched.signal_step(step, Signal::Term).await {
        tracing::warn!("scancel --signal=TERM {step}: {e}");
    }
    failpoint::hit("pool-stop-after-term");
    let mut proof = await_proof(grace, || step_proven_over(ctx, step)).await;
    if proof.is_none() {
        if let Err(e) = ctx.sched.cancel_step(step).await {
            tracing::warn!("scancel {step}: {e}");
        }
        failpoint::hit("pool-stop-after-cancel");
        proof = await_proof(STOP_PROOF_TIMEOUT, || step_proven_over(ctx, step)).await;
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
    // Released by this stop, or by a reconcile that proved the same meanwhile: either way
    // it is released.
    release_proven(ctx, pool, submission_id, &proof, |w| {
        w.step_id.is_none_or(|s| s == step_no)
    })?;
    report.state = WorkerState::Released.as_str();
    snapshot_quietly(&ctx.journal_dir());
    Ok(report)
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
    let cleanup = locked(ctx, |writer, state| {
        if !active_worker(state, pool, id).is_some_and(&still) {
            return Ok(None);
        }
        ingest_worker_journal(writer, state, pool, id, &pools_dir, true)?;
        let w = active_worker(state, pool, id).expect("checked above");
        let planned = plan_leftover_cleanup(&pools_dir, pool, w);
        if let Some((intent, _, _)) = &planned {
            writer.append_one(Event::WorkerCleanupIntent(intent.clone()))?;
        }
        Ok(Some(planned))
    })?;
    let Some(planned) = cleanup else {
        return Ok(false);
    };
    let done = planned.map(|(intent, plan, dirs)| {
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
    });
    let finished = locked(ctx, |writer, state| {
        let Some(w) = active_worker(state, pool, id).filter(|w| still(w)).cloned() else {
            return Ok(None);
        };
        let mut events: Vec<Event> = done.map(Event::WorkerCleanedUp).into_iter().collect();
        events.push(Event::WorkerTerminal(WorkerTerminal {
            submission_id: id,
            proof: proof.to_owned(),
        }));
        writer.append(events)?;
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

/// The worker's own journal as it is now, with the chain value at the seq last ingested.
fn read_worker_journal(
    pools_dir: &Path,
    pool: &str,
    w: &Worker,
) -> Result<Option<report::WorkerReport>, JournalError> {
    let dirs = WorkerDirs::new(pools_dir, pool, w.submission_id);
    dirs.check(pools_dir)?;
    report::read_anchored(&dirs.evidence, w.report.as_ref().map(|r| r.last_seq))
}

/// Does the worker journal, as read now, still extend what was ingested from it?
fn extends_ingested(w: &Worker, r: &report::WorkerReport) -> Result<(), String> {
    node_policy::check_extends(
        w.report
            .as_ref()
            .map(|x| (x.journal_id.as_bytes(), x.last_seq, &x.head.0)),
        &node_policy::JournalSeen {
            journal_id: r.journal_id,
            last_seq: r.last_seq,
            chain_at_ingested: r.chain_at_anchor,
        },
    )
}

/// Read what a worker's own journal says and record what is new: how the payload ended
/// (`WorkerExited`) and a summary anchored to the journal's chain (`WorkerReportIngested`).
/// A damaged journal, or one that no longer extends what was ingested from it, is recorded as
/// such (`WorkerJournalDamaged`) and never trusted again. `step_over`: the worker's step is
/// proven over, so its supervisor can write nothing more.
pub(crate) fn ingest_worker_journal(
    writer: &Writer,
    state: &State,
    pool: &str,
    submission_id: Uuid,
    pools_dir: &Path,
    step_over: bool,
) -> Result<(), OpError> {
    let Some(w) = state
        .pools
        .pools
        .get(pool)
        .and_then(|p| p.active.get(&submission_id))
    else {
        return Ok(());
    };
    if w.journal_damage.is_some() {
        return Ok(());
    }
    let r = match read_worker_journal(pools_dir, pool, w) {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(()),
        Err(e @ (JournalError::Damaged { .. } | JournalError::Undecodable { .. })) => {
            let status = match &e {
                JournalError::Damaged { status, .. } => status.as_str(),
                _ => "corrupt",
            };
            tracing::warn!("worker {} journal: {e}", w.name);
            writer.append_one(Event::WorkerJournalDamaged(WorkerJournalDamaged {
                submission_id,
                status: status.to_owned(),
                reason: e.to_string(),
            }))?;
            return Ok(());
        }
        Err(e) => {
            tracing::warn!("worker {} journal cannot be read now: {e}", w.name);
            return Ok(());
        }
    };
    if let Err(reason) = extends_ingested(w, &r) {
        writer.append_one(Event::WorkerJournalDamaged(WorkerJournalDamaged {
            submission_id,
            status: "rewritten".to_owned(),
            reason,
        }))?;
        return Ok(());
    }
    let mut events = Vec::new();
    if let (Some(e), false) = (&r.exited, w.state == WorkerState::Exited) {
        events.push(Event::WorkerExited(WorkerExited {
            submission_id,
            code: e.code,
            signal: e.signal,
        }));
    }
    let ingested = r.ingested(submission_id, step_over);
    if w.report.as_ref() != Some(&ingested) {
        events.push(Event::WorkerReportIngested(ingested));
    }
    writer.append(events)?;
    Ok(())
}

/// After a worker's step is proven over: temporary publication directories its supervisor
/// left (it was killed mid-publication) can never complete; remove them.
pub(crate) fn sweep_publication(pools_dir: &Path, pool: &str, w: &Worker) {
    let n = publish::sweep_temps(&published_dir(pools_dir, pool), &w.name, w.submission_id);
    if n > 0 {
        tracing::info!(
            "removed {n} unfinished publication(s) of worker {} (its step is over)",
            w.name
        );
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
    #[serde(flatten)]
    pub node: NodeView,
}

/// What the worker's own journal says, for `pool status`: from the journal as it is now when
/// it can be trusted, else from what was last ingested from it.
#[derive(Debug, Default, Serialize)]
pub struct NodeView {
    pub assets: Vec<AssetUseView>,
    /// `{"status": "clean" | "torn_tail" | "corrupt" | "tampered" | "rewritten", "last_seq",
    /// "head"}`; null when the supervisor has written nothing.
    pub worker_journal: Option<WorkerJournalView>,
    /// `passed` or `refused`, once the supervisor got that far.
    pub preflight: Option<String>,
    pub refusal: Option<String>,
    pub publication: Option<PublicationView>,
    /// `sealed`, `crash_class_partial` or `empty`.
    pub state_class: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct AssetUseView {
    pub role: &'static str,
    pub name: String,
    pub sha256: String,
}

#[derive(Debug, Serialize)]
pub struct WorkerJournalView {
    pub status: String,
    pub last_seq: Option<u64>,
    pub head: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct PublicationView {
    /// `started`, `published`, `timed_out` or `failed`.
    pub outcome: String,
    pub dir: Option<String>,
    pub manifest_sha256: Option<String>,
    pub took_ms: Option<u64>,
}

impl NodeView {
    fn from_ingested(r: &WorkerReportIngested) -> NodeView {
        NodeView {
            preflight: r.preflight.clone(),
            publication: r.publication.as_ref().map(|outcome| PublicationView {
                outcome: outcome.clone(),
                dir: r.published_dir.clone(),
                manifest_sha256: r.manifest_sha256.map(|h| hex::encode(h.0)),
                took_ms: None,
            }),
            state_class: r.state_class.clone(),
            worker_journal: Some(WorkerJournalView {
                status: "ingested".to_owned(),
                last_seq: Some(r.last_seq),
                head: Some(hex::encode(r.head.0)),
                reason: None,
            }),
            ..NodeView::default()
        }
    }

    fn from_report(r: &report::WorkerReport, step_over: bool) -> NodeView {
        let ingested = r.ingested(Uuid::nil(), step_over);
        let mut v = NodeView::from_ingested(&ingested);
        v.refusal = r.refused.as_ref().map(|x| x.reason.clone());
        if let (Some(p), Some(report::Publication::Published(x))) =
            (&mut v.publication, &r.publication)
        {
            p.took_ms = Some(x.took_ms);
        }
        if let (Some(p), Some(report::Publication::TimedOut(x))) =
            (&mut v.publication, &r.publication)
        {
            p.took_ms = Some(x.took_ms);
        }
        v.worker_journal = Some(WorkerJournalView {
            status: r.journal_status.map_or("clean", |s| s.as_str()).to_owned(),
            last_seq: Some(r.last_seq),
            head: r.head.clone(),
            reason: None,
        });
        v
    }

    /// A journal that cannot be trusted: say so, and show only what was ingested before.
    fn untrusted(w: &Worker, status: &str, reason: String) -> NodeView {
        let mut v = w
            .report
            .as_ref()
            .map(NodeView::from_ingested)
            .unwrap_or_default();
        v.worker_journal = Some(WorkerJournalView {
            status: status.to_owned(),
            last_seq: None,
            head: None,
            reason: Some(reason),
        });
        v
    }
}

/// The node view of `w`: its journal read now (when `pools_dir` is given), checked against
/// what was ingested from it before.
fn node_view(pools_dir: Option<&Path>, pool: &str, w: &Worker) -> NodeView {
    let mut v = if let Some(d) = &w.journal_damage {
        NodeView::untrusted(w, &d.status, d.reason.clone())
    } else {
        match pools_dir.map(|dir| read_worker_journal(dir, pool, w)) {
            Some(Ok(Some(r))) => match extends_ingested(w, &r) {
                Ok(()) => NodeView::from_report(&r, !w.state.holds_budget()),
                Err(reason) => NodeView::untrusted(w, "rewritten", reason),
            },
            Some(Err(JournalError::Damaged { status, damage, .. })) => NodeView::untrusted(
                w,
                status.as_str(),
                format!(
                    "{} at {} offset {}",
                    damage.reason, damage.segment, damage.offset
                ),
            ),
            Some(Err(e)) => NodeView::untrusted(w, "unreadable", e.to_string()),
            Some(Ok(None)) | None => w
                .report
                .as_ref()
                .map(NodeView::from_ingested)
                .unwrap_or_default(),
        }
    };
    v.assets = w
        .assets
        .iter()
        .map(|a| AssetUseView {
            role: a.kind.as_str(),
            name: a.name.clone(),
            sha256: hex::encode(a.sha256.0),
        })
        .collect();
    v
}

impl WorkerView {
    fn of(job: u64, pools_dir: Option<&Path>, pool: &str, w: &Worker) -> WorkerView {
        WorkerView {
            name: w.name.clone(),
            submission_id: w.submission_id.to_string(),
            state: w.state.as_str(),
            cpus: w.cpus,
            mem_mb: w.mem_mb,
            step_id: w.step_id.map(|s| format!("{job}.{s}")),
            exit_code: w.exit_code,
            exit_signal: w.exit_signal,
            node: node_view(pools_dir, pool, w),
        }
    }
}

/// The status of one pool or all, from state alone (no Slurm call, no file read).
pub fn status_of(state: &State, pool: Option<&str>, now: Micros) -> Result<StatusReport, OpError> {
    status(state, None, pool, now)
}

/// The status of one pool or all: state, plus each worker's own journal read from
/// `pools_dir` (no Slurm call, nothing written).
pub fn status(
    state: &State,
    pools_dir: Option<&Path>,
    pool: Option<&str>,
    now: Micros,
) -> Result<StatusReport, OpError> {
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
            let view = |w: &Worker| WorkerView::of(job, pools_dir, &p.name, w);
            let mut workers: Vec<WorkerView> = p.active.values().map(view).collect();
            workers.extend(p.finished.iter().map(view));
            PoolView {
                pool: p.name.clone(),
                allocation: AllocationView::of(&p.allocation, Some(now), p.ended.as_ref()),
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
