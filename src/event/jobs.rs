//! `dispatch submit` events: one Slurm job per worker.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::slurm::JobId;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSubmitIntent {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub worker: String,
    pub target: Option<String>,
    pub cpus: u32,
    pub mem_mb: u64,
    pub time_s: u64,
    pub publication_timeout_s: u32,
    pub command: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSubmitted {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub job_id: JobId,
    /// `sbatch` (its own answer) or `name` (found by job name after an ambiguous submit).
    pub how: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSubmitFailed {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    /// sbatch answered and refused: nothing exists. Otherwise a job may exist.
    pub definite: bool,
    pub reason: String,
}

/// The Slurm job name a submission's sbatch uses, written in its intent's commit: the name
/// reconcile searches for when sbatch gave no answer, and the longest that sbatch call could
/// have run (reconcile waits that long, plus a margin, before it calls a job never created).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobNamed {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub job_name: String,
    pub sbatch_limit_s: u32,
}

/// `dispatch stop` is about to signal the job, then cancel it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStopIntent {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub grace_s: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTerminal {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub proof: String,
}

/// `reconcile` saw job `job_id` of this submission with a larger `Restarts=` than any recorded
/// (`scontrol show job`): Slurm requeued the job (an administrator, or
/// `PrologFlags=ForceRequeueOnFail`, though dispatch submits `--no-requeue`). Each requeue
/// starts another run of the same job id; its step ids start again at 0. The first run's
/// evidence stays the worker's: a second run's supervisor refuses before it writes anything
/// (docs/operations.md, "A requeued job").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRequeued {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub job_id: JobId,
    /// `Restarts=` as Slurm showed it: the run seen is the `restarts + 1`th.
    pub restarts: u32,
    /// What showed it, in Slurm's words.
    pub proof: String,
}

/// Everything `dispatch submit` was asked beyond its `JobSubmitIntent`, for a worker that
/// asked to be continued (`ContinuationAsked`), written in the commit of that intent: the
/// request again, so `reconcile` can submit its successor without the configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRequest {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub job_name_prefix: String,
    pub target: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub time_s: u64,
    pub command: Vec<String>,
    pub publication_timeout_s: u32,
    pub native_state_s: u32,
    pub cleanup_s: u32,
    pub grace_s: u32,
    pub source: Option<String>,
    pub image: Option<String>,
    pub append_only_glob: Option<String>,
    pub trial: Option<String>,
}
