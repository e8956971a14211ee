//! May an operator give up on a worker or a session (`dispatch forget`), and what the decision
//! records. Pure. Forgetting is for what no proof can settle any more (the controller lost its
//! accounting, the cluster was rebuilt); it is recorded as a decision, never as proof.

use crate::event::overrides::{SessionForgotten, WorkerForgotten};
use crate::event::session::SessionKey;
use crate::next::Next::{self, Audit, Sessions};
use crate::slurm::JobId;
use crate::state::State;

/// The longest reason kept (as a trial's note).
pub const MAX_REASON_BYTES: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForgetRefusal {
    #[error(
        "no worker {0:?} holds budget: nothing to forget. {inspect} shows what happened to it",
        inspect = Next::Inspect(_0)
    )]
    NothingHeld(String),
    #[error(
        "{count} workers holding budget are named {name:?}; forget one by its submission id \
         ({ids})"
    )]
    Ambiguous {
        name: String,
        count: usize,
        ids: String,
    },
    #[error(
        "the record holds nothing for session {0}: nothing to forget. {Sessions} lists the \
         jobs Slurm knows"
    )]
    NoSession(SessionKey),
}

/// A usage error in an operator's reason (`flag`: `--reason`, `--steal`), or `None`.
pub fn reason_problem(flag: &str, reason: &str) -> Option<String> {
    if reason.trim().is_empty() {
        Some(format!(
            "{flag} must say why (it is kept in the journal and shown by {Audit})"
        ))
    } else if reason.len() > MAX_REASON_BYTES {
        Some(format!(
            "{flag} is {} bytes; at most {MAX_REASON_BYTES} are kept",
            reason.len()
        ))
    } else {
        None
    }
}

/// The decision to forget the worker named `key` (a name or a submission id) that holds budget.
pub fn plan_worker(
    state: &State,
    key: &str,
    reason: &str,
) -> Result<WorkerForgotten, ForgetRefusal> {
    let is = |name: &str, id: &uuid::Uuid| name == key || id.to_string() == key;
    let mut found: Vec<WorkerForgotten> = Vec::new();
    for pool in state.pools.pools.values() {
        for w in pool
            .active
            .values()
            .filter(|w| is(&w.name, &w.submission_id))
        {
            found.push(WorkerForgotten {
                submission_id: w.submission_id,
                worker: w.name.clone(),
                state: w.state.as_str().to_owned(),
                job_id: Some(pool.allocation.job_id),
                step_id: w.step_id,
                reason: reason.to_owned(),
            });
        }
    }
    for j in state
        .jobs
        .active
        .values()
        .filter(|j| is(&j.worker, &j.submission_id))
    {
        found.push(WorkerForgotten {
            submission_id: j.submission_id,
            worker: j.worker.clone(),
            state: j.state.as_str().to_owned(),
            job_id: j.job_id,
            step_id: None,
            reason: reason.to_owned(),
        });
    }
    match found.len() {
        0 => Err(ForgetRefusal::NothingHeld(key.to_owned())),
        1 => Ok(found.remove(0)),
        count => Err(ForgetRefusal::Ambiguous {
            name: key.to_owned(),
            count,
            ids: found
                .iter()
                .map(|f| f.submission_id.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// The decision to drop the record of `key`, which holds a job, a submission, a replaced job
/// or a cancel in flight.
pub fn plan_session(
    state: &State,
    key: &SessionKey,
    reason: &str,
) -> Result<SessionForgotten, ForgetRefusal> {
    let s = state
        .sessions
        .get(key)
        .ok_or_else(|| ForgetRefusal::NoSession(key.clone()))?;
    Ok(SessionForgotten {
        session: key.clone(),
        job_id: s.job_id().or(s.replaced).or(s.cancelling),
        submission_id: s.submission.as_ref().map(|sub| sub.submission_id),
        reason: reason.to_owned(),
    })
}

/// What the person should do about a job that may still run once dispatch stops tracking it.
pub fn leftover_hint(job_id: Option<JobId>, step_id: Option<u32>) -> Option<String> {
    let target = match (job_id, step_id) {
        (Some(j), Some(s)) => format!("{j}.{s}"),
        (Some(j), None) => j.to_string(),
        (None, _) => return None,
    };
    Some(format!(
        "if {target} still runs, `scancel {target}` stops it"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::jobs::{JobSubmitIntent, JobSubmitted};
    use crate::event::{test_envelope, Event};
    use uuid::Uuid;

    fn job_intent(id: u128, worker: &str) -> Event {
        Event::JobSubmitIntent(JobSubmitIntent {
            submission_id: Uuid::from_u128(id),
            worker: worker.into(),
            target: None,
            cpus: 1,
            mem_mb: 10,
            time_s: 60,
            publication_timeout_s: 30,
            command: vec!["true".into()],
        })
    }

    fn state_of(events: Vec<Event>) -> State {
        let mut s = State::default();
        for (i, e) in events.into_iter().enumerate() {
            s.apply(&test_envelope(i as u64 + 1, e)).unwrap();
        }
        s
    }

    #[test]
    fn only_what_holds_budget_can_be_forgotten_and_a_name_must_be_unique() {
        let s = state_of(vec![
            job_intent(1, "w"),
            Event::JobSubmitted(JobSubmitted {
                submission_id: Uuid::from_u128(1),
                job_id: crate::event::test_job(42),
                how: "sbatch".into(),
            }),
            job_intent(2, "x"),
            job_intent(3, "x"),
        ]);
        let f = plan_worker(&s, "w", "cluster rebuilt").unwrap();
        assert_eq!(
            (f.job_id, f.state.as_str()),
            (Some(crate::event::test_job(42)), "queued")
        );
        assert_eq!(
            plan_worker(&s, &Uuid::from_u128(1).to_string(), "r")
                .unwrap()
                .worker,
            "w"
        );
        assert!(matches!(
            plan_worker(&s, "x", "r"),
            Err(ForgetRefusal::Ambiguous { count: 2, .. })
        ));
        assert!(matches!(
            plan_worker(&s, "nope", "r"),
            Err(ForgetRefusal::NothingHeld(_))
        ));

        // Forgotten: released by the decision, and not again.
        let mut s = s;
        s.apply(&test_envelope(5, Event::WorkerForgotten(f)))
            .unwrap();
        assert!(!s.jobs.active.contains_key(&Uuid::from_u128(1)));
        assert_eq!(s.jobs.finished.back().unwrap().state.as_str(), "forgotten");
        assert!(matches!(
            plan_worker(&s, "w", "r"),
            Err(ForgetRefusal::NothingHeld(_))
        ));
    }

    #[test]
    fn a_reason_is_required_and_bounded() {
        assert!(reason_problem("--reason", "").is_some());
        assert!(reason_problem("--reason", "  ").is_some());
        assert!(reason_problem("--reason", &"x".repeat(MAX_REASON_BYTES + 1)).is_some());
        assert!(reason_problem("--reason", "accounting lost after the rebuild").is_none());
    }
}
