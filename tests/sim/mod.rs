//! `SimSlurm`: a deterministic in-memory Slurm controller behind the `Scheduler` trait, for the
//! seeded simulation (`tests/simulation.rs`).
//!
//! It is a model, not a script: jobs (allocations and batch jobs) go PENDING → RUNNING →
//! COMPLETING → a terminal state, steps live inside allocations with CPU and memory, accounting
//! rows appear after a lag, terminal jobs are forgotten after MinJobAge, names are kept, and a
//! virtual clock drives it all: it advances with the paused tokio clock the ops sleep on, and
//! with the driver's waits, and pins this thread's wall clock to itself
//! (`Micros::pin_this_threads_clock`), so the journal's times are the model's. Every answer is rendered as the text the real client prints and parsed by the
//! driver's own parsers. Faults are drawn from a seeded RNG while they are switched on:
//! timeouts after acceptance (the job or step is created, the call answers unknown), definite
//! refusals, unknown errors, lost accounting, empty lying answers (a blackout: every squeue
//! answers exit 0 with nothing), slow steps (pending for a while).
//!
//! Every random choice a call makes is drawn from an RNG keyed by the seed and the call's
//! content (kind, job ids) and how often that content was asked before, never from one stream:
//! dispatch iterates over maps keyed by random submission ids, so the order of its calls varies
//! between runs of one seed, and the answers must not.
//!
//! Everything dispatch creates is tagged with the submission id found in its command line
//! (`--submission-id`), which is how the invariants map Slurm's truth back to the journal.

#![allow(dead_code)]

pub mod continuation;
pub mod renewal;
pub mod sessions;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use dispatch::event::Micros;
use dispatch::ops::context::micros_to_local;
use dispatch::slurm::runner::ExitInfo;
use dispatch::slurm::sacct::parse_rows;
use dispatch::slurm::scontrol::parse_show_job;
use dispatch::slurm::squeue::{parse_jobs, parse_steps};
use dispatch::slurm::{
    AcctQuery, AcctRow, ActionError, AllocRequest, Allocated, Answer, BatchPayload, BatchRequest,
    CallCounts, CancelReport, CancelTarget, GoneProof, HeldAllocation, JobDetails, JobId, JobName,
    JobQuery, JobRow, JobSelect, LaunchedStep, Placement, Refusal, ScancelSaid, Scheduler, Signal,
    SlurmCommand, SlurmError, StepId, StepKind, StepRequest, StepRow, Submitted,
};
use uuid::Uuid;

pub const USER: &str = "simuser";
pub const NODE: &str = "simnode";
/// Seconds a terminal job stays listed (the real cluster's MinJobAge).
pub const MIN_JOB_AGE_S: i64 = 300;
/// The model's clock at the start of every seed: a whole second, the same for every run.
pub const EPOCH_US: i64 = 1_900_000_000 * 1_000_000;
/// A pid no process has (above Linux's pid_max): the srun client of a step that was refused,
/// which has exited.
pub const DEAD_PID: u32 = 1 << 30;

/// The srun client of a step that was created stays alive as long as the step can still run
/// (a real srun waits for its pending step): the model gives it this test process's pid,
/// which is alive and not dispatch's child, so dispatch never reads it as exited.
fn live_srun_pid() -> u32 {
    std::process::id()
}

/// splitmix64: small, seedable, good enough for choosing faults.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len() as u64) as usize])
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    /// Ending: still listed (and live to dispatch) until `until`, then `then`.
    Completing {
        until: i64,
        then: &'static str,
    },
    Done {
        state: &'static str,
        at: i64,
    },
}

impl Phase {
    pub fn live(&self) -> bool {
        !matches!(self, Phase::Done { .. })
    }
    fn text(&self) -> &'static str {
        match self {
            Phase::Pending => "PENDING",
            Phase::Running => "RUNNING",
            Phase::Completing { .. } => "COMPLETING",
            Phase::Done { state, .. } => state,
        }
    }
}

#[derive(Clone, Debug)]
pub struct SimStep {
    pub no: u32,
    /// When srun created it.
    pub created: i64,
    pub name: String,
    pub cpus: u32,
    pub mem_mb: u64,
    pub submission: Option<Uuid>,
    /// Pending until it fits and this time has come (a slow step).
    pub not_before: i64,
    pub started: Option<i64>,
    /// Runs this long once started (its payload ends by itself), `None`: until stopped.
    pub runs_for: Option<i64>,
    /// Ignores SIGTERM (a payload that needs the cancel).
    pub stubborn: bool,
    pub ended: Option<(i64, &'static str)>,
    /// The node it runs on, and the GPUs it holds there.
    pub node: String,
    pub gpus: u32,
    /// Ended by its node's failure but still listed, as Slurm 22.05 lists such a step until
    /// the node returns.
    pub stranded: bool,
}

/// One node of a job: what the job holds there, and whether it failed and left the job.
#[derive(Clone, Debug)]
pub struct SimNode {
    pub name: String,
    pub cpus: u32,
    pub mem_mb: u64,
    pub gpus: u32,
    pub lost: bool,
}

impl SimStep {
    pub fn live(&self) -> bool {
        self.ended.is_none()
    }
}

#[derive(Clone, Debug)]
pub struct SimJob {
    pub id: u32,
    pub name: String,
    pub batch: bool,
    pub submission: Option<Uuid>,
    pub cpus: u32,
    pub mem_mb: u64,
    pub limit_s: i64,
    pub submitted: i64,
    pub start: Option<i64>,
    /// Becomes RUNNING at this time (batch jobs queue for a while).
    pub runs_at: i64,
    /// A batch job's payload ends by itself after this long; `None`: runs to its limit.
    pub runs_for: Option<i64>,
    pub stubborn: bool,
    pub phase: Phase,
    pub steps: BTreeMap<u32, SimStep>,
    pub next_step: u32,
    /// Accounting shows the job this long after each change.
    pub acct_lag: i64,
    /// Accounting has lost this job while faults are on.
    pub acct_lost: bool,
    /// Where it was placed (what a session's target rule reads).
    pub partition: String,
    pub account: String,
    pub qos: String,
    /// A session job (sbatch of a session script, or salloc): made while another live job of
    /// the same name and placement existed, and by which command.
    pub beside: Option<u32>,
    pub made_by: &'static str,
    /// Submitted with `--hold`: pending (reason `JobHeldUser`) until `scontrol release`.
    pub held: bool,
    /// Submitted with `--hold` (whether or not released since).
    pub made_held: bool,
    /// `--comment` or `scontrol update … Comment=`; empty: none.
    pub comment: String,
    /// Its nodes (one for every job but the multi-node allocations), and whether a node's
    /// failure ends only the steps on it (`--no-kill`) or the whole job.
    pub nodes: Vec<SimNode>,
    pub no_kill: bool,
    /// `--dependency=afterany:J` (a renewal's salloc): pending until job J is over.
    pub after: Option<u32>,
    /// Preempted: when, and when it is killed (the grace's end); `RUNNING` until then.
    pub preempt: Option<(i64, i64)>,
    /// A pool's allocation that started while another of the same pool ran (the other's id).
    pub started_beside: Option<u32>,
}

/// `scontrol --details`'s per-node groups of a running job: one per node it still holds.
fn groups(j: &SimJob) -> String {
    j.live_nodes()
        .map(|n| {
            let gres = match n.gpus {
                0 => String::new(),
                g => format!("gpu:sim:{g}(IDX:0-{})", g - 1),
            };
            format!(
                " Nodes={} CPU_IDs=0-{} Mem={} GRES={gres}",
                n.name,
                n.cpus.max(1) - 1,
                n.mem_mb
            )
        })
        .collect()
}

/// A job that salloc queued held: pending until released, never started yet.
fn hold(j: &mut SimJob) {
    j.held = true;
    j.made_held = true;
    j.phase = Phase::Pending;
    j.start = None;
}

impl SimJob {
    /// An allocation granted at `now` (salloc's, or one the user made), running until its
    /// limit or a cancel, on the default placement. `size`: CPUs, memory (MB), limit (s).
    fn allocation(id: u32, name: String, size: (u32, u64, i64), now: i64, lag: i64) -> SimJob {
        let (cpus, mem_mb, limit_s) = size;
        SimJob {
            id,
            name,
            batch: false,
            submission: None,
            cpus,
            mem_mb,
            limit_s,
            submitted: now,
            start: Some(now),
            runs_at: now,
            runs_for: None,
            stubborn: false,
            phase: Phase::Running,
            steps: BTreeMap::new(),
            next_step: 0,
            acct_lag: lag,
            acct_lost: false,
            partition: "debug".into(),
            account: "acct".into(),
            qos: "normal".into(),
            beside: None,
            made_by: "the user",
            held: false,
            made_held: false,
            comment: String::new(),
            nodes: vec![SimNode {
                name: NODE.to_owned(),
                cpus,
                mem_mb,
                gpus: 0,
                lost: false,
            }],
            no_kill: false,
            after: None,
            preempt: None,
            started_beside: None,
        }
    }

