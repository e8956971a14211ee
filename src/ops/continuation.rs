//! Workers continued past the end of their job or allocation (`--continue N`): the successor
//! driver (`ops::successor`, which `reconcile` runs after it has recorded what it proved)
//! calls [`continue_one`] for each worker that asked and is due, before any resubmission after
//! a node failure (which a worker that asked to be continued waits for).
//!
//! For each worker that asked and is proven over (`state::continuation`), the facts of its
//! end are gathered (its terminal proof, its pool's lost node or ended allocation, and its own
//! journal: the deadline's SIGTERM, a declared checkpoint, its state class, its publication)
//! and `policy::continuation::decide` says whether it is continued. A refusal is recorded
//! (`ContinuationRefused`) and not decided again. A continuation is an ordinary submission of
//! the same request (`dispatch submit`'s new job; `pool submit`'s, in the same pool) whose
//! receipt names its predecessor (`WorkerContinued`, which settles it, so a crash after it
//! never submits twice; a crash before it leaves it waiting for the next `reconcile`), and
//! whose supervisor resumes from the predecessor's publication and native state. A pool
//! without room, being released, or gone leaves it waiting, with why: never dropped.

use serde::Serialize;
use uuid::Uuid;

use super::context::{append_if, Ctx};
use super::error::OpError;
use super::spec::{ContinueAsk, Continues, WorkerSpec};
use crate::event::jobs::JobRequest;
use crate::event::pool::{ContinuationRefused, WorkerContinued, WorkerRequest};
use crate::event::{Event, Sha256Digest};
use crate::failpoint;
use crate::policy::continuation::{self as policy, Asked, Decision, Ended};
use crate::policy::lineage::pool_unready;
use crate::policy::node::StateClass;
use crate::policy::pool::Budgets;
use crate::slurm::{MemoryMb, Scheduler, SlurmDuration};
use crate::state::continuation::{Continuable, Request};
use crate::state::State;
use crate::worker::dirs::WorkerDirs;
use crate::worker::report::{self, Publication};
use crate::worker::supervisor::Resume;

/// What became of one worker that waited for its continuation.
#[derive(Debug, Serialize)]
pub struct Continuation {
    pub pool: Option<String>,
    pub worker: String,
    pub predecessor: String,
    /// The successor's generation, when one is decided.
    pub generation: Option<u32>,
    /// The successor, once its receipt is written.
    pub submission_id: Option<String>,
    pub outcome: ContinueOutcome,
    /// Why.
    pub detail: String,
}

crate::words! {
    pub enum ContinueOutcome {
        Continued => "continued",
        /// Not continued, recorded, not decided again.
        Refused => "refused",
        /// Due, and waiting for room (or for its pool): tried again by the next `reconcile`.
        Waiting => "waiting",
        /// Tried again by the next `reconcile`.
        Unknown => "unknown",
    }
}

/// Decide, and submit, the continuation of worker `id` (proven over, `c`), from the state the
/// run read (`state`).
pub(crate) async fn continue_one<S: Scheduler>(
    ctx: &Ctx<S>,
    state: &State,
    id: Uuid,
    c: &Continuable,
) -> Result<Continuation, OpError> {
    let mut line = Continuation {
        pool: c.pool.clone(),
        worker: c.worker.clone(),
        predecessor: id.to_string(),
        generation: None,
        submission_id: None,
        outcome: ContinueOutcome::Unknown,
        detail: String::new(),
    };
    let ended = match ended_facts(ctx, state, id, c) {
        Ok(ended) => ended,
        // Its own journal could not be read now: decided by a later `reconcile`, never
        // refused for a read that may succeed then.
        Err(e) => {
            line.detail = format!("its worker journal could not be read: {e}");
            return Ok(line);
        }
    };
    match policy::decide(&ended, &asked(c)) {
        Decision::Refuse(reason) => {
            refuse(ctx, id, &reason)?;
            (line.outcome, line.detail) = (ContinueOutcome::Refused, reason);
        }
        Decision::Wait(why) => (line.outcome, line.detail) = (ContinueOutcome::Waiting, why),
        Decision::Continue {
            cause,
            proof,
            from_crash_class,
            from_saved,
        } => {
            let from = if from_saved {
                ended.saved.as_ref()
            } else {
                ended.published.as_ref()
            };
            let continued = WorkerContinued {
                submission_id: Uuid::nil(),
                predecessor: id,
                generation: c.generation + 1,
                cause: cause.as_str().to_owned(),
                proof,
                published_dir: from.map(|p| p.0.clone()),
                manifest_sha256: from.and_then(manifest_of),
                from_crash_class,
            };
            line.generation = Some(continued.generation);
            submit_successor(ctx, state, c, continued, &mut line).await?;
        }
    }
    Ok(line)
}

/// A continuation not decided now, and why (`reconcile` lists it).
pub(crate) fn waiting(id: Uuid, c: &Continuable, why: String) -> Continuation {
    Continuation {
        pool: c.pool.clone(),
        worker: c.worker.clone(),
        predecessor: id.to_string(),
        generation: None,
        submission_id: None,
        outcome: ContinueOutcome::Waiting,
        detail: why,
    }
}

