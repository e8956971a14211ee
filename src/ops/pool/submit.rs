//! `dispatch pool submit`: the receipt, the detached srun, and the search for the step it made.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use super::queue::Ticket;
use super::room::{self, Wait};
use super::{
    active_worker, locked, numbered_step_named, published_dir, read_facts, record, step_name,
};
use crate::event::pool::*;
use crate::event::{Event, Micros};
use crate::failpoint;
use crate::names::check_path_name;
use crate::next::Next::{self, PoolRefresh, Reconcile};
use crate::ops::context::{append_if, micros_to_local, Ctx};
use crate::ops::error::OpError;
use crate::ops::poll::Poller;
use crate::ops::spec::{Bound, WorkerSpec};
use crate::policy::pool::{self as policy, AllocationFacts, Refusal, WorkerAsk};
use crate::policy::reconcile as reconcile_policy;
use crate::slurm::{srun_log, AcctQuery, Answer, JobId, JobName, JobQuery, Scheduler, StepRequest};
use crate::state::pool::*;
use crate::state::State;
use crate::worker::dirs::WorkerDirs;
use crate::worker::{report, supervisor};

/// How long `pool submit` looks for the new step before calling the outcome unknown.
pub const STEP_DISCOVERY_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(250);
/// How often step discovery reads srun's client log and the supervisor's journal between two
/// step listings (two small files; srun announces the step 10-15 ms after it starts).
const FILE_POLL: Duration = Duration::from_millis(2);
/// When the first step listing is asked, unless srun or the supervisor said the step first.
const FIRST_LISTING: Duration = Duration::from_millis(50);

/// What `pool submit` was asked to run.
#[derive(Clone, Debug)]
pub struct SubmitRequest {
    pub pool: String,
    pub spec: WorkerSpec,
    /// GPUs of its node the worker reserves (`--gpus`); with none its step sees no GPU.
    pub gpus: u32,
    /// The node it must run on (`--node`); otherwise the first node with room.
    pub node: Option<String>,
    /// How many times it is submitted again when a node failure ends it
    /// (`--resubmit-on-node-failure`).
    pub resubmits: u32,
    /// The worker a node failure ended, that this submission replaces (by `reconcile`).
    pub replaces: Option<Uuid>,
    /// A continuation asked for (`--continue N`).
    pub continuation: Option<crate::ops::spec::ContinueAsk>,
    /// The predecessor this submission continues (by `reconcile`).
    pub continues: Option<crate::ops::spec::Continues>,
}

impl SubmitRequest {
    /// What the receipt keeps of the request for a resubmission, if any is asked for.
    fn kept(&self, submission_id: Uuid) -> Option<WorkerRequest> {
        let (spec, budgets) = (&self.spec, &self.spec.budgets);
        (self.resubmits > 0 || self.continuation.is_some()).then(|| WorkerRequest {
            submission_id,
            resubmits_left: self.resubmits,
            command: spec.command.clone(),
            gpus: self.gpus,
            publication_timeout_s: budgets.publication_timeout_s,
            native_state_s: budgets.native_state_s,
            cleanup_s: budgets.cleanup_s,
            grace_s: budgets.grace_s,
            source: spec.source.clone(),
            image: spec.image.clone(),
            append_only_glob: spec.append_only_glob.clone(),
            trial: spec.trial.clone(),
        })
    }
}

#[derive(Debug, Serialize)]
pub struct SubmitReport {
    pub pool: String,
    pub worker: String,
    pub submission_id: String,
    #[serde(serialize_with = "crate::state::word")]
    pub state: WorkerState,
    pub step_id: Option<String>,
    /// The node the receipt placed the worker on, and the GPUs it reserved there.
    pub node: Option<String>,
    pub gpus: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Check the live allocation; after a refusal by an allocation of the same incarnation, read it
/// again and run every check once more before refusing.
/// `read`: facts just read (by a wait), to check instead of asking Slurm first.
async fn inspect_for_submit<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &Pool,
    ask: &WorkerAsk,
    check: Check,
    read: Option<AllocationFacts>,
) -> Result<AllocationFacts, OpError> {
    let job = pool.allocation.job_id;
    let facts = match read {
        Some(f) => f,
        None => read_facts(ctx, job).await?,
    };
    let first = check(pool, &facts, ask, &ctx.caller, ctx.now());
    match first {
        Ok(()) => Ok(facts),
        Err(Refusal::IncarnationChanged { .. }) => Err(first.unwrap_err().into()),
        Err(refusal) if facts.start_time == Some(pool.allocation.start_time) => {
            tracing::info!("live metadata refused ({refusal}); re-inspecting once");
            let again = read_facts(ctx, job).await?;
            check(pool, &again, ask, &ctx.caller, ctx.now())?;
            Ok(again)
        }
        Err(refusal) => Err(refusal.into()),
    }
}

