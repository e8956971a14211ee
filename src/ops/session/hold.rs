//! Slurm as the arbiter between launches of one session from different state directories
//! (whose token locks cannot see each other): a confined launch submits its job held
//! (`sbatch --hold`), lists the jobs of its name, and keeps the oldest live job of its target.
//! Its own: `scontrol release`. Another's: `scancel` its own (it never ran) and adopt that one.
//! Job ids grow with submission, so every racer picks the same job.
//!
//! A launch that dies between the held sbatch and the release or cancel leaves its job held
//! and recorded (or findable by name): the next launch, attach or renew of the session
//! settles it here the same way, so a held job is never left held and never released beside
//! an older one.

use super::{command_for, lock_session, session, Env, OpError, Resolved};
use crate::event::session::{SessionAdopted, SessionHoldDecided, SessionHoldSettled};
use crate::event::Event;
use crate::failpoint;
use crate::ops::poll::Poller;
use crate::policy::session::probe::rows_named;
use crate::policy::session::{
    arbitrate, is_held, listing_of, probe_of, running_node, Arbitration, Probe,
};
use crate::slurm::{Answer, JobId, JobQuery, JobRow, JobState, Scheduler};

/// The job a session keeps after its held job was settled.
#[derive(Debug)]
pub struct Settled {
    pub job: JobId,
    /// True when `job` is another launch's (older) job, adopted; ours was cancelled.
    pub yielded: bool,
    /// `job`'s state and node as the arbitrating listing showed them (ours: PENDING).
    pub state: JobState,
    pub node: Option<String>,
    /// Warnings for stderr.
    pub warnings: Vec<String>,
}

/// `squeue --jobs=J`: the answer's proof, whether J is held (a racing launch's job whose
/// launcher has not released it yet, or ours from an interrupted launch), and whether it runs
/// with its end pulled forward (`JobRow::end_pulled_forward`: maybe a preemption's grace).
pub async fn probe_held<S: Scheduler>(env: &Env<'_, S>, job: JobId) -> (Probe, bool, bool) {
    let answer = env.ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await;
    let listed = |f: fn(&JobRow) -> bool| {
        matches!(&answer, Answer::Live(rows)
            if rows.iter().any(|r| r.plain_id() == Some(job) && f(r)))
    };
    let (held, preempt_hint) = (listed(is_held), listed(JobRow::end_pulled_forward));
    (probe_of(&answer, job), held, preempt_hint)
}

/// Settle `ours`, a held job the session records: list the jobs of its name (a few tries)
/// and keep the oldest live job of the target. A listing that cannot show `ours` decides
/// nothing: `ours` stays held and recorded, and the error says the next command settles it
/// (releasing it blind could run it beside an older racer's job).
pub async fn settle<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    ours: JobId,
    replacing: Option<JobId>,
) -> Result<Settled, OpError> {
    let exclude: Vec<JobId> = replacing.into_iter().collect();
    let mut poll = Poller::new(env.waits.poll_first, env.waits.poll_max);
    let mut why = String::new();
    let attempts = env.waits.unknown_polls.max(1);
    for attempt in 1..=attempts {
        let answer = env
            .ctx
            .sched
            .list_jobs(&JobQuery::mine_named_any(r.probe_names()))
            .await;
        // An unreadable line of these names may be an older racer's job.
        let listed = rows_named(listing_of(answer), &r.name_strs()).and_then(|n| {
            match n.bad_lines.is_empty() {
                true => Ok(n.rows),
                false => Err(format!("squeue printed unreadable lines {:?}", n.bad_lines)),
            }
        });
        match listed.map(|rows| {
            let decision = arbitrate(&rows, &r.key.target, env.targets(), &exclude, ours);
            (rows, decision)
        }) {
            Ok((_, Arbitration::Release)) => {
                release(env, r, ours).await?;
                return Ok(Settled {
                    job: ours,
                    yielded: false,
                    state: JobState::Pending,
                    node: None,
                    warnings: Vec::new(),
                });
            }
            Ok((rows, Arbitration::Yield(winner))) => {
                let row = rows
                    .iter()
                    .find(|row| row.plain_id() == Some(winner))
                    .expect("the winner is one of the rows");
                return yield_to(env, r, ours, row, replacing).await;
            }
            Ok((_, Arbitration::NotListed)) => why = "squeue does not list it".into(),
            Err(e) => why = e,
        }
        if attempt < attempts {
            poll.pause().await;
        }
    }
    Err(OpError::Unknown(format!(
        "Slurm job {ours} of {} was submitted held, and the name probe that decides whether a \
         launch from another state directory made an older job failed ({why}). It stays held \
         and recorded: retry {}, which settles it (or {} cancels it)",
        r.key,
        command_for("launch", &r.key),
        command_for("release", &r.key)
    )))
}

