//! How a session's job ended, from Slurm's proof: the cause a user reads first (`preempted`,
//! `time-limit`, `node-failure`, else Slurm's own word for the state, `gone` when Slurm no
//! longer names one), then the words that prove it. What `SessionCleared` records as its
//! reason, what a launch that found its session's job over says, and what `sessions` shows of
//! a stale session. Never guessed from timing: a job in its preemption grace is live.

use serde::Serialize;

use crate::policy::continuation::{cause_in, slurm_states};
use crate::slurm::{JobId, JobState};

/// A session's job proven over: why, and Slurm's words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Ended {
    pub job_id: JobId,
    /// `preempted`, `time-limit`, `node-failure`, `cancelled`, `completed`, `failed`, …;
    /// `gone` when neither squeue nor accounting named its state.
    pub cause: String,
    /// `squeue shows job J PREEMPTED`, or `squeue no longer knows job J; accounting shows job
    /// J PREEMPTED`.
    pub proof: String,
}

impl Ended {
    /// `preempted: squeue shows job 7 PREEMPTED`, as `SessionCleared` records it.
    pub fn reason(&self) -> String {
        format!("{}: {}", self.cause, self.proof)
    }
}

/// The end of job `job`, proven by squeue's terminal `state` or, once squeue no longer knows
/// the job ("Invalid job id": `None`), by accounting's words (`policy::reconcile::
/// accounting_over`: "accounting shows job J STATE"), if it answered.
pub fn ended(job: JobId, state: Option<&JobState>, accounting: Option<String>) -> Ended {
    let proof = match (state, accounting) {
        (Some(s), _) => format!("squeue shows job {job} {s}"),
        (None, Some(acct)) => format!("squeue no longer knows job {job}; {acct}"),
        (None, None) => format!("squeue no longer knows job {job}"),
    };
    let cause = match cause_in(&proof) {
        Some(c) => c.as_str().to_owned(),
        None => slurm_states(&proof)
            .next()
            .map_or_else(|| "gone".to_owned(), |w| w.to_lowercase().replace('_', "-")),
    };
    Ended {
        job_id: job,
        cause,
        proof,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u32) -> JobId {
        JobId::new(n).unwrap()
    }

    /// Issue 38: a session's job Slurm preempted ends `preempted`, with squeue's words, or
    /// accounting's once squeue forgot it; never `completed` or `cancelled`.
    #[test]
    fn a_preempted_job_ends_preempted_with_slurms_words() {
        let e = ended(job(7), Some(&JobState::Preempted), None);
        assert_eq!(e.cause, "preempted");
        assert_eq!(e.proof, "squeue shows job 7 PREEMPTED");
        assert_eq!(e.reason(), "preempted: squeue shows job 7 PREEMPTED");
        let acct = Some("accounting shows job 7 PREEMPTED".to_owned());
        let e = ended(job(7), None, acct);
        assert_eq!(e.cause, "preempted");
        assert_eq!(
            e.proof,
            "squeue no longer knows job 7; accounting shows job 7 PREEMPTED"
        );
    }

    #[test]
    fn other_ends_name_slurms_state_or_gone() {
        let cause =
            |s: Option<&JobState>, a: Option<&str>| ended(job(9), s, a.map(str::to_owned)).cause;
        assert_eq!(cause(Some(&JobState::Timeout), None), "time-limit");
        assert_eq!(cause(Some(&JobState::NodeFail), None), "node-failure");
        assert_eq!(cause(Some(&JobState::Completed), None), "completed");
        assert_eq!(cause(Some(&JobState::OutOfMemory), None), "out-of-memory");
        let by_root = JobState::Cancelled { by: Some(0) };
        assert_eq!(cause(Some(&by_root), None), "cancelled");
        assert_eq!(cause(None, Some("accounting shows job 9 FAILED")), "failed");
        assert_eq!(cause(None, None), "gone");
    }
}
