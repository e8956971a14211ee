//! Reducers: all state is a fold of the journal's events. Pure: no I/O, no clock.

/// A state enum shown by its words: the enum with the derives every state has (serde names
/// are the variants', the snapshot's), `as_str` (the word CLI.md fixes for it) and its
/// [`Word`].
macro_rules! state_words {
    ($(#[$meta:meta])* pub enum $name:ident {
        $($(#[$vmeta:meta])* $variant:ident => $word:literal,)+
    }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }
        }

        impl $crate::state::Word for $name {
            fn as_str(self) -> &'static str {
                <$name>::as_str(self)
            }
        }
    };
}

pub mod asset;
pub mod continuation;
pub mod jobs;
pub mod pool;
pub mod replay;
pub mod session;
pub mod trial;
pub mod watermarks;

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A state shown to users by its word (`pool status`, `jobs`, reports): the word is the
/// interface, while the derived serde names are the snapshot's and never change.
pub trait Word: Copy {
    fn as_str(self) -> &'static str;
}

/// An asset's kind (`source`, `image`) and a trial's verdict (`passed`, `failed`) are shown
/// by their own `as_str` too; their journal names are the event's.
macro_rules! own_word {
    ($($t:ty),*) => {$(
        impl Word for $t {
            fn as_str(self) -> &'static str {
                <$t>::as_str(self)
            }
        }
    )*};
}
own_word!(crate::event::asset::AssetKind, crate::event::trial::Verdict);

/// `#[serde(serialize_with = "crate::state::word")]`: a [`Word`] field as its word.
pub fn word<T: Word, S: serde::Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(value.as_str())
}

/// `#[serde(serialize_with = "crate::state::word_opt")]`: an optional [`Word`] field as its
/// word, or null.
pub fn word_opt<T: Word, S: serde::Serializer>(value: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => s.serialize_str(v.as_str()),
        None => s.serialize_none(),
    }
}

use crate::event::{Envelope, Event, Micros, Recovered, ReduceError, FLAG_MUST_UNDERSTAND};

/// The state shown for a worker the reduced state no longer holds: it can only have ended, since
/// a pool is detached only once no worker holds budget and only finished workers are dropped.
pub const ENDED: &str = "ended";

/// How many repairs the reduced state remembers (the journal keeps them all).
pub const RECOVERIES_KEPT: usize = 64;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub journal_id: Option<Uuid>,
    pub format_version: u16,
    /// Number of events folded, which is also the last seq folded.
    pub events: u64,
    pub last_time: Option<Micros>,
    pub recoveries: VecDeque<Recovered>,
    /// Events of kinds this version does not know, which it was allowed to skip.
    pub skipped_unknown: u64,
    pub pools: pool::Pools,
    pub sessions: session::Sessions,
    pub jobs: jobs::Jobs,
    pub assets: asset::Assets,
    pub trials: trial::Trials,
    /// Last, and written only when it holds something, so that a snapshot of a journal that
    /// never made a watermark is byte for byte what version 7 always wrote (and reads back).
    #[serde(default, skip_serializing_if = "watermarks::Watermarks::is_empty")]
    pub watermarks: watermarks::Watermarks,
}

/// The journal folds itself into a `State` (`journal::load`) and stores one in a snapshot
/// without knowing what it holds.
impl crate::journal::Fold for State {
    fn events(&self) -> u64 {
        self.events
    }

    fn fold(&mut self, env: &Envelope) -> Result<(), ReduceError> {
        self.apply(env)
    }
}

impl State {
    /// The name and pool an active submission was given (its submission id and no pool when
    /// there is none).
    fn submitted_as(&self, id: &Uuid) -> (String, Option<String>) {
        for pool in self.pools.pools.values() {
            if let Some(w) = pool.active.get(id) {
                return (w.name.clone(), Some(pool.name.clone()));
            }
        }
        match self.jobs.active.get(id) {
            Some(j) => (j.worker.clone(), None),
            None => (id.to_string(), None),
        }
    }