/// `job`, the session's recorded job, is held and no launch is settling it (the one that
/// submitted it died): settle it now, as that launch would have, under the token lock (for
/// attach and renew, which run without it). The job the session keeps.
pub async fn settle_recorded<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    job: JobId,
) -> Result<JobId, OpError> {
    let (_lock, state) = lock_session(env, &r.token)?;
    match session(&state, &r.key).and_then(|s| s.job_id()) {
        // A command that held the lock settled it meanwhile.
        Some(recorded) if recorded != job => return Ok(recorded),
        _ => {}
    }
    let Some(kept) = settle_orphan(env, r, job, None).await? else {
        return Err(OpError::Failed(format!(
            "{} had no job once its held job {job} was cancelled; start one with {}",
            r.key,
            command_for("launch", &r.key)
        )));
    };
    for warning in &kept.warnings {
        (env.progress)(warning);
    }
    Ok(kept.job)
}

/// `job`, the session's recorded job, was left held by a launch that died before settling it
/// (the caller holds the token lock, so no launch of this state directory is settling it):
/// settle it as that launch would have. A held sbatch job is arbitrated ([`settle`]). A held
/// salloc job is cancelled, never released: its salloc may have died too (it runs in its own
/// session, but a reboot or a kill of every process of the user takes it), and the controller
/// kills a job granted to a salloc that is gone, about 10 s after the grant. It never ran, so
/// nothing is lost. `None`: cancelled, and the session holds no job any more.
pub async fn settle_orphan<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    job: JobId,
    replacing: Option<JobId>,
) -> Result<Option<Settled>, OpError> {
    if r.target.confined {
        return settle(env, r, job, replacing).await.map(Some);
    }
    cancel_orphan(env, r, job).await?;
    Ok(None)
}

async fn cancel_orphan<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    job: JobId,
) -> Result<(), OpError> {
    (env.progress)(&format!(
        "job {job} of {} was left held by a launch that died; cancelling it (it never ran): \
         released without its salloc, Slurm would kill it",
        r.key
    ));
    let cancelled = super::release::cancel(env, &r.key, job).await?;
    for warning in &cancelled.warnings {
        (env.progress)(warning);
    }
    Ok(())
}

/// `scontrol release J`, bracketed by `SessionHoldDecided` (winner J) and
/// `SessionHoldSettled`.
pub async fn release<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    job: JobId,
) -> Result<(), OpError> {
    let key = &r.key;
    env.ctx
        .append(Event::SessionHoldDecided(SessionHoldDecided {
            session: key.clone(),
            job_id: job,
            winner: job,
        }))?;
    failpoint::hit("session-after-hold-decided");
    let result = env.ctx.sched.release_job(job).await;
    let failure = result.as_ref().err().map(|e| e.to_string());
    record_settled(env, r, job, "released", failure)?;
    result.map_err(|e| {
        OpError::Unknown(format!(
            "Slurm job {job} of {key} was submitted held and releasing it failed: {e}. It is \
             recorded; {} settles it again (or `scontrol release {job}` lets it run), {} \
             cancels it",
            command_for("launch", key),
            command_for("release", key)
        ))
    })
}

/// An older live job of this target exists (a racing launch's): cancel ours, which never
/// ran, and adopt that one, releasing it if its launcher has not yet.
async fn yield_to<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    ours: JobId,
    winner: &JobRow,
    replacing: Option<JobId>,
) -> Result<Settled, OpError> {
    let key = &r.key;
    let w = winner.plain_id().expect("contenders have plain ids");
    env.ctx
        .append(Event::SessionHoldDecided(SessionHoldDecided {
            session: key.clone(),
            job_id: ours,
            winner: w,
        }))?;
    failpoint::hit("session-after-yield-decided");
    let result = env.ctx.sched.cancel_job(ours).await;
    let failure = match &result {
        Ok(c) => c.not_accepted(),
        Err(e) => Some(e.to_string()),
    };
    record_settled(env, r, ours, "cancelled", failure.clone())?;
    let mut warnings = Vec::new();
    if let Some(reason) = failure {
        // Still held, so it cannot run; the session holds the winner from here on.
        warnings.push(format!(
            "job {ours} (held, never ran) yielded to the older job {w}, but cancelling it \
             failed ({reason}); `scancel {ours}` removes it"
        ));
    }
    env.ctx.append(Event::SessionAdopted(SessionAdopted {
        session: key.clone(),
        job_id: w,
        how: "arbiter".into(),
        state: winner.state.to_string(),
        partition: winner.partition.clone(),
        account: winner.account.clone(),
        qos: winner.qos.clone(),
        replacing,
    }))?;
    (env.progress)(&format!(
        "another launch of {key} submitted job {w} first; adopting it (job {ours} was \
         cancelled before it ran)"
    ));
    if is_held(winner) {
        if let Err(e) = release(env, r, w).await {
            warnings.push(e.to_string());
        }
    }
    Ok(Settled {
        job: w,
        yielded: true,
        state: winner.state.clone(),
        node: running_node(winner),
        warnings,
    })
}

/// `SessionHoldSettled`: the outcome of the call on held `job` (`failure`: why it did not
/// succeed).
fn record_settled<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    job: JobId,
    action: &str,
    failure: Option<String>,
) -> Result<(), OpError> {
    env.ctx
        .append(Event::SessionHoldSettled(SessionHoldSettled {
            session: r.key.clone(),
            job_id: job,
            action: action.into(),
            ok: failure.is_none(),
            reason: failure.unwrap_or_default(),
        }))?;
    Ok(())
}