/// A submit check of `policy::pool`: all of them, or all but the room (`--wait`).
type Check = fn(&Pool, &AllocationFacts, &WorkerAsk, &str, Micros) -> Result<(), Refusal>;

/// Every check of a submit, the room included (the node it finds is decided again under the
/// lock, at the receipt).
fn check_all(
    pool: &Pool,
    facts: &AllocationFacts,
    ask: &WorkerAsk,
    caller: &str,
    now: Micros,
) -> Result<(), Refusal> {
    policy::check_submit(pool, facts, ask, caller, now).map(drop)
}

pub async fn submit<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
) -> Result<SubmitReport, OpError> {
    submit_waiting(ctx, req, None).await
}

/// `pool submit`, and with `wait`, `pool submit --wait`: when the pool has no room, queue and
/// wait for it (`room.rs`) instead of refusing. The phases: checks ([`plan`]), the durable
/// receipt ([`write_receipt`]), the launch ([`launch`]), the step search ([`discover_step`]),
/// and its outcome recorded ([`record_discovery`]).
pub async fn submit_waiting<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
    wait: Option<Wait>,
) -> Result<SubmitReport, OpError> {
    let started = tokio::time::Instant::now();
    check_path_name("pool", &req.pool).map_err(OpError::Usage)?;
    req.spec.check()?;
    // A first look, to refuse early and to know what to ask Slurm; the lock is not held while
    // it answers. What counts is decided again under the lock, right before the receipt.
    let loaded = ctx.lock_and_load()?.1;
    let mut plan = plan(ctx, req, &loaded.state, wait.is_some()).await?;
    let bound = write_receipt(ctx, req, &mut plan, wait.as_ref(), started).await?;
    failpoint::hit("pool-submit-after-intent");
    let mut report = SubmitReport {
        pool: req.pool.clone(),
        worker: plan.worker.clone(),
        submission_id: plan.submission_id.to_string(),
        state: WorkerState::Submitted,
        step_id: None,
        node: plan.node.clone(),
        gpus: req.gpus,
        warnings: Vec::new(),
    };
    let (srun_pid, launched_at) = launch(ctx, req, &plan, &bound).await?;
    report.state = WorkerState::Running;
    let search = StepSearch {
        job: plan.job,
        name: &plan.name,
        dirs: &plan.dirs,
        srun_pid,
        launched_at,
        since: plan.allocation.start_time,
    };
    let discovery = discover_step(ctx, &search).await;
    record_discovery(ctx, req, &plan, discovery, &mut report)?;
    ctx.snapshot_quietly();
    Ok(report)
}

/// What the checks before the receipt settled: the worker, what it asks, the allocation as
/// Slurm showed it, and where the worker's files go. `pool submit` goes on from it; `--dry-run`
/// reports it (`dry_run.rs`), so the two cannot disagree on what a submit would do.
pub(super) struct Plan<'a> {
    pub(super) pool: &'a Pool,
    pub(super) submission_id: Uuid,
    pub(super) worker: String,
    pub(super) ask: WorkerAsk,
    check: Check,
    pub(super) facts: AllocationFacts,
    facts_read_at: tokio::time::Instant,
    allocation: Allocation,
    pub(super) job: JobId,
    /// The step's name (`<pool>.<worker>`), checked as a Slurm name.
    pub(super) name: String,
    step_name: JobName,
    dirs: WorkerDirs,
    /// The node the worker goes to: as the first look found it, then as the receipt decided
    /// under the lock (`None` while a `--wait` has not found room).
    pub(super) node: Option<String>,
    pub(super) deadline: Micros,
    /// The names of the assets the worker would use, as the first look bound them.
    pub(super) assets: Vec<String>,
}

