//! Exit codes: one meaning each across commands, as docs/cli.md ("Exit codes") defines them
//! (the contract; README repeats the table). A name that does not exist is REFUSED.

use crate::journal::lease::LeaseError;
use crate::journal::{JournalError, Status};
use crate::ops::error::OpError;
use crate::statedir::StateDirError;

/// Done.
pub const OK: u8 = 0;
/// Failed; nothing is left in an unknown state.
pub const FAILED: u8 = 1;
/// Usage error; nothing was done.
pub const USAGE: u8 = 2;
/// Refused by a safety check, or the named thing does not exist; nothing was done.
pub const REFUSED: u8 = 3;
/// Outcome unknown: the intent is recorded, the effect's result is not.
pub const UNKNOWN: u8 = 4;
/// The journal is damaged (mid-file corruption or tamper); dispatch refuses to write.
pub const DAMAGED: u8 = 5;

/// A command's failure: the message for stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
    /// Keys the `--json` error document carries beside `exit_code` and `message` (docs/cli.md).
    pub detail: serde_json::Map<String, serde_json::Value>,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            detail: serde_json::Map::new(),
        }
    }

    /// The `--json` error document: `{"error": {"exit_code", "message", …detail}}`.
    pub fn document(&self) -> serde_json::Value {
        let mut error = serde_json::Map::new();
        error.insert("exit_code".to_owned(), self.code.into());
        error.insert("message".to_owned(), self.message.clone().into());
        error.extend(self.detail.clone());
        serde_json::json!({ "error": error })
    }
}

impl From<JournalError> for Failure {
    fn from(e: JournalError) -> Failure {
        let code = match &e {
            JournalError::Damaged { status, .. } if *status != Status::TornTail => DAMAGED,
            JournalError::Undecodable { .. } => DAMAGED,
            JournalError::Untrusted(_) => REFUSED,
            // The writer lock was not had or was lost, or another writer moved the end: what
            // this command meant to record may be missing; running it again is the answer.
            JournalError::Lease(LeaseError::Busy { .. } | LeaseError::Lost { .. })
            | JournalError::TailMoved { .. } => UNKNOWN,
            _ => FAILED,
        };
        Failure::new(code, e.to_string())
    }
}

impl From<StateDirError> for Failure {
    fn from(e: StateDirError) -> Failure {
        match e {
            StateDirError::Untrusted(_) => Failure::new(REFUSED, e.to_string()),
            other => Failure::new(FAILED, other.to_string()),
        }
    }
}

/// The one mapping from an operation's error to an exit code, for every command.
impl From<OpError> for Failure {
    fn from(e: OpError) -> Failure {
        match e {
            OpError::Refused(r) => Failure::new(REFUSED, r.to_string()),
            OpError::AssetRefused(r) => Failure::new(REFUSED, r.to_string()),
            OpError::TrialRefused(r) => Failure::new(REFUSED, r.to_string()),
            OpError::ForgetRefused(r) => Failure::new(REFUSED, r.to_string()),
            OpError::SessionRefused(r) => Failure::new(REFUSED, r.to_string()),
            OpError::NotFound(m) => Failure::new(REFUSED, m),
            OpError::Unknown(m) => Failure::new(UNKNOWN, m),
            OpError::Failed(m) => Failure::new(FAILED, m),
            OpError::Usage(m) => Failure::new(USAGE, m),
            OpError::Config(c) => Failure::new(USAGE, c.to_string()),
            OpError::Journal(j) => j.into(),
            OpError::StateDir(s) => s.into(),
            OpError::AboutJob(about) => {
                let mut f = Failure::from(*about.error);
                let job_id = serde_json::to_value(about.job_id).expect("a job id is a number");
                f.detail.insert("job_id".to_owned(), job_id);
                f.detail.insert("state".to_owned(), about.state.into());
                f.detail.insert("action".to_owned(), about.action.into());
                f
            }
        }
    }
}
