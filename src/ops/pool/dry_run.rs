//! `pool submit --dry-run`: every check `pool submit` makes before its receipt (the request,
//! the pool, the assets and trial, the allocation's identity, owner and lifetime as Slurm says
//! now, the budget, the worker's directories), and nothing else: no lock is taken, nothing is
//! journaled or created, no step is started.

use serde::Serialize;

use super::submit::plan;
use crate::names::check_path_name;
use crate::ops::context::Ctx;
use crate::ops::error::OpError;
use crate::policy::placement::{self, NodeRoom};
use crate::slurm::{JobId, Scheduler};

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
    pub gpus: u32,
    /// The node it would run on; none while a `--wait` would wait for room.
    pub node: Option<String>,
    pub room: Room,
    /// The allocation's CPUs and MB reserved now, and its capacity.
    pub reserved_cpus: u64,
    pub reserved_mem_mb: u64,
    pub capacity_cpus: u32,
    pub capacity_mem_mb: u64,
    /// When the worker would be told to shut down (RFC 3339).
    pub early_shutdown_at: String,
    pub assets: Vec<String>,
    /// Each node's capacity and reservations now, in the allocation's order.
    pub nodes: Vec<NodeRoom>,
}

/// When a submit would find room.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Room {
    Now,
    /// `--wait`, and the pool is full now.
    AfterWaiting,
}

impl std::fmt::Display for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Room::Now => "now",
            Room::AfterWaiting => "after waiting",
        })
    }
}

/// `pool submit --dry-run`: the submit's own [`plan`] on the journal as it is (no lock), and
/// with `waiting`, whether the pool has room now.
pub async fn submit_dry_run<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &SubmitRequest,
    waiting: bool,
) -> Result<SubmitPlan, OpError> {
    check_path_name("pool", &req.pool).map_err(OpError::Usage)?;
    req.spec.check()?;
    let state = ctx.read_state()?;
    let plan = plan(ctx, req, &state, waiting).await?;
    let room = match plan.node {
        Some(_) => Room::Now,
        None => Room::AfterWaiting,
    };
    let (reserved_cpus, reserved_mem_mb) = plan.pool.reserved();
    let nodes = placement::node_rooms(plan.pool, &plan.facts.live_shares());
    // `pool status` sums the same rooms, as recorded (no Slurm call).
    let capacity = placement::capacity_now(&nodes);
    Ok(SubmitPlan {
        dry_run: true,
        pool: req.pool.clone(),
        worker: plan.worker,
        job_id: plan.job,
        step_name: plan.name,
        cpus: req.spec.cpus,
        mem_mb: req.spec.mem.get(),
        gpus: req.gpus,
        node: plan.node,
        room,
        reserved_cpus,
        reserved_mem_mb,
        capacity_cpus: u32::try_from(capacity.cpus).unwrap_or(u32::MAX),
        capacity_mem_mb: capacity.mem_mb,
        early_shutdown_at: plan.deadline.to_rfc3339(),
        assets: plan.assets,
        nodes,
    })
}
