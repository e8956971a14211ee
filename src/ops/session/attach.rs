//! `dispatch session attach`: the argv of `srun --jobid=J --overlap --pty CMD` for a session
//! whose job runs. The CLI execs it. Nothing is written, except to heal: a lost record is
//! found by name, and a job its dead launch left held is settled (`hold`).

use std::ffi::OsString;

use super::{
    adopt_or_vouch, command_for, ended_of, hold, lock_session, session, Env, OpError, Resolved,
};
use crate::ops::reconcile::grace_of;
use crate::policy::session::Probe;
use crate::slurm::{JobId, JobState, Preempted, Scheduler};

#[derive(Clone, Debug)]
pub struct AttachPlan {
    pub job: JobId,
    pub node: Option<String>,
    /// Arguments to `srun` (without the program).
    pub argv: Vec<OsString>,
    /// Slurm preempted the job and its grace runs: attached to all the same (it is live),
    /// with a warning saying when Slurm kills it.
    pub preempted: Option<Preempted>,
}

/// `--jobid=J --overlap --pty CMD...`
pub fn srun_argv(job: JobId, command: &[String]) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![
        format!("--jobid={job}").into(),
        "--overlap".into(),
        "--pty".into(),
    ];
    argv.extend(command.iter().map(OsString::from));
    argv
}

/// The shell to attach with when no command is given: `$SHELL -l`, else `bash -l`.
pub fn default_command(shell: Option<String>) -> Vec<String> {
    vec![
        shell
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "bash".into()),
        "-l".into(),
    ]
}

/// Check that the session's job runs and say what to exec. An empty `command` means the
/// unconfined session's own command, else a login shell.
pub async fn plan<S: Scheduler>(
    env: &Env<'_, S>,
    mirror: &str,
    target: &str,
    command: &[String],
    shell: Option<String>,
) -> Result<AttachPlan, OpError> {
    let r = env.resolve(mirror, target)?;
    let state = env.ctx.read_state()?;
    let s = session(&state, &r.key);
    let job = match s.and_then(|s| s.job_id()) {
        Some(job) => job,
        None => find_by_name(env, &r).await?,
    };
    let command = if !command.is_empty() {
        command.to_vec()
    } else {
        match s.filter(|s| !s.confined && !s.command.is_empty()) {
            Some(s) => s.command.clone(),
            None => default_command(shell),
        }
    };
    let (job, probe, preempt_hint) = match hold::probe_held(env, job).await {
        (Probe::Live { .. }, true, _) => {
            let kept = hold::settle_recorded(env, &r, job).await?;
            (kept, env.probe(kept).await, false)
        }
        (probe, _, hint) => (job, probe, hint),
    };
    match probe {
        Probe::Live {
            state: JobState::Running,
            node,
        } => Ok(AttachPlan {
            job,
            node,
            argv: srun_argv(job, &command),
            preempted: match preempt_hint {
                true => grace_of(env.ctx, job).await,
                false => None,
            },
        }),
        Probe::Live { state, .. } => Err(OpError::Failed(format!(
            "Slurm job {job} of session {} is {state}, not running yet; attach once it starts",
            r.key
        ))),
        Probe::Gone { state } => {
            let since = s.and_then(|s| s.job.as_ref()).map(|j| j.since);
            let end = ended_of(env, job, state.as_ref(), since).await;
            Err(OpError::Failed(format!(
                "Slurm job {job} of session {} is over: {} ({}) -- the allocation has ended. {} \
                 clears the record; {} starts a new one",
                r.key,
                end.cause,
                end.proof,
                command_for("release", &r.key),
                command_for("launch", &r.key)
            )))
        }
        Probe::Unknown(e) => Err(OpError::Unknown(format!(
            "could not check Slurm job {job} of session {}: {e}. Nothing was done; retry",
            r.key
        ))),
    }
}

/// No job recorded (a lost state directory): find the session's live job by name, as launch
/// would, and record it; the attach then goes on as for a recorded job.
async fn find_by_name<S: Scheduler>(env: &Env<'_, S>, r: &Resolved<'_>) -> Result<JobId, OpError> {
    let (_lock, state) = lock_session(env, &r.token)?;
    if let Some(job) = session(&state, &r.key).and_then(|s| s.job_id()) {
        // Recorded meanwhile by a command that held the lock.
        return Ok(job);
    }
    let (probe, adopted) = adopt_or_vouch(env, r).await?;
    match (adopted, probe.cannot_vouch()) {
        (Some((job, _)), _) => Ok(job),
        (None, Some(why)) => Err(OpError::Unknown(format!(
            "no Slurm job is recorded for session {}, and {why}; nothing was done. Retry, or \
             look with `squeue --me --name={}`",
            r.key, r.job_name
        ))),
        (None, None) => Err(OpError::Failed(format!(
            "no Slurm job recorded for session {}, and none of its target runs under the name {}. \
             Run {}",
            r.key,
            r.job_name,
            command_for("launch", &r.key)
        ))),
    }
}
