//! Error types of the Slurm boundary.
//!
//! Two families, kept apart on purpose:
//! * [`ParseError`]: a piece of Slurm output did not have the expected shape. It carries
//!   the raw text so that a human can see what Slurm actually said.
//! * [`SlurmError`]: why an answer is *unknown* (the `Unknown` arm of an answer). None of
//!   these may ever be read as "the job is gone".
//!
//! [`RequestError`] is separate again: a request was refused before any process ran, so
//! nothing happened at all. [`Refusal`] is the third kind of "nothing happened": Slurm ran
//! and said no in words we recognise, or its program could not be started at all.

use std::fmt;
use std::time::Duration;

use thiserror::Error;

use super::command::{ExitInfo, SlurmCommand};

/// Longest excerpt of raw text shown in an error *message*; the value keeps all of it.
const EXCERPT_CHARS: usize = 300;

/// Display helper: a quoted, shortened view of raw text.
pub struct Excerpt<'a>(pub &'a str);

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.0.chars().count();
        if total <= EXCERPT_CHARS {
            write!(f, "{:?}", self.0)
        } else {
            let head: String = self.0.chars().take(EXCERPT_CHARS).collect();
            write!(f, "{head:?}… ({} bytes in all)", self.0.len())
        }
    }
}

crate::words! {
    /// What a parser was trying to read.
    pub enum Parsed {
        JobId => "job id",
        SlurmId => "Slurm job/step id",
        StepId => "step id",
        Duration => "duration",
        Memory => "memory size",
        ExitCode => "exit code",
        Timestamp => "timestamp",
        Number => "number",
        ScontrolRecord => "scontrol record",
        SqueueJobRow => "squeue job row",
        SqueueStepRow => "squeue step row",
        SacctRow => "sacct row",
        SbatchOutput => "sbatch output",
        SallocOutput => "salloc output",
        /// A whole command output.
        Output => "command output",
    }
}

/// A piece of Slurm output did not have the expected shape.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("cannot parse {what} from {}: {reason}", Excerpt(.raw))]
pub struct ParseError {
    pub what: Parsed,
    /// The offending text, verbatim (a field, a line, or a whole output).
    pub raw: String,
    pub reason: String,
}

impl ParseError {
    pub fn new(what: Parsed, raw: &str, reason: impl Into<String>) -> Self {
        ParseError {
            what,
            raw: raw.to_owned(),
            reason: reason.into(),
        }
    }

    /// Re-labels an error found inside a larger unit (a field inside a row), keeping the
    /// inner reason and the larger raw text.
    pub fn within(self, what: Parsed, raw: &str) -> Self {
        let reason = format!("{} {}: {}", self.what, Excerpt(&self.raw), self.reason);
        ParseError::new(what, raw, reason)
    }
}

/// Why an answer from Slurm is unknown. Never evidence that a job is gone.
#[derive(Debug, Clone, Error)]
pub enum SlurmError {
    #[error("{command}: could not run: {message}")]
    Spawn {
        command: SlurmCommand,
        message: String,
    },
    #[error("{command}: no answer within {:.1} s; the child was killed", .timeout.as_secs_f64())]
    Timeout {
        command: SlurmCommand,
        timeout: Duration,
        /// Whatever the child had printed before it was killed.
        stdout: String,
        stderr: String,
    },
    #[error("{command}: output exceeded {limit} bytes; the child was killed")]
    OutputTooLarge { command: SlurmCommand, limit: usize },
    #[error("{command}: I/O error while talking to the child: {message}")]
    Io {
        command: SlurmCommand,
        message: String,
    },
    #[error("{command}: {status}; stderr {}", Excerpt(.stderr))]
    Failed {
        command: SlurmCommand,
        status: ExitInfo,
        stdout: String,
        stderr: String,
    },
    #[error("{command}: exit 0 but stderr reports an error: {}", Excerpt(.stderr))]
    ErrorOnSuccess {
        command: SlurmCommand,
        stdout: String,
        stderr: String,
    },
    #[error("{command}: unparsable answer: {source}")]
    Unparsable {
        command: SlurmCommand,
        #[source]
        source: ParseError,
        stdout: String,
        stderr: String,
    },
    /// The query could not be built (e.g. an empty id list); nothing was run.
    #[error("{command}: request refused before running: {source}")]
    InvalidRequest {
        command: SlurmCommand,
        #[source]
        source: RequestError,
    },
    /// sacct answered but has no row for the job: accounting lags, so this proves nothing.
    #[error("{command}: no accounting record (yet) for the requested jobs")]
    NotInAccounting { command: SlurmCommand },
}

