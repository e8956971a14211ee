//! `dispatch report`: what happened to a trial, a pool or a worker, as data for a page (and
//! `--json`). Pure: the coordinator's events, each worker's own journal events and the audit's
//! findings are handed in; `ops::report` reads them, `cli::report_html` draws them.
//!
//! Two passes over the coordinator's journal: [`Selector`] finds the submissions the subject
//! covers (a trial's joins come after their intents), then [`Builder`] folds the journal again
//! with the reducers, keeping each selected worker's milestones, the reserved budget of every
//! pool over time, the events about the subject, and the evidence.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;
use uuid::Uuid;

use crate::event::{Envelope, Event, Micros, Vocabulary, WorkerEnvelope, WorkerEvent};
use crate::state::State;

mod lineage;
pub use lineage::{ChainRow, Segment};

/// Submissions a report covers at most (a pool's whole history, say).
pub const MAX_WORKERS: usize = 1_000;
/// Events about the subject kept for the event table; more are counted, not kept.
pub const MAX_EVENTS: usize = 20_000;
/// Budget points kept per pool; more are counted, not kept.
pub const MAX_BUDGET_POINTS: usize = 20_000;
/// Submissions whose pool the selector remembers (to find a trial's pools).
pub const MAX_POOLS_TRACKED: usize = 1_000_000;
/// Characters of an event's body shown in the event table.
pub const SUMMARY_CHARS: usize = 300;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Subject {
    Trial(String),
    Pool(String),
    /// By name (every submission of that name) or by submission id.
    Worker(String),
}

impl Subject {
    pub fn describe(&self) -> String {
        match self {
            Subject::Trial(t) => format!("trial {t}"),
            Subject::Pool(p) => format!("pool {p}"),
            Subject::Worker(w) => format!("worker {w}"),
        }
    }
}

/// Pass 1: which submissions and pools the subject covers, and whether it exists at all.
#[derive(Debug)]
pub struct Selector {
    subject: Subject,
    found: bool,
    truncated: bool,
    ids: Vec<Uuid>,
    seen: HashSet<Uuid>,
    pools: BTreeSet<String>,
    pool_of: HashMap<Uuid, String>,
    /// The continuations seen (a worker subject is each generation of its lineage).
    lineages: crate::state::continuation::Continuations,
}

/// What pass 1 found.
#[derive(Clone, Debug)]
pub struct Selected {
    pub subject: Subject,
    pub ids: Vec<Uuid>,
    pub pools: BTreeSet<String>,
    /// More submissions matched than [`MAX_WORKERS`]; the first ones are shown.
    pub truncated: bool,
}

impl Selector {
    pub fn new(subject: Subject) -> Selector {
        Selector {
            subject,
            found: false,
            truncated: false,
            ids: Vec::new(),
            seen: HashSet::new(),
            pools: BTreeSet::new(),
            pool_of: HashMap::new(),
            lineages: Default::default(),
        }
    }

    fn add(&mut self, id: Uuid) {
        self.found = true;
        if self.seen.len() >= MAX_WORKERS {
            self.truncated |= !self.seen.contains(&id);
        } else if self.seen.insert(id) {
            self.ids.push(id);
            if let Some(pool) = self.pool_of.get(&id) {
                self.pools.insert(pool.clone());
            }
        }
    }

    pub fn offer(&mut self, env: &Envelope) {
        if let Event::WorkerSubmitIntent(e) = &env.event {
            if self.pool_of.len() < MAX_POOLS_TRACKED {
                self.pool_of.insert(e.submission_id, e.pool.clone());
            }
        }
        match (&self.subject, &env.event) {
            (Subject::Trial(t), Event::TrialOpened(e)) if &e.trial == t => self.found = true,
            (Subject::Trial(t), Event::TrialWorkerJoined(e)) if &e.trial == t => {
                self.add(e.submission_id)
            }
            (Subject::Pool(p), Event::PoolAttached(e)) if &e.pool == p => {
                self.found = true;
                self.pools.insert(p.clone());
            }
            (Subject::Pool(p), Event::WorkerSubmitIntent(e)) if &e.pool == p => {
                self.add(e.submission_id)
            }
            (Subject::Worker(w), Event::WorkerSubmitIntent(e))
                if &e.worker == w || e.submission_id.to_string() == *w =>
            {
                self.add(e.submission_id)
            }
            (Subject::Worker(w), Event::JobSubmitIntent(e))
                if &e.worker == w || e.submission_id.to_string() == *w =>
            {
                self.add(e.submission_id)
            }
            // A worker is each generation of its lineage, whichever one was named.
            (Subject::Worker(_), Event::WorkerContinued(e)) => {
                self.lineages
                    .continued(env.time, e, &env.actor.host, env.actor.pid);
                if self.seen.contains(&e.predecessor) || self.seen.contains(&e.submission_id) {
                    let chain: Vec<Uuid> = self
                        .lineages
                        .chain(e.submission_id)
                        .into_iter()
                        .map(|(id, _)| id)
                        .collect();
                    chain.into_iter().for_each(|id| self.add(id));
                }
            }
            _ => {}
        }
    }

