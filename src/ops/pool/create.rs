//! `dispatch pool create`: an allocation dispatch makes and owns. Intent → `salloc --no-shell`
//! (named uniquely to the creation, `--immediate` = the wait) → its job recorded → wait until
//! it runs → attached with every check `pool attach` makes, and recorded as dispatch's
//! (`PoolOwned`, in the commit of its `PoolAttached`). A salloc without an answer leaves the
//! creation in the journal; the next `pool create` of the name, `pool release` or `reconcile`
//! finds its job by name, or proves after salloc's limit plus the settle margin that none was
//! made. Never a second allocation, never one nothing can reach.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
use uuid::Uuid;

use super::attach::AllocationView;
use super::{journal_id, locked, read_facts};
use crate::event::host::current_host;
use crate::event::pool::*;
use crate::event::{Event, Micros};
use crate::failpoint;
use crate::names::check_path_name;
use crate::next::Next::{self, Reconcile};
use crate::ops::context::{append_if, await_proof, micros_to_local, Ctx, STOP_PROOF_TIMEOUT};
use crate::ops::error::OpError;
use crate::ops::submit::job_name;
use crate::policy::holder::Holder;
use crate::policy::pool::{self as pool_policy, Refusal};
use crate::policy::pool_create::{self as policy, CreationSeen};
use crate::policy::reconcile::{self as reconcile_policy, Lost};
use crate::slurm::{
    AcctQuery, AcctRow, ActionError, AllocRequest, Answer, JobId, JobName, JobQuery, JobRow,
    MemoryMb, Placement, Scheduler, SlurmDuration,
};
use crate::state::pool::*;
use crate::state::State;

/// How often a wait says it is still waiting, and the pause between its polls.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);
/// How often squeue is asked about the job salloc waits for: its id is recorded as soon as it
/// is listed, and a reason that means it can never run ends the wait.
const LOOK_EVERY: Duration = Duration::from_secs(3);
/// How long salloc gets to exit once the job it waits for was cancelled (it says the job was
/// revoked and exits at once).
const SALLOC_AFTER_CANCEL: Duration = Duration::from_secs(10);
const POLL_EVERY: Duration = Duration::from_secs(2);
/// Failed polls in a row after which a wait gives up (outcome unknown).
const UNKNOWN_POLLS: u32 = 5;
/// How long a job salloc named before giving up gets to show its end (salloc cancels it
/// before it exits; squeue shows it `CANCELLED` within a poll here).
const HINT_SETTLE: Duration = Duration::from_secs(6);

pub use crate::ops::context::Progress;

#[derive(Clone, Debug)]
pub struct CreateRequest {
    pub pool: String,
    /// `job_name_prefix` from the config.
    pub job_name_prefix: String,
    pub cpus: u32,
    pub mem: MemoryMb,
    pub time: SlurmDuration,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub nodelist: Option<String>,
    /// How many nodes (`--nodes`); `cpus` and `mem` are per node. Over one node the job is
    /// made with `--no-kill`: a node's failure ends the steps on it, not the allocation.
    pub nodes: u32,
    /// GPUs on each node (`--gres=gpu:N`).
    pub gpus_per_node: u32,
    /// How long salloc may wait for the allocation (`--immediate`), and a found job to run.
    pub wait: Duration,
    /// `--renew`: keep the pool across allocations, within these bounds.
    pub renew: Option<RenewBounds>,
}

/// What `--renew`, `--renew-until`, `--renew-max` and `--renew-overlap` asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RenewBounds {
    pub until: Option<Micros>,
    pub max_allocations: Option<u32>,
    pub overlap: bool,
}

#[derive(Debug, Serialize)]
pub struct CreateReport {
    pub pool: String,
    pub action: CreateAction,
    pub job_name: String,
    pub owner: super::status::Owner,
    pub allocation: AllocationView,
}

/// What a `pool create` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CreateAction {
    /// This command's salloc made the allocation.
    Created,
    /// An earlier, interrupted create's allocation, found by its name.
    Adopted,
}

crate::display_as_serde!(CreateAction);

/// The Slurm job name of one creation: `<prefix>pool-<pool>-<8 hex digits of its id>`, the
/// shape of `dispatch submit`'s names (`ops::submit::job_name`).
pub fn creation_job_name(prefix: &str, pool: &str, id: Uuid) -> String {
    job_name(prefix, &format!("pool-{pool}"), id)
}

