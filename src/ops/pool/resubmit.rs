//! Workers a node failure ended, submitted again (`pool submit --resubmit-on-node-failure N`):
//! `reconcile` runs [`resubmit_due`] after it has recorded what it proved. A worker is due once
//! its release with proof lands while its node is recorded lost (the reducer decides,
//! `state::pool::Pools::requests`); its replacement is an ordinary `pool submit` whose receipt
//! names the worker it replaces (`WorkerResubmitted`, which settles the due one, so a crash
//! after it never submits twice). A refusal (no node could ever hold it, the pool is being
//! released, a trial judged) is recorded (`WorkerResubmitRefused`) and not tried again; an
//! answer Slurm did not give leaves it due for the next `reconcile`.

use serde::Serialize;
use uuid::Uuid;

use super::{submit, SubmitRequest};
use crate::event::pool::{WorkerRequest, WorkerResubmitRefused};
use crate::event::Event;
use crate::ops::context::{append_if, Ctx};
use crate::ops::error::OpError;
use crate::ops::spec::WorkerSpec;
use crate::policy::pool::Budgets;
use crate::slurm::{MemoryMb, Scheduler};
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
        /// Tried again by the next `reconcile`.
        Unknown => "unknown",
    }
}

/// The submit that replaces `due` (its id `replaces`): the same request, one resubmission
/// fewer, on any node with room.
fn replacement(replaces: Uuid, due: &Resubmittable) -> SubmitRequest {
    let r: &WorkerRequest = &due.request;
    SubmitRequest {
        pool: due.pool.clone(),
        spec: WorkerSpec {
            worker: Some(due.worker.clone()),
            cpus: due.cpus,
            mem: MemoryMb::new(due.mem_mb),
            budgets: Budgets {
                publication_timeout_s: r.publication_timeout_s,
                native_state_s: r.native_state_s,
                cleanup_s: r.cleanup_s,
                grace_s: r.grace_s,
                min_run_s: Budgets::DEFAULT_MIN_RUN_S,
            },
            command: r.command.clone(),
            source: r.source.clone(),
            image: r.image.clone(),
            append_only_glob: r.append_only_glob.clone(),
            trial: r.trial.clone(),
        },
        gpus: r.gpus,
        node: None,
        resubmits: r.resubmits_left.saturating_sub(1),
        replaces: Some(replaces),
        continuation: None,
        continues: None,
    }
}

/// Submit again every worker due (of `only_pool`, if given), in submission-id order.
pub(crate) async fn resubmit_due<S: Scheduler>(
    ctx: &Ctx<S>,
    only_pool: Option<&str>,
) -> Result<Vec<Resubmission>, OpError> {
    let state = ctx.read_state()?;
    let due: Vec<(Uuid, Resubmittable)> = state
        .pools
        .requests
        .iter()
        // A worker that asked to be continued waits for that decision first (one successor).
        .filter(|(id, r)| {
            r.due.is_some()
                && only_pool.is_none_or(|p| r.pool == p)
                && !state.jobs.continuations.asked.contains_key(id)
        })
        .map(|(id, r)| (*id, r.clone()))
        .collect();
    let mut done = Vec::with_capacity(due.len());
    for (replaces, r) in due {
        let req = replacement(replaces, &r);
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
                let due = |now: &State| {
                    now.pools
                        .requests
                        .get(&replaces)
                        .is_some_and(|x| x.due.is_some())
                };
                append_if(ctx, due, vec![refused])?;
                (None, ResubmitOutcome::Refused, reason)
            }
            Err(e) => (None, ResubmitOutcome::Unknown, e.to_string()),
        };
        done.push(Resubmission {
            pool: r.pool,
            worker: r.worker,
            replaces: replaces.to_string(),
            submission_id,
            outcome,
            detail,
        });
    }
    Ok(done)
}
