//! Placement and lifetime decisions for pools: may this allocation be attached, may this worker
//! be submitted, when must a worker start shutting down.

use std::collections::BTreeSet;

use uuid::Uuid;

use crate::event::pool::Allocation;
use crate::event::Micros;
use crate::next::Next::{self, Submit};
use crate::policy::holder::Holder;
use crate::policy::placement::{self, NoNode, NodeRoom};
use crate::slurm::{JobId, NodeShare};
use crate::state::pool::{Pool, Pools, Resources, Worker, WorkerState};

/// The publication timeout's default (CLI.md), in whole seconds.
pub const PUBLICATION_TIMEOUT_DEFAULT_S: u32 = 30;

/// Time budgets a worker needs around its payload, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budgets {
    pub publication_timeout_s: u32,
    pub native_state_s: u32,
    pub cleanup_s: u32,
    /// Between the early-shutdown SIGTERM and the SIGKILL: the payload's own time to stop,
    /// which comes before publication and so is part of the shutdown window.
    pub grace_s: u32,
    /// The shortest payload run worth starting.
    pub min_run_s: u32,
}

impl Budgets {
    pub const DEFAULT_NATIVE_STATE_S: u32 = 15;
    pub const DEFAULT_CLEANUP_S: u32 = 15;
    pub const DEFAULT_MIN_RUN_S: u32 = 60;

    pub fn with_publication_timeout(publication_timeout_s: u32) -> Budgets {
        Budgets {
            publication_timeout_s,
            native_state_s: Self::DEFAULT_NATIVE_STATE_S,
            cleanup_s: Self::DEFAULT_CLEANUP_S,
            grace_s: 0,
            min_run_s: Self::DEFAULT_MIN_RUN_S,
        }
    }

    /// From the early-shutdown signal to the allocation's end.
    pub fn shutdown_window_s(&self) -> i64 {
        i64::from(self.grace_s)
            + i64::from(self.publication_timeout_s)
            + i64::from(self.native_state_s)
            + i64::from(self.cleanup_s)
    }
}

/// When the supervisor sends SIGTERM: the allocation's end minus the shutdown window.
pub fn early_shutdown_deadline(allocation_end: Micros, budgets: &Budgets) -> Micros {
    Micros(allocation_end.0 - budgets.shutdown_window_s() * 1_000_000)
}

/// Where an allocation runs, as far as a pool cares: one node, by name, or not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nodes {
    /// Slurm names no node (not placed yet, or a `(null)` list).
    Unplaced,
    One(String),
    /// More than one; Slurm's node list as it gave it (`n[1-2]`).
    Several(String),
}

impl Nodes {
    pub fn one(&self) -> Option<&str> {
        match self {
            Nodes::One(n) => Some(n),
            _ => None,
        }
    }

    /// The node, or Slurm's list of them, as it gave it.
    pub fn text(&self) -> Option<&str> {
        match self {
            Nodes::One(n) | Nodes::Several(n) => Some(n),
            Nodes::Unplaced => None,
        }
    }
}

/// What `scontrol show job` says about an allocation, reduced to what placement needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocationFacts {
    pub job_id: JobId,
    /// The job state word, e.g. `RUNNING`.
    pub state: String,
    pub user: String,
    pub nodes: Nodes,
    pub start_time: Option<Micros>,
    pub end_time: Option<Micros>,
    pub cpus: u32,
    pub mem_mb: u64,
    pub partition: String,
    pub account: String,
    pub qos: String,
    /// The job's `Comment` (empty when it has none): where the journal holding it marks it
    /// (`policy::holder`).
    pub comment: String,
    /// What it holds on each node (`scontrol -d`), in Slurm's order; empty when Slurm showed
    /// no per-node groups.
    pub shares: Vec<NodeShare>,
}

impl AllocationFacts {
    /// What Slurm shows the allocation holding on each node now. Without `-d`'s groups (an
    /// answer that has none), a single-node allocation holds all of its CPUs and memory on its
    /// node.
    pub fn live_shares(&self) -> Vec<NodeShare> {
        if !self.shares.is_empty() {
            return self.shares.clone();
        }
        match self.nodes.one() {
            Some(node) => vec![NodeShare {
                name: node.to_owned(),
                cpus: self.cpus,
                mem_mb: self.mem_mb,
                gpus: Vec::new(),
            }],
            None => Vec::new(),
        }
    }
}