/// The salloc of a creation. Its `--comment` marks the allocation as held by this journal
/// (`policy::holder`), so another state directory's `pool attach` of it is refused.
pub(super) fn alloc_request(
    req: &CreateRequest,
    name: JobName,
    holder: &Holder,
) -> Result<AllocRequest, OpError> {
    let mut r = AllocRequest::new(name);
    r.placement = Placement {
        partition: req.partition.clone(),
        account: req.account.clone(),
        qos: req.qos.clone(),
        time: Some(req.time),
        nodes: Some(req.nodes),
        cpus_per_task: Some(req.cpus),
        mem: Some(req.mem),
    };
    r.immediate_secs = Some(req.wait.as_secs().clamp(1, 86_400) as u32);
    r.extra = vec![format!("--comment={}", holder.mark())];
    if let Some(node) = &req.nodelist {
        r.extra.push(format!("--nodelist={node}"));
    }
    if req.gpus_per_node > 0 {
        r.extra.push(format!("--gres=gpu:{}", req.gpus_per_node));
    }
    if req.nodes > 1 {
        r.extra.push("--no-kill".to_owned());
    }
    // Every value Slurm would misread fails here, before the intent.
    r.argv().map_err(|e| OpError::Usage(e.to_string()))?;
    Ok(r)
}

/// `PoolCreateIntent` for a new creation of `req.pool`, unless another began meanwhile: the
/// intent, and the salloc request it announces.
fn write_intent<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &CreateRequest,
    time_s: u64,
    journal: Uuid,
) -> Result<(PoolCreateIntent, AllocRequest), OpError> {
    let pool = req.pool.as_str();
    let creation_id = Uuid::new_v4();
    let name = JobName::new(creation_job_name(&req.job_name_prefix, pool, creation_id))
        .map_err(|e| OpError::Usage(e.to_string()))?;
    let holder = Holder::new(journal, &current_host(), pool);
    let alloc = alloc_request(req, name.clone(), &holder)?;
    let limit = ctx.sched.longest_call() + req.wait;
    let intent = PoolCreateIntent {
        pool: pool.to_owned(),
        creation_id,
        job_name: name.as_str().to_owned(),
        salloc_limit_s: u32::try_from(limit.as_secs_f64().ceil() as u64).unwrap_or(u32::MAX),
        cpus: req.cpus,
        mem_mb: req.mem.get(),
        time_s,
        partition: req.partition.clone(),
        account: req.account.clone(),
        qos: req.qos.clone(),
        nodelist: req.nodelist.clone(),
    };
    locked(ctx, |writer, state| {
        if policy::check_create(&state.pools, pool, time_s)?.is_some() {
            return Err(OpError::Failed(format!(
                "another {} started meanwhile; nothing was created. Run it again to adopt its \
                 allocation",
                Next::PoolCreate(&pool)
            )));
        }
        let mut events = vec![Event::PoolCreateIntent(intent.clone())];
        if req.nodes > 1 || req.gpus_per_node > 0 {
            events.push(Event::PoolCreateShape(PoolCreateShape {
                pool: pool.to_owned(),
                creation_id,
                nodes: req.nodes,
                gpus_per_node: req.gpus_per_node,
                no_kill: req.nodes > 1,
            }));
        }
        if let Some(b) = req.renew {
            events.push(Event::PoolRenewalAsked(PoolRenewalAsked {
                pool: pool.to_owned(),
                creation_id,
                until: b.until,
                max_allocations: b.max_allocations,
                overlap: b.overlap,
            }));
        }
        writer.append(events)?;
        Ok(())
    })?;
    Ok((intent, alloc))
}

/// The job salloc answered with, or the one it named before its answer broke off (then
/// recorded as an unknown failure, and why); a failure without a job is settled by
/// [`salloc_failed`].
fn salloc_job<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &PoolCreateIntent,
    answer: Result<crate::slurm::Allocated, ActionError>,
) -> Result<(JobId, Option<String>), OpError> {
    match answer {
        Ok(a) => Ok((a.job_id, None)),
        // salloc printed its job's id before its answer broke off (`--immediate` ran out, or
        // it was killed): the allocation may exist, so that job is followed to its end or its
        // start instead of being guessed either way.
        Err(ActionError::Unknown {
            error,
            job_hint: Some(job),
        }) => {
            let reason = format!("outcome unknown: {error}");
            creation_failed(ctx, intent, false, reason.clone())?;
            Ok((job, Some(reason)))
        }
        Err(e) => Err(salloc_failed(ctx, intent, e)),
    }
}