    pub fn apply(&mut self, env: &Envelope) -> Result<(), ReduceError> {
        if env.seq != self.events + 1 {
            return Err(ReduceError::OutOfOrder {
                seq: env.seq,
                last: self.events,
            });
        }
        self.fold_event(env)?;
        self.events = env.seq;
        self.last_time = Some(env.time);
        Ok(())
    }

    /// Which reducer each event goes to: one arm per kind, so that a new kind cannot be
    /// forgotten (the match is exhaustive).
    // long: one arm per kind (or one arm per family of kinds), exhaustive, so that a new kind
    // cannot be forgotten; splitting it would hide a kind behind a wildcard.
    fn fold_event(&mut self, env: &Envelope) -> Result<(), ReduceError> {
        match &env.event {
            Event::Genesis(g) => self.genesis(g),
            Event::Recovered(r) => self.recovered(r),
            Event::JournalMerged(_) => {} // Its branches' events say what happened (§8.1).
            Event::PoolAttached(e) => self.pools.attach(env.time, e),
            Event::PoolDetached(e) => self.pools.detach(e),
            Event::PoolCreateIntent(e) => self.pools.create_intent(env.time, e),
            Event::PoolCreateJob(e) => self.pools.create_job(e),
            Event::PoolCreateFailed(e) => self.pools.create_failed(e),
            Event::PoolOwned(e) => self.pools.owned(e),
            Event::PoolReleaseIntent(e) => self.pools.release_intent(e),
            Event::PoolReleased(e) => self.pools.released(e),
            Event::WorkerSubmitIntent(e) => self.pools.submit(env.time, e),
            Event::WorkerPlaced(e) => self.pools.placed(e),
            Event::WorkerRequest(e) => self.pools.request(e),
            Event::WorkerResubmitted(e) => self.pools.resubmitted(e),
            Event::WorkerResubmitRefused(e) => self.pools.resubmit_refused(e),
            Event::PoolNodes(e) => self.pools.nodes(e),
            Event::PoolCreateShape(e) => self.pools.create_shape(e),
            Event::PoolNodeLost(e) => self.pools.node_lost(e),
            Event::PoolRenewalAsked(e) => self.pools.renew_asked(e),
            Event::PoolRenewalIntent(e) => self.pools.renewal_intent(env.time, e),
            Event::PoolRenewalJob(e) => self.pools.renewal_job(e),
            Event::PoolRenewalFailed(e) => self.pools.renewal_failed(e),
            Event::PoolRenewalStopped(e) => self.pools.renewal_stopped(e),
            Event::PoolRenewed(e) => self.pools.renewed(e),
            Event::PoolAllocationEndIntent(e) => self.pools.end_intent(env.time, e),
            Event::PoolAllocationEndAnswered(e) => self.pools.end_answered(e),
            Event::WorkerLaunched(e) => {
                self.jobs.continuations.created(&e.submission_id);
                self.pools.launched(e, &env.actor.host)
            }
            Event::PoolAllocationEnded(e) => self.allocation_ended(env.time, e),
            // Marks live in Slurm; PoolAttached binds the pool; a steal is for the audit.
            Event::WatermarkIntent(e) => self.watermarks.intent(env.time, e),
            Event::WatermarkMade(e) => self.watermarks.made(e),
            Event::WatermarkFailed(e) => self.watermarks.failed(e),
            Event::WatermarkCancelled(e) => self.watermarks.cancelled(e),
            Event::AllocationMarkIntent(_)
            | Event::AllocationMarked(_)
            | Event::AllocationStolen(_) => {}
            // Audit records: the worker's budget is settled by its own terminal event.
            Event::WorkerCleanupIntent(_) | Event::WorkerCleanedUp(_) => {}
            Event::WorkerLaunchFailed(e) => self.worker_launch_failed(env, e),
            Event::WorkerStepObserved(e) => self.pools.step_observed(e),
            Event::WorkerStopIntent(e) => self.worker_stop_intent(e),
            Event::WorkerExited(e) => self.pools.exited(e),
            Event::WorkerTerminal(e) => self.worker_terminal(e),
            Event::SessionLaunchIntent(e) => self.sessions.launch_intent(env.time, e),
            Event::SessionJobSubmitted(e) => self.sessions.job_submitted(env.time, e),
            Event::SessionSubmitFailed(e) => self.sessions.submit_failed(e),
            Event::SessionNodeResolved(e) => self.sessions.node_resolved(e),
            Event::SessionAdopted(e) => self.sessions.adopted(env.time, e),
            Event::SessionCancelIntent(e) => self.sessions.cancel_intent(e),
            Event::SessionCancelFailed(e) => self.sessions.cancel_failed(e),
            Event::SessionReleased(e) => self.sessions.released(e),
            Event::SessionDetached(e) => self.sessions.detached(e),
            Event::SessionCleared(e) => self.sessions.cleared(e),
            // Journaled for the audit; the job kept is bound by SessionJobSubmitted/Adopted.
            Event::SessionHoldDecided(_) | Event::SessionHoldSettled(_) => {}
            Event::JobSubmitIntent(_)
            | Event::JobSubmitted(_)
            | Event::JobSubmitFailed(_)
            | Event::JobTerminal(_)
            | Event::JobStopIntent(_)
            | Event::JobNamed(_)
            | Event::JobRequeued(_)
            | Event::WorkerContinued(_)
            | Event::ContinuationRefused(_)
            | Event::ContinuationAsked(_)
            | Event::JobRequest(_) => self.jobs_event(env),
            Event::AssetAddIntent(e) => self.assets.intent(env.time, e),
            Event::AssetAdded(e) => self.assets.added(e),
            Event::AssetAddFailed(e) => self.assets.failed(e),
            Event::WorkerAssetsBound(e) => self.assets_bound(e),
            Event::WorkerReportIngested(e) => self.pools.report_ingested(e),
            Event::TrialOpened(e) => self.trials.opened(env.time, e),
            Event::TrialWorkerJoined(e) => self.trial_worker_joined(e),
            Event::TrialJudged(e) => self.trials.judged(env.time, e),
            Event::WorkerJournalDamaged(e) => self.pools.journal_damaged(e),
            Event::WorkerDevicesIngested(e) => self.pools.devices_ingested(e),
            Event::WorkerForgotten(e) => self.worker_forgotten(&e.submission_id),
            Event::SessionForgotten(e) => self.sessions.forgotten(e),
            Event::Unknown { kind, flags, .. } => self.unknown(env.seq, *kind, *flags)?,
        }
        Ok(())
    }

