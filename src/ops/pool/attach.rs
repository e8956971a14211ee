//! `dispatch pool attach` and `pool detach`: a user's running allocation becomes a pool, and stops being one.

use serde::Serialize;

use super::{locked, read_facts};
use crate::event::pool::*;
use crate::event::{Event, Micros};
use crate::names::check_path_name;
use crate::ops::context::Ctx;
use crate::ops::error::OpError;
use crate::policy::pool::{self as policy};
use crate::slurm::{JobId, Scheduler};

#[derive(Debug, Serialize)]
pub struct AttachReport {
    pub pool: String,
    pub allocation: AllocationView,
}

#[derive(Debug, Serialize)]
pub struct AllocationView {
    pub job_id: JobId,
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
    pub(super) fn of(
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

#[derive(Debug, Serialize)]
pub struct DetachReport {
    pub pool: String,
    pub job_id: JobId,
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
