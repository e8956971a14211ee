//! `pool submit --wait`: wait for room in the pool instead of refusing.
//!
//! The waiter queues (`queue.rs`: first come, first served among the waiters of a pool) and
//! only the head of the queue looks for room. It reads the journal without its lock (a reader
//! sees every complete frame) and reloads it only when a journal file changed. Room comes back
//! when a worker's budget is released: by another command (reconcile, stop-worker), or by the
//! head itself once a worker's own journal says its supervisor finished (a file read, no Slurm
//! call): once the worker's srun has exited too (a pid on this host; its step has left the
//! listing by then), one step listing, with the job listing beside it that the proof rule
//! needs (`policy::reconcile::step_over`, the same rule as everywhere), proves the step over,
//! and `release_proven` releases it, as stop-worker and reconcile do. The allocation's facts
//! the receipt needs fresh are asked in the same breath, so no Slurm call comes between the
//! release and the receipt. A worker whose supervisor died without a word is proven the same way, at most every [`FALLBACK_PROOF_EVERY`].
//! Nothing here holds the journal lock while it waits; the budget is decided under the lock
//! right before the receipt, as without `--wait`.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::queue::Ticket;
use super::{process_alive, read_facts, release_proven};
use crate::backoff::Backoff;
use crate::event::pool::Allocation;
use crate::next::Next;
use crate::ops::context::Ctx;
use crate::ops::error::OpError;
use crate::policy::pool::{self as policy, AllocationFacts, Refusal, WorkerAsk};
use crate::policy::reconcile::{self as reconcile_policy, PoolObservation};
use crate::slurm::{JobId, JobQuery, Scheduler};
use crate::state::pool::{Pool, Worker};
use crate::state::State;
use crate::worker::dirs::WorkerDirs;
use crate::worker::report;

/// How often a waiter near the head looks at the queue, and the head at the journal and the
/// workers' journals (file reads only): room handed on within a few ms.
const POLL_NEAR: Duration = Duration::from_millis(5);
/// How often a waiter further back looks at the queue.
const POLL_FAR: Duration = Duration::from_millis(25);
/// Waiters with fewer than this many ahead poll at [`POLL_NEAR`].
const NEAR: usize = 4;
/// How often the head looks whether the srun of a worker whose supervisor finished has exited
/// (a `/proc` read): that exit is what the proof waits for.
const POLL_SRUN: Duration = Duration::from_millis(1);
/// How long after its supervisor finished a worker's srun (on this host) is waited for before
/// the proof is asked all the same. The step leaves the step listing 20–40 ms after the
/// supervisor's last record and 5–30 ms before its srun exits (measured on the dev cluster):
/// a proof asked at the supervisor's finish mostly failed and was asked again (two Slurm calls
/// a try, issue 14 bench); asked at the srun's exit it held at the first try. A pid reused
/// meanwhile reads as running: this bound is what that costs.
const SRUN_EXIT_WAIT: Duration = Duration::from_secs(2);
/// Retries of a proof for a worker whose supervisor finished (and whose srun exited, or is
/// not to be seen from here). The first [`PROOF_RETRIES_QUICK`] retries come
/// [`PROOF_RETRY_FIRST`] apart, then the pause doubles up to [`PROOF_RETRY_MAX`] (two Slurm
/// calls per try).
const PROOF_RETRY_FIRST: Duration = Duration::from_millis(10);
const PROOF_RETRIES_QUICK: u32 = 5;
const PROOF_RETRY_MAX: Duration = Duration::from_secs(2);
/// How often the head asks Slurm about workers whose own journal says nothing (a killed
/// supervisor): polite to the controller, and no worker keeps its budget forever.
pub const FALLBACK_PROOF_EVERY: Duration = Duration::from_secs(10);
/// How old the allocation's facts (`scontrol show job`) may be at the receipt of a submit
/// that waited; older, they are read again (a submit without a wait reads them a few ms
/// before its receipt).
pub(super) const FACTS_FRESH: Duration = Duration::from_secs(1);
/// How often progress is shown when nothing changes.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// How `pool submit` waits for room.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wait {
    /// Give up after this long (exit 3); `None`: while the allocation can still take the worker.
    pub limit: Option<Duration>,
    /// Shown to the user (the CLI prints it on a terminal).
    pub progress: Option<fn(&WaitProgress)>,
}

/// Where a waiting submitter stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitProgress {
    pub pool: String,
    /// Waiters ahead of this one.
    pub ahead: usize,
    /// The pool's reservation as the head last saw it (`None` while not at the head).
    pub reserved: Option<(u64, u64)>,
    pub capacity: (u32, u64),
    pub waited: Duration,
}

/// The journal's state, reloaded only when one of its files changed (size or mtime).
#[derive(Default)]
struct JournalWatch {
    stamp: Vec<(std::ffi::OsString, u64, i64, i64)>,
    state: Option<State>,
}

