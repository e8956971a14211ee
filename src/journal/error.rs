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
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error("no journal in {}: run `dispatch journal init`", .0.display())]
    Missing(PathBuf),
    #[error("event {seq} has valid CRCs and chain but its payload does not decode: {reason}")]
    Undecodable { seq: u64, reason: String },
    #[error(transparent)]
    Reduce(#[from] crate::state::ReduceError),
}
