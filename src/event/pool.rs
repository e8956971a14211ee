//! Pool events: attaching, creating and releasing pools, and the life of a worker in one.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{Micros, Sha256Digest};
use crate::slurm::{JobId, NodeShare};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub job_id: JobId,
    pub node: String,
    pub user: String,
    /// The allocation's incarnation: a job id reused after a controller reset starts anew.
    pub start_time: Micros,
    pub end_time: Micros,
    pub cpus: u32,
    pub mem_mb: u64,
    pub partition: String,
    pub account: String,
    pub qos: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolAttached {
    pub pool: String,
    pub allocation: Allocation,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolDetached {
    pub pool: String,
}

/// The durable receipt of `pool submit`: from here on the worker holds budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSubmitIntent {
    pub pool: String,
    pub worker: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub cpus: u32,
    pub mem_mb: u64,
    pub publication_timeout_s: u32,
    pub command: Vec<String>,
}

/// Where a worker's budget is held, written in the commit of its `WorkerSubmitIntent` (a
/// released kind's fields never change): the node its step is started on (`srun -w`) and how
/// many of that node's GPUs it reserves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPlaced {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub node: String,
    pub gpus: u32,
}

/// What the pool's allocation holds on each of its nodes, as `scontrol -d show job` showed it
/// at attach: written in the commit of its `PoolAttached`. The pool's budget is per node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolNodes {
    pub pool: String,
    pub job_id: JobId,
    pub nodes: Vec<NodeShare>,
}

/// Everything `pool submit` was asked for a worker that is to be submitted again when a node
/// failure ends it (`--resubmit-on-node-failure N`), written in the commit of its
/// `WorkerSubmitIntent`: the request again, and how many more times.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRequest {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub resubmits_left: u32,
    pub command: Vec<String>,
    pub gpus: u32,
    pub publication_timeout_s: u32,
    pub native_state_s: u32,
    pub cleanup_s: u32,
    pub grace_s: u32,
    pub source: Option<String>,
    pub image: Option<String>,
    pub append_only_glob: Option<String>,
    pub trial: Option<String>,
}

/// A worker submitted again after a node failure ended `replaces`, written in the commit of
/// the new one's `WorkerSubmitIntent` (`submission_id`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerResubmitted {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub replaces: Uuid,
}

/// The resubmission of `replaces` was refused (`reason`: the refusal); it is not tried again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerResubmitRefused {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub replaces: Uuid,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerLaunched {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub srun_pid: u32,
}

/// srun answered and said no: `definite` frees the budget. Without an answer the outcome is
/// unknown and the budget stays held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerLaunchFailed {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub definite: bool,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStepObserved {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub step_id: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStopIntent {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub grace_s: u32,
}

/// How the payload ended, as the worker's supervisor recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerExited {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// Proof that the worker's step is over: the only event that releases its budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerTerminal {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub proof: String,
}

/// What the coordinator learned from a worker's own journal, and the point of that journal it
/// learned it from (journal id, seq, chain), so a later rewrite of the journal is detected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReportIngested {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub journal_id: Uuid,
    pub last_seq: u64,
    pub head: Sha256Digest,
    /// `passed` or `refused`; none before the supervisor got that far.
    pub preflight: Option<String>,
    /// `started`, `published`, `timed_out` or `failed`.
    pub publication: Option<String>,
    pub published_dir: Option<String>,
    pub manifest_sha256: Option<Sha256Digest>,
    /// `sealed`, `checkpointed`, `crash_class_partial` or `empty`.
    pub state_class: Option<String>,
    /// The supervisor's outcome, once it finished.
    pub finished: Option<String>,
}

/// The pool's allocation is proven over (a terminal state, "Invalid job id"): no step can run
/// in it again, and `pool status` shows it ended instead of counting down.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolAllocationEnded {
    pub pool: String,
    pub job_id: JobId,
    pub proof: String,
}

/// The coordinator is about to finish a cleanup the worker's supervisor could not (it was
/// killed, or never started), after the worker's step was proven over. Same rules as the
/// supervisor's (`policy::node::cleanup_plan`): runtime and cache go, the checkout only once
/// its work is published.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerCleanupIntent {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub remove: Vec<String>,
    pub keep: Vec<String>,
    /// What the `STATE-CLASS` file will say.
    pub state_class: String,
    pub reason: String,
}

