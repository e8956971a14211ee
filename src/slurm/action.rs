//! Why an action (submit, allocate, launch, cancel) has no definite result, and how a
//! submitting command's exit is read: a definite refusal only in words Slurm is known to use.

use thiserror::Error;

use super::error::{Refusal, RequestError, SlurmError};
use super::ids::JobId;
use super::runner::{ExitInfo, Output, SlurmCommand};
use super::submit::refusal_phrase;

/// Why an action (submit, allocate, launch, cancel) has no definite result.
#[derive(Debug, Clone, Error)]
pub enum ActionError {
    /// Refused before any Slurm command ran: nothing happened.
    #[error("request refused, nothing was done: {0}")]
    Invalid(#[from] RequestError),
    /// A local problem before any Slurm command ran (e.g. a log file could not be
    /// opened): nothing happened.
    #[error("nothing was started: {0}")]
    Local(String),
    /// Slurm definitely created nothing: it refused in words we recognise, or its program
    /// could not be started.
    #[error("{0}")]
    Refused(Refusal),
    /// Slurm may or may not have acted. `job_hint` is a job id Slurm mentioned before
    /// the answer became unknown (salloc's "Pending job allocation N").
    #[error("outcome unknown: {error}")]
    Unknown {
        error: SlurmError,
        job_hint: Option<JobId>,
    },
}

impl ActionError {
    /// True when the action was refused before any Slurm command ran: nothing happened, so
    /// whatever was reserved for it may be released.
    pub fn nothing_happened(&self) -> bool {
        matches!(
            self,
            ActionError::Invalid(_) | ActionError::Local(_) | ActionError::Refused(_)
        )
    }

    pub(super) fn unknown(error: SlurmError) -> ActionError {
        ActionError::Unknown {
            error,
            job_hint: None,
        }
    }

    /// A submitting command that could not be run or gave no answer. A program that was never
    /// started created nothing; everything else (timeout, killed, output cap) may have.
    pub(super) fn unanswered(error: SlurmError, job_hint: Option<JobId>) -> ActionError {
        match error {
            SlurmError::Spawn { .. } => ActionError::Refused(Refusal::NotStarted(error)),
            error => ActionError::Unknown { error, job_hint },
        }
    }
}

/// A submitting command's non-zero exit: a definite refusal when it exited on its own and
/// said so in words of `submit::REFUSALS`, else unknown (even "Socket timed out" may follow
/// an accepted submission).
pub(super) fn failed_submission(
    command: SlurmCommand,
    out: Output,
    job_hint: Option<JobId>,
) -> ActionError {
    debug_assert!(!out.status.success());
    let phrase = match out.status {
        ExitInfo::Code(_) => refusal_phrase(&out.stdout, &out.stderr),
        ExitInfo::Signal(_) => None,
    };
    match phrase {
        Some(phrase) if job_hint.is_none() => ActionError::Refused(Refusal::Said {
            command,
            phrase,
            status: out.status,
            stderr: out.stderr,
        }),
        _ => ActionError::Unknown {
            job_hint,
            error: out.failed(command),
        },
    }
}
