//! What a worker's own journal says: read by the coordinator during status and reconcile.

use std::path::Path;

use super::events::*;
use crate::event::Event;
use crate::journal::{self, JournalError, Status};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerReport {
    pub started: Option<SupervisorStarted>,
    pub payload_pid: Option<u32>,
    pub signals: Vec<ShutdownSignalled>,
    pub exited: Option<PayloadExited>,
    /// The worker journal's classification (`clean` or `torn_tail` for a supervisor that died).
    pub journal_status: Option<Status>,
    pub head: Option<String>,
}

/// Read the worker journal under `evidence_dir`. `Ok(None)` when the supervisor never wrote one.
pub fn read(evidence_dir: &Path) -> Result<Option<WorkerReport>, JournalError> {
    let dir = super::supervisor::journal_dir(evidence_dir);
    if journal::segment::list(&dir).map_or(true, |s| s.is_empty()) {
        return Ok(None);
    }
    let mut r = WorkerReport::default();
    let scan = journal::replay(&dir, None, |env| {
        match env.event {
            Event::SupervisorStarted(s) => r.started = Some(s),
            Event::PayloadStarted(p) => r.payload_pid = Some(p.pid),
            Event::ShutdownSignalled(s) => r.signals.push(s),
            Event::PayloadExited(e) => r.exited = Some(e),
            _ => {}
        }
        Ok(())
    })?;
    if matches!(scan.status, Status::Corrupt | Status::Tampered) {
        return Err(JournalError::Damaged {
            dir,
            status: scan.status,
            damage: scan.damage.expect("damaged scans carry their damage"),
        });
    }
    r.journal_status = Some(scan.status);
    r.head = scan.head.map(|h| hex::encode(h.chain));
    Ok(Some(r))
}
