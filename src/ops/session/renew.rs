//! `dispatch session renew`: keep a session's job alive across its time limit. Hold while the
//! job is fine (or its state is unknown), start a replacement while it drains, start a new one
//! when it is lost; cancel the old job only after the new one runs.

use std::time::Duration;

use serde::Serialize;

use super::launch::{launch, LaunchRequest};
use super::release::cancel;
use super::{
    adopt_or_vouch, command_for, hold, read_state, session, Book, Env, OpError, TokenLock,
};
use crate::policy::session::renew::{decide, Action, Backoff};
use crate::policy::session::{is_held, probe_of, Probe};
use crate::slurm::{JobId, JobQuery, Scheduler};

#[derive(Clone, Debug)]
pub struct RenewSettings {
    pub drain_minutes: u64,
    pub poll: Duration,
    /// `--once` is 1.
    pub max_iterations: Option<u64>,
    pub backoff: Backoff,
    /// Asked to stop (Ctrl-C): renew ends between steps, never in the middle of a relaunch.
    pub stop: std::sync::Arc<Stop>,
}

/// A request to stop renewing, honoured at the next step boundary or during a pause.
#[derive(Debug, Default)]
pub struct Stop {
    requested: std::sync::atomic::AtomicBool,
    wake: tokio::sync::Notify,
}

impl Stop {
    pub fn request(&self) {
        self.requested
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.wake.notify_one();
    }