pub async fn create<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &CreateRequest,
    progress: Progress<'_>,
) -> Result<CreateReport, OpError> {
    let pool = req.pool.as_str();
    check_path_name("pool", pool).map_err(OpError::Usage)?;
    let time_s = req
        .time
        .as_secs()
        .ok_or_else(|| OpError::Usage(format!("--time {} is not a finite duration", req.time)))?;
    let deadline = Instant::now() + req.wait;
    let (earlier, journal) = {
        let loaded = ctx.lock_and_load()?.1;
        let earlier = policy::check_create(&loaded.state.pools, pool, time_s)?.cloned();
        (earlier, journal_id(&loaded.state))
    };
    if let Some(c) = earlier {
        if let Some(adopted) = settle_earlier(ctx, &c, req.wait, deadline, progress).await? {
            return Ok(adopted);
        }
    }

    let (intent, alloc) = write_intent(ctx, req, time_s, journal)?;
    let name = alloc.name.clone();
    failpoint::hit("pool-create-after-intent");
    let answer = match allocate_with_progress(ctx, &alloc, &intent, progress).await? {
        Waited::Answered(answer) => answer,
        Waited::NeverRuns {
            job,
            reason,
            change,
        } => return Err(cancelled_never_runs(ctx, &intent, (job, reason, change)).await),
    };
    failpoint::hit("pool-create-after-salloc");
    let (job, unclear) = salloc_job(ctx, &intent, answer)?;
    let how = if unclear.is_some() {
        "salloc-pending"
    } else {
        "salloc"
    };
    record_job(ctx, &intent, job, how)?;
    failpoint::hit("pool-create-after-job");
    // A job salloc gave up on is cancelled by salloc itself: a few seconds show it over.
    let deadline = deadline.max(Instant::now() + HINT_SETTLE);
    match attach_created(ctx, &intent, job, deadline, progress).await? {
        Settled::Attached(allocation) => Ok(report(
            pool,
            CreateAction::Created,
            name.as_str(),
            &allocation,
        )),
        Settled::Ended(proof) => Err(OpError::Failed(match unclear {
            Some(reason) => format!(
                "pool {pool}: salloc did not get allocation {job} within the wait ({reason}); \
                 {proof}, so nothing is left. Wait longer (--wait) or ask for less"
            ),
            None => format!(
                "allocation {job} of pool {pool} ended before it could be attached ({proof}); \
                 nothing is left of it. Run {} again",
                Next::PoolCreate(&pool)
            ),
        })),
        Settled::Waiting { job, state, reason } => {
            Err(still_waiting(pool, job, &state, &reason, req.wait))
        }
    }
}

/// An earlier, interrupted creation of the pool, settled first: its allocation adopted (the
/// report), or proven to leave nothing (`None`: a new one is created), or still pending.
async fn settle_earlier<S: Scheduler>(
    ctx: &Ctx<S>,
    c: &Creation,
    wait: Duration,
    deadline: Instant,
    progress: Progress<'_>,
) -> Result<Option<CreateReport>, OpError> {
    let pool = c.intent.pool.as_str();
    match settle_creation(ctx, c, deadline, progress).await? {
        Settled::Attached(allocation) => Ok(Some(report(
            pool,
            CreateAction::Adopted,
            &c.intent.job_name,
            &allocation,
        ))),
        Settled::Ended(proof) => {
            progress(&format!(
                "the earlier create of pool {pool} left no allocation ({proof}); creating one"
            ));
            Ok(None)
        }
        Settled::Waiting { job, state, reason } => {
            Err(still_waiting(pool, job, &state, &reason, wait))
        }
    }
}

fn report(pool: &str, action: CreateAction, name: &str, a: &Allocation) -> CreateReport {
    CreateReport {
        pool: pool.to_owned(),
        action,
        job_name: name.to_owned(),
        owner: super::status::Owner::Created,
        allocation: AllocationView::of(a, None, None),
    }
}

fn release_cancels(pool: &str) -> String {
    format!("{} cancels it", Next::PoolRelease(&pool))
}

