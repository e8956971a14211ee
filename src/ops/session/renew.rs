//! `dispatch session renew`: keep a session's job alive across its time limit. Hold while the
//! job is fine (or its state is unknown), start a replacement while it drains, start a new one
//! when it is lost; cancel the old job only after the new one runs.
//!
//! The loop runs over `launch` and `release::cancel`; what each turn does is decided in
//! `policy::session::renew` (`judge`, `turn`, the backoff).

use std::time::Duration;

use serde::Serialize;

use super::launch::{launch, LaunchReport, LaunchRequest};
use super::release::cancel;
use super::{adopt_or_vouch, command_for, hold, lock_session, session, Env, OpError, Resolved};
use crate::event::session::SessionKey;
use crate::next::Next::Sessions;
use crate::ops::reconcile::grace_of;
use crate::policy::session::renew::{judge, turn, Action, Backoff, Turn};
use crate::policy::session::{is_held, Probe};
use crate::slurm::{JobId, JobQuery, JobRow, Preempted, Scheduler};
use crate::state::State;

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

    /// Sleep for `pause`, or until a stop is requested.
    async fn sleep(&self, pause: Duration) {
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = self.wake.notified() => {}
        }
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
    let r = env.resolve(mirror, target)?;
    let (job, command) = job_to_renew(env, &r).await?;
    let mut renewal = Renewal {
        env,
        r: &r,
        settings,
        command,
        job,
        report: RenewReport::new(&r.key, job),
        backoff: settings.backoff.clone(),
        not_live: None,
        preempted: None,
    };
    loop {
        let last = match turn(
            renewal.report.iterations,
            settings.max_iterations,
            settings.stop.requested(),
        ) {
            Turn::Step { last } => last,
            Turn::Done => break,
            Turn::Stopped => {
                renewal.report.stopped = true;
                break;
            }
        };
        renewal.report.iterations += 1;
        let pause = renewal.step().await?;
        if last {
            break;
        }
        settings.stop.sleep(pause).await;
    }
    renewal.finish()
}

impl RenewReport {
    fn new(key: &SessionKey, job: JobId) -> RenewReport {
        RenewReport {
            mirror: key.mirror.clone(),
            target: key.target.clone(),
            job_id: job,
            iterations: 0,
            relaunched: Vec::new(),
            cancelled: Vec::new(),
            failed_relaunches: 0,
            stopped: false,
        }
    }
}

/// The job to renew and the command it runs: the recorded one, else (a lost state directory)
/// the one found by name, as launch would find it.
async fn job_to_renew<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
) -> Result<(JobId, Vec<String>), OpError> {
    let recorded = |state: &State| session(state, &r.key).and_then(|s| s.job_id());
    let command = |state: &State| {
        session(state, &r.key)
            .map(|s| s.command.clone())
            .unwrap_or_default()
    };
    let state = env.ctx.read_state()?;
    if let Some(job) = recorded(&state) {
        return Ok((job, command(&state)));
    }
    let (_lock, state) = lock_session(env, &r.token)?;
    let job = match recorded(&state) {
        Some(job) => job,
        None => find_by_name(env, r).await?,
    };
    Ok((job, command(&state)))
}

/// No job recorded, under the token lock: adopt the session's live job by name, or say why
/// there is none to renew.
async fn find_by_name<S: Scheduler>(env: &Env<'_, S>, r: &Resolved<'_>) -> Result<JobId, OpError> {
    let key = &r.key;
    let (probe, adopted) = adopt_or_vouch(env, r).await?;
    match (adopted, probe.cannot_vouch()) {
        (Some((job, _)), _) => {
            (env.progress)(&format!(
                "no job was recorded for {key}; found job {job} by name"
            ));
            Ok(job)
        }
        (None, Some(why)) => Err(OpError::Unknown(format!(
            "no job is recorded for {key}, and {why}; nothing was done. Retry, or look with \
             `squeue --me --name={}`",
            r.job_name
        ))),
        (None, None) => Err(OpError::Failed(format!(
            "no live session {key} to renew (nothing recorded, and no job of its target named \
             {}): start one with {}",
            r.job_name,
            command_for("launch", key)
        ))),
    }
}

/// One renew in progress: the job it holds, and what its steps did so far.
struct Renewal<'e, 'a, S: Scheduler> {
    env: &'e Env<'a, S>,
    r: &'e Resolved<'e>,
    settings: &'e RenewSettings,
    command: Vec<String>,
    job: JobId,
    report: RenewReport,
    backoff: Backoff,
    /// Why the job the report would name is not known to be live after the last step: a
    /// renew's success names a live job of the session, never one it could not check or one
    /// that is gone while its relaunch failed.
    not_live: Option<OpError>,
    /// The job is in Slurm's preemption grace, as the last step saw it.
    preempted: Option<Preempted>,
}

impl<S: Scheduler> Renewal<'_, '_, S> {
    fn progress(&self, line: String) {
        (self.env.progress)(&line);
    }

    /// Observe the job, judge it (`policy::session::renew`), act; the pause before the next.
    async fn step(&mut self) -> Result<Duration, OpError> {
        let (probe, action) = self.look().await?;
        match action {
            Action::Hold => Ok(self.hold(&probe)),
            Action::RelaunchDraining => self.relaunch(true).await,
            Action::RelaunchLost => self.relaunch(false).await,
        }
    }

