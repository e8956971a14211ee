//! Reconciliation verdicts: what Slurm's answers prove about each worker. Pure.
//!
//! The corroboration rule (issue 10): an empty answer is never proof on its own. A lying or
//! misconfigured controller, or the wrong cluster, answers exit 0 with nothing while the work
//! still runs. Something is over only when one of these says so, and the proof text names it:
//! - a terminal state (squeue `--states=all` or sacct) for that job or step;
//! - "Invalid job id specified" for that one id ([`GoneProof`]);
//! - for a step that was seen before: its job listed (not terminal) beside a step listing
//!   without it.
//!
//! A job absent from a successful listing is `NotListed`, which is unknown.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::event::jobs::JobRequeued;
use crate::event::Micros;
use crate::next::Next;
use crate::slurm::sacct::runs;
use crate::slurm::{
    AcctRow, Answer, JobDetails, JobId, JobRow, JobState, Lookup, SlurmError, StepKind, StepRow,
};
use crate::state::jobs::{JobWorker, JobWorkerState};
use crate::state::pool::{Pool, Worker};
use crate::state::State;

/// What one pool's queries said. `None` means the query failed or proves nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolObservation {
    /// The allocation is proven over, and how: a terminal state or "Invalid job id".
    pub allocation_over: Option<String>,
    /// The allocation is in a successful job listing, not terminal (and how it was listed): a
    /// step listing beside it is about a job the controller knows.
    pub allocation_listed: Option<String>,
    /// Running steps (number, name) from a successful step listing.
    pub steps: Option<Vec<(u32, String)>>,
    /// Steps in accounting (number, name, state word, terminal?).
    pub accounting: Option<Vec<AcctStep>>,
    /// Accounting answered with the allocation's own row (its state word): it knows the job,
    /// so a step missing from it is not lag about the job itself.
    pub accounting_job: Option<String>,
    /// The nodes the listing shows the (live) allocation on, and its state word: a node of the
    /// pool missing from them left the job (a node failure, with `--no-kill`).
    pub listed_on: Option<(Vec<String>, String)>,
    /// The nodes each listed step runs on, by step number (from the same step listing).
    pub step_nodes: BTreeMap<u32, Vec<String>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcctStep {
    pub step: u32,
    pub name: String,
    pub state: String,
    pub terminal: bool,
}

/// What squeue said about allocation `job` (its row in a job listing) and its steps (`None`:
/// not asked).
pub fn observe_pool(
    job: JobId,
    listed: &Lookup<'_, JobRow>,
    steps: Option<&Answer<Vec<StepRow>>>,
) -> PoolObservation {
    let mut obs = PoolObservation::default();
    match listed {
        Lookup::Listed(row) if row.state.is_terminal() => {
            obs.allocation_over = Some(format!("squeue shows job {job} {}", row.state));
        }
        Lookup::Listed(row) => {
            obs.allocation_listed = Some(format!("job {job} is listed {}", row.state));
            // Only a running job's node list says a node left it: a completing one lets its
            // nodes go one by one.
            obs.listed_on = row
                .node_list
                .as_deref()
                .filter(|_| row.state == crate::slurm::JobState::Running)
                .and_then(|l| crate::slurm::nodes::expand_hostlist(l).ok())
                .map(|nodes| (nodes, row.state.to_string()));
        }
        Lookup::Gone(proof) => obs.allocation_over = Some(proof.to_string()),
        Lookup::NotListed | Lookup::Unknown(_) => {}
    }
    match steps {
        Some(Answer::Live(rows)) => {
            obs.step_nodes = rows
                .iter()
                .filter_map(|r| match (r.id.step, &r.node_list) {
                    (StepKind::Numbered(n), Some(list)) if r.id.job == job => {
                        let nodes = crate::slurm::nodes::expand_hostlist(list).ok()?;
                        Some((n, nodes))
                    }
                    _ => None,
                })
                .collect();
            obs.steps = Some(
                rows.iter()
                    .filter_map(|r| match r.id.step {
                        StepKind::Numbered(n) if r.id.job == job => Some((n, r.name.clone())),
                        _ => None,
                    })
                    .collect(),
            )
        }
        Some(Answer::Gone(proof)) => {
            obs.allocation_over.get_or_insert_with(|| proof.to_string());
        }
        Some(Answer::Unknown(_)) | None => {}
    }
    obs
}

/// Add what accounting says about allocation `job`: its own terminal state, and its steps, of
/// its newest run only (`slurm::sacct::runs`: an earlier run's steps share the new run's ids).
pub fn add_accounting(obs: &mut PoolObservation, job: JobId, rows: &[AcctRow]) {
    if let Some(over) = accounting_over(job, rows) {
        obs.allocation_over.get_or_insert(over);
    }
    let newest = runs(rows, job).pop();
    obs.accounting_job = newest.as_ref().map(|run| run.job.state.to_string());
    obs.accounting = Some(
        newest
            .iter()
            .flat_map(|run| &run.steps)
            .filter_map(|r| match r.id_raw.step() {
                Some(StepKind::Numbered(n)) => Some(AcctStep {
                    step: n,
                    name: r.name.clone(),
                    state: r.state.to_string(),
                    terminal: r.state.is_terminal(),
                }),
                _ => None,
            })
            .collect(),
    );
}

/// Whether the allocation is proven over by a proof that names no state of it: squeue's
/// "Invalid job id", once it forgot the job (MinJobAge after its end) before anyone looked.
/// Its end's cause (a renewal's, its workers' continuations') is then accounting's word.
pub fn end_unnamed(obs: &PoolObservation) -> bool {
    obs.allocation_over
        .as_deref()
        .is_some_and(crate::policy::continuation::names_no_state)
}

/// The state accounting shows allocation `job` ended in, added to a proof of its end that
/// names none ([`end_unnamed`]): "…; accounting shows job J TIMEOUT".
pub fn name_the_end(obs: &mut PoolObservation, job: JobId, rows: &[AcctRow]) {
    if !end_unnamed(obs) {
        return;
    }
    if let (Some(proof), Some(shown)) = (&mut obs.allocation_over, accounting_over(job, rows)) {
        proof.push_str("; ");
        proof.push_str(&shown);
    }
}

/// "accounting shows job J STATE" when sacct has job `job`'s own row of its newest run in a
/// terminal state (an earlier run of a requeued job ended, the job did not).
pub fn accounting_over(job: JobId, rows: &[AcctRow]) -> Option<String> {
    runs(rows, job)
        .pop()
        .map(|run| run.job)
        .filter(|r| r.state.is_terminal())
        .map(|r| format!("accounting shows job {job} {}", r.state))
}

/// Is step `step` (of the pool's allocation) proven over? `seen`: it is known to have existed
/// (recorded, or the supervisor ran in it), so its absence beside its listed job means it ended.
pub fn step_over(step: u32, seen: bool, obs: &PoolObservation) -> Option<String> {
    if let Some(how) = &obs.allocation_over {
        return Some(format!(
            "the allocation is over ({how}), so every step in it is"
        ));
    }
    if let (true, Some(listed), Some(rows)) = (seen, &obs.allocation_listed, &obs.steps) {
        if !rows.iter().any(|(s, _)| *s == step) {
            return Some(format!(
                "{listed} and step {step}, seen before, is absent from its step listing"
            ));
        }
    }
    obs.accounting
        .as_ref()
        .and_then(|rows| rows.iter().find(|r| r.step == step && r.terminal))
        .map(|row| format!("accounting shows step {step} {}", row.state))
}

/// What is known of the srun process `pool submit` started for a worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SrunSeen {
    /// It has exited (how, as observed: its exit status, or its pid gone on its host).
    Exited(String),
    Running,
    /// Not observable from here (another host, or no srun recorded).
    #[default]
    NotKnown,
}

/// How long after a launch a step that never showed up may still show up in accounting
/// (slurmdbd lags a start by 4-5 s here; three times that).
pub const NEVER_RAN_SETTLE: Duration = Duration::from_secs(15);

/// Is a step that was never seen proven never to have run? Only all of these together are
/// proof, and the proof names each: the srun that would have made it has exited; the
/// supervisor that would have run in it recorded no start (its journal was read); a step
/// listing beside the listed, running allocation has no step of its name; accounting answered
/// with the allocation's own row and no step of its name; and the settle delay has passed since
/// the launch. Anything less is unknown.
pub fn step_never_ran(
    step_name: &str,
    srun: &SrunSeen,
    supervisor_started: Option<bool>,
    since_launch: Duration,
    obs: &PoolObservation,
) -> Option<String> {
    let SrunSeen::Exited(how) = srun else {
        return None;
    };
    if supervisor_started != Some(false) || since_launch < NEVER_RAN_SETTLE {
        return None;
    }
    let listed = obs.allocation_listed.as_ref()?;
    let steps = obs.steps.as_ref()?;
    let acct_job = obs.accounting_job.as_ref()?;
    let acct = obs.accounting.as_ref()?;
    if steps.iter().any(|(_, n)| n == step_name) || acct.iter().any(|r| r.name == step_name) {
        return None;
    }
    Some(format!(
        "step {step_name} never ran: the srun that dispatch started {how}; the supervisor's \
         journal records no start; {listed} and its step listing has no step {step_name}; \
         accounting lists the job ({acct_job}) and no step {step_name}, {} s after the launch",
        since_launch.as_secs()
    ))
}

