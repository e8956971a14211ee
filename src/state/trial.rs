//! Trials: named acceptance runs. A trial is opened, workers join it as they are submitted,
//! and it is judged once: `passed` or `failed`, with the evidence each worker left. A verdict
//! is never replaced; a later attempt is a new trial that names the one it follows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::trial::{TrialEvidence, TrialJudged, TrialOpened, TrialWorkerJoined, Verdict};
use crate::event::Micros;

/// Trials the journal may hold; opening more is refused.
pub const TRIALS_KEPT: usize = 10_000;
/// Workers one trial may have; joining more is refused.
pub const WORKERS_PER_TRIAL: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judgement {
    pub verdict: Verdict,
    pub reason: String,
    pub at: Micros,
    pub evidence: Vec<TrialEvidence>,
}

/// A worker of a trial, with what it takes to find its files even after the reduced state has
/// forgotten it (its pool detached, or it fell out of the finished list).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialWorker {
    pub submission_id: Uuid,
    pub worker: String,
    /// `None` for a `dispatch submit` worker.
    pub pool: Option<String>,
    /// Given up by an operator (`dispatch forget`): never proven ended, whatever the reduced
    /// state says of it later.
    #[serde(default)]
    pub forgotten: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trial {
    pub name: String,
    pub opened_at: Micros,
    pub pin: Option<String>,
    pub follows: Option<String>,
    pub note: String,
    pub workers: Vec<TrialWorker>,
    pub judgement: Option<Judgement>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trials {
    pub trials: BTreeMap<String, Trial>,
}

impl Trials {
    /// The first opening of a name counts; a second one (which the commands refuse and the
    /// audit flags) changes nothing.
    pub fn opened(&mut self, time: Micros, e: &TrialOpened) {
        self.trials.entry(e.trial.clone()).or_insert_with(|| Trial {
            name: e.trial.clone(),
            opened_at: time,
            pin: e.pin.clone(),
            follows: e.follows.clone(),
            note: e.note.clone(),
            workers: Vec::new(),
            judgement: None,
        });
    }

    /// `worker` and `pool` are the joining submission's, as its intent (in the same commit)
    /// recorded them.
    pub fn joined(&mut self, e: &TrialWorkerJoined, worker: String, pool: Option<String>) {
        // A judged trial's workers are those its verdict saw; a later join changes nothing.
        if let Some(t) = self
            .trials
            .get_mut(&e.trial)
            .filter(|t| t.judgement.is_none())
        {
            if !t.workers.iter().any(|w| w.submission_id == e.submission_id) {
                t.workers.push(TrialWorker {
                    submission_id: e.submission_id,
                    worker,
                    pool,
                    forgotten: false,
                });
            }
        }
    }

    /// Mark a worker given up by an operator in every trial it joined.
    pub fn forgotten(&mut self, id: &Uuid) {
        for t in self.trials.values_mut() {
            for w in t.workers.iter_mut().filter(|w| w.submission_id == *id) {
                w.forgotten = true;
            }
        }
    }

    /// The first verdict stands: a later one never relabels the trial.
    pub fn judged(&mut self, time: Micros, e: &TrialJudged) {
        if let Some(t) = self.trials.get_mut(&e.trial) {
            if t.judgement.is_none() {
                t.judgement = Some(Judgement {
                    verdict: e.verdict,
                    reason: e.reason.clone(),
                    at: time,
                    evidence: e.evidence.clone(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::trial::*;

    fn judged(trial: &str, verdict: Verdict) -> TrialJudged {
        TrialJudged {
            trial: trial.into(),
            verdict,
            reason: format!("{verdict:?}"),
            evidence: Vec::new(),
        }
    }

    #[test]
    fn the_first_verdict_stands() {
        let mut t = Trials::default();
        t.opened(
            Micros(1),
            &TrialOpened {
                trial: "a".into(),
                pin: None,
                follows: None,
                note: String::new(),
            },
        );
        let w = Uuid::from_u128(7);
        for _ in 0..2 {
            let e = TrialWorkerJoined {
                trial: "a".into(),
                submission_id: w,
            };
            t.joined(&e, "w".into(), Some("p".into()));
        }
        t.judged(Micros(2), &judged("a", Verdict::Failed));
        t.judged(Micros(3), &judged("a", Verdict::Passed));
        t.judged(Micros(3), &judged("never-opened", Verdict::Passed));
        let a = &t.trials["a"];
        assert_eq!(
            a.workers,
            [TrialWorker {
                submission_id: w,
                worker: "w".into(),
                pool: Some("p".into()),
                forgotten: false,
            }]
        );
        let j = a.judgement.as_ref().unwrap();
        assert_eq!((j.verdict, j.at), (Verdict::Failed, Micros(2)));
        assert_eq!(t.trials.len(), 1);
    }
}