/// `ContinuationRefused`, unless another command settled it meanwhile.
fn refuse<S: Scheduler>(ctx: &Ctx<S>, predecessor: Uuid, reason: &str) -> Result<(), OpError> {
    let refused = Event::ContinuationRefused(ContinuationRefused {
        predecessor,
        reason: reason.to_owned(),
    });
    failpoint::hit("continue-before-refusal");
    let waiting = |now: &State| {
        now.jobs
            .continuations
            .asked
            .get(&predecessor)
            .is_some_and(|c| c.ended.is_some())
    };
    append_if(ctx, waiting, vec![refused])?;
    Ok(())
}

fn asked(c: &Continuable) -> Asked {
    Asked {
        continues_left: c.asked.continues_left,
        causes: ContinueAsk::causes_of(&c.asked.causes),
        crashed: c.asked.crashed,
    }
}

/// A `(directory, manifest hex)` pair's digest.
fn manifest_of(published: &(String, String)) -> Option<Sha256Digest> {
    let hex = &published.1;
    let bytes: [u8; 32] = hex::decode(hex).ok()?.try_into().ok()?;
    Some(Sha256Digest(bytes))
}

/// What is known of the end of worker `id`: the state's record and its own journal.
/// An I/O error reading its journal is an error (tried again later); a damaged journal, or
/// none, gives no facts, and the decision refuses for want of them.
fn ended_facts<S: Scheduler>(
    ctx: &Ctx<S>,
    state: &State,
    id: Uuid,
    c: &Continuable,
) -> Result<Ended, crate::journal::JournalError> {
    let dirs = WorkerDirs::of(&ctx.state_dir, c.pool.as_deref(), id);
    let own = match report::read(&dirs.evidence) {
        Err(e @ crate::journal::JournalError::Io { .. }) => return Err(e),
        read => read.ok().flatten().unwrap_or_default(),
    };
    let published = match &own.publication {
        Some(Publication::Published(p)) => Some((p.dir.clone(), hex::encode(p.manifest_sha256.0))),
        _ => None,
    };
    let state_class = own.cleaned.as_ref().and_then(|x| class_of(&x.state_class));
    let saved = own
        .saved
        .as_ref()
        .map(|c| (c.dir.clone(), hex::encode(c.manifest_sha256.0)));
    let trial = match &c.request {
        Some(Request::Job(r)) => r.trial.as_deref(),
        Some(Request::Pool(r)) => r.trial.as_deref(),
        None => None,
    };
    Ok(Ended {
        terminal_proof: c.ended.clone().unwrap_or_default(),
        node_lost: c.node_lost.clone(),
        allocation_ended: c.allocation_ended.clone(),
        deadline_signalled: own.signals.iter().any(|s| s.reason == "deadline"),
        checkpoint_declared: own.checkpoint.is_some(),
        supervisor_finished: own.finished.is_some(),
        term_from_outside: own.term_from_outside(),
        state_class,
        published,
        saved,
        stopped: c.stopped,
        trial_judged: trial
            .and_then(|t| state.trials.trials.get(t))
            .is_some_and(|t| t.judgement.is_some()),
        allocation_runs: (c.pool.as_deref())
            .and_then(|p| state.pools.pools.get(p))
            .is_some_and(|p| !p.releasing && p.ended.is_none()),
    })
}

fn class_of(word: &str) -> Option<StateClass> {
    [
        StateClass::Sealed,
        StateClass::CrashClassPartial,
        StateClass::Checkpointed,
        StateClass::Empty,
    ]
    .into_iter()
    .find(|c| c.as_str() == word)
}

/// What the successor resumes from: the predecessor's publication and native state (its
/// own state directory, or the copy a checkpoint publication holds).
fn resume_of<S: Scheduler>(ctx: &Ctx<S>, c: &Continuable, continued: &WorkerContinued) -> Resume {
    let dirs = WorkerDirs::of(&ctx.state_dir, c.pool.as_deref(), continued.predecessor);
    let from: std::path::PathBuf = continued.published_dir.clone().unwrap_or_default().into();
    let saved_state = from.join(crate::worker::publish::CHECKPOINT_STATE);
    Resume {
        state_from: if saved_state.is_dir() {
            saved_state
        } else {
            dirs.state
        },
        from,
        generation: continued.generation,
    }
}

