//! Continuation in the seeded simulation (issue 37 item 7): workers that asked to be continued
//! (`--continue N`), the journals their supervisors leave, and the invariants of their chains.
//!
//! A worker that asked is given a fate when the driver first sees its receipt ([`Fate::draw`]):
//! what its payload and supervisor did (SIGTERM at its early-shutdown deadline, a checkpoint
//! declared, a verified publication, its state's class). The model writes that worker journal,
//! as the supervisor would have, the moment the worker's job or step is over in the model
//! (`World::write_due_journals`), so whatever proves the end to dispatch comes after it. A
//! worker whose job or step never started leaves no journal.
//!
//! [`Lineage`] collects the chains from the coordinator's journal; [`Lineage::check`] holds
//! after every step, [`Lineage::check_final`] once the faults stopped and every job is over.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use dispatch::event::pool::{ContinuationAsked, WorkerContinued};
use dispatch::event::worker::{CheckpointDeclared, CleanedUp, Published, ShutdownSignalled};
use dispatch::event::{Envelope, Event, Micros, Sha256Digest, WorkerEvent};
use dispatch::journal::{JournalWriter, Options};
use dispatch::ops::continuation::{Continuation, ContinueOutcome};
use dispatch::ops::spec::ContinueAsk;
use dispatch::policy::continuation::Cause;
use dispatch::state::State;
use uuid::Uuid;

use super::{Rng, World};

/// The states a crash-class worker is in.
pub const CRASH_CLASS: &str = "crash_class_partial";

/// What a submission asks (`--continue N [--continue-on …] [--continue-crashed]`): drawn for
/// about a third of the submissions.
pub fn draw_ask(r: &mut Rng) -> Option<ContinueAsk> {
    if !r.chance(35) {
        return None;
    }
    // Every cause (the default) most of the time, else a few.
    let causes = if r.chance(60) {
        Cause::ALL.to_vec()
    } else {
        let some: Vec<Cause> = Cause::ALL.into_iter().filter(|_| r.chance(50)).collect();
        if some.is_empty() {
            vec![*r.pick(&Cause::ALL).unwrap()]
        } else {
            some
        }
    };
    Some(ContinueAsk {
        continues: r.range(1, 3) as u32,
        causes,
        crashed: r.chance(35),
    })
}

/// What a worker's own journal says of its end.
#[derive(Clone, Copy, Debug)]
pub struct Fate {
    /// Its supervisor sent SIGTERM at the early-shutdown deadline.
    pub deadline: bool,
    /// Its payload declared a checkpoint.
    pub checkpoint: bool,
    pub published: bool,
    /// `CleanedUp`'s state class; `None`: the supervisor died before its cleanup.
    pub class: Option<&'static str>,
}

impl Fate {
    pub fn draw(r: &mut Rng) -> Fate {
        let deadline = r.chance(35);
        let (checkpoint, published, class) = match r.below(100) {
            // Saved its state and said so (at the deadline, a preemption, …).
            0..=39 => (true, true, Some("checkpointed")),
            // A clean finish that declared a checkpoint: it asked for more.
            40..=51 => (true, true, Some("sealed")),
            // Ignored SIGTERM and was killed after the grace.
            52..=66 => (false, true, Some(CRASH_CLASS)),
            // A clean finish that asked for nothing more.
            67..=74 => (false, true, Some("sealed")),
            // A checkpoint whose publication failed.
            75..=82 => (true, false, Some("checkpointed")),
            83..=87 => (false, true, Some("empty")),
            // The supervisor died before its cleanup.
            _ => (r.chance(50), r.chance(50), None),
        };
        Fate {
            deadline,
            checkpoint,
            published,
            class,
        }
    }

    /// Its state may be resumed from (`policy::continuation::decide`'s rule, written again):
    /// a checkpoint, a clean finish that declared one, or a crash-class state when allowed;
    /// always with a publication.
    pub fn resumable(&self, crashed_allowed: bool) -> bool {
        let class = match self.class {
            Some("checkpointed") => true,
            Some("sealed") => self.checkpoint,
            Some(CRASH_CLASS) => crashed_allowed,
            _ => false,
        };
        class && self.published
    }

    /// The causes its own journal can prove.
    pub fn causes(&self) -> impl Iterator<Item = Cause> {
        let deadline = self.deadline.then_some(Cause::TimeLimit);
        let checkpoint = self.checkpoint.then_some(Cause::Checkpoint);
        deadline.into_iter().chain(checkpoint)
    }

