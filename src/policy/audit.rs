//! The audit's rules over the event sequence. Pure: it is fed envelopes in seq order and says
//! which rule each offending event breaks.
//!
//! Rules:
//! - `effect-without-intent`: an outcome (launch, step, stop, exit, release, report) for a
//!   submission whose intent was never journaled before it;
//! - `released-twice`: a budget released (terminal proof, or a definite failure) a second time;
//! - `release-without-proof`: a terminal event with an empty proof;
//! - `duplicate-intent`: a submission id used by two intents;
//! - `intent-outside-pool`: a worker intent for a pool that is not attached at that moment;
//! - `attach-twice` / `detach-holding`: a pool attached again while attached, or detached while
//!   a worker in it still holds budget;
//! - `trial-reopened` / `trial-unknown`: a trial opened twice, or joined or judged without
//!   being opened;
//! - `join-after-verdict`: a worker joining a trial that was already judged;
//! - `verdict-relabelled`: a second verdict for one trial (a verdict is never replaced);
//! - `passed-without-evidence`: a `passed` verdict with no workers, or with a worker that had
//!   not ended, had not completed, or had published nothing.
//!
//! - `continued-while-live`: a successor's intent (its receipt, `WorkerContinued`, is in the
//!   intent's commit) before its predecessor's budget was released with proof (two
//!   generations of a worker live at once);
//! - `continued-unasked`: a continuation its predecessor did not ask for (`ContinuationAsked`:
//!   none, no continuation left of N, another cause, a crash-class state not allowed), or a second
//!   one of the same predecessor;
//! - `generation-skipped`: a successor's generation that is not its predecessor's plus one, or
//!   a successor asking more continuations than its predecessor had left less one;
//! - `resumed-unverified` (after the replay, from the worker journals: `lineage`): a successor
//!   whose receipt names no publication, or one its predecessor's own `Published` record does
//!   not name, or whose own `ResumedFrom` names another manifest (or none, its payload started).
//!
//! Operator decisions (`dispatch forget`) are no violation, and no proof: each is listed in
//! `overrides`. A forgotten worker's budget counts as released by that decision.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use uuid::Uuid;

use crate::event::pool::{PoolCreateFailed, PoolCreateJob, PoolOwned};
use crate::event::session::{SessionJobSubmitted, SessionSubmitFailed};
use crate::event::{Envelope, Event};

/// Violations kept in full; beyond this only the count grows.
pub const MAX_VIOLATIONS_KEPT: usize = 1000;

/// The audit's verdict on a journal (`dispatch audit`'s `status`, and its exit: 0, 1, 5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditStatus {
    /// Intact, replayed, every rule kept, the snapshot and the evidence agreeing.
    #[default]
    Ok,
    /// Intact, but a rule broken, a reducer refused, the snapshot disagreeing or evidence
    /// failing.
    Violations,
    /// The journal itself is damaged.
    Damaged,
}

crate::display_as_serde!(AuditStatus);

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub seq: u64,
    pub kind: &'static str,
    pub rule: &'static str,
    pub detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Budget {
    Held,
    Released { seq: u64 },
}

/// One entry per submission and per attached pool: the audit's memory grows with those, not
/// with the number of events.
#[derive(Debug, Default)]
pub struct Auditor {
    workers: HashMap<Uuid, (String, Budget)>,
    jobs: HashMap<Uuid, Budget>,
    session_submissions: HashSet<Uuid>,
    pools: HashMap<String, usize>,
    /// `pool create`s seen (their ids), and pools whose release began.
    creations: HashSet<Uuid>,
    releasing: HashSet<String>,
    /// Per trial: the seq of its verdict, once judged.
    trials: HashMap<String, Option<u64>>,
    /// Per submission that asked to be continued: what it asked, and its generation.
    continuations: HashMap<Uuid, Lineage>,
    /// Per submission: its intent's seq, its worker's name and its pool (none for its own job).
    submitted: HashMap<Uuid, lineage::Submitted>,
    /// Every continuation, in journal order, for the checks of its publication.
    links: Vec<lineage::Link>,
    violations: Vec<Violation>,
    violation_count: u64,
    overrides: Vec<Override>,
    override_count: u64,
    merges: Vec<MergeNote>,
    events: u64,
}