    /// `None` when the journal never named the subject.
    pub fn finish(self) -> Option<Selected> {
        self.found.then_some(Selected {
            truncated: self.truncated,
            subject: self.subject,
            ids: self.ids,
            pools: self.pools,
        })
    }
}

crate::words! {
    /// A milestone in a worker's life, in the order legends show them.
    #[derive(Hash)]
    pub enum Milestone {
        Submitted => "submitted",
        Launched => "launched",
        Running => "running",
        StopAsked => "stop_asked",
        Exited => "exited",
        Published => "published",
        Released => "released",
        Failed => "failed",
        Forgotten => "forgotten",
    }
}

crate::words! {
    /// Which journal recorded a milestone.
    pub enum MarkSource {
        /// The coordinator's journal (the mark's seq is its).
        Coordinator => "coordinator",
        /// The worker's own journal.
        Worker => "worker",
    }
}

crate::words! {
    /// Where a worker's early-shutdown deadline comes from.
    pub enum DeadlineSource {
        /// Its supervisor recorded it.
        WorkerJournal => "worker_journal",
        /// The allocation's end less the default shutdown window with this worker's
        /// publication timeout: the supervisor never wrote it.
        Estimated => "estimated",
    }
}

crate::words! {
    /// What an audit finding about the subject is.
    pub enum FindingKind {
        Violation => "violation",
        Override => "override",
        Evidence => "evidence",
        Damage => "damage",
    }
}

/// A milestone in a worker's life.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mark {
    pub what: Milestone,
    pub source: MarkSource,
    pub seq: u64,
    pub time: String,
    pub time_us: i64,
}

/// The worker-level order of milestones, for legends.
pub const MARKS: [Milestone; 9] = [
    Milestone::Submitted,
    Milestone::Launched,
    Milestone::Running,
    Milestone::StopAsked,
    Milestone::Exited,
    Milestone::Published,
    Milestone::Released,
    Milestone::Failed,
    Milestone::Forgotten,
];