/// Why a pool operation is refused (exit 3). Each says what to do next.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "job {job_id} is {state}, not RUNNING; attach a running allocation (see `squeue --me`)"
    )]
    NotRunning { job_id: JobId, state: String },
    #[error("job {job_id} belongs to {owner}, not to you ({caller}); dispatch only uses allocations you own")]
    NotOwned {
        job_id: JobId,
        owner: String,
        caller: String,
    },
    #[error("job {job_id} spans several nodes ({nodes}) but Slurm showed no per-node CPUs and memory; try again when `scontrol -d show job {job_id}` lists them")]
    MultiNode { job_id: JobId, nodes: String },
    #[error("job {job_id} runs on no node Slurm names; attach it once `scontrol show job {job_id}` shows its node")]
    NoNode { job_id: JobId },
    #[error(
        "job {job_id} is already attached as pool {pool:?}; use that pool or {} first",
        Next::PoolDetach(pool)
    )]
    AlreadyAttached { job_id: JobId, pool: String },
    #[error(
        "job {job_id} is held by pool {pool:?} of another state directory (journal {journal}, \
         marked from host {host}): a second pool would book its CPUs twice. Use that pool, or \
         run {} on {host} first; {} takes it anyway (recorded as an override; that pool's \
         workers keep running)",
        Next::PoolDetach(pool),
        Next::PoolAttach { pool: None, job: None, steal: true }
    )]
    HeldElsewhere {
        job_id: JobId,
        pool: String,
        journal: Uuid,
        host: String,
    },
    #[error("pool {pool:?} already exists (job {job_id}); detach it first or choose another name")]
    PoolExists { pool: String, job_id: JobId },
    #[error("job {job_id} has {left_s} s left, less than the {need_s} s needed; use a longer allocation")]
    TooShort {
        job_id: JobId,
        left_s: i64,
        need_s: i64,
    },
    #[error("a time limit of {time_s} s is shorter than the {need_s} s a worker needs (publication, native state and cleanup budgets plus a minimum run); ask for more --time")]
    TimeLimitTooShort { time_s: u64, need_s: i64 },
    #[error("job {job_id} reports no {what}; cannot check its lifetime")]
    NoTimes { job_id: JobId, what: &'static str },
    #[error(
        "job {job_id} is not the allocation pool {pool:?} attached (start time was {recorded}, now {observed}); \
         detach the pool and attach the new allocation"
    )]
    IncarnationChanged {
        pool: String,
        job_id: JobId,
        recorded: String,
        observed: String,
    },
    #[error(
        "pool {pool:?} has no node with room for {cpus} CPUs, {mem_mb} MB and {gpus} GPUs now \
         ({free}); stop a worker, ask for less, or wait for room with --wait"
    )]
    Budget {
        pool: String,
        cpus: u32,
        mem_mb: u64,
        gpus: u32,
        /// Each node's free and whole CPUs, MB and GPUs (`placement::describe_free`).
        free: String,
    },
    #[error(
        "pool {pool:?} has no node {node:?} (its nodes: {nodes}); {} shows them",
        Next::PoolStatus(Some(pool))
    )]
    UnknownNode {
        pool: String,
        node: String,
        nodes: String,
    },
    #[error(
        "pool {pool:?} already has a worker named {worker:?} holding budget; choose another name"
    )]
    DuplicateWorker { pool: String, worker: String },
    #[error(
        "a worker named {worker:?} submitted with {Submit} still holds budget; choose another \
         name or {}",
        Next::Stop(worker)
    )]
    DuplicateJobWorker { worker: String },
    #[error(
        "pool {pool:?} can never fit {cpus} CPUs, {mem_mb} MB and {gpus} GPUs on one node: {capacity}; \
         ask for less (waiting would not help)"
    )]
    NeverFits {
        pool: String,
        cpus: u32,
        mem_mb: u64,
        gpus: u32,
        /// What each node holds in all.
        capacity: String,
    },
    #[error(
        "pool {pool:?} had no room for {cpus} CPUs and {mem_mb} MB within the {waited_s} s of --wait; \
         nothing was submitted. Wait longer (--wait without a limit waits while the allocation can \
         still take the worker) or stop a worker"
    )]
    NoRoomWithin {
        pool: String,
        cpus: u32,
        mem_mb: u64,
        waited_s: u64,
    },
    #[error(
        "pool {pool:?} had no room before its allocation (job {job_id}) became too short for this \
         worker ({need_s} s needed before its end); nothing was submitted. Use a longer allocation"
    )]
    EndsBeforeRoom {
        pool: String,
        job_id: JobId,
        need_s: i64,
    },
    #[error(
        "pool {pool:?}: its allocation (job {job_id}) is over ({proof}); nothing was submitted. Attach a \
         new allocation"
    )]
    AllocationEnded {
        pool: String,
        job_id: JobId,
        proof: String,
    },
    #[error(
        "pool {pool:?} already has {waiting} submitters waiting for room (at most {limit}); nothing was \
         submitted. Try again later"
    )]
    TooManyWaiting {
        pool: String,
        waiting: usize,
        limit: usize,
    },
    #[error("no pool {pool:?}; {} lists the pools", Next::PoolStatus(None))]
    NoPool { pool: String },
    /// Workers still hold budget: those whose step may still run are stopped
    /// (`pool stop-worker`); those whose own journal says they exited need only `reconcile`,
    /// which proves their steps over.
    #[error("{}", workers_hold_budget(pool, running, exited))]
    WorkersHoldBudget {
        pool: String,
        running: Vec<String>,
        exited: Vec<String>,
    },
    #[error(
        "pool {pool:?} is attached to your allocation {job_id}, which dispatch never cancels; {} \
         forgets the pool (then `scancel {job_id}` ends the allocation if you want)",
        Next::PoolDetach(pool)
    )]
    AttachedNotCreated { pool: String, job_id: JobId },
    #[error(
        "pool {pool:?} holds allocation {job_id}, which dispatch created and must cancel; {} stops \
         its workers and cancels it",
        Next::PoolRelease(pool)
    )]
    CreatedNotDetached { pool: String, job_id: JobId },
    #[error(
        "pool {pool:?} is being released (its allocation {job_id} is being cancelled); nothing \
         more is submitted to it. {} finishes the release",
        Next::PoolRelease(pool)
    )]
    Releasing { pool: String, job_id: JobId },
    /// A renewing pool's allocation dispatch is ending early (`PoolAllocationEndIntent`):
    /// every worker of it is over, and its next allocation follows it.
    #[error(
        "pool {pool:?}: its allocation {job_id} is being ended (every worker of it is over, and \
         its next allocation, {successor}, starts once it ends); nothing more is placed in \
         {job_id}. {} makes the next allocation the pool's; then submit again",
        Next::Reconcile
    )]
    AllocationEnding {
        pool: String,
        job_id: JobId,
        successor: String,
    },
    /// Slurm keeps a creation's job pending for a reason waiting never changes
    /// (`policy::pool_create::never_runs`); it was cancelled and proven over.
    #[error(
        "pool {pool:?}: allocation {job_id} can never run: Slurm keeps it PENDING ({reason}). \
         It was cancelled ({proof}); nothing is left. {change}; then run {} again",
        Next::PoolCreate(pool)
    )]
    NeverRuns {
        pool: String,
        job_id: JobId,
        reason: String,
        change: String,
        proof: String,
    },
}

