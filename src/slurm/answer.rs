//! The three answers every query gives.

use super::error::SlurmError;
use super::ids::{JobId, StepId};
use super::squeue::{JobRow, StepRow};

/// `Live`: Slurm answered with data. `Gone`: Slurm answered successfully and the thing
/// is not there (an empty answer, or "Invalid job id specified" for one specific id).
/// `Unknown`: anything else; it must never release anything.
#[derive(Debug, Clone)]
pub enum Answer<T> {
    Live(T),
    Gone,
    Unknown(SlurmError),
}

impl<T> Answer<T> {
    pub fn is_live(&self) -> bool {
        matches!(self, Answer::Live(_))
    }

    pub fn is_gone(&self) -> bool {
        matches!(self, Answer::Gone)
    }

    pub fn is_unknown(&self) -> bool {
        matches!(self, Answer::Unknown(_))
    }

    pub fn live(self) -> Option<T> {
        match self {
            Answer::Live(t) => Some(t),
            _ => None,
        }
    }

    pub fn unknown(&self) -> Option<&SlurmError> {
        match self {
            Answer::Unknown(e) => Some(e),
            _ => None,
        }
    }

    pub fn as_ref(&self) -> Answer<&T> {
        match self {
            Answer::Live(t) => Answer::Live(t),
            Answer::Gone => Answer::Gone,
            Answer::Unknown(e) => Answer::Unknown(e.clone()),
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Answer<U> {
        match self {
            Answer::Live(t) => Answer::Live(f(t)),
            Answer::Gone => Answer::Gone,
            Answer::Unknown(e) => Answer::Unknown(e),
        }
    }

    /// Narrows a successful answer; `None` from `f` means "answered, not there" (Gone).
    pub fn and_then<U>(self, f: impl FnOnce(T) -> Option<U>) -> Answer<U> {
        match self {
            Answer::Live(t) => f(t).map_or(Answer::Gone, Answer::Live),
            Answer::Gone => Answer::Gone,
            Answer::Unknown(e) => Answer::Unknown(e),
        }
    }
}

impl Answer<Vec<JobRow>> {
    /// The row of job `id` in a listing. A successful listing without it is `Gone`,
    /// which is sound only if the query selected `id` (by id, or by a name it has).
    pub fn job(&self, id: JobId) -> Answer<&JobRow> {
        self.as_ref()
            .and_then(|rows| rows.iter().find(|r| r.is_job(id)))
    }
}

impl Answer<Vec<StepRow>> {
    /// The row of `step`. squeue lists running steps only: absence right after a launch
    /// can mean "not created yet"; absence of a step once seen means it ended.
    pub fn step(&self, step: StepId) -> Answer<&StepRow> {
        self.as_ref()
            .and_then(|rows| rows.iter().find(|r| r.id == step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::runner::SlurmCommand;

    #[test]
    fn narrowing() {
        let live: Answer<Vec<u32>> = Answer::Live(vec![1, 2]);
        assert!(live
            .clone()
            .and_then(|v| v.into_iter().find(|x| *x == 2))
            .is_live());
        assert!(live.and_then(|v| v.into_iter().find(|x| *x == 3)).is_gone());
        let unknown: Answer<Vec<u32>> = Answer::Unknown(SlurmError::NotInAccounting {
            command: SlurmCommand::Sacct,
        });
        assert!(unknown.and_then(|v| v.into_iter().next()).is_unknown());
        let gone: Answer<Vec<u32>> = Answer::Gone;
        assert!(gone.map(|v| v.len()).is_gone());
    }
}
