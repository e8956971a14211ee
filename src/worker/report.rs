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
    /// The payload declared a checkpoint (`CheckpointDeclared`).
    pub checkpoint: Option<CheckpointDeclared>,
    /// What this continuation took up from its predecessor (`ResumedFrom`).
    pub resumed: Option<ResumedFrom>,
    /// The newest checkpoint published while the payload ran (`CheckpointPublished`).
    pub saved: Option<CheckpointPublished>,
    pub finished: Option<SupervisorFinished>,
}

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
            WorkerEvent::CheckpointDeclared(c) => self.checkpoint = Some(c),
            WorkerEvent::ResumedFrom(r) => self.resumed = Some(r),
            WorkerEvent::CheckpointPublished(c) => self.saved = Some(c),
            WorkerEvent::SupervisorFinished(f) => self.finished = Some(f),
            _ => {}
        }
    }

    /// Whether a SIGTERM from outside (a stop, a preemption, its job's end) reached this run:
    /// its supervisor forwarded one to the payload, or recorded the payload's exit interrupted
    /// with no signal and no signal of its own, which only a stop it received makes. Slurm
    /// TERMs every process of a step at once (a preemption, on 22.05 and 24.11 here): a payload
    /// that saves and exits at once ends before its supervisor forwards anything.
    pub fn term_from_outside(&self) -> bool {
        let forwarded = self.signals.iter().any(|s| s.reason == "forwarded");
        let stopped_first = self.signals.is_empty()
            && self
                .exited
                .as_ref()
                .is_some_and(|e| e.interrupted && e.signal.is_none());
        forwarded || stopped_first
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

    /// How the supervisor says the payload ended, once it finished (a non-zero exit is
    /// `failed`, whatever an older supervisor wrote).
    pub fn outcome(&self) -> Option<crate::policy::node::Outcome> {
        let f = self.finished.as_ref()?;
        crate::policy::node::Outcome::told(Some(&f.outcome), Some(f.exit_code), None)
    }

    /// How the payload ended as far as this journal says: the supervisor's outcome, else its
    /// refusal or the payload's exit; `None` while it runs.
    pub fn payload_outcome(&self) -> Option<crate::policy::node::Outcome> {
        let e = self.exited.as_ref();
        self.outcome().or_else(|| {
            (self.refused.is_some() || e.is_some()).then(|| {
                crate::policy::node::Outcome::of(
                    self.refused.is_some(),
                    e.and_then(|e| e.code),
                    e.and_then(|e| e.signal),
                    e.is_some_and(|e| e.interrupted),
                )
            })
        })
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
            finished: self.outcome().map(|o| o.as_str().to_owned()),
        }
    }
}

/// Read the worker journal under `evidence_dir`. `Ok(None)` when the supervisor never wrote one.
pub fn read(evidence_dir: &Path) -> Result<Option<WorkerReport>, JournalError> {
    read_anchored(evidence_dir, None)
}

