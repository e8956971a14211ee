//! `dispatch pool attach` and `pool detach`: a user's running allocation becomes a pool, and stops being one.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;
use uuid::Uuid;

use super::ingest::{extends_ingested, read_worker_journal};
use super::{journal_id, locked, read_facts};
use crate::event::host::current_host;
use crate::event::overrides::AllocationStolen;
use crate::event::pool::*;
use crate::event::{Event, Micros};
use crate::failpoint;
use crate::names::check_path_name;
use crate::next::Next;
use crate::ops::context::Ctx;
use crate::ops::error::OpError;
use crate::policy::forget::reason_problem;
use crate::policy::holder::{self, Holder};
use crate::policy::pool::{self as policy, AllocationFacts, Holding};
use crate::slurm::{Answer, JobId, Scheduler};
use crate::state::State;

#[derive(Debug, Serialize)]
pub struct AttachReport {
    pub pool: String,
    pub allocation: AllocationView,
    /// The mark in the job's comment that says this journal holds it.
    pub mark: String,
    /// The holder an `--steal` took it from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stolen_from: Option<String>,
}

impl AttachReport {
    fn new(
        pool: &str,
        holder: &Holder,
        stolen_from: Option<String>,
        allocation: &Allocation,
    ) -> AttachReport {
        AttachReport {
            pool: pool.to_owned(),
            allocation: AllocationView::of(allocation, None, None),
            mark: holder.mark(),
            stolen_from,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct AllocationView {
    pub job_id: JobId,
    pub node: String,
    pub user: String,
    pub start_time: String,
    pub end_time: String,
    pub cpus: u32,
    pub mem_mb: u64,
    pub partition: String,
    pub account: String,
    pub qos: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_left: Option<i64>,
    /// `running`, or `ended` once the journal records the allocation proven over (status only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<AllocationState>,
    /// What proved it over (`PoolAllocationEnded`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_proof: Option<String>,
    /// Slurm preempted it and its grace runs (`pool status --refresh`: `{"at", "ends_at"}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preempted: Option<crate::ops::reconcile::Preempted>,
}

crate::words! {
    /// Whether a pool's allocation is over, as far as the journal knows.
    pub enum AllocationState {
        Running => "running",
        /// The journal records the allocation proven over.
        Ended => "ended",
    }
}

impl AllocationView {
    pub(super) fn of(
        a: &Allocation,
        now: Option<Micros>,
        ended: Option<&PoolAllocationEnded>,
    ) -> AllocationView {
        AllocationView {
            state: now.map(|_| match ended {
                Some(_) => AllocationState::Ended,
                None => AllocationState::Running,
            }),
            ended_proof: ended.map(|e| e.proof.clone()),
            job_id: a.job_id,
            node: a.node.clone(),
            user: a.user.clone(),
            start_time: a.start_time.to_rfc3339(),
            end_time: a.end_time.to_rfc3339(),
            cpus: a.cpus,
            mem_mb: a.mem_mb,
            partition: a.partition.clone(),
            account: a.account.clone(),
            qos: a.qos.clone(),
            // An allocation proven over has no time left, whatever its end time said.
            seconds_left: now
                .filter(|_| ended.is_none())
                .map(|n| (a.end_time.secs() - n.secs()).max(0)),
            preempted: None,
        }
    }
}

/// `pool attach POOL --job J [--steal REASON]`: the checks, then this journal's mark in the
/// job's comment (intent, `scontrol update`, read back, outcome), then the pool. `steal`: why
/// an allocation another journal's mark names is taken anyway (recorded as an override).
pub async fn attach<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    job: JobId,
    steal: Option<&str>,
) -> Result<AttachReport, OpError> {
    check_path_name("pool", pool).map_err(OpError::Usage)?;
    if let Some(m) = steal.and_then(|r| reason_problem("--steal", r)) {
        return Err(OpError::Usage(m));
    }
    // The state directory and journal are checked (and made) before Slurm is asked.
    let journal = journal_id(&ctx.lock_and_load()?.1.state);
    let facts = read_facts(ctx, job).await?;
    let holder = Holder::new(journal, &current_host(), pool);
    let (intent, holding) = match begin_attach(ctx, pool, &facts, &holder, steal)? {
        Begun::Attached(allocation) => {
            return Ok(AttachReport::new(pool, &holder, None, &allocation))
        }
        Begun::Marking(intent, holding) => (intent, holding),
    };
    failpoint::hit("pool-attach-after-mark-intent");
    // Lost to another journal's attach between our read and our update: its mark shows.
    let read_back = set_comment(ctx, &intent, |f| {
        match policy::check_holder(f, journal, false)? {
            Holding::Ours => Ok(()),
            Holding::Unmarked | Holding::Stolen(_) => Err(not_shown(&intent, f)),
        }
    })
    .await;
    let allocation = finish_attach(ctx, &intent, &holder, read_back)?;
    let stolen_from = match holding {
        Holding::Stolen(h) => Some(h.to_string()),
        Holding::Ours | Holding::Unmarked => None,
    };
    Ok(AttachReport::new(pool, &holder, stolen_from, &allocation))
}

/// What an attach does after its first decision.
enum Begun {
    /// The comment already names this journal: attached, with nothing to write into Slurm.
    Attached(Allocation),
    /// The mark is to be set (its intent, and a steal's override, journaled).
    Marking(AllocationMarkIntent, Holding),
}

/// Under the lock: may `pool` take the allocation `facts` describe, and must its comment be
/// marked? Journals what was decided (the pool, or the steal and the mark's intent).
fn begin_attach<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    facts: &AllocationFacts,
    holder: &Holder,
    steal: Option<&str>,
) -> Result<Begun, OpError> {
    locked(ctx, |writer, state| {
        let allocation = policy::check_attach(&state.pools, pool, facts, &ctx.caller, ctx.now())?;
        let holding = policy::check_holder(facts, holder.journal_id, steal.is_some())?;
        if holding == Holding::Ours {
            writer.append(attached(pool, &allocation, facts))?;
            return Ok(Begun::Attached(allocation));
        }
        let mut events = Vec::new();
        if let Holding::Stolen(other) = &holding {
            events.push(Event::AllocationStolen(AllocationStolen {
                pool: pool.to_owned(),
                job_id: facts.job_id,
                holder: other.mark(),
                reason: steal.unwrap_or_default().to_owned(),
            }));
        }
        let intent = AllocationMarkIntent {
            pool: pool.to_owned(),
            job_id: facts.job_id,
            comment: holder::marked(&facts.comment, holder),
            previous: facts.comment.clone(),
        };
        events.push(Event::AllocationMarkIntent(intent.clone()));
        writer.append(events)?;
        Ok(Begun::Marking(intent, holding))
    })
}

/// Under the lock again, after the mark: its outcome, and the pool if the job, read back,
/// still passes the attach's checks (another command of this journal may have attached it).
fn finish_attach<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &AllocationMarkIntent,
    holder: &Holder,
    read_back: Result<AllocationFacts, OpError>,
) -> Result<Allocation, OpError> {
    let (pool, job) = (intent.pool.as_str(), intent.job_id);
    locked(ctx, |writer, state| {
        let facts = match read_back {
            Ok(facts) => facts,
            Err(e) => {
                writer.append_one(marked(intent, false, e.to_string()))?;
                return Err(not_attached(e, intent));
            }
        };
        match policy::check_attach(&state.pools, pool, &facts, &ctx.caller, ctx.now()) {
            Ok(allocation) => {
                let shown = format!("job {job}'s comment shows {}", holder.mark());
                let mut events = vec![marked(intent, true, shown)];
                events.extend(attached(pool, &allocation, &facts));
                writer.append(events)?;
                Ok(allocation)
            }
            Err(r) => {
                writer.append_one(marked(intent, false, format!("not attached: {r}")))?;
                Err(r.into())
            }
        }
    })
}

