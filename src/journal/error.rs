use std::path::PathBuf;

use super::scan::{Damage, Status};
use crate::event::PayloadError;

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
         Run `dispatch journal verify` for details",
        dir.display(), status.as_str(), damage.reason, damage.segment, damage.offset
    )]
    Damaged {
        dir: PathBuf,
        status: Status,
        damage: Damage,
    },
    #[error("the journal writer stopped after an I/O error ({0}); nothing more is written by this process. Run `dispatch journal verify`")]
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
    #[error("no journal in {}: run `dispatch journal init`", .0.display())]
    Missing(PathBuf),
    #[error("event {seq} has valid CRCs and chain but its payload does not decode: {reason}")]
    Undecodable { seq: u64, reason: String },
    /// The journal directory or an entry in it is another user's, writable by others, or a
    /// link: not read, not written (exit 3).
    #[error(transparent)]
    Untrusted(#[from] crate::statedir::trust::Untrusted),
    #[error(transparent)]
    Reduce(#[from] crate::event::ReduceError),
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
