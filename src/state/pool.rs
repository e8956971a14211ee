//! Pools: an owned allocation and the workers that run in it as job steps.
//!
//! Budget rule: a worker holds its CPU and memory reservation from its submission intent until
//! a definite launch failure or a terminal proof. Nothing else, and in particular no silence,
//! releases it.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::asset::{AssetRecord, WorkerAssetsBound};
use crate::event::pool::{
    Allocation, ContinuationAsked, PoolAllocationEndAnswered, PoolAllocationEndIntent,
    PoolAllocationEnded, PoolAttached, PoolCreateFailed, PoolCreateIntent, PoolCreateJob,
    PoolCreateShape, PoolDetached, PoolNodeLost, PoolNodes, PoolOwned, PoolReleaseIntent,
    PoolReleased, PoolRenewalAsked, PoolRenewalFailed, PoolRenewalIntent, PoolRenewalJob,
    PoolRenewalStopped, PoolRenewed, WorkerDevicesIngested, WorkerExited, WorkerJournalDamaged,
    WorkerLaunchFailed, WorkerLaunched, WorkerPlaced, WorkerReportIngested, WorkerRequest,
    WorkerResubmitRefused, WorkerResubmitted, WorkerStepObserved, WorkerStopIntent,
    WorkerSubmitIntent, WorkerTerminal,
};
use crate::event::Micros;
use crate::slurm::{JobId, NodeShare, StepId, StepKind};

/// How many finished workers a pool remembers; older ones are dropped from the reduced state
/// (the journal keeps them all).
pub const FINISHED_WORKERS_KEPT: usize = 256;

/// A `pool create` that has not ended in a pool or a definite failure: an allocation may exist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creation {
    pub intent: PoolCreateIntent,
    pub since: Micros,
    /// Known once salloc answered, or it was found by name.
    pub job_id: Option<JobId>,
    /// Why it has no job yet although salloc ran (salloc's unclear answer).
    pub failure: Option<String>,
    /// Its nodes, GPUs and `--no-kill`, when it asked for several nodes or GPUs. Always
    /// written (snapshot version 9): `renew` comes after it.
    #[serde(default)]
    pub shape: Option<PoolCreateShape>,
    /// `--renew`: the pool it makes is kept across allocations (`PoolRenewalAsked`).
    #[serde(default)]
    pub renew: Option<PoolRenewalAsked>,
}

state_words! {
    pub enum WorkerState {
        Submitted => "submitted",
        Unknown => "unknown",
        Running => "running",
        Stopping => "stopping",
        Exited => "exited",
        Released => "released",
        Failed => "failed",
        /// Given up by an operator (`dispatch forget`): budget released without proof.
        Forgotten => "forgotten",
    }
}

