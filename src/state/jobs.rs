//! The ordinary path: one Slurm job per worker (`dispatch submit`). The worker owns its whole
//! allocation. Same budget rule as pools: an intent holds until a definite failure or a proof
//! that the job is over.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::asset::{AssetRecord, WorkerAssetsBound};
use crate::event::jobs::{
    JobNamed, JobRequeued, JobStopIntent, JobSubmitFailed, JobSubmitIntent, JobSubmitted,
    JobTerminal,
};
use crate::event::Micros;
use crate::slurm::JobId;

/// Finished job workers the reduced state remembers (the journal keeps them all).
pub const FINISHED_JOBS_KEPT: usize = 256;

state_words! {
    pub enum JobWorkerState {
        Submitted => "submitted",
        /// sbatch gave no answer: a job may exist.
        Unknown => "unknown",
        Queued => "queued",
        Stopping => "stopping",
        Released => "released",
        Failed => "failed",
        /// Given up by an operator (`dispatch forget`): budget released without proof.
        Forgotten => "forgotten",
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobWorker {
    pub worker: String,
    pub submission_id: Uuid,
    pub job_id: Option<JobId>,
    pub state: JobWorkerState,
    pub cpus: u32,
    pub mem_mb: u64,
    pub submitted_at: Micros,
    /// The source and image assets it was given (`WorkerAssetsBound`).
    pub assets: Vec<AssetRecord>,
    /// Its Slurm job name and sbatch's time limit (`JobNamed`); `None` before that event
    /// existed, when the job was named after the worker.
    pub named: Option<JobNamed>,
    /// Why its submission failed definitely (`JobSubmitFailed.reason`), once it has.
    #[serde(default)]
    pub failure: Option<String>,
    /// The largest `Restarts=` recorded for its job (`JobRequeued`): 0 until Slurm was seen to
    /// requeue it. Last, and written only when it is not 0, so a snapshot without it (version 8
    /// as first defined) reads as 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl JobWorker {
    /// The name its Slurm job has, if sbatch created one.
    pub fn job_name(&self) -> &str {
        self.named.as_ref().map_or(&self.worker, |n| &n.job_name)
    }

    /// The config's `job_name_prefix` its job was named under (`<prefix><worker>-<8 hex>`),
    /// when it was journaled with its name.
    pub fn job_name_prefix(&self) -> Option<String> {
        let named = self.named.as_ref()?;
        let hex = &self.submission_id.simple().to_string()[..8];
        named
            .job_name
            .strip_suffix(&format!("{}-{hex}", self.worker))
            .map(str::to_owned)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jobs {
    pub active: BTreeMap<Uuid, JobWorker>,
    pub finished: VecDeque<JobWorker>,
    /// Every worker that asked to be continued, pool workers too, and the lineage: here, as
    /// the last field of a struct without optional fields, because a snapshot is MessagePack
    /// arrays (a field after `State`'s optional last one could not be told apart from it).
    #[serde(
        default,
        skip_serializing_if = "super::continuation::Continuations::is_empty"
    )]
    pub continuations: super::continuation::Continuations,
}

impl Jobs {
    pub fn intent(&mut self, time: Micros, e: &JobSubmitIntent) {
        self.active.insert(
            e.submission_id,
            JobWorker {
                worker: e.worker.clone(),
                submission_id: e.submission_id,
                job_id: None,
                state: JobWorkerState::Submitted,
                cpus: e.cpus,
                mem_mb: e.mem_mb,
                submitted_at: time,
                assets: Vec::new(),
                named: None,
                failure: None,
                restarts: 0,
            },
        );
    }

    pub fn submitted(&mut self, e: &JobSubmitted) {
        if let Some(j) = self.active.get_mut(&e.submission_id) {
            j.job_id = Some(e.job_id);
            j.state = JobWorkerState::Queued;
        }
    }

    /// A definite failure is the proof that frees the budget: nothing was created.
    pub fn failed(&mut self, e: &JobSubmitFailed) {
        if e.definite {
            if let Some(j) = self.active.get_mut(&e.submission_id) {
                j.failure = Some(e.reason.clone());
            }
            self.finish(&e.submission_id, JobWorkerState::Failed);
        } else if let Some(j) = self.active.get_mut(&e.submission_id) {
            j.state = JobWorkerState::Unknown;
        }
    }

    pub fn assets_bound(&mut self, e: &WorkerAssetsBound) {
        if let Some(j) = self.active.get_mut(&e.submission_id) {
            j.assets = e.assets.clone();
        }
    }

    pub fn named(&mut self, e: &JobNamed) {
        if let Some(j) = self.active.get_mut(&e.submission_id) {
            j.named = Some(e.clone());
        }
    }

    /// Another run of its job: a count never goes down (an older answer changes nothing).
    pub fn requeued(&mut self, e: &JobRequeued) {
        if let Some(j) = self.active.get_mut(&e.submission_id) {
            if j.job_id == Some(e.job_id) {
                j.restarts = j.restarts.max(e.restarts);
            }
        }
    }

    pub fn stop_intent(&mut self, e: &JobStopIntent) {
        if let Some(j) = self.active.get_mut(&e.submission_id) {
            j.state = JobWorkerState::Stopping;
        }
    }

    pub fn terminal(&mut self, e: &JobTerminal) {
        self.finish(&e.submission_id, JobWorkerState::Released);
    }

    pub fn forgotten(&mut self, id: &Uuid) {
        self.finish(id, JobWorkerState::Forgotten);
    }

    /// The newest finished worker of this name.
    pub fn last_finished(&self, worker: &str) -> Option<&JobWorker> {
        self.finished.iter().rev().find(|j| j.worker == worker)
    }

    fn finish(&mut self, id: &Uuid, state: JobWorkerState) {
        if let Some(mut j) = self.active.remove(id) {
            j.state = state;
            if self.finished.len() == FINISHED_JOBS_KEPT {
                self.finished.pop_front();
            }
            self.finished.push_back(j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::jobs::*;

    fn intent(worker: &str) -> JobSubmitIntent {
        JobSubmitIntent {
            submission_id: Uuid::new_v4(),
            worker: worker.to_owned(),
            target: None,
            cpus: 1,
            mem_mb: 100,
            time_s: 600,
            publication_timeout_s: 60,
            command: vec!["true".to_owned()],
        }
    }

    #[test]
    fn a_definite_failure_releases_and_keeps_its_reason() {
        let mut jobs = Jobs::default();
        let first = intent("w");
        jobs.intent(Micros(1), &first);
        jobs.failed(&JobSubmitFailed {
            submission_id: first.submission_id,
            definite: true,
            reason: "sbatch refused the job: \"Invalid partition name specified\"".to_owned(),
        });
        assert!(jobs.active.is_empty(), "the budget is released");
        let done = jobs.last_finished("w").unwrap();
        assert_eq!(done.state, JobWorkerState::Failed);
        assert!(done
            .failure
            .as_deref()
            .unwrap()
            .contains("Invalid partition"));

        let second = intent("w");
        jobs.intent(Micros(2), &second);
        jobs.failed(&JobSubmitFailed {
            submission_id: second.submission_id,
            definite: false,
            reason: "sbatch: no answer".to_owned(),
        });
        let held = &jobs.active[&second.submission_id];
        assert_eq!(held.state, JobWorkerState::Unknown, "no proof, still held");
        assert_eq!(held.failure, None);
    }

    fn requeued(submission_id: Uuid, job: u32, restarts: u32) -> JobRequeued {
        JobRequeued {
            submission_id,
            job_id: JobId::new(job).unwrap(),
            restarts,
            proof: format!("scontrol shows job {job} Restarts={restarts}"),
        }
    }

    /// journal-format.md gives this body byte for byte.
    #[test]
    fn a_requeued_body_is_the_bytes_journal_format_gives() {
        assert_eq!(
            crate::event::body_hex(&requeued(Uuid::from_u128(1), 7, 1)),
            "94 c4 10 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 07 01 bf 73 63 6f 6e 74 72 \
             6f 6c 20 73 68 6f 77 73 20 6a 6f 62 20 37 20 52 65 73 74 61 72 74 73 3d 31"
        );
    }

    #[test]
    fn a_restart_count_only_grows_and_only_for_the_workers_job() {
        let mut jobs = Jobs::default();
        let w = intent("w");
        let id = w.submission_id;
        jobs.intent(Micros(1), &w);
        jobs.submitted(&JobSubmitted {
            submission_id: id,
            job_id: JobId::new(7).unwrap(),
            how: "sbatch".to_owned(),
        });
        jobs.requeued(&requeued(id, 8, 3));
        assert_eq!(
            jobs.active[&id].restarts, 0,
            "another job's count is not this one's"
        );
        jobs.requeued(&requeued(id, 7, 2));
        jobs.requeued(&requeued(id, 7, 1));
        assert_eq!(
            jobs.active[&id].restarts, 2,
            "an older answer changes nothing"
        );
    }
}