fn still_waiting(pool: &str, job: JobId, state: &str, reason: &str, wait: Duration) -> OpError {
    OpError::Failed(format!(
        "allocation {job} of pool {pool} is still {state} ({reason}) after the {} s wait. It is \
         recorded: {} again waits for it, {}",
        wait.as_secs(),
        Next::PoolCreate(&pool),
        release_cancels(pool)
    ))
}

/// What salloc's wait came to.
enum Waited {
    /// salloc answered.
    Answered(Result<crate::slurm::Allocated, ActionError>),
    /// Slurm keeps its job pending for a reason waiting never changes
    /// (`policy::never_runs`); the job is recorded and was cancelled.
    NeverRuns {
        job: JobId,
        reason: String,
        change: &'static str,
    },
}

/// salloc blocks while its job is pending: meanwhile squeue is asked by the job's name every
/// [`LOOK_EVERY`]. The job it lists is recorded at once (`PoolCreateJob`, found by name), so a
/// create interrupted from then on leaves its job named for `pool status` and `pool release`;
/// a reason that means the job can never run cancels it; and every [`PROGRESS_EVERY`] the
/// user is told what Slurm says it waits for.
async fn allocate_with_progress<S: Scheduler>(
    ctx: &Ctx<S>,
    alloc: &AllocRequest,
    intent: &PoolCreateIntent,
    progress: Progress<'_>,
) -> Result<Waited, OpError> {
    let pool = intent.pool.as_str();
    let salloc = ctx.sched.allocate(alloc);
    tokio::pin!(salloc);
    let started = Instant::now();
    let (mut told, mut recorded) = (started, false);
    loop {
        tokio::select! {
            answer = &mut salloc => return Ok(Waited::Answered(answer)),
            () = tokio::time::sleep(LOOK_EVERY) => {}
        }
        let rows = ctx
            .sched
            .list_jobs(&JobQuery::mine_named(alloc.name.clone()))
            .await;
        let row = rows
            .live()
            .and_then(|rows| rows.into_iter().find(|r| r.name == alloc.name.as_str()));
        if let Some(r) = &row {
            if !recorded {
                record_job(ctx, intent, r.job_id, "name")?;
                recorded = true;
            }
            if let Some(change) = policy::never_runs(&r.state, &r.reason) {
                if let Err(e) = ctx.sched.cancel_job(r.job_id).await {
                    tracing::warn!("scancel {}: {e}", r.job_id);
                }
                // salloc sees its job revoked and exits; its answer says nothing more.
                let _ = tokio::time::timeout(SALLOC_AFTER_CANCEL, &mut salloc).await;
                let (job, reason) = (r.job_id, r.reason.clone());
                return Ok(Waited::NeverRuns {
                    job,
                    reason,
                    change,
                });
            }
        }
        if told.elapsed() >= PROGRESS_EVERY {
            let said = row
                .map(|r| format!("job {} is {} ({})", r.job_id, r.state, r.reason))
                .unwrap_or_else(|| "squeue does not list it yet".to_owned());
            progress(&format!(
                "waiting for the allocation of pool {pool}: {said}; {} s so far (salloc gives \
                 up and cancels it after --wait)",
                started.elapsed().as_secs()
            ));
            told = Instant::now();
        }
    }
}

/// A creation whose job can never run, cancelled ([`Waited::NeverRuns`]): proven over, it is
/// a definite failure, refused (exit 3) with what to change; else exit 4, and `pool release`
/// finishes it (the job is recorded).
async fn cancelled_never_runs<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &PoolCreateIntent,
    (job, reason, change): (JobId, String, &str),
) -> OpError {
    let pool = intent.pool.clone();
    let Some(proof) = await_proof(STOP_PROOF_TIMEOUT, || job_over(ctx, job)).await else {
        return OpError::Unknown(format!(
            "allocation {job} of pool {pool} can never run (PENDING, {reason}); it was \
             cancelled but is not proven gone. {} finishes it",
            Next::PoolRelease(&pool)
        ));
    };
    let failure = format!("never runs: PENDING ({reason}); cancelled: {proof}");
    if let Err(e) = creation_failed(ctx, intent, true, failure) {
        return e;
    }
    OpError::Refused(Refusal::NeverRuns {
        pool,
        job_id: job,
        reason,
        change: change.to_owned(),
        proof,
    })
}

