//! `dispatch sessions`: one `squeue --me`, folded with the journal's sessions by the pure
//! report builder. Read-only.

use super::{Env, OpError};
use crate::ops::reconcile::preemption_of;
use crate::policy::session::report::{build, Inputs, Report};
use crate::policy::session::{listing_of, Listing};
use crate::slurm::{JobQuery, JobRow, Scheduler};

pub async fn sessions<S: Scheduler>(env: &Env<'_, S>) -> Result<Report, OpError> {
    let state = env.ctx.read_state()?;
    let listing = listing_of(env.ctx.sched.list_jobs(&JobQuery::mine()).await);
    // Tokens map back to configured mirrors first (config order), then to mirrors the
    // journal knows.
    let mut mirrors: Vec<String> = env.config.mirrors.keys().cloned().collect();
    for key in state.sessions.sessions.keys() {
        if !mirrors.contains(&key.mirror) {
            mirrors.push(key.mirror.clone());
        }
    }
    let mut report = build(Inputs {
        prefixes: &env.config.session_prefixes(),
        targets: env.targets(),
        mirrors: &mirrors,
        sessions: &state.sessions,
        listing: &listing,
    });
    if let Listing::Answered { rows, .. } = &listing {
        preemptions(env, rows, &mut report).await;
    }
    Ok(report)
}

/// Each listed job whose end Slurm pulled forward is asked about (`scontrol show job`, at most
/// `reconcile`'s bound of them): in a preemption's grace, its entry says until when.
async fn preemptions<S: Scheduler>(env: &Env<'_, S>, rows: &[JobRow], report: &mut Report) {
    let mut looks = 0;
    let entries = report
        .targets
        .iter_mut()
        .flat_map(|g| g.jobs.iter_mut())
        .chain(report.unmatched.iter_mut());
    for e in entries {
        if let Some(row) = rows.iter().find(|r| r.job_id.get() == e.job_id) {
            e.preempted = preemption_of(env.ctx, row, &mut looks).await;
        }
    }
}
