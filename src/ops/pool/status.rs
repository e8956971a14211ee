//! `dispatch pool status`: the views of pools and workers, from state and the workers' journals.

use std::path::Path;

use serde::Serialize;
use uuid::Uuid;

use crate::event::pool::*;
use crate::event::Micros;
use crate::journal::JournalError;
use crate::ops::error::OpError;
use crate::policy::pool::Refusal;
use crate::state::pool::*;
use crate::state::State;
use crate::worker::report;

use super::ingest::{extends_ingested, read_worker_journal};
use super::AllocationView;

#[derive(Debug, Serialize)]
pub struct StatusReport {
    pub pools: Vec<PoolView>,
    /// `pool create`s not yet a pool: an allocation of theirs may exist (`pool create` again
    /// adopts it, `pool release` cancels it).
    pub creating: Vec<CreatingView>,
}

#[derive(Debug, Serialize)]
pub struct CreatingView {
    pub pool: String,
    pub job_name: String,
    pub job_id: Option<u64>,
    pub since: String,
    /// Why salloc's answer was unclear, if it was.
    pub failure: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct PoolView {
    pub pool: String,
    /// Who cancels the allocation: `created` (dispatch, with `pool release`) or `attached`
    /// (the user; dispatch never does).
    pub owner: &'static str,
    /// `pool release` has begun.
    pub releasing: bool,
    pub allocation: AllocationView,
    pub capacity: Resources,
    pub reserved: Resources,
    pub workers: Vec<WorkerView>,
}

#[derive(Debug, Serialize)]
pub struct Resources {
    pub cpus: u64,
    pub mem_mb: u64,
}

#[derive(Debug, Serialize)]
pub struct WorkerView {
    pub name: String,
    pub submission_id: String,
    pub state: &'static str,
    pub cpus: u32,
    pub mem_mb: u64,
    pub step_id: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Its output files (`dispatch logs` prints them); null without the state directory.
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    #[serde(flatten)]
    pub node: NodeView,
}

/// What the worker's own journal says, for `pool status`: from the journal as it is now when
/// it can be trusted, else from what was last ingested from it.
#[derive(Debug, Default, Serialize)]
pub struct NodeView {
    pub assets: Vec<AssetUseView>,
    /// `{"status": "clean" | "torn_tail" | "corrupt" | "tampered" | "rewritten", "last_seq",
    /// "head"}`; null when the supervisor has written nothing.
    pub worker_journal: Option<WorkerJournalView>,
    /// `passed` or `refused`, once the supervisor got that far.
    pub preflight: Option<String>,
    pub refusal: Option<String>,
    pub publication: Option<PublicationView>,
    /// `sealed`, `crash_class_partial` or `empty`.
    pub state_class: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct AssetUseView {
    pub role: &'static str,
    pub name: String,
    pub sha256: String,
}

#[derive(Debug, Serialize)]
pub struct WorkerJournalView {
    pub status: String,
    pub last_seq: Option<u64>,
    pub head: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct PublicationView {
    /// `started`, `published`, `timed_out` or `failed`.
    pub outcome: String,
    pub dir: Option<String>,
    pub manifest_sha256: Option<String>,
    pub took_ms: Option<u64>,
}

impl NodeView {
    fn from_ingested(r: &WorkerReportIngested) -> NodeView {
        NodeView {
            preflight: r.preflight.clone(),
            publication: r.publication.as_ref().map(|outcome| PublicationView {
                outcome: outcome.clone(),
                dir: r.published_dir.clone(),
                manifest_sha256: r.manifest_sha256.map(|h| hex::encode(h.0)),
                took_ms: None,
            }),
            state_class: r.state_class.clone(),
            worker_journal: Some(WorkerJournalView {
                status: "ingested".to_owned(),
                last_seq: Some(r.last_seq),
                head: Some(hex::encode(r.head.0)),
                reason: None,
            }),
            ..NodeView::default()
        }
    }

    fn from_report(r: &report::WorkerReport, step_over: bool) -> NodeView {
        let ingested = r.ingested(Uuid::nil(), step_over);
        let mut v = NodeView::from_ingested(&ingested);
        v.refusal = r.refused.as_ref().map(|x| x.reason.clone());
        if let (Some(p), Some(report::Publication::Published(x))) =
            (&mut v.publication, &r.publication)
        {
            p.took_ms = Some(x.took_ms);
        }
        if let (Some(p), Some(report::Publication::TimedOut(x))) =
            (&mut v.publication, &r.publication)
        {
            p.took_ms = Some(x.took_ms);
        }
        v.worker_journal = Some(WorkerJournalView {
            status: r.journal_status.map_or("clean", |s| s.as_str()).to_owned(),
            last_seq: Some(r.last_seq),
            head: r.head.clone(),
            reason: None,
        });
        v
    }

