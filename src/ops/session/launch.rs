//! `dispatch session launch`: reuse the recorded job, else adopt a live job of this target
//! found by name, else submit one. Never two jobs for one session.
//!
//! The steps: record probe → name probe → intent → `sbatch --hold` (or `salloc --no-shell
//! --hold`) → the job's id → settle the hold (`hold`) → a bounded poll until it runs.
//!
//! A submission of this session may be in flight: an intent without outcome, whose launcher
//! died with sbatch or salloc running (the token lock is free again). Such an sbatch still
//! submits. So a name probe that finds nothing does not lead to a submit at once. The launch
//! probes by name (pauses up to 2 s, progress every 30 s) until the submit call's limit
//! (`Scheduler::longest_call`) plus the settle margin (30 s) have passed since the intent
//! (`policy::session::in_flight_wait`), and adopts the job if it appears.
//!
//! Preemption (issue 38): a kept job in Slurm's preemption grace is live, so it stays the
//! session's and nothing is submitted beside it; the report says when Slurm kills it
//! (`preempted`, one `scontrol show job`, asked only when squeue lists its end pulled forward).
//! A recorded job proven over is cleared with how it ended (`SessionCleared`'s reason: the
//! cause, then Slurm's words, `policy::session::ended`), which the report gives as `ended`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
use uuid::Uuid;

use super::{
    adopt_by_name, command_for, ended_of, hold, lock_session, script, session, token_clash, Env,
    NameProbe, OpError, Resolved, MAX_SESSIONS,
};
use crate::event::session::{
    SessionCleared, SessionJobSubmitted, SessionLaunchIntent, SessionNodeResolved,
    SessionSubmitFailed,
};
use crate::event::Event;
use crate::event::Micros;
use crate::failpoint;
use crate::next::Next::Sessions;
use crate::ops::poll::Poller;
use crate::ops::reconcile::grace_of;
use crate::policy::session::ended::Ended;
use crate::policy::session::recorded::{recorded, Recorded};
use crate::policy::session::refusal::SessionRefusal;
use crate::policy::session::{in_flight_wait, poll_of, Poll, Probe, Seen};
use crate::slurm::{
    AcctQuery, ActionError, AllocRequest, BatchPayload, BatchRequest, JobId, JobName, JobQuery,
    JobState, MemoryMb, Placement, Preempted, Refusal, Scheduler, SlurmDuration,
};
use crate::state::session::Session;

/// How often a wait for a job to run says it is still waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// The longest pause between name probes while an interrupted submission may still appear.
const IN_FLIGHT_POLL_MAX: Duration = Duration::from_secs(2);

/// sucoder's default when a target gives no time.
pub const DEFAULT_TIME: &str = "02:00:00";

