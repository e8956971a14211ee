//! `dispatch audit`: offline. Verifies the chain, replays every reducer from seq 1, checks the
//! rules of `policy::audit` over the whole history, checks that the newest snapshot agrees with
//! the replay, and checks published evidence against its manifests. Makes no Slurm call and
//! writes nothing.

use std::path::Path;

use serde::Serialize;

use super::journal::{verify, VerifyReport};
use crate::journal::{self, JournalError, Status};
use crate::policy::audit::{Auditor, Findings};
use crate::state::State;
use crate::worker::publish;

/// Published directories checked at most; beyond this the audit says it stopped.
pub const MAX_PUBLISHED_CHECKED: usize = 10_000;

#[derive(Debug, Serialize)]
pub struct AuditReport {
    /// `ok`, `violations` or `damaged`.
    pub status: &'static str,
    pub journal: VerifyReport,
    pub reducers: ReducerCheck,
    pub rules: Option<Findings>,
    pub snapshot: Option<SnapshotCheck>,
    pub evidence: EvidenceCheck,
}

#[derive(Debug, Serialize)]
pub struct ReducerCheck {
    pub replayed: u64,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct SnapshotCheck {
    pub seq: Option<u64>,
    pub rejected: Option<String>,
    /// The state loaded through the snapshot equals the state of the full replay.
    pub agrees: bool,
}

#[derive(Debug, Default, Serialize)]
pub struct EvidenceCheck {
    pub checked: u64,
    pub failed: Vec<EvidenceFailure>,
    pub complete: bool,
}

#[derive(Debug, Serialize)]
pub struct EvidenceFailure {
    pub dir: String,
    pub problems: Vec<String>,
}

pub fn audit(state_dir: &Path) -> Result<AuditReport, JournalError> {
    let journal_dir = crate::statedir::journal_dir(state_dir);
    let report = verify(&journal_dir)?;
    let damaged = matches!(report.kind, Status::Corrupt | Status::Tampered);
    let mut state = State::default();
    let mut auditor = Auditor::default();
    let mut reducers = ReducerCheck {
        replayed: 0,
        error: None,
    };
    let mut rules = None;
    let mut snapshot = None;
    if !damaged {
        let replay = journal::replay(&journal_dir, None, |env| {
            auditor.observe(&env);
            state.apply(&env)?;
            reducers.replayed += 1;
            Ok(())
        });
        if let Err(e) = replay {
            reducers.error = Some(e.to_string());
        }
        rules = Some(auditor.finish());
        if reducers.error.is_none() {
            snapshot = Some(match journal::load(&journal_dir) {
                Ok(loaded) => SnapshotCheck {
                    seq: loaded.snapshot_seq,
                    rejected: loaded.snapshot_rejected,
                    agrees: loaded.state == state,
                },
                Err(e) => SnapshotCheck {
                    seq: None,
                    rejected: Some(e.to_string()),
                    agrees: false,
                },
            });
        }
    }
    let evidence = check_evidence(&state_dir.join("pools"));
    let clean = !damaged
        && reducers.error.is_none()
        && rules.as_ref().is_some_and(|f| f.violation_count == 0)
        && snapshot.as_ref().is_none_or(|s| s.agrees)
        && evidence.failed.is_empty();
    Ok(AuditReport {
        status: if damaged {
            "damaged"
        } else if clean {
            "ok"
        } else {
            "violations"
        },
        journal: report,
        reducers,
        rules,
        snapshot,
        evidence,
    })
}

/// Every `pools/<pool>/published/<worker>-<id>/` against its manifest.
fn check_evidence(pools_dir: &Path) -> EvidenceCheck {
    let mut check = EvidenceCheck {
        complete: true,
        ..EvidenceCheck::default()
    };
    let Ok(pools) = std::fs::read_dir(pools_dir) else {
        return check;
    };
    for pool in pools.flatten() {
        let Ok(published) = std::fs::read_dir(pool.path().join("published")) else {
            continue;
        };
        for dir in published.flatten() {
            let path = dir.path();
            // Temp directories of an unfinished publication are not evidence.
            if !path.is_dir() || dir.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if check.checked as usize >= MAX_PUBLISHED_CHECKED {
                check.complete = false;
                return check;
            }
            check.checked += 1;
            if let Err(problems) = publish::verify_published(&path) {
                check.failed.push(EvidenceFailure {
                    dir: path.display().to_string(),
                    problems,
                });
            }
        }
    }
    check
}
