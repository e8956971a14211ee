//! `session launch --dry-run`: what a launch would do, found as a launch finds it (the record's
//! job probed, a live job of this target looked for by name), and for a submit, `sbatch
//! --test-only` with the target's placement. No token lock, nothing journaled or written, no
//! job submitted, no wait.

use serde::Serialize;

use super::launch::{placement, LaunchRequest};
use super::{name_probe, session, token_clash, Env, OpError, Resolved};
use crate::ops::reconcile::grace_of;
use crate::policy::session::recorded::{recorded, Recorded};
use crate::slurm::{BatchPayload, BatchRequest, JobId, Placement, Preempted, Scheduler};

/// What `session launch` would do (docs/cli.md, `session launch --dry-run`).
#[derive(Debug, Serialize)]
pub struct LaunchPlan {
    pub dry_run: bool,
    pub mirror: String,
    pub target: String,
    pub job_name: String,
    pub would: Would,
    pub job_id: Option<JobId>,
    /// For a submit: what `sbatch --test-only` said (start time, nodes, partition). A salloc
    /// target is tested the same way: its placement is the same, and salloc has no test mode.
    pub would_start: Option<String>,
    pub nodes: Option<String>,
    pub partition: Option<String>,
    /// The job it would reuse or adopt is in Slurm's preemption grace (`{"at", "ends_at"}`,
    /// as `session launch` gives it); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preempted: Option<Preempted>,
}

crate::words! {
    /// What `session launch` would do.
    pub enum Would {
        Reuse => "reuse",
        Adopt => "adopt",
        /// The record's job is ending.
        WaitThenSubmit => "wait_then_submit",
        Submit => "submit",
    }
}

pub async fn launch_dry_run<S: Scheduler>(
    env: &Env<'_, S>,
    req: &LaunchRequest,
) -> Result<LaunchPlan, OpError> {
    let r = env.resolve(&req.mirror, &req.target)?;
    let placement = placement(env, &r)?;
    let state = env.ctx.read_state()?;
    token_clash(&state, &r)?;
    let mut plan = LaunchPlan::submit(&r);
    let mut exclude = Vec::new();
    if let Some(job) = session(&state, &r.key).and_then(|s| s.job_id()) {
        let (probe, held, preempt_hint) = super::hold::probe_held(env, job).await;
        match recorded(probe, held) {
            // A held batch job is kept by the launch that settles it (or yields to an older
            // job of the session, which a dry run cannot know without acting); a held salloc
            // job is cancelled.
            Recorded::Reuse { .. } | Recorded::SettleHeld if !held || r.target.confined => {
                plan.would = Would::Reuse;
                plan.job_id = Some(job);
                plan.preempted = grace(env, job, preempt_hint).await;
                return Ok(plan);
            }
            Recorded::WaitThenSubmit(_) => plan.would = Would::WaitThenSubmit,
            Recorded::Reuse { .. } | Recorded::SettleHeld | Recorded::Gone(_) => {}
            Recorded::Unknown(e) => {
                return Err(OpError::Unknown(format!(
                    "could not verify Slurm job {job} of session {}: {e}; a launch would stop \
                     here too",
                    r.key
                )))
            }
        }
        exclude.push(job);
    }
    if let Some((job, preempt_hint)) = adoptable(env, &r, &exclude).await? {
        plan.would = Would::Adopt;
        plan.job_id = Some(job);
        plan.preempted = grace(env, job, preempt_hint).await;
        return Ok(plan);
    }
    test_submit(env, &r, placement, plan).await
}

impl LaunchPlan {
    /// A plan that submits, before anything is looked at.
    fn submit(r: &Resolved<'_>) -> LaunchPlan {
        LaunchPlan {
            dry_run: true,
            mirror: r.key.mirror.clone(),
            target: r.key.target.clone(),
            job_name: r.job_name.as_str().to_owned(),
            would: Would::Submit,
            job_id: None,
            would_start: None,
            nodes: None,
            partition: None,
            preempted: None,
        }
    }
}

/// Whether `job` is in Slurm's preemption grace, asked only on squeue's hint (as a launch).
async fn grace<S: Scheduler>(env: &Env<'_, S>, job: JobId, hint: bool) -> Option<Preempted> {
    match hint {
        true => grace_of(env.ctx, job).await,
        false => None,
    }
}

/// The job a launch would adopt by name (and whether squeue hints at a preemption's grace),
/// `None` when it would submit; an error where the probe cannot vouch that no job of this target runs, as launch
/// decides: a failed probe blocks, and an unheld launch needs its empty listing corroborated.
async fn adoptable<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    exclude: &[JobId],
) -> Result<Option<(JobId, bool)>, OpError> {
    let probe = name_probe(env, r, exclude).await;
    if let Some((job, seen)) = probe.plan.as_ref().and_then(|p| p.adopted()) {
        return Ok(Some((job, seen.preempt_hint)));
    }
    if let Some(lines) = probe.unreadable {
        return Err(OpError::Unknown(format!(
            "squeue lists a job named {} that dispatch cannot read ({lines:?}); a launch would \
             submit nothing",
            r.job_name
        )));
    }
    // A launch submits held: its own held job is the watermark of the listing that releases
    // it, so an empty listing here stops nothing (a failed probe does, below).
    match probe.cannot_vouch() {
        Some(why) => Err(OpError::Unknown(format!(
            "{}: {why}; a launch would submit nothing",
            r.key
        ))),
        None => Ok(None),
    }
}

/// `sbatch --test-only` with the target's placement: when and where a submit would start.
async fn test_submit<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    placement: Placement,
    mut plan: LaunchPlan,
) -> Result<LaunchPlan, OpError> {
    let mut batch = BatchRequest::new(r.job_name.clone(), BatchPayload::Wrap(":".to_owned()));
    batch.placement = placement;
    let tested = env.ctx.sched.test_batch(&batch).await.map_err(|e| {
        OpError::Failed(format!(
            "`sbatch --test-only` says a job for {} would not go: {e}; nothing was submitted",
            r.key
        ))
    })?;
    plan.would_start = Some(tested.start);
    plan.nodes = Some(tested.nodes);
    plan.partition = Some(tested.partition);
    Ok(plan)
}