#[derive(Clone, Debug, Default)]
pub struct LaunchRequest {
    pub mirror: String,
    pub target: String,
    /// Do not attach afterwards. A kept job that is not RUNNING is waited for either way.
    pub detached: bool,
    pub command: Vec<String>,
    /// The job this launch replaces (renew): never reused, never adopted.
    pub replacing: Option<JobId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LaunchAction {
    Submitted,
    Reused,
    Adopted,
}

impl LaunchAction {
    /// As the JSON documents spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            LaunchAction::Submitted => "submitted",
            LaunchAction::Reused => "reused",
            LaunchAction::Adopted => "adopted",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct LaunchReport {
    pub mirror: String,
    pub target: String,
    pub job_id: JobId,
    pub action: LaunchAction,
    pub node: Option<String>,
    pub state: String,
    /// The job kept is in Slurm's preemption grace (`scontrol show job`'s `PreemptTime`, and
    /// `EndTime`: when Slurm kills it): `{"at", "ends_at"}`; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preempted: Option<Preempted>,
    /// The job the session recorded, which this launch found over (and cleared): `{"job_id",
    /// "cause", "proof"}` (`preempted` with Slurm's `PREEMPTED`, …); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<Ended>,
    /// Warnings for stderr (other targets' jobs, several matches, a failed name probe).
    #[serde(skip)]
    pub warnings: Vec<String>,
    #[serde(skip)]
    pub confined: bool,
    #[serde(skip)]
    pub command: Vec<String>,
}

impl LaunchReport {
    pub fn job(&self) -> JobId {
        self.job_id
    }
}

/// The sbatch/salloc placement of a target, checked before any Slurm call.
pub fn placement(env: &Env<'_, impl Scheduler>, r: &Resolved) -> Result<Placement, OpError> {
    let t = r.target;
    let bad = |key: &str, value: &str, e: String| {
        OpError::Config(crate::config::ConfigError::Malformed {
            path: env.config_path.to_owned(),
            message: format!("targets.{}.{key} = {value:?}: {e}", r.key.target),
        })
    };
    let time_text = t.time.as_deref().unwrap_or(DEFAULT_TIME);
    let time = SlurmDuration::parse_request(time_text)
        .map_err(|e| bad("time", time_text, e.to_string()))?;
    let mem = t
        .mem
        .as_deref()
        .map(|m| MemoryMb::parse_request(m).map_err(|e| bad("mem", m, e.to_string())))
        .transpose()?;
    let p = Placement {
        partition: Some(t.partition.clone()),
        account: Some(t.account.clone()),
        qos: t.qos.clone(),
        time: Some(time),
        nodes: None,
        cpus_per_task: t.cpus_per_task,
        mem,
    };
    // Build one argv now so a value Slurm would misread fails here, not after the intent.
    let mut probe = AllocRequest::new(r.job_name.clone());
    probe.placement = p.clone();
    probe.argv().map_err(|e| match &e {
        crate::slurm::RequestError::Field { field, value, .. } => bad(field, value, e.to_string()),
        _ => bad("(placement)", "", e.to_string()),
    })?;
    Ok(p)
}

struct Launch<'e, 'a, S: Scheduler> {
    env: &'e Env<'a, S>,
    r: Resolved<'e>,
    req: &'e LaunchRequest,
    warnings: Vec<String>,
    /// The recorded job this launch found over.
    ended: Option<Ended>,
}

pub async fn launch<S: Scheduler>(
    env: &Env<'_, S>,
    req: &LaunchRequest,
) -> Result<LaunchReport, OpError> {
    let r = env.resolve(&req.mirror, &req.target)?;
    let placement = placement(env, &r)?;
    let (_lock, state) = lock_session(env, &r.token)?;
    token_clash(&state, &r)?;
    let existing = session(&state, &r.key).cloned();
    if existing.is_none() && state.sessions.sessions.len() >= MAX_SESSIONS {
        return Err(SessionRefusal::TooManySessions {
            max: MAX_SESSIONS,
            key: r.key.clone(),
        }
        .into());
    }
    let mut l = Launch {
        env,
        r,
        req,
        warnings: Vec::new(),
        ended: None,
    };
    let mut exclude: Vec<JobId> = req.replacing.into_iter().collect();
    // Step 1: the job the record names.
    if let Some(keep) = l.recorded(existing.as_ref(), &mut exclude).await? {
        return l.settle(keep).await;
    }
    // Step 2: a live job of this target, found by name.
    let probe = match l.found_by_name(existing.as_ref(), &exclude).await? {
        Found::Keep(keep) => return l.settle(keep).await,
        Found::Nothing(probe) => probe,
    };
    // Step 3: submit, once this target's ending jobs are gone (never two jobs at once).
    let ending: Vec<JobId> = probe.plan.iter().flat_map(|p| p.ending()).collect();
    for job in ending {
        l.wait_ended(job, JobState::Completing).await?;
    }
    l.submit(placement).await
}

/// A job the launch keeps (reused or adopted): `Launch::settle` makes it the session's.
struct Keep {
    job: JobId,
    action: LaunchAction,
    state: JobState,
    node: Option<String>,
    /// Still held: released before it is kept.
    held: bool,
    /// Listed RUNNING with its end pulled forward: maybe in a preemption's grace.
    preempt_hint: bool,
}

impl Keep {
    fn adopted((job, seen): (JobId, Seen)) -> Keep {
        Keep {
            job,
            action: LaunchAction::Adopted,
            state: seen.state,
            node: seen.node,
            held: seen.held,
            preempt_hint: seen.preempt_hint,
        }
    }
}

/// Where a launch's submission writes, made ready before its intent.
enum Staged {
    Batch { script: PathBuf, log: PathBuf },
    Alloc { log: PathBuf },
}

/// What a held salloc waits beyond the launch's own wait for its job to run: the arbitration
/// (name probes, a release) and the controller's scheduling pass after the release.
const HELD_SALLOC_EXTRA: Duration = Duration::from_secs(30);

/// salloc's `--immediate`: give up (and cancel its own queued job) once the launch's wait and
/// [`HELD_SALLOC_EXTRA`] have passed, rather than wait for ever in the background. Never 1:
/// Slurm 22.05 and 24.11 refuse `--immediate=1` with `--hold` ("Job dependency problem").
fn salloc_limit_s(run_budget: Duration) -> u32 {
    let s = (run_budget + HELD_SALLOC_EXTRA)
        .as_secs()
        .clamp(2, 3600 + 30);
    s as u32
}

/// A held submission: refused by `sbatch --test-only` before anything was submitted, or made,
/// with its outcome.
enum Call {
    Refused(ActionError),
    /// `sbatch --test-only` got no answer in time: nothing was submitted, and a submission
    /// would only wait for the same controller again.
    Unanswered(crate::slurm::SlurmError),
    Made(Result<JobId, ActionError>),
}

/// What the name probe of step 2 found.
enum Found {
    Keep(Keep),
    /// Nothing to adopt, and nothing that forbids a submit: the probe, for its ending jobs.
    Nothing(NameProbe),
}

impl<S: Scheduler> Launch<'_, '_, S> {
    /// Step 1: the job the record names, unless the launch replaces it. Reused when it is
    /// live; left out (`exclude`) once proven ending or gone; a held one is settled as its dead
    /// launch would have (`hold::settle_orphan`), and left out when that cancelled it.
    async fn recorded(
        &mut self,
        existing: Option<&Session>,
        exclude: &mut Vec<JobId>,
    ) -> Result<Option<Keep>, OpError> {
        let Some(job) = existing.and_then(|s| s.job_id()) else {
            return Ok(None);
        };
        if exclude.contains(&job) {
            return Ok(None);
        }
        let since = existing.and_then(|s| s.job.as_ref()).map(|j| j.since);
        let (probe, held, preempt_hint) = hold::probe_held(self.env, job).await;
        match recorded(probe, held) {
            Recorded::SettleHeld => {
                let orphan = hold::settle_orphan(self.env, &self.r, job, self.req.replacing);
                let Some(kept) = orphan.await? else {
                    exclude.push(job);
                    return Ok(None);
                };
                self.warnings.extend(kept.warnings);
                let action = match kept.yielded {
                    true => LaunchAction::Adopted,
                    false => LaunchAction::Reused,
                };
                Ok(Some(Keep {
                    job: kept.job,
                    action,
                    state: kept.state,
                    node: kept.node,
                    held: false,
                    preempt_hint: false,
                }))
            }
            Recorded::WaitThenSubmit(state) => {
                let end = self.wait_ended(job, state).await?;
                self.clear(job, end.as_ref(), since).await?;
                exclude.push(job);
                Ok(None)
            }
            Recorded::Reuse { state, node } => Ok(Some(Keep {
                job,
                action: LaunchAction::Reused,
                state,
                node,
                held,
                preempt_hint,
            })),
            Recorded::Gone(state) => {
                self.clear(job, state.as_ref(), since).await?;
                exclude.push(job);
                Ok(None)
            }
            Recorded::Unknown(e) => Err(OpError::Unknown(format!(
                "could not verify Slurm job {job} of session {}: {e}. Nothing was submitted. \
                 Retry, or {} to cancel it",
                self.r.key,
                command_for("release", &self.r.key)
            ))),
        }
    }