/// salloc did not grant the allocation and named no job: a definite refusal is exit 1 with
/// Slurm's words; an answer cut off is recorded as such (exit 4), and the job it may have made
/// is found by name later.
fn salloc_failed<S: Scheduler>(ctx: &Ctx<S>, intent: &PoolCreateIntent, e: ActionError) -> OpError {
    let pool = &intent.pool;
    let definite = e.nothing_happened();
    if let Err(j) = creation_failed(ctx, intent, definite, e.to_string()) {
        return j;
    }
    if definite {
        return OpError::Failed(format!(
            "pool {pool}: {e}. No allocation was created; correct the request and run {} again",
            Next::PoolCreate(&pool)
        ));
    }
    OpError::Unknown(format!(
        "pool {pool}: salloc gave no clear answer ({e}); an allocation named {:?} may exist. It \
         is recorded: {} or {Reconcile} finds it by name, {}",
        intent.job_name,
        Next::PoolCreate(&pool),
        release_cancels(pool)
    ))
}

/// The creation of `intent` as the journal holds it now, if it is still in flight.
fn creation_now<'s>(state: &'s State, intent: &PoolCreateIntent) -> Option<&'s Creation> {
    state
        .pools
        .creations
        .get(&intent.pool)
        .filter(|c| c.intent.creation_id == intent.creation_id)
}

/// `PoolCreateFailed` for creation `intent` if it is still in flight (another command may have
/// settled it while Slurm answered); else nothing.
pub(super) fn creation_failed<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &PoolCreateIntent,
    definite: bool,
    reason: String,
) -> Result<(), OpError> {
    let failed = Event::PoolCreateFailed(PoolCreateFailed {
        pool: intent.pool.clone(),
        creation_id: intent.creation_id,
        definite,
        reason,
    });
    append_if(
        ctx,
        |state| creation_now(state, intent).is_some(),
        vec![failed],
    )
    .map(drop)
}

fn record_job<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &PoolCreateIntent,
    job: JobId,
    how: &str,
) -> Result<(), OpError> {
    let recorded = Event::PoolCreateJob(PoolCreateJob {
        pool: intent.pool.clone(),
        creation_id: intent.creation_id,
        job_id: job,
        how: how.to_owned(),
    });
    let unrecorded =
        |state: &State| creation_now(state, intent).is_some_and(|c| c.job_id.is_none());
    append_if(ctx, unrecorded, vec![recorded]).map(drop)
}

/// Proof that `job` is over: a terminal state or "Invalid job id" for it (never an empty
/// answer).
pub(super) async fn job_over<S: Scheduler>(ctx: &Ctx<S>, job: JobId) -> Option<String> {
    let listed = ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
    match policy::seen_by_id(job, &listed.job(job), None) {
        CreationSeen::Over(proof) => Some(proof),
        _ => None,
    }
}

/// How an earlier creation ended up.
pub(crate) enum Settled {
    /// Its allocation is now the pool (recorded).
    Attached(Allocation),
    /// Nothing of it is left (recorded): a new one may be created.
    Ended(String),
    /// Its job does not run yet (recorded, still in flight).
    Waiting {
        job: JobId,
        state: String,
        reason: String,
    },
}

/// Resolve creation `c`: its job (known, or found by name: waiting, until `deadline` or its
/// salloc's limit plus the settle margin, for an salloc still in flight), attached once it
/// runs, or proven never made or over. A wait with nothing proven is exit 4.
pub(crate) async fn settle_creation<S: Scheduler>(
    ctx: &Ctx<S>,
    c: &Creation,
    deadline: Instant,
    progress: Progress<'_>,
) -> Result<Settled, OpError> {
    let job = match find_job(ctx, c, true, progress).await? {
        Found::Job(job) => job,
        Found::Nothing(_, proof) => return Ok(Settled::Ended(proof)),
        Found::Unknown(why) => return Err(OpError::Unknown(why)),
    };
    attach_created(ctx, &c.intent, job, deadline, progress).await
}

pub(crate) enum Found {
    /// Its job (recorded).
    Job(JobId),
    /// Proven never made, or made (the job, when found) and over (recorded).
    Nothing(Option<JobId>, String),
    Unknown(String),
}