/// The minimum lifetime an allocation must have left to be attached.
pub const MIN_ATTACH_LIFETIME_S: i64 = 120;
/// The minimum a renewed pool's next allocation must have left to be adopted: any. It was made
/// for this pool, and however little it has left its end is the next renewal's cause; refusing
/// it would stop the renewal for good (a `reconcile` run once a minute, as from scrontab, meets
/// a 3-minute allocation with less than [`MIN_ATTACH_LIFETIME_S`] left).
pub const MIN_RENEWED_LIFETIME_S: i64 = 1;

fn check_live(f: &AllocationFacts, caller: &str, now: Micros, need_s: i64) -> Result<(), Refusal> {
    if f.state != "RUNNING" {
        return Err(Refusal::NotRunning {
            job_id: f.job_id,
            state: f.state.clone(),
        });
    }
    if f.user != caller {
        return Err(Refusal::NotOwned {
            job_id: f.job_id,
            owner: f.user.clone(),
            caller: caller.to_owned(),
        });
    }
    match &f.nodes {
        Nodes::One(_) => {}
        Nodes::Unplaced => return Err(Refusal::NoNode { job_id: f.job_id }),
        Nodes::Several(_) if f.shares.len() > 1 => {}
        Nodes::Several(list) => {
            return Err(Refusal::MultiNode {
                job_id: f.job_id,
                nodes: list.clone(),
            })
        }
    }
    if f.start_time.is_none() {
        return Err(Refusal::NoTimes {
            job_id: f.job_id,
            what: "start time",
        });
    }
    let end = f.end_time.ok_or(Refusal::NoTimes {
        job_id: f.job_id,
        what: "end time",
    })?;
    let left_s = end.secs() - now.secs();
    if left_s < need_s {
        return Err(Refusal::TooShort {
            job_id: f.job_id,
            left_s,
            need_s,
        });
    }
    Ok(())
}

