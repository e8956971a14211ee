//! What a worker's own journal says, read and recorded by the coordinator.

use std::path::Path;

use uuid::Uuid;

use super::published_dir;
use crate::event::pool::*;
use crate::event::Event;
use crate::journal::JournalError;
use crate::policy::node as node_policy;
use crate::state::pool::*;
use crate::state::State;
use crate::statedir::trust;
use crate::worker::dirs::WorkerDirs;
use crate::worker::{publish, report};

/// The worker's own journal as it is now, with the chain value at the seq last ingested.
pub(super) fn read_worker_journal(
    pools_dir: &Path,
    pool: &str,
    w: &Worker,
) -> Result<Option<report::WorkerReport>, JournalError> {
    let dirs = WorkerDirs::new(pools_dir, pool, w.submission_id);
    read_journal_below(pools_dir, &dirs.evidence, w)
}

/// [`read_worker_journal`] from its evidence directory, every directory on the way down from
/// `trusted` (the pools directory, or a pool's `workers` directory already checked) checked
/// first. `Ok(None)`: the supervisor wrote nothing (yet).
pub(super) fn read_journal_below(
    trusted: &Path,
    evidence: &Path,
    w: &Worker,
) -> Result<Option<report::WorkerReport>, JournalError> {
    if !trust::check_below(trusted, evidence)? {
        return Ok(None);
    }
    report::read_anchored(evidence, w.report.as_ref().map(|r| r.last_seq))
}

/// Does the worker journal, as read now, still extend what was ingested from it?
pub(super) fn extends_ingested(w: &Worker, r: &report::WorkerReport) -> Result<(), String> {
    node_policy::check_extends(
        w.report
            .as_ref()
            .map(|x| (x.journal_id.as_bytes(), x.last_seq, &x.head.0)),
        &node_policy::JournalSeen {
            journal_id: r.journal_id,
            last_seq: r.last_seq,
            chain_at_ingested: r.chain_at_anchor,
        },
    )
}

/// What is new in a worker's own journal, to record: how the payload ended (`WorkerExited`)
/// and a summary anchored to the journal's chain (`WorkerReportIngested`). A damaged journal,
/// or one that no longer extends what was ingested from it, is recorded as such
/// (`WorkerJournalDamaged`) and never trusted again. `step_over`: the worker's step is proven
/// over, so its supervisor can write nothing more.
pub(crate) fn worker_journal_news(
    state: &State,
    pool: &str,
    submission_id: Uuid,
    pools_dir: &Path,
    step_over: bool,
) -> Vec<Event> {
    let Some(w) = state
        .pools
        .pools
        .get(pool)
        .and_then(|p| p.active.get(&submission_id))
    else {
        return Vec::new();
    };
    if w.journal_damage.is_some() {
        return Vec::new();
    }
    let r = match read_worker_journal(pools_dir, pool, w) {
        Ok(Some(r)) => r,
        Ok(None) => return Vec::new(),
        Err(e @ (JournalError::Damaged { .. } | JournalError::Undecodable { .. })) => {
            let status = match &e {
                JournalError::Damaged { status, .. } => status.as_str(),
                _ => "corrupt",
            };
            tracing::warn!("worker {} journal: {e}", w.name);
            return vec![Event::WorkerJournalDamaged(WorkerJournalDamaged {
                submission_id,
                status: status.to_owned(),
                reason: e.to_string(),
            })];
        }
        Err(e) => {
            tracing::warn!("worker {} journal cannot be read now: {e}", w.name);
            return Vec::new();
        }
    };
    if let Err(reason) = extends_ingested(w, &r) {
        return vec![Event::WorkerJournalDamaged(WorkerJournalDamaged {
            submission_id,
            status: "rewritten".to_owned(),
            reason,
        })];
    }
    let mut events = Vec::new();
    if let (Some(e), false) = (&r.exited, w.state == WorkerState::Exited) {
        events.push(Event::WorkerExited(WorkerExited {
            submission_id,
            code: e.code,
            signal: e.signal,
        }));
    }
    if let Some(d) = &r.devices {
        let devices = WorkerDevicesIngested {
            submission_id,
            step_gpus: d.step_gpus.clone(),
            cuda_visible_devices: d.cuda_visible_devices.clone(),
        };
        if w.devices.as_ref() != Some(&devices) {
            events.push(Event::WorkerDevicesIngested(devices));
        }
    }
    let ingested = r.ingested(submission_id, step_over);
    if w.report.as_ref() != Some(&ingested) {
        events.push(Event::WorkerReportIngested(ingested));
    }
    events
}

/// After a worker's step is proven over: temporary publication directories its supervisor
/// left (it was killed mid-publication) can never complete; remove them.
pub(crate) fn sweep_publication(pools_dir: &Path, pool: &str, w: &Worker) {
    let n = publish::sweep_temps(&published_dir(pools_dir, pool), &w.name, w.submission_id);
    if n > 0 {
        tracing::info!(
            "removed {n} unfinished publication(s) of worker {} (its step is over)",
            w.name
        );
    }
}