impl JournalWatch {
    fn stamp(dir: &Path) -> Vec<(std::ffi::OsString, u64, i64, i64)> {
        use std::os::unix::fs::MetadataExt;
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((e.file_name(), m.len(), m.mtime(), m.mtime_nsec()))
            })
            .collect();
        v.sort();
        v
    }

    fn state<S: Scheduler>(&mut self, ctx: &Ctx<S>) -> Result<&State, OpError> {
        let stamp = Self::stamp(&ctx.journal_dir());
        if self.state.is_none() || stamp != self.stamp {
            self.state = Some(ctx.load()?.state);
            self.stamp = stamp;
        }
        Ok(self.state.as_ref().expect("loaded above"))
    }
}

/// The allocation's facts (`scontrol show job`) as read at an instant.
pub(super) type FreshFacts = (AllocationFacts, Instant);

/// When each finished worker's proof may be tried again.
#[derive(Default)]
struct Proving {
    /// Per worker: when its proof may be tried next, its pauses after a failed try, the tries.
    retry: HashMap<Uuid, (Instant, Backoff, u32)>,
    /// When each worker's supervisor was first seen finished.
    finished_at: HashMap<Uuid, Instant>,
    next_fallback: Option<Instant>,
    here: Option<String>,
}

/// What a round of [`Proving::round`] did.
#[derive(Default)]
struct Round {
    released: bool,
    /// The pids of finished workers' sruns still running: watched every [`POLL_SRUN`].
    srun_exiting: Vec<u32>,
    /// Read with the proof, when the facts held were going stale.
    facts: Option<FreshFacts>,
}

impl Proving {
    /// The pid of the srun of `w` (started on this host), if it is still running.
    fn srun_running(&mut self, w: &Worker) -> Option<u32> {
        let here = self.here.get_or_insert_with(crate::event::current_host);
        w.srun
            .as_ref()
            .filter(|s| s.host == *here && process_alive(s.pid))
            .map(|s| s.pid)
    }

    /// Prove over what can be proven and release it. `facts_at`: when the facts held were
    /// read; older than half of [`FACTS_FRESH`], they are read again beside the proof.
    async fn round<S: Scheduler>(
        &mut self,
        ctx: &Ctx<S>,
        pool: &Pool,
        facts_at: Instant,
    ) -> Result<Round, OpError> {
        let pools_dir = ctx.pools_dir();
        let now = Instant::now();
        let mut round = Round::default();
        let fallback_due = self.fallback_due(now);
        self.retry.retain(|id, _| pool.active.contains_key(id));
        self.finished_at
            .retain(|id, _| pool.active.contains_key(id));
        let mut due = Vec::new();
        for w in pool.active.values() {
            if let Some(step) = self.due_step(&pools_dir, pool, w, now, fallback_due, &mut round) {
                due.push((w.submission_id, step));
            }
        }
        if due.is_empty() {
            return Ok(round);
        }
        let (obs, facts) = look_at_steps(ctx, pool.allocation.job_id, facts_at).await;
        round.facts = facts;
        round.released = self.release_over(ctx, pool, due, &obs)?;
        Ok(round)
    }

    /// Is the fallback (a proof for every worker seen in a step) due at `now`? The first round
    /// only sets its time.
    fn fallback_due(&mut self, now: Instant) -> bool {
        let due = self.next_fallback.is_some_and(|t| now >= t);
        if due || self.next_fallback.is_none() {
            self.next_fallback = Some(now + FALLBACK_PROOF_EVERY);
        }
        due
    }

    /// The step of `w` to prove over in this round, if it is due: its supervisor finished (and
    /// its srun, if it runs here, exited or was waited for long enough) and its retry time
    /// came, or the fallback is due. None for a worker never seen in a step: reconcile's
    /// question, not a waiter's. A finished worker's srun still running goes into `round`.
    fn due_step(
        &mut self,
        pools_dir: &Path,
        pool: &Pool,
        w: &Worker,
        now: Instant,
        fallback_due: bool,
        round: &mut Round,
    ) -> Option<u32> {
        let dirs = WorkerDirs::new(pools_dir, &pool.name, w.submission_id);
        let own = (w.journal_damage.is_none() && dirs.check(pools_dir).unwrap_or(false))
            .then(|| report::read(&dirs.evidence).ok().flatten())
            .flatten();
        let supervisor_step = own
            .as_ref()
            .and_then(|r| r.started.as_ref())
            .and_then(|s| s.step_id);
        let step = w.step_id.or(supervisor_step)?;
        let mut finished = own.as_ref().is_some_and(|r| r.finished.is_some());
        if finished {
            let since = *self.finished_at.entry(w.submission_id).or_insert(now);
            if now.duration_since(since) < SRUN_EXIT_WAIT {
                if let Some(pid) = self.srun_running(w) {
                    round.srun_exiting.push(pid);
                    finished = false;
                }
            }
        }
        let (at, _, _) = *self.retry.entry(w.submission_id).or_insert((
            now,
            Backoff::new(PROOF_RETRY_FIRST, PROOF_RETRY_MAX),
            0,
        ));
        ((finished && now >= at) || fallback_due).then_some(step)
    }