/// `PoolAttached`, and in its commit the allocation's nodes when it has several or holds GPUs
/// (one node without GPUs holds all of the allocation, which `PoolAttached` says already).
pub(super) fn attached(pool: &str, allocation: &Allocation, facts: &AllocationFacts) -> Vec<Event> {
    let mut events = vec![Event::PoolAttached(PoolAttached {
        pool: pool.to_owned(),
        allocation: allocation.clone(),
    })];
    events.extend(nodes_of(pool, allocation, facts));
    events
}

/// `PoolNodes` for an allocation over several nodes or with GPUs (none for one node without).
pub(super) fn nodes_of(
    pool: &str,
    allocation: &Allocation,
    facts: &AllocationFacts,
) -> Option<Event> {
    let shares = facts.live_shares();
    (shares.len() > 1 || shares.iter().any(|s| !s.gpus.is_empty())).then(|| {
        Event::PoolNodes(PoolNodes {
            pool: pool.to_owned(),
            job_id: allocation.job_id,
            nodes: shares,
        })
    })
}

fn marked(intent: &AllocationMarkIntent, ok: bool, reason: String) -> Event {
    Event::AllocationMarked(AllocationMarked {
        pool: intent.pool.clone(),
        job_id: intent.job_id,
        ok,
        reason,
    })
}

