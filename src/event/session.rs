//! Session events: a (mirror, target) pair and the job it holds.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::slurm::JobId;

/// Which session an event is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionKey {
    pub mirror: String,
    pub target: String,
}

impl SessionKey {
    pub fn new(mirror: &str, target: &str) -> SessionKey {
        SessionKey {
            mirror: mirror.to_owned(),
            target: target.to_owned(),
        }
    }
}

impl std::fmt::Display for SessionKey {
    /// `mirror--target`, the name sucoder's records had; for people, never parsed back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}--{}", self.mirror, self.target)
    }
}

/// About to submit (sbatch or salloc): from here until an outcome, a job may exist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLaunchIntent {
    pub session: SessionKey,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub job_name: String,
    pub confined: bool,
    pub command: Vec<String>,
    /// The job this launch replaces (renew); it is never adopted by this launch.
    pub replacing: Option<JobId>,
}

/// Slurm gave the submission a job id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionJobSubmitted {
    pub session: SessionKey,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub job_id: JobId,
}

/// The submission did not yield an id. `may_exist`: Slurm may have accepted it anyway (a
/// timeout, an unparsable answer); the next launch's name probe resolves that.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSubmitFailed {
    pub session: SessionKey,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub may_exist: bool,
    /// A job id Slurm mentioned before the answer was lost (salloc's "Pending job allocation").
    pub job_hint: Option<JobId>,
    pub reason: String,
}

/// squeue showed the job RUNNING on this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionNodeResolved {
    pub session: SessionKey,
    pub job_id: JobId,
    pub node: String,
}

/// A live job found by name (not by the record) now belongs to this session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionAdopted {
    pub session: SessionKey,
    pub job_id: JobId,
    /// How it was found: `name_probe`, or `release_sweep` (a release found it by name after
    /// the recorded job, and cancels it next).
    pub how: String,
    pub state: String,
    pub partition: String,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// The job this adoption replaces (renew), if any.
    pub replacing: Option<JobId>,
}

/// About to `scancel` the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCancelIntent {
    pub session: SessionKey,
    pub job_id: JobId,
}

/// scancel did not succeed; the session keeps the job. `definite`: scancel answered (and
/// said no); otherwise it gave no answer and the job may or may not be cancelled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCancelFailed {
    pub session: SessionKey,
    pub job_id: JobId,
    pub definite: bool,
    pub reason: String,
}

/// scancel succeeded: the session no longer holds the job. `proof` says what showed it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionReleased {
    pub session: SessionKey,
    pub job_id: JobId,
    pub proof: String,
}

/// The session let go of a job that other sessions still hold; the job was not cancelled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDetached {
    pub session: SessionKey,
    pub job_id: JobId,
    pub holders: Vec<String>,
}

/// Slurm proved the job gone (a successful empty answer, "Invalid job id", or a terminal
/// state); the session forgets it without cancelling anything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCleared {
    pub session: SessionKey,
    pub job_id: JobId,
    pub reason: String,
}

/// A launch that submitted `job_id` held (`--hold`) decided, from a name probe, which job of
/// its target to keep: `winner == job_id`: release it; otherwise cancel it (it never ran)
/// and adopt `winner`, the oldest live job of the target (a racing launch's). The intent of
/// the `scontrol release` or `scancel` that follows; the binding comes from other events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHoldDecided {
    pub session: SessionKey,
    pub job_id: JobId,
    pub winner: JobId,
}

/// The outcome of a `SessionHoldDecided`'s call on `job_id`: `action` is `released`
/// (`scontrol release`) or `cancelled` (`scancel`); `ok`: the command succeeded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHoldSettled {
    pub session: SessionKey,
    pub job_id: JobId,
    pub action: String,
    pub ok: bool,
    pub reason: String,
}