    /// A journal that cannot be trusted: say so, and show only what was ingested before.
    fn untrusted(w: &Worker, status: &str, reason: String) -> NodeView {
        let mut v = w
            .report
            .as_ref()
            .map(NodeView::from_ingested)
            .unwrap_or_default();
        v.worker_journal = Some(WorkerJournalView {
            status: status.to_owned(),
            last_seq: None,
            head: None,
            reason: Some(reason),
        });
        v
    }
}

/// The node view of `w`: its journal read now (when `pools_dir` is given), checked against
/// what was ingested from it before.
fn node_view(pools_dir: Option<&Path>, pool: &str, w: &Worker) -> NodeView {
    let mut v = if let Some(d) = &w.journal_damage {
        NodeView::untrusted(w, &d.status, d.reason.clone())
    } else {
        match pools_dir.map(|dir| read_worker_journal(dir, pool, w)) {
            Some(Ok(Some(r))) => match extends_ingested(w, &r) {
                Ok(()) => NodeView::from_report(&r, !w.state.holds_budget()),
                Err(reason) => NodeView::untrusted(w, "rewritten", reason),
            },
            Some(Err(JournalError::Damaged { status, damage, .. })) => NodeView::untrusted(
                w,
                status.as_str(),
                format!(
                    "{} at {} offset {}",
                    damage.reason, damage.segment, damage.offset
                ),
            ),
            Some(Err(e)) => NodeView::untrusted(w, "unreadable", e.to_string()),
            Some(Ok(None)) | None => w
                .report
                .as_ref()
                .map(NodeView::from_ingested)
                .unwrap_or_default(),
        }
    };
    v.assets = w
        .assets
        .iter()
        .map(|a| AssetUseView {
            role: a.kind.as_str(),
            name: a.name.clone(),
            sha256: hex::encode(a.sha256.0),
        })
        .collect();
    v
}

impl WorkerView {
    fn of(job: u64, pools_dir: Option<&Path>, pool: &str, w: &Worker) -> WorkerView {
        let logs = pools_dir.map(|d| {
            crate::ops::logs::LogPaths::of(&crate::worker::dirs::WorkerDirs::new(
                d,
                pool,
                w.submission_id,
            ))
        });
        WorkerView {
            name: w.name.clone(),
            submission_id: w.submission_id.to_string(),
            state: w.state.as_str(),
            cpus: w.cpus,
            mem_mb: w.mem_mb,
            step_id: w.step_id.map(|s| format!("{job}.{s}")),
            exit_code: w.exit_code,
            exit_signal: w.exit_signal,
            stdout: logs.as_ref().map(|l| l.stdout.clone()),
            stderr: logs.map(|l| l.stderr),
            node: node_view(pools_dir, pool, w),
        }
    }
}

/// The status of one pool or all, from state alone (no Slurm call, no file read).
pub fn status_of(state: &State, pool: Option<&str>, now: Micros) -> Result<StatusReport, OpError> {
    status(state, None, pool, now)
}

/// The status of one pool or all: state, plus each worker's own journal read from
/// `pools_dir` (no Slurm call, nothing written).
pub fn status(
    state: &State,
    pools_dir: Option<&Path>,
    pool: Option<&str>,
    now: Micros,
) -> Result<StatusReport, OpError> {
    if let Some(p) = pool {
        if !state.pools.pools.contains_key(p) && !state.pools.creations.contains_key(p) {
            return Err(Refusal::NoPool { pool: p.to_owned() }.into());
        }
    }
    let pools = state
        .pools
        .pools
        .values()
        .filter(|p| pool.is_none_or(|name| p.name == name))
        .map(|p| {
            let (cpus, mem_mb) = p.reserved();
            let job = p.allocation.job_id;
            let view = |w: &Worker| WorkerView::of(job, pools_dir, &p.name, w);
            let mut workers: Vec<WorkerView> = p.active.values().map(view).collect();
            workers.extend(p.finished.iter().map(view));
            PoolView {
                pool: p.name.clone(),
                owner: if p.created.is_some() {
                    "created"
                } else {
                    "attached"
                },
                releasing: p.releasing,
                allocation: AllocationView::of(&p.allocation, Some(now), p.ended.as_ref()),
                capacity: Resources {
                    cpus: u64::from(p.allocation.cpus),
                    mem_mb: p.allocation.mem_mb,
                },
                reserved: Resources { cpus, mem_mb },
                workers,
            }
        })
        .collect();
    let creating = state
        .pools
        .creations
        .values()
        .filter(|c| pool.is_none_or(|name| c.intent.pool == name))
        .map(|c| CreatingView {
            pool: c.intent.pool.clone(),
            job_name: c.intent.job_name.clone(),
            job_id: c.job_id,
            since: c.since.to_rfc3339(),
            failure: c.failure.clone(),
        })
        .collect();
    Ok(StatusReport { pools, creating })
}