impl WorkerState {
    pub fn holds_budget(self) -> bool {
        !matches!(
            self,
            WorkerState::Released | WorkerState::Failed | WorkerState::Forgotten
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worker {
    pub name: String,
    pub submission_id: Uuid,
    pub state: WorkerState,
    pub cpus: u32,
    pub mem_mb: u64,
    pub step_id: Option<u32>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub submitted_at: Micros,
    /// The assets it was submitted with.
    #[serde(default)]
    pub assets: Vec<AssetRecord>,
    /// The latest trusted summary of its own journal.
    #[serde(default)]
    pub report: Option<WorkerReportIngested>,
    /// Set once its journal was found damaged; nothing from it is ingested after that.
    #[serde(default)]
    pub journal_damage: Option<WorkerJournalDamaged>,
    /// The srun that `pool submit` started for it, and the host it ran on (the only host
    /// where that pid means anything).
    #[serde(default)]
    pub srun: Option<SrunStarted>,
    /// The node its budget is held on and the GPUs it reserves there (`WorkerPlaced`). `None`:
    /// submitted before placement was journaled, on the pool's only node, with no GPU.
    /// Always written (snapshot version 8), as are the fields after it.
    #[serde(default)]
    pub placement: Option<Placement>,
    /// Why its launch failed (`WorkerLaunchFailed`'s reason: for a launch Slurm refused, srun's
    /// own words), so the views of a failed worker can say it from state alone. Always written
    /// (snapshot version 8): a snapshot encodes a worker's fields by position.
    #[serde(default)]
    pub launch_failure: Option<String>,
    /// The GPUs its step got, as its supervisor recorded them (`WorkerDevicesIngested`).
    #[serde(default)]
    pub devices: Option<WorkerDevicesIngested>,
    /// The allocation it was submitted to, its step's job: step ids start again at 0 in each
    /// job, and a renewed pool keeps the workers of its earlier allocations. Snapshot version
    /// 12 (`None` only in a state read from an older one, never from replay).
    #[serde(default)]
    pub job_id: Option<JobId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub node: String,
    pub gpus: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SrunStarted {
    pub pid: u32,
    pub host: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    pub name: String,
    pub allocation: Allocation,
    pub attached_at: Micros,
    /// Workers that hold budget, by submission id.
    pub active: BTreeMap<Uuid, Worker>,
    /// The most recent finished workers, oldest first, at most [`FINISHED_WORKERS_KEPT`].
    pub finished: VecDeque<Worker>,
    /// Set once the allocation is proven over.
    #[serde(default)]
    pub ended: Option<PoolAllocationEnded>,
    /// The creation that made its allocation: dispatch's to cancel (`pool release`). `None`:
    /// attached to the user's allocation, which dispatch never cancels.
    #[serde(default)]
    pub created: Option<Uuid>,
    /// `pool release` has begun: nothing more is submitted to it.
    #[serde(default)]
    pub releasing: bool,
    /// What the pool knows of its allocation's nodes beyond `allocation`: `None` for a pool
    /// on one node without GPUs, attached or created before nodes were journaled. Always
    /// written (snapshot version 9): `renewal` comes after it.
    #[serde(default)]
    pub spread: Option<Spread>,
    /// A pool created with `--renew`: kept across allocations until `pool release`.
    #[serde(default)]
    pub renewal: Option<Renewal>,
    /// When `ended` was recorded.
    #[serde(default)]
    pub ended_at: Option<Micros>,
}

/// A pool kept across allocations (`pool create --renew`): what it asks for each one, how many
/// it had, and the next one while it is asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewal {
    pub asked: PoolRenewalAsked,
    /// The creation's request, asked again for each allocation.
    pub request: PoolCreateIntent,
    pub shape: Option<PoolCreateShape>,
    /// Allocations so far, the current one included (1: the first).
    pub generation: u32,
    /// When the first allocation started.
    pub first_start: Micros,
    /// The next allocation, from its intent until it is the pool's or proven not to be.
    pub successor: Option<Successor>,
    /// Why no allocation is asked for again (`PoolRenewalStopped`).
    pub stopped: Option<String>,
    /// Next allocations that failed definitely since the last renewal (refused, proven never
    /// made, ended before they were the pool's), and the last one's reason: the bound of
    /// `policy::renewal::FAILED_RENEWALS_STOP`. Snapshot version 10.
    pub failed_in_row: u32,
    pub last_failure: Option<String>,
    /// How the allocation the last renewal replaced ended (`PoolRenewed`).
    #[serde(default)]
    pub last_end: Option<AllocationEnd>,
    /// The current allocation dispatch is ending itself, its workers all over
    /// (`PoolAllocationEndIntent`): nothing more is placed there.
    #[serde(default)]
    pub ending: Option<Ending>,
}

/// How one of a renewing pool's allocations ended, as the renewal that replaced it recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationEnd {
    /// Its number among the pool's allocations (1: the first).
    pub generation: u32,
    pub job_id: JobId,
    /// `time-limit`, `preempted`, `node-failure` or `lost`.
    pub cause: String,
    /// Slurm's words that prove it over.
    pub proof: String,
    /// When its end was recorded.
    pub at: Option<Micros>,
}

/// An early end of a renewing pool's allocation, from its intent until the pool is renewed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ending {
    pub job_id: JobId,
    pub reason: String,
    pub since: Micros,
    /// What its `scancel` answered (`PoolAllocationEndAnswered`): `accepted`, `refused`,
    /// `unknown`, with scancel's words; `None`: not asked yet, or its answer was lost.
    pub answer: Option<(String, String)>,
}

/// A renewal in flight: an allocation may exist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Successor {
    pub intent: PoolRenewalIntent,
    pub since: Micros,
    /// Known once salloc named it, or it was found by name.
    pub job_id: Option<JobId>,
    /// Why it has no job yet although salloc ran (an unclear answer).
    pub failure: Option<String>,
}

/// A pool's nodes, one by one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spread {
    /// What the allocation holds on each node (`PoolNodes`); empty: its one node holds all of
    /// the allocation ([`Pool::node_shares`]).
    pub nodes: Vec<NodeShare>,
    /// Whether its job was made with `--no-kill` (`PoolCreateShape`): `None` when dispatch did
    /// not make it (Slurm shows no such flag).
    pub no_kill: Option<bool>,
    /// Nodes that left the allocation (`PoolNodeLost`), and the proof.
    pub lost: BTreeMap<String, String>,
}

/// CPUs, MB and GPUs: what a node holds, or what workers reserve on it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Resources {
    pub cpus: u64,
    pub mem_mb: u64,
    pub gpus: u64,
}

impl Resources {
    pub fn of(share: &NodeShare) -> Resources {
        Resources {
            cpus: u64::from(share.cpus),
            mem_mb: share.mem_mb,
            gpus: share.gpus.len() as u64,
        }
    }

    pub fn min(self, other: Resources) -> Resources {
        Resources {
            cpus: self.cpus.min(other.cpus),
            mem_mb: self.mem_mb.min(other.mem_mb),
            gpus: self.gpus.min(other.gpus),
        }
    }

    pub fn plus(self, other: Resources) -> Resources {
        Resources {
            cpus: self.cpus + other.cpus,
            mem_mb: self.mem_mb + other.mem_mb,
            gpus: self.gpus + other.gpus,
        }
    }

    /// Does `self` fit in `room`?
    pub fn fits(self, room: Resources) -> bool {
        self.cpus <= room.cpus && self.mem_mb <= room.mem_mb && self.gpus <= room.gpus
    }
}

impl Worker {
    /// Its step, once observed: in its own job, which need not be the pool's now.
    pub fn step(&self) -> Option<StepId> {
        Some(StepId::new(self.job_id?, StepKind::Numbered(self.step_id?)))
    }

    /// What it reserves: its CPUs, memory and GPUs.
    pub fn resources(&self) -> Resources {
        Resources {
            cpus: u64::from(self.cpus),
            mem_mb: self.mem_mb,
            gpus: self.placement.as_ref().map_or(0, |p| u64::from(p.gpus)),
        }
    }
}

impl Pool {
    /// The finished workers whose steps were in the current allocation: step ids start again
    /// at 0 in each job, so those of a renewed pool's earlier allocations are no one's here.
    pub fn finished_in_this_allocation(&self) -> impl Iterator<Item = &Worker> {
        let job = self.allocation.job_id;
        self.finished
            .iter()
            .filter(move |w| w.job_id.is_none_or(|j| j == job))
    }