/// May `facts` be attached as `pool`? Returns the allocation identity to record.
pub fn check_attach(
    pools: &Pools,
    pool: &str,
    facts: &AllocationFacts,
    caller: &str,
    now: Micros,
) -> Result<Allocation, Refusal> {
    if let Some(existing) = pools.pools.get(pool) {
        return Err(Refusal::PoolExists {
            pool: pool.to_owned(),
            job_id: existing.allocation.job_id,
        });
    }
    check_allocation(pools, facts, caller, now, MIN_ATTACH_LIFETIME_S)
}

/// Every check of [`check_attach`] but the pool's name: may the allocation `facts` describe
/// be a pool's (a new pool's, or a renewed pool's next one), with at least `need_s` left?
pub fn check_allocation(
    pools: &Pools,
    facts: &AllocationFacts,
    caller: &str,
    now: Micros,
    need_s: i64,
) -> Result<Allocation, Refusal> {
    if let Some(other) = pools
        .pools
        .values()
        .find(|p| p.allocation.job_id == facts.job_id)
    {
        return Err(Refusal::AlreadyAttached {
            job_id: facts.job_id,
            pool: other.name.clone(),
        });
    }
    check_live(facts, caller, now, need_s)?;
    Ok(Allocation {
        job_id: facts.job_id,
        node: facts
            .nodes
            .text()
            .expect("checked by check_live")
            .to_owned(),
        user: facts.user.clone(),
        start_time: facts.start_time.expect("checked by check_live"),
        end_time: facts.end_time.expect("checked by check_live"),
        cpus: facts.cpus,
        mem_mb: facts.mem_mb,
        partition: facts.partition.clone(),
        account: facts.account.clone(),
        qos: facts.qos.clone(),
    })
}

/// Who holds the allocation, as its comment says, for a journal `own` about to take it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holding {
    /// The mark names this journal: nothing to write.
    Ours,
    /// No mark: this journal marks it.
    Unmarked,
    /// Another journal's mark, taken over with `--steal` (recorded as an override).
    Stolen(Holder),
}

/// May journal `own` take the allocation `facts` describe? Another journal's mark refuses,
/// naming it, unless `steal`.
pub fn check_holder(facts: &AllocationFacts, own: Uuid, steal: bool) -> Result<Holding, Refusal> {
    match Holder::in_comment(&facts.comment) {
        None => Ok(Holding::Unmarked),
        Some(h) if h.journal_id == own => Ok(Holding::Ours),
        Some(h) if steal => Ok(Holding::Stolen(h)),
        Some(h) => Err(held_elsewhere(facts, h)),
    }
}

/// May journal `own` go on using (submit to) the allocation? Only another journal's mark
/// refuses: no mark is a pool attached before marks existed, or a comment the user rewrote.
pub fn check_still_held(facts: &AllocationFacts, own: Option<Uuid>) -> Result<(), Refusal> {
    match Holder::in_comment(&facts.comment) {
        Some(h) if Some(h.journal_id) != own => Err(held_elsewhere(facts, h)),
        _ => Ok(()),
    }
}

fn held_elsewhere(facts: &AllocationFacts, h: Holder) -> Refusal {
    Refusal::HeldElsewhere {
        job_id: facts.job_id,
        pool: h.pool,
        journal: h.journal_id,
        host: h.host,
    }
}

/// A worker asking for room in a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerAsk {
    /// The journal asking: an allocation another journal's mark names refuses
    /// ([`check_still_held`]).
    pub journal: Option<Uuid>,
    pub name: String,
    pub cpus: u32,
    pub mem_mb: u64,
    pub gpus: u32,
    /// The node it must run on (`pool submit --node`); otherwise the first with room.
    pub node: Option<String>,
    pub budgets: Budgets,
}

impl WorkerAsk {
    fn need(&self) -> Resources {
        Resources {
            cpus: u64::from(self.cpus),
            mem_mb: self.mem_mb,
            gpus: u64::from(self.gpus),
        }
    }
}