    async fn look(&mut self) -> Result<(Probe, Action), OpError> {
        let slurm = &self.env.ctx.sched;
        let mut answer = slurm.list_jobs(&JobQuery::ids(vec![self.job])).await;
        if answer.job(self.job).live().is_some_and(is_held) {
            // Held by a launch that died before settling it: it would never run (and a
            // held PENDING job looks fine to `decide`).
            let kept = hold::settle_recorded(self.env, self.r, self.job).await?;
            answer = slurm.list_jobs(&JobQuery::ids(vec![kept])).await;
            self.job = kept;
            self.report.job_id = kept;
        }
        let hint = answer
            .job(self.job)
            .live()
            .is_some_and(JobRow::end_pulled_forward);
        self.preempted = match hint {
            true => grace_of(self.env.ctx, self.job).await,
            false => None,
        };
        Ok(judge(&answer, self.job, self.settings.drain_minutes))
    }

    fn hold(&mut self, probe: &Probe) -> Duration {
        let (job, key) = (self.job, &self.r.key);
        if let Probe::Unknown(e) = probe {
            self.progress(format!("job {job}: state unknown ({e}); holding"));
            self.not_live = Some(OpError::Unknown(format!(
                "could not check Slurm job {job} of {key} ({e}); it stays recorded and nothing \
                 was relaunched. Retry {}",
                command_for("renew", key)
            )));
        } else {
            if let Some(p) = &self.preempted {
                self.progress(format!("job {job}: {} (Slurm's grace); holding", p.until()));
            }
            self.backoff.reset();
            self.not_live = None;
        }
        self.settings.poll
    }

    /// Start the replacement of a job that ends soon (`draining`) or of a lost one.
    async fn relaunch(&mut self, draining: bool) -> Result<Duration, OpError> {
        let (job, key) = (self.job, &self.r.key);
        self.progress(
            if let Some(p) = self.preempted.as_ref().filter(|_| draining) {
                format!(
                    "job {job}: {} (Slurm's grace); starting its replacement",
                    p.until()
                )
            } else if draining {
                format!(
                    "job {job} ends within {} min; starting its replacement",
                    self.settings.drain_minutes
                )
            } else {
                format!("job {job} is gone; starting a new one")
            },
        );
        let req = LaunchRequest {
            mirror: key.mirror.clone(),
            target: key.target.clone(),
            detached: true,
            command: self.command.clone(),
            replacing: draining.then_some(job),
        };
        match launch(self.env, &req).await {
            Ok(new) if new.job() == job => Err(OpError::Failed(format!(
                "the relaunch of {key} returned job {job}, the job it replaces; nothing was \
                 cancelled"
            ))),
            Ok(new) => {
                self.relaunched(new, draining).await;
                Ok(self.settings.poll)
            }
            Err(e) => Ok(self.relaunch_failed(draining, &e)),
        }
    }

    /// The replacement runs: a drained job is cancelled now, and the session holds the new one.
    async fn relaunched(&mut self, new: LaunchReport, draining: bool) {
        let (job, key, new_job) = (self.job, &self.r.key, new.job());
        self.report.relaunched.push(new_job);
        self.progress(format!("{key}: job {new_job} runs ({:?})", new.action));
        if draining {
            match cancel_old(self.env, &self.r.token, key, job).await {
                Ok(()) => self.report.cancelled.push(job),
                Err(e) => self.progress(format!(
                    "cancelling the replaced job {job} failed: {e}; {Sessions} flags \
                     it, {} settles it",
                    command_for("release", key)
                )),
            }
        }
        self.job = new_job;
        self.report.job_id = new_job;
        self.backoff.reset();
        self.not_live = None;
    }

    fn relaunch_failed(&mut self, draining: bool, e: &OpError) -> Duration {
        let (job, key) = (self.job, &self.r.key);
        self.report.failed_relaunches += 1;
        // Draining: the old job is still live (its probe said so). Lost: the session holds no
        // live job now.
        self.not_live = (!draining).then(|| lost_and_not_relaunched(key, job, e));
        let delay = self.backoff.next_delay();
        self.progress(format!(
            "relaunch of {key} failed: {e}; keeping job {job}, retrying in {} s",
            delay.as_secs()
        ));
        delay
    }

    fn finish(self) -> Result<RenewReport, OpError> {
        self.not_live.map_or(Ok(self.report), Err)
    }
}

/// The error of a renew whose job is gone and whose relaunch failed with `e`: a failure
/// (exit 1) when the relaunch definitely made nothing, else an unknown outcome (exit 4).
fn lost_and_not_relaunched(key: &SessionKey, job: JobId, e: &OpError) -> OpError {
    let text = format!(
        "Slurm job {job} of {key} is gone and its relaunch failed: {e}. The session holds no \
         live job; retry {}",
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
        OpError::AboutJob(about) => lost_and_not_relaunched(key, job, about.error.underlying()),
    }
}

async fn cancel_old<S: Scheduler>(
    env: &Env<'_, S>,
    token: &str,
    key: &SessionKey,
    job: JobId,
) -> Result<(), OpError> {
    let (_lock, _) = lock_session(env, token)?;
    cancel(env, key, job).await.map(|_| ())
}
