//! `pool submit --dry-run`: every check `pool submit` makes before its receipt (the request,
//! the pool, the assets and trial, the allocation's identity, owner and lifetime as Slurm says
//! now, the budget, the worker's directories), and nothing else: no lock is taken, nothing is
//! journaled or created, no step is started.

use serde::Serialize;
use uuid::Uuid;

use super::{read_facts, step_name};
use crate::event::Micros;
use crate::journal::JournalError;
use crate::names::check_path_name;
use crate::ops::context::Ctx;
use crate::ops::error::OpError;
use crate::policy::pool::{self as policy, Refusal, WorkerAsk};
use crate::slurm::{JobId, JobName, Scheduler};
use crate::state::State;
use crate::worker::dirs::WorkerDirs;

use super::SubmitRequest;

/// What `pool submit` would do (docs/cli.md, `pool submit --dry-run`).
#[derive(Debug, Serialize)]
pub struct SubmitPlan {
    pub dry_run: bool,
    pub pool: String,
    pub worker: String,
    pub job_id: JobId,
    pub step_name: String,
    pub cpus: u32,
    pub mem_mb: u64,
    /// `now`, or `after_waiting` (`--wait`, and the pool is full now).
    pub room: &'static str,
    /// The allocation's CPUs and MB reserved now, and its capacity.
    pub reserved_cpus: u64,
    pub reserved_mem_mb: u64,
    pub capacity_cpus: u32,
    pub capacity_mem_mb: u64,
    /// When the worker would be told to shut down (RFC 3339).
    pub early_shutdown_at: String,
    pub assets: Vec<String>,
}

/// The journal's state as it is, without the lock; no journal yet is an empty state.
pub(crate) fn state_now<S: Scheduler>(ctx: &Ctx<S>) -> Result<State, OpError> {
    match ctx.load() {
        Ok(l) => Ok(l.state),
        Err(OpError::Journal(JournalError::Missing(_))) => Ok(State::default()),
        Err(e) => Err(e),
    }
}

pub async fn submit_dry_run<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
    waiting: bool,
) -> Result<SubmitPlan, OpError> {
    check_path_name("pool", &req.pool).map_err(OpError::Usage)?;
    let spec = &req.spec;
    spec.check()?;
    // A made-up id: the name a real submit would default to differs (it takes a new one).
    let submission_id = Uuid::new_v4();
    let worker = spec.name(submission_id);
    let state = state_now(ctx)?;
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
        budgets: spec.budgets,
    };
    let bound = spec.bind(&state, &ctx.state_dir, submission_id)?;
    let job = pool.allocation.job_id;
    let facts = read_facts(ctx, job).await?;
    let now = ctx.now();
    let room = if waiting {
        policy::check_submit_to_wait(pool, &facts, &ask, &ctx.caller, now)?;
        match policy::check_room(pool, &facts, &ask) {
            Ok(()) => "now",
            Err(_) => "after_waiting",
        }
    } else {
        policy::check_submit(pool, &facts, &ask, &ctx.caller, now)?;
        "now"
    };
    let name = step_name(&req.pool, &worker);
    JobName::new(name.clone()).map_err(|e| OpError::Usage(e.to_string()))?;
    WorkerDirs::new(&ctx.pools_dir(), &req.pool, submission_id).check(&ctx.state_dir)?;
    let (reserved_cpus, reserved_mem_mb) = pool.reserved();
    let deadline: Micros = policy::early_shutdown_deadline(pool.allocation.end_time, &spec.budgets);
    Ok(SubmitPlan {
        dry_run: true,
        pool: req.pool.clone(),
        worker,
        job_id: pool.allocation.job_id,
        step_name: name,
        cpus: spec.cpus,
        mem_mb: spec.mem.get(),
        room,
        reserved_cpus,
        reserved_mem_mb,
        capacity_cpus: pool.allocation.cpus.min(facts.cpus),
        capacity_mem_mb: pool.allocation.mem_mb.min(facts.mem_mb),
        early_shutdown_at: deadline.to_rfc3339(),
        assets: bound.assets.iter().map(|a| a.name.clone()).collect(),
    })
}