/// Is a launch srun reported failed a definite launch failure, which releases the worker's
/// budget? Only when srun said so in its own words for the worker's step (`srun_words`:
/// `slurm::srun_log::launch_refused`, read from the log of the one srun started for it) and
/// the supervisor's journal was read and records no start (`supervisor_started` is
/// `Some(false)`): the controller created the step, slurmd refused to start its task, and
/// nothing of the worker ran. srun's announcement of the step alone proves nothing either way;
/// an unreadable journal, or a supervisor that started, is not this proof.
pub fn launch_refused(
    srun_words: Option<&str>,
    supervisor_started: Option<bool>,
) -> Option<String> {
    let words = srun_words?;
    (supervisor_started == Some(false)).then(|| {
        format!(
            "Slurm created the step but did not launch it, and the supervisor's journal records \
             no start; srun said: {words}"
        )
    })
}

/// What the worker's own journal said, and what is known of its srun.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerObservation {
    /// The step id the supervisor ran in: proof that the step existed.
    pub step_from_supervisor: Option<u32>,
    pub payload_exited: bool,
    /// `Some(false)`: its journal was read and records no start; `None`: not read.
    pub supervisor_started: Option<bool>,
    pub srun: SrunSeen,
    pub since_launch: Duration,
    /// Steps other workers of the pool hold or held (active or remembered as finished): a
    /// step of this worker's name among them is an earlier worker's of the same name, never
    /// this one's.
    pub others_steps: Vec<u32>,
    /// srun's own words that the launch of the step it announced failed
    /// (`slurm::srun_log::launch_refused`, from the log of the srun started for it).
    pub srun_launch_refused: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// A step id to record (newly learned).
    pub observe_step: Option<u32>,
    /// Proof that the worker's step is over: releases its budget.
    pub terminal: Option<String>,
    /// The step is in a successful listing right now: nothing more to look up.
    pub running: bool,
    /// Proof that its step never ran ([`step_never_ran`]): releases its budget as a definite
    /// launch failure.
    pub never_ran: Option<String>,
    /// Proof that Slurm created its step and refused to launch it ([`launch_refused`]), also
    /// when its step was recorded: releases its budget as a definite launch failure.
    pub launch_refused: Option<String>,
}

/// `pool` without the steps in `others`: a name is not unique across a pool's history (a
/// worker name is free again once its worker is released).
fn without_steps(pool: &PoolObservation, others: &[u32]) -> PoolObservation {
    let mut mine = pool.clone();
    if let Some(steps) = mine.steps.as_mut() {
        steps.retain(|(s, _)| !others.contains(s));
    }
    if let Some(rows) = mine.accounting.as_mut() {
        rows.retain(|r| !others.contains(&r.step));
    }
    mine
}

/// Decide what the observations prove about `worker`, whose step is named `step_name`.
pub fn verdict(
    worker: &Worker,
    step_name: &str,
    pool: &PoolObservation,
    own: &WorkerObservation,
) -> Verdict {
    debug_assert!(worker.state.holds_budget());
    let mine = without_steps(pool, &own.others_steps);
    let pool = &mine;
    let mut v = Verdict::default();
    if let Some(how) = &pool.allocation_over {
        v.terminal = Some(format!(
            "the allocation is over ({how}), so every step in it is"
        ));
        return v;
    }
    v.launch_refused = launch_refused(own.srun_launch_refused.as_deref(), own.supervisor_started);
    if v.launch_refused.is_some() {
        return v;
    }
    let listed_by_name = pool
        .steps
        .as_ref()
        .and_then(|rows| rows.iter().find(|(_, n)| n == step_name).map(|(s, _)| *s));
    let acct_by_name = pool.accounting.as_ref().and_then(|rows| {
        rows.iter()
            .filter(|r| r.name == step_name)
            .max_by_key(|r| r.step)
    });
    // A step is known to have existed if we recorded it or the supervisor ran in it.
    let existed = worker.step_id.or(own.step_from_supervisor);
    let step = existed.or(listed_by_name).or(acct_by_name.map(|r| r.step));
    let Some(step) = step else {
        v.never_ran = step_never_ran(
            step_name,
            &own.srun,
            own.supervisor_started,
            own.since_launch,
            pool,
        );
        return v;
    };
    if worker.step_id != Some(step) {
        v.observe_step = Some(step);
    }
    if pool
        .steps
        .as_ref()
        .is_some_and(|rows| rows.iter().any(|(s, _)| *s == step))
    {
        v.running = true;
        return v;
    }
    v.terminal = step_over(step, existed == Some(step), pool);
    v
}

/// What the answers prove about the job of a `dispatch submit` worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobSeen {
    /// Proven over, and how.
    Over(String),
    /// Listed in a live state.
    Live,
    /// Not listed, and nothing else says it is over: unknown.
    Unproven,
}

/// Job `job`'s row in a listing, and what accounting says (if it was asked).
pub fn job_seen(
    job: JobId,
    listed: &Lookup<'_, JobRow>,
    accounting: Option<&[AcctRow]>,
) -> JobSeen {
    match listed {
        Lookup::Listed(row) if row.state.is_terminal() => {
            JobSeen::Over(format!("squeue shows job {job} {}", row.state))
        }
        Lookup::Listed(_) => JobSeen::Live,
        Lookup::Gone(proof) => JobSeen::Over(proof.to_string()),
        Lookup::NotListed | Lookup::Unknown(_) => accounting
            .and_then(|rows| accounting_over(job, rows))
            .map_or(JobSeen::Unproven, JobSeen::Over),
    }
}

/// How long after its intent a submission whose sbatch gave no answer may still gain a job,
/// beyond the longest its sbatch call could run: sbatch's own retries, an sbatch orphaned by a
/// killed dispatch, the controller working through its queue, clock skew.
pub const SETTLE_MARGIN: Duration = Duration::from_secs(30);

/// sbatch's limit for submissions journaled before `JobNamed` (the driver's default 30 s
/// timeout plus its 2 s kill grace).
pub const DEFAULT_SBATCH_LIMIT_S: u32 = 32;

/// How long after the intent a job that was never listed is proven never created.
pub fn settle_delay(sbatch_limit_s: Option<u32>) -> Duration {
    Duration::from_secs(u64::from(sbatch_limit_s.unwrap_or(DEFAULT_SBATCH_LIMIT_S))) + SETTLE_MARGIN
}

/// What the searches by name prove about a submission whose sbatch gave no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// Its job, found by its name (unique to the submission), and proof it is over if it is.
    Found {
        job: JobId,
        how: String,
        over: Option<String>,
    },
    /// No job of its name in either listing, both answered, long after any sbatch could have
    /// made one, and the squeue answer is shown to be the controller's view after that (it
    /// lists a job given out later): nothing was created, and its budget can go.
    NeverCreated(String),
    /// Not proven either way; `Some(why)` when only the watermark was missing (the listings
    /// answered without its name, past the settle delay): what would settle it.
    Unknown(Option<String>),
}

/// The lowest job id known to have been given out after `settled_at`: the ids of jobs whose
/// intent was journaled at or after it (`recorded`: intent time and job id). Its sbatch ran
/// after its intent, so the controller gave that id after any sbatch of a submission settled
/// by then could have been answered, and Slurm job ids grow with each submission on one
/// controller: every job such a submission could have made has a lower id.
pub fn watermark(
    settled_at: Micros,
    recorded: impl IntoIterator<Item = (Micros, JobId)>,
) -> Option<JobId> {
    recorded
        .into_iter()
        .filter(|(at, _)| at.0 >= settled_at.0)
        .map(|(_, id)| id)
        .min()
}

/// When a submission with intent at `intent_at` can have no sbatch in flight any more.
pub fn settled_at(intent_at: Micros, settle: Duration) -> Micros {
    Micros(
        intent_at
            .0
            .saturating_add(i64::try_from(settle.as_micros()).unwrap_or(i64::MAX)),
    )
}

