//! Operator decisions (`dispatch forget`): a worker's budget released, or a session's record
//! dropped, because the person running dispatch said so, with their reason. A decision is
//! never proof: the audit lists every one as an override, and nothing reads one as "the job
//! is over".

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::session::SessionKey;
use crate::slurm::JobId;

/// A pool or `dispatch submit` worker given up: its budget is released without proof.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerForgotten {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub worker: String,
    /// The state it was in (`unknown`, `running`, ...), as `pool status` named it.
    pub state: String,
    /// The job (for `dispatch submit`) or allocation (for a pool) it was known by, if any.
    pub job_id: Option<JobId>,
    pub step_id: Option<u32>,
    pub reason: String,
}

/// A session's record dropped: the job it held or the submission it could not resolve is no
/// longer dispatch's to track.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionForgotten {
    pub session: SessionKey,
    pub job_id: Option<JobId>,
    /// A submission whose job, if any, was never known.
    #[serde(deserialize_with = "crate::event::wire::option_uuid")]
    pub submission_id: Option<Uuid>,
    pub reason: String,
}

/// `pool attach --steal`: an allocation another journal's mark names is attached anyway. The
/// other journal's pool is not told; its workers keep running.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationStolen {
    pub pool: String,
    pub job_id: JobId,
    /// The mark taken over, as the job's comment held it.
    pub holder: String,
    pub reason: String,
}
