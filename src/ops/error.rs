//! How an operation ends when it does not succeed, mapped to the documented exit codes.

use crate::config::ConfigError;
use crate::journal::JournalError;
use crate::policy::asset::AssetRefusal;
use crate::policy::forget::ForgetRefusal;
use crate::policy::pool::Refusal;
use crate::policy::session::refusal::SessionRefusal;
use crate::policy::trial::TrialRefusal;

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// A safety check refused; nothing was done (exit 3).
    #[error("{0}")]
    Refused(#[from] Refusal),
    /// An asset check refused; nothing was done (exit 3).
    #[error("{0}")]
    AssetRefused(#[from] AssetRefusal),
    /// A trial rule refused; nothing was done (exit 3).
    #[error("{0}")]
    TrialRefused(#[from] TrialRefusal),
    /// There is nothing (or more than one thing) to forget (exit 3).
    #[error("{0}")]
    ForgetRefused(#[from] ForgetRefusal),
    /// A session rule refused; nothing was done (exit 3).
    #[error("{0}")]
    SessionRefused(#[from] SessionRefusal),
    /// The named thing (a worker, a pool's worker) does not exist; nothing was done (exit 3,
    /// as every "not found": docs/cli.md, "Exit codes").
    #[error("{0}")]
    NotFound(String),
    /// The intent is recorded, the effect's result is not known (exit 4).
    #[error("{0}")]
    Unknown(String),
    /// Failed, and nothing is left in an unknown state (exit 1).
    #[error("{0}")]
    Failed(String),
    /// A bad value that clap could not check (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The configuration cannot be used (exit 2, as every usage error).
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The state directory cannot be used (not ours: exit 3; unusable: exit 1).
    #[error(transparent)]
    StateDir(#[from] crate::statedir::StateDirError),
    /// Any of the above, about a Slurm job that is the session's now: the error document names
    /// it (its exit code is its error's).
    #[error(transparent)]
    AboutJob(AboutJob),
}

impl OpError {
    /// The error itself, whatever it is about (an [`AboutJob`] only adds what it names).
    pub fn underlying(&self) -> &OpError {
        match self {
            OpError::AboutJob(about) => about.error.underlying(),
            other => other,
        }
    }
}

/// An error about a Slurm job a `session launch` made or kept as the session's: a script reads
/// from the error document which job that is (`job_id`), how it stood (`state`) and how the
/// launch came by it (`action`: `submitted`, `reused` or `adopted`), as from a success's.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct AboutJob {
    pub job_id: crate::slurm::JobId,
    pub state: String,
    pub action: &'static str,
    pub error: Box<OpError>,
}

impl From<crate::statedir::trust::TrustError> for OpError {
    fn from(e: crate::statedir::trust::TrustError) -> OpError {
        crate::statedir::StateDirError::from(e).into()
    }
}
