//! `dispatch session launch|release|renew|attach` and `dispatch sessions`.
//!
//! Every Slurm effect is bracketed: a durable intent event, the effect, an outcome event.
//! Commands on one mirror are serialized by a lock on its token (every session that can hold
//! a job of that name shares it), so two launches cannot both decide to submit.
//!
//! The token lock is `<state>/sessions/locks/<token>.lock`. `lock_session` takes it and loads
//! the state through `Ctx::lock_and_load`, releasing the journal writer at once; each intent
//! and outcome after it is one `Ctx::append`. So a launch polling for minutes blocks no other
//! command. A lost record heals through every command: release, attach and renew with no job
//! recorded call `adopt_or_vouch`. It adopts by name (`adopt_by_name`, the name probe and
//! target rule launch uses), or corroborates that no job runs (`vouch_absence`). A probe that
//! fails or cannot be read is exit 4, never "nothing".
//!
//! One file per command: `launch`, `hold` (Slurm as the arbiter between state directories),
//! `release`, `renew`, `attach`, `dry_run` (`launch --dry-run`), `report` (`sessions`), and
//! `script` (the batch script a confined session runs, written atomically before the intent).

pub mod attach;
pub mod dry_run;
pub mod hold;
pub mod launch;
pub mod release;
pub mod renew;
pub mod report;
mod script;
pub use script::shell_quote;

use crate::next::Next;
use crate::statedir::Checked;
use std::fs::File;
use std::path::Path;
use std::time::Duration;

use crate::config::{has_worker_job_shape, sanitize_token, Config, ConfigError, Target};
use crate::event::session::SessionAdopted;
use crate::event::session::SessionKey;
use crate::event::Event;
use crate::event::Micros;
use crate::journal::JournalError;
use crate::ops::context::{Ctx, Progress};
use crate::ops::error::OpError;
use crate::policy::reconcile::accounting_over;
use crate::policy::session::absence::{self, Absence};
use crate::policy::session::ended::{ended, Ended};
use crate::policy::session::probe::{passed_note, rows_named, spoken, unparsed};
use crate::policy::session::refusal::SessionRefusal;
use crate::policy::session::{listing_of, plan_adoption, probe_of, Adoption, Pins, Probe, Seen};
use crate::slurm::{AcctQuery, JobId, JobName, JobQuery, JobState, Scheduler};
use crate::state::session::Session;
use crate::state::State;
use crate::statedir::StateDirError;

/// Sessions a journal may hold at once; a launch of a new session past it is refused.
pub const MAX_SESSIONS: usize = 10_000;

/// How long to wait, and how often to look.
#[derive(Clone, Copy, Debug)]
pub struct Waits {
    /// First pause between polls; it doubles up to `poll_max`.
    pub poll_first: Duration,
    pub poll_max: Duration,
    /// How long a launch waits for its job to be RUNNING.
    pub run_budget: Duration,
    /// How long a release waits for squeue to show the cancelled job gone.
    pub gone_budget: Duration,
    /// Consecutive failed polls after which a launch stops and reports the outcome unknown.
    pub unknown_polls: u32,
    /// Beyond the longest submit call, how long an interrupted submission may still gain a
    /// job (`policy::reconcile::SETTLE_MARGIN`).
    pub submit_settle: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Waits {
            poll_first: Duration::from_millis(250),
            poll_max: Duration::from_secs(15),
            run_budget: Duration::from_secs(600),
            gone_budget: Duration::from_secs(30),
            unknown_polls: 3,
            submit_settle: crate::policy::reconcile::SETTLE_MARGIN,
        }
    }
}

/// What every session command works with: the common context of every command (`ctx`: state
/// directory, scheduler, caller) and what only sessions need.
///
/// Journal access is the common one too: the state a command decides on is loaded with
/// `Ctx::lock_and_load` under the session's token lock ([`lock_session`]), and each intent and
/// outcome is one `Ctx::append`. The token lock, not the journal's, serializes the deciding, so
/// a launch polling for minutes holds no journal lock and blocks no other command.
pub struct Env<'a, S: Scheduler> {
    pub ctx: &'a Ctx<S>,
    pub config: &'a Config,
    pub config_path: &'a Path,
    /// Batch scripts and Slurm logs (`config::session_files_dir`).
    pub session_files: &'a Path,
    pub waits: Waits,
    /// Where progress lines go during long waits (stderr for the CLI).
    pub progress: Progress<'a>,
}