/// The successor's submission; `line` says what became of it.
async fn submit_successor<S: Scheduler>(
    ctx: &Ctx<S>,
    state: &State,
    c: &Continuable,
    continued: WorkerContinued,
    line: &mut Continuation,
) -> Result<(), OpError> {
    let continues = Continues {
        resume: resume_of(ctx, c, &continued),
        continued,
    };
    let ask = ContinueAsk {
        continues: c.asked.continues_left,
        causes: asked(c).causes,
        crashed: c.asked.crashed,
    }
    .next();
    failpoint::hit("continue-before-submit");
    let submitted = match &c.request {
        Some(Request::Job(r)) => {
            let req = job_successor(c, r, ask, continues);
            crate::ops::submit::submit(ctx, &req)
                .await
                .map(|s| s.submission_id)
        }
        Some(Request::Pool(r)) => {
            if let Some(why) = pool_unready(state, c) {
                (line.outcome, line.detail) = (ContinueOutcome::Waiting, why);
                return Ok(());
            }
            let pool = c.pool.as_deref().unwrap_or_default();
            let req = pool_successor(pool, who(c), r, ask, Follows::Continues(continues));
            crate::ops::pool::submit(ctx, &req)
                .await
                .map(|s| s.submission_id)
        }
        None => Err(OpError::Failed(format!(
            "worker {}: its receipt kept no request to submit again",
            c.worker
        ))),
    };
    failpoint::hit("continue-after-submit");
    match submitted {
        Ok(id) => {
            line.submission_id = Some(id);
            (line.outcome, line.detail) = (ContinueOutcome::Continued, String::new());
        }
        Err(OpError::Refused(refusal)) if c.pool.is_some() => {
            line.outcome = ContinueOutcome::Waiting;
            line.detail = format!("continuation waiting for room: {refusal}");
        }
        Err(e) => (line.outcome, line.detail) = (ContinueOutcome::Unknown, e.to_string()),
    }
    Ok(())
}

/// Who a worker is, as its successor is again: its name, CPUs and memory.
pub(crate) struct Who<'a> {
    pub worker: &'a str,
    pub cpus: u32,
    pub mem_mb: u64,
}

fn who(c: &Continuable) -> Who<'_> {
    Who {
        worker: &c.worker,
        cpus: c.cpus,
        mem_mb: c.mem_mb,
    }
}

/// The predecessor's spec again, from the request its receipt kept.
fn spec_of(who: Who<'_>, r: &Request) -> WorkerSpec {
    // The two kept requests name these fields alike.
    macro_rules! parts {
        ($r:expr) => {
            (
                &$r.command,
                [
                    $r.publication_timeout_s,
                    $r.native_state_s,
                    $r.cleanup_s,
                    $r.grace_s,
                ],
                &$r.source,
                &$r.image,
                &$r.append_only_glob,
                &$r.trial,
            )
        };
    }
    let (command, budgets, source, image, glob, trial) = match r {
        Request::Job(r) => parts!(r),
        Request::Pool(r) => parts!(r),
    };
    let [publication_timeout_s, native_state_s, cleanup_s, grace_s] = budgets;
    WorkerSpec {
        worker: Some(who.worker.to_owned()),
        cpus: who.cpus,
        mem: MemoryMb::new(who.mem_mb),
        budgets: Budgets {
            publication_timeout_s,
            native_state_s,
            cleanup_s,
            grace_s,
            min_run_s: Budgets::DEFAULT_MIN_RUN_S,
        },
        command: command.clone(),
        source: source.clone(),
        image: image.clone(),
        append_only_glob: glob.clone(),
        trial: trial.clone(),
    }
}

fn job_successor(
    c: &Continuable,
    r: &JobRequest,
    ask: Option<ContinueAsk>,
    continues: Continues,
) -> crate::ops::submit::JobSubmitRequest {
    let target = match (&r.partition, &r.account) {
        (Some(partition), Some(account)) => Some(crate::config::Target {
            partition: partition.clone(),
            account: account.clone(),
            qos: r.qos.clone(),
            time: None,
            cpus_per_task: None,
            mem: None,
            confined: false,
        }),
        _ => None,
    };
    crate::ops::submit::JobSubmitRequest {
        job_name_prefix: r.job_name_prefix.clone(),
        target_name: r.target.clone(),
        target,
        time: SlurmDuration::from_secs(r.time_s),
        spec: spec_of(who(c), &Request::Job(r.clone())),
        continuation: ask,
        continues: Some(continues),
    }
}

/// How a pool worker's successor follows it.
pub(crate) enum Follows {
    /// A continuation, resuming from what it published.
    Continues(Continues),
    /// Submitted again from scratch after a node failure ended it (`--resubmit-on-node-failure`).
    Replaces(Uuid),
}

/// The one submission that follows a pool worker, continued or resubmitted: the same request
/// on any node of `pool` with room, every ask of the worker carried on, the one this uses one
/// fewer (`ask`: the continuation the successor asks).
pub(crate) fn pool_successor(
    pool: &str,
    who: Who<'_>,
    r: &WorkerRequest,
    ask: Option<ContinueAsk>,
    follows: Follows,
) -> crate::ops::pool::SubmitRequest {
    let (resubmits, replaces, continues) = match follows {
        Follows::Continues(c) => (r.resubmits_left, None, Some(c)),
        Follows::Replaces(id) => (r.resubmits_left.saturating_sub(1), Some(id), None),
    };
    crate::ops::pool::SubmitRequest {
        pool: pool.to_owned(),
        spec: spec_of(who, &Request::Pool(r.clone())),
        gpus: r.gpus,
        node: None,
        resubmits,
        replaces,
        continuation: ask,
        continues,
    }
}