    /// The journal's identity, from its first event.
    fn genesis(&mut self, g: &crate::event::Genesis) {
        self.journal_id = Some(g.journal_id);
        self.format_version = g.format_version;
    }

    /// Remember a repair, dropping the oldest beyond [`RECOVERIES_KEPT`].
    fn recovered(&mut self, r: &Recovered) {
        if self.recoveries.len() == RECOVERIES_KEPT {
            self.recoveries.pop_front();
        }
        self.recoveries.push_back(r.clone());
    }

    /// `dispatch submit`'s workers, and the continuations of every worker.
    fn jobs_event(&mut self, env: &Envelope) {
        let c = &mut self.jobs.continuations;
        match &env.event {
            Event::JobSubmitIntent(e) => self.jobs.intent(env.time, e),
            Event::JobSubmitted(e) => {
                c.created(&e.submission_id);
                self.jobs.submitted(e)
            }
            Event::JobSubmitFailed(e) => {
                if e.definite {
                    c.dropped(&e.submission_id);
                    let limit = (self.jobs.active.get(&e.submission_id))
                        .and_then(|j| j.named.as_ref())
                        .map(|n| n.sbatch_limit_s);
                    let by = failed_by(env, &e.reason, limit);
                    self.jobs.continuations.never_created(&e.submission_id, by);
                }
                self.jobs.failed(e)
            }
            Event::JobTerminal(e) => {
                c.created(&e.submission_id);
                c.ended(&e.submission_id, &e.proof, None);
                self.jobs.terminal(e)
            }
            Event::JobStopIntent(e) => {
                c.stopped(&e.submission_id);
                self.jobs.stop_intent(e)
            }
            Event::JobNamed(e) => self.jobs.named(e),
            Event::JobRequeued(e) => self.jobs.requeued(e),
            Event::WorkerContinued(e) => {
                // One successor: a resubmission it would also have been is settled by it.
                self.pools.requests.remove(&e.predecessor);
                c.continued(env.time, e, &env.actor.host, env.actor.pid)
            }
            Event::ContinuationRefused(e) => c.refused(e),
            Event::ContinuationAsked(e) => self.continuation_asked(e),
            Event::JobRequest(e) => c.job_request(e),
            _ => {}
        }
    }