/// Every check before the receipt, against the first look `state` and the live allocation:
/// the pool, the assets and trial, the allocation's identity, owner and lifetime (asked once
/// more when a refusal may be stale), the budget (with `waits`, only that it can ever fit),
/// the step's name and the worker's directories. Writes nothing.
pub(super) async fn plan<'a, S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
    state: &'a State,
    waits: bool,
) -> Result<Plan<'a>, OpError> {
    let spec = &req.spec;
    let submission_id = Uuid::new_v4();
    let worker = spec.name(submission_id);
    let pool = state
        .pools
        .pools
        .get(&req.pool)
        .ok_or_else(|| Refusal::NoPool {
            pool: req.pool.clone(),
        })?;
    let ask = WorkerAsk {
        journal: state.journal_id,
        name: worker.clone(),
        cpus: spec.cpus,
        mem_mb: spec.mem.get(),
        gpus: req.gpus,
        node: req.node.clone(),
        budgets: spec.budgets,
    };
    let assets = spec
        .bind(state, &ctx.state_dir, submission_id)?
        .assets
        .iter()
        .map(|a| a.name.clone())
        .collect();
    let check: Check = if waits {
        policy::check_submit_to_wait
    } else {
        check_all
    };
    let facts = inspect_for_submit(ctx, pool, &ask, check, None).await?;
    let facts_read_at = tokio::time::Instant::now();
    let allocation = pool.allocation.clone();
    let job = allocation.job_id;
    let name = step_name(&req.pool, &worker);
    let step_name = JobName::new(name.clone()).map_err(|e| OpError::Usage(e.to_string()))?;
    let dirs = WorkerDirs::new(&ctx.pools_dir(), &req.pool, submission_id);
    // Before the receipt: a pool tree that is another user's, or a link, refuses (exit 3).
    dirs.check(&ctx.state_dir)?;
    let deadline = policy::early_shutdown_deadline(allocation.end_time, &spec.budgets);
    let node = policy::check_room(pool, &facts, &ask).ok();
    Ok(Plan {
        pool,
        submission_id,
        worker,
        ask,
        check,
        facts,
        facts_read_at,
        allocation,
        job,
        name,
        step_name,
        dirs,
        node,
        deadline,
        assets,
    })
}

