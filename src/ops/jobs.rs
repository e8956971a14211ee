//! `dispatch jobs`: every worker started with `dispatch submit`, from state (no Slurm call),
//! or after `reconcile_jobs_only` with what its listing showed of each job now.
//!
//! `--refresh` runs `reconcile::reconcile_jobs_only`: the same job reconciliation as
//! `dispatch reconcile`, with no pool asked. It then shows what that listing showed of each job
//! (`ReconcileReport.listed`: state, pending reason, node).

use std::path::Path;

use serde::Serialize;

use super::logs::LogPaths;
use super::reconcile::ListedJob;
use crate::ops::pool::Stage;
use crate::policy::lineage::{Lineage, Lineages};
use crate::policy::node::Outcome;
use crate::slurm::JobId;
use crate::state::jobs::JobWorker;
use crate::state::State;
use crate::worker::dirs::WorkerDirs;
use crate::worker::report;

#[derive(Debug, Serialize)]
pub struct JobsReport {
    pub jobs: Vec<JobView>,
    /// With `--refresh`: what the refresh resolved and how many Slurm calls it made.
    pub refresh: Option<RefreshView>,
}

#[derive(Debug, Serialize)]
pub struct RefreshView {
    pub resolved: usize,
    pub unknown: usize,
    pub slurm_calls: u64,
}

#[derive(Debug, Serialize)]
pub struct JobView {
    pub worker: String,
    pub submission_id: String,
    pub job_id: Option<JobId>,
    pub job_name: String,
    /// As recorded: `submitted`, `unknown`, `queued`, `stopping`, `released`, `failed`,
    /// `forgotten`.
    #[serde(serialize_with = "crate::state::word")]
    pub state: crate::state::jobs::JobWorkerState,
    /// Whether it still holds budget (not yet proven over).
    pub active: bool,
    pub cpus: u32,
    pub mem_mb: u64,
    pub submitted_at: String,
    pub failure: Option<String>,
    /// As `pool status` has them, from the worker's own journal: how its payload ended
    /// (`completed`, `failed`, `interrupted`, `refused`), its exit code or signal, and while
    /// it holds budget how far it got (`exited`, `publishing`, `published`).
    pub outcome: Option<Outcome>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub stage: Option<Stage>,
    /// Slurm's state of its job in this refresh's listing (`PENDING`, `RUNNING`, …); null
    /// without `--refresh` or when the listing did not show it.
    pub slurm_state: Option<String>,
    /// Slurm's reason in that listing (`Priority`, `Resources`, `None`, …).
    pub reason: Option<String>,
    pub node: Option<String>,
    /// In a preemption's grace in this refresh: `{"at", "ends_at"}` (`PreemptTime`, and when
    /// Slurm kills it); null otherwise.
    pub preempted: Option<super::reconcile::Preempted>,
    pub stdout: String,
    pub stderr: String,
    /// Its generation, and where its continuation stands (`--continue N`), as in `pool status`.
    #[serde(flatten)]
    pub lineage: Lineage,
}

impl JobView {
    fn of(
        state_dir: &Path,
        j: &JobWorker,
        active: bool,
        listed: &[ListedJob],
        lineages: &Lineages,
    ) -> JobView {
        let id = j.submission_id.to_string();
        let seen = listed.iter().find(|l| l.submission_id == id);
        let dirs = WorkerDirs::of(state_dir, None, j.submission_id);
        let logs = LogPaths::of(&dirs);
        let ended = Ended::of(state_dir, &dirs, active);
        JobView {
            outcome: ended.outcome,
            exit_code: ended.code,
            exit_signal: ended.signal,
            stage: ended.stage,
            worker: j.worker.clone(),
            submission_id: id,
            job_id: j.job_id,
            job_name: j.job_name().to_owned(),
            state: j.state,
            active,
            cpus: j.cpus,
            mem_mb: j.mem_mb,
            submitted_at: j.submitted_at.to_rfc3339(),
            failure: j.failure.clone(),
            slurm_state: seen.map(|l| l.state.clone()),
            reason: seen.map(|l| l.reason.clone()),
            node: seen.and_then(|l| l.node.clone()),
            preempted: seen.and_then(|l| l.preempted.clone()),
            stdout: logs.stdout,
            stderr: logs.stderr,
            lineage: lineages.of_worker(j.submission_id),
        }
    }
}

/// What a job worker's own journal says of its payload's end.
#[derive(Default)]
struct Ended {
    outcome: Option<Outcome>,
    code: Option<i32>,
    signal: Option<i32>,
    stage: Option<Stage>,
}

impl Ended {
    /// Read from its journal (below the trusted state directory); nothing when there is none
    /// or it cannot be trusted. `active`: it still holds budget (a stage is shown).
    fn of(state_dir: &Path, dirs: &WorkerDirs, active: bool) -> Ended {
        if !dirs.check(state_dir).unwrap_or(false) {
            return Ended::default();
        }
        let Ok(Some(r)) = report::read(&dirs.evidence) else {
            return Ended::default();
        };
        let outcome = r.payload_outcome();
        let publication = r.publication.as_ref().map(|p| p.outcome());
        Ended {
            outcome,
            code: r.exited.as_ref().and_then(|e| e.code),
            signal: r.exited.as_ref().and_then(|e| e.signal),
            stage: active.then(|| Stage::of(outcome, publication)).flatten(),
        }
    }
}

/// Active workers first (oldest first), then the finished ones the state keeps, newest first.
pub fn jobs(
    state: &State,
    state_dir: &Path,
    refresh: Option<&super::reconcile::ReconcileReport>,
) -> JobsReport {
    let listed = refresh.map_or(&[][..], |r| r.listed.as_slice());
    let mut active: Vec<&JobWorker> = state.jobs.active.values().collect();
    active.sort_by_key(|j| j.submitted_at);
    let lineages = Lineages::of(state);
    let jobs = active
        .into_iter()
        .map(|j| (j, true))
        .chain(state.jobs.finished.iter().rev().map(|j| (j, false)))
        .map(|(j, active)| JobView::of(state_dir, j, active, listed, &lineages))
        .collect();
    JobsReport {
        jobs,
        refresh: refresh.map(|r| RefreshView {
            resolved: r.resolved.len(),
            unknown: r.unknown.len(),
            slurm_calls: r.slurm_calls,
        }),
    }
}