    /// Write the journal the supervisor would have left in `evidence`, on a thread of its own
    /// (the command running now may have failpoints armed on this one).
    pub fn write(&self, evidence: &Path, now: Micros) {
        let (fate, evidence) = (*self, evidence.to_owned());
        std::thread::scope(|s| {
            s.spawn(|| fate.write_here(&evidence, now))
                .join()
                .expect("a worker journal is written")
        });
    }

    fn write_here(&self, evidence: &Path, now: Micros) {
        let dir = dispatch::worker::supervisor::journal_dir(evidence);
        let w = JournalWriter::<WorkerEvent>::open(&dir, Options::default())
            .unwrap_or_else(|e| panic!("worker journal {}: {e}", dir.display()));
        let mut events = Vec::new();
        if self.deadline {
            events.push(WorkerEvent::ShutdownSignalled(ShutdownSignalled {
                signal: "TERM".into(),
                reason: "deadline".into(),
            }));
        }
        if self.checkpoint {
            events.push(WorkerEvent::CheckpointDeclared(CheckpointDeclared {
                marker: evidence.join("checkpoint-declared").display().to_string(),
                declared_at: now,
                code: Some(0),
                signal: None,
                killed_after_grace: false,
            }));
        }
        if self.published {
            events.push(WorkerEvent::Published(Published {
                dir: evidence.with_extension("published").display().to_string(),
                manifest_sha256: Sha256Digest([0x5a; 32]),
                files: 1,
                bytes: 2,
                commits: 0,
                patch_bytes: 0,
                took_ms: 1,
            }));
        }
        if let Some(class) = self.class {
            events.push(WorkerEvent::CleanedUp(CleanedUp {
                removed: vec![],
                kept: vec!["state".into()],
                state_class: class.into(),
                reason: String::new(),
                errors: vec![],
            }));
        }
        for e in events {
            w.append_one(e).expect("a worker journal append");
        }
    }
}

/// A worker that asked, as the model knows it: where its journal goes and what it will say.
#[derive(Clone, Debug)]
pub struct Planned {
    pub evidence: PathBuf,
    pub fate: Fate,
    pub written: bool,
}

/// What the model knows of the end of one submission's job or step.
#[derive(Clone, Debug)]
pub struct Truth {
    /// When its job or step was created (the earliest, if several).
    pub created: i64,
    /// It started running.
    pub started: bool,
    /// When it ended, once every job or step of it has.
    pub ended_at: Option<i64>,
    /// Slurm's word for its end (the job's state; a step's).
    pub word: &'static str,
    /// For a pool step: its allocation's end word (once over), and whether its node was lost.
    pub allocation_word: Option<&'static str>,
    pub node_lost: bool,
}

/// The cause a Slurm state word proves (`policy::continuation`'s reading, written again).
fn cause_of_word(word: &str) -> Option<Cause> {
    match word {
        "TIMEOUT" => Some(Cause::TimeLimit),
        "PREEMPTED" => Some(Cause::Preempted),
        "NODE_FAIL" => Some(Cause::NodeFailure),
        "CANCELLED" | "BOOT_FAIL" | "DEADLINE" | "REVOKED" => Some(Cause::Lost),
        _ => None,
    }
}

impl Truth {
    /// The causes this end certainly had: its own journal's, its own end word's, and its
    /// allocation's end or its node's loss only when its step did not finish by itself first.
    pub fn certain_causes(&self, fate: &Fate) -> BTreeSet<&'static str> {
        if self.word == "COMPLETED" {
            return fate.causes().map(|c| c.as_str()).collect();
        }
        self.causes(fate)
    }

    /// Every cause the model's truth and the worker's journal allow for this end (its
    /// allocation's end and its node's loss even after its step finished: dispatch may learn
    /// of the step's end only from them).
    pub fn causes(&self, fate: &Fate) -> BTreeSet<&'static str> {
        let mut c: BTreeSet<&'static str> = fate.causes().map(|c| c.as_str()).collect();
        c.extend(cause_of_word(self.word).map(|c| c.as_str()));
        if let Some(w) = self.allocation_word {
            c.insert(cause_of_word(w).unwrap_or(Cause::Lost).as_str());
        }
        if self.node_lost {
            c.insert(Cause::NodeFailure.as_str());
        }
        c
    }
}

