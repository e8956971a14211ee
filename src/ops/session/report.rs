//! `dispatch sessions`: one `squeue --me`, folded with the journal's sessions by the pure
//! report builder. Read-only.

use super::{Env, OpError};
use crate::ops::reconcile::preemption_of;
use crate::policy::session::ended::ended;
use crate::policy::session::report::{build, Inputs, Report};
use crate::policy::session::{listing_of, Listing};
use crate::slurm::{Answer, JobId, JobQuery, JobRow, Scheduler};

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
    stale_ends(env, &mut report).await;
    Ok(report)
}

/// How each stale session's job ended, when Slurm still lists it (one `squeue --states=all
/// --jobs=…` for them all): its cause and Slurm's words, e.g. `preempted: squeue shows job J
/// PREEMPTED`. Read-only: the record is cleared by the session's next command.
async fn stale_ends<S: Scheduler>(env: &Env<'_, S>, report: &mut Report) {
    let jobs: Vec<JobId> = report
        .stale
        .iter()
        .filter_map(|l| l.job_id.and_then(JobId::new))
        .collect();
    if jobs.is_empty() {
        return;
    }
    let Answer::Live(rows) = env.ctx.sched.list_jobs(&JobQuery::ids(jobs)).await else {
        return;
    };
    for line in &mut report.stale {
        let Some(job) = line.job_id.and_then(JobId::new) else {
            continue;
        };
        if let Some(row) = rows.iter().find(|r| r.is_job(job) && r.state.is_terminal()) {
            line.reason = Some(ended(job, Some(&row.state), None).reason());
        }
    }
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