impl SlurmError {
    pub fn command(&self) -> SlurmCommand {
        match self {
            SlurmError::Spawn { command, .. }
            | SlurmError::Timeout { command, .. }
            | SlurmError::OutputTooLarge { command, .. }
            | SlurmError::Io { command, .. }
            | SlurmError::Failed { command, .. }
            | SlurmError::ErrorOnSuccess { command, .. }
            | SlurmError::Unparsable { command, .. }
            | SlurmError::InvalidRequest { command, .. }
            | SlurmError::NotInAccounting { command } => *command,
        }
    }

    /// The stderr text the child printed, when there was a child that printed any.
    pub fn stderr(&self) -> Option<&str> {
        match self {
            SlurmError::Timeout { stderr, .. }
            | SlurmError::Failed { stderr, .. }
            | SlurmError::ErrorOnSuccess { stderr, .. }
            | SlurmError::Unparsable { stderr, .. } => Some(stderr),
            _ => None,
        }
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, SlurmError::Timeout { .. })
    }
}

/// A submitting command (sbatch, salloc, srun) definitely created nothing: proof enough to
/// release what was reserved for it.
#[derive(Debug, Clone, Error)]
pub enum Refusal {
    /// It ran, exited non-zero, printed no job id and said one of the phrases of
    /// `submit::REFUSALS` (the controller's or the client's own refusal), and nothing that
    /// means the answer was lost in transit.
    #[error("{command} refused the job: {phrase:?} ({status}; stderr {})", Excerpt(.stderr.trim_end()))]
    Said {
        command: SlurmCommand,
        /// The recognised phrase, as the table spells it.
        phrase: &'static str,
        status: ExitInfo,
        stderr: String,
    },
    /// The program was never started (not on PATH, not executable, exec failed): nothing
    /// ran, so nothing can have been created.
    #[error("{0}; nothing ran")]
    NotStarted(SlurmError),
}

impl Refusal {
    pub fn command(&self) -> SlurmCommand {
        match self {
            Refusal::Said { command, .. } => *command,
            Refusal::NotStarted(e) => e.command(),
        }
    }
}

/// A request was refused before any Slurm command ran: nothing was done.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    #[error("invalid job name {}: {reason}", Excerpt(.name))]
    JobName { name: String, reason: &'static str },
    #[error("invalid {field} {}: {reason}", Excerpt(.value))]
    Field {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("invalid extra flag {}: {reason}", Excerpt(.flag))]
    ExtraFlag { flag: String, reason: &'static str },
    #[error("the step command is empty")]
    EmptyCommand,
    #[error("no job ids to query")]
    NoJobIds,
    #[error("no job names to query")]
    NoJobNames,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_shortens_long_text_but_error_keeps_it() {
        let raw = "x".repeat(10_000);
        let e = ParseError::new(Parsed::SbatchOutput, &raw, "no job id");
        let msg = e.to_string();
        assert!(msg.len() < 1_000, "{msg}");
        assert!(msg.contains("10000 bytes"));
        assert_eq!(e.raw.len(), 10_000);
    }

    #[test]
    fn within_keeps_inner_reason() {
        let inner = ParseError::new(Parsed::Duration, "1:2", "bad seconds");
        let outer = inner.within(Parsed::SqueueJobRow, "a|1:2|b");
        assert_eq!(outer.raw, "a|1:2|b");
        assert!(outer.reason.contains("bad seconds"), "{}", outer.reason);
        assert!(outer.reason.contains("1:2"));
    }
}