    /// Nothing of a worker whose launch definitely failed ran: it is not continued.
    fn worker_launch_failed(&mut self, env: &Envelope, e: &crate::event::pool::WorkerLaunchFailed) {
        if e.definite {
            let c = &mut self.jobs.continuations;
            c.dropped(&e.submission_id);
            c.never_created(&e.submission_id, failed_by(env, &e.reason, None));
        }
        self.pools.launch_failed(e)
    }

    /// Kept with who the worker is (its intent, earlier in the same commit) and, for a pool
    /// worker, its `WorkerRequest`.
    fn continuation_asked(&mut self, e: &crate::event::pool::ContinuationAsked) {
        use continuation::Submitted;
        let id = &e.submission_id;
        let pool_worker = self.pools.by_submission.get(id).and_then(|p| {
            let w = self.pools.pools.get(p)?.active.get(id)?;
            Some(Submitted {
                worker: w.name.clone(),
                pool: Some(p.clone()),
                cpus: w.cpus,
                mem_mb: w.mem_mb,
            })
        });
        let who = pool_worker.or_else(|| {
            self.jobs.active.get(id).map(|j| Submitted {
                worker: j.worker.clone(),
                pool: None,
                cpus: j.cpus,
                mem_mb: j.mem_mb,
            })
        });
        let request = self.pools.requests.get(id).map(|r| r.request.clone());
        self.pools.continuation_asked(e);
        self.jobs.continuations.ask(e, who, request);
    }

    /// A stop a user asked for; a pool's release stops its workers too, and those stay due
    /// for the pool's next allocation.
    fn worker_stop_intent(&mut self, e: &crate::event::pool::WorkerStopIntent) {
        let releasing = self
            .pools
            .by_submission
            .get(&e.submission_id)
            .and_then(|p| self.pools.pools.get(p))
            .is_some_and(|p| p.releasing);
        if !releasing {
            self.jobs.continuations.stopped(&e.submission_id);
        }
        self.pools.stop_intent(e);
    }

    /// The proof, and whether the worker's node was recorded lost when it came.
    fn worker_terminal(&mut self, e: &crate::event::pool::WorkerTerminal) {
        let id = &e.submission_id;
        let node_lost = self.pools.by_submission.get(id).and_then(|p| {
            let pool = self.pools.pools.get(p)?;
            let node = pool.node_of(pool.active.get(id)?);
            pool.spread.as_ref()?.lost.get(node).cloned()
        });
        self.jobs.continuations.created(id);
        self.jobs.continuations.ended(id, &e.proof, node_lost);
        self.pools.terminal(e);
    }

    fn allocation_ended(&mut self, time: Micros, e: &crate::event::pool::PoolAllocationEnded) {
        let current = self
            .pools
            .pools
            .get(&e.pool)
            .is_some_and(|p| p.allocation.job_id == e.job_id);
        // An end dispatch asked for once every worker of it was over is no worker's cause: each
        // ended on its own before it (its own journal, its step's proof say how).
        let ended_by_dispatch = self
            .pools
            .pools
            .get(&e.pool)
            .and_then(|p| p.renewal.as_ref()?.ending.as_ref())
            .is_some_and(|x| x.job_id == e.job_id);
        if current && !ended_by_dispatch {
            self.jobs.continuations.allocation_ended(&e.pool, &e.proof);
        }
        self.pools.allocation_ended(time, e);
    }