/// The chains, from the coordinator's journal.
#[derive(Default, Debug)]
pub struct Lineage {
    asked: BTreeMap<Uuid, ContinuationAsked>,
    /// In journal order.
    continued: Vec<WorkerContinued>,
    refused: BTreeMap<Uuid, String>,
    /// Submissions a user's stop was recorded for.
    stopped: BTreeSet<Uuid>,
    /// Submissions proven never to have run (a definite `JobSubmitFailed`,
    /// `WorkerLaunchFailed`), with why.
    never_ran: BTreeMap<Uuid, String>,
}

impl Lineage {
    pub fn observe(&mut self, env: &Envelope) {
        match &env.event {
            Event::ContinuationAsked(e) => {
                self.asked.insert(e.submission_id, e.clone());
            }
            Event::WorkerContinued(e) => self.continued.push(e.clone()),
            Event::ContinuationRefused(e) => {
                self.refused.insert(e.predecessor, e.reason.clone());
            }
            Event::JobStopIntent(e) => {
                self.stopped.insert(e.submission_id);
            }
            Event::WorkerStopIntent(e) => {
                self.stopped.insert(e.submission_id);
            }
            Event::JobSubmitFailed(e) if e.definite => {
                self.never_ran.insert(e.submission_id, e.reason.clone());
            }
            Event::WorkerLaunchFailed(e) if e.definite => {
                self.never_ran.insert(e.submission_id, e.reason.clone());
            }
            _ => {}
        }
    }

    pub fn continuations(&self) -> usize {
        self.continued.len()
    }

    pub fn refusals(&self) -> usize {
        self.refused.len()
    }