/// What the coordinator's cleanup did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerCleanedUp {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub removed: Vec<String>,
    pub kept: Vec<String>,
    pub state_class: String,
    pub errors: Vec<String>,
}

/// The GPUs a worker's step got, as its supervisor recorded them (`StepDevices` in its own
/// journal), ingested so that they are still shown once the worker is released.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerDevicesIngested {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    /// `SLURM_STEP_GPUS`: the node's GPU indexes; `None`: unset.
    pub step_gpus: Option<String>,
    /// `CUDA_VISIBLE_DEVICES`: what the payload sees; `None`: unset.
    pub cuda_visible_devices: Option<String>,
}

/// A worker's own journal is damaged or was rewritten: reported, and never trusted again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerJournalDamaged {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    /// `corrupt`, `tampered` or `rewritten`.
    pub status: String,
    pub reason: String,
}

/// The durable receipt of `pool create`, before salloc runs: from here on an allocation named
/// `job_name` may exist, and the next `pool create` of this pool, `pool release` or
/// `reconcile` finds it by that name (or proves, after `salloc_limit_s` plus the settle margin,
/// that none was made).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolCreateIntent {
    pub pool: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub creation_id: Uuid,
    /// `<job_name_prefix>pool-<pool>-<first 8 hex digits of the creation id>`.
    pub job_name: String,
    /// The longest the salloc call can run (its `--immediate` wait, the driver's timeout and
    /// kill grace).
    pub salloc_limit_s: u32,
    pub cpus: u32,
    pub mem_mb: u64,
    pub time_s: u64,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub nodelist: Option<String>,
}

/// What a creation asks beyond its `PoolCreateIntent` (a released kind's fields never
/// change), written in the commit of that intent when it asks for several nodes or for GPUs:
/// salloc's `--nodes`, `--gres=gpu:<gpus_per_node>`, and `--no-kill` (several nodes: a node's
/// failure ends only the steps on it, not the allocation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolCreateShape {
    pub pool: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub creation_id: Uuid,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub no_kill: bool,
}

/// A node left the pool's allocation (a node failure, with `--no-kill`): the job is still
/// listed, on the other nodes. Nothing more is placed on it; its workers' steps are released
/// by their own proofs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolNodeLost {
    pub pool: String,
    pub job_id: JobId,
    pub node: String,
    pub proof: String,
}

/// The job a creation made: salloc's answer (`how` = `salloc`), the id salloc mentioned before
/// it was cut off (`hint`), or found by its name (`name`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolCreateJob {
    pub pool: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub creation_id: Uuid,
    pub job_id: JobId,
    pub how: String,
}

/// A creation that did not end in a pool. `definite`: no allocation of it exists or can appear
/// (Slurm refused, it was proven never created, its job is proven over); the creation is then
/// forgotten. Otherwise a job may exist and the creation stays, to be found by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolCreateFailed {
    pub pool: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub creation_id: Uuid,
    pub definite: bool,
    pub reason: String,
}

/// Written in the commit of the `PoolAttached` of a created pool: its allocation is
/// dispatch's, to cancel with `pool release`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolOwned {
    pub pool: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub creation_id: Uuid,
    pub job_id: JobId,
}

/// `pool release` is about to cancel the pool's allocation (its workers are stopped or about
/// to be released with the allocation's end). No worker is submitted to it from here on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolReleaseIntent {
    pub pool: String,
    pub job_id: JobId,
}

/// The created pool's allocation is proven gone and no worker holds budget: the pool is
/// forgotten.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolReleased {
    pub pool: String,
    pub job_id: JobId,
    pub proof: String,
}

/// `pool attach` (or `pool detach`) is about to set the allocation's `Comment` to `comment`,
/// which holds this journal's mark (`policy::holder`) or, on detach, no longer does.
/// `previous`: the comment Slurm showed before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationMarkIntent {
    pub pool: String,
    pub job_id: JobId,
    pub comment: String,
    pub previous: String,
}

/// What setting the comment did: `ok` once `scontrol update` answered and the job, read back,
/// shows the comment meant (for an attach: this journal's mark); otherwise why not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationMarked {
    pub pool: String,
    pub job_id: JobId,
    pub ok: bool,
    pub reason: String,
}