/// What Slurm lists under job name `name` (of a creation or renewal intended at `since`): the
/// user's jobs (`--me --states=all`) and, once `settled` (its salloc's limit plus the margin
/// past), accounting by name.
pub(super) async fn look_by_name<S: Scheduler>(
    ctx: &Ctx<S>,
    name: &str,
    since: Micros,
    settled: bool,
) -> (Answer<Vec<JobRow>>, Option<Answer<Vec<AcctRow>>>) {
    let mine = ctx
        .sched
        .list_jobs(&JobQuery::mine_including_finished())
        .await;
    let sacct = if settled {
        let margin = Micros(reconcile_policy::SETTLE_MARGIN.as_micros() as i64);
        let names = JobName::new(name.to_owned()).ok().into_iter().collect();
        Some(
            ctx.sched
                .accounting(&AcctQuery {
                    jobs: vec![],
                    names,
                    since: micros_to_local(Micros(since.0 - margin.0)),
                })
                .await,
        )
    } else {
        None
    };
    (mine, sacct)
}

/// The config's `job_name_prefix` creation `intent`'s job was named under
/// ([`creation_job_name`]).
pub(super) fn creation_prefix(intent: &PoolCreateIntent) -> Option<String> {
    let hex = &intent.creation_id.simple().to_string()[..8];
    intent
        .job_name
        .strip_suffix(&format!("pool-{}-{hex}", intent.pool))
        .map(str::to_owned)
}

/// A job given out after `settled_at` (the same rule as a lost `dispatch submit`): without
/// one, an answer that lacks the creation's name proves nothing. Read without the writer's
/// lock, and kept no longer than this call: nothing is appended here, and a poll must not
/// hold up other commands or a whole state across its waits.
pub(super) fn watermark_now<S: Scheduler>(
    ctx: &Ctx<S>,
    settled_at: Micros,
) -> Result<Option<JobId>, OpError> {
    let state = ctx.load()?.state;
    let recorded = reconcile_policy::recorded_job_ids(&state);
    Ok(reconcile_policy::watermark(settled_at, recorded))
}

/// The job of creation `c`: the one recorded, else looked for by its name: squeue (`--me
/// --states=all`) and, once its salloc's limit plus the settle margin has passed, accounting.
/// `wait`: poll until found or settled (a create or release); else look once (reconcile).
pub(crate) async fn find_job<S: Scheduler>(
    ctx: &Ctx<S>,
    c: &Creation,
    wait: bool,
    progress: Progress<'_>,
) -> Result<Found, OpError> {
    if let Some(job) = c.job_id {
        return Ok(Found::Job(job));
    }
    let intent = &c.intent;
    let settle = reconcile_policy::settle_delay(Some(intent.salloc_limit_s));
    let settled_at = reconcile_policy::settled_at(c.since, settle);
    let mut told: Option<Instant> = None;
    let mut watermark_tried = false;
    loop {
        let now = ctx.now();
        let watermark = watermark_now(ctx, settled_at)?;
        let (mine, sacct) = look_by_name(ctx, &intent.job_name, c.since, now >= settled_at).await;
        match reconcile_policy::find_lost(
            &intent.job_name,
            c.since,
            now,
            settle,
            watermark,
            &mine,
            sacct.as_ref(),
        ) {
            Lost::Found { job, how, over } => {
                record_job(ctx, intent, job, "name")?;
                progress(&format!(
                    "found the allocation of the earlier create of pool {}: {how}",
                    intent.pool
                ));
                if let Some(over) = over {
                    creation_failed(ctx, intent, true, over.clone())?;
                    return Ok(Found::Nothing(Some(job), over));
                }
                return Ok(Found::Job(job));
            }
            Lost::NeverCreated(proof) => {
                creation_failed(ctx, intent, true, proof.clone())?;
                return Ok(Found::Nothing(None, proof));
            }
            Lost::Unknown(_) if wait && now < settled_at => {
                if told.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) {
                    progress(&format!(
                        "an earlier {} was interrupted while salloc ran; \
                         its allocation may still appear, so nothing is created for up to {} s \
                         while dispatch looks for {:?} by name",
                        Next::PoolCreate(&intent.pool),
                        (settled_at.0 - now.0).max(0) / 1_000_000,
                        intent.job_name
                    ));
                    told = Some(Instant::now());
                }
                tokio::time::sleep(POLL_EVERY).await;
            }
            // Past the settle point, only a job given out since was missing: make one (once)
            // and look again; the state then holds it.
            Lost::Unknown(Some(_)) if !watermark_tried => {
                watermark_tried = true;
                if let Some(prefix) = creation_prefix(intent) {
                    if let Err(e) = crate::ops::watermark::make(ctx, &prefix).await {
                        progress(&format!("no watermark job for pool {}: {e}", intent.pool));
                    }
                }
            }
            Lost::Unknown(why) => return Ok(unsettled(intent, settle, why)),
        }
    }
}