mod lineage;
use lineage::Lineage;
pub use lineage::{GenerationJournal, Link};

/// Rules a single event breaks on its own: no order of branches explains them.
const BROKEN_IN_ANY_ORDER: &[&str] = &["release-without-proof", "passed-without-evidence"];

/// Merges kept in full; beyond this only the last one's range is honoured.
pub const MAX_MERGES_KEPT: usize = 64;

/// A fork's merge (journal-format.md §8.1) and what in its range only the merge explains: a
/// branch's event meeting what the other branch did first (a second attach, a second release,
/// a trial opened on both), kept as evidence and changing nothing, so not a violation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MergeNote {
    /// The `JournalMerged` event's seq; the branches' events are the next `events`.
    pub seq: u64,
    pub common_seq: u64,
    pub branches: u64,
    pub events: u64,
    pub saved_as: String,
    pub explained_count: u64,
    pub explained: Vec<Violation>,
}

/// An operator decision: something given up without proof.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Override {
    pub seq: u64,
    pub kind: &'static str,
    /// The worker (with its submission id) or the session it gave up.
    pub subject: String,
    pub user: String,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct Findings {
    pub events: u64,
    pub violation_count: u64,
    pub violations: Vec<Violation>,
    /// Submissions whose budget is still held at the end (not a violation: unknown outcomes
    /// keep their budget by design).
    pub held: u64,
    /// Every operator decision (kept in full up to `MAX_VIOLATIONS_KEPT`), and their number.
    pub override_count: u64,
    pub overrides: Vec<Override>,
    /// Every merge of a fork, with the repeats it explains.
    pub merges: Vec<MergeNote>,
}

impl Auditor {
    fn flag(&mut self, env: &Envelope, rule: &'static str, detail: String) {
        self.flag_at(env.seq, env.event.kind_name(), rule, detail);
    }

    /// A violation by the event at `seq` (of `kind`), found after the replay.
    fn flag_at(&mut self, seq: u64, kind: &'static str, rule: &'static str, detail: String) {
        let violation = Violation {
            seq,
            kind,
            rule,
            detail,
        };
        if let Some(merge) = self.merges.last_mut() {
            let merged = (merge.seq + 1..=merge.seq + merge.events).contains(&seq);
            if merged && !BROKEN_IN_ANY_ORDER.contains(&rule) {
                merge.explained_count += 1;
                if merge.explained.len() < MAX_VIOLATIONS_KEPT {
                    merge.explained.push(violation);
                }
                return;
            }
        }
        self.violation_count += 1;
        if self.violations.len() < MAX_VIOLATIONS_KEPT {
            self.violations.push(violation);
        }
    }

    /// `effect-without-intent`: an outcome for `subject` with no `intent` journaled before it.
    fn no_intent(&mut self, env: &Envelope, intent: &str, subject: impl std::fmt::Display) {
        self.flag(
            env,
            "effect-without-intent",
            format!("no {intent} for {subject} before it"),
        );
    }

    fn merged(&mut self, env: &Envelope, m: &crate::event::JournalMerged) {
        if self.merges.len() == MAX_MERGES_KEPT {
            self.merges.remove(0);
        }
        self.merges.push(MergeNote {
            seq: env.seq,
            common_seq: m.common_seq,
            branches: m.branches.len() as u64,
            events: m.events,
            saved_as: m.saved_as.clone(),
            explained_count: 0,
            explained: Vec::new(),
        });
    }

    fn overridden(&mut self, env: &Envelope, subject: String, reason: &str) {
        self.override_count += 1;
        if self.overrides.len() < MAX_VIOLATIONS_KEPT {
            self.overrides.push(Override {
                seq: env.seq,
                kind: env.event.kind_name(),
                subject,
                user: env.actor.user.clone(),
                reason: reason.to_owned(),
            });
        }
    }

    fn worker_effect(&mut self, env: &Envelope, id: Uuid) -> Option<Budget> {
        match self.workers.get(&id) {
            Some((_, b)) => Some(*b),
            None => {
                self.no_intent(env, "WorkerSubmitIntent", id);
                None
            }
        }
    }

