//! Trial rules, pure: who may open, join and judge a trial. A verdict is given once; `passed`
//! needs every worker to have ended, completed, and published evidence that still verifies.

use crate::event::trial::{TrialEvidence, Verdict};
use crate::next::Next::{self, Reconcile};
use crate::state::trial::{Trial, Trials, TRIALS_KEPT, WORKERS_PER_TRIAL};
use crate::state::ENDED;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrialRefusal {
    #[error(
        "trial {0:?} already exists; a new attempt is a new trial: {open}",
        open = Next::TrialOpen { trial: None, follows: Some(_0) }
    )]
    Exists(String),
    #[error(
        "no trial {0:?}; open it first with {open} ({trials} lists them)",
        open = Next::TrialOpen { trial: Some(_0), follows: None },
        trials = Next::Trials
    )]
    Unknown(String),
    #[error("the journal already holds {TRIALS_KEPT} trials; no more can be opened")]
    Full,
    #[error("trial {trial:?} already has {WORKERS_PER_TRIAL} workers; open another trial")]
    TooManyWorkers { trial: String },
    #[error("trial {trial:?} was judged {verdict} and takes no more workers; open a follow-on trial with `--follows {trial}`")]
    Judged {
        trial: String,
        verdict: &'static str,
    },
    #[error(
        "trial {trial:?} was already judged {verdict}; verdicts are never relabelled. Record a \
         new attempt as {}",
        Next::TrialOpen { trial: None, follows: Some(trial) }
    )]
    Relabel {
        trial: String,
        verdict: &'static str,
    },
    #[error("trial {0:?} has no workers: there is nothing to judge as passed")]
    NoWorkers(String),
    #[error(
        "trial {trial:?} cannot pass: {problems}. Judge it `failed`, or wait ({Reconcile}) until \
         every worker has ended and published"
    )]
    NotProven { trial: String, problems: String },
}

/// A trial name: the same rule as pool and worker names, so it is safe in paths and argv.
pub fn check_open(trials: &Trials, name: &str, follows: Option<&str>) -> Result<(), TrialRefusal> {
    if trials.trials.contains_key(name) {
        return Err(TrialRefusal::Exists(name.to_owned()));
    }
    if let Some(earlier) = follows {
        if !trials.trials.contains_key(earlier) {
            return Err(TrialRefusal::Unknown(earlier.to_owned()));
        }
    }
    if trials.trials.len() >= TRIALS_KEPT {
        return Err(TrialRefusal::Full);
    }
    Ok(())
}

pub fn check_join<'a>(trials: &'a Trials, name: &str) -> Result<&'a Trial, TrialRefusal> {
    let t = trials
        .trials
        .get(name)
        .ok_or_else(|| TrialRefusal::Unknown(name.to_owned()))?;
    if let Some(j) = &t.judgement {
        return Err(TrialRefusal::Judged {
            trial: name.to_owned(),
            verdict: j.verdict.as_str(),
        });
    }
    if t.workers.len() >= WORKERS_PER_TRIAL {
        return Err(TrialRefusal::TooManyWorkers {
            trial: name.to_owned(),
        });
    }
    Ok(t)
}

/// What keeps one worker's evidence from supporting a pass, if anything. `manifest_ok` says
/// whether its published directory still verifies against its manifest.
pub fn evidence_problem(e: &TrialEvidence, manifest_ok: bool) -> Option<String> {
    let w = &e.worker;
    if e.state != "released" && e.state != ENDED {
        Some(format!("worker {w} is {} (not proven ended)", e.state))
    } else if e.outcome.as_deref() != Some("completed") {
        Some(format!(
            "worker {w} ended {}",
            e.outcome
                .as_deref()
                .unwrap_or("without an outcome in its own journal")
        ))
    } else if e.published_dir.is_none() || e.manifest_sha256.is_none() {
        Some(format!("worker {w} published nothing"))
    } else if !manifest_ok {
        Some(format!(
            "worker {w}'s published evidence no longer verifies"
        ))
    } else {
        None
    }
}