/// Like [`read`], and also note the chain value at seq `anchor` (to check that the journal
/// still extends what was read from it before). A journal without a frame yet (a segment holding
/// its header only: left by a supervisor that died creating it, or by an older dispatch, which
/// made the segment before its `Genesis`) reads as `Ok(None)`, like no journal: what it is
/// becomes known with its `Genesis`, and nothing is ingested at seq 0 before that.
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
    let Some(h) = scan.head.filter(|h| h.last_seq > 0) else {
        return Ok(None);
    };
    if anchor == Some(0) {
        // Seq 0 has no frame: its chain is the genesis chain, which segment 1 continues. Only
        // an older dispatch ingested a journal there.
        r.chain_at_anchor = Some(journal::frame::genesis_chain(&h.journal_id));
    }
    r.head = Some(hex::encode(h.chain));
    r.head_chain = Some(h.chain);
    r.journal_id = h.journal_id;
    r.last_seq = h.last_seq;
    Ok(Some(r))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::journal::{JournalWriter, Options};
    use crate::policy::node::{check_extends, JournalSeen};

    /// What the coordinator does with a worker journal each time it looks: read it anchored at
    /// what it ingested before, refuse it unless it extends that, and ingest it anew.
    fn ingest_again(
        evidence: &Path,
        ingested: &mut Option<WorkerReportIngested>,
    ) -> Result<(), String> {
        let anchor = ingested.as_ref().map(|i| i.last_seq);
        let Some(r) = read_anchored(evidence, anchor).map_err(|e| e.to_string())? else {
            return Ok(());
        };
        check_extends(
            ingested
                .as_ref()
                .map(|i| (i.journal_id.as_bytes(), i.last_seq, &i.head.0)),
            &JournalSeen {
                journal_id: r.journal_id,
                last_seq: r.last_seq,
                chain_at_ingested: r.chain_at_anchor,
            },
        )?;
        *ingested = Some(r.ingested(uuid::Uuid::nil(), false));
        Ok(())
    }

    /// One supervisor creating its journal (each write paused, so that a reader looking meanwhile
    /// sees every stage of the creation) while a coordinator ingests it over and over.
    fn race_creation_against_ingestion(evidence: &Path) -> Result<(), String> {
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let supervisor = s.spawn(|| {
                crate::failpoint::arm_on_this_thread("journal-before-write=sleep:5").unwrap();
                let dir = super::super::supervisor::journal_dir(evidence);
                let w = JournalWriter::<WorkerEvent>::open(&dir, Options::default()).unwrap();
                w.append_one(WorkerEvent::PayloadStarted(PayloadStarted { pid: 7 }))
                    .unwrap();
                done.store(true, Ordering::SeqCst);
            });
            let mut ingested = None;
            while !done.load(Ordering::SeqCst) {
                ingest_again(evidence, &mut ingested)?;
            }
            supervisor.join().unwrap();
            ingest_again(evidence, &mut ingested)?;
            match ingested {
                Some(i) if i.last_seq == 2 => Ok(()),
                other => Err(format!("the finished journal was not ingested: {other:?}")),
            }
        })
    }

    /// The first segment of a journal whose creation stopped after its header, as a supervisor
    /// that died creating it (or an older dispatch, while creating it) leaves it.
    fn header_only_journal(evidence: &Path) -> [u8; 16] {
        let dir = super::super::supervisor::journal_dir(evidence);
        crate::journal::files::create_private_dir(&dir).unwrap();
        let journal_id = *uuid::Uuid::new_v4().as_bytes();
        let header = journal::segment::SegmentHeader {
            format_version: journal::segment::FORMAT_VERSION,
            journal_id,
            segment_no: 1,
            first_seq: 1,
            prev_chain: journal::frame::genesis_chain(&journal_id),
            created_micros: 0,
        };
        let seg = dir.join(journal::segment::file_name(1));
        std::fs::write(&seg, header.encode()).unwrap();
        std::fs::set_permissions(&seg, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        journal_id
    }

    #[test]
    fn a_journal_without_a_frame_is_never_ingested_so_its_genesis_never_contradicts_seq_0() {
        let d = tempfile::tempdir().unwrap();
        let journal_id = header_only_journal(d.path());
        assert_eq!(read_anchored(d.path(), None).unwrap(), None);
        let mut ingested = None;
        ingest_again(d.path(), &mut ingested).unwrap();
        assert_eq!(ingested, None, "nothing to ingest before the Genesis");
        let dir = super::super::supervisor::journal_dir(d.path());
        let w = JournalWriter::<WorkerEvent>::open(&dir, Options::default()).unwrap();
        assert_eq!(
            w.journal_id().into_bytes(),
            journal_id,
            "the same journal, continued"
        );
        drop(w);
        ingest_again(d.path(), &mut ingested).unwrap();
        let i = ingested.expect("the journal is ingested once it has its Genesis");
        assert_eq!((i.journal_id.into_bytes(), i.last_seq), (journal_id, 1));
    }

    #[test]
    fn an_ingestion_at_seq_0_by_an_older_dispatch_is_continued_by_the_genesis() {
        let d = tempfile::tempdir().unwrap();
        let journal_id = header_only_journal(d.path());
        // What an older dispatch recorded of the journal above: seq 0, the genesis chain.
        let mut ingested = Some(WorkerReportIngested {
            submission_id: uuid::Uuid::nil(),
            journal_id: uuid::Uuid::from_bytes(journal_id),
            last_seq: 0,
            head: crate::event::Sha256Digest(journal::frame::genesis_chain(&journal_id)),
            preflight: None,
            publication: None,
            published_dir: None,
            manifest_sha256: None,
            state_class: None,
            finished: None,
        });
        let dir = super::super::supervisor::journal_dir(d.path());
        drop(JournalWriter::<WorkerEvent>::open(&dir, Options::default()).unwrap());
        ingest_again(d.path(), &mut ingested).unwrap();
        assert_eq!(ingested.as_ref().map(|i| i.last_seq), Some(1));
        // A journal whose Genesis is not the one segment 1's header promised is another journal.
        let other = tempfile::tempdir().unwrap();
        drop(
            JournalWriter::<WorkerEvent>::open(
                &super::super::supervisor::journal_dir(other.path()),
                Options::default(),
            )
            .unwrap(),
        );
        let mut from_elsewhere = Some(WorkerReportIngested {
            last_seq: 0,
            ..ingested.clone().unwrap()
        });
        let err = ingest_again(other.path(), &mut from_elsewhere).unwrap_err();
        assert!(err.contains("replaced by another journal"), "{err}");
    }

    #[test]
    fn a_journal_being_created_reads_as_not_yet_never_as_a_journal_to_distrust_later() {
        for round in 0..20 {
            let d = tempfile::tempdir().unwrap();
            if let Err(why) = race_creation_against_ingestion(d.path()) {
                panic!("round {round}: {why}");
            }
        }
    }

    /// A TERM from outside is told by a forward, or by an exit the supervisor recorded
    /// interrupted by nothing it sent and no signal (Slurm's TERM reached the payload first);
    /// never by an exit of its own, one by a signal, or one at the deadline.
    #[test]
    fn a_term_from_outside_is_a_forward_or_an_interrupted_exit_without_a_signal() {
        let exit = |interrupted: bool, signal: Option<i32>| PayloadExited {
            code: signal.is_none().then_some(0),
            signal,
            interrupted,
        };
        let sent = |reason: &str| ShutdownSignalled {
            signal: "TERM".into(),
            reason: reason.into(),
        };
        let report =
            |exited: Option<PayloadExited>, signals: Vec<ShutdownSignalled>| WorkerReport {
                exited,
                signals,
                ..WorkerReport::default()
            };
        assert!(report(Some(exit(true, None)), vec![]).term_from_outside());
        assert!(report(Some(exit(true, None)), vec![sent("forwarded")]).term_from_outside());
        assert!(report(None, vec![sent("forwarded")]).term_from_outside());
        assert!(!report(Some(exit(false, None)), vec![]).term_from_outside());
        assert!(!report(Some(exit(true, Some(9))), vec![]).term_from_outside());
        assert!(!report(Some(exit(true, None)), vec![sent("deadline")]).term_from_outside());
        assert!(!report(None, vec![]).term_from_outside());
    }
}
