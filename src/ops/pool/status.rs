//! `dispatch pool status`: the views of pools and workers, from state and the workers' journals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use uuid::Uuid;

use crate::event::pool::*;
use crate::event::Micros;
use crate::journal::JournalError;
use crate::ops::error::OpError;
use crate::ops::logs::LogPaths;
use crate::ops::reconcile::PoolPreempted;
use crate::policy::lineage::{Lineage, Lineages};
use crate::policy::node::Outcome;
use crate::policy::placement::{self, NodeRoom};
use crate::policy::pool::Refusal;
use crate::policy::renewal::end_cause;
use crate::slurm::JobId;
use crate::state::pool::*;
use crate::state::State;
use crate::statedir::trust;
use crate::worker::dirs::WorkerDirs;
use crate::worker::report;

use super::ingest::{extends_ingested, read_journal_below};
use super::renew::{RenewalReconciled, SuccessorListed};
use super::AllocationView;

#[derive(Debug, Serialize)]
pub struct StatusReport<W = Vec<WorkerView>> {
    pub pools: Vec<PoolView<W>>,
    /// `pool create`s not yet a pool: an allocation of theirs may exist (`pool create` again
    /// adopts it, `pool release` cancels it).
    pub creating: Vec<CreatingView>,
    /// Workers of pools that are gone whose continuations wait for them (no pool lists them);
    /// the key is absent when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting_for_gone_pools: Vec<GonePoolWorker>,
}

/// A worker of a pool that is gone, its continuation waiting.
#[derive(Debug, Serialize)]
pub struct GonePoolWorker {
    pub pool: String,
    pub name: String,
    pub submission_id: String,
    #[serde(flatten)]
    pub lineage: Lineage,
}

#[derive(Debug, Serialize)]
pub struct CreatingView {
    pub pool: String,
    pub job_name: String,
    pub job_id: Option<JobId>,
    pub since: String,
    /// Why salloc's answer was unclear, if it was.
    pub failure: Option<String>,
}

/// `W`: its workers' views, made all at once (a `Vec`) or as they are written.
#[derive(Debug, Serialize)]
pub struct PoolView<W = Vec<WorkerView>> {
    pub pool: String,
    pub owner: Owner,
    /// `pool release` has begun.
    pub releasing: bool,
    /// Whether the allocation was made with `--no-kill` (a failed node ends only the steps on
    /// it): known for the allocations dispatch made, null for one attached (Slurm does not
    /// show it; without it a node's failure ends the whole allocation).
    pub no_kill: Option<bool>,
    /// Nodes that left the allocation, and the proof.
    pub nodes_lost: BTreeMap<String, String>,
    pub allocation: AllocationView,
    /// What the pool can hold now: its nodes' capacities summed, a lost node's not counted
    /// (what `pool submit --dry-run` places against, without asking Slurm).
    pub capacity: Resources,
    pub reserved: Resources,
    /// Each node's capacity (as recorded at attach; nothing on a lost node) and what the
    /// workers placed there reserve.
    pub nodes: Vec<NodeRoom>,
    /// A pool created with `--renew`: its allocations so far, the next one, its bounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewal: Option<RenewalView>,
    /// How the pool's last allocation ended: the current one once proven over, else the one
    /// a renewal replaced; null while none has.
    pub last_end: Option<EndView>,
    pub workers: W,
}

/// How one of a pool's allocations ended (`pool status`'s `last_end`).
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct EndView {
    /// Its number among the pool's allocations (1: the first, and a pool that does not renew).
    pub generation: u32,
    pub job_id: JobId,
    /// `time-limit`, `preempted`, `node-failure` or `lost`, from Slurm's proof.
    pub cause: String,
    pub proof: String,
    /// When its end was recorded (RFC 3339); null when the state does not say.
    pub at: Option<String>,
}