/// A (mirror, target) pair checked against the configuration, before any Slurm call.
pub struct Resolved<'a> {
    pub key: SessionKey,
    pub target: &'a Target,
    pub token: String,
    /// The name the session's job gets: `<job_name_prefix><token>`.
    pub job_name: JobName,
    /// The other names its live job may have (`<prefix><token>` for each of the config's
    /// `adopt_job_name_prefixes`: by default sucoder's): found and adopted as `job_name` is,
    /// in the same listing, never given to a job.
    pub also_named: Vec<JobName>,
    /// False for a session the journal records on a target the configuration no longer has
    /// (see `Env::resolve_recorded`): `target` pins nothing then.
    pub configured: bool,
}

/// The target of a recorded session whose target was removed from the configuration.
static UNCONFIGURED: Target = Target {
    partition: String::new(),
    account: String::new(),
    qos: None,
    time: None,
    cpus_per_task: None,
    mem: None,
    confined: false,
};

impl<S: Scheduler> Env<'_, S> {
    pub fn resolve(&self, mirror: &str, target: &str) -> Result<Resolved<'_>, OpError> {
        if mirror.is_empty() {
            return Err(OpError::Usage("the mirror name is empty".into()));
        }
        let t = self.config.target(target, self.config_path)?;
        let token = sanitize_token(mirror);
        // The config refuses two configured mirrors with one token; a mirror given on the
        // command line must not slip past that (sucoder's ephemeral-mirror hole).
        if let Some(other) = self
            .config
            .mirrors
            .keys()
            .find(|m| m.as_str() != mirror && sanitize_token(m) == token)
        {
            return Err(SessionRefusal::TokenOfConfiguredMirror {
                mirror: mirror.to_owned(),
                token,
                other: other.clone(),
                prefix: self.config.job_name_prefix.clone(),
            }
            .into());
        }
        let (job_name, also_named) = session_job_names(self.config, mirror)?;
        if has_worker_job_shape(&token)
            && !self.config.mirrors.contains_key(mirror)
            && !self
                .ctx
                .read_state()?
                .sessions
                .sessions
                .keys()
                .any(|k| k.mirror == mirror)
        {
            return Err(SessionRefusal::WorkerJobName {
                mirror: mirror.to_owned(),
                job_name,
            }
            .into());
        }
        Ok(Resolved {
            key: SessionKey::new(mirror, target),
            target: t,
            token,
            job_name,
            also_named,
            configured: true,
        })
    }

    /// As `resolve`, but a session the journal records stays reachable after its target was
    /// removed from the configuration, so that it can still be released by job id.
    pub fn resolve_recorded(&self, mirror: &str, target: &str) -> Result<Resolved<'_>, OpError> {
        match self.resolve(mirror, target) {
            Err(OpError::Config(ConfigError::UnknownTarget { .. })) => {
                let key = SessionKey::new(mirror, target);
                if self.ctx.read_state()?.sessions.get(&key).is_none() {
                    return self.resolve(mirror, target);
                }
                let (job_name, also_named) = session_job_names(self.config, mirror)?;
                Ok(Resolved {
                    key,
                    target: &UNCONFIGURED,
                    token: sanitize_token(mirror),
                    job_name,
                    also_named,
                    configured: false,
                })
            }
            other => other,
        }
    }

    /// Every configured target with its pins, in name order.
    pub fn targets(&self) -> impl Iterator<Item = (&str, Pins<'_>)> + Clone {
        self.config
            .targets
            .iter()
            .map(|(n, t)| (n.as_str(), Pins::of(t)))
    }

    /// `squeue --jobs=J`: what it proves about J.
    pub async fn probe(&self, job: JobId) -> Probe {
        probe_of(
            &self.ctx.sched.list_jobs(&JobQuery::ids(vec![job])).await,
            job,
        )
    }
}

/// A mirror's session job names ([`Config::session_job_names`]): the one a new job gets, and
/// the others its live job is adopted under.
fn session_job_names(config: &Config, mirror: &str) -> Result<(JobName, Vec<JobName>), OpError> {
    let mut names = config.session_job_names(mirror).into_iter().map(|name| {
        JobName::new(name.clone()).map_err(|e| OpError::Usage(format!("job name {name:?}: {e}")))
    });
    let own = names.next().expect("a session has its own job name")?;
    Ok((own, names.collect::<Result<_, _>>()?))
}

impl Resolved<'_> {
    /// Every name the session's job may have, its own first: what a name probe asks for, in
    /// one listing, so that no job of the session is missed beside another.
    pub fn probe_names(&self) -> Vec<JobName> {
        std::iter::once(&self.job_name)
            .chain(&self.also_named)
            .cloned()
            .collect()
    }

    /// [`Self::probe_names`] as text.
    pub fn name_strs(&self) -> Vec<&str> {
        std::iter::once(&self.job_name)
            .chain(&self.also_named)
            .map(JobName::as_str)
            .collect()
    }
}

