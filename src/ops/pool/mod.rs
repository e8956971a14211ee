//! `dispatch pool create|attach|submit|status|stop-worker|release|detach`.
//!
//! Each command: lock the journal → load state → ask Slurm → decide (policy) → append the intent
//! → act → append the outcome. Budget is only released by a proof event.
//!
//! One file per command: `create`, `release`, `attach` (attach, detach), `submit`, `stop` (stop-worker and the
//! release of a worker proven over), `ingest` (what a worker's own journal says), `status`.
//! This file holds what they share: the journal-lock helpers and the allocation's identity.

mod attach;
mod create;
mod dry_run;
mod ingest;
mod queue;
mod release;
mod renew;
mod resubmit;
mod room;
mod status;
mod stop;
mod submit;

pub(crate) use crate::ops::context::locked;
pub use crate::state::pool::Resources;
pub use attach::{attach, detach, AllocationState, AllocationView, AttachReport, DetachReport};
pub(crate) use create::reconcile_creation;
pub use create::{create, creation_job_name, CreateReport, CreateRequest, Progress, RenewBounds};
pub use create::{CreateAction, CreationOutcome, CreationReconciled};
pub use dry_run::{submit_dry_run, Room, SubmitPlan};
pub(crate) use ingest::{sweep_publication, worker_journal_news};
pub use queue::MAX_WAITING;
pub use release::{release, ReleaseReport};
pub(crate) use renew::renew_due;
pub use renew::{RenewalOutcome, RenewalReconciled, SuccessorListed};
pub use resubmit::Resubmission;
pub(crate) use resubmit::{replace, waiting as replacement_waiting};
pub use room::{Wait, WaitProgress, FALLBACK_PROOF_EVERY};
pub use status::{
    status, status_of, AssetUseView, CreatingView, EndView, NodeView, Owner, PoolView,
    PublicationView, Refreshed, Stage, StatusDoc, StatusReport, WorkerJournalView, WorkerView,
};
pub(crate) use stop::release_proven;
pub use stop::{stop_worker, StopReport};
pub(crate) use submit::{process_alive, srun_refused_launch};
pub use submit::{submit, submit_waiting, SubmitReport, SubmitRequest, STEP_DISCOVERY_TIMEOUT};

use std::path::Path;

use uuid::Uuid;

use crate::event::Event;
use crate::ops::context::Ctx;
use crate::ops::error::OpError;
use crate::ops::facts::allocation_facts;
use crate::policy::pool::{AllocationFacts, Refusal};
use crate::slurm::{Answer, JobId, Scheduler, StepKind};
use crate::state::pool::*;
use crate::state::State;

/// The number of the step called `name` in a step listing.
fn numbered_step_named(rows: &[crate::slurm::StepRow], name: &str) -> Option<u32> {
    rows.iter().find_map(|r| match (r.name == name, r.id.step) {
        (true, StepKind::Numbered(n)) => Some(n),
        _ => None,
    })
}

pub fn step_name(pool: &str, worker: &str) -> String {
    format!("{pool}.{worker}")
}

/// Where a pool's workers publish their workspace and evidence.
pub fn published_dir(pools_dir: &Path, pool: &str) -> std::path::PathBuf {
    pools_dir.join(pool).join("published")
}

/// Ask Slurm about an allocation. Gone becomes facts that every check refuses.
async fn read_facts<S: Scheduler>(ctx: &Ctx<S>, job: JobId) -> Result<AllocationFacts, OpError> {
    match ctx.sched.show_job(job).await {
        Answer::Live(details) => {
            let d = details
                .iter()
                .find(|d| d.job_id == job && d.array_job_id.is_none())
                .or(details.first())
                .ok_or_else(|| OpError::Failed(format!("scontrol show job {job} answered nothing usable")))?;
            Ok(allocation_facts(d))
        }
        Answer::Gone(_) => Err(OpError::Refused(Refusal::NotRunning {
            job_id: job,
            state: "unknown to Slurm (finished and forgotten, or never existed)".to_owned(),
        })),
        Answer::Unknown(e) => Err(OpError::Failed(format!(
            "cannot read job {job} from Slurm ({e}); nothing was done. Try again when `scontrol show job {job}` answers"
        ))),
    }
}

/// The worker `submission_id` of `pool` while it still holds budget.
pub(crate) fn active_worker<'a>(state: &'a State, pool: &str, id: Uuid) -> Option<&'a Worker> {
    state.pools.pools.get(pool)?.active.get(&id)
}

/// Append `events` about worker `id` if it still holds budget (under the lock, as it is now);
/// once another command settled it, they would say nothing. Whether they were appended.
fn record<S: Scheduler>(
    ctx: &Ctx<S>,
    pool: &str,
    id: Uuid,
    events: Vec<Event>,
) -> Result<bool, OpError> {
    crate::ops::context::append_if(
        ctx,
        |state| active_worker(state, pool, id).is_some(),
        events,
    )
}

/// The journal's id, from its Genesis (every journal dispatch opens has one).
fn journal_id(state: &crate::state::State) -> uuid::Uuid {
    state
        .journal_id
        .expect("a journal opened for writing starts with its Genesis")
}