/// `squeue`: the user's jobs with `--states=all`; `sacct`: accounting by name since (a margin
/// before) the intent, if it was asked; `watermark`: [`watermark`] at [`settled_at`].
///
/// Absence by name is never proof alone: a controller in a blackout answers squeue with exit 0
/// and nothing, and accounting may have lost the job, so two empty answers can sit beside a
/// running job (the simulation's seed 298). It proves "never created" only when the squeue
/// answer that lacks the name lists a job at or above the watermark: that answer is then the
/// controller's own current view (not an empty or stale one), taken after any job of this
/// submission would have existed, and `--states=all` lists every live job of the user, so no
/// job of this name is live. sacct's empty answer (`NotInAccounting`) counts as an answer: it
/// only tells "never created" from "ended longer than MinJobAge ago", and either frees nothing
/// that runs.
pub fn find_lost(
    name: &str,
    intent_at: Micros,
    now: Micros,
    settle: Duration,
    watermark: Option<JobId>,
    squeue: &Answer<Vec<JobRow>>,
    sacct: Option<&Answer<Vec<AcctRow>>>,
) -> Lost {
    if let Answer::Live(rows) = squeue {
        let newest = rows
            .iter()
            .filter(|r| r.name == name)
            .filter_map(|r| r.plain_id().map(|id| (id, r)))
            .max_by_key(|(id, _)| id.get());
        if let Some((job, row)) = newest {
            return Lost::Found {
                job,
                how: format!("squeue lists job {job} named {name:?} ({})", row.state),
                over: row
                    .state
                    .is_terminal()
                    .then(|| format!("squeue shows job {job} {}", row.state)),
            };
        }
    }
    let accounting: Option<&[AcctRow]> = match sacct {
        Some(Answer::Live(rows)) => Some(rows),
        Some(Answer::Unknown(SlurmError::NotInAccounting { .. })) => Some(&[]),
        _ => None,
    };
    if let Some(rows) = accounting {
        let newest = rows
            .iter()
            .filter(|r| r.id_raw.step().is_none() && r.name == name)
            .filter_map(|r| r.id_raw.as_plain())
            .max_by_key(|id| id.get());
        if let Some(job) = newest {
            return Lost::Found {
                job,
                how: format!("accounting lists job {job} named {name:?}"),
                over: accounting_over(job, rows),
            };
        }
    }
    let (Answer::Live(rows), Some(_)) = (squeue, accounting) else {
        return Lost::Unknown(None);
    };
    if now.0 < settled_at(intent_at, settle).0 {
        return Lost::Unknown(None);
    }
    let absent = format!(
        "no job named {name:?} in squeue --states=all nor in accounting since its intent, {} s \
         after it (longer than its sbatch could run)",
        settle.as_secs()
    );
    let Some(mark) = watermark else {
        return Lost::Unknown(Some(format!(
            "{absent}, but that proves nothing alone (an empty or stale answer looks the same) \
             and no job submitted after that is known to compare the listing against"
        )));
    };
    match rows.iter().map(|r| r.job_id).max_by_key(|id| id.get()) {
        Some(newest) if newest.get() >= mark.get() => Lost::NeverCreated(format!(
            "never created: {absent}; the same squeue answer lists job {newest}, given out after \
             that (job {mark} was), so it is the controller's current view"
        )),
        _ => Lost::Unknown(Some(format!(
            "{absent}, but that proves nothing alone (an empty or stale answer looks the same) \
             and the listing shows no job from job {mark} on, which was submitted after that"
        ))),
    }
}

/// One active worker of a pool as reconcile saw it outside Slurm: its record, its step's name,
/// and what its own journal said and what is known of its srun (`own`; its `since_launch` is
/// the judge's to set, from the time it is given).
#[derive(Clone, Debug)]
pub struct WorkerSeen<'a> {
    pub worker: &'a Worker,
    pub step_name: String,
    pub own: WorkerObservation,
}

/// What reconcile decided about one pool: the allocation's end to record, and each worker's
/// verdict, in the order of the workers it was given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolJudgement {
    /// Proof that the allocation is over: recorded as `PoolAllocationEnded`.
    pub allocation_over: Option<String>,
    /// Nodes newly proven gone from the live allocation, with the proof: `PoolNodeLost`.
    pub nodes_lost: Vec<(String, String)>,
    pub verdicts: Vec<Verdict>,
}

impl PoolJudgement {
    /// Would accounting settle anything? A worker neither proven over nor running while the
    /// allocation is not proven over (accounting is asked only then: one query serves every
    /// pool).
    pub fn wants_accounting(&self) -> bool {
        self.allocation_over.is_none()
            && self
                .verdicts
                .iter()
                .any(|v| v.terminal.is_none() && !v.running)
    }
}

/// Judge one pool at time `now`: what Slurm's answers (`obs`) and each worker's own evidence
/// (`workers`) prove about the allocation and each worker ([`verdict`]).
pub fn judge_pool(
    pool: &Pool,
    obs: &PoolObservation,
    workers: &[WorkerSeen<'_>],
    now: Micros,
) -> PoolJudgement {
    let nodes_lost = lost_nodes(pool, obs);
    let lost = |node: &str| {
        nodes_lost.iter().any(|(n, _)| n == node)
            || pool
                .spread
                .as_ref()
                .is_some_and(|s| s.lost.contains_key(node))
    };
    let verdicts = workers
        .iter()
        .map(|w| {
            let own = WorkerObservation {
                since_launch: Duration::from_micros(
                    u64::try_from(now.0 - w.worker.submitted_at.0).unwrap_or(0),
                ),
                ..w.own.clone()
            };
            let mut v = verdict(w.worker, &w.step_name, obs, &own);
            let node = pool.node_of(w.worker);
            if lost(node) {
                v.terminal = v
                    .terminal
                    .or_else(|| stranded_step(pool, obs, w.worker, v.observe_step, &lost));
                v.running = v.running && v.terminal.is_none();
                // A step proven over on a node that failed: say so, beside the proof.
                if let Some(proof) = v.terminal.as_mut() {
                    *proof = format!("ended by the failure of node {node}: {proof}");
                }
            }
            v
        })
        .collect();
    PoolJudgement {
        allocation_over: obs.allocation_over.clone(),
        nodes_lost,
        verdicts,
    }
}

/// Proof that a worker's step on a lost node is over although Slurm still lists it: every node
/// the listing shows it on has left the live allocation. Slurm 22.05 keeps such a step listed
/// `RUNNING` until the node comes back (then kills what is left of the job there, as for any
/// node a job no longer holds); it holds nothing of the allocation, and its node's capacity has
/// left the pool, so its budget is released.
fn stranded_step(
    pool: &Pool,
    obs: &PoolObservation,
    w: &Worker,
    observed: Option<u32>,
    lost: &dyn Fn(&str) -> bool,
) -> Option<String> {
    let step = w.step_id.or(observed)?;
    let nodes = obs.step_nodes.get(&step).filter(|n| !n.is_empty())?;
    let (listed, state) = obs.listed_on.as_ref()?;
    if obs.allocation_over.is_some() || !nodes.iter().all(|n| lost(n) && !listed.contains(n)) {
        return None;
    }
    Some(format!(
        "job {job} is listed {state} on {} without {on}, and its step {job}.{step} is listed \
         only there (Slurm keeps it listed until the node returns)",
        listed.join(","),
        job = pool.allocation.job_id,
        on = nodes.join(","),
    ))
}

/// The nodes of `pool` that the listing of its live allocation no longer shows, not yet
/// recorded as lost, with the proof. Only for a pool that knows its nodes one by one (a pool on
/// one node ends with its allocation).
fn lost_nodes(pool: &Pool, obs: &PoolObservation) -> Vec<(String, String)> {
    let (Some((listed, state)), Some(spread)) = (&obs.listed_on, &pool.spread) else {
        return Vec::new();
    };
    if obs.allocation_over.is_some() || spread.nodes.len() < 2 || listed.is_empty() {
        return Vec::new();
    }
    spread
        .nodes
        .iter()
        .filter(|n| !listed.contains(&n.name) && !spread.lost.contains_key(&n.name))
        .map(|n| {
            let proof = format!(
                "job {} is listed {state} on {} and no longer on {}",
                pool.allocation.job_id,
                listed.join(","),
                n.name
            );
            (n.name.clone(), proof)
        })
        .collect()
}

/// What reconcile's queries said about the `dispatch submit` jobs.
#[derive(Clone, Debug)]
pub struct JobsObservation {
    /// The known job ids, in one listing.
    pub by_id: Answer<Vec<JobRow>>,
    /// The user's jobs with those that ended (`squeue --me --states=all`), for submissions
    /// whose sbatch gave no answer.
    pub mine: Answer<Vec<JobRow>>,
    /// Accounting by id for the known jobs the listing did not list.
    pub acct_by_id: Option<Answer<Vec<AcctRow>>>,
    /// Accounting by name for the lost submissions `mine` did not find.
    pub acct_by_name: Option<Answer<Vec<AcctRow>>>,
    /// Jobs missing from a listing of several ids and left unproven, each asked about alone.
    pub alone: Vec<(JobId, Answer<Vec<JobRow>>)>,
    /// `scontrol show job` of the jobs [`wants_restarts`] named: their `Restarts=`.
    pub details: Vec<(JobId, Answer<Vec<JobDetails>>)>,
}

impl JobsObservation {
    /// What the listing of known ids and accounting by id prove about job `job`.
    pub fn first_seen(&self, job: JobId) -> JobSeen {
        let rows = self.acct_by_id.as_ref().and_then(|a| a.as_ref().live());
        job_seen(job, &self.by_id.job(job), rows.map(Vec::as_slice))
    }
}

/// What reconcile decided about one `dispatch submit` worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobDecision {
    /// Nothing to record or report: its job is live, or unproven while its state is not
    /// unknown, or its recorded id is no Slurm job id.
    Nothing,
    /// Its job is proven over: `JobTerminal`.
    Over { job: JobId, proof: String },
    /// The job of a submission whose sbatch gave no answer, found by name: `JobSubmitted`,
    /// and `JobTerminal` in the same commit when `over`.
    Found {
        job: JobId,
        how: String,
        over: Option<String>,
    },
    /// Proven never created: `JobSubmitFailed` (definite).
    NeverCreated(String),
    /// Unknown, and what would settle it when that is known.
    Unknown(Option<String>),
}