/// Take the token lock of a session command that decides and acts, and load the state it
/// decides on (creating the state directory and journal if missing). The journal's writer is
/// released at once: the token lock serializes the commands on this mirror, and it is held
/// across the waits that follow, which the journal's lock never is.
pub fn lock_session<S: Scheduler>(
    env: &Env<'_, S>,
    token: &str,
) -> Result<(TokenLock, State), OpError> {
    let lock = TokenLock::take(&env.ctx.state_dir, token)?;
    Ok((lock, env.ctx.lock_and_load()?.1.state))
}

/// An exclusive lock on one mirror's token, held while a command decides and acts.
pub struct TokenLock {
    _file: File,
}

impl TokenLock {
    pub fn take(state_dir: &Checked, token: &str) -> Result<TokenLock, OpError> {
        let dir = state_dir.join("sessions").join("locks");
        state_dir.prepare()?;
        crate::statedir::trust::create_below(state_dir, &dir).map_err(StateDirError::from)?;
        let path = dir.join(format!("{token}.lock"));
        crate::statedir::trust::check(&path, crate::statedir::trust::Want::File)
            .map_err(StateDirError::from)?;
        let io = |source| {
            OpError::Journal(JournalError::Io {
                path: path.clone(),
                what: "lock session".into(),
                source,
            })
        };
        let file = crate::journal::files::open_lock_file(&path).map_err(io)?;
        if file.try_lock().is_err() {
            tracing::warn!(
                "another dispatch command is working on mirror token {token:?}; waiting for it"
            );
            file.lock().map_err(io)?;
        }
        Ok(TokenLock { _file: file })
    }
}

/// The session, if the state has it.
pub fn session<'s>(state: &'s State, key: &SessionKey) -> Option<&'s Session> {
    state.sessions.get(key)
}

/// Another session (another mirror) already known under this token: their jobs would share a
/// name and adopt each other's.
pub fn token_clash(state: &State, r: &Resolved) -> Result<(), OpError> {
    if let Some(other) = state
        .sessions
        .sessions
        .keys()
        .find(|k| k.mirror != r.key.mirror && sanitize_token(&k.mirror) == r.token)
    {
        return Err(SessionRefusal::TokenOfRecordedSession {
            mirror: r.key.mirror.clone(),
            token: r.token.clone(),
            other: other.clone(),
            job_name: r.job_name.clone(),
        }
        .into());
    }
    Ok(())
}

/// The result of `squeue --me --name=<job names>` for one launch: the session's own job name
/// and those it adopts under ([`Resolved::probe_names`]), in one listing.
#[derive(Default)]
pub struct NameProbe {
    pub plan: Option<Adoption>,
    /// Why the probe gave nothing usable, if it did not.
    pub failed: Option<String>,
    /// squeue listed lines for this job name that no parser understood: a job of this name
    /// exists that the probe cannot read, so it must not be taken for "no job".
    pub unreadable: Option<Vec<String>>,
    /// Rows of this job name the listing showed (any state, any target): none is an empty
    /// answer, which proves nothing until [`vouch_absence`] corroborates it.
    pub listed: usize,
    /// Why an empty listing could not be corroborated ([`vouch_absence`]).
    pub unvouched: Option<String>,
    /// How an empty listing was corroborated, for reports.
    pub vouched: Option<String>,
    /// Jobs of this name the plan passed over, for the report's warnings.
    pub warnings: Vec<String>,
}

/// Probe by name and decide what to adopt. Never fails: a failed probe is reported and the
/// caller decides whether that may block.
pub async fn name_probe<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    exclude: &[JobId],
) -> NameProbe {
    let answer = env
        .ctx
        .sched
        .list_jobs(&JobQuery::mine_named_any(r.probe_names()))
        .await;
    let mut probe = NameProbe::default();
    let named = match rows_named(listing_of(answer), &r.name_strs()) {
        Ok(named) => named,
        Err(e) => {
            probe.failed = Some(e);
            return probe;
        }
    };
    if !named.bad_lines.is_empty() {
        probe.failed = Some(unparsed(&named.bad_lines));
        probe.unreadable = Some(named.bad_lines);
    }
    probe.listed = named.rows.len();
    let plan = plan_adoption(&named.rows, &r.key.target, env.targets(), exclude);
    probe.warnings = plan
        .passed()
        .filter_map(|seen| passed_note(seen, &r.key, &spoken(&r.name_strs())))
        .collect();
    probe.plan = Some(plan);
    probe
}

impl NameProbe {
    /// Why this probe cannot vouch that no job of the session's name and target runs: it
    /// failed, it listed lines of this name that no parser understood, or it listed nothing
    /// and [`vouch_absence`] could not corroborate that.
    pub fn cannot_vouch(&self) -> Option<String> {
        match (&self.unreadable, &self.failed) {
            (Some(lines), _) => Some(format!(
                "squeue lists a job of this name that dispatch cannot read ({lines:?})"
            )),
            (None, Some(why)) => Some(format!("the name probe failed ({why})")),
            (None, None) => self.unvouched.clone(),
        }
    }
}

