//! What a worker is asked to be, for `pool submit` and `submit` alike.

use uuid::Uuid;

use super::error::OpError;
use crate::policy::pool::Budgets;
use crate::slurm::MemoryMb;
use crate::worker::dirs::check_name;

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
            check_name("worker", w).map_err(OpError::Usage)?;
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