    /// The recorded job is proven over: the record is cleared with how it ended (Slurm's
    /// cause and words, `policy::session::ended`), which the report says too.
    async fn clear(
        &mut self,
        job: JobId,
        state: Option<&JobState>,
        since: Option<Micros>,
    ) -> Result<(), OpError> {
        let end = ended_of(self.env, job, state, since).await;
        self.append(Event::SessionCleared(SessionCleared {
            session: self.r.key.clone(),
            job_id: job,
            reason: end.reason(),
        }))?;
        self.warnings.push(format!(
            "Slurm job {job} of session {} is over: {} ({}); it is no longer the session's job",
            self.r.key, end.cause, end.proof
        ));
        self.ended = Some(end);
        Ok(())
    }

    /// Step 2: a live job of this target found by name. A submission whose launcher died
    /// with sbatch/salloc in flight may still create its job (an orphaned sbatch): wait for
    /// it within its bound, probing, before a probe that finds nothing may lead to a submit.
    async fn found_by_name(
        &mut self,
        existing: Option<&Session>,
        exclude: &[JobId],
    ) -> Result<Found, OpError> {
        if let Some(sub) = existing
            .and_then(|s| s.submission.as_ref())
            .filter(|sub| sub.failure.is_none())
        {
            if let Some(seen) = self.wait_in_flight(sub.since, exclude).await? {
                return Ok(Found::Keep(Keep::adopted(seen)));
            }
        }
        let may_exist = existing.is_some_and(|s| s.may_have_unknown_job());
        let (probe, adopted) = self.probe_within_wait(exclude).await?;
        self.warnings.extend(probe.warnings.iter().cloned());
        if let Some(seen) = adopted {
            failpoint::hit("session-after-adopt");
            return Ok(Found::Keep(Keep::adopted(seen)));
        }
        self.refuse_unsettled(&probe, may_exist)?;
        Ok(Found::Nothing(probe))
    }

    /// The name probe, asked again while it fails, until the launch's `--wait` is over: it
    /// fails closed (no answer, no submit: it is the arbiter between state directories), so a
    /// controller blip must not become "cannot launch". Going on past a failed probe (as sucoder,
    /// the tool sessions replace, did) can submit a second job beside one it could not see.
    async fn probe_within_wait(
        &mut self,
        exclude: &[JobId],
    ) -> Result<(NameProbe, Option<(JobId, Seen)>), OpError> {
        let waits = self.env.waits;
        let mut poll = Poller::within(waits.poll_first, waits.poll_max, waits.run_budget);
        let mut told: Option<Instant> = None;
        loop {
            let (probe, adopted) =
                adopt_by_name(self.env, &self.r, exclude, self.req.replacing).await?;
            // Lines of this name that no parser reads are a job that exists: no retry helps.
            let retry = adopted.is_none() && probe.unreadable.is_none();
            let Some(why) = probe.failed.as_ref().filter(|_| retry) else {
                return Ok((probe, adopted));
            };
            let left = poll.left();
            if left.is_zero() {
                return Ok((probe, adopted));
            }
            if told.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) {
                (self.env.progress)(&format!(
                    "the name probe of {} failed ({why}); nothing is submitted without its \
                     answer, asking again for up to {} s more (--wait)",
                    self.r.key,
                    left.as_secs_f64().ceil() as u64
                ));
                told = Some(Instant::now());
            }
            poll.pause().await;
        }
    }

