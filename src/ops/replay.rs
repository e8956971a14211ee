//! `--at SEQ|TIME`: the state as it was after one event, read from the journal alone (no
//! Slurm call, no worker file, nothing written). The cut and the fold are
//! `state::replay`'s; this reads the events.
//!
//! A damaged journal is refused as `journal::load` refuses it. `pool status --at` reads no
//! worker journal; `inspect --at` shows the worker's own journal up to the cut's time.

use std::path::Path;

use super::error::OpError;
use crate::journal::{self, JournalError};
use crate::state::replay::{At, Cut, CutError, Replay};

/// The state after `cut`, folded from seq 1. A damaged journal is refused as `load` refuses
/// it; a torn tail is read up to its last valid frame.
pub fn state_at(journal_dir: &Path, cut: Cut) -> Result<At, OpError> {
    crate::statedir::trust::check_journal(journal_dir)?;
    if journal::segment::list(journal_dir).map_or(true, |s| s.is_empty()) {
        return Err(JournalError::Missing(journal_dir.to_owned()).into());
    }
    let mut replay = Replay::new(cut);
    let scan = journal::reader::replay_ref(journal_dir, None, |env| {
        // Events past the cut are still read: the scan must reach the damage it reports.
        replay.offer(env)?;
        Ok(())
    })?;
    scan.refusal(journal_dir)?;
    replay.finish().map_err(|e| match e {
        CutError::Reduce(r) => OpError::Journal(r.into()),
        other => OpError::NotFound(other.to_string()),
    })
}