    /// The nodes it still holds.
    pub fn live_nodes(&self) -> impl Iterator<Item = &SimNode> {
        self.nodes.iter().filter(|n| !n.lost)
    }

    /// `sim1,sim3`: the nodes it still holds, as a node list.
    fn node_list(&self) -> String {
        self.live_nodes()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// CPUs, MB and GPUs the started, live steps use on `node`.
    fn used_on(&self, node: &str) -> (u32, u64, u32) {
        self.steps
            .values()
            .filter(|s| s.live() && s.started.is_some() && s.node == node)
            .fold((0, 0, 0), |(c, m, g), s| {
                (c + s.cpus, m + s.mem_mb, g + s.gpus)
            })
    }

    pub fn live(&self) -> bool {
        self.phase.live()
    }
    fn ended_at(&self) -> Option<i64> {
        match self.phase {
            Phase::Done { at, .. } => Some(at),
            _ => None,
        }
    }
    fn forgotten(&self, now: i64) -> bool {
        self.ended_at()
            .is_some_and(|at| now > at + MIN_JOB_AGE_S * 1_000_000)
    }
    fn used(&self) -> (u32, u64) {
        self.steps
            .values()
            .filter(|s| s.live() && s.started.is_some())
            .fold((0, 0), |(c, m), s| (c + s.cpus, m + s.mem_mb))
    }
    /// What ends by itself at `now` in running job `j` (started at `start`): the job at its
    /// preemption's kill or its limit, a batch job's payload, its steps' payloads. Whether the
    /// job ended.
    fn ends_by_itself(&mut self, now: i64, start: i64) -> bool {
        if self.preempt.is_some_and(|(_, kill)| now >= kill) {
            self.end(now, "PREEMPTED", 1_000_000);
            return true;
        }
        if now >= start + self.limit_s * 1_000_000 {
            self.end(now, "TIMEOUT", 1_000_000);
            return true;
        }
        if let Some(d) = self.runs_for.filter(|_| self.batch) {
            if now >= start + d {
                self.end(now, "COMPLETED", 500_000);
                return true;
            }
        }
        for s in self.steps.values_mut().filter(|s| s.live()) {
            if let (Some(st), Some(d)) = (s.started, s.runs_for) {
                if now >= st + d {
                    s.ended = Some((st + d, "COMPLETED"));
                }
            }
        }
        false
    }

    /// End the job: every step with it.
    fn end(&mut self, now: i64, state: &'static str, completing_us: i64) {
        if !self.live() || matches!(self.phase, Phase::Completing { .. }) {
            return;
        }
        for s in self.steps.values_mut().filter(|s| s.live()) {
            s.ended = Some((now, "CANCELLED"));
        }
        self.phase = if completing_us > 0 && self.start.is_some() {
            Phase::Completing {
                until: now + completing_us,
                then: state,
            }
        } else {
            Phase::Done { state, at: now }
        };
    }
}

/// Fault rates, in percent per call, while faults are on.
#[derive(Clone, Debug)]
pub struct Faults {
    pub on: bool,
    pub query_unknown: u64,
    pub action_unknown_after: u64,
    pub action_unknown_before: u64,
    pub refusal: u64,
    pub slow_step: u64,
    pub step_refused: u64,
    pub acct_lost: u64,
    /// Every squeue answers exit 0 with nothing, until this time.
    pub blackout_until: i64,
}

#[derive(Clone, Debug, Default)]
pub struct FaultCounts {
    pub unknown_answers: u64,
    pub accepted_then_unknown: u64,
    pub unknown_not_accepted: u64,
    pub refusals: u64,
    pub slow_steps: u64,
    pub steps_refused: u64,
    pub lost_accounting: u64,
    pub empty_lies: u64,
    pub calls: u64,
    /// Nodes that failed and left a `--no-kill` job, and steps started on a node other than
    /// the job's first (placement at work).
    pub nodes_lost: u64,
    pub steps_off_first_node: u64,
}

pub struct World {
    seed: u64,
    /// The model's time, µs (this thread's wall clock is pinned to it).
    pub clock: i64,
    /// The paused tokio clock at the last call of the current command.
    mark: Option<tokio::time::Instant>,
    /// How often each call content was seen (keys the per-call RNG).
    asked: BTreeMap<String, u64>,
    /// Nothing ends by itself (limits, payloads): for the liveness check, where only what
    /// dispatch does may change the world.
    pub frozen: bool,
    pub rng: Rng,
    pub faults: Faults,
    pub counts: FaultCounts,
    pub jobs: BTreeMap<u32, SimJob>,
    next_job: u32,
    /// The dispatch command running now (set by the driver), for the jobs it makes.
    pub command: &'static str,
    /// Job names whose last by-name listing was a blackout's empty lie (for messages).
    pub lied_about: std::collections::BTreeSet<String>,
    /// Job names whose last by-name listing failed (for messages).
    pub probe_failed: std::collections::BTreeSet<String>,
    /// Every job a session record has named as replaced by a renew, ever: a record restored
    /// from an older backup forgets it, but the renew that made its replacement did not.
    pub replaced_ever: std::collections::BTreeSet<u32>,
    /// Workers that asked to be continued: the journal each leaves when it is over.
    pub planned: BTreeMap<Uuid, continuation::Planned>,
}

pub struct SimSlurm {
    pub w: Mutex<World>,
}

fn now_us() -> i64 {
    Micros::now().0
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x100_0000_01b3);
    }
}