/// May `trial` be judged `verdict` on this evidence? `problems` are `evidence_problem`'s
/// answers, one per worker that has one.
pub fn check_verdict(
    trial: &Trial,
    verdict: Verdict,
    problems: &[String],
) -> Result<(), TrialRefusal> {
    if let Some(j) = &trial.judgement {
        return Err(TrialRefusal::Relabel {
            trial: trial.name.clone(),
            verdict: j.verdict.as_str(),
        });
    }
    if verdict == Verdict::Passed {
        if trial.workers.is_empty() {
            return Err(TrialRefusal::NoWorkers(trial.name.clone()));
        }
        if !problems.is_empty() {
            return Err(TrialRefusal::NotProven {
                trial: trial.name.clone(),
                problems: problems.join("; "),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::trial::TrialWorkerJoined;
    use crate::event::Micros;
    use crate::policy::fixtures::{self, evidence};
    use crate::state::trial::Judgement;
    use uuid::Uuid;

    fn opened(name: &str) -> Trials {
        let mut t = Trials::default();
        t.opened(Micros(1), &fixtures::opened(name));
        t
    }

    #[test]
    fn names_are_opened_once_and_follow_only_known_trials() {
        let t = opened("a");
        assert_eq!(
            check_open(&t, "a", None),
            Err(TrialRefusal::Exists("a".into()))
        );
        assert_eq!(
            check_open(&t, "b", Some("zz")),
            Err(TrialRefusal::Unknown("zz".into()))
        );
        assert_eq!(check_open(&t, "b", Some("a")), Ok(()));
    }

    #[test]
    fn a_judged_trial_takes_no_workers_and_no_second_verdict() {
        let mut t = opened("a");
        assert!(check_join(&t, "a").is_ok());
        assert_eq!(
            check_join(&t, "nope").unwrap_err(),
            TrialRefusal::Unknown("nope".into())
        );
        t.trials.get_mut("a").unwrap().judgement = Some(Judgement {
            verdict: Verdict::Failed,
            reason: String::new(),
            at: Micros(2),
            evidence: Vec::new(),
        });
        assert!(matches!(
            check_join(&t, "a"),
            Err(TrialRefusal::Judged { .. })
        ));
        for v in [Verdict::Passed, Verdict::Failed] {
            assert!(matches!(
                check_verdict(&t.trials["a"], v, &[]),
                Err(TrialRefusal::Relabel {
                    verdict: "failed",
                    ..
                })
            ));
        }
    }

    #[test]
    fn a_pass_needs_workers_that_ended_completed_and_published() {
        let mut t = opened("a");
        assert_eq!(
            check_verdict(&t.trials["a"], Verdict::Passed, &[]),
            Err(TrialRefusal::NoWorkers("a".into()))
        );
        assert_eq!(check_verdict(&t.trials["a"], Verdict::Failed, &[]), Ok(()));
        t.joined(
            &TrialWorkerJoined {
                trial: "a".into(),
                submission_id: Uuid::from_u128(1),
            },
            "w".into(),
            None,
        );
        let good = evidence("released", Some("completed"), true);
        assert_eq!(evidence_problem(&good, true), None);
        let cases = [
            (
                evidence("running", Some("completed"), true),
                true,
                "not proven ended",
            ),
            (
                evidence("released", Some("payload_failed"), true),
                true,
                "ended payload_failed",
            ),
            (evidence("released", None, true), true, "without an outcome"),
            (
                evidence("released", Some("completed"), false),
                true,
                "published nothing",
            ),
            (good.clone(), false, "no longer verifies"),
        ];
        for (e, manifest_ok, why) in cases {
            let p = evidence_problem(&e, manifest_ok).expect(why);
            assert!(p.contains(why), "{p}");
            let refused = check_verdict(&t.trials["a"], Verdict::Passed, &[p]).unwrap_err();
            assert!(matches!(refused, TrialRefusal::NotProven { .. }));
            assert!(refused.to_string().contains(why), "{refused}");
        }
        assert_eq!(check_verdict(&t.trials["a"], Verdict::Passed, &[]), Ok(()));
    }
}