    /// Release each `due` worker whose step `obs` proves over; the others wait their pause
    /// (doubled after [`PROOF_RETRIES_QUICK`] tries). True when one was released.
    fn release_over<S: Scheduler>(
        &mut self,
        ctx: &Ctx<S>,
        pool: &Pool,
        due: Vec<(Uuid, u32)>,
        obs: &PoolObservation,
    ) -> Result<bool, OpError> {
        let mut released = false;
        for (id, step) in due {
            match reconcile_policy::step_over(step, true, obs) {
                Some(proof) => {
                    released |= release_proven(ctx, &pool.name, id, &proof, |w| {
                        w.step_id.is_none_or(|s| s == step)
                    })?;
                    self.retry.remove(&id);
                    self.finished_at.remove(&id);
                }
                None => {
                    let (at, pauses, tries) = self.retry.get_mut(&id).expect("entered above");
                    *tries += 1;
                    *at = Instant::now()
                        + if *tries >= PROOF_RETRIES_QUICK {
                            pauses.next_delay()
                        } else {
                            pauses.peek()
                        };
                }
            }
        }
        Ok(released)
    }
}

/// One look at allocation `job`'s steps, with the job listed beside them as the proof rule
/// has it, and (when those held, read at `facts_at`, are going stale) the facts a receipt after
/// this wait needs fresh: asked together, in one call's time. Facts Slurm could not give are
/// none here: they are asked again before the receipt, where a refusal or an error has its say.
async fn look_at_steps<S: Scheduler>(
    ctx: &Ctx<S>,
    job: JobId,
    facts_at: Instant,
) -> (PoolObservation, Option<FreshFacts>) {
    let jobs_query = JobQuery::ids(vec![job]);
    let facts_stale = facts_at.elapsed() > FACTS_FRESH / 2;
    let facts = async {
        match facts_stale {
            true => Some((read_facts(ctx, job).await, Instant::now())),
            false => None,
        }
    };
    let (steps, jobs, facts) = tokio::join!(
        ctx.sched.list_steps(job),
        ctx.sched.list_jobs(&jobs_query),
        facts
    );
    let facts = facts.and_then(|(f, at)| f.ok().map(|f| (f, at)));
    let obs = reconcile_policy::observe_pool(job, &jobs.job(job), Some(&steps));
    (obs, facts)
}

/// What a waiting submitter asks for, and of which allocation.
#[derive(Clone, Copy)]
pub(super) struct Asked<'a> {
    pub pool: &'a str,
    pub allocation: &'a Allocation,
    pub facts: &'a AllocationFacts,
    /// When `facts` were read.
    pub facts_at: Instant,
    pub ask: &'a WorkerAsk,
}

/// Wait until this ticket is at the head of the queue and `pool` (still on `allocation`) has
/// room for `ask` as the journal says now. Refuses (exit 3) when the wait's limit passes, when
/// the allocation becomes too short for the worker or is proven over. Returns the facts it
/// read meanwhile, if they are newer than `asked.facts_at` and still fresh.
pub(super) async fn until_room<S: Scheduler>(
    ctx: &Ctx<S>,
    asked: &Asked<'_>,
    ticket: &Ticket,
    wait: &Wait,
    started: Instant,
) -> Result<Option<FreshFacts>, OpError> {
    let Asked {
        pool: pool_name,
        allocation,
        facts,
        ask,
        ..
    } = *asked;
    let mut fresh: Option<FreshFacts> = None;
    let end = facts.end_time.unwrap_or(allocation.end_time);
    let last = policy::last_submit_time(end.min(allocation.end_time), &ask.budgets);
    let capacity = (
        allocation.cpus.min(facts.cpus),
        allocation.mem_mb.min(facts.mem_mb),
    );
    let mut watch = JournalWatch::default();
    let mut proving = Proving::default();
    let mut shown: Option<(WaitProgress, Instant)> = None;
    loop {
        let ahead = ticket.ahead()?;
        let (reserved, srun_exiting) = if ahead == 0 {
            match look_at_head(ctx, asked, &mut watch, &mut proving, &mut fresh).await? {
                HeadLook::Room => return Ok(fresh.filter(|(_, at)| at.elapsed() <= FACTS_FRESH)),
                HeadLook::Released => continue,
                HeadLook::Full {
                    reserved,
                    srun_exiting,
                } => (Some(reserved), srun_exiting),
            }
        } else {
            (None, Vec::new())
        };
        too_late(ctx, asked, last, wait, started)?;
        let now = WaitProgress {
            pool: pool_name.to_owned(),
            ahead,
            reserved,
            capacity,
            waited: started.elapsed(),
        };
        show_progress(wait, now, &mut shown);
        pause(ahead, &srun_exiting).await;
    }
}