impl EndView {
    /// `p`'s current allocation once proven over, else the last a renewal replaced.
    pub fn of(p: &Pool) -> Option<EndView> {
        let generation = p.renewal.as_ref().map_or(1, |r| r.generation);
        match (
            &p.ended,
            p.renewal.as_ref().and_then(|r| r.last_end.as_ref()),
        ) {
            (Some(e), _) => {
                let (cause, proof) = end_cause(p)?;
                Some(EndView {
                    generation,
                    job_id: e.job_id,
                    cause: cause.as_str().to_owned(),
                    proof,
                    at: p.ended_at.map(Micros::to_rfc3339),
                })
            }
            (None, Some(e)) => Some(EndView {
                generation: e.generation,
                job_id: e.job_id,
                cause: e.cause.clone(),
                proof: e.proof.clone(),
                at: e.at.map(Micros::to_rfc3339),
            }),
            (None, None) => None,
        }
    }
}

/// A renewing pool's header (`pool status`): read from the journal alone, as every view is;
/// Slurm's word on the next allocation (PENDING and why) is `reconcile`'s `renewals`.
#[derive(Debug, Serialize)]
pub struct RenewalView {
    /// Allocations so far, the current one included.
    pub generation: u32,
    /// When the first allocation started (RFC 3339), and the seconds since.
    pub alive_since: String,
    pub alive_s: i64,
    pub until: Option<String>,
    pub max_allocations: Option<u32>,
    pub overlap: bool,
    /// Why no allocation is asked for again, once renewal stopped.
    pub stopped: Option<String>,
    pub successor: Option<SuccessorView>,
    /// The current allocation dispatch is ending itself, its workers all over
    /// (`PoolAllocationEndIntent`); only while it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ending: Option<EndingView>,
}

