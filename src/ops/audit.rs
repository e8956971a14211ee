//! `dispatch audit`: offline. Verifies the chain, replays every reducer from seq 1, checks the
//! rules of `policy::audit` over the whole history, checks that the newest snapshot agrees with
//! the replay, and checks published evidence against its manifests, including the evidence
//! every trial verdict was given on (its manifests' recorded SHA-256). Makes no Slurm call and
//! writes nothing.

use crate::statedir::Checked;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::journal::{verify, VerifyReport};
use crate::event::{Event, Sha256Digest};
use crate::journal::{self, JournalError};
use crate::policy::audit::AuditStatus;
use crate::policy::audit::{Auditor, Findings, GenerationJournal};
use crate::state::State;
use crate::worker::publish;

/// Published directories checked at most; beyond this the audit says it stopped.
pub const MAX_PUBLISHED_CHECKED: usize = 10_000;

#[derive(Debug, Serialize)]
pub struct AuditReport {
    pub status: AuditStatus,
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

pub fn audit(state_dir: &Checked) -> Result<AuditReport, JournalError> {
    let journal_dir = crate::statedir::journal_dir(state_dir);
    let report = verify(&journal_dir)?;
    let damaged = report.status.refuses_writes();
    let mut state = State::default();
    let mut auditor = Auditor::default();
    let mut reducers = ReducerCheck {
        replayed: 0,
        error: None,
    };
    let mut rules = None;
    let mut snapshot = None;
    let mut verdict_evidence = Vec::new();
    if !damaged {
        let replay = journal::replay(&journal_dir, None, |env| {
            auditor.observe(&env);
            if let Event::TrialJudged(j) = &env.event {
                for e in &j.evidence {
                    if let (Some(dir), Some(sha)) = (&e.published_dir, e.manifest_sha256) {
                        let what = format!("evidence of trial {:?}", j.trial);
                        verdict_evidence.push((what, PathBuf::from(dir), sha));
                    }
                }
            }
            state.apply(&env)?;
            reducers.replayed += 1;
            Ok(())
        });
        if let Err(e) = replay {
            reducers.error = Some(e.to_string());
        }
        verdict_evidence.extend(check_lineage(state_dir, &mut auditor));
        rules = Some(auditor.finish());
        if reducers.error.is_none() {
            snapshot = Some(match journal::load::<State>(&journal_dir) {
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
    let mut evidence = check_evidence(state_dir);
    check_verdict_evidence(&mut evidence, state_dir, &verdict_evidence);
    let clean = !damaged
        && reducers.error.is_none()
        && rules.as_ref().is_some_and(|f| f.violation_count == 0)
        && snapshot.as_ref().is_none_or(|s| s.agrees)
        && evidence.failed.is_empty();
    Ok(AuditReport {
        status: if damaged {
            AuditStatus::Damaged
        } else if clean {
            AuditStatus::Ok
        } else {
            AuditStatus::Violations
        },
        journal: report,
        reducers,
        rules,
        snapshot,
        evidence,
    })
}

/// Each continuation's publication against both generations' own journals (`policy::audit`'s
/// `resumed-unverified`); returns the publications they resumed from, to be verified against
/// the manifests their receipts recorded.
fn check_lineage(state_dir: &Path, auditor: &mut Auditor) -> Vec<(String, PathBuf, Sha256Digest)> {
    let links = auditor.links().to_vec();
    let mut resumed_from = Vec::new();
    for link in links.iter().take(MAX_PUBLISHED_CHECKED) {
        let before = generation_journal(
            state_dir,
            link.predecessor_pool.as_deref(),
            link.predecessor,
        );
        let after = generation_journal(state_dir, link.successor_pool.as_deref(), link.successor);
        auditor.resumed(link, &before, &after);
        if let (Some(dir), Some(sha)) = (&link.published_dir, link.manifest_sha256) {
            let what = format!(
                "generation {} of worker {} resumed from it",
                link.generation, link.worker
            );
            resumed_from.push((what, PathBuf::from(dir), sha));
        }
    }
    resumed_from
}

/// What a generation's own journal says of its publication and of what it resumed from.
fn generation_journal(state_dir: &Path, pool: Option<&str>, id: uuid::Uuid) -> GenerationJournal {
    let dirs = crate::worker::dirs::WorkerDirs::of(state_dir, pool, id);
    let path = crate::worker::supervisor::journal_dir(&dirs.evidence);
    let mut journal = GenerationJournal {
        path: path.display().to_string(),
        ..GenerationJournal::default()
    };
    let read = dirs
        .check(state_dir)
        .map_err(JournalError::from)
        .and_then(|_| crate::worker::report::read(&dirs.evidence));
    match read {
        Ok(Some(r)) => {
            if let Some(crate::worker::report::Publication::Published(p)) = r.publication.as_ref() {
                journal.published = Some((p.dir.clone(), p.manifest_sha256));
            }
            journal.saved = r.saved.as_ref().map(|c| (c.dir.clone(), c.manifest_sha256));
            journal.payload_started = r.payload_pid.is_some() || r.exited.is_some();
            journal.resumed = r.resumed;
        }
        Ok(None) => {}
        Err(e) => journal.unreadable = Some(e.to_string()),
    }
    journal
}

/// Publications as recorded where they were relied on (a trial verdict's evidence, what a
/// continuation resumed from): each manifest's SHA-256 and the files it lists. One gone or
/// changed is reported with what relied on it (`what`).
fn check_verdict_evidence(
    check: &mut EvidenceCheck,
    state_dir: &Path,
    recorded: &[(String, PathBuf, Sha256Digest)],
) {
    for (what, dir, sha) in recorded {
        if check.checked as usize >= MAX_PUBLISHED_CHECKED {
            check.complete = false;
            return;
        }
        check.checked += 1;
        let problems = match untrusted(state_dir, dir) {
            Some(problem) => Err(vec![problem]),
            None => publish::verify_recorded(dir, sha),
        };
        if let Err(problems) = problems {
            check.failed.push(EvidenceFailure {
                dir: format!("{} ({what})", dir.display()),
                problems,
            });
        }
    }
}

/// Evidence is only evidence in directories that are ours and nobody else can write: a
/// published directory (or one on its way down from the state directory) that is another
/// user's, writable by others, or a link is reported, never verified.
fn untrusted(state_dir: &Path, dir: &Path) -> Option<String> {
    // Recorded directories are absolute; the state directory may have been given relative.
    let (state_dir, dir) = (
        std::path::absolute(state_dir).ok()?,
        std::path::absolute(dir).ok()?,
    );
    let (state_dir, dir) = (state_dir.as_path(), dir.as_path());
    let below = dir.strip_prefix(state_dir).ok()?;
    if below
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Some(format!(
            "{} climbs out of the state directory",
            dir.display()
        ));
    }
    crate::statedir::trust::check_below(state_dir, dir)
        .err()
        .map(|e| format!("not trusted as evidence: {e}"))
}

/// Every published directory (`pools/<pool>/published/<worker>-<id>/` and
/// `jobs/published/<worker>-<id>/`) against its manifest.
fn check_evidence(state_dir: &Path) -> EvidenceCheck {
    let mut check = EvidenceCheck {
        complete: true,
        ..EvidenceCheck::default()
    };
    let mut published_dirs = vec![state_dir.join("jobs/published")];
    if let Ok(pools) = std::fs::read_dir(state_dir.join("pools")) {
        published_dirs.extend(pools.flatten().map(|p| p.path().join("published")));
    }
    for published in published_dirs {
        let Ok(published) = std::fs::read_dir(published) else {
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
            if let Some(problem) = untrusted(state_dir, &path) {
                check.failed.push(EvidenceFailure {
                    dir: path.display().to_string(),
                    problems: vec![problem],
                });
                continue;
            }
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