/// What the head of the queue found.
enum HeadLook {
    /// Room for the worker.
    Room,
    /// A worker was released: look again at once.
    Released,
    /// No room yet: the pool's reservation, and the pids of the sruns to watch meanwhile.
    Full {
        reserved: (u64, u64),
        srun_exiting: Vec<u32>,
    },
}

/// The head's look: the pool as the journal says now (still on the asked allocation, and not
/// proven over), room for the worker, else a round of proofs. `fresh` keeps the newest facts.
async fn look_at_head<S: Scheduler>(
    ctx: &Ctx<S>,
    asked: &Asked<'_>,
    watch: &mut JournalWatch,
    proving: &mut Proving,
    fresh: &mut Option<FreshFacts>,
) -> Result<HeadLook, OpError> {
    let Asked {
        pool: pool_name,
        allocation,
        facts,
        facts_at,
        ask,
    } = *asked;
    let state = watch.state(ctx)?;
    let pool = state
        .pools
        .pools
        .get(pool_name)
        .filter(|p| p.allocation == *allocation)
        .ok_or_else(|| {
            OpError::Failed(format!(
                "pool {pool_name} was detached or attached to another allocation while this \
                 submit waited for room; nothing was submitted. Check {}",
                Next::PoolStatus(None)
            ))
        })?;
    if let Some(ended) = &pool.ended {
        return Err(Refusal::AllocationEnded {
            pool: pool_name.to_owned(),
            job_id: allocation.job_id,
            proof: ended.proof.clone(),
        }
        .into());
    }
    if policy::check_room(pool, facts, ask).is_ok() {
        return Ok(HeadLook::Room);
    }
    let pool = pool.clone();
    let newest = fresh.as_ref().map_or(facts_at, |(_, at)| *at);
    let round = proving.round(ctx, &pool, newest).await?;
    *fresh = round.facts.or(fresh.take());
    if round.released {
        return Ok(HeadLook::Released);
    }
    Ok(HeadLook::Full {
        reserved: pool.reserved(),
        srun_exiting: round.srun_exiting,
    })
}

/// Wait before the next look: a waiter near the head polls more often; while a finished
/// worker's srun is exiting, only its pid is watched, every [`POLL_SRUN`].
async fn pause(ahead: usize, srun_exiting: &[u32]) {
    if srun_exiting.is_empty() {
        tokio::time::sleep(if ahead < NEAR { POLL_NEAR } else { POLL_FAR }).await;
    } else {
        // Only the pids, between two looks at the rest: a full look every ms took CPU
        // from the steps starting meanwhile (2 cores).
        let until = Instant::now() + POLL_NEAR;
        while Instant::now() < until && srun_exiting.iter().all(|pid| process_alive(*pid)) {
            tokio::time::sleep(POLL_SRUN).await;
        }
    }
}

/// Refuse (exit 3) once the allocation ends too soon for the worker (past `last`, the last
/// time a submit may start) or the wait's limit has passed.
fn too_late<S: Scheduler>(
    ctx: &Ctx<S>,
    asked: &Asked<'_>,
    last: crate::event::Micros,
    wait: &Wait,
    started: Instant,
) -> Result<(), OpError> {
    let Asked {
        pool: pool_name,
        allocation,
        ask,
        ..
    } = *asked;
    if ctx.now().secs() > last.secs() {
        return Err(Refusal::EndsBeforeRoom {
            pool: pool_name.to_owned(),
            job_id: allocation.job_id,
            need_s: ask.budgets.shutdown_window_s() + i64::from(ask.budgets.min_run_s),
        }
        .into());
    }
    if let Some(limit) = wait.limit {
        if started.elapsed() >= limit {
            return Err(Refusal::NoRoomWithin {
                pool: pool_name.to_owned(),
                cpus: ask.cpus,
                mem_mb: ask.mem_mb,
                waited_s: limit.as_secs(),
            }
            .into());
        }
    }
    Ok(())
}

/// Show `now` to the user when it differs from what was `shown` last, or that is old.
fn show_progress(wait: &Wait, now: WaitProgress, shown: &mut Option<(WaitProgress, Instant)>) {
    if let Some(show) = wait.progress {
        let changed = shown.as_ref().is_none_or(|(p, at)| {
            p.ahead != now.ahead || p.reserved != now.reserved || at.elapsed() >= PROGRESS_EVERY
        });
        if changed {
            show(&now);
            *shown = Some((now, Instant::now()));
        }
    }
}