/// May `ask` be submitted to `pool`, given live `facts` about its allocation? Every check runs,
/// in a fixed order, every time: a re-inspection skips nothing. The node it goes to.
pub fn check_submit(
    pool: &Pool,
    facts: &AllocationFacts,
    ask: &WorkerAsk,
    caller: &str,
    now: Micros,
) -> Result<String, Refusal> {
    check_admissible(pool, facts, ask, caller, now)?;
    check_room(pool, facts, ask)
}

/// What `pool submit --wait` checks before it waits: every check of [`check_submit`] but the
/// room, and that the worker could fit at all.
pub fn check_submit_to_wait(
    pool: &Pool,
    facts: &AllocationFacts,
    ask: &WorkerAsk,
    caller: &str,
    now: Micros,
) -> Result<(), Refusal> {
    check_admissible(pool, facts, ask, caller, now)?;
    check_could_fit(pool, facts, ask)
}

/// Every check of [`check_submit`] before the budget: the allocation's identity, liveness,
/// owner and lifetime, and the worker's name.
fn check_admissible(
    pool: &Pool,
    facts: &AllocationFacts,
    ask: &WorkerAsk,
    caller: &str,
    now: Micros,
) -> Result<(), Refusal> {
    if pool.releasing {
        return Err(Refusal::Releasing {
            pool: pool.name.clone(),
            job_id: pool.allocation.job_id,
        });
    }
    if let Some(ending) = pool
        .renewal
        .as_ref()
        .and_then(|r| Some((r.ending.as_ref()?, r)))
        .filter(|(x, _)| x.job_id == pool.allocation.job_id)
    {
        let (_, r) = ending;
        return Err(Refusal::AllocationEnding {
            pool: pool.name.clone(),
            job_id: pool.allocation.job_id,
            successor: r
                .successor
                .as_ref()
                .and_then(|s| s.job_id)
                .map_or_else(|| "not known yet".to_owned(), |j| format!("job {j}")),
        });
    }
    if facts.job_id != pool.allocation.job_id
        || facts.start_time != Some(pool.allocation.start_time)
    {
        return Err(Refusal::IncarnationChanged {
            pool: pool.name.clone(),
            job_id: pool.allocation.job_id,
            recorded: pool.allocation.start_time.to_rfc3339(),
            observed: facts
                .start_time
                .map_or_else(|| "none".to_owned(), |t| t.to_rfc3339()),
        });
    }
    check_still_held(facts, ask.journal)?;
    let need_s = ask.budgets.shutdown_window_s() + i64::from(ask.budgets.min_run_s);
    check_live(facts, caller, now, need_s)?;
    // A job of the same incarnation on a node the pool never had is not this allocation; one
    // that lost a node (`--no-kill`) still is, and nothing is placed on the node it lost.
    let recorded = pool.node_shares();
    let live = facts.live_shares();
    if let Some(stranger) = live
        .iter()
        .find(|l| recorded.iter().all(|r| r.name != l.name))
    {
        return Err(Refusal::IncarnationChanged {
            pool: pool.name.clone(),
            job_id: pool.allocation.job_id,
            recorded: format!("node(s) {}", pool.allocation.node),
            observed: format!("node {}", stranger.name),
        });
    }
    if pool.active.values().any(|w| w.name == ask.name) {
        return Err(Refusal::DuplicateWorker {
            pool: pool.name.clone(),
            worker: ask.name.clone(),
        });
    }
    Ok(())
}

/// Could `ask` ever fit on a node of `pool`, with no worker holding budget? A request bigger
/// than every node refuses at once, with or without `--wait`.
pub fn check_could_fit(
    pool: &Pool,
    facts: &AllocationFacts,
    ask: &WorkerAsk,
) -> Result<(), Refusal> {
    match place_in(pool, facts, ask) {
        Err(refusal @ (Refusal::NeverFits { .. } | Refusal::UnknownNode { .. })) => Err(refusal),
        _ => Ok(()),
    }
}

/// The node for `ask`, or why there is none ([`placement::place`]).
fn place_in(pool: &Pool, facts: &AllocationFacts, ask: &WorkerAsk) -> Result<String, Refusal> {
    let rooms = placement::node_rooms(pool, &facts.live_shares());
    place_among(pool, &rooms, ask)
}