    /// An outcome that needs the intent but releases nothing.
    fn touch_worker(&mut self, env: &Envelope, id: Uuid) {
        let _ = self.worker_effect(env, id);
    }

    /// A definite failure: nothing of submission `id` was created, its budget is released and
    /// a continuation it was is undone (`lineage`).
    fn launch_failed(&mut self, env: &Envelope, id: Uuid, definite: bool) {
        if !definite {
            return self.touch_worker(env, id);
        }
        self.never_created(id);
        self.release_worker(env, id)
    }

    fn submit_failed(&mut self, env: &Envelope, id: Uuid, definite: bool) {
        if definite {
            self.never_created(id);
        }
        self.job_effect(env, id, definite)
    }

    fn release_worker(&mut self, env: &Envelope, id: Uuid) {
        match self.worker_effect(env, id) {
            Some(Budget::Released { seq }) => self.flag(
                env,
                "released-twice",
                format!("submission {id} was already released at seq {seq}"),
            ),
            Some(Budget::Held) => {
                if let Some((pool, b)) = self.workers.get_mut(&id) {
                    *b = Budget::Released { seq: env.seq };
                    let pool = pool.clone();
                    if let Some(n) = self.pools.get_mut(&pool) {
                        *n = n.saturating_sub(1);
                    }
                }
            }
            None => {}
        }
    }

    fn job_effect(&mut self, env: &Envelope, id: Uuid, releases: bool) {
        match self.jobs.get(&id).copied() {
            None => self.no_intent(env, "JobSubmitIntent", id),
            Some(Budget::Released { seq }) if releases => self.flag(
                env,
                "released-twice",
                format!("submission {id} was already released at seq {seq}"),
            ),
            Some(_) if releases => {
                self.jobs.insert(id, Budget::Released { seq: env.seq });
            }
            Some(_) => {}
        }
    }

    /// Each event to the rule (or the family of rules) it can break; the rules are the
    /// functions below, in this order.
    pub fn observe(&mut self, env: &Envelope) {
        self.events += 1;
        match &env.event {
            Event::JournalMerged(m) => self.merged(env, m),
            Event::PoolAttached(e) => self.pool_attached(env, &e.pool),
            Event::PoolDetached(e) => self.pool_detached(env, &e.pool),
            Event::WorkerSubmitIntent(e) => self.worker_intent(env, e),
            Event::WorkerLaunched(e) => self.touch_worker(env, e.submission_id),
            Event::WorkerStepObserved(e) => self.touch_worker(env, e.submission_id),
            Event::WorkerStopIntent(e) => self.touch_worker(env, e.submission_id),
            Event::WorkerExited(e) => self.touch_worker(env, e.submission_id),
            Event::WorkerAssetsBound(e) if self.jobs.contains_key(&e.submission_id) => {
                self.job_effect(env, e.submission_id, false)
            }
            Event::WorkerAssetsBound(e) => self.touch_worker(env, e.submission_id),
            Event::WorkerReportIngested(e) => self.touch_worker(env, e.submission_id),
            Event::WorkerJournalDamaged(e) => self.touch_worker(env, e.submission_id),
            Event::WorkerDevicesIngested(e) => self.touch_worker(env, e.submission_id),
            Event::WorkerLaunchFailed(e) => self.launch_failed(env, e.submission_id, e.definite),
            Event::WorkerTerminal(e) => {
                self.require_proof(
                    env,
                    &e.proof,
                    format_args!("submission {}", e.submission_id),
                );
                self.release_worker(env, e.submission_id);
            }
            Event::JobSubmitIntent(e) => self.job_intent(env, e.submission_id, &e.worker),
            Event::JobSubmitted(e) => self.job_effect(env, e.submission_id, false),
            Event::JobStopIntent(e) => self.job_effect(env, e.submission_id, false),
            Event::JobNamed(e) => self.job_effect(env, e.submission_id, false),
            Event::JobSubmitFailed(e) => self.submit_failed(env, e.submission_id, e.definite),
            Event::JobTerminal(e) => {
                self.require_proof(
                    env,
                    &e.proof,
                    format_args!("submission {}", e.submission_id),
                );
                self.job_effect(env, e.submission_id, true);
            }
            Event::PoolCreateIntent(e) => {
                self.creations.insert(e.creation_id);
            }
            Event::PoolCreateJob(PoolCreateJob { creation_id, .. })
            | Event::PoolCreateFailed(PoolCreateFailed { creation_id, .. })
            | Event::PoolOwned(PoolOwned { creation_id, .. }) => {
                self.creation_effect(env, *creation_id)
            }
            Event::PoolReleaseIntent(e) => self.pool_release_intent(env, &e.pool),
            Event::PoolReleased(e) => self.pool_released(env, &e.pool, &e.proof),
            Event::SessionLaunchIntent(e) => {
                self.session_submissions.insert(e.submission_id);
            }
            Event::WorkerForgotten(e) => self.worker_forgotten(env, e),
            Event::SessionForgotten(e) => {
                self.overridden(env, format!("session {}", e.session), &e.reason);
            }
            Event::AllocationStolen(e) => self.allocation_stolen(env, e),
            Event::WorkerContinued(e) => self.continued(env, e),
            Event::ContinuationAsked(e) => self.continuation_asked(env, e),
            Event::TrialOpened(e) => self.trial_opened(env, &e.trial),
            Event::TrialWorkerJoined(e) => self.trial_joined(env, &e.trial, e.submission_id),
            Event::TrialJudged(e) => self.judged(env, e),
            Event::SessionJobSubmitted(SessionJobSubmitted { submission_id, .. })
            | Event::SessionSubmitFailed(SessionSubmitFailed { submission_id, .. }) => {
                self.session_effect(env, *submission_id)
            }
            _ => {}
        }
    }