    pub fn reserved(&self) -> (u64, u64) {
        self.active.values().fold((0, 0), |(cpus, mem), w| {
            (cpus + u64::from(w.cpus), mem + w.mem_mb)
        })
    }

    /// What the allocation holds on each node, as recorded at attach: the journaled shares,
    /// or for a pool attached before they were, its one node with all of the allocation.
    pub fn node_shares(&self) -> Vec<NodeShare> {
        if let Some(nodes) = self
            .spread
            .as_ref()
            .map(|s| &s.nodes)
            .filter(|n| !n.is_empty())
        {
            return nodes.clone();
        }
        vec![NodeShare {
            name: self.allocation.node.clone(),
            cpus: self.allocation.cpus,
            mem_mb: self.allocation.mem_mb,
            gpus: Vec::new(),
        }]
    }

    /// The node a worker's budget is held on: its placement, or the pool's first node.
    pub fn node_of<'a>(&'a self, w: &'a Worker) -> &'a str {
        match &w.placement {
            Some(p) => &p.node,
            None => self
                .spread
                .as_ref()
                .and_then(|s| s.nodes.first())
                .map_or(self.allocation.node.as_str(), |n| n.name.as_str()),
        }
    }

    /// What the workers holding budget reserve, by node: one pass over the workers.
    pub fn reserved_by_node(&self) -> BTreeMap<&str, Resources> {
        let mut reserved: BTreeMap<&str, Resources> = BTreeMap::new();
        for w in self.active.values() {
            let sum = reserved.entry(self.node_of(w)).or_default();
            *sum = sum.plus(w.resources());
        }
        reserved
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pools {
    pub pools: BTreeMap<String, Pool>,
    /// Which pool each active submission belongs to.
    pub by_submission: BTreeMap<Uuid, String>,
    /// `pool create`s in flight, by pool name (at most one per name: a second create of the
    /// name adopts the first's allocation).
    #[serde(default)]
    pub creations: BTreeMap<String, Creation>,
    /// Workers to submit again if a node failure ends them, while they hold budget, and those
    /// a node failure ended, until resubmitted (or refused), by submission id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<Uuid, Resubmittable>,
}

/// A worker's request kept for its resubmission after a node failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resubmittable {
    pub pool: String,
    pub worker: String,
    pub cpus: u32,
    pub mem_mb: u64,
    pub request: WorkerRequest,
    /// Set when a node failure ended it: the proof. Then it is due for resubmission.
    pub due: Option<String>,
    /// The continuation it asked for too (`ContinuationAsked`, after its request in its
    /// receipt's commit): its replacement asks it again, unused. Last, and written only when it
    /// holds one (journal-format.md §9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<ContinuationAsked>,
}

impl Pools {
    pub fn attach(&mut self, time: Micros, e: &PoolAttached) {
        self.pools.insert(
            e.pool.clone(),
            Pool {
                name: e.pool.clone(),
                allocation: e.allocation.clone(),
                attached_at: time,
                active: BTreeMap::new(),
                finished: VecDeque::new(),
                ended: None,
                created: None,
                releasing: false,
                spread: None,
                renewal: None,
                ended_at: None,
            },
        );
    }

    pub fn create_intent(&mut self, time: Micros, e: &PoolCreateIntent) {
        self.creations.insert(
            e.pool.clone(),
            Creation {
                intent: e.clone(),
                since: time,
                job_id: None,
                failure: None,
                shape: None,
                renew: None,
            },
        );
    }

    fn creation_mut(&mut self, pool: &str, id: Uuid) -> Option<&mut Creation> {
        self.creations
            .get_mut(pool)
            .filter(|c| c.intent.creation_id == id)
    }

    pub fn create_job(&mut self, e: &PoolCreateJob) {
        if let Some(c) = self.creation_mut(&e.pool, e.creation_id) {
            c.job_id = Some(e.job_id);
        }
    }

    pub fn create_failed(&mut self, e: &PoolCreateFailed) {
        if e.definite {
            if self.creation_mut(&e.pool, e.creation_id).is_some() {
                self.creations.remove(&e.pool);
            }
        } else if let Some(c) = self.creation_mut(&e.pool, e.creation_id) {
            c.failure = Some(e.reason.clone());
        }
    }

    pub fn create_shape(&mut self, e: &PoolCreateShape) {
        if let Some(c) = self.creation_mut(&e.pool, e.creation_id) {
            c.shape = Some(e.clone());
        }
    }

    pub fn renew_asked(&mut self, e: &PoolRenewalAsked) {
        if let Some(c) = self.creation_mut(&e.pool, e.creation_id) {
            c.renew = Some(e.clone());
        }
    }

    /// Only about the allocation the pool holds (written with its `PoolAttached`).
    pub fn owned(&mut self, e: &PoolOwned) {
        let creation = self.creation_mut(&e.pool, e.creation_id).cloned();
        let shape = creation.as_ref().and_then(|c| c.shape.clone());
        if let Some(p) = self.pools.get_mut(&e.pool) {
            if p.allocation.job_id == e.job_id {
                p.created = Some(e.creation_id);
                if let Some(shape) = &shape {
                    p.spread.get_or_insert_default().no_kill = Some(shape.no_kill);
                }
                if let Some(c) = creation.filter(|c| c.renew.is_some()) {
                    p.renewal = Some(Renewal {
                        asked: c.renew.expect("filtered"),
                        request: c.intent,
                        shape,
                        generation: 1,
                        first_start: p.allocation.start_time,
                        successor: None,
                        stopped: None,
                        failed_in_row: 0,
                        last_failure: None,
                        last_end: None,
                        ending: None,
                    });
                }
                if self.creation_mut(&e.pool, e.creation_id).is_some() {
                    self.creations.remove(&e.pool);
                }
            }
        }
    }

