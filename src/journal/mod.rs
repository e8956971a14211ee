//! The journal: a crash-safe, CRC-framed, hash-chained, append-only event log.
//! `journal-format.md` at the top of the repository is the byte-exact specification.

pub mod checkpoint;
mod error;
pub mod files;
pub mod fork;
pub mod frame;
pub mod lease;
pub mod merge;
pub mod reader;
mod repair;
pub mod scan;
pub mod segment;
pub mod snapshot;
pub mod writer;

pub use error::JournalError;
pub use reader::{load, replay, Loaded};
pub use scan::{Damage, Scan, Status};
pub use snapshot::Fold;
pub use writer::{Committed, JournalWriter, Options, Stats, Writer};
