//! The three answers every query gives, and what a lookup in one of them shows.

use std::fmt;

use serde::Serialize;

use super::error::SlurmError;
use super::ids::{JobId, StepId};
use super::runner::SlurmCommand;
use super::squeue::{JobRow, StepRow};

/// Why an answer proves that a job is gone. An empty answer is never one of these: a lying or
/// misconfigured controller, or the wrong cluster, answers exit 0 with nothing too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum GoneProof {
    /// Slurm said "Invalid job id specified" about the one job id it was asked about.
    InvalidJobId { command: SlurmCommand, job: JobId },
}

impl fmt::Display for GoneProof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GoneProof::InvalidJobId { command, job } => write!(
                f,
                "{command} said \"Invalid job id specified\" for job {job}"
            ),
        }
    }
}

/// `Live`: Slurm answered with data, possibly none (exit 0, empty: proves nothing by itself).
/// `Gone`: Slurm said the one job asked about does not exist, and how. `Unknown`: anything
/// else; it must never release anything.
#[derive(Debug, Clone)]
pub enum Answer<T> {
    Live(T),
    Gone(GoneProof),
    Unknown(SlurmError),
}

impl<T> Answer<T> {
    pub fn is_live(&self) -> bool {
        matches!(self, Answer::Live(_))
    }

    pub fn is_gone(&self) -> bool {
        matches!(self, Answer::Gone(_))
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

    pub fn as_ref(&self) -> Answer<&T> {
        match self {
            Answer::Live(t) => Answer::Live(t),
            Answer::Gone(p) => Answer::Gone(p.clone()),
            Answer::Unknown(e) => Answer::Unknown(e.clone()),
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Answer<U> {
        match self {
            Answer::Live(t) => Answer::Live(f(t)),
            Answer::Gone(p) => Answer::Gone(p),
            Answer::Unknown(e) => Answer::Unknown(e),
        }
    }

    /// Look one thing up in a successful answer.
    pub fn find<R>(&self, f: impl FnOnce(&T) -> Option<&R>) -> Lookup<'_, R> {
        match self {
            Answer::Live(t) => f(t).map_or(Lookup::NotListed, Lookup::Listed),
            Answer::Gone(p) => Lookup::Gone(p.clone()),
            Answer::Unknown(e) => Lookup::Unknown(e.clone()),
        }
    }
}

/// One job or step looked up in an answer.
#[derive(Debug, Clone)]
pub enum Lookup<'a, R> {
    Listed(&'a R),
    /// A successful answer without it. Not proof on its own that it is gone: an empty or
    /// partial answer (a lying or misconfigured controller, the wrong cluster, a job past
    /// MinJobAge in a query of several ids) looks just the same.
    NotListed,
    /// Slurm said it does not exist.
    Gone(GoneProof),
    Unknown(SlurmError),
}

impl<'a, R> Lookup<'a, R> {
    /// The row, if it was listed.
    pub fn live(&self) -> Option<&'a R> {
        match self {
            Lookup::Listed(r) => Some(r),
            _ => None,
        }
    }
}

impl Answer<Vec<JobRow>> {
    /// The row of job `id` in a listing.
    pub fn job(&self, id: JobId) -> Lookup<'_, JobRow> {
        self.find(|rows| rows.iter().find(|r| r.is_job(id)))
    }
}

impl Answer<Vec<StepRow>> {
    /// The row of `step`. squeue lists running steps only: absence right after a launch can
    /// mean "not created yet"; absence of a step once seen, while its job is listed, means it
    /// ended.
    pub fn step(&self, step: StepId) -> Lookup<'_, StepRow> {
        self.find(|rows| rows.iter().find(|r| r.id == step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrowing() {
        let live: Answer<Vec<u32>> = Answer::Live(vec![1, 2]);
        assert!(matches!(
            live.find(|v| v.iter().find(|x| **x == 2)),
            Lookup::Listed(2)
        ));
        assert!(
            matches!(
                live.find(|v| v.iter().find(|x| **x == 3)),
                Lookup::NotListed
            ),
            "absent from an answer is not gone"
        );
        let empty: Answer<Vec<u32>> = Answer::Live(vec![]);
        assert!(matches!(empty.find(|v| v.first()), Lookup::NotListed));
        let unknown: Answer<Vec<u32>> = Answer::Unknown(SlurmError::NotInAccounting {
            command: SlurmCommand::Sacct,
        });
        assert!(matches!(unknown.find(|v| v.first()), Lookup::Unknown(_)));
        let proof = GoneProof::InvalidJobId {
            command: SlurmCommand::Squeue,
            job: JobId::new(5).unwrap(),
        };
        let gone: Answer<Vec<u32>> = Answer::Gone(proof.clone());
        assert!(matches!(gone.find(|v| v.first()), Lookup::Gone(p) if p == proof));
        assert_eq!(
            proof.to_string(),
            "squeue said \"Invalid job id specified\" for job 5"
        );
    }
}
