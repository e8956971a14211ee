//! A watermark made on purpose: a tiny held job whose id shows that a listing is the
//! controller's current view. A submission whose sbatch (or salloc) gave no answer is proven
//! never created only by a listing that lacks its name and lists a job given out after it
//! settled (`policy::reconcile::find_lost`); a user with no other job has none, so reconcile
//! makes one: intent, `sbatch --hold`, the job's id (or why not), `scancel` at once.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::slurm::JobId;

/// About to submit the held beacon job `job_name` (`<prefix>watermark-<8 hex of beacon_id>`).
/// Its id, once known, was given out after this event's time; `sbatch_limit_s` bounds the
/// sbatch call (after that, a cancel by name finds the beacon if it exists).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkIntent {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub beacon_id: Uuid,
    pub job_name: String,
    pub sbatch_limit_s: u32,
}

/// sbatch answered with the beacon's id: a job given out after its intent's time, held, about
/// to be cancelled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkMade {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub beacon_id: Uuid,
    pub job_id: JobId,
}

/// sbatch gave no id: refused (`definite`), or no answer (a held beacon may exist: a later
/// reconcile cancels it by name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkFailed {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub beacon_id: Uuid,
    pub definite: bool,
    pub reason: String,
}

/// What `scancel` of the beacon answered: `answered` when it took (exit 0) or the job is
/// already gone ("Invalid job id"); otherwise a later reconcile cancels it again. `job_id`:
/// the beacon's id, or none for a cancel by its name (`scancel --me --name=…`) when sbatch gave
/// no answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkCancelled {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub beacon_id: Uuid,
    pub job_id: Option<JobId>,
    pub answered: bool,
    pub reason: String,
}
