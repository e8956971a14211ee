//! `dispatch submit`: the ordinary path, one `sbatch` job per worker. The worker owns its whole
//! allocation. Intent first; an sbatch without an answer is recorded as "may exist" and keeps
//! its budget until `dispatch reconcile` finds the job by name or proves it over.

use std::os::unix::fs::OpenOptionsExt;

use serde::Serialize;
use uuid::Uuid;

use super::context::{snapshot_quietly, Ctx};
use super::error::OpError;
use crate::config::Target;
use crate::event::Event;
use crate::failpoint;
use crate::policy::pool::{Budgets, Refusal};
use crate::slurm::{
    BatchPayload, BatchRequest, JobName, MemoryMb, Placement, Scheduler, SlurmDuration,
};
use crate::state::jobs::*;
use crate::worker::dirs::{check_name, WorkerDirs};
use crate::worker::supervisor;

/// The batch script: it runs its arguments, unchanged. sbatch passes them through as argv, so
/// no shell ever parses the worker's command.
const BATCH_SCRIPT: &str =
    "#!/bin/sh\n# dispatch: run the arguments sbatch was given, unchanged.\nexec \"$@\"\n";

#[derive(Clone, Debug)]
pub struct JobSubmitRequest {
    pub target_name: Option<String>,
    pub target: Option<Target>,
    pub worker: Option<String>,
    pub cpus: u32,
    pub mem: MemoryMb,
    pub time: SlurmDuration,
    pub budgets: Budgets,
    pub grace_s: u32,
    pub command: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct JobSubmitReport {
    pub worker: String,
    pub submission_id: String,
    pub job_id: Option<u64>,
}

pub fn jobs_dir<S: Scheduler>(ctx: &Ctx<S>) -> std::path::PathBuf {
    ctx.state_dir.join("jobs")
}

pub async fn submit<S: Scheduler>(
    ctx: &Ctx<S>,
    req: &JobSubmitRequest,
) -> Result<JobSubmitReport, OpError> {
    if let Some(w) = &req.worker {
        check_name("worker", w).map_err(OpError::Usage)?;
    }
    if req.command.is_empty() {
        return Err(OpError::Usage("no command given after --".to_owned()));
    }
    let time_s = req
        .time
        .as_secs()
        .ok_or_else(|| OpError::Usage(format!("--time {} is not a finite duration", req.time)))?;
    let need_s = req.budgets.shutdown_window_s() + i64::from(req.budgets.min_run_s);
    if (time_s as i64) < need_s {
        return Err(Refusal::TimeLimitTooShort { time_s, need_s }.into());
    }
    let submission_id = Uuid::new_v4();
    let worker = req
        .worker
        .clone()
        .unwrap_or_else(|| format!("w-{}", &submission_id.simple().to_string()[..8]));
    let name = JobName::new(worker.clone()).map_err(|e| OpError::Usage(e.to_string()))?;
    let (writer, loaded) = ctx.lock_and_load()?;
    if loaded
        .state
        .jobs
        .active
        .values()
        .any(|j| j.worker == worker)
    {
        return Err(OpError::Refused(Refusal::DuplicateWorker {
            pool: "(submit)".to_owned(),
            worker,
        }));
    }
    let dirs = WorkerDirs::for_job(&jobs_dir(ctx), submission_id);

    writer.append_one(Event::JobSubmitIntent(JobSubmitIntent {
        submission_id,
        worker: worker.clone(),
        target: req.target_name.clone(),
        cpus: req.cpus,
        mem_mb: req.mem.get(),
        time_s,
        publication_timeout_s: req.budgets.publication_timeout_s,
        command: req.command.clone(),
    }))?;
    failpoint::hit("submit-after-intent");
    let script = dirs.root.join("batch.sh");
    let prepared = dirs.create().and_then(|()| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o700)
            .open(&script)?;
        f.write_all(BATCH_SCRIPT.as_bytes())?;
        f.sync_all()
    });
    if let Err(e) = prepared {
        writer.append_one(Event::JobSubmitFailed(JobSubmitFailed {
            submission_id,
            definite: true,
            reason: format!("cannot prepare {}: {e}", dirs.root.display()),
        }))?;
        return Err(OpError::Failed(format!(
            "worker {worker}: cannot prepare {}: {e}; nothing was submitted",
            dirs.root.display()
        )));
    }
    let deadline_after = time_s as i64 - req.budgets.shutdown_window_s();
    let args = supervisor::command_line(
        &ctx.exe,
        submission_id,
        &dirs.evidence,
        &format!("+{deadline_after}"),
        req.grace_s,
        &req.command,
    );
    let target = req.target.as_ref();
    let mut batch = BatchRequest::new(name, BatchPayload::Script { path: script, args });
    batch.placement = Placement {
        partition: target.map(|t| t.partition.clone()),
        account: target.map(|t| t.account.clone()),
        qos: target.and_then(|t| t.qos.clone()),
        time: Some(req.time),
        nodes: Some(1),
        cpus_per_task: Some(req.cpus),
        mem: Some(req.mem),
    };
    batch.output = Some(dirs.evidence.join("stdout"));
    batch.error = Some(dirs.evidence.join("stderr"));
    batch.chdir = Some(dirs.checkout.clone());
    batch.extra = vec!["--no-requeue".to_owned()];
    failpoint::hit("submit-before-sbatch");
    let outcome = ctx.sched.submit_batch(&batch).await;
    failpoint::hit("submit-after-sbatch");
    let job_id = match outcome {
        Ok(s) => u64::from(s.job_id.get()),
        Err(e) => {
            let definite = e.nothing_happened();
            writer.append_one(Event::JobSubmitFailed(JobSubmitFailed {
                submission_id,
                definite,
                reason: e.to_string(),
            }))?;
            return Err(if definite {
                OpError::Failed(format!("worker {worker}: {e}; nothing was submitted"))
            } else {
                OpError::Unknown(format!(
                    "worker {worker} (submission {submission_id}): sbatch gave no clear answer ({e}); a job named \
                     {worker:?} may exist and keeps its budget. Run `dispatch reconcile` to find it by name"
                ))
            });
        }
    };
    writer.append_one(Event::JobSubmitted(JobSubmitted {
        submission_id,
        job_id,
        how: "sbatch".to_owned(),
    }))?;
    drop(writer);
    snapshot_quietly(&ctx.journal_dir());
    Ok(JobSubmitReport {
        worker,
        submission_id: submission_id.to_string(),
        job_id: Some(job_id),
    })
}