    pub fn requested(&self) -> bool {
        self.requested.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct RenewReport {
    pub mirror: String,
    pub target: String,
    /// The job the session holds at the end.
    pub job_id: JobId,
    pub iterations: u64,
    pub relaunched: Vec<JobId>,
    pub cancelled: Vec<JobId>,
    pub failed_relaunches: u64,
    /// Ended by a stop request rather than by `--once`; the job is left running.
    pub stopped: bool,
}

pub async fn renew<S: Scheduler>(
    env: &Env<'_, S>,
    mirror: &str,
    target: &str,
    settings: &RenewSettings,
) -> Result<RenewReport, OpError> {
    let progress = |line: String| (env.progress)(&line);
    let r = env.resolve(mirror, target)?;
    let key = r.key.clone();
    let mut state = read_state(env.state_dir)?;
    let mut job = match session(&state, &key).and_then(|s| s.job_id()) {
        Some(job) => job,
        None => {
            // No job recorded (a lost state directory): find it by name, as launch would.
            let _lock = TokenLock::take(env.state_dir, &r.token)?;
            let (book, now) = Book::open(env.state_dir)?;
            state = now;
            match session(&state, &key).and_then(|s| s.job_id()) {
                Some(job) => job,
                None => {
                    let (probe, adopted) = adopt_or_vouch(env, &book, &r).await?;
                    match (adopted, probe.cannot_vouch()) {
                        (Some(seen), _) => {
                            progress(format!(
                                "no job was recorded for {key}; found job {} by name",
                                seen.id
                            ));
                            seen.job_id.expect("only plain ids are adopted")
                        }
                        (None, Some(why)) => {
                            return Err(OpError::Unknown(format!(
                                "no job is recorded for {key}, and {why}; nothing was done. \
                                 Retry, or look with `squeue --me --name={}`",
                                r.job_name
                            )))
                        }
                        (None, None) => {
                            return Err(OpError::Failed(format!(
                                "no live session {key} to renew (nothing recorded, and no job \
                                 of its target named {}): start one with `{}`",
                                r.job_name,
                                command_for("launch", &key)
                            )))
                        }
                    }
                }
            }
        }
    };
    let command = session(&state, &key)
        .map(|s| s.command.clone())
        .unwrap_or_default();
    let mut report = RenewReport {
        mirror: key.mirror.clone(),
        target: key.target.clone(),
        job_id: job,
        iterations: 0,
        relaunched: Vec::new(),
        cancelled: Vec::new(),
        failed_relaunches: 0,
        stopped: false,
    };
    let mut backoff = settings.backoff.clone();
    // Why the job the report would name is not known to be live after the last step: a
    // renew's success names a live job of the session, never one it could not check or one
    // that is gone while its relaunch failed.
    let mut not_live: Option<OpError> = None;
    loop {
        if settings
            .max_iterations
            .is_some_and(|m| report.iterations >= m)
        {
            break;
        }
        if settings.stop.requested() {
            report.stopped = true;
            break;
        }
        report.iterations += 1;
        let mut answer = env.slurm.list_jobs(&JobQuery::ids(vec![job])).await;
        if answer.job(job).live().is_some_and(is_held) {
            // Held by a launch that died before settling it: it would never run (and a
            // held PENDING job looks fine to `decide`).
            job = hold::settle_recorded(env, &r, job).await?;
            report.job_id = job;
            answer = env.slurm.list_jobs(&JobQuery::ids(vec![job])).await;
        }
        let left = answer
            .job(job)
            .live()
            .and_then(|row| row.time_left.as_secs());
        let probe = probe_of(&answer, job);
        let action = decide(&probe, left, settings.drain_minutes);
        let last = settings.max_iterations == Some(report.iterations);
        let pause = match action {
            Action::Hold => {
                if let Probe::Unknown(e) = &probe {
                    progress(format!("job {job}: state unknown ({e}); holding"));
                    not_live = Some(OpError::Unknown(format!(
                        "could not check Slurm job {job} of {key} ({e}); it stays recorded and \
                         nothing was relaunched. Retry `{}`",
                        command_for("renew", &key)
                    )));
                } else {
                    backoff.reset();
                    not_live = None;
                }
                settings.poll
            }
            Action::RelaunchDraining | Action::RelaunchLost => {
                let draining = action == Action::RelaunchDraining;
                progress(if draining {
                    format!(
                        "job {job} ends within {} min; starting its replacement",
                        settings.drain_minutes
                    )
                } else {
                    format!("job {job} is gone; starting a new one")
                });
                let req = LaunchRequest {
                    mirror: key.mirror.clone(),
                    target: key.target.clone(),
                    detached: true,
                    command: command.clone(),
                    replacing: draining.then_some(job),
                    require_running: true,
                };
                match launch(env, &req).await {
                    Ok(new) if new.job() == job => {
                        return Err(OpError::Failed(format!(
                            "the relaunch of {key} returned job {job}, the job it replaces; \
                             nothing was cancelled"
                        )));
                    }
                    Ok(new) => {
                        let new_job = new.job();
                        report.relaunched.push(new_job);
                        progress(format!("{key}: job {new_job} runs ({:?})", new.action));
                        if draining {
                            match cancel_old(env, &r.token, &key, job).await {
                                Ok(()) => report.cancelled.push(job),
                                Err(e) => progress(format!(
                                    "cancelling the replaced job {job} failed: {e}; \
                                     `dispatch sessions` flags it, `{}` settles it",
                                    command_for("release", &key)
                                )),
                            }
                        }
                        job = new_job;
                        report.job_id = job;
                        backoff.reset();
                        not_live = None;
                        settings.poll
                    }
                    Err(e) => {
                        report.failed_relaunches += 1;
                        // Draining: the old job is still live (its probe said so). Lost: the
                        // session holds no live job now.
                        not_live = (!draining).then(|| lost_and_not_relaunched(&key, job, &e));
                        let delay = backoff.next_delay();
                        progress(format!(
                            "relaunch of {key} failed: {e}; keeping job {job}, retrying in {} s",
                            delay.as_secs()
                        ));
                        delay
                    }
                }
            }
        };
        if last {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = settings.stop.wake.notified() => {}
        }
    }
    match not_live {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// The error of a renew whose job is gone and whose relaunch failed with `e`: a failure
/// (exit 1) when the relaunch definitely made nothing, else an unknown outcome (exit 4).
fn lost_and_not_relaunched(
    key: &crate::event::session::SessionKey,
    job: JobId,
    e: &OpError,
) -> OpError {
    let text = format!(
        "Slurm job {job} of {key} is gone and its relaunch failed: {e}. The session holds no \
         live job; retry `{}`",
        command_for("renew", key)
    );
    match e {
        OpError::Usage(_)
        | OpError::Config(_)
        | OpError::SessionRefused(_)
        | OpError::Refused(_)
        | OpError::AssetRefused(_)
        | OpError::TrialRefused(_)
        | OpError::ForgetRefused(_)
        | OpError::NotFound(_)
        | OpError::Failed(_) => OpError::Failed(text),
        OpError::Unknown(_) | OpError::Journal(_) | OpError::StateDir(_) => OpError::Unknown(text),
    }
}

async fn cancel_old<S: Scheduler>(
    env: &Env<'_, S>,
    token: &str,
    key: &crate::event::session::SessionKey,
    job: JobId,
) -> Result<(), OpError> {
    let _lock = TokenLock::take(env.state_dir, token)?;
    let (book, _) = Book::open(env.state_dir)?;
    cancel(env, &book, key, job).await.map(|_| ())
}