impl JobDecision {
    /// Unknown only for want of a listed job given out after the submission settled: a
    /// watermark made now (`ops::watermark`) lets the next listing settle it.
    pub fn wants_watermark(&self) -> bool {
        matches!(self, JobDecision::Unknown(Some(_)))
    }
}

/// Judge every active `dispatch submit` worker of `state` at time `now` from `obs`, in the
/// order of `state.jobs.active`.
pub fn judge_jobs<'a>(
    state: &'a State,
    obs: &JobsObservation,
    now: Micros,
) -> Vec<(&'a JobWorker, JobDecision)> {
    state
        .jobs
        .active
        .values()
        .map(|j| (j, judge_job(state, j, obs, now)))
        .collect()
}

fn judge_job(state: &State, j: &JobWorker, obs: &JobsObservation, now: Micros) -> JobDecision {
    if let Some(job) = j.job_id {
        let mut seen = obs.first_seen(job);
        if seen == JobSeen::Unproven {
            if let Some((_, alone)) = obs.alone.iter().find(|(id, _)| *id == job) {
                seen = job_seen(job, &alone.job(job), None);
            }
        }
        return match seen {
            JobSeen::Over(proof) => JobDecision::Over { job, proof },
            JobSeen::Unproven if j.state == JobWorkerState::Unknown => JobDecision::Unknown(None),
            JobSeen::Live | JobSeen::Unproven => JobDecision::Nothing,
        };
    }
    let settle = settle_delay(j.named.as_ref().map(|n| n.sbatch_limit_s));
    let mark = watermark(settled_at(j.submitted_at, settle), recorded_job_ids(state));
    let lost = find_lost(
        j.job_name(),
        j.submitted_at,
        now,
        settle,
        mark,
        &obs.mine,
        obs.acct_by_name.as_ref(),
    );
    match lost {
        Lost::Found { job, how, over } => JobDecision::Found { job, how, over },
        Lost::NeverCreated(proof) => JobDecision::NeverCreated(proof),
        Lost::Unknown(why) => JobDecision::Unknown(why.map(|why| {
            format!(
                "{why}; each reconcile makes a held watermark job for this (cancelled at once), \
                 which settles it once Slurm's listing shows that job; or the operator gives it \
                 up: {}",
                Next::Forget(Some(&j.worker))
            )
        })),
    }
}

/// Is job `job` worth a `scontrol show job` for its `Restarts=`? Only the listing's states a
/// requeue passes through (docs/notes-requeue.md: `COMPLETING`, then `PENDING` with reason
/// `BeginTime`, or held, `job requeued in held state`; the `REQUEUE*` states), and an end
/// (the last moment Slurm still shows the count beside it). A running job costs nothing: a
/// requeued job's new run either refuses at once (its worker journal was begun) and ends, or
/// is the first that ran, and either way its end is asked about. The count itself is Slurm's
/// word; these states only decide when to ask.
pub fn wants_restarts(obs: &JobsObservation, job: JobId) -> bool {
    let listed = match obs.by_id.job(job) {
        Lookup::Listed(row) => Some(row),
        _ => obs
            .alone
            .iter()
            .find(|(id, _)| *id == job)
            .and_then(|(_, a)| a.job(job).live()),
    };
    listed.is_some_and(|row| {
        let reason = row.reason.to_ascii_lowercase();
        row.state.is_terminal()
            || reason.contains("requeue")
            || matches!(
                row.state,
                JobState::Completing
                    | JobState::Requeued
                    | JobState::RequeueFed
                    | JobState::RequeueHold
            )
            || (row.state == JobState::Pending && reason == "begintime")
    })
}

/// Another run of `j`'s job: `scontrol show job` shows a larger `Restarts=` than the journal
/// records for it. The event that records it, with Slurm's words as its proof.
pub fn requeued(j: &JobWorker, obs: &JobsObservation) -> Option<JobRequeued> {
    let job = j.job_id?;
    let (_, answer) = obs.details.iter().find(|(id, _)| *id == job)?;
    let d = answer.as_ref().live()?.iter().find(|d| d.job_id == job)?;
    let restarts = d.restarts.filter(|n| *n > j.restarts)?;
    Some(JobRequeued {
        submission_id: j.submission_id,
        job_id: job,
        restarts,
        proof: format!(
            "scontrol shows job {job} Restarts={restarts} JobState={}",
            d.state
        ),
    })
}