    fn renewal_mut(&mut self, pool: &str) -> Option<&mut Renewal> {
        self.pools.get_mut(pool)?.renewal.as_mut()
    }

    /// One successor at a time: an intent while another is in flight changes nothing.
    pub fn renewal_intent(&mut self, time: Micros, e: &PoolRenewalIntent) {
        if let Some(r) = self.renewal_mut(&e.pool) {
            if r.successor.is_none() {
                r.successor = Some(Successor {
                    intent: e.clone(),
                    since: time,
                    job_id: None,
                    failure: None,
                });
            }
        }
    }

    fn successor_mut(&mut self, pool: &str, id: Uuid) -> Option<&mut Successor> {
        self.renewal_mut(pool)?
            .successor
            .as_mut()
            .filter(|s| s.intent.renewal_id == id)
    }

    pub fn renewal_job(&mut self, e: &PoolRenewalJob) {
        if let Some(s) = self.successor_mut(&e.pool, e.renewal_id) {
            s.job_id = Some(e.job_id);
        }
    }

    pub fn renewal_failed(&mut self, e: &PoolRenewalFailed) {
        if e.definite {
            if self.successor_mut(&e.pool, e.renewal_id).is_some() {
                if let Some(r) = self.renewal_mut(&e.pool) {
                    r.successor = None;
                    r.failed_in_row = r.failed_in_row.saturating_add(1);
                    r.last_failure = Some(e.reason.clone());
                }
            }
        } else if let Some(s) = self.successor_mut(&e.pool, e.renewal_id) {
            s.failure = Some(e.reason.clone());
        }
    }

    pub fn renewal_stopped(&mut self, e: &PoolRenewalStopped) {
        if let Some(r) = self.renewal_mut(&e.pool) {
            r.stopped.get_or_insert_with(|| e.reason.clone());
        }
    }

    /// Only the successor in flight becomes the allocation, with its nodes (`PoolNodes` in the
    /// same commit) and none lost yet; the workers of the last one were all released before.
    pub fn renewed(&mut self, e: &PoolRenewed) {
        if self.successor_mut(&e.pool, e.renewal_id).is_none() {
            return;
        }
        let Some(p) = self.pools.get_mut(&e.pool) else {
            return;
        };
        p.allocation = e.allocation.clone();
        p.ended = None;
        let ended_at = p.ended_at.take();
        if let Some(spread) = &mut p.spread {
            spread.nodes.clear();
            spread.lost.clear();
        }
        if let Some(r) = &mut p.renewal {
            r.last_end = Some(AllocationEnd {
                generation: r.generation,
                job_id: e.previous_job_id,
                cause: e.cause.clone(),
                proof: e.proof.clone(),
                at: ended_at,
            });
            r.generation = e.generation;
            r.successor = None;
            r.failed_in_row = 0;
            r.last_failure = None;
            r.ending = None;
        }
    }

    /// Only about the allocation a renewing pool holds, and once.
    pub fn end_intent(&mut self, time: Micros, e: &PoolAllocationEndIntent) {
        let Some(p) = self.pools.get_mut(&e.pool) else {
            return;
        };
        if p.allocation.job_id != e.job_id {
            return;
        }
        if let Some(r) = p.renewal.as_mut().filter(|r| r.ending.is_none()) {
            r.ending = Some(Ending {
                job_id: e.job_id,
                reason: e.reason.clone(),
                since: time,
                answer: None,
            });
        }
    }

    pub fn end_answered(&mut self, e: &PoolAllocationEndAnswered) {
        if let Some(x) = self
            .renewal_mut(&e.pool)
            .and_then(|r| r.ending.as_mut())
            .filter(|x| x.job_id == e.job_id)
        {
            x.answer = Some((e.outcome.clone(), e.detail.clone()));
        }
    }

    /// Only about the allocation the pool holds.
    pub fn node_lost(&mut self, e: &PoolNodeLost) {
        if let Some(p) = self.pools.get_mut(&e.pool) {
            if p.allocation.job_id == e.job_id {
                let spread = p.spread.get_or_insert_default();
                spread.lost.insert(e.node.clone(), e.proof.clone());
            }
        }
    }

    pub fn release_intent(&mut self, e: &PoolReleaseIntent) {
        if let Some(p) = self.pools.get_mut(&e.pool) {
            if p.allocation.job_id == e.job_id {
                p.releasing = true;
            }
        }
    }

    pub fn released(&mut self, e: &PoolReleased) {
        if self
            .pools
            .get(&e.pool)
            .is_some_and(|p| p.allocation.job_id == e.job_id)
        {
            self.detach(&PoolDetached {
                pool: e.pool.clone(),
            });
        }
    }

    pub fn detach(&mut self, e: &PoolDetached) {
        self.requests.retain(|_, r| r.pool != e.pool);
        if let Some(pool) = self.pools.remove(&e.pool) {
            for id in pool.active.keys() {
                self.by_submission.remove(id);
            }
        }
    }