    /// A probe that cannot show there is no job of this session forbids a submit.
    ///
    /// squeue --name filters by name, so each unreadable line is a job of this name: reading
    /// the listing without it as "no job found" would submit a second job beside it. A failed
    /// probe blocks: a job of this session may run (a lost state directory, another state
    /// directory, an earlier submission the record cannot name), and even a held job beside
    /// it is a second job in the queue. An empty listing proves nothing alone (a blackout
    /// answers empty), but every launch submits held (sbatch or salloc), and `hold::settle`
    /// releases that job only on a listing that shows it beside no older job of this target:
    /// its own job is the watermark that listing needs.
    fn refuse_unsettled(&self, probe: &NameProbe, may_exist: bool) -> Result<(), OpError> {
        let (key, name) = (&self.r.key, &self.r.job_name);
        if let Some(lines) = &probe.unreadable {
            return Err(OpError::Unknown(format!(
                "squeue lists a job named {name} that dispatch cannot read ({lines:?}); it may \
                 be this session's. Nothing was submitted. Look with `squeue --me \
                 --name={name}`; `scancel` it if it is not wanted, then retry {}",
                command_for("launch", key)
            )));
        }
        if let Some(why) = probe.cannot_vouch() {
            let what = match may_exist {
                true => "an earlier submission for it may have created a job",
                false => "no live job is recorded for it",
            };
            return Err(OpError::Unknown(format!(
                "{key}: {what}, and {why}; a job of this session may already be queued or run, \
                 so nothing was submitted. Retry {} once squeue answers, or look with `squeue \
                 --me --name={name}`",
                command_for("launch", key),
            )));
        }
        Ok(())
    }

    fn append(&self, event: Event) -> Result<(), OpError> {
        self.env.ctx.append(event).map(drop)
    }

    fn report(
        self,
        job: JobId,
        action: LaunchAction,
        state: JobState,
        node: Option<String>,
    ) -> LaunchReport {
        LaunchReport {
            mirror: self.r.key.mirror.clone(),
            target: self.r.key.target.clone(),
            job_id: job,
            action,
            node,
            state: state.to_string(),
            preempted: None,
            ended: self.ended,
            warnings: self.warnings,
            confined: self.r.target.confined,
            command: self.req.command.clone(),
        }
    }

    /// A reused or adopted job: record its node, and refuse to attach to one that does not run.
    /// A held one is released first: it is the oldest of its target (a younger held job is
    /// never adopted), so whoever held it would release it too.
    async fn settle(mut self, keep: Keep) -> Result<LaunchReport, OpError> {
        let Keep {
            job,
            action,
            state,
            node,
            held,
            preempt_hint,
        } = keep;
        if held {
            hold::release(self.env, &self.r, job).await?;
        }
        // A kept job that is still queued is waited for as a new one is (within --wait): the
        // answer names its node, or the command fails saying it is still pending. (Other live
        // states without a node, SUSPENDED or CONFIGURING, are kept as they are when detached.)
        if state == JobState::Pending || (!self.req.detached && node.is_none()) {
            let (state, node) = self.wait_running(job, action).await?;
            return Ok(self.report(job, action, state, Some(node)));
        }
        if let Some(n) = &node {
            self.record_node(job, n)?;
        }
        let preempted = match preempt_hint && state == JobState::Running {
            true => self.in_grace(job, action).await,
            false => None,
        };
        if !self.req.detached && state != JobState::Running {
            let not_running = OpError::Failed(format!(
                "Slurm job {job} of session {}, {}, is {state}, not running; nothing was \
                 submitted. Attach once it runs: {}",
                self.r.key,
                action.as_str(),
                command_for("attach", &self.r.key)
            ));
            return Err(about_job(job, action, &state, not_running));
        }
        let mut report = self.report(job, action, state, node);
        report.preempted = preempted;
        Ok(report)
    }

    /// Whether the job kept is in Slurm's preemption grace: it is live, so it stays the
    /// session's (never a second job beside it), and the launch says when Slurm kills it and
    /// what to run then.
    async fn in_grace(&mut self, job: JobId, action: LaunchAction) -> Option<Preempted> {
        let preempted = grace_of(self.env.ctx, job).await?;
        self.warnings.push(format!(
            "Slurm job {job} of session {} ({}) was preempted at {}: {} (Slurm's grace), and \
             it stays the session's job until then, so nothing new was submitted. Once it has \
             ended, {} submits a new one",
            self.r.key,
            action.as_str(),
            preempted.at,
            preempted.until(),
            command_for("launch", &self.r.key)
        ));
        Some(preempted)
    }