    /// One submission id is either a pool worker's or a job's; the other ignores it.
    fn assets_bound(&mut self, e: &crate::event::asset::WorkerAssetsBound) {
        self.pools.assets_bound(e);
        self.jobs.assets_bound(e);
    }

    /// A trial keeps its worker's name and pool, so its files stay findable after the pool
    /// is detached.
    fn trial_worker_joined(&mut self, e: &crate::event::trial::TrialWorkerJoined) {
        let (worker, pool) = self.submitted_as(&e.submission_id);
        self.trials.joined(e, worker, pool);
    }

    /// One submission id is either a pool worker's or a job's; the other ignores it, and so
    /// do trials it never joined.
    fn worker_forgotten(&mut self, submission_id: &Uuid) {
        self.jobs.continuations.dropped(submission_id);
        self.pools.forgotten(submission_id);
        self.jobs.forgotten(submission_id);
        self.trials.forgotten(submission_id);
    }

    /// An event of a kind this version does not know: skipped, unless it must be understood.
    fn unknown(&mut self, seq: u64, kind: u16, flags: u16) -> Result<(), ReduceError> {
        if flags & FLAG_MUST_UNDERSTAND != 0 {
            return Err(ReduceError::MustUnderstand { seq, kind });
        }
        self.skipped_unknown += 1;
        Ok(())
    }
}

/// Who recorded a definite failure, and why (`state::continuation` tells Slurm's refusal from
/// a driver that died by it).
fn failed_by<'a>(
    env: &'a Envelope,
    reason: &'a str,
    sbatch_limit_s: Option<u32>,
) -> continuation::FailedBy<'a> {
    continuation::FailedBy {
        host: &env.actor.host,
        pid: env.actor.pid,
        reason,
        at: env.time,
        sbatch_limit_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::event::pool::*;
    use crate::event::trial::*;
    use crate::state::trial::*;

    /// A trial keeps its workers' names and pools, so their files stay findable after the
    /// pool is detached and the reduced state has dropped it.
    #[test]
    fn a_trial_remembers_its_workers_beyond_their_pool() {
        let sid = Uuid::from_u128(5);
        let events = vec![
            Event::PoolAttached(PoolAttached {
                pool: "p".into(),
                allocation: Allocation {
                    job_id: crate::event::test_job(1),
                    node: "n".into(),
                    user: "u".into(),
                    start_time: Micros(0),
                    end_time: Micros(1),
                    cpus: 4,
                    mem_mb: 100,
                    partition: "debug".into(),
                    account: "dev".into(),
                    qos: "normal".into(),
                },
            }),
            Event::TrialOpened(TrialOpened {
                trial: "t".into(),
                pin: None,
                follows: None,
                note: String::new(),
            }),
            Event::WorkerSubmitIntent(WorkerSubmitIntent {
                pool: "p".into(),
                worker: "w".into(),
                submission_id: sid,
                cpus: 1,
                mem_mb: 10,
                publication_timeout_s: 30,
                command: vec!["true".into()],
            }),
            Event::TrialWorkerJoined(TrialWorkerJoined {
                trial: "t".into(),
                submission_id: sid,
            }),
            Event::WorkerTerminal(WorkerTerminal {
                submission_id: sid,
                proof: "gone".into(),
            }),
            Event::PoolDetached(PoolDetached { pool: "p".into() }),
        ];
        let mut s = State::default();
        for (i, event) in events.into_iter().enumerate() {
            s.apply(&crate::event::test_envelope(i as u64 + 1, event))
                .unwrap();
        }
        assert!(s.pools.pools.is_empty());
        assert_eq!(
            s.trials.trials["t"].workers,
            [TrialWorker {
                submission_id: sid,
                worker: "w".into(),
                pool: Some("p".into()),
                forgotten: false,
            }]
        );
    }
}