    pub fn submit(&mut self, time: Micros, e: &WorkerSubmitIntent) {
        let Some(pool) = self.pools.get_mut(&e.pool) else {
            return;
        };
        pool.active.insert(
            e.submission_id,
            Worker {
                name: e.worker.clone(),
                submission_id: e.submission_id,
                state: WorkerState::Submitted,
                cpus: e.cpus,
                mem_mb: e.mem_mb,
                step_id: None,
                exit_code: None,
                exit_signal: None,
                submitted_at: time,
                assets: Vec::new(),
                report: None,
                journal_damage: None,
                srun: None,
                placement: None,
                launch_failure: None,
                devices: None,
                job_id: Some(pool.allocation.job_id),
            },
        );
        self.by_submission.insert(e.submission_id, e.pool.clone());
    }

    /// Only about the allocation the pool holds (written with its `PoolAttached`).
    pub fn nodes(&mut self, e: &PoolNodes) {
        if let Some(p) = self.pools.get_mut(&e.pool) {
            if p.allocation.job_id == e.job_id {
                p.spread.get_or_insert_default().nodes.clone_from(&e.nodes);
            }
        }
    }

    pub fn placed(&mut self, e: &WorkerPlaced) {
        if let Some(w) = self.worker_mut(&e.submission_id) {
            w.placement = Some(Placement {
                node: e.node.clone(),
                gpus: e.gpus,
            });
        }
    }

    /// Kept with what its intent (just before, in the same commit) asked.
    pub fn request(&mut self, e: &WorkerRequest) {
        let Some(w) = self.worker_mut(&e.submission_id).cloned() else {
            return;
        };
        let Some(pool) = self.by_submission.get(&e.submission_id).cloned() else {
            return;
        };
        self.requests.insert(
            e.submission_id,
            Resubmittable {
                pool,
                worker: w.name,
                cpus: w.cpus,
                mem_mb: w.mem_mb,
                request: e.clone(),
                due: None,
                continuation: None,
            },
        );
    }

    /// Kept with its request, for its replacement to ask again.
    pub fn continuation_asked(&mut self, e: &ContinuationAsked) {
        if let Some(r) = self.requests.get_mut(&e.submission_id) {
            r.continuation = Some(e.clone());
        }
    }

    fn worker_mut(&mut self, id: &Uuid) -> Option<&mut Worker> {
        let pool = self.by_submission.get(id)?;
        self.pools.get_mut(pool)?.active.get_mut(id)
    }

    /// `host`: where the event was written, which is where its srun ran.
    pub fn launched(&mut self, e: &WorkerLaunched, host: &str) {
        if let Some(w) = self.worker_mut(&e.submission_id) {
            w.srun = Some(SrunStarted {
                pid: e.srun_pid,
                host: host.to_owned(),
            });
            if w.state == WorkerState::Submitted || w.state == WorkerState::Unknown {
                w.state = WorkerState::Running;
            }
        }
    }

    pub fn launch_failed(&mut self, e: &WorkerLaunchFailed) {
        if let Some(w) = self.worker_mut(&e.submission_id) {
            w.launch_failure = Some(e.reason.clone());
        }
        if e.definite {
            self.finish(&e.submission_id, WorkerState::Failed);
        } else if let Some(w) = self.worker_mut(&e.submission_id) {
            w.state = WorkerState::Unknown;
        }
    }

    pub fn step_observed(&mut self, e: &WorkerStepObserved) {
        if let Some(w) = self.worker_mut(&e.submission_id) {
            w.step_id = Some(e.step_id);
            if w.state == WorkerState::Submitted || w.state == WorkerState::Unknown {
                w.state = WorkerState::Running;
            }
        }
    }

    pub fn stop_intent(&mut self, e: &WorkerStopIntent) {
        if let Some(w) = self.worker_mut(&e.submission_id) {
            if w.state != WorkerState::Exited {
                w.state = WorkerState::Stopping;
            }
        }
    }

    pub fn exited(&mut self, e: &WorkerExited) {
        if let Some(w) = self.worker_mut(&e.submission_id) {
            w.state = WorkerState::Exited;
            w.exit_code = e.code;
            w.exit_signal = e.signal;
        }
    }

    pub fn assets_bound(&mut self, e: &WorkerAssetsBound) {
        if let Some(w) = self.worker_mut(&e.submission_id) {
            w.assets = e.assets.clone();
        }
    }

    pub fn report_ingested(&mut self, e: &WorkerReportIngested) {
        if let Some(w) = self.worker_mut(&e.submission_id) {
            if w.journal_damage.is_none() {
                w.report = Some(e.clone());
            }
        }
    }

    pub fn devices_ingested(&mut self, e: &WorkerDevicesIngested) {
        if let Some(w) = self.worker_mut(&e.submission_id) {
            if w.journal_damage.is_none() {
                w.devices = Some(e.clone());
            }
        }
    }

    pub fn journal_damaged(&mut self, e: &WorkerJournalDamaged) {
        if let Some(w) = self.worker_mut(&e.submission_id) {
            w.journal_damage = Some(e.clone());
        }
    }

    /// Only about the allocation the pool holds now (a pool re-attached to another job is not
    /// ended by news about the old one).
    pub fn allocation_ended(&mut self, time: Micros, e: &PoolAllocationEnded) {
        if let Some(p) = self.pools.get_mut(&e.pool) {
            if p.allocation.job_id == e.job_id && p.ended.is_none() {
                p.ended = Some(e.clone());
                p.ended_at = Some(time);
            }
        }
    }