    /// `attach-twice`: the pool is attached afresh either way, its count of holders reset.
    fn pool_attached(&mut self, env: &Envelope, pool: &str) {
        if self.pools.contains_key(pool) {
            self.flag(
                env,
                "attach-twice",
                format!("pool {pool:?} is already attached"),
            );
        }
        self.pools.insert(pool.to_owned(), 0);
    }

    /// `detach-holding`, or `effect-without-intent` for a pool never attached.
    fn pool_detached(&mut self, env: &Envelope, pool: &str) {
        match self.pools.remove(pool) {
            Some(0) => {}
            Some(n) => self.flag_holding(env, pool, n),
            None => self.flag(
                env,
                "effect-without-intent",
                format!("pool {pool:?} was not attached"),
            ),
        }
    }

    /// `detach-holding`: a pool let go while `n` of its workers still hold budget.
    fn flag_holding(&mut self, env: &Envelope, pool: &str, n: usize) {
        self.flag(
            env,
            "detach-holding",
            format!("pool {pool:?} still had {n} worker(s) holding budget"),
        );
    }

    /// `duplicate-intent`: whether `id` is new to both workers and jobs (flagged if not).
    fn fresh_submission(&mut self, env: &Envelope, id: Uuid) -> bool {
        let used = self.workers.contains_key(&id) || self.jobs.contains_key(&id);
        if used {
            self.flag(
                env,
                "duplicate-intent",
                format!("submission id {id} used again"),
            );
        }
        !used
    }

    /// `duplicate-intent`, `intent-outside-pool`; otherwise the worker holds budget in `pool`.
    fn worker_intent(&mut self, env: &Envelope, e: &crate::event::pool::WorkerSubmitIntent) {
        let (id, pool) = (e.submission_id, e.pool.as_str());
        self.submitted_as(env, id, &e.worker, Some(pool));
        if !self.fresh_submission(env, id) {
            return;
        }
        match self.pools.get_mut(pool) {
            Some(n) => *n += 1,
            None => {
                self.flag(
                    env,
                    "intent-outside-pool",
                    format!("pool {pool:?} is not attached"),
                );
                return;
            }
        }
        self.workers.insert(id, (pool.to_owned(), Budget::Held));
    }

    /// `duplicate-intent`; otherwise the job holds budget.
    fn job_intent(&mut self, env: &Envelope, id: Uuid, worker: &str) {
        self.submitted_as(env, id, worker, None);
        if self.fresh_submission(env, id) {
            self.jobs.insert(id, Budget::Held);
        }
    }

    /// `release-without-proof`: a terminal event whose proof is empty (`subject` names it).
    fn require_proof(&mut self, env: &Envelope, proof: &str, subject: std::fmt::Arguments<'_>) {
        if proof.trim().is_empty() {
            self.flag(
                env,
                "release-without-proof",
                format!("{subject} released with no proof"),
            );
        }
    }

