//! What a worker is asked to be, for `pool submit` and `submit` alike.

use std::path::Path;

use uuid::Uuid;

use super::error::OpError;
use crate::event::asset::{AssetRecord, WorkerAssetsBound};
use crate::event::Event;
use crate::names::check_path_name;
use crate::policy::pool::Budgets;
use crate::slurm::MemoryMb;
use crate::state::State;

#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// The worker's name; `None` names it after its submission id.
    pub worker: Option<String>,
    pub cpus: u32,
    pub mem: MemoryMb,
    /// Publication, native-state and cleanup budgets, and the payload's grace.
    pub budgets: Budgets,
    pub command: Vec<String>,
    /// Names of the source and image assets the worker uses.
    pub source: Option<String>,
    pub image: Option<String>,
    /// File names in the native-state directory that are append-only logs.
    pub append_only_glob: Option<String>,
    /// The acceptance trial the worker joins.
    pub trial: Option<String>,
}

impl WorkerSpec {
    /// The checks that need nothing but the request.
    pub fn check(&self) -> Result<(), OpError> {
        if let Some(w) = &self.worker {
            check_path_name("worker", w).map_err(OpError::Usage)?;
        }
        if self.command.is_empty() {
            return Err(OpError::Usage("no command given after --".to_owned()));
        }
        Ok(())
    }

    /// The given name, or `w-<8 hex digits of the submission id>`.
    pub fn name(&self, submission_id: Uuid) -> String {
        self.worker
            .clone()
            .unwrap_or_else(|| format!("w-{}", &submission_id.simple().to_string()[..8]))
    }
}

/// A continuation asked for (`--continue N`, `--continue-on`, `--continue-crashed`).
#[derive(Clone, Debug)]
pub struct ContinueAsk {
    pub continues: u32,
    pub causes: Vec<crate::policy::continuation::Cause>,
    pub crashed: bool,
}

impl ContinueAsk {
    /// Its record in the receipt of `submission_id`.
    pub fn asked(&self, submission_id: Uuid) -> Event {
        Event::ContinuationAsked(crate::event::pool::ContinuationAsked {
            submission_id,
            continues_left: self.continues,
            causes: self.causes.iter().map(|c| c.as_str().to_owned()).collect(),
            crashed: self.crashed,
        })
    }

    /// The ask a receipt recorded, again; `None` when it has no continuation left.
    pub fn of(asked: &crate::event::pool::ContinuationAsked) -> Option<ContinueAsk> {
        (asked.continues_left > 0).then(|| ContinueAsk {
            continues: asked.continues_left,
            causes: Self::causes_of(&asked.causes),
            crashed: asked.crashed,
        })
    }

    /// The causes a receipt names, in Slurm's words; a word this version does not know is
    /// left out.
    pub fn causes_of(words: &[String]) -> Vec<crate::policy::continuation::Cause> {
        words
            .iter()
            .filter_map(|w| crate::policy::continuation::Cause::parse(w))
            .collect()
    }

    /// What the successor asks: one continuation fewer, or none.
    pub fn next(&self) -> Option<ContinueAsk> {
        (self.continues > 1).then(|| ContinueAsk {
            continues: self.continues - 1,
            ..self.clone()
        })
    }
}

/// A successor's link to its predecessor: its receipt's `WorkerContinued` and what its
/// supervisor resumes from.
#[derive(Clone, Debug)]
pub struct Continues {
    pub continued: crate::event::pool::WorkerContinued,
    pub resume: crate::worker::supervisor::Resume,
}

/// What a receipt records of a continuation: the predecessor it continues
/// (`WorkerContinued`) and the continuation it asks for itself (`ContinuationAsked`).
pub fn continuation_events(
    continues: Option<&Continues>,
    ask: Option<&ContinueAsk>,
    submission_id: Uuid,
) -> Vec<Event> {
    let continued = continues.map(|c| {
        Event::WorkerContinued(crate::event::pool::WorkerContinued {
            submission_id,
            ..c.continued.clone()
        })
    });
    let asked = ask.map(|a| a.asked(submission_id));
    continued.into_iter().chain(asked).collect()
}

/// What a submission carries beyond its intent, checked against the journal under its lock.
pub struct Bound {
    /// The source and image assets, in that order.
    pub assets: Vec<AssetRecord>,
    joined: Option<Event>,
}

impl WorkerSpec {
    /// Resolve the assets and check the trial the worker joins (refusals are exit 3).
    pub fn bind(
        &self,
        state: &State,
        state_dir: &Path,
        submission_id: Uuid,
    ) -> Result<Bound, OpError> {
        let assets = super::asset::resolve_for_worker(
            state,
            state_dir,
            self.source.as_deref(),
            self.image.as_deref(),
        )?;
        let joined = match &self.trial {
            Some(t) => Some(super::trial::join(state, t, submission_id)?),
            None => None,
        };
        Ok(Bound { assets, joined })
    }
}

impl Bound {
    /// The worker's durable receipt, one commit: its intent, the assets it uses (a released
    /// kind's fields never change, so they are their own event) and its trial membership.
    pub fn receipt(&self, intent: Event, submission_id: Uuid) -> Vec<Event> {
        let mut events = vec![intent];
        if !self.assets.is_empty() {
            events.push(Event::WorkerAssetsBound(WorkerAssetsBound {
                submission_id,
                assets: self.assets.clone(),
            }));
        }
        events.extend(self.joined.clone());
        events
    }
}