/// An interrupted creation Slurm's answers do not settle (yet); `why`, when known.
fn unsettled(intent: &PoolCreateIntent, settle: Duration, why: Option<String>) -> Found {
    Found::Unknown(format!(
        "an earlier create of pool {} may have made an allocation named {:?}, and Slurm's \
         answers do not settle it yet (settled {} s after its intent{}). Nothing was created. \
         Retry, or look with `squeue --me --name={}`",
        intent.pool,
        intent.job_name,
        settle.as_secs(),
        why.map(|w| format!("; {w}")).unwrap_or_default(),
        intent.job_name
    ))
}

/// Poll creation `intent`'s `job` until it runs (`None`), is proven over (recorded as a
/// definite failure) or still waits at `deadline`; several unknown answers in a row are an
/// unknown outcome.
async fn until_running<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &PoolCreateIntent,
    job: JobId,
    deadline: Instant,
    progress: Progress<'_>,
) -> Result<Option<Settled>, OpError> {
    let pool = intent.pool.as_str();
    let mut unknown = 0;
    let mut told: Option<(String, Instant)> = None;
    loop {
        let listed = ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
        match policy::seen_by_id(job, &listed.job(job), None) {
            CreationSeen::Running => return Ok(None),
            CreationSeen::Over(proof) => {
                creation_failed(ctx, intent, true, proof.clone())?;
                return Ok(Some(Settled::Ended(proof)));
            }
            CreationSeen::Waiting { state, reason } => {
                unknown = 0;
                if Instant::now() >= deadline {
                    return Ok(Some(Settled::Waiting { job, state, reason }));
                }
                let said = format!("{state} ({reason})");
                if told
                    .as_ref()
                    .is_none_or(|(s, at)| *s != said || at.elapsed() >= PROGRESS_EVERY)
                {
                    progress(&format!(
                        "allocation {job} of pool {pool} is {said}; waiting (it is recorded: {})",
                        release_cancels(pool)
                    ));
                    told = Some((said, Instant::now()));
                }
            }
            CreationSeen::Unknown => {
                unknown += 1;
                if unknown >= UNKNOWN_POLLS || Instant::now() >= deadline {
                    return Err(OpError::Unknown(format!(
                        "cannot tell whether allocation {job} of pool {pool} runs (squeue: \
                         {listed:?}); it is recorded: {} again attaches it, {}",
                        Next::PoolCreate(&pool),
                        release_cancels(pool)
                    )));
                }
            }
        }
        tokio::time::sleep(POLL_EVERY.min(deadline.saturating_duration_since(Instant::now())))
            .await;
    }
}

/// Wait (until `deadline`) for creation `intent`'s `job` to run, then attach it with every
/// check of `pool attach`, as dispatch's. An allocation that cannot be attached is dispatch's
/// to cancel: it is cancelled and proven gone, and the refusal returned.
pub(crate) async fn attach_created<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &PoolCreateIntent,
    job: JobId,
    deadline: Instant,
    progress: Progress<'_>,
) -> Result<Settled, OpError> {
    let pool = intent.pool.as_str();
    if let Some(settled) = until_running(ctx, intent, job, deadline, progress).await? {
        return Ok(settled);
    }
    let facts = match read_facts(ctx, job).await {
        Ok(f) => f,
        Err(OpError::Refused(r)) => return refused_after_grant(ctx, intent, job, r).await,
        Err(e) => return Err(e),
    };
    let attached = locked(ctx, |writer, state| {
        if creation_now(state, intent).is_none_or(|c| c.job_id != Some(job)) {
            return Err(OpError::Failed(format!(
                "the creation of pool {pool} was settled by another command meanwhile; {} \
                 shows it",
                Next::PoolStatus(Some(&pool))
            )));
        }
        match pool_policy::check_attach(&state.pools, pool, &facts, &ctx.caller, ctx.now()) {
            Ok(allocation) => {
                let mut events = super::attach::attached(pool, &allocation, &facts);
                events.push(Event::PoolOwned(PoolOwned {
                    pool: pool.to_owned(),
                    creation_id: intent.creation_id,
                    job_id: allocation.job_id,
                }));
                writer.append(events)?;
                Ok(Ok(allocation))
            }
            Err(r) => Ok(Err(r)),
        }
    })?;
    match attached {
        Ok(allocation) => Ok(Settled::Attached(allocation)),
        Err(r) => refused_after_grant(ctx, intent, job, r).await,
    }
}

