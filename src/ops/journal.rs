//! `dispatch journal init|verify|dump|repair`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::event::Envelope;
use crate::journal::{self, JournalError, Options, Status, Writer};

#[derive(Debug, Serialize)]
pub struct InitReport {
    pub journal_id: String,
    pub path: PathBuf,
    pub created: bool,
}

pub fn init(journal_dir: &Path) -> Result<InitReport, JournalError> {
    let w = Writer::open_checking_everything(journal_dir, Options::default())?;
    Ok(InitReport {
        journal_id: w.journal_id().to_string(),
        path: journal_dir.to_owned(),
        created: w.opened().created,
    })
}

#[derive(Debug, Serialize)]
pub struct DamageReport {
    pub segment: String,
    pub offset: u64,
    pub bytes: u64,
    pub reason: String,
}

/// One branch of a fork (journal-format.md §8.1), as it stands in the file.
#[derive(Debug, Serialize)]
pub struct BranchReport {
    pub forked_after_seq: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub events: u64,
    pub first_offset: u64,
    pub tip: String,
}

#[derive(Debug, Serialize)]
pub struct ForkReport {
    pub common_seq: u64,
    /// Frames from the fork's offset to the end of the segment: what a merge re-appends.
    pub events: u64,
    pub branches: Vec<BranchReport>,
}