/// What a worker asked of its continuation (`--continue N`, `--continue-on`,
/// `--continue-crashed`), written in the commit of its intent (`WorkerSubmitIntent` with its
/// `WorkerRequest`, or `JobSubmitIntent` with its `JobRequest`): how many more generations may
/// follow it, for which causes, and whether from a crash-class state too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinuationAsked {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub continues_left: u32,
    /// `time-limit`, `preempted`, `node-failure`, `lost`, `checkpoint`.
    pub causes: Vec<String>,
    pub crashed: bool,
}

/// A worker continues its predecessor, written in the commit of the new one's intent
/// (`submission_id`): the predecessor is proven over, and this is why and from what.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerContinued {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub predecessor: Uuid,
    /// The new worker's generation: its predecessor's plus one (a first run is 1).
    pub generation: u32,
    /// `time-limit`, `preempted`, `node-failure`, `lost` or `checkpoint`.
    pub cause: String,
    /// The words that prove the cause (Slurm's, or the predecessor's journal's).
    pub proof: String,
    pub published_dir: Option<String>,
    pub manifest_sha256: Option<Sha256Digest>,
    /// It resumes from a `crash_class_partial` state (`--continue-crashed`).
    pub from_crash_class: bool,
}

/// The predecessor is not continued (`reason`); it is not tried again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinuationRefused {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub predecessor: Uuid,
    pub reason: String,
}

/// `pool create --renew`: the pool is kept across allocations until `pool release`, within
/// these bounds. Written in the commit of its `PoolCreateIntent`, so no crash can lose it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRenewalAsked {
    pub pool: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub creation_id: Uuid,
    /// No allocation is asked for once the current one ends at or after this time.
    pub until: Option<Micros>,
    /// Allocations in all, the first included (at least 2).
    pub max_allocations: Option<u32>,
    /// The next allocation is asked without `--dependency=afterany:<current>`.
    pub overlap: bool,
}

/// `reconcile` is about to ask for the pool's next allocation (its `generation`), by an
/// salloc named `job_name` (`<prefix>pool-<pool>-<8 hex digits of renewal_id>`) that may run
/// for `salloc_limit_s` before it names its job; `after`: the job it depends on
/// (`--dependency=afterany:`), none with an overlap or once that job is proven over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRenewalIntent {
    pub pool: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub renewal_id: Uuid,
    pub generation: u32,
    pub job_name: String,
    pub salloc_limit_s: u32,
    pub previous_job_id: JobId,
    pub after: Option<JobId>,
}

/// The job a renewal's salloc named (`how` = `salloc`), or found by its name (`name`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRenewalJob {
    pub pool: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub renewal_id: Uuid,
    pub job_id: JobId,
    pub how: String,
}

/// A renewal that did not become the pool's allocation. `definite`: no job of it exists or
/// can appear (salloc refused, proven never made, its job proven over), and another may be
/// asked; otherwise a job may exist, and it is looked for by name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRenewalFailed {
    pub pool: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub renewal_id: Uuid,
    pub definite: bool,
    pub reason: String,
}

/// The pool's renewal is over for good (a bound reached, or Slurm refused the next
/// allocation in words that waiting does not change): no allocation is asked for again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRenewalStopped {
    pub pool: String,
    pub reason: String,
}

/// `reconcile` is about to end the renewing pool's allocation `job_id` itself, before its time
/// limit (`scancel <job_id>`): every worker of it is over, released with proof, and its next
/// allocation is asked for and waits to follow it (`policy::renewal::may_end_early`). From
/// here on nothing is placed in `job_id`. `reason`: why it may end, in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolAllocationEndIntent {
    pub pool: String,
    pub job_id: JobId,
    pub reason: String,
}

/// What the `scancel` of a [`PoolAllocationEndIntent`] answered: `accepted`, `refused` (in
/// scancel's words, `detail`) or `unknown` (no answer). It proves nothing: the allocation's end
/// is proven as any other (`PoolAllocationEnded`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolAllocationEndAnswered {
    pub pool: String,
    pub job_id: JobId,
    pub outcome: String,
    pub detail: String,
}

/// The renewal's job runs and passed every check `pool attach` makes: it is the pool's
/// allocation now, dispatch's own, its `generation`-th. `cause`: how the previous one
/// (`previous_job_id`) ended, from Slurm's `proof` (`time-limit`, `preempted`, `lost`, …).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRenewed {
    pub pool: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub renewal_id: Uuid,
    pub generation: u32,
    pub allocation: Allocation,
    pub previous_job_id: JobId,
    pub cause: String,
    pub proof: String,
}