/// A granted allocation that `pool attach` would refuse (too short, another user's, several
/// nodes): nobody else will use it, so it is cancelled and proven gone.
async fn refused_after_grant<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &PoolCreateIntent,
    job: JobId,
    r: Refusal,
) -> Result<Settled, OpError> {
    let pool = &intent.pool;
    if let Err(e) = ctx.sched.cancel_job(job).await {
        tracing::warn!("scancel {job}: {e}");
    }
    match await_proof(STOP_PROOF_TIMEOUT, || job_over(ctx, job)).await {
        Some(proof) => {
            let reason = format!("refused: {r}; cancelled: {proof}");
            creation_failed(ctx, intent, true, reason)?;
            Err(OpError::Refused(r))
        }
        None => Err(OpError::Unknown(format!(
            "allocation {job} cannot be pool {pool} ({r}); it was cancelled but is not proven \
             gone. {} finishes it",
            Next::PoolRelease(&pool)
        ))),
    }
}

/// What `reconcile` made of one creation in flight.
#[derive(Debug, Serialize)]
pub struct CreationReconciled {
    pub pool: String,
    pub job_name: String,
    pub outcome: CreationOutcome,
    pub detail: String,
}

/// Where a creation in flight stands after `reconcile` looked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CreationOutcome {
    /// It is the pool now, dispatch's.
    Attached,
    /// Nothing is left of it.
    Ended,
    /// Its job does not run yet.
    Waiting,
    Unknown,
}

crate::display_as_serde!(CreationOutcome);

/// `reconcile`'s look at creation `c`: its job found by name (once, no wait), attached if it
/// runs, recorded over if proven so. Never an error: what cannot be settled stays as it is.
pub(crate) async fn reconcile_creation<S: Scheduler>(
    ctx: &Ctx<S>,
    c: &Creation,
) -> CreationReconciled {
    let quiet = |_: &str| {};
    let outcome = |outcome, detail: String| CreationReconciled {
        pool: c.intent.pool.clone(),
        job_name: c.intent.job_name.clone(),
        outcome,
        detail,
    };
    let job = match find_job(ctx, c, false, &quiet).await {
        Ok(Found::Job(job)) => job,
        Ok(Found::Nothing(_, proof)) => return outcome(CreationOutcome::Ended, proof),
        Ok(Found::Unknown(why)) => return outcome(CreationOutcome::Unknown, why),
        Err(e) => return outcome(CreationOutcome::Unknown, e.to_string()),
    };
    match attach_created(ctx, &c.intent, job, Instant::now(), &quiet).await {
        Ok(Settled::Attached(a)) => outcome(
            CreationOutcome::Attached,
            format!(
                "allocation {} on {} is pool {}",
                a.job_id, a.node, c.intent.pool
            ),
        ),
        Ok(Settled::Ended(proof)) => outcome(CreationOutcome::Ended, proof),
        Ok(Settled::Waiting { job, state, reason }) => outcome(
            CreationOutcome::Waiting,
            format!("allocation {job} is {state} ({reason})"),
        ),
        Err(OpError::Refused(r)) => outcome(
            CreationOutcome::Ended,
            format!("refused and cancelled: {r}"),
        ),
        Err(e) => outcome(CreationOutcome::Unknown, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    /// Sessions tell these jobs from their own by this shape (`config::has_worker_job_shape`).
    #[test]
    fn pool_and_submit_job_names_have_the_worker_job_shape() {
        let id = uuid::Uuid::from_u128(0x00c7_7252_0000_4000_8000_0000_0000_0001);
        let prefix = "alice-";
        for name in [
            crate::ops::submit::job_name(prefix, "w1", id),
            super::creation_job_name(prefix, "ap", id),
        ] {
            let token = name.strip_prefix(prefix).unwrap();
            assert!(crate::config::has_worker_job_shape(token), "{name}");
        }
    }
}