/// A comment read back that is not the one set: what was done is not known.
fn not_shown(intent: &AllocationMarkIntent, facts: &AllocationFacts) -> OpError {
    OpError::Unknown(format!(
        "`scontrol update JobId={} Comment=…` answered, but the job shows comment {:?}",
        intent.job_id, facts.comment
    ))
}

/// `e`, saying that the pool was not attached and what to do.
fn not_attached(e: OpError, intent: &AllocationMarkIntent) -> OpError {
    let (pool, job) = (&intent.pool, intent.job_id);
    let next = format!(
        "; pool {pool} was not attached. Run {} again when `scontrol show job {job}` answers",
        Next::PoolAttach {
            pool: Some(pool),
            job: Some(&job),
            steal: false
        }
    );
    match e {
        OpError::Unknown(m) => OpError::Unknown(m + &next),
        other => other,
    }
}

/// The effect of `intent`: `scontrol update` of the comment, then the job read back and
/// `shows` asked whether it took. The facts read back, or why the comment is not known set
/// (an answer that is not exit 0, or a read that shows otherwise: exit 4, or the refusal
/// `shows` gives).
async fn set_comment<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &AllocationMarkIntent,
    shows: impl FnOnce(&AllocationFacts) -> Result<(), OpError>,
) -> Result<AllocationFacts, OpError> {
    let job = intent.job_id;
    if let Err(e) = ctx.sched.set_comment(job, &intent.comment).await {
        return Err(OpError::Unknown(format!(
            "could not set the comment of job {job} ({e})"
        )));
    }
    let facts = read_facts(ctx, job).await?;
    shows(&facts)?;
    Ok(facts)
}