impl ForkReport {
    fn of(fork: &journal::fork::Fork) -> ForkReport {
        ForkReport {
            common_seq: fork.common_seq,
            events: fork.frames.len() as u64,
            branches: fork
                .branches
                .iter()
                .map(|b| BranchReport {
                    forked_after_seq: b.forked_after_seq,
                    first_seq: b.first_seq,
                    last_seq: b.last_seq,
                    events: b.events,
                    first_offset: b.first_offset,
                    tip: hex::encode(b.tip),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct VerifyReport {
    pub status: Status,
    pub events: u64,
    pub last_seq: u64,
    pub head: String,
    pub damage: Option<DamageReport>,
    /// The branches, when the status is `forked`.
    pub fork: Option<ForkReport>,
}

/// Hold a shared lock on the journal's `LOCK` so that no writer is mid-append while we
/// classify (a half-written frame would look like a torn tail). Best effort: without a lock
/// file there is no writer to wait for.
fn wait_for_writers(journal_dir: &Path) -> Option<std::fs::File> {
    let file = std::fs::File::open(journal_dir.join(crate::journal::writer::LOCK_FILE)).ok()?;
    if file.try_lock_shared().is_err() {
        tracing::warn!("waiting for a running dispatch command to finish writing the journal");
        file.lock_shared().ok()?;
    }
    // A writer on another host holds the lease instead: wait a moment for it too.
    const QUIET_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
    if !crate::journal::lease::wait_until_free(journal_dir, QUIET_WAIT) {
        tracing::warn!(
            "a writer (perhaps on another host) still holds the journal's lease after {} s; \
             classifying anyway, so a frame it is writing may show as a torn tail",
            QUIET_WAIT.as_secs()
        );
    }
    Some(file)
}

/// Classify the whole journal, decoding every payload, while no writer appends: the verdict of
/// [`journal::scan::classify`], the one classifier every command shares.
pub fn verify(journal_dir: &Path) -> Result<VerifyReport, JournalError> {
    // Trust is checked before its LOCK is opened: a link there would lead the lock elsewhere.
    require_segments(journal_dir)?;
    let _quiet = wait_for_writers(journal_dir);
    let scan = journal::scan::classify(journal_dir, None, |_| true).map_err(|source| {
        JournalError::Io {
            path: journal_dir.to_owned(),
            what: "read journal".to_owned(),
            source,
        }
    })?;
    // Damage before the first valid frame (a first segment that is not a journal, or missing)
    // leaves no head, but it is still damage to report, not an absent journal.
    if scan.head.is_none() && scan.damage().is_none() {
        return Err(JournalError::Missing(journal_dir.to_owned()));
    }
    let (last_seq, head) = scan
        .head
        .as_ref()
        .map_or((0, String::new()), |h| (h.last_seq, hex::encode(h.chain)));
    Ok(VerifyReport {
        status: scan.status(),
        events: scan.events,
        last_seq,
        head,
        damage: scan.damage().cloned().map(|d| DamageReport {
            segment: d.segment,
            offset: d.offset,
            bytes: d.bytes,
            reason: d.reason,
        }),
        fork: scan.fork().map(ForkReport::of),
    })
}

#[derive(Debug, Serialize)]
pub struct DumpLine {
    pub seq: u64,
    pub time: String,
    pub id: String,
    pub actor: crate::event::Actor,
    pub kind: &'static str,
    pub event: serde_json::Value,
}

impl DumpLine {
    pub fn from_envelope(env: &Envelope) -> DumpLine {
        let (kind, event) = named_body(env);
        DumpLine {
            seq: env.seq,
            time: env.time.to_rfc3339(),
            id: env.id.to_string(),
            actor: env.actor.clone(),
            kind,
            event,
        }
    }
}

/// An event's kind name and body for `journal dump`, decoded by whichever vocabulary knows its
/// kind: a worker's own journal (`<worker>/evidence/journal`) holds the supervisor's kinds,
/// which the coordinator's vocabulary reads as `Unknown`.
pub fn named_body(env: &Envelope) -> (&'static str, serde_json::Value) {
    use crate::event::{Event, Vocabulary, WorkerEvent};
    if let Event::Unknown {
        kind,
        flags,
        payload,
    } = &env.event
    {
        if let Ok(w) = WorkerEvent::decode_from(env.seq, *kind, *flags, payload) {
            if !matches!(w.event, WorkerEvent::Unknown { .. }) {
                return (w.event.kind_name(), w.event.body_json());
            }
        }
    }
    (env.event.kind_name(), dump_body(&env.event))
}

/// An event's body for `journal dump`. A kind this dispatch does not know shows its kind
/// number and frame flags beside its payload (journal-format.md §6.3): the name alone,
/// `Unknown`, would not say which kind it is or whether it had to be understood.
pub fn dump_body(event: &crate::event::Event) -> serde_json::Value {
    let mut body = event.body_json();
    if let (crate::event::Event::Unknown { kind, flags, .. }, Some(map)) =
        (event, body.as_object_mut())
    {
        map.insert("kind".to_owned(), (*kind).into());
        map.insert("flags".to_owned(), (*flags).into());
    }
    body
}

/// A journal directory without a segment holds no journal, whatever else is in it: every
/// command answers it as it answers a missing directory (journal-format.md §8). A directory
/// that is not ours is refused before its listing is believed.
fn require_segments(journal_dir: &Path) -> Result<(), JournalError> {
    if !journal_dir.exists() {
        return Err(JournalError::Missing(journal_dir.to_owned()));
    }
    crate::statedir::trust::check_journal(journal_dir)?;
    if journal::segment::list(journal_dir).map_or(true, |s| s.is_empty()) {
        return Err(JournalError::Missing(journal_dir.to_owned()));
    }
    Ok(())
}

/// Stream the events with `from <= seq <= to` to `out`. Stops at damage and returns the scan.
pub fn dump(
    journal_dir: &Path,
    from: u64,
    to: u64,
    out: impl FnMut(&Envelope) -> std::io::Result<()>,
) -> Result<journal::Scan, JournalError> {
    let mut everything = crate::policy::journal_filter::Filter::default();
    dump_filtered(journal_dir, from, to, &mut everything, out)
}

/// [`dump`] of the events `filter` admits. The filter sees every event, those outside
/// `from..=to` too: it learns submissions from their intents.
pub fn dump_filtered(
    journal_dir: &Path,
    from: u64,
    to: u64,
    filter: &mut crate::policy::journal_filter::Filter,
    mut out: impl FnMut(&Envelope) -> std::io::Result<()>,
) -> Result<journal::Scan, JournalError> {
    require_segments(journal_dir)?;
    journal::replay(journal_dir, None, |env| {
        if filter.admits(&env) && env.seq >= from && env.seq <= to {
            out(&env).map_err(|source| JournalError::Io {
                path: PathBuf::from("<stdout>"),
                what: "write".to_owned(),
                source,
            })?;
        }
        Ok(())
    })
}

crate::words! {
    /// What `journal repair` did.
    pub enum Repaired {
        /// A fork's branches merged, keeping every event.
        Merged => "merged",
        /// A torn tail cut (and recorded).
        Repaired => "repaired",
        /// Nothing to do.
        Clean => "clean",
    }
}

#[derive(Debug, Serialize)]
pub struct RepairReport {
    pub status: Repaired,
    pub recovered: Option<crate::event::Recovered>,
    pub merged: Option<crate::event::JournalMerged>,
}

/// Open for write, which cuts a torn tail and records it, and merges a fork keeping every
/// event; refuses corrupt or tampered journals.
pub fn repair(journal_dir: &Path) -> Result<RepairReport, JournalError> {
    require_segments(journal_dir)?;
    let w = Writer::open_merging_forks(journal_dir, Options::default())?;
    let recovered = w.opened().repaired.clone();
    let merged = w.opened().merged.clone();
    Ok(RepairReport {
        status: match (&merged, &recovered) {
            (Some(_), _) => Repaired::Merged,
            (None, Some(_)) => Repaired::Repaired,
            (None, None) => Repaired::Clean,
        },
        recovered,
        merged,
    })
}