    fn record_node(&self, job: JobId, node: &str) -> Result<(), OpError> {
        self.append(Event::SessionNodeResolved(SessionNodeResolved {
            session: self.r.key.clone(),
            job_id: job,
            node: node.to_owned(),
        }))
    }

    async fn submit(mut self, placement: Placement) -> Result<LaunchReport, OpError> {
        let key = self.r.key.clone();
        let confined = self.r.target.confined;
        let program = if confined { "sbatch" } else { "salloc" };
        let submission_id = Uuid::new_v4();
        let staged = self.stage()?;
        self.append(Event::SessionLaunchIntent(SessionLaunchIntent {
            session: key.clone(),
            submission_id,
            job_name: self.r.job_name.to_string(),
            confined,
            command: self.req.command.clone(),
            replacing: self.req.replacing,
        }))?;
        failpoint::hit("session-after-launch-intent");
        let result = match self.submit_held(placement, staged).await {
            Call::Refused(e) => return Err(self.submit_failed(submission_id, program, e)),
            Call::Unanswered(e) => return Err(self.test_unanswered(submission_id, e)),
            Call::Made(result) => result,
        };
        failpoint::hit("session-after-submit");
        let job = result.map_err(|e| self.submit_failed(submission_id, program, e))?;
        if let Err(e) = self.append(Event::SessionJobSubmitted(SessionJobSubmitted {
            session: key.clone(),
            submission_id,
            job_id: job,
        })) {
            return Err(OpError::Unknown(format!(
                "{program} created Slurm job {job} for {key}, but recording it failed: {e}. \
                 The next {} finds it by name; to remove it instead: `scancel {job}`",
                command_for("launch", &key)
            )));
        }
        failpoint::hit("session-after-job-recorded");
        let kept = hold::settle(self.env, &self.r, job, self.req.replacing).await?;
        self.warnings.extend(kept.warnings);
        let action = match kept.yielded {
            true => LaunchAction::Adopted,
            false => LaunchAction::Submitted,
        };
        let (state, node) = self.wait_running(kept.job, action).await?;
        Ok(self.report(kept.job, action, state, Some(node)))
    }

    /// A confined launch's batch script and the directory of its log, or the directory of an
    /// unconfined launch's salloc log: before the intent, so a failure here happens before any
    /// job exists.
    fn stage(&self) -> Result<Staged, OpError> {
        let key = &self.r.key;
        if !self.r.target.confined {
            let log = script::salloc_log(self.env.session_files, &self.r.token, &key.target);
            script::stage_log_dir(&log)?;
            return Ok(Staged::Alloc { log });
        }
        let (script_path, log) = script::paths(self.env.session_files, &self.r.token, &key.target);
        let workdir = self
            .env
            .config
            .mirrors
            .get(&key.mirror)
            .and_then(|m| m.path.as_deref());
        let body = script::body(key, workdir, &self.req.command);
        script::stage(&script_path, &log, &body)?;
        Ok(Staged::Batch {
            script: script_path,
            log,
        })
    }

    /// The held submission: `sbatch --hold` of the staged script, or `salloc --hold`; each
    /// asked of `sbatch --test-only` first. Held until `hold::settle`'s name probe shows no
    /// older job of this target: a launch from another state directory (which this token lock
    /// cannot see) may race.
    async fn submit_held(&self, placement: Placement, staged: Staged) -> Call {
        let name = self.r.job_name.clone();
        let (script_path, log) = match staged {
            Staged::Batch { script, log } => (script, log),
            Staged::Alloc { log } => return self.allocate_held(name, placement, &log).await,
        };
        let payload = BatchPayload::Script {
            path: script_path,
            args: Vec::new(),
        };
        let mut req = BatchRequest::new(name, payload);
        req.placement = placement;
        req.output = Some(log);
        req.extra = vec!["--no-requeue".into(), "--hold".into()];
        if let Some(stop) = test_verdict(self.env.ctx.sched.test_batch(&req).await) {
            return stop;
        }
        Call::Made(
            self.env
                .ctx
                .sched
                .submit_batch(&req)
                .await
                .map(|s| s.job_id),
        )
    }

    async fn allocate_held(&self, name: JobName, placement: Placement, log: &Path) -> Call {
        // salloc has no test mode: sbatch's tests the same placement.
        let mut test = BatchRequest::new(name.clone(), BatchPayload::Wrap(":".to_owned()));
        test.placement = placement.clone();
        if let Some(stop) = test_verdict(self.env.ctx.sched.test_batch(&test).await) {
            return stop;
        }
        let mut req = AllocRequest::new(name);
        req.placement = placement;
        // salloc waits on in the background (its stderr in the log) until `hold::settle`
        // releases or cancels its job.
        req.hold = true;
        req.immediate_secs = Some(salloc_limit_s(self.env.waits.run_budget));
        Call::Made(
            self.env
                .ctx
                .sched
                .allocate_held(&req, log)
                .await
                .map(|a| a.job_id),
        )
    }