/// The node of `pool` for `ask` among `rooms` (live, or as recorded), or the refusal that
/// says why there is none.
pub fn place_among(pool: &Pool, rooms: &[NodeRoom], ask: &WorkerAsk) -> Result<String, Refusal> {
    placement::place(rooms, ask.need(), ask.node.as_deref()).map_err(|why| match why {
        NoNode::Unknown => Refusal::UnknownNode {
            pool: pool.name.clone(),
            node: ask.node.clone().unwrap_or_default(),
            nodes: rooms
                .iter()
                .map(|r| r.node.as_str())
                .collect::<Vec<_>>()
                .join(","),
        },
        NoNode::Full => Refusal::Budget {
            pool: pool.name.clone(),
            cpus: ask.cpus,
            mem_mb: ask.mem_mb,
            gpus: ask.gpus,
            free: placement::describe_free(rooms),
        },
        NoNode::Never => Refusal::NeverFits {
            pool: pool.name.clone(),
            cpus: ask.cpus,
            mem_mb: ask.mem_mb,
            gpus: ask.gpus,
            capacity: placement::describe_capacity(rooms),
        },
    })
}

/// The last moment a submission of a worker with `budgets` still passes the lifetime check
/// of [`check_submit`] (the allocation's end minus the shutdown window and a minimum run):
/// `pool submit --wait` gives up when it passes without room.
pub fn last_submit_time(allocation_end: Micros, budgets: &Budgets) -> Micros {
    let need_s = budgets.shutdown_window_s() + i64::from(budgets.min_run_s);
    Micros::from_secs(allocation_end.secs() - need_s)
}

/// Is there room for `ask` on a node of `pool` now (the budget part of [`check_submit`])? The
/// node it goes to.
pub fn check_room(
    pool: &Pool,
    facts: &AllocationFacts,
    ask: &WorkerAsk,
) -> Result<String, Refusal> {
    place_in(pool, facts, ask)
}

/// Names shown in one refusal; the rest are counted.
const NAMES_SHOWN: usize = 5;

