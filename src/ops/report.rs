//! `dispatch report`: offline. Reads the coordinator's journal twice (which submissions, then
//! the fold), each selected worker's own journal up to its damage, the chain head at the
//! trial's verdict, and runs the audit; `policy::report` builds the data from what is read.
//! No Slurm call, nothing written to the state directory.
//!
//! The page is drawn in `cli::report_html` (inline CSS and SVG, no script). Its writer takes
//! markup only as `&'static str` and escapes every string of data.

use crate::statedir::Checked;
use std::path::Path;

use super::error::OpError;
use crate::event::WorkerEvent;
use crate::journal::{self, JournalError};
use crate::next::Next;
use crate::policy::report::{AuditInput, Builder, Report, Selector, Subject};
use crate::worker::dirs::WorkerDirs;

fn not_found(subject: &Subject) -> OpError {
    let (lists, what) = match subject {
        Subject::Trial(_) => (Next::Trials, "trials"),
        Subject::Pool(_) => (Next::PoolStatus(None), "attached pools"),
        Subject::Worker(_) => (
            Next::JournalDump(Some(&"WorkerSubmitIntent")),
            "submissions",
        ),
    };
    OpError::NotFound(format!(
        "the journal never named {}; {lists} lists {what}",
        subject.describe()
    ))
}

pub fn report(state_dir: &Checked, subject: Subject) -> Result<Report, OpError> {
    let dir = crate::statedir::journal_dir(state_dir);
    crate::statedir::trust::check_journal(&dir)?;
    if journal::segment::list(&dir).map_or(true, |s| s.is_empty()) {
        return Err(JournalError::Missing(dir).into());
    }
    let mut selector = Selector::new(subject.clone());
    journal::replay(&dir, None, |env| {
        selector.offer(&env);
        Ok(())
    })?;
    let selected = selector.finish().ok_or_else(|| not_found(&subject))?;
    let mut builder = Builder::new(selected);
    // A damaged journal is read up to its damage; the audit below says where it is.
    journal::reader::replay_ref(&dir, None, |env| Ok(builder.offer(env)?))?;
    for (id, name, pool) in builder.workers() {
        let dirs = WorkerDirs::of(state_dir, pool.as_deref(), id);
        dirs.check(state_dir).map_err(JournalError::from)?;
        let own = crate::worker::supervisor::journal_dir(&dirs.evidence);
        if journal::segment::list(&own).map_or(true, |s| s.is_empty()) {
            continue;
        }
        // Up to its first damage (or an event that does not decode): what it says until then.
        let read = journal::reader::replay_of::<WorkerEvent>(&own, None, |env| {
            builder.offer_worker(id, &name, &env);
            Ok(())
        });
        if let Err(e) = read {
            tracing::warn!("worker journal {}: {e}", own.display());
        }
    }
    let chain = builder
        .verdict_seq()
        .map(|seq| chain_after(&dir, seq))
        .transpose()?
        .flatten();
    let audit = super::audit::audit(state_dir)?;
    let rules = audit.rules.as_ref();
    let input = AuditInput {
        status: audit.status,
        journal_status: audit.journal.status,
        damage: audit.journal.damage.as_ref().map(|d| {
            format!(
                "{} at {} offset {} ({} bytes)",
                d.reason, d.segment, d.offset, d.bytes
            )
        }),
        violations: rules.map(|r| r.violations.clone()).unwrap_or_default(),
        violation_count: rules.map_or(0, |r| r.violation_count),
        overrides: rules.map(|r| r.overrides.clone()).unwrap_or_default(),
        override_count: rules.map_or(0, |r| r.override_count),
        evidence_failures: audit
            .evidence
            .failed
            .iter()
            .map(|f| (f.dir.clone(), f.problems.clone()))
            .collect(),
    };
    Ok(builder.finish(input, chain))
}

/// The journal's chain value after the frame with `seq` (journal-format.md: each frame's chain
/// covers every frame before it).
fn chain_after(dir: &Path, seq: u64) -> Result<Option<String>, JournalError> {
    let mut chain = None;
    journal::scan::scan(dir, None, |f| {
        if f.seq == seq {
            chain = Some(hex::encode(f.chain));
        }
        f.seq < seq
    })
    .map_err(|source| JournalError::Io {
        path: dir.to_owned(),
        what: "read journal".to_owned(),
        source,
    })?;
    Ok(chain)
}