/// The durable receipt: from here on the worker holds budget. The budget is read again under
/// the lock (another submit may have taken it while Slurm answered), and the assets it uses go
/// in the same commit (a released kind's fields never change, so they are their own event).
/// With `wait`, first a place in the pool's queue and the wait for room, held until the receipt
/// is written.
async fn write_receipt<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
    plan: &mut Plan<'_>,
    wait: Option<&Wait>,
    started: tokio::time::Instant,
) -> Result<Bound, OpError> {
    let spec = &req.spec;
    let intent = Event::WorkerSubmitIntent(WorkerSubmitIntent {
        pool: req.pool.clone(),
        worker: plan.worker.clone(),
        submission_id: plan.submission_id,
        cpus: spec.cpus,
        mem_mb: spec.mem.get(),
        publication_timeout_s: spec.budgets.publication_timeout_s,
        command: spec.command.clone(),
    });
    let ticket = wait
        .map(|_| Ticket::take(&ctx.state_dir, &ctx.pools_dir(), &req.pool))
        .transpose()?;
    loop {
        if let (Some(wait), Some(ticket)) = (wait, &ticket) {
            let asked = room::Asked {
                pool: &req.pool,
                allocation: &plan.allocation,
                facts: &plan.facts,
                facts_at: plan.facts_read_at,
                ask: &plan.ask,
            };
            let read = room::until_room(ctx, &asked, ticket, wait, started).await?;
            if plan.facts_read_at.elapsed() > room::FACTS_FRESH {
                // After a wait Slurm is asked again (the allocation may have changed), unless
                // the wait just did, beside its last proof.
                let (read, at) =
                    read.map_or((None, tokio::time::Instant::now()), |(f, at)| (Some(f), at));
                plan.facts =
                    inspect_for_submit(ctx, plan.pool, &plan.ask, plan.check, read).await?;
                plan.facts_read_at = at;
            }
        }
        match append_receipt(ctx, req, plan, &intent) {
            // A submitter without --wait took the room meanwhile: wait again, first in line.
            Err(OpError::Refused(Refusal::Budget { .. })) if ticket.is_some() => continue,
            Ok((bound, node)) => {
                plan.node = Some(node);
                return Ok(bound);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Under the lock: every check of a submit again, on the journal as it is now, and if they
/// pass, the receipt: `intent`, the node the worker is placed on, the assets it uses and its
/// trial, in one commit. What it bound, and the node.
fn append_receipt<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
    plan: &Plan<'_>,
    intent: &Event,
) -> Result<(Bound, String), OpError> {
    let submission_id = plan.submission_id;
    locked(ctx, |writer, state| {
        let pool = state
            .pools
            .pools
            .get(&req.pool)
            .filter(|p| p.allocation == plan.allocation)
            .ok_or_else(|| {
                OpError::Failed(format!(
                    "pool {} was detached or attached to another allocation while this \
                     submit asked Slurm; nothing was submitted. Check {} and submit again",
                    req.pool,
                    Next::PoolStatus(None)
                ))
            })?;
        if let Some(c) = &req.continues {
            crate::ops::submit::still_waiting(state, &c.continued, &plan.worker)?;
        }
        // A resubmission is made once: another `reconcile` may have made it meanwhile.
        if let Some(replaces) = req.replaces {
            let requests = &state.pools.requests;
            if requests.get(&replaces).is_none_or(|r| r.due.is_none()) {
                return Err(OpError::Failed(format!(
                    "worker {} (submission {replaces}) was resubmitted by another command \
                     meanwhile; nothing was submitted",
                    plan.worker
                )));
            }
        }
        let node = policy::check_submit(pool, &plan.facts, &plan.ask, &ctx.caller, ctx.now())?;
        let bound = req.spec.bind(state, &ctx.state_dir, submission_id)?;
        let placed = Event::WorkerPlaced(WorkerPlaced {
            submission_id,
            node: node.clone(),
            gpus: req.gpus,
        });
        let mut receipt = bound.receipt(intent.clone(), submission_id);
        receipt.insert(1, placed);
        if let Some(kept) = req.kept(submission_id) {
            receipt.push(Event::WorkerRequest(kept));
        }
        if let Some(replaces) = req.replaces {
            receipt.push(Event::WorkerResubmitted(WorkerResubmitted {
                submission_id,
                replaces,
            }));
        }
        receipt.extend(crate::ops::spec::continuation_events(
            req.continues.as_ref(),
            req.continuation.as_ref(),
            submission_id,
        ));
        writer.append(receipt)?;
        Ok((bound, node))
    })
}

/// The worker's directories, then the detached srun of its supervisor; `WorkerLaunched` with
/// the srun's pid, or `WorkerLaunchFailed` (definite or not, as srun's error says). The srun's
/// pid and when it was started.
async fn launch<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
    plan: &Plan<'_>,
    bound: &Bound,
) -> Result<(u32, tokio::time::Instant), OpError> {
    let (submission_id, worker, dirs) = (plan.submission_id, &plan.worker, &plan.dirs);
    let failed =
        |definite: bool, reason: String| launch_failed(ctx, req, submission_id, definite, reason);
    if let Err(e) = dirs.create(&ctx.state_dir) {
        failed(
            true,
            format!(
                "cannot create worker directories under {}: {e}",
                dirs.root.display()
            ),
        )?;
        return Err(OpError::Failed(format!(
            "worker {worker}: cannot create its directories under {}: {e}; nothing was launched and its budget is released",
            dirs.root.display()
        )));
    }
    let step = step_request(ctx, req, plan, bound);
    failpoint::hit("pool-submit-before-launch");
    let launched = ctx.sched.launch_step(&step).await;
    let launched_at = tokio::time::Instant::now();
    let srun_pid = match launched {
        Ok(l) => l.srun_pid,
        Err(e) => {
            let definite = e.nothing_happened();
            failed(definite, e.to_string())?;
            return Err(if definite {
                OpError::Failed(format!(
                    "worker {worker}: {e}; nothing was launched and its budget is released"
                ))
            } else {
                OpError::Unknown(format!(
                    "worker {worker} (submission {submission_id}): srun gave no answer ({e}); its budget stays \
                     held. Run {Reconcile} to resolve it"
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
    Ok((srun_pid, launched_at))
}

/// The srun request of the worker's step: the supervisor's command line in the allocation,
/// its CPUs and memory, its evidence files.
fn step_request<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
    plan: &Plan<'_>,
    bound: &Bound,
) -> StepRequest {
    let (spec, dirs) = (&req.spec, &plan.dirs);
    let publish_dir = published_dir(&ctx.pools_dir(), &req.pool);
    let command = supervisor::command_line(
        &ctx.exe,
        &ctx.state_dir,
        &supervisor::SupervisorArgs {
            submission_id: plan.submission_id,
            worker: &plan.worker,
            pool: Some(&req.pool),
            dirs,
            publish_dir: &publish_dir,
            deadline: plan.deadline.secs().to_string(),
            budgets: spec.budgets,
            append_only_glob: spec.append_only_glob.as_deref(),
            assets: &bound.assets,
            resume: req.continues.as_ref().map(|c| &c.resume),
        },
        &spec.command,
    );
    let mut step = StepRequest::new(
        plan.job,
        plan.step_name.clone(),
        spec.cpus,
        spec.mem,
        command,
    );
    // Without --overlap Slurm gives each worker CPUs no other worker holds, and the step's
    // cpuset confines it to them; with --overlap, workers were seen sharing CPU 0. The budget
    // check above keeps the steps from waiting on each other. On its node the request is one
    // Slurm can always lay out where placement found room: `--cpu-bind=none` (request.rs), so
    // the one task gets the step's CPUs as they are, never a layout over cores that slurmd may
    // refuse after the step was created (issue 36).
    step.overlap = false;
    // On the node its budget is held on, with exactly what it reserves there (`--exact`).
    step.node = plan.node.clone();
    // A step inherits every GPU of the job unless it asks: a worker that reserves none asks
    // for none, so it sees none (SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES unset).
    step.gres = Some(match req.gpus {
        0 => "none".to_owned(),
        n => format!("gpu:{n}"),
    });
    step.output = Some(dirs.evidence.join("stdout"));
    step.error = Some(dirs.evidence.join("stderr"));
    step.chdir = Some(dirs.checkout.clone());
    step.client_log = Some(client_log_path(dirs));
    // The supervisor sets the worker's DISPATCH_* variables for the payload: one place, and
    // nothing the coordinator's own environment holds can leak into them.
    step
}

/// `WorkerLaunchFailed` for worker `submission_id` (a definite one releases its budget), unless
/// another command settled it meanwhile.
fn launch_failed<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
    submission_id: Uuid,
    definite: bool,
    reason: String,
) -> Result<bool, OpError> {
    record(
        ctx,
        &req.pool,
        submission_id,
        vec![Event::WorkerLaunchFailed(WorkerLaunchFailed {
            submission_id,
            definite,
            reason,
        })],
    )
}

/// Record what the step search found: the step (unless reconcile recorded it, or settled the
/// worker, meanwhile), a launch proven failed (its budget released), or nothing (exit 4).
fn record_discovery<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
    plan: &Plan<'_>,
    discovery: Discovery,
    report: &mut SubmitReport,
) -> Result<(), OpError> {
    let (submission_id, worker, job) = (plan.submission_id, &plan.worker, plan.job);
    let failed = |reason: &str| launch_failed(ctx, req, submission_id, true, reason.to_owned());
    match discovery {
        Discovery::Found(step_no) => {
            let unseen = |state: &State| {
                active_worker(state, &req.pool, submission_id)
                    .is_some_and(|w| w.step_id != Some(step_no))
            };
            let seen = WorkerStepObserved {
                submission_id,
                step_id: step_no,
            };
            append_if(ctx, unseen, vec![Event::WorkerStepObserved(seen)])?;
            report.step_id = Some(format!("{job}.{step_no}"));
            Ok(())
        }
        Discovery::CreationFailed(reason) => {
            failed(&reason)?;
            Err(OpError::Failed(format!(
                "worker {worker}: Slurm refused to create its step: {reason}; its budget is released"
            )))
        }
        Discovery::LaunchRefused { step, proof } => {
            failed(&proof)?;
            Err(OpError::Failed(format!(
                "worker {worker}: step {job}.{step}: {proof}; nothing of it ran and its budget \
                 is released. See {}",
                client_log_path(&plan.dirs).display()
            )))
        }
        Discovery::NeverRan(proof) => {
            failed(&proof)?;
            Err(OpError::Failed(format!(
                "worker {worker}: {proof}; its budget is released. See {}",
                client_log_path(&plan.dirs).display()
            )))
        }
        Discovery::NotSeen(why) => {
            // Launched, but neither seen nor proven never to have run: the outcome is unknown
            // (CLI.md: exit 4), and the budget stays held until reconcile settles it.
            ctx.snapshot_quietly();
            Err(OpError::Unknown(format!(
                "worker {worker} (submission {submission_id}): its step {} was not seen within {} s \
                 ({why}); the launch outcome is unknown and its budget stays held. Run \
                 {Reconcile} (or {PoolRefresh}) to resolve it",
                plan.name,
                STEP_DISCOVERY_TIMEOUT.as_secs()
            )))
        }
    }
}

enum Discovery {
    /// The step runs: the supervisor recorded its start, or srun said its task started (or,
    /// at the end of the search, the step was created and nothing said more).
    Found(u32),
    CreationFailed(String),
    /// The controller created step `step`, slurmd refused to launch its task, in srun's words,
    /// and nothing of the supervisor started (`policy::reconcile::launch_refused`).
    LaunchRefused {
        step: u32,
        proof: String,
    },
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
    use crate::sys::ChildEnd;
    let Ok(raw) = i32::try_from(pid) else {
        return None;
    };
    match crate::sys::waitpid_nohang(raw) {
        Ok(Some(ChildEnd::Exited(code))) => {
            return Some(format!("(pid {pid}) exited with code {code}"))
        }
        Ok(Some(ChildEnd::Signaled(signal))) => {
            return Some(format!("(pid {pid}) was killed by signal {signal}"))
        }
        Ok(Some(ChildEnd::Other)) => return Some(format!("(pid {pid}) ended")),
        Ok(None) => return None,
        Err(_) => {}
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

/// Find the step a detached srun created and learn whether it runs: by the step id the
/// supervisor recorded at its start, or the step srun announced in its client log once srun
/// also said its task started (file reads, looked at every few ms; most often the step is
/// found so, with no Slurm call). srun's announcement, or the step in the listing, says only
/// that the controller created the step: slurmd may still refuse to launch its task, and srun
/// then says so in its own words (a definite launch failure, `LaunchRefused`), within
/// milliseconds. A step listed before srun announced it is found as listed. When the srun
/// has exited without a step, wait out the settle delay and ask whether together the evidence
/// proves that the step never ran. A step created but neither started nor refused by the end
/// is reported as found, as the step listing would: reconcile settles it.
async fn discover_step<S: Scheduler>(ctx: &Ctx<S>, search: &StepSearch<'_>) -> Discovery {
    let StepSearch {
        job,
        name,
        dirs,
        srun_pid,
        launched_at,
        ..
    } = *search;
    let pools_dir = ctx.pools_dir();
    let mut last_unknown = None;
    let mut srun_exit: Option<String> = None;
    let mut created: Option<u32> = None;
    // srun announces the step 10-15 ms after it starts (measured on both dev clusters): the
    // listing is for an srun that has not, so the first waits a few times that, and a listing
    // asked sooner would only load the controller while it creates the step (and while other
    // workers' steps start and end). Then look often, and back off.
    let mut poll = Poller::new(FIRST_LISTING, POLL);
    loop {
        // Meanwhile srun's client log and the supervisor's own journal (file reads) are looked
        // at every few ms: either tells as soon as the step runs or its launch failed.
        let until = tokio::time::Instant::now() + poll.next_pause();
        while tokio::time::Instant::now() < until {
            tokio::time::sleep(FILE_POLL).await;
            if let Some(found) = launch_news(&pools_dir, dirs, job, &mut created) {
                return found;
            }
        }
        if created.is_none() {
            match ctx.sched.list_steps(job).await {
                // Listed before srun announced it: found, as the listing shows it (srun's
                // word on the launch, when it comes, is read once it announced the step).
                Answer::Live(rows) => {
                    if let Some(n) = numbered_step_named(&rows, name) {
                        if srun_log::launched_step(&client_log(dirs), job).is_none() {
                            return Discovery::Found(n);
                        }
                    }
                }
                Answer::Gone(_) => {}
                Answer::Unknown(e) => last_unknown = Some(e.to_string()),
            }
        }
        if srun_exit.is_none() {
            srun_exit = srun_ended(srun_pid);
        }
        // Read after srun's end was seen, so what it said before it ended is in the log.
        if let Some(found) = launch_news(&pools_dir, dirs, job, &mut created) {
            return found;
        }
        if let Some(exit) = &srun_exit {
            if let Some(found) = after_srun_ended(ctx, search, exit, created).await {
                return found;
            }
        }
        if launched_at.elapsed() > STEP_DISCOVERY_TIMEOUT {
            return match created {
                Some(step) => Discovery::Found(step),
                None => {
                    Discovery::NotSeen(last_unknown.unwrap_or_else(|| "still pending".to_owned()))
                }
            };
        }
    }
}

/// What is known once the worker's srun has ended (`exit`: how) with no word of its launch:
/// the controller's refusal to create the step; the step it created (`created`), found, as
/// reconcile will settle it; or, past the settle delay, whether the step is proven never to
/// have run. `None` while the settle delay runs.
async fn after_srun_ended<S: Scheduler>(
    ctx: &Ctx<S>,
    search: &StepSearch<'_>,
    exit: &str,
    created: Option<u32>,
) -> Option<Discovery> {
    let dirs = search.dirs;
    if let Some(line) = srun_log::step_refused(&client_log(dirs)) {
        return Some(Discovery::CreationFailed(line.to_owned()));
    }
    if let Some(step) = created {
        return Some(Discovery::Found(step));
    }
    if search.launched_at.elapsed() < reconcile_policy::NEVER_RAN_SETTLE {
        return None;
    }
    Some(match never_ran(ctx, search, exit).await {
        Some(proof) => Discovery::NeverRan(proof),
        None => Discovery::NotSeen(format!(
            "the srun client {exit} and no step was seen, but that it never ran is not proven; \
             see {}",
            client_log_path(dirs).display()
        )),
    })
}

/// What the worker's files say of its launch so far (file reads): the step the supervisor
/// recorded at its start; or the step srun announced (kept in `created`) once srun said its
/// task started, or that its launch failed with no supervisor start
/// ([`reconcile_policy::launch_refused`]). `None` while neither has said.
fn launch_news(
    pools_dir: &Path,
    dirs: &WorkerDirs,
    job: JobId,
    created: &mut Option<u32>,
) -> Option<Discovery> {
    let started = report::read(&dirs.evidence)
        .ok()
        .flatten()
        .and_then(|r| r.started);
    if let Some(step) = started.and_then(|s| s.step_id) {
        return Some(Discovery::Found(step));
    }
    let log = client_log(dirs);
    let step = srun_log::launched_step(&log, job)?;
    *created = Some(step);
    if srun_log::tasks_started(&log) {
        return Some(Discovery::Found(step));
    }
    let words = srun_log::launch_refused(&log, job, step)?;
    let proof =
        reconcile_policy::launch_refused(Some(&words), supervisor_started(pools_dir, dirs))?;
    Some(Discovery::LaunchRefused { step, proof })
}

/// srun's own words that the launch of the step it announced in the worker's client log
/// failed (`slurm::srun_log::launch_refused`), if it said so: for `reconcile`, which judges
/// them beside the supervisor's journal (`policy::reconcile::launch_refused`).
pub(crate) fn srun_refused_launch(dirs: &WorkerDirs, job: JobId) -> Option<String> {
    let log = client_log(dirs);
    srun_log::launch_refused(&log, job, srun_log::launched_step(&log, job)?)
}

/// Where the worker's srun writes its own stderr.
fn client_log_path(dirs: &WorkerDirs) -> std::path::PathBuf {
    dirs.evidence.join("srun-client.log")
}

/// How much of srun's stderr is read: its step announcement or refusal comes within the first
/// lines, and the log is read every few ms while the step is looked for.
const CLIENT_LOG_READ: u64 = 64 * 1024;

/// What the worker's srun has said on its stderr so far (empty before it said anything), at
/// most [`CLIENT_LOG_READ`] bytes.
fn client_log(dirs: &WorkerDirs) -> String {
    use std::io::Read;
    let mut bytes = Vec::new();
    let _ = std::fs::File::open(client_log_path(dirs))
        .and_then(|f| f.take(CLIENT_LOG_READ).read_to_end(&mut bytes));
    String::from_utf8_lossy(&bytes).into_owned()
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