/// `a, b, c and 2 more`.
fn some_names(names: &[String]) -> String {
    let shown = names[..names.len().min(NAMES_SHOWN)].join(", ");
    match names.len().saturating_sub(NAMES_SHOWN) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// [`Refusal::WorkersHoldBudget`]'s words: each kind of worker with what frees it.
fn workers_hold_budget(pool: &str, running: &[String], exited: &[String]) -> String {
    let mut parts = Vec::new();
    if let Some(first) = running.first() {
        let stop = Next::PoolStopWorkerIn {
            pool: &pool,
            worker: first,
        };
        let each = if running.len() > 1 {
            ", one by one"
        } else {
            ""
        };
        parts.push(format!(
            "{} worker(s) whose step may still run ({}): stop them first{each} ({stop})",
            running.len(),
            some_names(running),
        ));
    }
    if !exited.is_empty() {
        parts.push(format!(
            "{} worker(s) that exited, as their own journals say, but whose end is not yet \
             reconciled ({}): {} (or {}) proves their steps over and frees their budget",
            exited.len(),
            some_names(exited),
            Next::Reconcile,
            Next::PoolRefresh,
        ));
    }
    format!(
        "pool {pool:?} still has workers holding budget; nothing was done. {}; then {} again",
        parts.join("; "),
        Next::PoolDetach(&pool),
    )
}

/// May `pool` be detached? `ended`: the active workers whose own journal says the payload
/// exited (or the supervisor finished), read by the caller; a worker the state already
/// records as exited counts too.
pub fn check_detach(pools: &Pools, pool: &str, ended: &BTreeSet<Uuid>) -> Result<(), Refusal> {
    let p = pools.pools.get(pool).ok_or_else(|| Refusal::NoPool {
        pool: pool.to_owned(),
    })?;
    if p.created.is_some() {
        // Forgetting it would leave an allocation nothing cancels.
        return Err(Refusal::CreatedNotDetached {
            pool: pool.to_owned(),
            job_id: p.allocation.job_id,
        });
    }
    if !p.active.is_empty() {
        let (exited, running): (Vec<&Worker>, Vec<&Worker>) = p
            .active
            .values()
            .partition(|w| w.state == WorkerState::Exited || ended.contains(&w.submission_id));
        let names = |ws: Vec<&Worker>| ws.into_iter().map(|w| w.name.clone()).collect();
        return Err(Refusal::WorkersHoldBudget {
            pool: pool.to_owned(),
            running: names(running),
            exited: names(exited),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn facts() -> AllocationFacts {
        AllocationFacts {
            job_id: crate::event::test_job(42),
            state: "RUNNING".into(),
            user: "ana".into(),
            nodes: Nodes::One("vm".into()),
            start_time: Some(Micros::from_secs(NOW - 60)),
            end_time: Some(Micros::from_secs(NOW + 3600)),
            cpus: 4,
            mem_mb: 4096,
            partition: "debug".into(),
            account: "dev".into(),
            qos: "normal".into(),
            comment: String::new(),
            shares: Vec::new(),
        }
    }

    fn attached() -> Pools {
        let mut pools = Pools::default();
        let allocation =
            check_attach(&pools, "p", &facts(), "ana", Micros::from_secs(NOW)).unwrap();
        pools.attach(
            Micros::from_secs(NOW),
            &crate::event::pool::PoolAttached {
                pool: "p".into(),
                allocation,
            },
        );
        pools
    }

    fn ask(cpus: u32, mem_mb: u64) -> WorkerAsk {
        WorkerAsk {
            journal: None,
            name: "w".into(),
            cpus,
            mem_mb,
            gpus: 0,
            node: None,
            budgets: Budgets::with_publication_timeout(30),
        }
    }

    #[test]
    fn attach_refusals() {
        let now = Micros::from_secs(NOW);
        let pools = Pools::default();
        let with = |f: fn(&mut AllocationFacts)| {
            let mut x = facts();
            f(&mut x);
            check_attach(&pools, "p", &x, "ana", now).unwrap_err()
        };
        assert!(matches!(
            with(|f| f.state = "PENDING".into()),
            Refusal::NotRunning { .. }
        ));
        assert!(matches!(
            with(|f| f.state = "COMPLETED".into()),
            Refusal::NotRunning { .. }
        ));
        assert!(matches!(
            with(|f| f.user = "bob".into()),
            Refusal::NotOwned { .. }
        ));
        assert!(matches!(
            with(|f| f.nodes = Nodes::Several("vm[1-2]".into())),
            Refusal::MultiNode { nodes, .. } if nodes == "vm[1-2]"
        ));
        assert!(matches!(
            with(|f| f.nodes = Nodes::Unplaced),
            Refusal::NoNode { .. }
        ));
        assert!(matches!(
            with(|f| f.end_time = Some(Micros::from_secs(NOW + 30))),
            Refusal::TooShort { .. }
        ));
        assert!(matches!(
            with(|f| f.end_time = None),
            Refusal::NoTimes { .. }
        ));
        let pools = attached();
        assert!(matches!(
            check_attach(&pools, "q", &facts(), "ana", now),
            Err(Refusal::AlreadyAttached { .. })
        ));
        assert!(matches!(
            check_attach(&pools, "p", &facts(), "ana", now),
            Err(Refusal::PoolExists { .. })
        ));
    }

    /// Issue 36 item 5: a detach refused for workers tells a worker whose step may still run
    /// (stop it) from one whose end is only not yet reconciled (reconcile).
    #[test]
    fn detach_tells_workers_to_stop_from_workers_to_reconcile() {
        let now = Micros::from_secs(NOW);
        let mut pools = attached();
        let none = BTreeSet::new();
        assert_eq!(check_detach(&pools, "p", &none), Ok(()));
        for (n, name) in [(1, "run"), (2, "done"), (3, "seen")] {
            let x = crate::policy::fixtures::intent("p", name, Uuid::from_u128(n));
            pools.submit(now, &x);
        }
        pools.exited(&crate::event::pool::WorkerExited {
            submission_id: Uuid::from_u128(3),
            code: Some(0),
            signal: None,
        });
        let ended = BTreeSet::from([Uuid::from_u128(2)]);
        let e = check_detach(&pools, "p", &ended).unwrap_err();
        assert_eq!(
            e,
            Refusal::WorkersHoldBudget {
                pool: "p".into(),
                running: vec!["run".into()],
                exited: vec!["done".into(), "seen".into()],
            }
        );
        let text = e.to_string();
        for needed in [
            "(run): stop them first (`dispatch pool stop-worker p run`)",
            "(done, seen): `dispatch reconcile` (or `dispatch pool status --refresh`)",
            "then `dispatch pool detach p` again",
        ] {
            assert!(text.contains(needed), "{needed}: {text}");
        }
        let all = BTreeSet::from([Uuid::from_u128(1), Uuid::from_u128(2)]);
        let text = check_detach(&pools, "p", &all).unwrap_err().to_string();
        assert!(!text.contains("stop-worker"), "{text}");
        let many: Vec<String> = (0..7).map(|i| format!("w{i}")).collect();
        assert_eq!(some_names(&many), "w0, w1, w2, w3, w4 and 2 more");
    }

    #[test]
    fn submit_checks_lifetime_identity_and_budget() {
        let pools = attached();
        let p = &pools.pools["p"];
        let now = Micros::from_secs(NOW);
        assert_eq!(
            check_submit(p, &facts(), &ask(4, 4096), "ana", now),
            Ok("vm".to_owned())
        );
        // More than the node holds: never, with or without --wait.
        assert!(matches!(
            check_submit(p, &facts(), &ask(5, 1), "ana", now),
            Err(Refusal::NeverFits { .. })
        ));
        assert!(matches!(
            check_submit(p, &facts(), &ask(1, 4097), "ana", now),
            Err(Refusal::NeverFits { .. })
        ));
        // Less, but more than is free now.
        let mut busy = pools.clone();
        let x = crate::event::pool::WorkerSubmitIntent {
            cpus: 3,
            mem_mb: 10,
            ..crate::policy::fixtures::intent("p", "x", Uuid::from_u128(1))
        };
        busy.submit(now, &x);
        let b = &busy.pools["p"];
        assert!(matches!(
            check_submit(b, &facts(), &ask(2, 1), "ana", now),
            Err(Refusal::Budget { gpus: 0, ref free, .. }) if free == "vm 1/4 CPUs, 4086/4096 MB, 0/0 GPUs free"
        ));
        assert_eq!(
            check_submit(b, &facts(), &ask(1, 1), "ana", now),
            Ok("vm".to_owned())
        );
        let named = WorkerAsk {
            node: Some("other".into()),
            ..ask(1, 1)
        };
        assert!(matches!(
            check_submit(b, &facts(), &named, "ana", now),
            Err(Refusal::UnknownNode { .. })
        ));
        let mut replaced = facts();
        replaced.start_time = Some(Micros::from_secs(NOW - 5));
        assert!(matches!(
            check_submit(p, &replaced, &ask(1, 1), "ana", now),
            Err(Refusal::IncarnationChanged { .. })
        ));
        // 30 s publication + 15 native + 15 cleanup + 60 min run = 120 s needed.
        let late = Micros::from_secs(NOW + 3600 - 119);
        assert!(matches!(
            check_submit(p, &facts(), &ask(1, 1), "ana", late),
            Err(Refusal::TooShort { need_s: 120, .. })
        ));
        let ok = Micros::from_secs(NOW + 3600 - 120);
        assert_eq!(
            check_submit(p, &facts(), &ask(1, 1), "ana", ok),
            Ok("vm".to_owned())
        );
    }

    /// A renewed pool's next allocation is adopted however little it has left (a minute-by-
    /// minute reconcile met a 3-minute one with 91 s left on the real cluster); a pool attached
    /// by hand still needs two minutes.
    #[test]
    fn a_renewal_adopts_a_short_lived_next_allocation_that_an_attach_refuses() {
        let pools = Pools::default();
        let late = Micros::from_secs(NOW + 3600 - 91);
        assert!(matches!(
            check_allocation(&pools, &facts(), "ana", late, MIN_ATTACH_LIFETIME_S),
            Err(Refusal::TooShort { left_s: 91, .. })
        ));
        let adopted = check_allocation(&pools, &facts(), "ana", late, MIN_RENEWED_LIFETIME_S);
        assert!(adopted.is_ok(), "{adopted:?}");
    }

    #[test]
    fn deadline_leaves_the_shutdown_window() {
        let b = Budgets::with_publication_timeout(30);
        assert_eq!(b.shutdown_window_s(), 60);
        assert_eq!(
            early_shutdown_deadline(Micros::from_secs(1000), &b),
            Micros::from_secs(940)
        );
        // The payload's grace comes before publication, so it is part of the window.
        let b = Budgets { grace_s: 10, ..b };
        assert_eq!(b.shutdown_window_s(), 70);
        assert_eq!(
            early_shutdown_deadline(Micros::from_secs(1000), &b),
            Micros::from_secs(930)
        );
    }
}
