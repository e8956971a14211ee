//! What a worker's own journal says: read by the coordinator during status and reconcile.
//! The journal is scanned like any other (CRCs, seqs, chain); a corrupt or tampered one is an
//! error, never a report.

use std::path::Path;

use crate::event::pool::WorkerReportIngested;
use crate::event::worker::*;
use crate::event::{self, Sha256Digest, WorkerEvent};
use crate::journal::{self, JournalError, Status};

/// How many entries of a repeated kind a report keeps (a supervisor writes a handful).
const KEPT: usize = 16;

/// How a publication stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Publication {
    Started(PublicationStarted),
    Published(Published),
    TimedOut(PublicationTimedOut),
    Failed(PublicationFailed),
}

impl Publication {
    pub fn outcome(&self) -> &'static str {
        match self {
            Publication::Started(_) => "started",
            Publication::Published(_) => "published",
            Publication::TimedOut(_) => "timed_out",
            Publication::Failed(_) => "failed",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerReport {
    pub started: Option<SupervisorStarted>,
    /// The GPUs the step got (`StepDevices`).
    pub devices: Option<StepDevices>,
    pub payload_pid: Option<u32>,
    pub signals: Vec<ShutdownSignalled>,
    pub exited: Option<PayloadExited>,
    /// The worker journal's classification (`clean` or `torn_tail` for a supervisor that died).
    pub journal_status: Option<Status>,
    pub head: Option<String>,
    pub journal_id: [u8; 16],
    pub last_seq: u64,
    pub head_chain: Option<[u8; 32]>,
    /// The chain value at the seq asked for by [`read_anchored`], if the journal has it.
    pub chain_at_anchor: Option<[u8; 32]>,
    pub plan: Option<SupervisorPlan>,
    pub checks: Option<ReceivingChecks>,
    pub asset_checks: Vec<AssetChecked>,
    pub checkout: Option<CheckoutPrepared>,
    pub refused: Option<PreflightRefused>,
    pub quiesced: Option<WritersQuiesced>,
    pub native_state: Option<NativeStateHashed>,
    pub logs: Option<AppendOnlyLogsChecked>,
    pub publication: Option<Publication>,
    pub cleanup_started: Option<CleanupStarted>,
    pub cleaned: Option<CleanedUp>,
    pub finished: Option<SupervisorFinished>,
    /// The payload declared a checkpoint (a frame of kind [`CHECKPOINT_DECLARED`]).
    pub checkpoint_declared: bool,
}

/// The worker journal's kind for a checkpoint the payload declared (`CheckpointDeclared`),
/// read by its number: the coordinator needs only that it is there.
pub const CHECKPOINT_DECLARED: u16 = 220;

fn push_kept<T>(v: &mut Vec<T>, x: T) {
    if v.len() < KEPT {
        v.push(x);
    }
}

impl WorkerReport {
    fn fold(&mut self, e: WorkerEvent) {
        match e {
            WorkerEvent::SupervisorStarted(s) => self.started = Some(s),
            WorkerEvent::StepDevices(d) => self.devices = Some(d),
            WorkerEvent::PayloadStarted(p) => self.payload_pid = Some(p.pid),
            WorkerEvent::ShutdownSignalled(s) => push_kept(&mut self.signals, s),
            WorkerEvent::PayloadExited(e) => self.exited = Some(e),
            WorkerEvent::SupervisorPlan(p) => self.plan = Some(p),
            WorkerEvent::ReceivingChecks(c) => self.checks = Some(c),
            WorkerEvent::AssetChecked(a) => push_kept(&mut self.asset_checks, a),
            WorkerEvent::CheckoutPrepared(c) => self.checkout = Some(c),
            WorkerEvent::PreflightRefused(r) => self.refused = Some(r),
            WorkerEvent::WritersQuiesced(q) => self.quiesced = Some(q),
            WorkerEvent::NativeStateHashed(h) => self.native_state = Some(h),
            WorkerEvent::AppendOnlyLogsChecked(l) => self.logs = Some(l),
            WorkerEvent::PublicationStarted(p) => self.publication = Some(Publication::Started(p)),
            WorkerEvent::Published(p) => self.publication = Some(Publication::Published(p)),
            WorkerEvent::PublicationTimedOut(t) => {
                self.publication = Some(Publication::TimedOut(t))
            }
            WorkerEvent::PublicationFailed(f) => self.publication = Some(Publication::Failed(f)),
            WorkerEvent::CleanupStarted(c) => self.cleanup_started = Some(c),
            WorkerEvent::CleanedUp(c) => self.cleaned = Some(c),
            WorkerEvent::SupervisorFinished(f) => self.finished = Some(f),
            _ => {}
        }
    }

    /// `passed`, `refused`, or none before the supervisor got that far.
    pub fn preflight(&self) -> Option<&'static str> {
        if self.refused.is_some() {
            Some("refused")
        } else if self.payload_pid.is_some() || self.exited.is_some() {
            Some("passed")
        } else {
            None
        }
    }

    /// What the coordinator records of this report (and `pool status` shows), given whether
    /// the worker's step is proven over.
    pub fn ingested(&self, submission_id: uuid::Uuid, step_over: bool) -> WorkerReportIngested {
        let published = match &self.publication {
            Some(Publication::Published(p)) => Some(p),
            _ => None,
        };
        WorkerReportIngested {
            submission_id,
            journal_id: uuid::Uuid::from_bytes(self.journal_id),
            last_seq: self.last_seq,
            head: Sha256Digest(self.head_chain.unwrap_or_default()),
            preflight: self.preflight().map(str::to_owned),
            publication: self.publication.as_ref().map(|p| p.outcome().to_owned()),
            published_dir: published.map(|p| p.dir.clone()),
            manifest_sha256: published.map(|p| p.manifest_sha256),
            state_class: crate::policy::node::settled_state_class(
                self.cleaned.as_ref().map(|c| c.state_class.as_str()),
                step_over,
            ),
            finished: self.finished.as_ref().map(|f| f.outcome.clone()),
        }
    }
}

/// Read the worker journal under `evidence_dir`. `Ok(None)` when the supervisor never wrote one.
pub fn read(evidence_dir: &Path) -> Result<Option<WorkerReport>, JournalError> {
    read_anchored(evidence_dir, None)
}

/// Like [`read`], and also note the chain value at seq `anchor` (to check that the journal
/// still extends what was read from it before).
pub fn read_anchored(
    evidence_dir: &Path,
    anchor: Option<u64>,
) -> Result<Option<WorkerReport>, JournalError> {
    let dir = super::supervisor::journal_dir(evidence_dir);
    crate::statedir::trust::check_journal(&dir)?;
    if journal::segment::list(&dir).map_or(true, |s| s.is_empty()) {
        return Ok(None);
    }
    let mut r = WorkerReport::default();
    let mut failure = None;
    let scan = journal::scan::scan(&dir, None, |f| {
        if Some(f.seq) == anchor {
            r.chain_at_anchor = Some(f.chain_value());
        }
        r.checkpoint_declared |= f.kind == CHECKPOINT_DECLARED;
        match event::decode_payload_of::<WorkerEvent>(f.seq, f.kind, f.flags, f.payload) {
            Ok(env) => {
                r.fold(env.event);
                true
            }
            Err(e) => {
                failure = Some(JournalError::Undecodable {
                    seq: f.seq,
                    reason: e.to_string(),
                });
                false
            }
        }
    })
    .map_err(crate::journal::files::io_err(&dir, "read worker journal"))?;
    if let Some(e) = failure {
        return Err(e);
    }
    scan.refusal(&dir)?;
    r.journal_status = Some(scan.status());
    if let Some(h) = scan.head {
        r.head = Some(hex::encode(h.chain));
        r.head_chain = Some(h.chain);
        r.journal_id = h.journal_id;
        r.last_seq = h.last_seq;
    }
    Ok(Some(r))
}