    /// The launch stops where `sbatch --test-only` got no answer: recorded as a submission
    /// that definitely made nothing, exit 4 (the controller did not answer; run it again).
    fn test_unanswered(&self, submission_id: Uuid, e: crate::slurm::SlurmError) -> OpError {
        let key = &self.r.key;
        let reason = format!("the controller did not answer `sbatch --test-only` ({e})");
        let event = Event::SessionSubmitFailed(SessionSubmitFailed {
            session: key.clone(),
            submission_id,
            may_exist: false,
            job_hint: None,
            reason: format!("{reason}; nothing was submitted"),
        });
        if let Err(j) = self.append(event) {
            return OpError::Unknown(format!(
                "{reason}, so nothing was submitted for {key}; recording that failed ({j}). \
                 Run {} again once the controller answers",
                command_for("launch", key)
            ));
        }
        OpError::Unknown(format!(
            "{reason}, so nothing was submitted for {key}. Run {} again once the controller \
             answers (`squeue --me` tells)",
            command_for("launch", key)
        ))
    }

    fn submit_failed(&self, submission_id: Uuid, program: &str, e: ActionError) -> OpError {
        let key = &self.r.key;
        let (may_exist, job_hint, reason) = match &e {
            ActionError::Unknown { error, job_hint } => (true, *job_hint, error.to_string()),
            ActionError::Refused(_) | ActionError::Invalid(_) | ActionError::Local(_) => {
                (false, None, e.to_string())
            }
        };
        let event = Event::SessionSubmitFailed(SessionSubmitFailed {
            session: key.clone(),
            submission_id,
            may_exist,
            job_hint,
            reason: reason.clone(),
        });
        if let Err(j) = self.append(event) {
            return OpError::Unknown(format!(
                "{program} failed ({reason}) and recording that failed too ({j}); a job MAY \
                 have been submitted: `squeue --me --name={}`",
                self.r.job_name
            ));
        }
        if may_exist {
            let hint = job_hint
                .map(|j| format!(" (Slurm mentioned job {j})"))
                .unwrap_or_default();
            OpError::Unknown(format!(
                "{program} failed for {key}: {reason}. A job MAY have been submitted{hint}: the \
                 next {} finds it by name and adopts it; {Sessions} lists it; \
                 `scancel --me --name={}` removes it",
                command_for("launch", key),
                self.r.job_name
            ))
        } else if let ActionError::Refused(refusal) = &e {
            let fix = match refusal {
                Refusal::Said { command, .. } if command.program() != program => {
                    "(asked with `sbatch --test-only`: salloc has no test mode); correct the \
                     target in the config"
                }
                Refusal::Said { .. } => "correct the target in the config",
                Refusal::NotStarted(_) => "put Slurm's client programs on PATH",
            };
            OpError::Failed(format!(
                "{key}: {reason}. No job was created; {fix}, then {}",
                command_for("launch", key)
            ))
        } else {
            OpError::Failed(format!(
                "{program} was not run for {key}: {reason}. No job was submitted"
            ))
        }
    }

    /// Probe by name until the interrupted submission's bound has passed, adopting its job if
    /// it appears; `None` once the bound is over with nothing found (step 2 probes once more).
    async fn wait_in_flight(
        &mut self,
        intent_at: Micros,
        exclude: &[JobId],
    ) -> Result<Option<(JobId, Seen)>, OpError> {
        let bound = self.env.ctx.sched.longest_call() + self.env.waits.submit_settle;
        let Some(left) = in_flight_wait(intent_at, Micros::now(), bound) else {
            return Ok(None);
        };
        let key = self.r.key.clone();
        let program = if self.r.target.confined {
            "sbatch"
        } else {
            "salloc"
        };
        (self.env.progress)(&format!(
            "an earlier launch of {key} was interrupted while {program} ran ({} s ago); its job \
             may still appear, so nothing is submitted for up to {} s while dispatch looks for \
             it by name",
            bound.saturating_sub(left).as_secs(),
            left.as_secs_f64().ceil() as u64
        ));
        let mut poll = Poller::new(self.env.waits.poll_first, IN_FLIGHT_POLL_MAX);
        let mut told = Instant::now();
        while in_flight_wait(intent_at, Micros::now(), bound).is_some() {
            let (probe, adopted) =
                adopt_by_name(self.env, &self.r, exclude, self.req.replacing).await?;
            if let Some((job, seen)) = adopted {
                self.warnings.extend(probe.warnings);
                (self.env.progress)(&format!(
                    "found job {job} of the interrupted launch of {key}; adopting it"
                ));
                return Ok(Some((job, seen)));
            }
            if told.elapsed() >= PROGRESS_EVERY {
                (self.env.progress)(&format!(
                    "still no job of the interrupted launch of {key} after {} s; waiting",
                    poll.elapsed().as_secs()
                ));
                told = Instant::now();
            }
            let left = in_flight_wait(intent_at, Micros::now(), bound).unwrap_or_default();
            poll.pause_at_most(left).await;
        }
        Ok(None)
    }