/// A name probe that listed no job of the name proves nothing alone (a controller in a
/// blackout answers every squeue empty): corroborate it with the user's whole listing before
/// anyone concludes "no job" (`policy::session::absence`). Sets `probe.unvouched` when it
/// cannot; a probe that listed something, or failed, is left alone.
pub async fn vouch_absence<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    probe: &mut NameProbe,
) {
    if probe.listed > 0 || probe.failed.is_some() || probe.unreadable.is_some() {
        return;
    }
    let listing = JobQuery::mine_including_finished();
    let mut mine = env.ctx.sched.list_jobs(&listing).await;
    if matches!(&mine, crate::slurm::Answer::Live(rows) if rows.is_empty()) {
        // The user has no job listed at all, which a blackout also looks like: make one that
        // is (a held watermark job, cancelled at once) and ask again. Its name has the shape
        // of a worker's job, so no session ever adopts it.
        match super::watermark::make(env.ctx, &env.config.job_name_prefix).await {
            Ok(_) => mine = env.ctx.sched.list_jobs(&listing).await,
            Err(e) => probe.warnings.push(format!("no watermark job: {e}")),
        }
    }
    match absence::by_listing(&r.name_strs(), &mine) {
        Absence::Proven(how) => probe.vouched = Some(how),
        Absence::Unproven(why) => probe.unvouched = Some(why),
    }
}

/// The one way every session command finds its job when the record names none: probe by name
/// with the target rule (`name_probe`, `plan_adoption`), exactly as launch does, and adopt the
/// job found (journaled as `SessionAdopted` before the caller acts on it).
pub async fn adopt_by_name<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
    exclude: &[JobId],
    replacing: Option<JobId>,
) -> Result<(NameProbe, Option<(JobId, Seen)>), OpError> {
    let probe = name_probe(env, r, exclude).await;
    let Some((job, seen)) = probe.plan.as_ref().and_then(|p| p.adopted()) else {
        return Ok((probe, None));
    };
    let seen = seen.clone();
    env.ctx
        .append(adopted(&r.key, job, &seen, "name_probe", replacing))?;
    Ok((probe, Some((job, seen))))
}

/// The record that session `key` holds `job`, which a name probe showed as `seen`; `how` says
/// who found it (`name_probe`, `release_sweep`).
fn adopted(
    key: &SessionKey,
    job: JobId,
    seen: &Seen,
    how: &str,
    replacing: Option<JobId>,
) -> Event {
    Event::SessionAdopted(SessionAdopted {
        session: key.clone(),
        job_id: job,
        how: how.into(),
        state: seen.state.to_string(),
        partition: seen.partition.clone(),
        account: seen.account.clone(),
        qos: seen.qos.clone(),
        replacing,
    })
}

/// [`adopt_by_name`] for a command that concludes "no job" when nothing is adopted (release,
/// attach, renew): an empty listing is corroborated first ([`vouch_absence`]), so that
/// `cannot_vouch` tells a proven absence from a blackout's empty answer.
pub async fn adopt_or_vouch<S: Scheduler>(
    env: &Env<'_, S>,
    r: &Resolved<'_>,
) -> Result<(NameProbe, Option<(JobId, Seen)>), OpError> {
    let (mut probe, adopted) = adopt_by_name(env, r, &[], None).await?;
    if adopted.is_none() {
        vouch_absence(env, r, &mut probe).await;
    }
    Ok((probe, adopted))
}

/// How `job`, proven gone, ended (`policy::session::ended`): squeue's terminal `state`, or,
/// once squeue no longer knows the job, accounting's (one `sacct` call, from `since`: when the
/// session took the job, else two days back).
pub async fn ended_of<S: Scheduler>(
    env: &Env<'_, S>,
    job: JobId,
    state: Option<&JobState>,
    since: Option<Micros>,
) -> Ended {
    let accounting = match state {
        Some(_) => None,
        None => {
            let since = since.map_or_else(
                || chrono::Local::now().naive_local() - chrono::Duration::days(2),
                crate::ops::context::micros_to_local,
            );
            let q = AcctQuery {
                jobs: vec![job],
                names: vec![],
                since,
            };
            match env.ctx.sched.accounting(&q).await {
                crate::slurm::Answer::Live(rows) => accounting_over(job, &rows),
                _ => None,
            }
        }
    };
    ended(job, state, accounting)
}

/// The session command `verb` of `key`'s session, for messages.
pub fn command_for<'a>(verb: &'static str, key: &'a SessionKey) -> Next<'a> {
    Next::Session {
        verb,
        mirror: &key.mirror,
        target: &key.target,
    }
}