    /// `effect-without-intent` for a `pool create` outcome with no intent before it.
    fn creation_effect(&mut self, env: &Envelope, creation_id: Uuid) {
        if !self.creations.contains(&creation_id) {
            self.no_intent(
                env,
                "PoolCreateIntent",
                format_args!("creation {creation_id}"),
            );
        }
    }

    /// `effect-without-intent` for releasing a pool not attached; its release begins anyway.
    fn pool_release_intent(&mut self, env: &Envelope, pool: &str) {
        if !self.pools.contains_key(pool) {
            self.flag(
                env,
                "effect-without-intent",
                format!("pool {pool:?} was not attached"),
            );
        }
        self.releasing.insert(pool.to_owned());
    }

    /// A pool's release: its intent first, a proof, and no worker in it still holding budget.
    fn pool_released(&mut self, env: &Envelope, pool: &str, proof: &str) {
        if !self.releasing.remove(pool) {
            self.no_intent(env, "PoolReleaseIntent", format_args!("pool {pool:?}"));
        }
        self.require_proof(env, proof, format_args!("pool {pool:?}"));
        if let Some(n) = self.pools.remove(pool).filter(|n| *n > 0) {
            self.flag_holding(env, pool, n);
        }
    }

    /// An operator's `forget`: no violation, but the budget counts as released by it.
    fn worker_forgotten(&mut self, env: &Envelope, e: &crate::event::overrides::WorkerForgotten) {
        let id = e.submission_id;
        if self.jobs.contains_key(&id) {
            self.job_effect(env, id, true);
        } else {
            self.release_worker(env, id);
        }
        self.overridden(env, format!("worker {} ({id})", e.worker), &e.reason);
    }

    /// An operator took an allocation over: no violation, listed as an override.
    fn allocation_stolen(&mut self, env: &Envelope, e: &crate::event::overrides::AllocationStolen) {
        let subject = format!(
            "allocation {} (pool {}), held by {}",
            e.job_id, e.pool, e.holder
        );
        self.overridden(env, subject, &e.reason);
    }

    /// `trial-reopened`.
    fn trial_opened(&mut self, env: &Envelope, trial: &str) {
        if self.trials.contains_key(trial) {
            self.flag(
                env,
                "trial-reopened",
                format!("trial {trial:?} was already opened"),
            );
        } else {
            self.trials.insert(trial.to_owned(), None);
        }
    }

    /// `trial-unknown`, `join-after-verdict`, and `effect-without-intent` for a worker that
    /// joins with no submission intent.
    fn trial_joined(&mut self, env: &Envelope, trial: &str, id: Uuid) {
        match self.trials.get(trial) {
            None => self.flag(
                env,
                "trial-unknown",
                format!("trial {trial:?} was never opened"),
            ),
            Some(Some(seq)) => self.flag(
                env,
                "join-after-verdict",
                format!("trial {trial:?} was judged at seq {seq}"),
            ),
            Some(None) => {}
        }
        if !self.workers.contains_key(&id) && !self.jobs.contains_key(&id) {
            self.no_intent(env, "submission intent", id);
        }
    }

    /// `effect-without-intent` for a session job's outcome with no launch intent before it.
    fn session_effect(&mut self, env: &Envelope, submission_id: Uuid) {
        if !self.session_submissions.contains(&submission_id) {
            self.no_intent(env, "SessionLaunchIntent", submission_id);
        }
    }

    fn judged(&mut self, env: &Envelope, e: &crate::event::trial::TrialJudged) {
        use crate::event::trial::Verdict;
        match self.trials.get(&e.trial).copied() {
            None => {
                self.flag(
                    env,
                    "trial-unknown",
                    format!("trial {:?} was never opened", e.trial),
                );
                return;
            }
            Some(Some(seq)) => {
                self.flag(
                    env,
                    "verdict-relabelled",
                    format!("trial {:?} was already judged at seq {seq}", e.trial),
                );
                return;
            }
            Some(None) => {
                self.trials.insert(e.trial.clone(), Some(env.seq));
            }
        }
        if e.verdict == Verdict::Passed {
            let problems: Vec<String> = e
                .evidence
                .iter()
                .filter_map(|ev| crate::policy::trial::evidence_problem(ev, true))
                .collect();
            if e.evidence.is_empty() || !problems.is_empty() {
                let why = if problems.is_empty() {
                    "no workers".to_owned()
                } else {
                    problems.join("; ")
                };
                self.flag(
                    env,
                    "passed-without-evidence",
                    format!("trial {:?} passed with {why}", e.trial),
                );
            }
        }
    }