#[derive(Debug, Serialize)]
pub struct DetachReport {
    pub pool: String,
    pub job_id: JobId,
    /// This journal's mark was taken out of the job's comment (the user's own words kept).
    pub unmarked: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `pool detach POOL`: forget the pool, then take this journal's mark out of the job's
/// comment (intent, `scontrol update`, read back, outcome), so another state directory may
/// attach it. The detach holds whatever the unmarking does; a mark left behind is a warning.
pub async fn detach<S: Scheduler>(ctx: &Ctx<S>, pool: &str) -> Result<DetachReport, OpError> {
    let (job_id, journal) = {
        let (_writer, loaded) = ctx.lock_and_load()?;
        let ended = ended_by_journal(&ctx.pools_dir(), &loaded.state, pool);
        policy::check_detach(&loaded.state.pools, pool, &ended)?;
        let p = &loaded.state.pools.pools[pool];
        (p.allocation.clone(), journal_id(&loaded.state))
    };
    let job = job_id.job_id;
    let mut warnings = Vec::new();
    let unmark = match unmark_intent(ctx, pool, job, journal).await {
        Ok(intent) => intent,
        Err(warning) => {
            warnings.push(warning);
            None
        }
    };
    locked(ctx, |writer, state| {
        let ended = ended_by_journal(&ctx.pools_dir(), state, pool);
        policy::check_detach(&state.pools, pool, &ended)?;
        if state.pools.pools[pool].allocation != job_id {
            return Err(OpError::Failed(format!(
                "pool {pool} was attached anew while this detach asked Slurm; nothing was \
                 done. Run it again"
            )));
        }
        let mut events = vec![Event::PoolDetached(PoolDetached {
            pool: pool.to_owned(),
        })];
        events.extend(unmark.clone().map(Event::AllocationMarkIntent));
        writer.append(events)?;
        Ok(())
    })?;
    let unmarked = match unmark {
        Some(intent) => match take_mark_out(ctx, &intent, journal).await {
            Ok(()) => true,
            Err(warning) => {
                warnings.push(warning);
                false
            }
        },
        None => false,
    };
    Ok(DetachReport {
        pool: pool.to_owned(),
        job_id: job,
        unmarked,
        warnings,
    })
}

/// The active workers of `pool` whose own journal, still trusted, says they ended (the payload
/// exited, or the supervisor finished): a detach's refusal names `reconcile` for them, which
/// proves their steps over, and `pool stop-worker` only for the others.
fn ended_by_journal(pools_dir: &Path, state: &State, pool: &str) -> BTreeSet<Uuid> {
    let Some(p) = state.pools.pools.get(pool) else {
        return BTreeSet::new();
    };
    p.active
        .values()
        .filter(|w| w.journal_damage.is_none())
        .filter(|w| {
            matches!(read_worker_journal(pools_dir, pool, w),
                Ok(Some(r)) if extends_ingested(w, &r).is_ok()
                    && (r.exited.is_some() || r.finished.is_some()))
        })
        .map(|w| w.submission_id)
        .collect()
}

/// The comment `job` is to get once detached, if it now holds this journal's mark; a job
/// that is gone, or a mark that is not ours, is left alone. `Err`: a warning that the job
/// could not be read.
async fn unmark_intent<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    job: JobId,
    journal: uuid::Uuid,
) -> Result<Option<AllocationMarkIntent>, String> {
    match ctx.sched.show_job(job).await {
        Answer::Live(details) => Ok(details
            .iter()
            .find(|d| d.job_id == job)
            .map(crate::ops::facts::allocation_facts)
            .filter(|f| Holder::in_comment(&f.comment).is_some_and(|h| h.journal_id == journal))
            .map(|f| AllocationMarkIntent {
                pool: pool.to_owned(),
                job_id: job,
                comment: holder::unmarked(&f.comment),
                previous: f.comment,
            })),
        Answer::Gone(_) => Ok(None),
        Answer::Unknown(e) => Err(format!(
            "cannot read job {job} ({e}): its comment may still name this state directory; \
             another one's attach of it then needs `--steal`"
        )),
    }
}

/// The effect of a detach's `intent` and its outcome event. `Err`: a warning that the mark
/// may still be there.
async fn take_mark_out<S: Scheduler>(
    ctx: &Ctx<S>,
    intent: &AllocationMarkIntent,
    journal: uuid::Uuid,
) -> Result<(), String> {
    let job = intent.job_id;
    let read_back = set_comment(ctx, intent, |f| match Holder::in_comment(&f.comment) {
        Some(h) if h.journal_id == journal => Err(not_shown(intent, f)),
        _ => Ok(()),
    })
    .await;
    let outcome = match &read_back {
        Ok(_) => marked(
            intent,
            true,
            format!("job {job}'s comment no longer names it"),
        ),
        Err(e) => marked(intent, false, e.to_string()),
    };
    let appended = ctx
        .lock_and_load()
        .and_then(|(writer, _)| writer.append_one(outcome).map_err(OpError::from));
    match (read_back, appended) {
        (Ok(_), Ok(_)) => Ok(()),
        (Err(e), _) => Err(format!(
            "the comment of job {job} may still name this state directory ({e}); another \
             one's attach of it then needs `--steal`"
        )),
        (Ok(_), Err(e)) => Err(format!(
            "the comment of job {job} no longer names this state directory, but that could \
             not be journaled ({e})"
        )),
    }
}