#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkerTimeline {
    pub worker: String,
    pub submission_id: String,
    /// `None` for a `dispatch submit` worker (its own job).
    pub pool: Option<String>,
    pub state: String,
    pub cpus: u32,
    pub mem_mb: u64,
    /// The node its receipt placed it on (`None`: its own job, or a pool worker submitted
    /// before placement was journaled), and the GPUs it reserved there.
    pub node: Option<String>,
    pub gpus: u32,
    /// The GPU indexes its step got, as its supervisor recorded them (`SLURM_STEP_GPUS`).
    pub step_gpus: Option<String>,
    /// Why its launch failed, as its last definite `WorkerLaunchFailed` says (for a launch
    /// Slurm refused, srun's own words).
    pub launch_failure: Option<String>,
    pub marks: Vec<Mark>,
    /// The pool allocation's end when the worker was submitted.
    pub allocation_end: Option<String>,
    pub allocation_end_us: Option<i64>,
    /// When the supervisor sends SIGTERM unless the payload ended first.
    pub shutdown_deadline: Option<String>,
    pub shutdown_deadline_us: Option<i64>,
    pub shutdown_deadline_source: Option<DeadlineSource>,
    /// Its lineage's row and its segment on it (`--continue N`; generation 1 alone when it
    /// continued none and was not continued).
    #[serde(flatten)]
    pub segment: Segment,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BudgetPoint {
    pub seq: u64,
    pub time: String,
    pub time_us: i64,
    pub cpus: u64,
    pub mem_mb: u64,
    pub capacity_cpus: u64,
    pub capacity_mem_mb: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BudgetSeries {
    pub pool: String,
    pub points: Vec<BudgetPoint>,
    pub dropped: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct EventLine {
    pub seq: u64,
    pub time: String,
    pub time_us: i64,
    pub kind: &'static str,
    /// `coordinator` or `worker:<name>`.
    pub source: String,
    pub summary: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct EvidenceRow {
    pub worker: String,
    pub submission_id: String,
    pub state: String,
    /// How its payload ended (`policy::node::Outcome`: a non-zero exit is `failed`).
    pub outcome: Option<String>,
    /// Its payload's exit code, or the signal that ended it, as a journal recorded them.
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub manifest_sha256: Option<String>,
    pub published_dir: Option<String>,
    /// The worker journal's chain head the coordinator had ingested (at the verdict, for a
    /// judged trial), and its last seq.
    pub worker_journal_head: Option<String>,
    pub worker_journal_seq: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VerdictInfo {
    #[serde(serialize_with = "crate::state::word")]
    pub verdict: crate::event::trial::Verdict,
    pub reason: String,
    pub at: String,
    pub seq: u64,
    /// The coordinator journal's chain head after the verdict's frame.
    pub chain_head: Option<String>,
}

/// The audit's findings as `ops::audit` gives them, to pick out what concerns the subject.
#[derive(Clone, Debug, Default)]
pub struct AuditInput {
    pub status: crate::policy::audit::AuditStatus,
    pub journal_status: crate::journal::Status,
    pub damage: Option<String>,
    pub violations: Vec<crate::policy::audit::Violation>,
    pub violation_count: u64,
    pub overrides: Vec<crate::policy::audit::Override>,
    pub override_count: u64,
    /// Published directories that failed verification, with why.
    pub evidence_failures: Vec<(String, Vec<String>)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct AuditFinding {
    pub seq: Option<u64>,
    pub what: FindingKind,
    pub detail: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct AuditSection {
    /// The whole journal's audit.
    pub status: crate::policy::audit::AuditStatus,
    pub journal_status: crate::journal::Status,
    pub violation_count: u64,
    pub override_count: u64,
    /// What concerns this subject, damage first; every entry is shown in red.
    pub findings: Vec<AuditFinding>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub subject: Subject,
    /// The first and last time on the chart (microseconds since the epoch) and as text.
    pub span: Option<(String, String)>,
    pub span_us: Option<(i64, i64)>,
    pub journal_events: u64,
    pub workers: Vec<WorkerTimeline>,
    /// The timeline's rows: one per worker, each generation of a lineage on one.
    pub chains: Vec<ChainRow>,
    pub workers_truncated: bool,
    pub budget: Vec<BudgetSeries>,
    pub events: Vec<EventLine>,
    pub events_dropped: u64,
    pub evidence: Vec<EvidenceRow>,
    pub verdict: Option<VerdictInfo>,
    pub audit: AuditSection,
}

#[derive(Debug, Default)]
struct Track {
    /// The name and pool its intent gave.
    named: Option<(String, Option<String>)>,
    marks: Vec<Mark>,
    allocation_end: Option<Micros>,
    deadline: Option<(Micros, DeadlineSource)>,
    published: bool,
    step_gpus: Option<String>,
    launch_failure: Option<String>,
    /// How its payload ended (code, signal), as either journal recorded it.
    exit: Option<(Option<i32>, Option<i32>)>,
    ingested: Option<crate::event::pool::WorkerReportIngested>,
    at_verdict: Option<crate::event::pool::WorkerReportIngested>,
    /// Its own job, or its pool's allocation at its intent.
    job_id: Option<crate::slurm::JobId>,
    /// What its own journal says: its state's class and its publication.
    state_class: Option<String>,
    published_dir: Option<String>,
}

impl Track {
    /// A definite launch failure's reason (the last one counts).
    fn failed(&mut self, reason: &str) {
        self.launch_failure = Some(reason.to_owned());
    }

    /// What the coordinator recorded of the worker's own journal: how its payload exited,
    /// and the summary it ingested (a publication is a milestone).
    fn worker_news(&mut self, env: &Envelope) {
        if let Event::WorkerExited(e) = &env.event {
            self.exit = Some((e.code, e.signal));
        }
        if let Event::WorkerReportIngested(r) = &env.event {
            if r.publication.as_deref() == Some("published") && !self.published {
                self.published = true;
                self.marks.push(mark(
                    Milestone::Published,
                    MarkSource::Coordinator,
                    env.seq,
                    env.time,
                ));
            }
            self.ingested = Some(r.clone());
        }
    }
}

/// A worker as the reduced state has it at the end.
struct FinalState {
    state: String,
    cpus: u32,
    mem_mb: u64,
    placement: Option<crate::state::pool::Placement>,
}

/// A submission in the reduced state: a pool's worker and its pool's name, or a job's worker.
enum Held<'a> {
    Pool(&'a crate::state::pool::Worker, &'a str),
    Job(&'a crate::state::jobs::JobWorker),
}

/// Pass 2: fold the journal, keeping what the page shows.
#[derive(Debug)]
pub struct Builder {
    selected: Selected,
    wanted: HashSet<Uuid>,
    state: State,
    tracks: HashMap<Uuid, Track>,
    budget: BTreeMap<String, BudgetSeries>,
    last_reserved: HashMap<String, (u64, u64, u64, u64)>,
    events: Vec<EventLine>,
    events_dropped: u64,
    about: HashSet<u64>,
    verdict: Option<VerdictInfo>,
    recorded: Option<Vec<crate::event::trial::TrialEvidence>>,
    first: Option<Micros>,
    last: Option<Micros>,
}

fn mark(what: Milestone, source: MarkSource, seq: u64, t: Micros) -> Mark {
    Mark {
        what,
        source,
        seq,
        time: t.to_rfc3339(),
        time_us: t.0,
    }
}

fn summary(event: &impl Vocabulary) -> String {
    let text = event.body_json().to_string();
    if text.chars().count() <= SUMMARY_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(SUMMARY_CHARS).collect();
    cut.push('…');
    cut
}

/// The coordinator milestone an event is, and the submission it is about.
fn coordinator_mark(event: &Event) -> Option<(Uuid, Milestone)> {
    Some(match event {
        Event::WorkerSubmitIntent(e) => (e.submission_id, Milestone::Submitted),
        Event::JobSubmitIntent(e) => (e.submission_id, Milestone::Submitted),
        Event::WorkerLaunched(e) => (e.submission_id, Milestone::Launched),
        Event::JobSubmitted(e) => (e.submission_id, Milestone::Launched),
        Event::WorkerStepObserved(e) => (e.submission_id, Milestone::Running),
        Event::WorkerStopIntent(e) => (e.submission_id, Milestone::StopAsked),
        Event::JobStopIntent(e) => (e.submission_id, Milestone::StopAsked),
        Event::WorkerExited(e) => (e.submission_id, Milestone::Exited),
        Event::WorkerTerminal(e) => (e.submission_id, Milestone::Released),
        Event::JobTerminal(e) => (e.submission_id, Milestone::Released),
        Event::WorkerLaunchFailed(e) if e.definite => (e.submission_id, Milestone::Failed),
        Event::JobSubmitFailed(e) if e.definite => (e.submission_id, Milestone::Failed),
        Event::WorkerForgotten(e) => (e.submission_id, Milestone::Forgotten),
        _ => return None,
    })
}

/// The submission an event names, if any.
fn submission_of(event: &Event) -> Option<Uuid> {
    let body = event.body_json();
    body.get("submission_id")
        .and_then(|v| v.as_str())
        .and_then(|s| Uuid::parse_str(s).ok())
}

impl Builder {
    pub fn new(selected: Selected) -> Builder {
        Builder {
            wanted: selected.ids.iter().copied().collect(),
            selected,
            state: State::default(),
            tracks: HashMap::new(),
            budget: BTreeMap::new(),
            last_reserved: HashMap::new(),
            events: Vec::new(),
            events_dropped: 0,
            about: HashSet::new(),
            verdict: None,
            recorded: None,
            first: None,
            last: None,
        }
    }

    fn keep_event<E: Vocabulary>(&mut self, env: &Envelope<E>, source: String) {
        self.first = Some(self.first.map_or(env.time, |f| f.min(env.time)));
        self.last = Some(self.last.map_or(env.time, |l| l.max(env.time)));
        if self.events.len() >= MAX_EVENTS {
            self.events_dropped += 1;
            return;
        }
        self.events.push(EventLine {
            seq: env.seq,
            time: env.time.to_rfc3339(),
            time_us: env.time.0,
            kind: env.event.kind_name(),
            source,
            summary: summary(&env.event),
        });
    }

    /// Whether a coordinator event concerns the subject (beyond its workers' own events).
    fn concerns(&self, env: &Envelope) -> bool {
        let pool = |p: &String| self.selected.pools.contains(p);
        match (&self.selected.subject, &env.event) {
            (Subject::Trial(t), Event::TrialOpened(e)) => &e.trial == t,
            (Subject::Trial(t), Event::TrialJudged(e)) => &e.trial == t,
            (_, Event::PoolAttached(e)) => pool(&e.pool),
            (_, Event::PoolDetached(e)) => pool(&e.pool),
            (_, Event::PoolAllocationEnded(e)) => pool(&e.pool),
            _ => false,
        }
    }

    /// The next coordinator event, in seq order.
    pub fn offer(&mut self, env: &Envelope) -> Result<(), crate::event::ReduceError> {
        self.state.apply(env)?;
        let sid = submission_of(&env.event).filter(|id| self.wanted.contains(id));
        if sid.is_some() || self.concerns(env) {
            self.about.insert(env.seq);
            self.keep_event(env, "coordinator".to_owned());
        }
        if let Some(id) = sid {
            let end = match &env.event {
                Event::WorkerSubmitIntent(e) => self
                    .state
                    .pools
                    .pools
                    .get(&e.pool)
                    .map(|p| (p.allocation.end_time, e.publication_timeout_s)),
                _ => None,
            };
            let allocation = match &env.event {
                Event::WorkerSubmitIntent(e) => self.state.pools.pools.get(&e.pool),
                _ => None,
            }
            .map(|p| p.allocation.job_id);
            let track = self.tracks.entry(id).or_default();
            track.job_id = track.job_id.or(allocation);
            match &env.event {
                Event::JobSubmitted(e) => track.job_id = Some(e.job_id),
                Event::WorkerSubmitIntent(e) => {
                    track.named = Some((e.worker.clone(), Some(e.pool.clone())))
                }
                Event::JobSubmitIntent(e) => track.named = Some((e.worker.clone(), None)),
                Event::WorkerLaunchFailed(e) if e.definite => track.failed(&e.reason),
                _ => {}
            }
            if let Some((end, publication_timeout_s)) = end {
                track.allocation_end = Some(end);
                let budgets =
                    crate::policy::pool::Budgets::with_publication_timeout(publication_timeout_s);
                track.deadline = Some((
                    crate::policy::pool::early_shutdown_deadline(end, &budgets),
                    DeadlineSource::Estimated,
                ));
            }
            if let Some((_, what)) = coordinator_mark(&env.event) {
                track
                    .marks
                    .push(mark(what, MarkSource::Coordinator, env.seq, env.time));
            }
            track.worker_news(env);
        }
        if let (Subject::Trial(t), Event::TrialJudged(j)) = (&self.selected.subject, &env.event) {
            if &j.trial == t && self.verdict.is_none() {
                self.verdict = Some(VerdictInfo {
                    verdict: j.verdict,
                    reason: j.reason.clone(),
                    at: env.time.to_rfc3339(),
                    seq: env.seq,
                    chain_head: None,
                });
                self.recorded = Some(j.evidence.clone());
                for track in self.tracks.values_mut() {
                    track.at_verdict = track.ingested.clone();
                }
            }
        }
        self.sample_budget(env);
        Ok(())
    }

    fn sample_budget(&mut self, env: &Envelope) {
        for name in &self.selected.pools {
            let Some(p) = self.state.pools.pools.get(name) else {
                continue;
            };
            let (cpus, mem_mb) = p.reserved();
            let now = (
                cpus,
                mem_mb,
                u64::from(p.allocation.cpus),
                p.allocation.mem_mb,
            );
            if self.last_reserved.get(name) == Some(&now) {
                continue;
            }
            self.last_reserved.insert(name.clone(), now);
            let series = self
                .budget
                .entry(name.clone())
                .or_insert_with(|| BudgetSeries {
                    pool: name.clone(),
                    points: Vec::new(),
                    dropped: 0,
                });
            if series.points.len() >= MAX_BUDGET_POINTS {
                series.dropped += 1;
                continue;
            }
            series.points.push(BudgetPoint {
                seq: env.seq,
                time: env.time.to_rfc3339(),
                time_us: env.time.0,
                cpus,
                mem_mb,
                capacity_cpus: now.2,
                capacity_mem_mb: now.3,
            });
        }
    }

    /// The seq of the trial's verdict, once offered (its chain head is the caller's to read).
    pub fn verdict_seq(&self) -> Option<u64> {
        self.verdict.as_ref().map(|v| v.seq)
    }

    /// An event of worker `id`'s own journal (its seqs are that journal's).
    pub fn offer_worker(&mut self, id: Uuid, name: &str, env: &WorkerEnvelope) {
        if !self.wanted.contains(&id) {
            return;
        }
        self.keep_event(env, format!("worker:{name}"));
        let track = self.tracks.entry(id).or_default();
        let what = match &env.event {
            WorkerEvent::SupervisorStarted(e) => {
                track.deadline = Some((e.deadline, DeadlineSource::WorkerJournal));
                None
            }
            WorkerEvent::StepDevices(d) => {
                track.step_gpus.clone_from(&d.step_gpus);
                None
            }
            WorkerEvent::PayloadStarted(_) => Some(Milestone::Running),
            WorkerEvent::ShutdownSignalled(_) => Some(Milestone::StopAsked),
            WorkerEvent::PayloadExited(e) => {
                track.exit = Some((e.code, e.signal));
                Some(Milestone::Exited)
            }
            WorkerEvent::CleanedUp(e) => {
                track.state_class = Some(e.state_class.clone());
                None
            }
            WorkerEvent::Published(p) if !track.published => {
                track.published = true;
                track.published_dir = Some(p.dir.clone());
                Some(Milestone::Published)
            }
            _ => None,
        };
        if let Some(what) = what {
            track
                .marks
                .push(mark(what, MarkSource::Worker, env.seq, env.time));
        }
    }

    /// The workers the page covers, with their pools (for their own journals' paths).
    pub fn workers(&self) -> Vec<(Uuid, String, Option<String>)> {
        self.selected
            .ids
            .iter()
            .map(|id| {
                let (name, pool) = self.name_of(id);
                (*id, name, pool)
            })
            .collect()
    }

    /// Submission `id` as the reduced state has it, active or finished: a pool's worker (with
    /// its pool) or a `dispatch submit` worker.
    fn held(&self, id: &Uuid) -> Option<Held<'_>> {
        for p in self.state.pools.pools.values() {
            if let Some(w) = p
                .active
                .get(id)
                .or_else(|| p.finished.iter().find(|w| w.submission_id == *id))
            {
                return Some(Held::Pool(w, &p.name));
            }
        }
        let jobs = &self.state.jobs;
        jobs.active
            .get(id)
            .or_else(|| jobs.finished.iter().find(|j| j.submission_id == *id))
            .map(Held::Job)
    }

    fn name_of(&self, id: &Uuid) -> (String, Option<String>) {
        match self.held(id) {
            Some(Held::Pool(w, pool)) => return (w.name.clone(), Some(pool.to_owned())),
            Some(Held::Job(j)) => return (j.worker.clone(), None),
            None => {}
        }
        for t in self.state.trials.trials.values() {
            if let Some(w) = t.workers.iter().find(|w| w.submission_id == *id) {
                return (w.worker.clone(), w.pool.clone());
            }
        }
        // The reduced state dropped it: its intent said.
        self.tracks
            .get(id)
            .and_then(|t| t.named.clone())
            .unwrap_or_else(|| (id.to_string(), None))
    }

    /// What the reduced state has at the end: the state and the reservation.
    fn final_state(&self, id: &Uuid) -> FinalState {
        match self.held(id) {
            Some(Held::Pool(w, _)) => FinalState {
                state: w.state.as_str().to_owned(),
                cpus: w.cpus,
                mem_mb: w.mem_mb,
                placement: w.placement.clone(),
            },
            Some(Held::Job(j)) => FinalState {
                state: j.state.as_str().to_owned(),
                cpus: j.cpus,
                mem_mb: j.mem_mb,
                placement: None,
            },
            None => FinalState {
                state: crate::state::ENDED.to_owned(),
                cpus: 0,
                mem_mb: 0,
                placement: None,
            },
        }
    }

    /// The evidence row of one worker: exactly as a judged trial's verdict recorded it, or
    /// else as its `head` report says.
    fn evidence_row(
        &self,
        id: &Uuid,
        name: &str,
        state: &str,
        head: Option<&crate::event::pool::WorkerReportIngested>,
        exit: Option<(Option<i32>, Option<i32>)>,
    ) -> EvidenceRow {
        let recorded = self
            .recorded
            .as_ref()
            .and_then(|r| r.iter().find(|e| e.submission_id == *id));
        let (exit_code, exit_signal) = exit.unwrap_or_default();
        let outcome = |recorded: Option<&str>| {
            crate::policy::node::Outcome::told(recorded, exit_code, exit_signal)
                .map(|o| o.as_str().to_owned())
        };
        match recorded {
            Some(e) => EvidenceRow {
                worker: e.worker.clone(),
                submission_id: id.to_string(),
                state: e.state.clone(),
                outcome: outcome(e.outcome.as_deref()),
                exit_code,
                exit_signal,
                manifest_sha256: e.manifest_sha256.map(|d| hex::encode(d.0)),
                published_dir: e.published_dir.clone(),
                worker_journal_head: head.map(|r| hex::encode(r.head.0)),
                worker_journal_seq: head.map(|r| r.last_seq),
            },
            None => EvidenceRow {
                worker: name.to_owned(),
                submission_id: id.to_string(),
                state: state.to_owned(),
                outcome: outcome(head.and_then(|r| r.finished.as_deref())),
                exit_code,
                exit_signal,
                manifest_sha256: head.and_then(|r| r.manifest_sha256.map(|d| hex::encode(d.0))),
                published_dir: head.and_then(|r| r.published_dir.clone()),
                worker_journal_head: head.map(|r| hex::encode(r.head.0)),
                worker_journal_seq: head.map(|r| r.last_seq),
            },
        }
    }

    /// One selected worker's timeline and evidence row (its track is used up).
    fn worker_rows(&mut self, id: &Uuid) -> (WorkerTimeline, EvidenceRow) {
        let (name, pool) = self.name_of(id);
        let FinalState {
            state,
            cpus,
            mem_mb,
            placement,
        } = self.final_state(id);
        let track = self.tracks.remove(id).unwrap_or_default();
        let mut marks = track.marks;
        marks.sort_by_key(|m| m.time_us);
        // Both journals may record one milestone (the step seen, the payload started):
        // the first time it happened is the one drawn; the event table keeps both.
        let mut drawn = HashSet::new();
        marks.retain(|m| drawn.insert(m.what));
        let head = if self.verdict.is_some() {
            track.at_verdict.as_ref()
        } else {
            track.ingested.as_ref()
        };
        let evidence = self.evidence_row(id, &name, &state, head, track.exit);
        let ingested = track.ingested.as_ref();
        let segment = Segment {
            job_id: track.job_id,
            state_class: track
                .state_class
                .or_else(|| ingested.and_then(|r| r.state_class.clone())),
            published_dir: track
                .published_dir
                .or_else(|| ingested.and_then(|r| r.published_dir.clone())),
            ..Segment::of(&self.state.jobs.continuations, id)
        };
        let timeline = WorkerTimeline {
            worker: name,
            submission_id: id.to_string(),
            pool,
            state,
            cpus,
            mem_mb,
            node: placement.as_ref().map(|p| p.node.clone()),
            gpus: placement.as_ref().map_or(0, |p| p.gpus),
            step_gpus: track.step_gpus,
            launch_failure: track.launch_failure,
            marks,
            allocation_end: track.allocation_end.map(Micros::to_rfc3339),
            allocation_end_us: track.allocation_end.map(|t| t.0),
            shutdown_deadline: track.deadline.map(|(t, _)| t.to_rfc3339()),
            shutdown_deadline_us: track.deadline.map(|(t, _)| t.0),
            shutdown_deadline_source: track.deadline.map(|(_, s)| s),
            segment,
        };
        (timeline, evidence)
    }

    pub fn finish(mut self, audit: AuditInput, chain_at_verdict: Option<String>) -> Report {
        if let Some(v) = self.verdict.as_mut() {
            v.chain_head = chain_at_verdict;
        }
        let ids = self.selected.ids.clone();
        let (workers, evidence): (Vec<_>, Vec<_>) =
            ids.iter().map(|id| self.worker_rows(id)).unzip();
        self.events.sort_by_key(|e| (e.time_us, e.seq));
        let audit = self.audit_section(audit, &evidence);
        Report {
            span: self
                .first
                .zip(self.last)
                .map(|(f, l)| (f.to_rfc3339(), l.to_rfc3339())),
            span_us: self.first.zip(self.last).map(|(f, l)| (f.0, l.0)),
            journal_events: self.state.events,
            subject: self.selected.subject.clone(),
            chains: lineage::rows(&workers),
            workers,
            workers_truncated: self.selected.truncated,
            budget: self.budget.into_values().collect(),
            events: self.events,
            events_dropped: self.events_dropped,
            evidence,
            verdict: self.verdict,
            audit,
        }
    }

    fn audit_section(&self, audit: AuditInput, evidence: &[EvidenceRow]) -> AuditSection {
        let mut findings = Vec::new();
        if let Some(d) = &audit.damage {
            findings.push(AuditFinding {
                seq: None,
                what: FindingKind::Damage,
                detail: format!("the journal is {}: {d}", audit.journal_status),
            });
        }
        let ids: Vec<String> = self.selected.ids.iter().map(Uuid::to_string).collect();
        for v in &audit.violations {
            if self.about.contains(&v.seq) || ids.iter().any(|id| v.detail.contains(id)) {
                findings.push(AuditFinding {
                    seq: Some(v.seq),
                    what: FindingKind::Violation,
                    detail: format!("{} ({}): {}", v.rule, v.kind, v.detail),
                });
            }
        }
        for o in &audit.overrides {
            if self.about.contains(&o.seq) || ids.iter().any(|id| o.subject.contains(id)) {
                findings.push(AuditFinding {
                    seq: Some(o.seq),
                    what: FindingKind::Override,
                    detail: format!(
                        "{} of {} by {}: {} (an operator decision, not proof)",
                        o.kind, o.subject, o.user, o.reason
                    ),
                });
            }
        }
        for (dir, problems) in &audit.evidence_failures {
            let ours = evidence
                .iter()
                .any(|e| e.published_dir.as_deref() == Some(dir.as_str()))
                || ids.iter().any(|id| dir.contains(id));
            if ours {
                findings.push(AuditFinding {
                    seq: None,
                    what: FindingKind::Evidence,
                    detail: format!("{dir}: {}", problems.join("; ")),
                });
            }
        }
        AuditSection {
            status: audit.status,
            journal_status: audit.journal_status,
            violation_count: audit.violation_count,
            override_count: audit.override_count,
            findings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{test_envelope, Sha256Digest};
    use crate::policy::fixtures::{self, envelopes};

    use crate::event::pool::*;

    use crate::event::trial::*;
    use crate::event::worker::*;

    /// Pool `p` attached to job 9 on node `n`.
    fn attached() -> Event {
        Event::PoolAttached(fixtures::attached("p", 9, "n", 4))
    }

    fn intent(id: Uuid, worker: &str) -> Event {
        Event::WorkerSubmitIntent(fixtures::intent("p", worker, id))
    }

    /// A trial whose worker joined after its intent (as `pool submit` writes it), in a pool
    /// that another, unrelated worker also uses.
    fn journal(sid: Uuid, other: Uuid) -> Vec<Envelope> {
        envelopes([
            attached(),
            Event::TrialOpened(fixtures::opened("t")),
            intent(other, "x"),
            intent(sid, "w"),
            Event::TrialWorkerJoined(TrialWorkerJoined {
                trial: "t".into(),
                submission_id: sid,
            }),
            Event::WorkerLaunched(WorkerLaunched {
                submission_id: sid,
                srun_pid: 1,
            }),
            Event::WorkerTerminal(WorkerTerminal {
                submission_id: sid,
                proof: "gone".into(),
            }),
        ])
    }

    #[test]
    fn a_trial_covers_its_workers_their_pool_and_their_own_journals() {
        let (sid, other) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let events = journal(sid, other);
        let mut selector = Selector::new(Subject::Trial("t".into()));
        events.iter().for_each(|e| selector.offer(e));
        let selected = selector.finish().unwrap();
        assert_eq!(selected.ids, [sid]);
        assert_eq!(selected.pools.iter().collect::<Vec<_>>(), ["p"]);
        let mut b = Builder::new(selected);
        for e in &events {
            b.offer(e).unwrap();
        }
        assert_eq!(b.workers(), [(sid, "w".to_owned(), Some("p".to_owned()))]);
        let own = |seq, event| {
            let mut env = test_envelope(seq, event);
            env.time = Micros(5 + seq as i64);
            env
        };
        for (seq, event) in (1..).zip([
            WorkerEvent::SupervisorStarted(SupervisorStarted {
                submission_id: sid,
                job_id: Some(9),
                step_id: Some(0),
                node: "n".into(),
                cpu_set: "0".into(),
                deadline: Micros(777),
                grace_s: 0,
                command: vec![],
            }),
            WorkerEvent::PayloadStarted(PayloadStarted { pid: 3 }),
            WorkerEvent::Published(Published {
                dir: "/d".into(),
                manifest_sha256: Sha256Digest([7; 32]),
                files: 1,
                bytes: 1,
                commits: 0,
                patch_bytes: 0,
                took_ms: 1,
            }),
        ]) {
            b.offer_worker(sid, "w", &own(seq, event));
        }
        let audit = AuditInput {
            status: crate::policy::audit::AuditStatus::Violations,
            violations: vec![
                crate::policy::audit::Violation {
                    seq: 7,
                    kind: "WorkerTerminal",
                    rule: "r",
                    detail: "about w".into(),
                },
                crate::policy::audit::Violation {
                    seq: 3,
                    kind: "WorkerSubmitIntent",
                    rule: "r",
                    detail: "about x".into(),
                },
            ],
            ..AuditInput::default()
        };
        let r = b.finish(audit, None);
        let w = &r.workers[0];
        let marks: Vec<_> = w.marks.iter().map(|m| (m.what, m.source)).collect();
        assert_eq!(
            marks,
            [
                (Milestone::Submitted, MarkSource::Coordinator),
                (Milestone::Launched, MarkSource::Coordinator),
                (Milestone::Released, MarkSource::Coordinator),
                (Milestone::Running, MarkSource::Worker),
                (Milestone::Published, MarkSource::Worker),
            ]
        );
        assert_eq!(w.shutdown_deadline_us, Some(777));
        assert_eq!(
            w.shutdown_deadline_source,
            Some(DeadlineSource::WorkerJournal)
        );
        assert_eq!(w.allocation_end_us, Some(1_000_000_000));
        // Events about the trial, its worker and its pool; not the other worker's intent.
        let seqs: Vec<_> = r
            .events
            .iter()
            .filter(|e| e.source == "coordinator")
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 4, 5, 6, 7]);
        assert_eq!(r.events.len(), 9, "and the worker's own three");
        // The budget of its pool, including the unrelated worker it shared it with.
        let cpus: Vec<_> = r.budget[0].points.iter().map(|p| p.cpus).collect();
        assert_eq!(cpus, [0, 1, 2, 1]);
        let findings: Vec<_> = r.audit.findings.iter().map(|f| f.seq).collect();
        assert_eq!(findings, [Some(7)], "only what concerns the trial");
    }

    /// Issue 23: the page says where a pool worker ran and which GPUs its step got.
    #[test]
    fn a_worker_shows_its_node_its_gpus_and_the_indexes_its_step_got() {
        let sid = Uuid::from_u128(1);
        let events = envelopes([
            attached(),
            intent(sid, "w"),
            Event::WorkerPlaced(WorkerPlaced {
                submission_id: sid,
                node: "n".into(),
                gpus: 1,
            }),
        ]);
        let mut selector = Selector::new(Subject::Worker("w".into()));
        events.iter().for_each(|e| selector.offer(e));
        let mut b = Builder::new(selector.finish().unwrap());
        for e in &events {
            b.offer(e).unwrap();
        }
        let placed = b.final_state(&sid).placement.unwrap();
        assert_eq!((placed.node.as_str(), placed.gpus), ("n", 1));
        b.offer_worker(
            sid,
            "w",
            &test_envelope(
                2,
                WorkerEvent::StepDevices(StepDevices {
                    step_gpus: Some("1".into()),
                    cuda_visible_devices: Some("0".into()),
                }),
            ),
        );
        let w = &b.finish(AuditInput::default(), None).workers[0];
        assert_eq!(
            (w.node.as_deref(), w.gpus, w.step_gpus.as_deref()),
            (Some("n"), 1, Some("1"))
        );
    }

    /// Issue 36: a payload that exited 3 is a failure in the evidence, with its code, even
    /// where an older supervisor recorded `completed` and that was ingested.
    #[test]
    fn a_non_zero_exit_is_evidence_of_a_failure() {
        let sid = Uuid::from_u128(1);
        let ingested = WorkerReportIngested {
            submission_id: sid,
            journal_id: Uuid::from_u128(9),
            last_seq: 9,
            head: Sha256Digest([1; 32]),
            preflight: Some("passed".into()),
            publication: Some("published".into()),
            published_dir: Some("/d".into()),
            manifest_sha256: Some(Sha256Digest([7; 32])),
            state_class: Some("sealed".into()),
            finished: Some("completed".into()),
        };
        let events = envelopes([
            attached(),
            intent(sid, "w"),
            Event::WorkerExited(WorkerExited {
                submission_id: sid,
                code: Some(3),
                signal: None,
            }),
            Event::WorkerReportIngested(ingested),
        ]);
        let mut selector = Selector::new(Subject::Worker("w".into()));
        events.iter().for_each(|e| selector.offer(e));
        let mut b = Builder::new(selector.finish().unwrap());
        for e in &events {
            b.offer(e).unwrap();
        }
        let e = &b.finish(AuditInput::default(), None).evidence[0];
        assert_eq!(
            (e.outcome.as_deref(), e.exit_code, e.exit_signal),
            (Some("failed"), Some(3), None)
        );
    }

    #[test]
    fn a_subject_the_journal_never_named_is_not_found() {
        let events = journal(Uuid::from_u128(1), Uuid::from_u128(2));
        for subject in [
            Subject::Trial("nope".into()),
            Subject::Pool("nope".into()),
            Subject::Worker("nope".into()),
        ] {
            let mut s = Selector::new(subject);
            events.iter().for_each(|e| s.offer(e));
            assert!(s.finish().is_none());
        }
        let mut s = Selector::new(Subject::Worker(Uuid::from_u128(2).to_string()));
        events.iter().for_each(|e| s.offer(e));
        assert_eq!(s.finish().unwrap().ids, [Uuid::from_u128(2)]);
    }
}
