//! Reconciliation verdicts: what Slurm's answers prove about each worker. Pure.

use crate::state::pool::Worker;

/// What one pool's queries said. `None` means the query failed: it proves nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolObservation {
    /// The allocation is proven over (and how), from squeue or sacct.
    pub allocation_over: Option<String>,
    /// Running steps (number, name) from a successful step listing.
    pub steps: Option<Vec<(u32, String)>>,
    /// Steps in accounting (number, name, state word, terminal?).
    pub accounting: Option<Vec<AcctStep>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcctStep {
    pub step: u32,
    pub name: String,
    pub state: String,
    pub terminal: bool,
}

/// What the worker's own journal said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerObservation {
    /// The step id the supervisor ran in: proof that the step existed.
    pub step_from_supervisor: Option<u32>,
    pub payload_exited: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// A step id to record (newly learned).
    pub observe_step: Option<u32>,
    /// Proof that the worker's step is over: releases its budget.
    pub terminal: Option<String>,
    /// The step is in a successful listing right now: nothing more to look up.
    pub running: bool,
}

/// Decide what the observations prove about `worker`, whose step is named `step_name`.
pub fn verdict(
    worker: &Worker,
    step_name: &str,
    pool: &PoolObservation,
    own: &WorkerObservation,
) -> Verdict {
    debug_assert!(worker.state.holds_budget());
    let mut v = Verdict::default();
    if let Some(how) = &pool.allocation_over {
        v.terminal = Some(format!(
            "the allocation is over ({how}), so every step in it is"
        ));
        return v;
    }
    let listed_by_name = pool
        .steps
        .as_ref()
        .and_then(|rows| rows.iter().find(|(_, n)| n == step_name).map(|(s, _)| *s));
    let acct_by_name = pool.accounting.as_ref().and_then(|rows| {
        rows.iter()
            .filter(|r| r.name == step_name)
            .max_by_key(|r| r.step)
    });
    // A step is known to have existed if we recorded it or the supervisor ran in it.
    let existed = worker.step_id.or(own.step_from_supervisor);
    let step = existed.or(listed_by_name).or(acct_by_name.map(|r| r.step));
    let Some(step) = step else {
        return v;
    };
    if worker.step_id != Some(step) {
        v.observe_step = Some(step);
    }
    if let Some(rows) = &pool.steps {
        let running = rows.iter().any(|(s, _)| *s == step);
        if !running && existed == Some(step) {
            v.terminal = Some(format!(
                "step {step} was seen and is absent from a successful step listing"
            ));
            return v;
        }
        if running {
            v.running = true;
            return v;
        }
    }
    if let Some(row) = pool
        .accounting
        .as_ref()
        .and_then(|rows| rows.iter().find(|r| r.step == step))
    {
        if row.terminal {
            v.terminal = Some(format!("accounting shows step {step} {}", row.state));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Micros;
    use crate::state::pool::WorkerState;
    use uuid::Uuid;

    fn worker(step: Option<u32>) -> Worker {
        Worker {
            name: "w".into(),
            submission_id: Uuid::nil(),
            state: WorkerState::Running,
            cpus: 1,
            mem_mb: 100,
            step_id: step,
            exit_code: None,
            exit_signal: None,
            submitted_at: Micros(0),
        }
    }

    fn listing(rows: &[(u32, &str)]) -> Option<Vec<(u32, String)>> {
        Some(rows.iter().map(|(s, n)| (*s, n.to_string())).collect())
    }

    #[test]
    fn a_failed_query_proves_nothing() {
        let v = verdict(
            &worker(Some(3)),
            "p.w",
            &PoolObservation::default(),
            &WorkerObservation::default(),
        );
        assert_eq!(v, Verdict::default());
    }

    #[test]
    fn absence_proves_only_for_a_step_that_existed() {
        let obs = PoolObservation {
            steps: listing(&[(1, "p.other")]),
            ..Default::default()
        };
        let seen = verdict(&worker(Some(3)), "p.w", &obs, &WorkerObservation::default());
        assert!(seen.terminal.is_some());
        let never_seen = verdict(&worker(None), "p.w", &obs, &WorkerObservation::default());
        assert_eq!(
            never_seen,
            Verdict::default(),
            "a step not created yet is not over"
        );
        let supervised = verdict(
            &worker(None),
            "p.w",
            &obs,
            &WorkerObservation {
                step_from_supervisor: Some(4),
                payload_exited: true,
            },
        );
        assert_eq!(supervised.observe_step, Some(4));
        assert!(supervised.terminal.is_some());
    }

    #[test]
    fn a_listed_step_is_observed_and_running() {
        let obs = PoolObservation {
            steps: listing(&[(5, "p.w")]),
            ..Default::default()
        };
        let v = verdict(&worker(None), "p.w", &obs, &WorkerObservation::default());
        assert_eq!(
            v,
            Verdict {
                observe_step: Some(5),
                terminal: None,
                running: true
            }
        );
    }

    #[test]
    fn accounting_proves_a_terminal_state() {
        let acct = |terminal| PoolObservation {
            steps: None,
            accounting: Some(vec![AcctStep {
                step: 2,
                name: "p.w".into(),
                state: "CANCELLED".into(),
                terminal,
            }]),
            ..Default::default()
        };
        assert!(verdict(
            &worker(None),
            "p.w",
            &acct(true),
            &WorkerObservation::default()
        )
        .terminal
        .is_some());
        let running = verdict(
            &worker(None),
            "p.w",
            &acct(false),
            &WorkerObservation::default(),
        );
        assert_eq!(
            running,
            Verdict {
                observe_step: Some(2),
                terminal: None,
                running: false
            }
        );
    }

    #[test]
    fn the_end_of_the_allocation_ends_every_step() {
        let obs = PoolObservation {
            allocation_over: Some("sacct: COMPLETED".into()),
            ..Default::default()
        };
        assert!(
            verdict(&worker(None), "p.w", &obs, &WorkerObservation::default())
                .terminal
                .is_some()
        );
    }
}