fn slurm_time(us: i64) -> String {
    micros_to_local(Micros(us))
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

fn hms(secs: i64) -> String {
    let s = secs.max(0);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

fn squeue_failed(stderr: &str) -> SlurmError {
    SlurmError::Failed {
        command: SlurmCommand::Squeue,
        status: ExitInfo::Code(1),
        stdout: String::new(),
        stderr: stderr.to_owned(),
    }
}

fn unknown_action(command: SlurmCommand) -> ActionError {
    ActionError::Unknown {
        error: SlurmError::Timeout {
            command,
            timeout: Duration::from_secs(30),
            stdout: String::new(),
            stderr: String::new(),
        },
        job_hint: None,
    }
}

/// The submission id a dispatch command line carries (`--submission-id ID`).
pub fn submission_in(args: &[std::ffi::OsString]) -> Option<Uuid> {
    args.windows(2)
        .find(|w| w[0] == "--submission-id")
        .and_then(|w| w[1].to_str())
        .and_then(|s| Uuid::parse_str(s).ok())
}

impl World {
    pub fn new(seed: u64) -> World {
        Micros::pin_this_threads_clock(Some(Micros(EPOCH_US)));
        World {
            seed,
            clock: EPOCH_US,
            mark: None,
            asked: BTreeMap::new(),
            frozen: false,
            rng: Rng::new(seed),
            faults: Faults {
                on: true,
                query_unknown: 8,
                action_unknown_after: 6,
                action_unknown_before: 4,
                refusal: 5,
                slow_step: 10,
                step_refused: 4,
                acct_lost: 15,
                blackout_until: 0,
            },
            counts: FaultCounts::default(),
            jobs: BTreeMap::new(),
            next_job: 100,
            command: "",
            lied_about: Default::default(),
            replaced_ever: Default::default(),
            probe_failed: Default::default(),
            planned: BTreeMap::new(),
        }
    }

    fn fault(&mut self, pct: u64) -> bool {
        self.faults.on && self.rng.chance(pct)
    }

    /// Advance the model's clock (and this thread's wall clock) by `by`.
    pub fn advance(&mut self, by: Duration) {
        self.clock += by.as_micros() as i64;
        Micros::pin_this_threads_clock(Some(Micros(self.clock)));
        self.tick();
    }

    /// The id the next job will get.
    pub fn next_job_id(&self) -> u32 {
        self.next_job
    }

    /// A new command (a new process): its runtime's clock starts afresh.
    pub fn new_command(&mut self) {
        self.mark = None;
    }

    fn blackout(&self, now: i64) -> bool {
        self.faults.on && now < self.faults.blackout_until
    }

    /// Let time act: steps start when they fit, payloads end, limits expire, COMPLETING ends.
    pub fn tick(&mut self) {
        let now = now_us();
        let over: std::collections::BTreeSet<u32> = self
            .jobs
            .values()
            .filter(|j| !j.live())
            .map(|j| j.id)
            .collect();
        let mut started = Vec::new();
        for j in self.jobs.values_mut() {
            if let Phase::Completing { until, then } = j.phase {
                if now >= until {
                    j.phase = Phase::Done {
                        state: then,
                        at: until,
                    };
                }
                continue;
            }
            if !j.live() {
                continue;
            }
            let dependency_over = j.after.is_none_or(|a| over.contains(&a));
            if j.phase == Phase::Pending && !j.held && now >= j.runs_at && dependency_over {
                j.phase = Phase::Running;
                j.start = Some(now);
                started.push(j.id);
            }
            let Some(start) = j.start else { continue };
            // Frozen, nothing ends by itself; a step created still starts when it fits.
            if !self.frozen && j.ends_by_itself(now, start) {
                continue;
            }
            // Pending steps start, oldest first, when they fit on their node.
            let mut used: BTreeMap<String, (u32, u64, u32)> = j
                .nodes
                .iter()
                .map(|n| (n.name.clone(), j.used_on(&n.name)))
                .collect();
            let nodes = j.nodes.clone();
            for s in j.steps.values_mut() {
                let Some(n) = nodes.iter().find(|n| n.name == s.node && !n.lost) else {
                    continue;
                };
                let u = used.entry(n.name.clone()).or_default();
                if s.live()
                    && s.started.is_none()
                    && now >= s.not_before
                    && u.0 + s.cpus <= n.cpus
                    && u.1 + s.mem_mb <= n.mem_mb
                    && u.2 + s.gpus <= n.gpus
                {
                    *u = (u.0 + s.cpus, u.1 + s.mem_mb, u.2 + s.gpus);
                    s.started = Some(now);
                }
            }
        }
        for id in started {
            self.note_started_beside(id);
        }
        self.write_due_journals();
    }

    /// A pool's allocation `id` started now: whether another allocation of its pool runs.
    fn note_started_beside(&mut self, id: u32) {
        let Some(pool) = self.jobs.get(&id).and_then(|j| renewal::pool_of(&j.name)) else {
            return;
        };
        let beside = self
            .jobs
            .values()
            .find(|o| {
                o.id != id
                    && o.live()
                    && o.start.is_some()
                    && renewal::pool_of(&o.name) == Some(pool)
            })
            .map(|o| o.id);
        if let Some(j) = self.jobs.get_mut(&id) {
            j.started_beside = beside;
        }
    }

    /// Running job `id` is preempted with a grace of `grace_s`: it stays `RUNNING` (with its
    /// `PreemptTime`, its end pulled forward) until the grace is over, then ends `PREEMPTED`.
    pub fn preempt(&mut self, id: u32, grace_s: i64) {
        let now = now_us();
        if let Some(j) = self
            .jobs
            .get_mut(&id)
            .filter(|j| j.phase == Phase::Running && j.preempt.is_none())
        {
            let limit_end = j.start.unwrap_or(now) + j.limit_s * 1_000_000;
            j.preempt = Some((now, (now + grace_s * 1_000_000).min(limit_end)));
        }
    }

    /// When running job `j` ends: its limit, or the end of its preemption's grace.
    fn end_of(j: &SimJob) -> Option<i64> {
        let limit = j.start? + j.limit_s * 1_000_000;
        Some(j.preempt.map_or(limit, |(_, kill)| kill.min(limit)))
    }

    /// What the model knows of the end of submission `id`'s job or step; `None` while it has
    /// none.
    pub fn truth(&self, id: Uuid) -> Option<continuation::Truth> {
        // (created, started, its end, its allocation's end word, its node lost)
        type Seen = (
            i64,
            bool,
            Option<(i64, &'static str)>,
            Option<&'static str>,
            bool,
        );
        let mut seen: Vec<Seen> = Vec::new();
        for j in self.jobs.values() {
            let job_end = match j.phase {
                Phase::Done { state, at } => Some((at, state)),
                _ => None,
            };
            if j.batch && j.submission == Some(id) {
                seen.push((j.submitted, j.start.is_some(), job_end, None, false));
            }
            for s in j.steps.values().filter(|s| s.submission == Some(id)) {
                let lost = j.nodes.iter().any(|n| n.lost && n.name == s.node);
                let alloc = job_end.map(|(_, w)| w);
                seen.push((s.created, s.started.is_some(), s.ended, alloc, lost));
            }
        }
        let first = seen.first()?;
        let mut t = continuation::Truth {
            created: first.0,
            started: false,
            ended_at: None,
            word: "",
            allocation_word: None,
            node_lost: false,
        };
        let mut all_over = true;
        for (created, started, end, alloc, lost) in seen {
            t.created = t.created.min(created);
            t.started |= started;
            match end {
                Some((at, word)) => {
                    t.ended_at = Some(t.ended_at.map_or(at, |x: i64| x.max(at)));
                    t.word = word;
                }
                None => all_over = false,
            }
            t.allocation_word = t.allocation_word.or(alloc);
            t.node_lost |= lost;
        }
        if !all_over {
            t.ended_at = None;
        }
        Some(t)
    }

    /// A worker that asked is over in the model: the journal its supervisor left is written,
    /// before anything can prove its end to dispatch (if it ever ran).
    pub fn write_due_journals(&mut self) {
        let due: Vec<Uuid> = self
            .planned
            .iter()
            .filter(|(_, p)| !p.written)
            .map(|(id, _)| *id)
            .filter(|id| self.truth(*id).is_some_and(|t| t.ended_at.is_some()))
            .collect();
        for id in due {
            let started = self.truth(id).is_some_and(|t| t.started);
            let p = self.planned.get_mut(&id).expect("planned");
            p.written = true;
            if started {
                p.fate.write(&p.evidence, Micros(self.clock));
            }
        }
    }

    /// A call of content `key`: the clock catches up with the time the command slept, and
    /// the call's random choices come from an RNG of its own.
    fn call(&mut self, key: String) -> i64 {
        let t = tokio::time::Instant::now();
        let slept = self
            .mark
            .map_or(Duration::ZERO, |m| t.saturating_duration_since(m));
        self.mark = Some(t);
        self.counts.calls += 1;
        self.advance(slept);
        let n = self.asked.entry(key.clone()).or_default();
        *n += 1;
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        fnv(&mut h, &self.seed.to_le_bytes());
        fnv(&mut h, key.as_bytes());
        fnv(&mut h, &n.to_le_bytes());
        self.rng = Rng::new(h);
        self.clock
    }

    /// The key of a name: the model job that has it, else the name without its random part.
    fn name_key(&self, name: &str) -> String {
        match self.jobs.values().find(|j| j.name == name) {
            Some(j) => j.id.to_string(),
            None => "unknown-name".to_owned(),
        }
    }

    /// An allocation made outside dispatch (the user's salloc), already running.
    pub fn allocation(&mut self, cpus: u32, mem_mb: u64, limit_s: i64) -> JobId {
        let now = now_us();
        let id = self.next_job;
        self.next_job += 1;
        let lag = self.rng.range(0, 20) as i64 * 1_000_000;
        let job = SimJob::allocation(id, format!("alloc{id}"), (cpus, mem_mb, limit_s), now, lag);
        self.jobs.insert(id, job);
        JobId::new(id).unwrap()
    }

    /// An allocation over `nodes` nodes (`sim1`…), each with `cpus`, `mem_mb` and `gpus`, made
    /// with `--no-kill` or not.
    pub fn allocation_on(
        &mut self,
        nodes: u32,
        each: (u32, u64, u32),
        limit_s: i64,
        no_kill: bool,
    ) -> JobId {
        let (cpus, mem_mb, gpus) = each;
        let id = self.allocation(cpus * nodes, mem_mb * u64::from(nodes), limit_s);
        let j = self.jobs.get_mut(&id.get()).expect("just made");
        j.nodes = (1..=nodes)
            .map(|k| SimNode {
                name: format!("sim{k}"),
                cpus,
                mem_mb,
                gpus,
                lost: false,
            })
            .collect();
        j.no_kill = no_kill;
        id
    }

    /// A node of running job `id` fails. With `--no-kill` and another node left, the node
    /// leaves the job and its steps end (some still listed, as 22.05 lists them); otherwise the
    /// whole job ends.
    pub fn node_fails(&mut self, id: u32) {
        let now = now_us();
        let stranded = self.rng.chance(50);
        let Some(j) = self.jobs.get_mut(&id).filter(|j| j.phase == Phase::Running) else {
            return;
        };
        let live: Vec<String> = j.live_nodes().map(|n| n.name.clone()).collect();
        let Some(failed) = live.last().cloned() else {
            return;
        };
        if !j.no_kill || live.len() < 2 {
            j.end(now, "NODE_FAIL", 2_000_000);
            return;
        }
        for n in j.nodes.iter_mut().filter(|n| n.name == failed) {
            n.lost = true;
        }
        self.counts.nodes_lost += 1;
        for s in j
            .steps
            .values_mut()
            .filter(|s| s.live() && s.node == failed)
        {
            s.ended = Some((now, "NODE_FAIL"));
            s.stranded = stranded && s.started.is_some();
        }
    }

    /// The user (or Slurm) ends a job from outside: scancel, node failure.
    pub fn end_from_outside(&mut self, id: u32, state: &'static str) {
        let now = now_us();
        if let Some(j) = self.jobs.get_mut(&id) {
            j.end(now, state, 2_000_000);
        }
    }

    /// A running step ends by itself (its payload exits).
    pub fn step_exits(&mut self, job: u32, no: u32) {
        let now = now_us();
        if let Some(s) = self.jobs.get_mut(&job).and_then(|j| j.steps.get_mut(&no)) {
            if s.live() && s.started.is_some() {
                s.ended = Some((now, "COMPLETED"));
            }
        }
    }

    fn job_row(&self, j: &SimJob, now: i64) -> String {
        let start = j.start.map_or("N/A".to_owned(), slurm_time);
        let left = World::end_of(j).map_or(j.limit_s, |end| (end - now) / 1_000_000);
        let node = if j.start.is_some() {
            j.node_list()
        } else {
            String::new()
        };
        format!(
            "{id}|{id}|{state}|{part}|{acct}|{qos}|{USER}|{count}|{cpus}|{node}|{left}|{limit}|{start}|N/A|{reason}|{name}\n",
            count = j.live_nodes().count(),
            id = j.id,
            part = j.partition,
            acct = j.account,
            qos = j.qos,
            state = j.phase.text(),
            reason = match (&j.phase, j.held, j.after) {
                (Phase::Pending, true, _) => "JobHeldUser",
                (Phase::Pending, false, Some(a)) if self.jobs.get(&a).is_some_and(|x| x.live()) => {
                    "Dependency"
                }
                _ => "None",
            },
            cpus = j.cpus,
            left = hms(left),
            limit = hms(j.limit_s),
            name = j.name,
        )
    }

    fn list_jobs(&mut self, q: &JobQuery) -> Answer<Vec<JobRow>> {
        let key = match &q.select {
            JobSelect::Ids(ids) => format!("squeue {ids:?} {}", q.include_finished),
            JobSelect::MineNamed(names) => format!(
                "squeue name {}",
                names
                    .iter()
                    .map(|n| self.name_key(n.as_str()))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            JobSelect::Mine => format!("squeue mine {}", q.include_finished),
        };
        let now = self.call(key);
        let named: Vec<String> = match &q.select {
            JobSelect::MineNamed(names) => names.iter().map(|n| n.as_str().to_owned()).collect(),
            _ => Vec::new(),
        };
        for n in &named {
            self.lied_about.remove(n);
            self.probe_failed.remove(n);
        }
        if self.fault(self.faults.query_unknown) {
            self.counts.unknown_answers += 1;
            self.probe_failed.extend(named);
            return Answer::Unknown(squeue_failed(
                "slurm_load_jobs error: Socket timed out on send/recv operation",
            ));
        }
        if self.blackout(now) {
            self.counts.empty_lies += 1;
            self.lied_about.extend(named);
            return Answer::Live(Vec::new());
        }
        let visible = |j: &&SimJob| !j.forgotten(now) && (q.include_finished || j.live());
        let mut text = String::new();
        match &q.select {
            JobSelect::Ids(ids) => {
                if let [one] = ids.as_slice() {
                    let known = self.jobs.get(&one.get()).filter(|j| !j.forgotten(now));
                    if known.is_none() {
                        return Answer::Gone(GoneProof::InvalidJobId {
                            command: SlurmCommand::Squeue,
                            job: *one,
                        });
                    }
                }
                for id in ids {
                    if let Some(j) = self.jobs.get(&id.get()).filter(visible) {
                        text.push_str(&self.job_row(j, now));
                    }
                }
            }
            JobSelect::MineNamed(names) => {
                for j in self.jobs.values().filter(visible) {
                    if names.iter().any(|n| j.name == n.as_str()) {
                        text.push_str(&self.job_row(j, now));
                    }
                }
            }
            JobSelect::Mine => {
                for j in self.jobs.values().filter(visible) {
                    text.push_str(&self.job_row(j, now));
                }
            }
        }
        Answer::Live(parse_jobs(&text).expect("the model prints rows the parser reads"))
    }

    fn list_steps(&mut self, job: JobId) -> Answer<Vec<StepRow>> {
        let now = self.call(format!("steps {job}"));
        if self.fault(self.faults.query_unknown) {
            self.counts.unknown_answers += 1;
            return Answer::Unknown(squeue_failed(
                "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
            ));
        }
        if self.blackout(now) {
            self.counts.empty_lies += 1;
            return Answer::Live(Vec::new());
        }
        let Some(j) = self.jobs.get(&job.get()).filter(|j| !j.forgotten(now)) else {
            return Answer::Gone(GoneProof::InvalidJobId {
                command: SlurmCommand::Squeue,
                job,
            });
        };
        let mut text = String::new();
        for s in j.steps.values().filter(|s| s.live() || s.stranded) {
            if let Some(st) = s.started {
                let _ = writeln!(
                    text,
                    "{}.{}|{USER}|{}|UNLIMITED|{}|{}|1|{}",
                    j.id,
                    s.no,
                    hms((now - st) / 1_000_000),
                    slurm_time(st),
                    s.node,
                    s.name
                );
            }
        }
        Answer::Live(parse_steps(&text).expect("the model prints step rows the parser reads"))
    }

    fn show_job(&mut self, job: JobId) -> Answer<Vec<JobDetails>> {
        let now = self.call(format!("show {job}"));
        if self.fault(self.faults.query_unknown) {
            self.counts.unknown_answers += 1;
            return Answer::Unknown(SlurmError::Failed {
                command: SlurmCommand::Scontrol,
                status: ExitInfo::Code(1),
                stdout: String::new(),
                stderr: "slurm_load_jobs error: Socket timed out on send/recv operation\n".into(),
            });
        }
        let Some(j) = self.jobs.get(&job.get()).filter(|j| !j.forgotten(now)) else {
            return Answer::Gone(GoneProof::InvalidJobId {
                command: SlurmCommand::Scontrol,
                job,
            });
        };
        let start = j.start.map_or("Unknown".to_owned(), slurm_time);
        let end = World::end_of(j).map_or("Unknown".to_owned(), slurm_time);
        let preempted = j.preempt.map_or(String::new(), |(at, _)| {
            format!(" PreemptTime={}", slurm_time(at))
        });
        let line =
            format!(
            "JobId={id} JobName={name} UserId={USER}(1000) GroupId={USER}(1000) Account={acct} \
             QOS={qos} JobState={state} Reason=None ExitCode=0:0 RunTime=00:00:01 \
             TimeLimit={limit} SubmitTime={submit} StartTime={start} EndTime={end}{preempted} \
             Partition={part} NodeList={list} BatchHost={NODE} NumNodes={count} NumCPUs={cpus} \
             TRES=cpu={cpus},mem={mem}M,node={count} BatchFlag={batch}{groups}{comment}\n",
            list = j.node_list(),
            count = j.live_nodes().count(),
            groups = if j.start.is_some() { groups(j) } else { String::new() },
            id = j.id,
            name = j.name,
            state = j.phase.text(),
            limit = hms(j.limit_s),
            submit = slurm_time(j.submitted),
            cpus = j.cpus,
            mem = j.mem_mb,
            batch = u8::from(j.batch),
            acct = j.account,
            qos = j.qos,
            part = j.partition,
            comment = if j.comment.is_empty() {
                String::new()
            } else {
                format!(" Comment={}", j.comment)
            },
        );
        Answer::Live(parse_show_job(&line).expect("the model prints a record the parser reads"))
    }

    fn accounting(&mut self, q: &AcctQuery) -> Answer<Vec<AcctRow>> {
        let mut names: Vec<String> = q.names.iter().map(|n| self.name_key(n.as_str())).collect();
        names.sort();
        let now = self.call(format!("sacct {:?} {names:?}", q.jobs));
        let none = Answer::Unknown(SlurmError::NotInAccounting {
            command: SlurmCommand::Sacct,
        });
        if self.fault(self.faults.query_unknown) {
            self.counts.unknown_answers += 1;
            return Answer::Unknown(SlurmError::Failed {
                command: SlurmCommand::Sacct,
                status: ExitInfo::Code(1),
                stdout: String::new(),
                stderr: "sacct: error: Problem talking to the database: Connection refused\n"
                    .into(),
            });
        }
        // A job accounting lost stays lost while faults are on, a blackout included: then
        // squeue lies empty and sacct lacks the job, both at once (the case that once made
        // reconcile prove a live job "never created": seed 298).
        let faults_on = self.faults.on;
        let mut text = String::new();
        for j in self.jobs.values() {
            let wanted = if q.jobs.is_empty() {
                q.names.iter().any(|n| n.as_str() == j.name)
            } else {
                q.jobs.iter().any(|id| id.get() == j.id)
            };
            // Accounting shows a job (and its state) as it was `acct_lag` ago.
            if !wanted || (j.acct_lost && faults_on) || now < j.submitted + j.acct_lag {
                continue;
            }
            let seen_at = now - j.acct_lag;
            let state = match &j.phase {
                Phase::Done { state, at } if *at <= seen_at => *state,
                Phase::Completing { .. } | Phase::Done { .. } => "RUNNING",
                Phase::Pending => "PENDING",
                Phase::Running => {
                    if j.start.is_some_and(|s| s <= seen_at) {
                        "RUNNING"
                    } else {
                        "PENDING"
                    }
                }
            };
            let _ = writeln!(
                text,
                "{id}|{id}|{state}|0:0|0:0|{submit}|Unknown|Unknown||||{cpus}|{mem}M|{part}|{acct}|{qos}|{USER}|{name}",
                id = j.id,
                part = j.partition,
                acct = j.account,
                qos = j.qos,
                submit = slurm_time(j.submitted),
                cpus = j.cpus,
                mem = j.mem_mb,
                name = j.name,
            );
            for s in j.steps.values() {
                let Some(st) = s.started.filter(|st| *st <= seen_at) else {
                    continue;
                };
                let state = match s.ended {
                    Some((at, state)) if at <= seen_at => state,
                    _ => "RUNNING",
                };
                let _ = writeln!(
                    text,
                    "{id}.{no}|{id}.{no}|{state}|0:0||{t}|{t}|Unknown|||{NODE}|{cpus}|{mem}M|||||{name}",
                    id = j.id,
                    no = s.no,
                    t = slurm_time(st),
                    cpus = s.cpus,
                    mem = s.mem_mb,
                    name = s.name,
                );
            }
        }
        if text.is_empty() {
            return none;
        }
        Answer::Live(parse_rows(&text).expect("the model prints sacct rows the parser reads"))
    }

    fn refusal(&mut self, command: SlurmCommand) -> ActionError {
        self.counts.refusals += 1;
        let (program, failed) = match command {
            SlurmCommand::Salloc => ("salloc", "Job submit/allocate failed"),
            _ => ("sbatch", "Batch job submission failed"),
        };
        ActionError::Refused(Refusal::Said {
            command,
            phrase: "Invalid account or account/partition combination specified",
            status: ExitInfo::Code(1),
            stderr: format!(
                "{program}: error: {failed}: Invalid account or account/partition combination specified\n"
            ),
        })
    }

    /// The faults of a submitting call (`sbatch`, `salloc`) before it creates anything: a
    /// refusal, or an unknown answer with nothing accepted. Else the new job's id, and whether
    /// its answer will be lost after it exists.
    fn accept(&mut self, command: SlurmCommand) -> Result<(u32, bool), ActionError> {
        let program = if command == SlurmCommand::Salloc {
            "salloc"
        } else {
            "sbatch"
        };
        self.call(format!("{program} {}", self.next_job));
        if self.fault(self.faults.refusal) {
            return Err(self.refusal(command));
        }
        if self.fault(self.faults.action_unknown_before) {
            self.counts.unknown_not_accepted += 1;
            return Err(unknown_action(command));
        }
        let lost_answer = self.fault(self.faults.action_unknown_after);
        let id = self.next_job;
        self.next_job += 1;
        Ok((id, lost_answer))
    }

    fn submit_batch(&mut self, req: &BatchRequest) -> Result<Submitted, ActionError> {
        let (id, lost_answer) = self.accept(SlurmCommand::Sbatch)?;
        let now = now_us();
        let submission = match &req.payload {
            BatchPayload::Script { args, .. } => submission_in(args),
            // reconcile's watermark beacon (`--wrap=true`, held): no worker's job.
            BatchPayload::Wrap(cmd) => {
                assert!(
                    cmd == "true" && req.extra.iter().any(|e| e == "--hold"),
                    "dispatch wraps only its held watermark beacon: {req:?}"
                );
                None
            }
        };
        let beside = self.beside(req.name.as_str(), &req.placement);
        let limit_s = req
            .placement
            .time
            .and_then(|t| t.as_secs())
            .map_or(3600, |s| s as i64);
        let queued = self.rng.range(0, 30) as i64 * 1_000_000;
        let runs_for = (!self.rng.chance(30)).then(|| self.rng.range(5, 900) as i64 * 1_000_000);
        let acct_lost = self.fault(self.faults.acct_lost);
        self.counts.lost_accounting += u64::from(acct_lost);
        let job = SimJob {
            id,
            name: req.name.as_str().to_owned(),
            batch: true,
            submission,
            cpus: req.placement.cpus_per_task.unwrap_or(1),
            mem_mb: req.placement.mem.map_or(1000, |m| m.get()),
            limit_s,
            submitted: now,
            start: None,
            runs_at: now + queued,
            runs_for,
            stubborn: self.rng.chance(30),
            phase: Phase::Pending,
            steps: BTreeMap::new(),
            next_step: 0,
            acct_lag: self.rng.range(0, 20) as i64 * 1_000_000,
            acct_lost,
            partition: req.placement.partition.clone().unwrap_or("debug".into()),
            account: req.placement.account.clone().unwrap_or("acct".into()),
            qos: req.placement.qos.clone().unwrap_or("normal".into()),
            beside,
            made_by: self.command,
            held: req.extra.iter().any(|e| e == "--hold"),
            made_held: req.extra.iter().any(|e| e == "--hold"),
            comment: String::new(),
            nodes: vec![SimNode {
                name: NODE.to_owned(),
                cpus: req.placement.cpus_per_task.unwrap_or(1),
                mem_mb: req.placement.mem.map_or(1000, |m| m.get()),
                gpus: 0,
                lost: false,
            }],
            no_kill: false,
            after: None,
            preempt: None,
            started_beside: None,
        };
        self.jobs.insert(id, job);
        self.tick();
        if lost_answer {
            self.counts.accepted_then_unknown += 1;
            return Err(unknown_action(SlurmCommand::Sbatch));
        }
        Ok(Submitted {
            job_id: JobId::new(id).unwrap(),
            cluster: None,
        })
    }

    /// The live job of this name and placement that a new one would run beside.
    fn beside(&self, name: &str, p: &Placement) -> Option<u32> {
        let part = p.partition.as_deref().unwrap_or("debug");
        let acct = p.account.as_deref().unwrap_or("acct");
        let qos = p.qos.as_deref().unwrap_or("normal");
        self.jobs
            .values()
            .find(|j| {
                j.live()
                    && !matches!(j.phase, Phase::Completing { .. })
                    && j.name == name
                    && j.partition == part
                    && j.account.eq_ignore_ascii_case(acct)
                    && j.qos.eq_ignore_ascii_case(qos)
            })
            .map(|j| j.id)
    }

    /// `salloc --hold`: as [`World::allocate`], but the job waits held (pending, never started)
    /// until `scontrol release`; then it runs at once.
    fn allocate_held(&mut self, req: &AllocRequest) -> Result<HeldAllocation, ActionError> {
        if !req.hold {
            return self.allocate_queued(req);
        }
        let mut unheld = req.clone();
        unheld.hold = false;
        let before = self.next_job;
        let job = match self.allocate(&unheld) {
            Ok(a) => a.job_id,
            Err(e) => {
                // A lost answer after the job exists: it exists held, as it would have. (A
                // refusal made none: no job of this call to hold.)
                for j in self.jobs.values_mut().filter(|j| j.id >= before) {
                    hold(j);
                }
                return Err(e);
            }
        };
        hold(self.jobs.get_mut(&job.get()).expect("just allocated"));
        Ok(HeldAllocation { job_id: job })
    }

    /// A renewal's salloc (`--no-shell`, no `--hold`, no `--immediate`): the job queues behind
    /// the job its `--dependency=afterany:J` names until that one is over, and runs once the
    /// model's queue lets it (up to a minute and a half); the call returns once the job is
    /// named, faults as for any salloc.
    fn allocate_queued(&mut self, req: &AllocRequest) -> Result<HeldAllocation, ActionError> {
        assert!(
            req.immediate_secs.is_none(),
            "a renewal's salloc waits: {req:?}"
        );
        let after = req
            .extra
            .iter()
            .find_map(|e| e.strip_prefix("--dependency=afterany:"))
            .map(|j| j.parse::<u32>().expect("a job id after afterany:"));
        let before = self.next_job;
        let answer = self.allocate(req);
        let runs_at = now_us() + self.rng.range(0, 90) as i64 * 1_000_000;
        for j in self.jobs.values_mut().filter(|j| j.id >= before) {
            j.phase = Phase::Pending;
            j.start = None;
            j.after = after;
            j.runs_at = runs_at;
        }
        self.tick();
        answer.map(|a| HeldAllocation { job_id: a.job_id })
    }

    /// salloc: the allocation is granted at once (the model's cluster has room) and runs until
    /// its limit or a cancel; faults as for sbatch (a lost answer after the job exists).
    fn allocate(&mut self, req: &AllocRequest) -> Result<Allocated, ActionError> {
        let (id, lost_answer) = self.accept(SlurmCommand::Salloc)?;
        let now = now_us();
        let limit_s = req
            .placement
            .time
            .and_then(|t| t.as_secs())
            .map_or(3600, |s| s as i64);
        let beside = self.beside(req.name.as_str(), &req.placement);
        let size = (
            req.placement.cpus_per_task.unwrap_or(1),
            req.placement.mem.map_or(1000, |m| m.get()),
            limit_s,
        );
        let lag = self.rng.range(0, 20) as i64 * 1_000_000;
        let job = SimJob {
            partition: req.placement.partition.clone().unwrap_or("debug".into()),
            account: req.placement.account.clone().unwrap_or("acct".into()),
            qos: req.placement.qos.clone().unwrap_or("normal".into()),
            beside,
            made_by: self.command,
            comment: req
                .extra
                .iter()
                .find_map(|e| e.strip_prefix("--comment="))
                .unwrap_or_default()
                .to_owned(),
            ..SimJob::allocation(id, req.name.as_str().to_owned(), size, now, lag)
        };
        self.jobs.insert(id, job);
        if lost_answer {
            self.counts.accepted_then_unknown += 1;
            return Err(unknown_action(SlurmCommand::Salloc));
        }
        Ok(Allocated {
            job_id: JobId::new(id).unwrap(),
        })
    }

    fn launch_step(&mut self, req: &StepRequest) -> Result<LaunchedStep, ActionError> {
        let now = self.call(format!("srun {}", req.job));
        if self.fault(self.faults.action_unknown_before) {
            // srun could not be started: nothing ran.
            self.counts.refusals += 1;
            return Err(ActionError::Refused(Refusal::NotStarted(
                SlurmError::Spawn {
                    command: SlurmCommand::Srun,
                    message: "srun: Resource temporarily unavailable".into(),
                },
            )));
        }
        let refuse = self.fault(self.faults.step_refused);
        let slow = self.fault(self.faults.slow_step);
        let lost_answer = self.fault(self.faults.action_unknown_after);
        let runs_for = (!self.rng.chance(40)).then(|| self.rng.range(1, 1200) as i64 * 1_000_000);
        let stubborn = self.rng.chance(25);
        let delay = if slow {
            self.counts.slow_steps += 1;
            self.rng.range(1, 60) as i64 * 1_000_000
        } else {
            0
        };
        let job = self.jobs.get_mut(&req.job.get());
        let gpus: u32 = req
            .gres
            .as_deref()
            .and_then(|g| g.strip_prefix("gpu:"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        // The node srun is told (`--nodelist`), else the job's first.
        let node = job.as_ref().and_then(|j| match &req.node {
            Some(n) => j.nodes.iter().find(|x| &x.name == n).cloned(),
            None => j.nodes.first().cloned(),
        });
        let refused_why = match (&job, &node) {
            (None, _) => Some("Invalid job id specified".to_owned()),
            (Some(j), _) if !matches!(j.phase, Phase::Running) => {
                Some("Job/step already completing or completed".to_owned())
            }
            (Some(_), None) => Some("Requested node configuration is not available".to_owned()),
            (Some(_), Some(n)) if n.lost => {
                Some("Requested node configuration is not available".to_owned())
            }
            (Some(_), Some(n))
                if req.cpus > n.cpus || req.mem.get() > n.mem_mb || gpus > n.gpus =>
            {
                Some("More processors requested than permitted".to_owned())
            }
            _ if refuse => Some("Requested nodes are busy".to_owned()),
            _ => None,
        };
        if let Some(why) = refused_why {
            // srun starts, says so in its log, and exits: no step.
            self.counts.steps_refused += 1;
            srun_says(
                req,
                &format!(
                    "srun: error: Unable to create step for job {}: {why}",
                    req.job
                ),
            );
            return Ok(LaunchedStep { srun_pid: DEAD_PID });
        }
        let j = job.expect("checked above");
        let no = j.next_step;
        // srun --verbose announces a step the controller created at once, in its client log;
        // sometimes not in time (the step is then found by a listing or the supervisor).
        if delay == 0 && self.rng.chance(50) {
            let host = node.as_ref().map_or("?", |n| n.name.as_str());
            srun_says(
                req,
                &format!(
                    "srun: launching StepId={}.{no} on host {host}, 1 tasks: 0",
                    req.job
                ),
            );
            // And, as a real srun does when slurmd started the task, that it did.
            srun_says(
                req,
                &format!("srun: launch/slurm: _task_start: Node {host}, 1 tasks started"),
            );
        }
        j.next_step += 1;
        j.steps.insert(
            no,
            SimStep {
                no,
                created: now,
                name: req.name.as_str().to_owned(),
                cpus: req.cpus,
                mem_mb: req.mem.get(),
                submission: submission_in(&req.command),
                not_before: now + delay,
                started: None,
                runs_for,
                stubborn,
                ended: None,
                node: {
                    let n = node.expect("checked above").name;
                    let first = j.nodes.first().is_some_and(|f| f.name == n);
                    self.counts.steps_off_first_node += u64::from(!first);
                    n
                },
                gpus,
                stranded: false,
            },
        );
        self.tick();
        if lost_answer {
            self.counts.accepted_then_unknown += 1;
            return Err(unknown_action(SlurmCommand::Srun));
        }
        Ok(LaunchedStep {
            srun_pid: live_srun_pid(),
        })
    }

    /// `scontrol release J`: a held pending job may start; like scancel, an answer can be lost
    /// after the controller acted, or before.
    fn release(&mut self, job: JobId) -> Result<(), ActionError> {
        self.call(format!("release {job}"));
        let acted_before_unknown = self.rng.chance(50);
        let unknown = self.fault(self.faults.query_unknown);
        if !unknown || acted_before_unknown {
            if let Some(j) = self.jobs.get_mut(&job.get()) {
                j.held = false;
            }
        }
        if unknown {
            self.counts.unknown_answers += 1;
            return Err(unknown_action(SlurmCommand::Scontrol));
        }
        Ok(())
    }

    fn set_comment(&mut self, job: JobId, comment: &str) -> Result<(), ActionError> {
        self.call(format!("comment {job}"));
        let acted_before_unknown = self.rng.chance(50);
        let unknown = self.fault(self.faults.query_unknown);
        if !unknown || acted_before_unknown {
            if let Some(j) = self.jobs.get_mut(&job.get()).filter(|j| j.live()) {
                j.comment = comment.to_owned();
            }
        }
        if unknown {
            self.counts.unknown_answers += 1;
            return Err(unknown_action(SlurmCommand::Scontrol));
        }
        Ok(())
    }

    fn cancel(&mut self, target: CancelTarget) -> Result<CancelReport, ActionError> {
        let key = match &target {
            CancelTarget::MineNamed(n) => format!("scancel name {}", self.name_key(n.as_str())),
            other => format!("scancel {other:?}"),
        };
        let now = self.call(key);
        let acted_before_unknown = self.rng.chance(50);
        let unknown = self.fault(self.faults.query_unknown);
        if !unknown || acted_before_unknown {
            match &target {
                CancelTarget::Job(id) => {
                    if let Some(j) = self.jobs.get_mut(&id.get()) {
                        j.end(now, "CANCELLED", 1_500_000);
                    }
                }
                CancelTarget::Step(s) | CancelTarget::SignalStep(s, Signal::Kill) => {
                    self.end_step(*s, now, false)
                }
                CancelTarget::SignalStep(s, _) => self.end_step(*s, now, true),
                CancelTarget::MineNamed(n) => {
                    for j in self.jobs.values_mut().filter(|j| j.name == n.as_str()) {
                        j.end(now, "CANCELLED", 1_500_000);
                    }
                }
            }
        }
        if unknown {
            self.counts.unknown_answers += 1;
            return Err(unknown_action(SlurmCommand::Scancel));
        }
        Ok(CancelReport {
            target,
            status: ExitInfo::Code(0),
            stderr: String::new(),
            said: ScancelSaid::Accepted,
        })
    }

    /// scancel J.S ends the step; a TERM ends it unless its payload ignores TERM. For a batch
    /// job, `J.batch` is the job itself.
    fn end_step(&mut self, s: StepId, now: i64, term: bool) {
        let Some(j) = self.jobs.get_mut(&s.job.get()) else {
            return;
        };
        match s.step {
            StepKind::Batch if j.batch && !(term && j.stubborn) && j.start.is_some() => {
                j.end(now, if term { "COMPLETED" } else { "CANCELLED" }, 800_000);
            }
            StepKind::Numbered(n) => {
                if let Some(st) = j.steps.get_mut(&n) {
                    if st.live() && !(term && st.stubborn) {
                        st.ended = Some((now, "CANCELLED"));
                    }
                }
            }
            _ => {}
        }
    }
}

impl SimSlurm {
    pub fn new(seed: u64) -> SimSlurm {
        SimSlurm {
            w: Mutex::new(World::new(seed)),
        }
    }

    pub fn world(&self) -> std::sync::MutexGuard<'_, World> {
        // A crash (a failpoint's unwinding) never happens while the model is locked.
        self.w.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn debug<T: std::fmt::Debug>(what: impl std::fmt::Display, answer: T) -> T {
    if std::env::var_os("SIM_DEBUG").is_some() {
        eprintln!("  slurm {what} -> {answer:?}");
    }
    answer
}

impl Scheduler for SimSlurm {
    async fn submit_batch(&self, req: &BatchRequest) -> Result<Submitted, ActionError> {
        req.argv()?;
        debug(req.name.as_str(), self.world().submit_batch(req))
    }

    async fn allocate(&self, req: &AllocRequest) -> Result<Allocated, ActionError> {
        req.argv()?;
        debug(req.name.as_str(), self.world().allocate(req))
    }

    async fn allocate_held(
        &self,
        req: &AllocRequest,
        _log: &std::path::Path,
    ) -> Result<HeldAllocation, ActionError> {
        req.argv()?;
        debug(req.name.as_str(), self.world().allocate_held(req))
    }

    async fn launch_step(&self, req: &StepRequest) -> Result<LaunchedStep, ActionError> {
        req.argv()?;
        self.world().launch_step(req)
    }

    async fn list_jobs(&self, query: &JobQuery) -> Answer<Vec<JobRow>> {
        debug(format!("{:?}", query), self.world().list_jobs(query))
    }

    async fn list_steps(&self, job: JobId) -> Answer<Vec<StepRow>> {
        debug(format!("steps {job}"), self.world().list_steps(job))
    }

    async fn show_job(&self, job: JobId) -> Answer<Vec<JobDetails>> {
        self.world().show_job(job)
    }

    async fn accounting(&self, query: &AcctQuery) -> Answer<Vec<AcctRow>> {
        debug(format!("{:?}", query), self.world().accounting(query))
    }

    async fn release_job(&self, job: JobId) -> Result<(), ActionError> {
        debug("release", self.world().release(job))
    }

    async fn set_comment(&self, job: JobId, comment: &str) -> Result<(), ActionError> {
        debug("comment", self.world().set_comment(job, comment))
    }

    async fn cancel_job(&self, job: JobId) -> Result<CancelReport, ActionError> {
        debug("cancel", self.world().cancel(CancelTarget::Job(job)))
    }

    async fn cancel_step(&self, step: StepId) -> Result<CancelReport, ActionError> {
        self.world().cancel(CancelTarget::Step(step))
    }

    async fn signal_step(&self, step: StepId, signal: Signal) -> Result<CancelReport, ActionError> {
        debug(
            "signal",
            self.world().cancel(CancelTarget::SignalStep(step, signal)),
        )
    }

    async fn cancel_by_name(&self, name: &JobName) -> Result<CancelReport, ActionError> {
        self.world().cancel(CancelTarget::MineNamed(name.clone()))
    }

    fn call_counts(&self) -> CallCounts {
        CallCounts::default()
    }

    /// The model's sbatch answers at once; a call that "timed out" did so within this.
    fn longest_call(&self) -> Duration {
        Duration::from_secs(2)
    }
}

/// A line of srun's own stderr, in the client log of `req` when it has one.
fn srun_says(req: &StepRequest, line: &str) {
    if let Some(log) = &req.client_log {
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()));
    }
}