/// An early end of a renewing pool's allocation: which, why, since when, and what its scancel
/// answered (`accepted`, `refused`, `unknown`; null: not answered yet).
#[derive(Debug, Serialize)]
pub struct EndingView {
    pub job_id: JobId,
    pub reason: String,
    pub since: String,
    pub answer: Option<String>,
    pub detail: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct SuccessorView {
    pub generation: u32,
    pub job_name: String,
    /// Known once salloc named it or it was found by name.
    pub job_id: Option<JobId>,
    /// When it was asked for (RFC 3339).
    pub asked_at: String,
    /// The job it may not run beside (`--dependency=afterany`).
    pub after: Option<JobId>,
    /// Why its salloc's outcome is not known, if it is not.
    pub unclear: Option<String>,
    /// Slurm's state and reason for it, as the refresh's `reconcile` listed it (`--refresh`
    /// only; null otherwise, or when it was not listed).
    pub slurm: Option<SuccessorListed>,
}

impl RenewalView {
    /// Pool `p`'s renewal, its next allocation with what a refresh listed of it (`seen`).
    pub fn of(p: &Pool, r: &Renewal, now: Micros, seen: &[RenewalReconciled]) -> RenewalView {
        RenewalView {
            generation: r.generation,
            alive_since: r.first_start.to_rfc3339(),
            alive_s: (now.0 - r.first_start.0).max(0) / 1_000_000,
            until: r.asked.until.map(Micros::to_rfc3339),
            max_allocations: r.asked.max_allocations,
            overlap: r.asked.overlap,
            stopped: r.stopped.clone(),
            successor: r.successor.as_ref().map(|s| SuccessorView {
                generation: s.intent.generation,
                job_name: s.intent.job_name.clone(),
                job_id: s.job_id,
                asked_at: s.since.to_rfc3339(),
                after: s.intent.after,
                unclear: s.failure.clone(),
                slurm: seen
                    .iter()
                    .find(|x| {
                        x.pool == p.name
                            && x.generation == s.intent.generation
                            && x.job_id.is_some()
                            && x.job_id == s.job_id
                    })
                    .and_then(|x| x.slurm.clone()),
            }),
            ending: r.ending.as_ref().map(|x| EndingView {
                job_id: x.job_id,
                reason: x.reason.clone(),
                since: x.since.to_rfc3339(),
                answer: x.answer.as_ref().map(|(a, _)| a.clone()),
                detail: x.answer.as_ref().map(|(_, d)| d.clone()),
            }),
        }
    }
}

crate::words! {
    /// Who cancels a pool's allocation.
    pub enum Owner {
        /// dispatch made it (`pool create`), and `pool release` cancels it.
        Created => "created",
        /// The user's own: dispatch never cancels it.
        Attached => "attached",
    }
}

#[derive(Debug, Serialize)]
pub struct WorkerView {
    pub name: String,
    pub submission_id: String,
    #[serde(serialize_with = "crate::state::word")]
    pub state: WorkerState,
    pub cpus: u32,
    pub mem_mb: u64,
    /// The node its budget is held on, and the GPUs it reserves there.
    #[serde(rename = "node")]
    pub on_node: String,
    pub gpus: u32,
    pub step_id: Option<String>,
    /// Its payload's exit code, or the signal that ended it: as the coordinator recorded them,
    /// else as the worker's own journal says them now.
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Why its launch failed (for a launch Slurm refused, srun's own words); null otherwise.
    pub launch_failure: Option<String>,
    /// What the worker's own journal says beyond `state` while its step is not proven over
    /// (`pool status --refresh` proves it): `exited`, `publishing` or `published`; null when
    /// it says nothing more, or once the worker no longer holds budget.
    pub stage: Option<Stage>,
    /// Its output files (`dispatch logs` prints them); null without the state directory.
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    /// Its generation, and where its continuation stands (`--continue N`).
    #[serde(flatten)]
    pub lineage: Lineage,
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
    /// `sealed`, `checkpointed`, `crash_class_partial` or `empty`.
    pub state_class: Option<String>,
    /// The node's GPU indexes the step got (`SLURM_STEP_GPUS`), and what the payload sees
    /// (`CUDA_VISIBLE_DEVICES`), as its supervisor recorded them; null for none.
    pub step_gpus: Option<String>,
    pub cuda_visible_devices: Option<String>,
    /// How the payload ended (`policy::node::Outcome`: `completed`, `failed`, `interrupted`,
    /// `refused`); null while it runs, or when no journal says.
    pub outcome: Option<Outcome>,
    /// The payload's exit (code, signal) as the journal read now says it.
    #[serde(skip)]
    pub exited: Option<(Option<i32>, Option<i32>)>,
}

crate::words! {
    /// How far a worker that still holds budget got, as its own journal says.
    pub enum Stage {
        /// Its payload ended; the supervisor settles, publishes and cleans up.
        Exited => "exited",
        /// Its publication has begun.
        Publishing => "publishing",
        /// Its publication is done.
        Published => "published",
    }
}

impl Stage {
    /// The stage of a worker whose payload ended (`outcome`), by its publication's outcome
    /// (`started`, `published`, …).
    pub(crate) fn of(outcome: Option<Outcome>, publication: Option<&str>) -> Option<Stage> {
        match publication {
            Some("started") => Some(Stage::Publishing),
            Some("published") => Some(Stage::Published),
            _ if outcome.is_some_and(|o| o != Outcome::Refused) => Some(Stage::Exited),
            _ => None,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct AssetUseView {
    #[serde(serialize_with = "crate::state::word")]
    pub role: crate::event::asset::AssetKind,
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
        v.exited = r.exited.as_ref().map(|e| (e.code, e.signal));
        v.outcome = r.payload_outcome();
        if let Some(d) = &r.devices {
            v.step_gpus.clone_from(&d.step_gpus);
            v.cuda_visible_devices.clone_from(&d.cuda_visible_devices);
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

/// One pool's worker directories, for `pool status`: found once for all its workers.
#[derive(Default)]
struct PoolDirs {
    /// The pool's `workers` directory; `None` without the state directory.
    workers: Option<PathBuf>,
    /// Every worker's directory is below this one, already checked; `None`: the pool has no
    /// `workers` directory (no supervisor of it wrote anything), or no state directory.
    trusted: Option<PathBuf>,
}

impl PoolDirs {
    fn of(pools_dir: Option<&Path>, pool: &str) -> PoolDirs {
        let Some(dir) = pools_dir else {
            return PoolDirs::default();
        };
        let workers = WorkerDirs::workers_of(dir, pool);
        let trusted = match trust::check_below(dir, &workers) {
            Ok(true) => Some(workers.clone()),
            Ok(false) => None,
            // Each worker's read says what is wrong on the way, as it would alone.
            Err(_) => Some(dir.to_owned()),
        };
        PoolDirs {
            workers: Some(workers),
            trusted,
        }
    }

    /// The worker's own journal (below `evidence`) as it is now; `None` when there is nothing
    /// to read or no need to read it (see [`journal_may_change`]).
    fn read(
        &self,
        w: &Worker,
        evidence: Option<&Path>,
    ) -> Option<Result<Option<report::WorkerReport>, JournalError>> {
        let (trusted, evidence) = (self.trusted.as_deref()?, evidence?);
        if !journal_may_change(w) {
            return None;
        }
        Some(read_journal_below(trusted, evidence, w))
    }
}

/// Whether the worker's own journal may say more than the coordinator ingested from it: while
/// its step may still run. A released worker's journal was ingested for the last time in the
/// commit that proved its step over (`release_proven`), a failed one never had a step: their
/// views come from state alone, so `pool status` reads no file per finished worker (a pool
/// keeps [`FINISHED_WORKERS_KEPT`]). Exception: a refused one is read for the refusal's reason,
/// which the ingested summary does not hold. A forgotten worker was given up without proof
/// (its step may run on), and is read.
fn journal_may_change(w: &Worker) -> bool {
    let refused = || {
        w.report
            .as_ref()
            .is_some_and(|r| r.preflight.as_deref() == Some("refused"))
    };
    !matches!(w.state, WorkerState::Released | WorkerState::Failed) || refused()
}

/// The node view of `w`: its journal read now (when it may have changed), checked against
/// what was ingested from it before.
fn node_view(dirs: &PoolDirs, w: &Worker, evidence: Option<&Path>) -> NodeView {
    let mut v = if let Some(d) = &w.journal_damage {
        NodeView::untrusted(w, &d.status, d.reason.clone())
    } else {
        match dirs.read(w, evidence) {
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
            role: a.kind,
            name: a.name.clone(),
            sha256: hex::encode(a.sha256.0),
        })
        .collect();
    v
}

impl WorkerView {
    fn of(pool: &Pool, dirs: &PoolDirs, lineages: &Lineages, w: &Worker) -> WorkerView {
        let submission_id = w
            .submission_id
            .hyphenated()
            .encode_lower(&mut Uuid::encode_buffer())
            .to_owned();
        let evidence = dirs
            .workers
            .as_deref()
            .map(|d| WorkerDirs::evidence_in(d, &submission_id));
        let logs = evidence.as_deref().map(LogPaths::in_evidence);
        let mut node = node_view(dirs, w, evidence.as_deref());
        // A released worker's view comes from state: the GPUs its supervisor recorded too.
        if let (None, Some(d)) = (&node.step_gpus, &w.devices) {
            node.step_gpus.clone_from(&d.step_gpus);
            node.cuda_visible_devices
                .clone_from(&d.cuda_visible_devices);
        }
        let (stdout, stderr) = logs.map(|l| (l.stdout, l.stderr)).unzip();
        let (exit_code, exit_signal) = match (w.exit_code, w.exit_signal) {
            (None, None) => node.exited.unwrap_or_default(),
            recorded => recorded,
        };
        let finished = w.report.as_ref().and_then(|r| r.finished.as_deref());
        node.outcome = node
            .outcome
            .or_else(|| Outcome::told(finished, exit_code, exit_signal));
        let stage = w
            .state
            .holds_budget()
            .then(|| {
                let publication = node.publication.as_ref().map(|p| p.outcome.as_str());
                Stage::of(node.outcome, publication)
            })
            .flatten();
        WorkerView {
            name: w.name.clone(),
            submission_id,
            state: w.state,
            cpus: w.cpus,
            mem_mb: w.mem_mb,
            on_node: pool.node_of(w).to_owned(),
            gpus: w.placement.as_ref().map_or(0, |p| p.gpus),
            step_id: w.step().map(|s| s.to_string()),
            exit_code,
            exit_signal,
            launch_failure: w.launch_failure.clone(),
            stage,
            stdout,
            stderr,
            lineage: lineages.of_worker(w.submission_id),
            node,
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
    known(state, pool)?;
    let lineages = Lineages::of(state);
    let refreshed = Refreshed::default();
    Ok(build(state, pools_dir, pool, now, &refreshed, |p, dirs| {
        workers_of(p)
            .map(|w| WorkerView::of(p, &dirs, &lineages, w))
            .collect()
    }))
}

/// `pool status` of one pool or all, as [`status`] makes it, holding the state it is made
/// from: its JSON is written worker by worker, each view made as it is written and dropped
/// after (a pool keeps up to [`FINISHED_WORKERS_KEPT`] finished workers beside its live ones;
/// no report of them all is built first). [`StatusDoc::report`] makes the whole report.
pub struct StatusDoc {
    state: State,
    pools_dir: Option<PathBuf>,
    pool: Option<String>,
    now: Micros,
    refreshed: Refreshed,
}

/// What a refresh (`pool status --refresh`: `reconcile` first) saw in Slurm that the journal
/// does not hold.
#[derive(Debug, Default)]
pub struct Refreshed {
    /// Allocations in a preemption's grace.
    pub preempted: Vec<PoolPreempted>,
    /// Renewing pools: their next allocation as listed.
    pub renewals: Vec<RenewalReconciled>,
}

impl StatusDoc {
    pub fn new(
        state: State,
        pools_dir: Option<PathBuf>,
        pool: Option<&str>,
        now: Micros,
    ) -> Result<StatusDoc, OpError> {
        known(&state, pool)?;
        Ok(StatusDoc {
            state,
            pools_dir,
            pool: pool.map(str::to_owned),
            now,
            refreshed: Refreshed::default(),
        })
    }

    /// With what a refresh saw (`ReconcileReport`).
    pub fn with_refreshed(mut self, refreshed: Refreshed) -> StatusDoc {
        self.refreshed = refreshed;
        self
    }

    /// The whole report, every worker's view made at once.
    pub fn report(&self) -> StatusReport {
        let lineages = Lineages::of(&self.state);
        build(
            &self.state,
            self.pools_dir.as_deref(),
            self.pool.as_deref(),
            self.now,
            &self.refreshed,
            |p, dirs| {
                workers_of(p)
                    .map(|w| WorkerView::of(p, &dirs, &lineages, w))
                    .collect()
            },
        )
    }
}

impl Serialize for StatusDoc {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let lineages = Lineages::of(&self.state);
        build(
            &self.state,
            self.pools_dir.as_deref(),
            self.pool.as_deref(),
            self.now,
            &self.refreshed,
            |pool, dirs| StreamedWorkers {
                pool,
                dirs,
                lineages: &lineages,
            },
        )
        .serialize(s)
    }
}

/// A pool's worker views, made one at a time as the JSON is written.
struct StreamedWorkers<'s> {
    pool: &'s Pool,
    dirs: PoolDirs,
    lineages: &'s Lineages<'s>,
}

impl Serialize for StreamedWorkers<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            workers_of(self.pool).map(|w| WorkerView::of(self.pool, &self.dirs, self.lineages, w)),
        )
    }
}

/// A pool's workers in the order `pool status` shows them: those that hold budget (by
/// submission id), then the finished ones it remembers, oldest first.
fn workers_of(p: &Pool) -> impl Iterator<Item = &Worker> {
    p.active.values().chain(p.finished.iter())
}

/// Refuse a pool (or creation) the state does not know.
fn known(state: &State, pool: Option<&str>) -> Result<(), OpError> {
    match pool {
        Some(p) if !state.pools.pools.contains_key(p) && !state.pools.creations.contains_key(p) => {
            Err(Refusal::NoPool { pool: p.to_owned() }.into())
        }
        _ => Ok(()),
    }
}

/// The workers whose continuation waits for a pool that is gone (of `pool`, or of any).
fn waiting_for_gone_pools(state: &State, pool: Option<&str>) -> Vec<GonePoolWorker> {
    let lineages = Lineages::of(state);
    lineages
        .of_gone_pools()
        .filter(|(_, c)| pool.is_none_or(|name| c.pool.as_deref() == Some(name)))
        .map(|(id, c)| GonePoolWorker {
            pool: c.pool.clone().unwrap_or_default(),
            name: c.worker.clone(),
            submission_id: id.to_string(),
            lineage: lineages.of_worker(id),
        })
        .collect()
}

/// The report of the pools asked for, each pool's workers as `workers` makes them from the
/// pool and its directories.
fn build<'s, W>(
    state: &'s State,
    pools_dir: Option<&Path>,
    pool: Option<&str>,
    now: Micros,
    refreshed: &Refreshed,
    workers: impl Fn(&'s Pool, PoolDirs) -> W,
) -> StatusReport<W> {
    let pools = state
        .pools
        .pools
        .values()
        .filter(|p| pool.is_none_or(|name| p.name == name))
        .map(|p| {
            let (cpus, mem_mb) = p.reserved();
            let nodes = placement::recorded_rooms(p);
            PoolView {
                pool: p.name.clone(),
                owner: if p.created.is_some() {
                    Owner::Created
                } else {
                    Owner::Attached
                },
                releasing: p.releasing,
                no_kill: p
                    .spread
                    .as_ref()
                    .and_then(|s| s.no_kill)
                    .or(p.created.map(|_| false)),
                nodes_lost: p
                    .spread
                    .as_ref()
                    .map(|s| s.lost.clone())
                    .unwrap_or_default(),
                allocation: AllocationView {
                    preempted: refreshed
                        .preempted
                        .iter()
                        .find(|x| x.pool == p.name && x.job_id == p.allocation.job_id)
                        .filter(|_| p.ended.is_none())
                        .map(|x| x.preempted.clone()),
                    ..AllocationView::of(&p.allocation, Some(now), p.ended.as_ref())
                },
                capacity: placement::capacity_now(&nodes),
                reserved: Resources {
                    cpus,
                    mem_mb,
                    gpus: nodes.iter().map(|n| n.reserved.gpus).sum(),
                },
                nodes,
                renewal: p
                    .renewal
                    .as_ref()
                    .map(|r| RenewalView::of(p, r, now, &refreshed.renewals)),
                last_end: EndView::of(p),
                workers: workers(p, PoolDirs::of(pools_dir, &p.name)),
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
    let waiting_for_gone_pools = waiting_for_gone_pools(state, pool);
    StatusReport {
        pools,
        creating,
        waiting_for_gone_pools,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use crate::policy::fixtures::{attached, envelopes};
    use crate::slurm::NodeShare;

    /// Issue 36, item 3: after a node of a 3-node pool is lost, `pool status` shows what the
    /// pool can hold now (as `pool submit --dry-run` does), the lost node with nothing.
    #[test]
    fn a_lost_node_leaves_the_capacity_the_pool_has_now() {
        let share = |name: &str| NodeShare {
            name: name.into(),
            cpus: 4,
            mem_mb: 1000,
            gpus: vec![0],
        };
        let mut state = State::default();
        for env in envelopes([
            Event::PoolAttached(attached("p", 9, "a", 12)),
            Event::PoolNodes(PoolNodes {
                pool: "p".into(),
                job_id: crate::event::test_job(9),
                nodes: vec![share("a"), share("b"), share("c")],
            }),
            Event::PoolNodeLost(PoolNodeLost {
                pool: "p".into(),
                job_id: crate::event::test_job(9),
                node: "b".into(),
                proof: "job 9 is listed RUNNING on a,c".into(),
            }),
        ]) {
            state.apply(&env).unwrap();
        }
        let r = status_of(&state, Some("p"), Micros(0)).unwrap();
        let p = &r.pools[0];
        assert_eq!(
            (p.capacity.cpus, p.capacity.mem_mb, p.capacity.gpus),
            (8, 2000, 2)
        );
        let b = p.nodes.iter().find(|n| n.node == "b").unwrap();
        assert_eq!(b.capacity, Resources::default());
        assert!(p.nodes_lost.contains_key("b"));
    }
}