    /// A worker that resubmits on node failure is due when its node is lost from the pool;
    /// otherwise, once it ends, its request is dropped.
    fn settle_request(&mut self, id: &Uuid, proof: &str) {
        let Some(r) = self.requests.get(id) else {
            return;
        };
        let lost = self.pools.get(&r.pool).and_then(|p| {
            let w = p.active.get(id)?;
            let node = p.node_of(w);
            p.spread.as_ref().map(|s| s.lost.contains_key(node))
        });
        if lost == Some(true) && r.request.resubmits_left > 0 {
            if let Some(r) = self.requests.get_mut(id) {
                r.due = Some(proof.to_owned());
            }
        } else {
            self.requests.remove(id);
        }
    }

    pub fn resubmitted(&mut self, e: &WorkerResubmitted) {
        self.requests.remove(&e.replaces);
    }

    pub fn resubmit_refused(&mut self, e: &WorkerResubmitRefused) {
        self.requests.remove(&e.replaces);
    }

    pub fn terminal(&mut self, e: &WorkerTerminal) {
        self.settle_request(&e.submission_id, &e.proof);
        self.finish(&e.submission_id, WorkerState::Released);
    }

    pub fn forgotten(&mut self, id: &Uuid) {
        self.finish(id, WorkerState::Forgotten);
    }

