//! Workers a node failure ended, submitted again (`pool submit --resubmit-on-node-failure N`):
//! the successor driver (`ops::successor`, run by `reconcile` after it has recorded what it
//! proved) calls [`replace`] for each one due, in the same walk as the continuations. A worker is due once
//! its release with proof lands while its node is recorded lost (the reducer decides,
//! `state::pool::Pools::requests`); its replacement is an ordinary `pool submit` whose receipt
//! names the worker it replaces (`WorkerResubmitted`, which settles the due one, so a crash
//! after it never submits twice). A refusal (no node could ever hold it, the pool is being
//! released, a trial judged) is recorded (`WorkerResubmitRefused`) and not tried again; an
//! answer Slurm did not give leaves it due for the next `reconcile`.

use serde::Serialize;
use uuid::Uuid;

use super::{submit, SubmitRequest};
use crate::event::pool::WorkerResubmitRefused;
use crate::event::Event;
use crate::ops::context::{append_if, Ctx};
use crate::ops::continuation::{pool_successor, Follows, Who};
use crate::ops::error::OpError;
use crate::ops::spec::ContinueAsk;
use crate::slurm::Scheduler;
use crate::state::pool::Resubmittable;
use crate::state::State;

/// What became of one due resubmission.
#[derive(Debug, Serialize)]
pub struct Resubmission {
    pub pool: String,
    pub worker: String,
    pub replaces: String,
    /// The new submission, once its receipt is written.
    pub submission_id: Option<String>,
    pub outcome: ResubmitOutcome,
    /// Why.
    pub detail: String,
}

crate::words! {
    pub enum ResubmitOutcome {
        Submitted => "submitted",
        /// Not tried again.
        Refused => "refused",
        /// Due, but held (its pool's allocation in Slurm's preemption grace): tried again by
        /// the next `reconcile`.
        Waiting => "waiting",
        /// Tried again by the next `reconcile`.
        Unknown => "unknown",
    }
}

/// The submit that replaces `due` (its id `replaces`): the same request, one resubmission
/// fewer, on any node with room, asking the continuation `due` asked for (unused: a node
/// failure's end is refused its continuation without a checkpoint saved while it ran).
fn replacement(replaces: Uuid, due: &Resubmittable) -> SubmitRequest {
    let who = Who {
        worker: &due.worker,
        cpus: due.cpus,
        mem_mb: due.mem_mb,
    };
    let ask = due.continuation.as_ref().and_then(ContinueAsk::of);
    pool_successor(
        &due.pool,
        who,
        &due.request,
        ask,
        Follows::Replaces(replaces),
    )
}

/// Submit again worker `replaces` (`due`), which a node failure ended; a refusal is recorded.
pub(crate) async fn replace<S: Scheduler>(
    ctx: &Ctx<S>,
    replaces: Uuid,
    due: &Resubmittable,
) -> Result<Resubmission, OpError> {
    let req = replacement(replaces, due);
    let (submission_id, outcome, detail) = match submit(ctx, &req).await {
        Ok(s) => (
            Some(s.submission_id),
            ResubmitOutcome::Submitted,
            s.state.as_str().to_owned(),
        ),
        Err(OpError::Refused(refusal)) => {
            let reason = refusal.to_string();
            let refused = Event::WorkerResubmitRefused(WorkerResubmitRefused {
                replaces,
                reason: reason.clone(),
            });
            let still_due = |now: &State| {
                now.pools
                    .requests
                    .get(&replaces)
                    .is_some_and(|x| x.due.is_some())
            };
            append_if(ctx, still_due, vec![refused])?;
            (None, ResubmitOutcome::Refused, reason)
        }
        Err(e) => (None, ResubmitOutcome::Unknown, e.to_string()),
    };
    Ok(Resubmission {
        pool: due.pool.clone(),
        worker: due.worker.clone(),
        replaces: replaces.to_string(),
        submission_id,
        outcome,
        detail,
    })
}

/// A replacement not submitted now, and why (`reconcile` lists it).
pub(crate) fn waiting(replaces: Uuid, due: &Resubmittable, why: String) -> Resubmission {
    Resubmission {
        pool: due.pool.clone(),
        worker: due.worker.clone(),
        replaces: replaces.to_string(),
        submission_id: None,
        outcome: ResubmitOutcome::Waiting,
        detail: why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::pool::*;
    use crate::policy::fixtures::{attached, envelopes, worker_request};

    /// A worker that asked both `--continue 2` and `--resubmit-on-node-failure 1`, whose
    /// continuation a node failure refused: its replacement is the same request, its
    /// continuation ask included (it was never used), one resubmission fewer.
    #[test]
    fn a_replacement_keeps_the_continuation_its_worker_asked_for() {
        let id = Uuid::from_u128(1);
        let mut state = State::default();
        for env in envelopes([
            Event::PoolAttached(attached("p", 9, "a", 12)),
            Event::WorkerSubmitIntent(WorkerSubmitIntent {
                pool: "p".into(),
                worker: "w".into(),
                submission_id: id,
                cpus: 1,
                mem_mb: 10,
                publication_timeout_s: 30,
                command: vec!["true".into()],
            }),
            Event::WorkerRequest(worker_request(id, 1)),
            Event::ContinuationAsked(ContinuationAsked {
                submission_id: id,
                continues_left: 2,
                causes: vec!["node-failure".into()],
                crashed: false,
            }),
        ]) {
            state.apply(&env).unwrap();
        }
        let req = replacement(id, &state.pools.requests[&id]);
        assert_eq!(req.replaces, Some(id));
        assert_eq!(req.resubmits, 0);
        let ask = req
            .continuation
            .expect("the continuation asked for is kept");
        assert_eq!(ask.continues, 2);
        assert_eq!(
            ask.causes,
            [crate::policy::continuation::Cause::NodeFailure]
        );
        assert!(!ask.crashed);
    }
}
