//! What follows a worker proven over, in one walk: its continuation (`--continue N`,
//! `ops::continuation`) or, after a node failure, its replacement (`--resubmit-on-node-failure
//! N`, `ops::pool::resubmit`). Which workers are due is one pure set
//! (`policy::lineage::due`), decided in submission-id order; both kinds of successor are built by
//! one function (`ops::continuation::pool_successor`) and written with their receipt naming the
//! worker they follow, which settles it: a crash after it never submits twice, a crash before it
//! leaves it due for the next `reconcile`.
//!
//! A worker that asked to be continued is decided as a continuation first; only a refusal (a
//! node failure's end saves no checkpoint) lets its replacement follow, in the same walk.
//! Nothing follows a worker of a pool whose allocation is in Slurm's preemption grace
//! (`policy::lineage::held_by_preemption`): it is listed as waiting.

use super::context::Ctx;
use super::continuation::{self, Continuation, ContinueOutcome};
use super::error::OpError;
use super::pool::{self, Resubmission};
use crate::policy::lineage::{self, Follow, InGrace, Scope};
use crate::slurm::Scheduler;

/// What one walk did: `reconcile`'s `continued` and `resubmitted`.
#[derive(Debug, Default)]
pub(crate) struct Followed {
    pub continued: Vec<Continuation>,
    pub resubmitted: Vec<Resubmission>,
}

/// Decide, and submit, every successor due in `scope`, in submission-id order; none in a pool
/// `in_grace` lists.
pub(crate) async fn follow_due<S: Scheduler>(
    ctx: &Ctx<S>,
    scope: Scope<'_>,
    in_grace: &[InGrace<'_>],
) -> Result<Followed, OpError> {
    let state = ctx.read_state()?;
    let mut done = Followed::default();
    for due in lineage::due(&state, scope) {
        let held = lineage::held_by_preemption(&due, in_grace);
        match (due, held) {
            (Follow::Continue(id, c), Some(why)) => {
                done.continued.push(continuation::waiting(id, c, why));
            }
            (Follow::Replace(id, r), Some(why)) => {
                done.resubmitted.push(pool::replacement_waiting(id, r, why));
            }
            (Follow::Continue(id, c), None) => {
                let line = continuation::continue_one(ctx, &state, id, c).await?;
                let refused = line.outcome == ContinueOutcome::Refused;
                done.continued.push(line);
                let replaced = refused.then(|| lineage::replacement_after_refusal(&state, id));
                if let Some(r) = replaced.flatten() {
                    done.resubmitted.push(pool::replace(ctx, id, r).await?);
                }
            }
            (Follow::Replace(id, r), None) => {
                done.resubmitted.push(pool::replace(ctx, id, r).await?);
            }
        }
    }
    Ok(done)
}