    pub fn finish(self) -> Findings {
        let held = self
            .workers
            .values()
            .filter(|(_, b)| *b == Budget::Held)
            .count()
            + self.jobs.values().filter(|b| **b == Budget::Held).count();
        Findings {
            events: self.events,
            violation_count: self.violation_count,
            violations: self.violations,
            held: held as u64,
            override_count: self.override_count,
            overrides: self.overrides,
            merges: self.merges,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::test_job;

    use crate::event::pool::*;
    use crate::policy::fixtures;

    pub(super) fn run(events: Vec<Event>) -> Findings {
        let mut a = Auditor::default();
        for (i, event) in events.into_iter().enumerate() {
            a.observe(&crate::event::test_envelope(i as u64 + 1, event));
        }
        a.finish()
    }

    pub(super) fn attach() -> Event {
        Event::PoolAttached(fixtures::attached("p", 1, "n", 4))
    }

    pub(super) fn intent(id: u128) -> Event {
        Event::WorkerSubmitIntent(fixtures::intent("p", "w", Uuid::from_u128(id)))
    }

    pub(super) fn terminal(id: u128, proof: &str) -> Event {
        Event::WorkerTerminal(WorkerTerminal {
            submission_id: Uuid::from_u128(id),
            proof: proof.into(),
        })
    }

    pub(super) fn rules(f: &Findings) -> Vec<&'static str> {
        f.violations.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn the_status_prints_as_its_json_says() {
        for (s, text) in [
            (AuditStatus::Ok, "ok"),
            (AuditStatus::Violations, "violations"),
            (AuditStatus::Damaged, "damaged"),
        ] {
            assert_eq!(s.to_string(), text);
            assert_eq!(serde_json::to_value(s).unwrap(), text);
        }
    }

    #[test]
    fn a_well_formed_history_has_no_violation() {
        let f = run(vec![
            attach(),
            intent(1),
            Event::WorkerLaunched(WorkerLaunched {
                submission_id: Uuid::from_u128(1),
                srun_pid: 2,
            }),
            terminal(1, "absent from listing"),
            intent(2),
            Event::PoolDetached(PoolDetached { pool: "q".into() }),
        ]);
        // Detaching an unknown pool is the only problem.
        assert_eq!(rules(&f), ["effect-without-intent"]);
        assert_eq!(f.held, 1);
    }

    #[test]
    fn a_created_pool_is_released_only_after_its_intent_with_proof_and_no_worker_held() {
        let id = Uuid::from_u128(9);
        let created = |job_id| {
            vec![
                Event::PoolCreateIntent(fixtures::create_intent("p", 9)),
                Event::PoolCreateJob(PoolCreateJob {
                    pool: "p".into(),
                    creation_id: id,
                    job_id,
                    how: "salloc".into(),
                }),
                attach(),
                Event::PoolOwned(PoolOwned {
                    pool: "p".into(),
                    creation_id: id,
                    job_id,
                }),
            ]
        };
        let released = |proof: &str| {
            Event::PoolReleased(PoolReleased {
                pool: "p".into(),
                job_id: test_job(1),
                proof: proof.into(),
            })
        };
        let intent_to_release = Event::PoolReleaseIntent(PoolReleaseIntent {
            pool: "p".into(),
            job_id: test_job(1),
        });
        let mut good = created(test_job(1));
        good.extend([
            intent_to_release.clone(),
            released("squeue shows job 1 CANCELLED"),
        ]);
        assert_eq!(rules(&run(good)), Vec::<&str>::new());

        let mut no_intent = created(test_job(1));
        no_intent.push(released("squeue shows job 1 CANCELLED"));
        assert_eq!(rules(&run(no_intent)), ["effect-without-intent"]);

        let mut holding = created(test_job(1));
        holding.extend([intent(1), intent_to_release, released(" ")]);
        assert_eq!(
            rules(&run(holding)),
            ["release-without-proof", "detach-holding"]
        );

        let orphan = vec![Event::PoolOwned(PoolOwned {
            pool: "p".into(),
            creation_id: id,
            job_id: test_job(1),
        })];
        assert_eq!(rules(&run(orphan)), ["effect-without-intent"]);
    }

    #[test]
    fn each_rule_is_caught() {
        let f = run(vec![
            Event::WorkerLaunched(WorkerLaunched {
                submission_id: Uuid::from_u128(9),
                srun_pid: 2,
            }),
            intent(1),
            attach(),
            intent(2),
            intent(2),
            terminal(2, ""),
            terminal(2, "again"),
            intent(3),
            Event::PoolDetached(PoolDetached { pool: "p".into() }),
            attach(),
            attach(),
        ]);
        assert_eq!(
            rules(&f),
            [
                "effect-without-intent",
                "intent-outside-pool",
                "duplicate-intent",
                "release-without-proof",
                "released-twice",
                "detach-holding",
                "attach-twice",
            ]
        );
    }

    #[test]
    fn trial_rules_are_caught() {
        use crate::event::trial::*;
        let open = |t: &str| Event::TrialOpened(fixtures::opened(t));
        let join = |t: &str, id: u128| {
            Event::TrialWorkerJoined(TrialWorkerJoined {
                trial: t.into(),
                submission_id: Uuid::from_u128(id),
            })
        };
        let judge = |t: &str, verdict, state: &str, published: bool| {
            Event::TrialJudged(TrialJudged {
                trial: t.into(),
                verdict,
                reason: String::new(),
                evidence: vec![fixtures::evidence(state, Some("completed"), published)],
            })
        };
        let good = run(vec![
            attach(),
            open("a"),
            intent(1),
            join("a", 1),
            terminal(1, "gone"),
            judge("a", Verdict::Passed, "released", true),
        ]);
        assert_eq!(rules(&good), Vec::<&str>::new());
        let bad = run(vec![
            attach(),
            open("a"),
            open("a"),
            intent(1),
            join("a", 1),
            join("nope", 1),
            join("a", 9),
            judge("a", Verdict::Failed, "running", false),
            judge("a", Verdict::Passed, "released", true),
            join("a", 1),
            open("b"),
            judge("b", Verdict::Passed, "running", true),
            open("c"),
            judge("c", Verdict::Passed, "released", false),
            judge("zz", Verdict::Failed, "released", false),
        ]);
        assert_eq!(
            rules(&bad),
            [
                "trial-reopened",
                "trial-unknown",
                "effect-without-intent",
                "verdict-relabelled",
                "join-after-verdict",
                "passed-without-evidence",
                "passed-without-evidence",
                "trial-unknown",
            ]
        );
    }

    #[test]
    fn a_forgotten_worker_is_an_override_released_once_never_proof() {
        use crate::event::overrides::WorkerForgotten;
        let forgot = || {
            Event::WorkerForgotten(WorkerForgotten {
                submission_id: Uuid::from_u128(1),
                worker: "w".into(),
                state: "unknown".into(),
                job_id: Some(test_job(1)),
                step_id: None,
                reason: "accounting lost".into(),
            })
        };
        let f = run(vec![attach(), intent(1), forgot()]);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert_eq!(f.held, 0);
        assert_eq!(f.override_count, 1);
        assert_eq!(
            f.overrides[0].subject,
            format!("worker w ({})", Uuid::from_u128(1))
        );
        assert_eq!(f.overrides[0].reason, "accounting lost");
        // A proof after the decision, or a second decision, releases it twice.
        let f = run(vec![attach(), intent(1), forgot(), terminal(1, "gone")]);
        assert_eq!(rules(&f), ["released-twice"]);
        let f = run(vec![attach(), intent(1), forgot(), forgot()]);
        assert_eq!(rules(&f), ["released-twice"]);
        // Forgetting what was never submitted has no intent.
        let f = run(vec![attach(), forgot()]);
        assert_eq!(rules(&f), ["effect-without-intent"]);
    }
}
