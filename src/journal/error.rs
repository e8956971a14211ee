use std::path::PathBuf;

use super::scan::{Damage, Status};
use crate::event::PayloadError;
use crate::next::Next::{self, JournalRepair, JournalVerify};

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{what} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: String,
        source: std::io::Error,
    },
    #[error(
        "the journal in {} is {}: {} at {} offset {}; dispatch refuses to write. \
         Run {JournalVerify} for details",
        dir.display(), status.as_str(), damage.reason, damage.segment, damage.offset
    )]
    Damaged {
        dir: PathBuf,
        status: Status,
        damage: Damage,
    },
    #[error(
        "the journal writer stopped after an I/O error ({0}); nothing more is written by this \
         process. Run {JournalVerify}"
    )]
    Poisoned(String),
    #[error(
        "a {kind} event encodes to {bytes} bytes, above the {} byte payload cap",
        super::frame::MAX_PAYLOAD
    )]
    PayloadTooLarge { kind: &'static str, bytes: usize },
    /// A frame a reader would call corrupt (journal-format.md §4, §6): refused before writing.
    #[error("a {kind} event is not written: {reason}")]
    Unwritable { kind: &'static str, reason: String },
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error("no journal in {}: run {}", .0.display(), Next::JournalInit(None))]
    Missing(PathBuf),
    #[error("event {seq} has valid CRCs and chain but its payload does not decode: {reason}")]
    Undecodable { seq: u64, reason: String },
    /// The journal directory or an entry in it is another user's, writable by others, or a
    /// link: not read, not written (exit 3).
    #[error(transparent)]
    Untrusted(#[from] crate::statedir::trust::Untrusted),
    #[error(transparent)]
    Reduce(#[from] crate::event::ReduceError),
    /// The cross-host writer lock was not had, or was lost (exit 4: run the command again).
    #[error(transparent)]
    Lease(#[from] super::lease::LeaseError),
    /// The segment's end on disk is not where this writer left it: another writer appended.
    #[error(
        "{segment} does not end where this command left it (expected {expected_len} bytes ending \
         with chain {expected_chain}, found {found}): another writer appended to the journal, so \
         the locks did not exclude it. {}",
        if *written {
            format!(
                "This command's events were written and may sit on a second branch; nothing more \
                 is done. Run {JournalVerify}, then {JournalRepair}, which merges branches \
                 keeping every event"
            )
        } else {
            "Nothing was written by this command; run it again".to_owned()
        }
    )]
    TailMoved {
        segment: String,
        expected_len: u64,
        expected_chain: String,
        found: String,
        /// Whether this command's own frames reached the file before the mismatch was seen.
        written: bool,
    },
}

impl From<crate::statedir::trust::TrustError> for JournalError {
    fn from(e: crate::statedir::trust::TrustError) -> JournalError {
        use crate::statedir::trust::TrustError;
        match e {
            TrustError::Untrusted(u) => JournalError::Untrusted(u),
            TrustError::Io { path, source } => JournalError::Io {
                path,
                what: "inspect".to_owned(),
                source,
            },
        }
    }
}