    /// Poll an ending (COMPLETING) job until it is proven gone, within the run budget, saying
    /// so; its final state if squeue still shows one. Nothing is submitted meanwhile.
    async fn wait_ended(&self, job: JobId, seen: JobState) -> Result<Option<JobState>, OpError> {
        let waits = self.env.waits;
        let key = &self.r.key;
        let mut poll = Poller::within(waits.poll_first, waits.poll_max, waits.run_budget);
        let mut unknown_in_a_row = 0;
        (self.env.progress)(&format!(
            "Slurm job {job} of {key} is {seen} (ending): it is not reused; waiting up to {} s \
             for it to be gone before submitting a new one",
            waits.run_budget.as_secs()
        ));
        let mut told = Instant::now();
        loop {
            poll.pause().await;
            match self.env.probe(job).await {
                Probe::Gone { state } => return Ok(state),
                Probe::Live { state, .. } => {
                    unknown_in_a_row = 0;
                    if told.elapsed() >= PROGRESS_EVERY {
                        (self.env.progress)(&format!(
                            "Slurm job {job} of {key} is {state} (ending); waited {} s of up to \
                             {} s for it to be gone before submitting a new one",
                            poll.elapsed().as_secs(),
                            waits.run_budget.as_secs()
                        ));
                        told = Instant::now();
                    }
                    if poll.expired() {
                        return Err(OpError::Unknown(format!(
                            "Slurm job {job} of {key} is still {state} after ~{} s. Nothing was \
                             submitted: a new job now could run beside it. Retry {} once \
                             `squeue -j {job}` no longer lists it",
                            waits.run_budget.as_secs(),
                            command_for("launch", key)
                        )));
                    }
                }
                Probe::Unknown(e) => {
                    unknown_in_a_row += 1;
                    if unknown_in_a_row >= waits.unknown_polls {
                        return Err(OpError::Unknown(format!(
                            "could not check whether Slurm job {job} of {key} has ended: {e}. \
                             Nothing was submitted. Retry {}",
                            command_for("launch", key)
                        )));
                    }
                }
            }
        }
    }

    /// Poll until the job runs on a node, within the budget, saying what it waits for. The id
    /// is already durable.
    async fn wait_running(
        &self,
        job: JobId,
        action: LaunchAction,
    ) -> Result<(JobState, String), OpError> {
        let waits = self.env.waits;
        let mut poll = Poller::within(waits.poll_first, waits.poll_max, waits.run_budget);
        let mut unknown_in_a_row = 0;
        let mut last = JobState::Pending;
        let key = &self.r.key;
        let mut told: Option<(JobState, Option<String>, Instant)> = None;
        loop {
            let answer = self
                .env
                .ctx
                .sched
                .list_jobs(&JobQuery::ids(vec![job]))
                .await;
            match poll_of(&answer, job) {
                Poll::Running(node) => {
                    self.record_node(job, &node)?;
                    if told.is_some() {
                        (self.env.progress)(&format!("job {job} of {key} runs on {node}"));
                    }
                    return Ok((JobState::Running, node));
                }
                Poll::Waiting(state) => {
                    unknown_in_a_row = 0;
                    let reason = crate::policy::session::waiting_reason(&answer, job);
                    self.say_waiting(job, &state, reason, poll.elapsed(), &mut told);
                    last = state;
                }
                Poll::Ended(state) => return Err(self.ended_unrun(job, action, state).await),
                Poll::Unknown(e) => {
                    unknown_in_a_row += 1;
                    if unknown_in_a_row >= waits.unknown_polls {
                        let unknown = OpError::Unknown(format!(
                            "could not poll Slurm job {job} of {key}, {}: {e}. It is recorded \
                             as the session's: {} once it runs, or {} to cancel it",
                            action.as_str(),
                            command_for("attach", key),
                            command_for("release", key)
                        ));
                        return Err(about_job(job, action, &last, unknown));
                    }
                }
            }
            if poll.expired() {
                let pending = OpError::Failed(format!(
                    "Slurm job {job} of {key}, {}, still {last} after ~{} s. It is recorded as \
                     the session's: {} once it runs, or {} to cancel it",
                    action.as_str(),
                    waits.run_budget.as_secs(),
                    command_for("attach", key),
                    command_for("release", key)
                ));
                return Err(about_job(job, action, &last, pending));
            }
            poll.pause().await;
        }
    }