/// The jobs this journal knows were given out after a moment, with that moment (the
/// watermark's candidates): the `dispatch submit` jobs whose ids are known (active ones and the
/// finished ones the state remembers), from their intent, and the watermark jobs made on
/// purpose (`event::watermark`), from theirs.
pub fn recorded_job_ids(state: &State) -> impl Iterator<Item = (Micros, JobId)> + '_ {
    state
        .jobs
        .active
        .values()
        .chain(state.jobs.finished.iter())
        .filter_map(|j| j.job_id.map(|id| (j.submitted_at, id)))
        .chain(state.watermarks.made.iter().copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::fixtures::{attached, job_rows};
    use crate::slurm::sacct::parse_rows;
    use crate::slurm::squeue::parse_steps;
    use crate::slurm::{GoneProof, SlurmCommand};
    use crate::state::pool::WorkerState;
    use quickcheck::quickcheck;
    use uuid::Uuid;

    const JOB: u32 = 900;

    fn job() -> JobId {
        JobId::new(JOB).unwrap()
    }

    /// A pool of job [`JOB`] on `nodes` (4 CPUs each), attached and, over several nodes, with
    /// its nodes journaled.
    fn pool_on(nodes: &[&str]) -> Pool {
        let mut pools = crate::state::pool::Pools::default();
        let pool = "p".to_owned();
        let cpus = 4 * nodes.len() as u32;
        pools.attach(Micros(0), &attached(&pool, JOB, &nodes.join(","), cpus));
        if nodes.len() > 1 {
            pools.nodes(&crate::event::pool::PoolNodes {
                pool: pool.clone(),
                job_id: job(),
                nodes: nodes
                    .iter()
                    .map(|n| crate::slurm::NodeShare {
                        name: (*n).to_owned(),
                        cpus: 4,
                        mem_mb: 1000,
                        gpus: vec![0],
                    })
                    .collect(),
            });
        }
        pools.pools.remove(&pool).unwrap()
    }

    /// A node missing from the live allocation's listing is lost; a worker placed on it whose
    /// step is gone is proven over by that, and says the node failed; a worker elsewhere runs on.
    #[test]
    fn a_node_that_left_the_allocation_ends_only_the_workers_on_it() {
        let pool = pool_on(&["n1", "n2", "n3"]);
        let mut on_n3 = worker(Some(1));
        on_n3.name = "w1".into();
        on_n3.placement = Some(crate::state::pool::Placement {
            node: "n3".into(),
            gpus: 1,
        });
        let mut on_n1 = worker(Some(0));
        on_n1.placement = Some(crate::state::pool::Placement {
            node: "n1".into(),
            gpus: 0,
        });
        let seen = |w, step: &str| WorkerSeen {
            worker: w,
            step_name: step.into(),
            own: WorkerObservation::default(),
        };
        let obs = PoolObservation {
            allocation_listed: Some(format!("job {JOB} is listed RUNNING")),
            steps: Some(vec![(0, "p.w".into())]),
            listed_on: Some((vec!["n1".into(), "n2".into()], "RUNNING".into())),
            ..Default::default()
        };
        let both = [seen(&on_n1, "p.w"), seen(&on_n3, "p.w1")];
        let judged = judge_pool(&pool, &obs, &both, Micros(0));
        assert_eq!(
            judged.nodes_lost,
            [(
                "n3".to_owned(),
                format!("job {JOB} is listed RUNNING on n1,n2 and no longer on n3")
            )]
        );
        assert!(judged.verdicts[0].running && judged.verdicts[0].terminal.is_none());
        let proof = judged.verdicts[1].terminal.as_deref().unwrap();
        assert!(
            proof.starts_with("ended by the failure of node n3: "),
            "{proof}"
        );
        // Slurm 22.05 keeps the step of the dead node listed: listed only on lost nodes, it is
        // over; listed on a node the job still holds, it is not.
        let stranded = PoolObservation {
            steps: Some(vec![(0, "p.w".into()), (1, "p.w1".into())]),
            step_nodes: [(0, vec!["n1".to_owned()]), (1, vec!["n3".to_owned()])].into(),
            ..obs.clone()
        };
        let judged = judge_pool(&pool, &stranded, &both, Micros(0));
        assert!(judged.verdicts[0].running && judged.verdicts[0].terminal.is_none());
        let proof = judged.verdicts[1].terminal.as_deref().unwrap();
        assert!(!judged.verdicts[1].running);
        assert!(
            proof.contains("its step 900.1 is listed only there"),
            "{proof}"
        );
        let spanning = PoolObservation {
            step_nodes: [(1, vec!["n1".to_owned(), "n3".to_owned()])].into(),
            ..stranded.clone()
        };
        let judged = judge_pool(&pool, &spanning, &[seen(&on_n3, "p.w1")], Micros(0));
        assert_eq!(judged.verdicts[0].terminal, None);
        // Listed on every node: nothing is lost. Not listed: nothing is known.
        let none_lost =
            |pool: &Pool, obs| judge_pool(pool, obs, &[], Micros(0)).nodes_lost.is_empty();
        let whole = PoolObservation {
            listed_on: Some((
                vec!["n1".into(), "n2".into(), "n3".into()],
                "RUNNING".into(),
            )),
            ..obs.clone()
        };
        assert!(none_lost(&pool, &whole));
        let unlisted = PoolObservation {
            listed_on: None,
            ..obs
        };
        assert!(none_lost(&pool, &unlisted));
        // A pool on one node loses no node: it ends with its allocation.
        assert!(none_lost(&pool_on(&["n1"]), &whole));
    }

    fn worker(step: Option<u32>) -> Worker {
        Worker {
            name: "w".into(),
            submission_id: Uuid::nil(),
            state: WorkerState::Running,
            cpus: 1,
            mem_mb: 100,
            step_id: step,
            exit_code: None,
            exit_signal: None,
            submitted_at: Micros(0),
            assets: Vec::new(),
            report: None,
            journal_damage: None,
            launch_failure: None,
            srun: None,
            placement: None,
            devices: None,
            job_id: Some(JobId::new(901).unwrap()),
        }
    }

    fn acct_rows(rows: &[(&str, &str, &str)]) -> Vec<AcctRow> {
        rows.iter()
            .flat_map(|(id, state, name)| {
                parse_rows(&format!(
                    "{id}|{id}|{state}|0:0|{}|{name}\n",
                    "|".repeat(12)
                ))
                .unwrap()
            })
            .collect()
    }

    /// An end squeue forgot ("Invalid job id") takes accounting's state; a proof that names
    /// one keeps it, and accounting without the job's end adds nothing.
    #[test]
    fn an_unnamed_end_takes_the_state_accounting_shows() {
        let job = crate::event::test_job(900);
        let forgot = "squeue said \"Invalid job id specified\" for job 900";
        let timeout = acct_rows(&[("900", "TIMEOUT", "alloc")]);
        let mut obs = PoolObservation {
            allocation_over: Some(forgot.into()),
            ..PoolObservation::default()
        };
        assert!(end_unnamed(&obs));
        name_the_end(&mut obs, job, &acct_rows(&[("900", "RUNNING", "alloc")]));
        assert_eq!(obs.allocation_over.as_deref(), Some(forgot));
        name_the_end(&mut obs, job, &timeout);
        let named = format!("{forgot}; accounting shows job 900 TIMEOUT");
        assert_eq!(obs.allocation_over.as_deref(), Some(named.as_str()));
        assert!(!end_unnamed(&obs));
        let mut shown = PoolObservation {
            allocation_over: Some("squeue shows job 900 PREEMPTED".into()),
            ..PoolObservation::default()
        };
        name_the_end(&mut shown, job, &timeout);
        assert_eq!(
            shown.allocation_over.as_deref(),
            Some("squeue shows job 900 PREEMPTED")
        );
    }

    /// Step `step` of worker `p.w` in accounting, `state`.
    fn acct_step(step: u32, state: &str, terminal: bool) -> AcctStep {
        AcctStep {
            step,
            name: "p.w".into(),
            state: state.into(),
            terminal,
        }
    }

    fn listing(rows: &[(u32, &str)]) -> Option<Vec<(u32, String)>> {
        Some(rows.iter().map(|(s, n)| (*s, n.to_string())).collect())
    }

    fn listed() -> Option<String> {
        Some(format!("job {JOB} is listed RUNNING"))
    }

    /// The verdict on a worker `p.w` with `step` recorded, from `obs` alone.
    fn verdict_of(step: Option<u32>, obs: &PoolObservation) -> Verdict {
        verdict(&worker(step), "p.w", obs, &WorkerObservation::default())
    }

    /// The answer of a listing that did not answer.
    fn unanswered<T>(command: SlurmCommand) -> Answer<T> {
        Answer::Unknown(SlurmError::NotInAccounting { command })
    }

    #[test]
    fn a_failed_query_proves_nothing() {
        let v = verdict_of(Some(3), &PoolObservation::default());
        assert_eq!(v, Verdict::default());
    }

    #[test]
    fn absence_proves_only_for_a_step_that_existed_beside_its_listed_job() {
        let obs = PoolObservation {
            allocation_listed: listed(),
            steps: listing(&[(1, "p.other")]),
            ..Default::default()
        };
        let seen = verdict_of(Some(3), &obs);
        assert_eq!(
            seen.terminal.as_deref(),
            Some("job 900 is listed RUNNING and step 3, seen before, is absent from its step listing")
        );
        let unlisted = PoolObservation {
            allocation_listed: None,
            ..obs.clone()
        };
        assert_eq!(
            verdict_of(Some(3), &unlisted).terminal,
            None,
            "a step listing without its job listed proves nothing"
        );
        let never_seen = verdict_of(None, &obs);
        assert_eq!(
            never_seen,
            Verdict::default(),
            "a step not created yet is not over"
        );
        let supervised = verdict(
            &worker(None),
            "p.w",
            &obs,
            &WorkerObservation {
                step_from_supervisor: Some(4),
                payload_exited: true,
                ..Default::default()
            },
        );
        assert_eq!(supervised.observe_step, Some(4));
        assert!(supervised.terminal.is_some());
    }

    /// Every piece of evidence `step_never_ran` names, present.
    fn never_ran_evidence() -> (SrunSeen, Option<bool>, Duration, PoolObservation) {
        let obs = PoolObservation {
            allocation_listed: listed(),
            steps: listing(&[(0, "p.other")]),
            accounting: Some(vec![]),
            accounting_job: Some("RUNNING".into()),
            ..Default::default()
        };
        (
            SrunSeen::Exited("(pid 7) exited with code 1".into()),
            Some(false),
            NEVER_RAN_SETTLE,
            obs,
        )
    }

    #[test]
    fn a_step_never_ran_only_when_every_piece_of_evidence_agrees() {
        let (srun, started, since, obs) = never_ran_evidence();
        let proof = step_never_ran("p.w", &srun, started, since, &obs).expect("proven");
        for named in ["srun", "supervisor", "step listing", "accounting", "15 s"] {
            assert!(proof.contains(named), "{named} missing from {proof}");
        }
        // Take any one piece away: not proven.
        let early = NEVER_RAN_SETTLE - Duration::from_millis(1);
        for (srun, started, since) in [
            (SrunSeen::Running, started, since),
            (SrunSeen::NotKnown, started, since),
            (srun.clone(), Some(true), since),
            (srun.clone(), None, since),
            (srun.clone(), started, early),
        ] {
            assert_eq!(step_never_ran("p.w", &srun, started, since, &obs), None);
        }
        let takes: [fn(&mut PoolObservation); 5] = [
            |o| o.allocation_listed = None,
            |o| o.steps = None,
            |o| o.steps = listing(&[(3, "p.w")]),
            |o| o.accounting_job = None,
            |o| o.accounting = Some(vec![acct_step(3, "FAILED", true)]),
        ];
        for take in takes {
            let mut o = obs.clone();
            take(&mut o);
            assert_eq!(step_never_ran("p.w", &srun, started, since, &o), None);
        }
    }

    #[test]
    fn a_launch_srun_said_failed_is_definite_only_if_no_supervisor_started() {
        let words = "Task launch for StepId=16.2 failed on node node1: Unable to layout tasks \
                     on given cpus";
        let proof = launch_refused(Some(words), Some(false)).unwrap();
        assert!(proof.ends_with(&format!("srun said: {words}")), "{proof}");
        assert!(proof.contains("records no start"), "{proof}");
        // A supervisor that started ran something; an unreadable journal proves nothing.
        assert_eq!(launch_refused(Some(words), Some(true)), None);
        assert_eq!(launch_refused(Some(words), None), None);
        // srun's announcement without a word of a failed launch is no proof.
        assert_eq!(launch_refused(None, Some(false)), None);
    }

    /// Issue 36: the step was recorded (srun announced it) and is gone; srun's words that its
    /// launch failed, with no supervisor start, make it a launch failure, not a release.
    #[test]
    fn reconcile_judges_a_recorded_step_whose_launch_srun_said_failed_a_launch_failure() {
        let w = worker(Some(2));
        let pool = PoolObservation {
            allocation_listed: listed(),
            steps: listing(&[]),
            ..PoolObservation::default()
        };
        let mut own = WorkerObservation {
            supervisor_started: Some(false),
            srun_launch_refused: Some("Task launch for StepId=16.2 failed".into()),
            ..WorkerObservation::default()
        };
        let v = verdict(&w, "p.w", &pool, &own);
        assert!(v.launch_refused.unwrap().ends_with("StepId=16.2 failed"));
        assert_eq!((v.terminal, v.never_ran), (None, None));
        // A supervisor that started: the step ran; as before, its absence is judged.
        own.supervisor_started = Some(true);
        let v = verdict(&w, "p.w", &pool, &own);
        assert_eq!(v.launch_refused, None);
        assert!(v.terminal.is_some(), "{v:?}");
    }

    #[test]
    fn a_listed_step_is_observed_and_running() {
        let obs = PoolObservation {
            allocation_listed: listed(),
            steps: listing(&[(5, "p.w")]),
            ..Default::default()
        };
        assert_eq!(
            verdict_of(None, &obs),
            Verdict {
                observe_step: Some(5),
                terminal: None,
                running: true,
                never_ran: None,
                launch_refused: None,
            }
        );
    }

    #[test]
    fn accounting_proves_a_terminal_state() {
        let acct = |terminal| PoolObservation {
            accounting: Some(vec![acct_step(2, "CANCELLED", terminal)]),
            ..Default::default()
        };
        assert_eq!(
            verdict_of(None, &acct(true)).terminal,
            Some("accounting shows step 2 CANCELLED".into())
        );
        assert_eq!(
            verdict_of(None, &acct(false)),
            Verdict {
                observe_step: Some(2),
                terminal: None,
                running: false,
                never_ran: None,
                launch_refused: None,
            }
        );
    }

    #[test]
    fn what_squeue_says_about_the_allocation() {
        let steps = Answer::Live(Vec::new());
        let rows = Answer::Live(job_rows(&[(JOB, "RUNNING", "alloc")]));
        let obs = observe_pool(job(), &rows.job(job()), Some(&steps));
        assert_eq!(obs.allocation_listed, listed());
        assert_eq!(obs.allocation_over, None);
        let over = Answer::Live(job_rows(&[(JOB, "TIMEOUT", "alloc")]));
        assert_eq!(
            observe_pool(job(), &over.job(job()), Some(&steps)).allocation_over,
            Some("squeue shows job 900 TIMEOUT".into())
        );
        let invalid: Answer<Vec<JobRow>> = Answer::Gone(GoneProof::InvalidJobId {
            command: SlurmCommand::Squeue,
            job: job(),
        });
        assert_eq!(
            observe_pool(job(), &invalid.job(job()), Some(&steps)).allocation_over,
            Some("squeue said \"Invalid job id specified\" for job 900".into())
        );
        let empty: Answer<Vec<JobRow>> = Answer::Live(Vec::new());
        assert_eq!(
            observe_pool(job(), &empty.job(job()), Some(&steps)),
            PoolObservation {
                steps: Some(Vec::new()),
                ..Default::default()
            },
            "an empty listing proves nothing about the allocation"
        );
        let mut obs = observe_pool(job(), &empty.job(job()), Some(&steps));
        add_accounting(
            &mut obs,
            job(),
            &acct_rows(&[("900", "CANCELLED by 0", "alloc")]),
        );
        assert_eq!(
            obs.allocation_over,
            Some("accounting shows job 900 CANCELLED by 0".into())
        );
    }

    #[test]
    fn the_end_of_the_allocation_ends_every_step() {
        let obs = PoolObservation {
            allocation_over: Some("sacct: COMPLETED".into()),
            ..Default::default()
        };
        assert!(verdict_of(None, &obs).terminal.is_some());
    }

    #[test]
    fn a_job_is_over_only_with_a_terminal_state_or_invalid_id() {
        let empty: Answer<Vec<JobRow>> = Answer::Live(Vec::new());
        assert_eq!(job_seen(job(), &empty.job(job()), None), JobSeen::Unproven);
        assert_eq!(
            job_seen(job(), &empty.job(job()), Some(&[])),
            JobSeen::Unproven
        );
        let done = acct_rows(&[
            ("900", "COMPLETED", "x"),
            ("900.batch", "COMPLETED", "batch"),
        ]);
        assert_eq!(
            job_seen(job(), &empty.job(job()), Some(&done)),
            JobSeen::Over("accounting shows job 900 COMPLETED".into())
        );
        let running = Answer::Live(job_rows(&[(JOB, "COMPLETING", "x")]));
        assert_eq!(
            job_seen(job(), &running.job(job()), Some(&done)),
            JobSeen::Live,
            "squeue's live row wins over accounting"
        );
    }

    #[test]
    fn a_lost_submission_is_found_by_name_or_proven_never_created_after_the_settle_delay() {
        let settle = settle_delay(Some(3));
        assert_eq!(settle, Duration::from_secs(33));
        let at = Micros::from_secs(1000);
        let later = Micros::from_secs(1034);
        let soon = Micros::from_secs(1010);
        let name = "sucoder-w-0123abcd";
        let mark = JobId::new(40);
        let sq = Answer::Live(job_rows(&[
            (41, "COMPLETED", name),
            (40, "RUNNING", "other"),
        ]));
        assert_eq!(
            find_lost(name, at, soon, settle, mark, &sq, None),
            Lost::Found {
                job: JobId::new(41).unwrap(),
                how: format!("squeue lists job 41 named {name:?} (COMPLETED)"),
                over: Some("squeue shows job 41 COMPLETED".into()),
            }
        );
        let none: Answer<Vec<JobRow>> = Answer::Live(job_rows(&[(40, "RUNNING", "other")]));
        let acct = Answer::Live(acct_rows(&[
            ("52", "FAILED", name),
            ("52.batch", "FAILED", "batch"),
        ]));
        assert_eq!(
            find_lost(name, at, soon, settle, mark, &none, Some(&acct)),
            Lost::Found {
                job: JobId::new(52).unwrap(),
                how: format!("accounting lists job 52 named {name:?}"),
                over: Some("accounting shows job 52 FAILED".into()),
            }
        );
        let not_in_acct: Answer<Vec<AcctRow>> = unanswered(SlurmCommand::Sacct);
        assert_eq!(
            find_lost(name, at, soon, settle, mark, &none, Some(&not_in_acct)),
            Lost::Unknown(None),
            "an sbatch may still be in flight"
        );
        assert!(matches!(
            find_lost(name, at, later, settle, mark, &none, Some(&not_in_acct)),
            Lost::NeverCreated(p) if p.contains("never created") && p.contains("33 s")
                && p.contains("lists job 40")
        ));
        assert_eq!(
            find_lost(name, at, later, settle, mark, &none, None),
            Lost::Unknown(None),
            "squeue alone forgets jobs after MinJobAge"
        );
        let down: Answer<Vec<JobRow>> = unanswered(SlurmCommand::Squeue);
        assert_eq!(
            find_lost(name, at, later, settle, mark, &down, Some(&not_in_acct)),
            Lost::Unknown(None)
        );
    }

    /// Steps of allocation 900 and of other jobs, from arbitrary numbers.
    fn arbitrary_steps(steps: &[(bool, u8)]) -> Vec<StepRow> {
        steps
            .iter()
            .flat_map(|(ours, s)| {
                let j = if *ours { JOB } else { 901 };
                parse_steps(&format!(
                    "{j}.{s}|root|0:10|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w{s}\n"
                ))
                .unwrap()
            })
            .collect()
    }

    quickcheck! {
        /// Issue 10, item 7: whatever the worker's record and whatever steps are listed, a job
        /// listing without the allocation (empty, or other jobs only) and accounting without a
        /// terminal row never prove a step over.
        fn prop_an_empty_listing_alone_never_proves_gone(
            recorded: Option<u8>,
            supervised: Option<u8>,
            others: Vec<u32>,
            steps: Vec<(bool, u8)>,
            acct_steps: Vec<u8>,
            ask_accounting: bool
        ) -> bool {
            let others: Vec<(u32, &str, &str)> = others
                .iter()
                .map(|o| (o % 100_000 + 1, "RUNNING", "x"))
                .filter(|(o, _, _)| *o != JOB)
                .take(8)
                .collect();
            let listing = Answer::Live(job_rows(&others));
            let step_answer = Answer::Live(arbitrary_steps(&steps));
            let mut obs = observe_pool(job(), &listing.job(job()), Some(&step_answer));
            if ask_accounting {
                let ids: Vec<String> = acct_steps.iter().map(|s| format!("{JOB}.{s}")).collect();
                let rows: Vec<(&str, &str, &str)> =
                    ids.iter().map(|id| (id.as_str(), "RUNNING", "p.w")).collect();
                add_accounting(&mut obs, job(), &acct_rows(&rows));
            }
            let w = worker(recorded.map(u32::from));
            let own = WorkerObservation {
                step_from_supervisor: supervised.map(u32::from),
                payload_exited: supervised.is_some(),
                ..Default::default()
            };
            let v = verdict(&w, "p.w", &obs, &own);
            v.terminal.is_none()
                && job_seen(job(), &listing.job(job()), obs.accounting.as_ref().map(|_| &[][..]))
                    == JobSeen::Unproven
        }

        /// A lost submission is never called never-created before its settle delay, nor when a
        /// listing did not answer.
        fn prop_never_created_needs_both_answers_and_the_delay(
            limit: Option<u8>,
            after_s: u16,
            squeue_answered: bool,
            sacct_answered: bool
        ) -> bool {
            let settle = settle_delay(limit.map(u32::from));
            let at = Micros::from_secs(10_000);
            let now = Micros::from_secs(10_000 + i64::from(after_s));
            let squeue: Answer<Vec<JobRow>> = if squeue_answered {
                Answer::Live(job_rows(&[(7, "PENDING", "later")]))
            } else {
                unanswered(SlurmCommand::Squeue)
            };
            let sacct: Option<Answer<Vec<AcctRow>>> =
                sacct_answered.then_some(unanswered(SlurmCommand::Sacct));
            let never = matches!(
                find_lost("n", at, now, settle, JobId::new(7), &squeue, sacct.as_ref()),
                Lost::NeverCreated(_)
            );
            never == (squeue_answered && sacct_answered && u64::from(after_s) >= settle.as_secs())
        }

        /// Whatever the listing and the watermark: "never created" only when the listing shows
        /// a job at or above the watermark, and then whenever it does (past the delay, both
        /// answered, the name absent).
        fn prop_never_created_needs_a_listed_job_at_the_watermark(
            listed: Vec<u16>,
            mark: Option<u16>
        ) -> bool {
            let rows: Vec<(u32, &str, &str)> = listed
                .iter()
                .map(|id| (u32::from(*id) + 1, "RUNNING", "other"))
                .take(16)
                .collect();
            let squeue = Answer::Live(job_rows(&rows));
            let sacct: Answer<Vec<AcctRow>> = unanswered(SlurmCommand::Sacct);
            let mark = mark.and_then(|m| JobId::new(u32::from(m) + 1));
            let lost = find_lost(
                "n",
                Micros::from_secs(0),
                Micros::from_secs(1000),
                settle_delay(None),
                mark,
                &squeue,
                Some(&sacct),
            );
            let covered = mark.is_some_and(|m| rows.iter().any(|(id, _, _)| *id >= m.get()));
            matches!(lost, Lost::NeverCreated(_)) == covered
                && (covered || matches!(lost, Lost::Unknown(Some(_))))
        }
    }

    /// Found by the simulation (SIM_REUSE_NAMES=1 SIM_SEED=95): a worker name used again once
    /// its worker was released; the earlier worker's cancelled step in accounting is not the
    /// new worker's, whose step is still pending.
    #[test]
    fn an_earlier_workers_step_of_the_same_name_is_not_this_ones() {
        let obs = PoolObservation {
            allocation_listed: listed(),
            steps: listing(&[]),
            accounting: Some(vec![acct_step(1, "CANCELLED", true)]),
            accounting_job: Some("RUNNING".into()),
            ..Default::default()
        };
        let own = WorkerObservation {
            others_steps: vec![1],
            ..Default::default()
        };
        let v = verdict(&worker(None), "p.w", &obs, &own);
        assert_eq!(v.terminal, None, "{v:?}");
        assert_eq!(v.observe_step, None, "{v:?}");
        let v = verdict_of(None, &obs);
        assert!(
            v.terminal.is_some(),
            "without the history the name decides: {v:?}"
        );
    }

    /// Found by the simulation (seed 298): sbatch's answer lost, the job running; a blackout
    /// answers squeue with nothing while accounting has lost the job. Two empty answers past
    /// the settle delay are not proof; only a listing that shows a job given out later is.
    #[test]
    fn two_empty_answers_do_not_prove_never_created_without_a_newer_job_listed() {
        let settle = settle_delay(Some(3));
        let at = Micros::from_secs(1000);
        let later = Micros::from_secs(2000);
        let name = "sim-w3-1a8c23db";
        let empty: Answer<Vec<JobRow>> = Answer::Live(Vec::new());
        let not_in_acct: Answer<Vec<AcctRow>> = unanswered(SlurmCommand::Sacct);
        let acct = Some(&not_in_acct);
        let unknown_why = |lost: Lost| match lost {
            Lost::Unknown(Some(why)) => why,
            other => panic!("not unknown with a reason: {other:?}"),
        };
        let why = unknown_why(find_lost(name, at, later, settle, None, &empty, acct));
        assert!(why.contains("proves nothing alone"), "{why}");
        let mark = JobId::new(120);
        let why = unknown_why(find_lost(name, at, later, settle, mark, &empty, acct));
        assert!(why.contains("from job 120 on"), "{why}");
        let older = Answer::Live(job_rows(&[(119, "RUNNING", "other")]));
        unknown_why(find_lost(name, at, later, settle, mark, &older, acct));
        let newer = Answer::Live(job_rows(&[(119, "RUNNING", "a"), (121, "PENDING", "b")]));
        assert!(matches!(
            find_lost(name, at, later, settle, mark, &newer, acct),
            Lost::NeverCreated(p) if p.contains("lists job 121") && p.contains("job 120")
        ));
        assert_eq!(
            find_lost(
                name,
                at,
                Micros::from_secs(1010),
                settle,
                mark,
                &newer,
                acct
            ),
            Lost::Unknown(None),
            "within the settle delay nothing is said"
        );
    }

    #[test]
    fn the_watermark_is_the_lowest_id_given_out_after_the_settle_point() {
        let settled = Micros::from_secs(100);
        let job = |n| JobId::new(n).unwrap();
        let recorded = [
            (Micros::from_secs(99), job(50)),
            (Micros::from_secs(100), job(70)),
            (Micros::from_secs(300), job(60)),
            (Micros::from_secs(400), job(u32::MAX)),
        ];
        assert_eq!(watermark(settled, recorded), JobId::new(60));
        assert_eq!(watermark(Micros::from_secs(500), recorded), None);
        assert_eq!(watermark(settled, []), None);
    }

    /// A pool observation from quickcheck's values: `over`, `listed`, steps listed (number,
    /// worker index), accounting rows (number, worker index, terminal), accounting's own row.
    fn arbitrary_pool(
        over: bool,
        listed: bool,
        steps: Option<Vec<(u8, u8)>>,
        accounting: Option<Vec<(u8, u8, bool)>>,
        accounting_job: bool,
    ) -> PoolObservation {
        PoolObservation {
            allocation_over: over.then(|| "squeue shows job 900 COMPLETED".into()),
            allocation_listed: listed.then(|| format!("job {JOB} is listed RUNNING")),
            steps: steps.map(|rows| {
                rows.iter()
                    .take(8)
                    .map(|(s, w)| (u32::from(*s % 8), format!("p.w{}", w % 4)))
                    .collect()
            }),
            accounting: accounting.map(|rows| {
                rows.iter()
                    .take(8)
                    .map(|(s, w, terminal)| AcctStep {
                        step: u32::from(*s % 8),
                        name: format!("p.w{}", w % 4),
                        state: if *terminal { "COMPLETED" } else { "RUNNING" }.into(),
                        terminal: *terminal,
                    })
                    .collect()
            }),
            accounting_job: accounting_job.then(|| "RUNNING".into()),
            listed_on: None,
            step_nodes: BTreeMap::new(),
        }
    }

    type ArbitraryWorker = (Option<u8>, Option<u8>, u8, Option<bool>, u8);

    /// Workers `w0`… from quickcheck's values: (recorded step, supervisor's step, srun seen
    /// as 0 exited / 1 running / else unknown, supervisor started, seconds before 1000 s).
    fn arbitrary_workers(workers: &[ArbitraryWorker]) -> Vec<Worker> {
        workers
            .iter()
            .take(4)
            .enumerate()
            .map(|(i, (recorded, _, _, _, ago))| {
                let mut w = worker(recorded.map(|s| u32::from(s % 8)));
                w.name = format!("w{i}");
                w.submitted_at = Micros::from_secs(1000 - i64::from(*ago));
                w
            })
            .collect()
    }

    /// What reconcile saw of each of `ws` (made by [`arbitrary_workers`] from `workers`).
    fn arbitrary_seen<'a>(ws: &'a [Worker], workers: &[ArbitraryWorker]) -> Vec<WorkerSeen<'a>> {
        ws.iter()
            .zip(workers)
            .enumerate()
            .map(|(i, (w, (_, supervised, srun, started, _)))| WorkerSeen {
                worker: w,
                step_name: format!("p.w{i}"),
                own: WorkerObservation {
                    step_from_supervisor: supervised.map(|s| u32::from(s % 8)),
                    supervisor_started: *started,
                    srun: match srun % 3 {
                        0 => SrunSeen::Exited("exited 1".into()),
                        1 => SrunSeen::Running,
                        _ => SrunSeen::NotKnown,
                    },
                    ..Default::default()
                },
            })
            .collect()
    }

    /// A `dispatch submit` worker of submission id `id` (1 CPU, 1 MB).
    fn job_worker(
        id: u128,
        name: &str,
        job_id: Option<JobId>,
        state: JobWorkerState,
        at: Micros,
    ) -> JobWorker {
        JobWorker {
            worker: name.into(),
            submission_id: Uuid::from_u128(id),
            job_id,
            state,
            cpus: 1,
            mem_mb: 1,
            submitted_at: at,
            assets: Vec::new(),
            named: None,
            failure: None,
            restarts: 0,
        }
    }

    quickcheck! {
        /// The pool judge never releases without proof: a worker is released only when the
        /// allocation is proven over, accounting shows a terminal step, or its allocation is
        /// listed beside a step listing; it is proven never to have run only with every
        /// proof `step_never_ran` names; and an allocation proven over releases every worker.
        fn prop_the_pool_judge_never_releases_without_proof(
            over: bool,
            listed: bool,
            steps: Option<Vec<(u8, u8)>>,
            accounting: Option<Vec<(u8, u8, bool)>>,
            accounting_job: bool,
            workers: Vec<ArbitraryWorker>
        ) -> bool {
            let obs = arbitrary_pool(over, listed, steps, accounting, accounting_job);
            let ws = arbitrary_workers(&workers);
            let seen = arbitrary_seen(&ws, &workers);
            let now = Micros::from_secs(1000);
            let judged = judge_pool(&pool_on(&["vm"]), &obs, &seen, now);
            let terminal_in_accounting = obs
                .accounting
                .as_ref()
                .is_some_and(|rows| rows.iter().any(|r| r.terminal));
            let absence_can_prove = obs.allocation_listed.is_some() && obs.steps.is_some();
            judged.verdicts.len() == seen.len()
                && judged.allocation_over == obs.allocation_over
                && judged.verdicts.iter().zip(&seen).all(|(v, s)| {
                    let released = v.terminal.is_none()
                        || obs.allocation_over.is_some()
                        || terminal_in_accounting
                        || absence_can_prove;
                    let never_ran = v.never_ran.is_none()
                        || (matches!(s.own.srun, SrunSeen::Exited(_))
                            && s.own.supervisor_started == Some(false)
                            && now.0 - s.worker.submitted_at.0
                                >= NEVER_RAN_SETTLE.as_micros() as i64
                            && absence_can_prove
                            && obs.accounting_job.is_some()
                            && obs.accounting.is_some());
                    let over = obs.allocation_over.is_none() || v.terminal.is_some();
                    released && never_ran && over && !(v.terminal.is_some() && v.never_ran.is_some())
                })
                && judged.wants_accounting()
                    == (obs.allocation_over.is_none()
                        && judged.verdicts.iter().any(|v| v.terminal.is_none() && !v.running))
        }

        /// The jobs judge never releases without proof: when no listing lists anything (each
        /// answered empty or failed) and accounting was not asked or failed, every decision is
        /// `Nothing` or `Unknown`, whatever the workers and the time.
        fn prop_the_jobs_judge_never_releases_on_empty_or_failed_answers(
            workers: Vec<(Option<u16>, bool, u16)>,
            by_id_failed: bool,
            mine_failed: bool,
            acct_asked: bool,
            now_s: u16
        ) -> bool {
            let mut state = State::default();
            for (i, (job, unknown, at)) in workers.iter().take(6).enumerate() {
                let w = job_worker(i as u128 + 1, &format!("w{i}"), job.map(|j| JobId::new(u32::from(j) + 1).unwrap()),
                    if *unknown { JobWorkerState::Unknown } else { JobWorkerState::Queued }, Micros::from_secs(i64::from(*at)));
                state.jobs.active.insert(w.submission_id, w);
            }
            let answer = |failed: bool| -> Answer<Vec<JobRow>> {
                if failed {
                    unanswered(SlurmCommand::Squeue)
                } else {
                    Answer::Live(Vec::new())
                }
            };
            let acct = acct_asked.then_some(unanswered(SlurmCommand::Sacct));
            let obs = JobsObservation {
                by_id: answer(by_id_failed),
                mine: answer(mine_failed),
                acct_by_id: acct.clone(),
                acct_by_name: None,
                alone: Vec::new(),
                details: Vec::new(),
            };
            let judged = judge_jobs(&state, &obs, Micros::from_secs(i64::from(now_s)));
            judged.len() == state.jobs.active.len()
                && judged
                    .iter()
                    .all(|(_, d)| matches!(d, JobDecision::Nothing | JobDecision::Unknown(_)))
        }
    }

    #[test]
    fn the_jobs_judge_takes_a_lone_answer_for_a_job_the_listing_left_unproven() {
        let mut state = State::default();
        let w = job_worker(1, "w", Some(job()), JobWorkerState::Unknown, Micros(0));
        state.jobs.active.insert(w.submission_id, w);
        let mut obs = JobsObservation {
            by_id: Answer::Live(job_rows(&[(901, "RUNNING", "x")])),
            mine: Answer::Live(Vec::new()),
            acct_by_id: None,
            acct_by_name: None,
            alone: Vec::new(),
            details: Vec::new(),
        };
        let now = Micros::from_secs(10);
        assert_eq!(
            judge_jobs(&state, &obs, now)[0].1,
            JobDecision::Unknown(None)
        );
        obs.alone
            .push((job(), Answer::Live(job_rows(&[(JOB, "COMPLETED", "w")]))));
        assert_eq!(
            judge_jobs(&state, &obs, now)[0].1,
            JobDecision::Over {
                job: job(),
                proof: format!("squeue shows job {JOB} COMPLETED"),
            }
        );
    }

    /// Only where a requeue passes, or at the end, is `scontrol show job` worth its call; a
    /// count recorded is never recorded again, nor a smaller one.
    #[test]
    fn a_requeue_is_asked_about_where_it_passes_and_recorded_once_per_larger_count() {
        let obs_of = |state: &str, reason: &str| {
            let mut rows = job_rows(&[(JOB, state, "w")]);
            rows[0].reason = reason.to_owned();
            JobsObservation {
                by_id: Answer::Live(rows),
                mine: Answer::Live(Vec::new()),
                acct_by_id: None,
                acct_by_name: None,
                alone: Vec::new(),
                details: Vec::new(),
            }
        };
        for (state, reason, asks) in [
            ("RUNNING", "None", false),
            ("PENDING", "Priority", false),
            ("PENDING", "Resources", false),
            ("PENDING", "BeginTime", true),
            ("PENDING", "job requeued in held state", true),
            ("COMPLETING", "None", true),
            ("REQUEUE_HOLD", "None", true),
            ("FAILED", "NonZeroExitCode", true),
        ] {
            assert_eq!(
                wants_restarts(&obs_of(state, reason), job()),
                asks,
                "{state} {reason}"
            );
        }
        let mut w = job_worker(1, "w", Some(job()), JobWorkerState::Queued, Micros(0));
        let mut obs = obs_of("PENDING", "BeginTime");
        let line = format!("JobId={JOB} JobState=PENDING Reason=BeginTime Restarts=2 BatchFlag=1");
        obs.details.push((
            job(),
            Answer::Live(crate::slurm::scontrol::parse_show_job(&line).unwrap()),
        ));
        let seen = requeued(&w, &obs).expect("a larger count");
        assert_eq!((seen.job_id, seen.restarts), (job(), 2));
        assert_eq!(
            seen.proof,
            format!("scontrol shows job {JOB} Restarts=2 JobState=PENDING")
        );
        w.restarts = 2;
        assert_eq!(requeued(&w, &obs), None, "recorded already");
        w.restarts = 3;
        assert_eq!(requeued(&w, &obs), None, "an older answer");
    }
}