    fn finish(&mut self, id: &Uuid, state: WorkerState) {
        // Only a release with proof may leave a resubmission due (`settle_request`).
        if state != WorkerState::Released {
            self.requests.remove(id);
        }
        let Some(pool_name) = self.by_submission.remove(id) else {
            return;
        };
        let Some(pool) = self.pools.get_mut(&pool_name) else {
            return;
        };
        if let Some(mut w) = pool.active.remove(id) {
            w.state = state;
            if pool.finished.len() == FINISHED_WORKERS_KEPT {
                pool.finished.pop_front();
            }
            pool.finished.push_back(w);
        }
        debug_assert!(pool.finished.len() <= FINISHED_WORKERS_KEPT);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::event::pool::*;
    use crate::event::test_job;

    /// Creation `id` of pool `p` (also `policy::renewal`'s fixture).
    pub(crate) fn intent(id: u128) -> PoolCreateIntent {
        PoolCreateIntent {
            pool: "p".into(),
            creation_id: Uuid::from_u128(id),
            job_name: format!("x-pool-p-{id:08x}"),
            salloc_limit_s: 40,
            cpus: 2,
            mem_mb: 100,
            time_s: 600,
            partition: None,
            account: None,
            qos: None,
            nodelist: None,
        }
    }

    /// Pool `p`'s next allocation `id` (generation 2, after job 7 ends or not), asked for
    /// (also `policy::renewal`'s fixture).
    pub(crate) fn renewal_intent(id: u128, after: Option<JobId>) -> PoolRenewalIntent {
        PoolRenewalIntent {
            pool: "p".into(),
            renewal_id: Uuid::from_u128(id),
            generation: 2,
            job_name: format!("x-pool-p-{id:08x}"),
            salloc_limit_s: 40,
            previous_job_id: test_job(7),
            after,
        }
    }

    /// Pool `p` attached to job `job_id` (also `policy::renewal`'s fixture).
    pub(crate) fn attached(job_id: u32) -> PoolAttached {
        PoolAttached {
            pool: "p".into(),
            allocation: Allocation {
                job_id: test_job(job_id),
                node: "vm".into(),
                user: "u".into(),
                start_time: Micros(1),
                end_time: Micros(2),
                cpus: 2,
                mem_mb: 100,
                partition: "d".into(),
                account: "a".into(),
                qos: "q".into(),
            },
        }
    }

    #[test]
    fn a_creation_lives_until_its_pool_or_a_definite_failure_and_others_change_nothing() {
        let mut pools = Pools::default();
        pools.create_intent(Micros(5), &intent(1));
        let other = Uuid::from_u128(2);
        pools.create_job(&PoolCreateJob {
            pool: "p".into(),
            creation_id: other,
            job_id: test_job(9),
            how: "name".into(),
        });
        assert_eq!(pools.creations["p"].job_id, None, "another creation's job");
        pools.create_failed(&PoolCreateFailed {
            pool: "p".into(),
            creation_id: other,
            definite: true,
            reason: "x".into(),
        });
        assert!(
            pools.creations.contains_key("p"),
            "another creation's failure"
        );
        pools.create_failed(&PoolCreateFailed {
            pool: "p".into(),
            creation_id: Uuid::from_u128(1),
            definite: false,
            reason: "salloc timed out".into(),
        });
        assert_eq!(
            pools.creations["p"].failure.as_deref(),
            Some("salloc timed out"),
            "an unclear failure keeps the creation: a job may exist"
        );
        pools.create_job(&PoolCreateJob {
            pool: "p".into(),
            creation_id: Uuid::from_u128(1),
            job_id: test_job(7),
            how: "name".into(),
        });
        pools.attach(Micros(6), &attached(7));
        pools.owned(&PoolOwned {
            pool: "p".into(),
            creation_id: Uuid::from_u128(1),
            job_id: test_job(7),
        });
        assert!(pools.creations.is_empty());
        assert_eq!(pools.pools["p"].created, Some(Uuid::from_u128(1)));
        // Release news about another allocation changes nothing.
        pools.release_intent(&PoolReleaseIntent {
            pool: "p".into(),
            job_id: test_job(8),
        });
        assert!(!pools.pools["p"].releasing);
        pools.release_intent(&PoolReleaseIntent {
            pool: "p".into(),
            job_id: test_job(7),
        });
        assert!(pools.pools["p"].releasing);
        pools.released(&PoolReleased {
            pool: "p".into(),
            job_id: test_job(8),
            proof: "x".into(),
        });
        assert!(pools.pools.contains_key("p"));
        pools.released(&PoolReleased {
            pool: "p".into(),
            job_id: test_job(7),
            proof: "squeue shows job 7 CANCELLED".into(),
        });
        assert!(pools.pools.is_empty());
    }

    /// A worker that resubmits on node failure is due only when a proof releases it while its
    /// node is recorded lost; any other end drops its request, and its replacement's receipt
    /// (or a refusal) settles it.
    #[test]
    fn a_resubmission_is_due_only_after_a_node_failure() {
        let job = test_job(7);
        let mut pools = Pools::default();
        pools.attach(Micros(0), &attached(7));
        let shares = ["n1", "n2"].map(|n| NodeShare {
            name: n.into(),
            cpus: 1,
            mem_mb: 50,
            gpus: vec![],
        });
        pools.nodes(&PoolNodes {
            pool: "p".into(),
            job_id: job,
            nodes: shares.into(),
        });
        let submit = |pools: &mut Pools, id: u128, node: &str, left: u32| {
            let submission_id = Uuid::from_u128(id);
            pools.submit(
                Micros(0),
                &WorkerSubmitIntent {
                    pool: "p".into(),
                    worker: format!("w{id}"),
                    submission_id,
                    cpus: 1,
                    mem_mb: 10,
                    publication_timeout_s: 30,
                    command: vec!["true".into()],
                },
            );
            pools.placed(&WorkerPlaced {
                submission_id,
                node: node.into(),
                gpus: 0,
            });
            pools.request(&WorkerRequest {
                submission_id,
                resubmits_left: left,
                command: vec!["true".into()],
                gpus: 0,
                publication_timeout_s: 30,
                native_state_s: 15,
                cleanup_s: 15,
                grace_s: 0,
                source: None,
                image: None,
                append_only_glob: None,
                trial: None,
            });
            submission_id
        };
        let end = |pools: &mut Pools, id: Uuid| {
            pools.terminal(&WorkerTerminal {
                submission_id: id,
                proof: "gone".into(),
            })
        };
        let (on_n1, on_n2, spent) = (
            submit(&mut pools, 1, "n1", 1),
            submit(&mut pools, 2, "n2", 1),
            submit(&mut pools, 3, "n2", 0),
        );
        assert_eq!(pools.requests.len(), 3);
        pools.node_lost(&PoolNodeLost {
            pool: "p".into(),
            job_id: job,
            node: "n2".into(),
            proof: "left".into(),
        });
        for id in [on_n1, on_n2, spent] {
            end(&mut pools, id);
        }
        // n1's worker ended on a live node, the spent one has no resubmission left.
        assert_eq!(pools.requests.keys().collect::<Vec<_>>(), [&on_n2]);
        assert_eq!(pools.requests[&on_n2].due.as_deref(), Some("gone"));
        pools.resubmitted(&WorkerResubmitted {
            submission_id: Uuid::from_u128(9),
            replaces: on_n2,
        });
        assert!(pools.requests.is_empty());
        // A launch that definitely failed, or a detach, drops a request.
        let failed = submit(&mut pools, 4, "n1", 2);
        pools.launch_failed(&WorkerLaunchFailed {
            submission_id: failed,
            definite: true,
            reason: "no".into(),
        });
        assert!(pools.requests.is_empty());
        submit(&mut pools, 5, "n1", 2);
        pools.detach(&PoolDetached { pool: "p".into() });
        assert!(pools.requests.is_empty());
    }

    /// Issue 36: a failed worker's view says why from state alone, and a snapshot of it reads
    /// back, placed or not (a worker's fields are encoded by position, all of them written).
    #[test]
    fn a_launch_failures_reason_is_kept_with_a_placed_worker_and_survives_a_snapshot() {
        let mut pools = Pools::default();
        pools.attach(Micros(0), &attached(7));
        let intent = |id: u128| WorkerSubmitIntent {
            pool: "p".into(),
            worker: format!("w{id}"),
            submission_id: Uuid::from_u128(id),
            cpus: 1,
            mem_mb: 10,
            publication_timeout_s: 30,
            command: vec!["true".into()],
        };
        let failed = |id: u128| WorkerLaunchFailed {
            submission_id: Uuid::from_u128(id),
            definite: true,
            reason: "srun said: Task launch for StepId=16.2 failed".into(),
        };
        pools.submit(Micros(0), &intent(1));
        pools.placed(&WorkerPlaced {
            submission_id: Uuid::from_u128(1),
            node: "node1".into(),
            gpus: 0,
        });
        pools.launch_failed(&failed(1));
        // Submitted before placement was journaled: its reason is kept too.
        pools.submit(Micros(0), &intent(2));
        pools.launch_failed(&failed(2));
        let finished = &pools.pools["p"].finished;
        assert_eq!(finished[0].state, WorkerState::Failed);
        assert_eq!(
            finished[0].launch_failure.as_deref(),
            Some("srun said: Task launch for StepId=16.2 failed")
        );
        assert_eq!(finished[1].launch_failure, finished[0].launch_failure);
        assert_eq!(finished[1].placement, None);
        let bytes = rmp_serde::to_vec(&pools).unwrap();
        let back: Pools = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, pools);
    }
    /// journal-format.md's example bodies of kinds 173–175, byte for byte.
    #[test]
    fn the_renewal_bodies_are_the_specs_examples() {
        use crate::event::body_hex;
        let id = Uuid::from_u128(1);
        let uuid = "c4 10 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01";
        let asked = PoolRenewalAsked {
            pool: "p".into(),
            creation_id: id,
            until: None,
            max_allocations: Some(3),
            overlap: false,
        };
        assert_eq!(body_hex(&asked), format!("95 a1 70 {uuid} c0 03 c2"));
        let intent = PoolRenewalIntent {
            pool: "p".into(),
            renewal_id: id,
            generation: 2,
            job_name: "x-pool-p-00000000".into(),
            salloc_limit_s: 40,
            previous_job_id: test_job(901),
            after: Some(test_job(901)),
        };
        assert_eq!(
            body_hex(&intent),
            format!(
                "97 a1 70 {uuid} 02 b1 78 2d 70 6f 6f 6c 2d 70 2d 30 30 30 30 30 30 30 30 28 cd \
                 03 85 cd 03 85"
            )
        );
        let job = PoolRenewalJob {
            pool: "p".into(),
            renewal_id: id,
            job_id: test_job(902),
            how: "salloc".into(),
        };
        assert_eq!(
            body_hex(&job),
            format!("94 a1 70 {uuid} cd 03 86 a6 73 61 6c 6c 6f 63")
        );
    }

