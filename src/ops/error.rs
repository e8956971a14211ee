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
}

impl From<crate::statedir::trust::TrustError> for OpError {
    fn from(e: crate::statedir::trust::TrustError) -> OpError {
        crate::statedir::StateDirError::from(e).into()
    }
}