    /// Say what a job waits for, with Slurm's reason, when either changes, and every
    /// [`PROGRESS_EVERY`] while they do not (`told`: what was said last, and when).
    fn say_waiting(
        &self,
        job: JobId,
        state: &JobState,
        reason: Option<String>,
        waited: Duration,
        told: &mut Option<(JobState, Option<String>, Instant)>,
    ) {
        let due = told
            .as_ref()
            .is_none_or(|(s, r, at)| s != state || *r != reason || at.elapsed() >= PROGRESS_EVERY);
        if !due {
            return;
        }
        (self.env.progress)(&format!(
            "job {job} of {} is {state}{}; waited {} s of up to {} s (the job is recorded: \
             interrupt to stop waiting, then {} cancels it)",
            self.r.key,
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            waited.as_secs(),
            self.env.waits.run_budget.as_secs(),
            command_for("release", &self.r.key)
        ));
        *told = Some((state.clone(), reason, Instant::now()));
    }

    /// The job ended before it ran on a node: what it ended as (squeue's last word, else
    /// accounting's), and where its output is.
    async fn ended_unrun(
        &self,
        job: JobId,
        action: LaunchAction,
        state: Option<JobState>,
    ) -> OpError {
        let state = match state {
            Some(s) => s.to_string(),
            None => self.accounting_state(job).await,
        };
        let ended = OpError::Failed(format!(
            "Slurm job {job} of {}, {}, ended before it ran on a node (sacct state: {state}). \
             It stays recorded; its output: {}. {} submits a new one",
            self.r.key,
            action.as_str(),
            self.log_hint(job),
            command_for("launch", &self.r.key)
        ));
        about_job(job, action, &state, ended)
    }

    async fn accounting_state(&self, job: JobId) -> String {
        let since = chrono::Local::now().naive_local() - chrono::Duration::days(2);
        let answer = self
            .env
            .ctx
            .sched
            .accounting(&AcctQuery {
                jobs: vec![job],
                names: vec![],
                since,
            })
            .await;
        answer
            .live()
            .and_then(|rows| rows.into_iter().find(|r| r.job_id() == Some(job)))
            .map_or_else(|| "?".into(), |r| r.state.to_string())
    }

    fn log_hint(&self, job: JobId) -> String {
        if !self.r.target.confined {
            let log = script::salloc_log(self.env.session_files, &self.r.token, &self.r.key.target);
            return format!("(salloc's own messages: {})", log.display());
        }
        let (_, log) = script::paths(self.env.session_files, &self.r.token, &self.r.key.target);
        log.to_string_lossy().replace("%j", &job.to_string())
    }
}

/// A definite refusal in `sbatch --test-only`'s answer, as a refused sbatch would give it
/// (`slurm::submit::REFUSALS`). Anything else (it would run, it could not be asked, words not
/// in the table) refuses nothing: the submit itself decides.
/// A held job is checked less than an unheld one: Slurm 22.05 accepts a held job it can never
/// run (999999G of memory: pending `BadConstraints` for ever, for `sbatch --hold` and `salloc
/// --hold` alike) that it refuses unheld. Its test mode refuses it in the same words, so a launch
/// asks that first and fails as a refused submit would.
/// A test-only that got no answer within the timeout stops the launch too (`Call::Unanswered`):
/// it created nothing, and the submission after it would hang on the same controller.
fn test_verdict(
    answer: Result<crate::slurm::TestedBatch, crate::slurm::SlurmError>,
) -> Option<Call> {
    use crate::slurm::SlurmError;
    let (command, status, stdout, stderr) = match answer {
        Err(e @ SlurmError::Timeout { .. }) => return Some(Call::Unanswered(e)),
        Err(SlurmError::Failed {
            command,
            status: status @ crate::slurm::ExitInfo::Code(_),
            stdout,
            stderr,
        }) => (command, status, stdout, stderr),
        _ => return None,
    };
    let phrase = crate::slurm::submit::test_only_refusal(&stderr)
        .or_else(|| crate::slurm::submit::refusal_phrase(&stdout, &stderr))?;
    Some(Call::Refused(ActionError::Refused(Refusal::Said {
        command,
        phrase,
        status,
        stderr,
    })))
}

/// `error`, about the session's job `job` as `action` came by it, last seen in `state`.
fn about_job(
    job: JobId,
    action: LaunchAction,
    state: &dyn std::fmt::Display,
    error: OpError,
) -> OpError {
    OpError::AboutJob(crate::ops::error::AboutJob {
        job_id: job,
        state: state.to_string(),
        action: action.as_str(),
        error: Box::new(error),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_sallocs_limit_covers_the_wait_and_the_release_and_is_never_1() {
        assert_eq!(salloc_limit_s(Duration::ZERO), 30);
        assert_eq!(salloc_limit_s(Duration::from_secs(1)), 31);
        assert_eq!(salloc_limit_s(Duration::from_secs(600)), 630);
        assert_eq!(salloc_limit_s(Duration::from_secs(1_000_000)), 3630);
    }
}