    /// journal-format.md's example bodies of kinds 184–185, byte for byte.
    #[test]
    fn the_early_end_bodies_are_the_specs_examples() {
        use crate::event::body_hex;
        let intent = PoolAllocationEndIntent {
            pool: "p".into(),
            job_id: test_job(901),
            reason: "all over".into(),
        };
        assert_eq!(
            body_hex(&intent),
            "93 a1 70 cd 03 85 a8 61 6c 6c 20 6f 76 65 72"
        );
        let answered = PoolAllocationEndAnswered {
            pool: "p".into(),
            job_id: test_job(901),
            outcome: "accepted".into(),
            detail: String::new(),
        };
        assert_eq!(
            body_hex(&answered),
            "94 a1 70 cd 03 85 a8 61 63 63 65 70 74 65 64 a0"
        );
    }

    /// A renewing pool: one successor at a time, only its own events settle it, and its
    /// `PoolRenewed` makes it the allocation (ended cleared, generation up); a snapshot of it
    /// reads back.
    #[test]
    fn a_renewal_has_one_successor_and_only_it_becomes_the_allocation() {
        let mut pools = Pools::default();
        pools.create_intent(Micros(5), &intent(1));
        pools.renew_asked(&PoolRenewalAsked {
            pool: "p".into(),
            creation_id: Uuid::from_u128(1),
            until: None,
            max_allocations: None,
            overlap: false,
        });
        pools.attach(Micros(6), &attached(7));
        pools.owned(&PoolOwned {
            pool: "p".into(),
            creation_id: Uuid::from_u128(1),
            job_id: test_job(7),
        });
        assert_eq!(pools.pools["p"].renewal.as_ref().unwrap().generation, 1);
        let ask = |id: u128| renewal_intent(id, Some(test_job(7)));
        pools.renewal_intent(Micros(7), &ask(10));
        pools.renewal_intent(Micros(8), &ask(11));
        let r = pools.pools["p"].renewal.as_ref().unwrap();
        assert_eq!(
            r.successor.as_ref().unwrap().intent.renewal_id,
            Uuid::from_u128(10)
        );
        pools.allocation_ended(
            Micros(9),
            &PoolAllocationEnded {
                pool: "p".into(),
                job_id: test_job(7),
                proof: "squeue shows job 7 TIMEOUT".into(),
            },
        );
        let mut next = attached(8).allocation;
        next.start_time = Micros(100);
        let renewed = |id: u128| PoolRenewed {
            pool: "p".into(),
            renewal_id: Uuid::from_u128(id),
            generation: 2,
            allocation: next.clone(),
            previous_job_id: test_job(7),
            cause: "time-limit".into(),
            proof: "squeue shows job 7 TIMEOUT".into(),
        };
        pools.renewed(&renewed(11));
        assert_eq!(
            pools.pools["p"].allocation.job_id,
            test_job(7),
            "not its successor"
        );
        pools.renewal_job(&PoolRenewalJob {
            pool: "p".into(),
            renewal_id: Uuid::from_u128(10),
            job_id: test_job(8),
            how: "salloc".into(),
        });
        pools.renewed(&renewed(10));
        let p = &pools.pools["p"];
        assert_eq!(p.allocation.job_id, test_job(8));
        assert_eq!(p.ended, None);
        let r = p.renewal.as_ref().unwrap();
        assert_eq!((r.generation, r.first_start), (2, Micros(1)));
        assert!(r.successor.is_none());
        // How allocation 1 ended stays, with when its end was recorded.
        assert_eq!(
            r.last_end,
            Some(AllocationEnd {
                generation: 1,
                job_id: test_job(7),
                cause: "time-limit".into(),
                proof: "squeue shows job 7 TIMEOUT".into(),
                at: Some(Micros(9)),
            })
        );
        assert_eq!(p.ended_at, None);
        let bytes = rmp_serde::to_vec(&pools).unwrap();
        let back: Pools = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, pools);
        // Without them (an older snapshot's layout: neither is written), it reads back too.
        let mut older = pools.clone();
        older
            .pools
            .get_mut("p")
            .unwrap()
            .renewal
            .as_mut()
            .unwrap()
            .last_end = None;
        let bytes = rmp_serde::to_vec(&older).unwrap();
        let back: Pools = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, older);
    }
}