    /// Each refusal's reason, without its particulars (for the counts).
    pub fn refusal_reasons(&self) -> impl Iterator<Item = String> + '_ {
        self.refused.values().map(|r| {
            let general = r.split(['(', ':', ',']).next().unwrap_or(r);
            general.trim().replace(|c: char| c.is_ascii_digit(), "")
        })
    }

    /// The invariants that hold after every step.
    pub fn check(&self, w: &World) -> Result<(), String> {
        let mut generation: BTreeMap<Uuid, u32> = BTreeMap::new();
        let mut root_left: BTreeMap<Uuid, u32> = BTreeMap::new();
        let mut seen: BTreeMap<Uuid, Uuid> = BTreeMap::new();
        for e in &self.continued {
            let (p, s) = (e.predecessor, e.submission_id);
            let ctx = || format!("{s} continuing {p} ({} after {})", e.generation, e.cause);
            // Continued again only once its earlier successor was proven never run, and truly
            // never had a job or step.
            let again = |earlier: &Uuid| {
                self.never_ran.contains_key(earlier) && w.truth(*earlier).is_none()
            };
            if seen.insert(p, s).is_some_and(|earlier| !again(&earlier)) {
                return Err(format!("{}: its predecessor was continued twice", ctx()));
            }
            let asked = self
                .asked
                .get(&p)
                .ok_or_else(|| format!("{}: the predecessor asked nothing", ctx()))?;
            // Generations 1, 2, 3…; at most N continuations per chain.
            let g = *generation.entry(p).or_insert(1);
            if e.generation != g + 1 {
                return Err(format!("{}: its predecessor is generation {g}", ctx()));
            }
            generation.insert(s, e.generation);
            let n = *root_left.entry(p).or_insert(asked.continues_left);
            root_left.insert(s, n);
            if e.generation > n + 1 {
                return Err(format!("{}: more than the {n} continuations asked", ctx()));
            }
            match self.asked.get(&s) {
                Some(a) if a.continues_left + 1 != asked.continues_left => {
                    return Err(format!(
                        "{}: the successor asks {} continuations, its predecessor had {}",
                        ctx(),
                        a.continues_left,
                        asked.continues_left
                    ))
                }
                None if asked.continues_left > 1 => {
                    return Err(format!("{}: the successor asks no continuation", ctx()))
                }
                _ => {}
            }
            if self.stopped.contains(&p) {
                return Err(format!("{}: a user stopped the predecessor", ctx()));
            }
            if !asked.causes.contains(&e.cause) {
                return Err(format!("{}: a cause not asked ({:?})", ctx(), asked.causes));
            }
            self.check_against_model(w, e, asked)
                .map_err(|why| format!("{}: {why}", ctx()))?;
        }
        Ok(())
    }

    /// The continuation `e` against the model's truth: the predecessor's end came before the
    /// successor's job or step existed; its cause and state class are what really happened.
    fn check_against_model(
        &self,
        w: &World,
        e: &WorkerContinued,
        asked: &ContinuationAsked,
    ) -> Result<(), String> {
        let planned = w
            .planned
            .get(&e.predecessor)
            .ok_or("the model gave the predecessor no fate")?;
        let before = w
            .truth(e.predecessor)
            .ok_or("the predecessor never had a job or step")?;
        let Some(ended) = before.ended_at else {
            return Err("the predecessor's job or step is still live".to_owned());
        };
        if let Some(after) = w.truth(e.submission_id) {
            if after.created < ended {
                return Err(format!(
                    "the successor's job or step was made at {} before the predecessor's end at {ended}: two live generations",
                    after.created
                ));
            }
        }
        if !before.started {
            return Err("the predecessor never ran".to_owned());
        }
        let crash = planned.fate.class == Some(CRASH_CLASS);
        if e.from_crash_class != crash || (crash && !asked.crashed) {
            return Err(format!(
                "from_crash_class {} for a state {:?}, crash-class allowed {}",
                e.from_crash_class, planned.fate.class, asked.crashed
            ));
        }
        if !planned.fate.resumable(asked.crashed) {
            return Err(format!("its journal says {:?}", planned.fate));
        }
        let causes = before.causes(&planned.fate);
        if !causes.contains(e.cause.as_str()) {
            return Err(format!(
                "the model says it ended by {causes:?} ({before:?}, {:?})",
                planned.fate
            ));
        }
        Ok(())
    }

    /// Continuations whose successor never had a job or step (a crash between its receipt and
    /// its sbatch or srun, then proven never created; or a definite refusal), which nothing
    /// continues again: each lost, with why. Since a successor proven never created makes its
    /// predecessor due again, none is expected.
    pub fn successors_never_run(&self, w: &World) -> Vec<String> {
        self.continued
            .iter()
            .enumerate()
            .filter(|(_, e)| w.truth(e.submission_id).is_none())
            // Its predecessor continued again by a later successor is not lost.
            .filter(|(i, e)| {
                !self.continued[i + 1..]
                    .iter()
                    .any(|later| later.predecessor == e.predecessor)
            })
            .map(|(_, e)| {
                let why = self
                    .never_ran
                    .get(&e.submission_id)
                    .map_or("no failure recorded".to_owned(), |r| {
                        format!("proven never run: {r}")
                    });
                format!(
                    "lost: {} was continued by {} (generation {}, after {}), which never had a \
                     job or step ({why}), and nothing continues it again",
                    e.predecessor, e.submission_id, e.generation, e.cause
                )
            })
            .collect()
    }

    /// Once every job is over and reconcile ran without faults: none lost. Every worker that
    /// ended by causes it asked for (each of them: dispatch may prove any), with a state it
    /// may resume from and a continuation left, was continued, or still waits, said so in the
    /// last reconcile's report with why. None waits without a word.
    pub fn check_final(
        &self,
        w: &World,
        state: &State,
        last_report: &[Continuation],
    ) -> Result<(), String> {
        let waiting = &state.jobs.continuations.asked;
        for (id, c) in waiting.iter().filter(|(_, c)| c.ended.is_some()) {
            let said = last_report.iter().find(|l| l.predecessor == id.to_string());
            match said {
                Some(l) if l.outcome == ContinueOutcome::Waiting && !l.detail.is_empty() => {}
                other => {
                    return Err(format!(
                        "worker {} ({id}) ended ({:?}) and waits, but the last reconcile said {other:?}",
                        c.worker, c.ended
                    ))
                }
            }
        }
        let continued: BTreeSet<Uuid> = self.continued.iter().map(|e| e.predecessor).collect();
        for (id, planned) in &w.planned {
            let (Some(asked), Some(truth)) = (self.asked.get(id), w.truth(*id)) else {
                continue;
            };
            let causes = truth.certain_causes(&planned.fate);
            let due = truth.ended_at.is_some()
                && truth.started
                && !self.stopped.contains(id)
                && asked.continues_left > 0
                && planned.fate.resumable(asked.crashed)
                && !causes.is_empty()
                && causes.iter().all(|c| asked.causes.iter().any(|a| a == c));
            if !due || continued.contains(id) || waiting.contains_key(id) {
                continue;
            }
            return Err(format!(
                "lost: {id} ended by {causes:?} ({truth:?}), all asked ({asked:?}), its journal says \
                 {:?}; not continued: {}",
                planned.fate,
                self.refused
                    .get(id)
                    .map_or("no refusal recorded, and it no longer waits".to_owned(), |r| {
                        format!("refused: {r}")
                    })
            ));
        }
        Ok(())
    }
}
