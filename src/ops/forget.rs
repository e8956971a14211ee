//! `dispatch forget`: an operator gives up on a worker or a session that no proof can settle.
//! Offline: no Slurm call (the cluster it ran on may be gone). Under the lock: decide, append
//! the decision, done; the report says what may still run and how to stop it.
//!
//! `policy::forget` decides what may be forgotten; `event::overrides` holds the events.

use serde::Serialize;

use super::context::Ctx;
use super::error::OpError;
use crate::event::session::SessionKey;
use crate::event::Event;
use crate::policy::forget as policy;
use crate::slurm::{JobId, Scheduler};

#[derive(Debug, Serialize)]
pub struct SessionRef {
    pub mirror: String,
    pub target: String,
}

crate::words! {
    /// What `forget` gave up.
    pub enum Forgot {
        Worker => "worker",
        Session => "session",
    }
}

/// What was given up, and by which event.
#[derive(Debug, Serialize)]
pub struct ForgetReport {
    pub forgot: Forgot,
    pub worker: Option<String>,
    pub submission_id: Option<String>,
    pub session: Option<SessionRef>,
    /// The state it was in, for a worker.
    pub state: Option<String>,
    pub job_id: Option<JobId>,
    pub step_id: Option<u32>,
    pub reason: String,
    pub seq: u64,
    /// What may still run, and the command that stops it.
    pub hint: Option<String>,
}

fn check_reason(reason: &str) -> Result<(), OpError> {
    policy::reason_problem("--reason", reason).map_or(Ok(()), |m| Err(OpError::Usage(m)))
}

pub fn forget_worker<S: Scheduler>(
    ctx: &Ctx<S>,
    key: &str,
    reason: &str,
) -> Result<ForgetReport, OpError> {
    check_reason(reason)?;
    let (writer, loaded) = ctx.lock_and_load()?;
    let decision = policy::plan_worker(&loaded.state, key, reason)?;
    let committed = writer.append_one(Event::WorkerForgotten(decision.clone()))?;
    Ok(ForgetReport {
        forgot: Forgot::Worker,
        worker: Some(decision.worker),
        submission_id: Some(decision.submission_id.to_string()),
        session: None,
        state: Some(decision.state),
        job_id: decision.job_id,
        step_id: decision.step_id,
        reason: decision.reason,
        seq: committed.seq,
        hint: policy::leftover_hint(decision.job_id, decision.step_id),
    })
}

pub fn forget_session<S: Scheduler>(
    ctx: &Ctx<S>,
    key: &SessionKey,
    reason: &str,
) -> Result<ForgetReport, OpError> {
    check_reason(reason)?;
    let (writer, loaded) = ctx.lock_and_load()?;
    let decision = policy::plan_session(&loaded.state, key, reason)?;
    let committed = writer.append_one(Event::SessionForgotten(decision.clone()))?;
    let job = decision.job_id;
    Ok(ForgetReport {
        forgot: Forgot::Session,
        worker: None,
        submission_id: decision.submission_id.map(|id| id.to_string()),
        session: Some(SessionRef {
            mirror: key.mirror.clone(),
            target: key.target.clone(),
        }),
        state: None,
        job_id: job,
        step_id: None,
        reason: decision.reason,
        seq: committed.seq,
        hint: policy::leftover_hint(job, None),
    })
}
