//! Renewal of a created pool (`pool create --renew`): when its next allocation is asked for,
//! and when that allocation may become the pool's. Pure: the time is an argument.
//!
//! The next allocation is asked for [`RENEW_LEAD_S`] before the current one ends, or at once
//! when the current one is proven over (a preemption, all its nodes lost). Without
//! `--renew-overlap` it depends on the current one (`--dependency=afterany:<job>`), so Slurm
//! cannot run it beside the last: it is queued early and starts as soon as the last ends. It
//! becomes the pool's allocation only once it runs, the last one is proven over and every
//! worker of the last one is released with proof: a pool has one allocation at a time.

use crate::event::Micros;
use crate::policy::continuation::{cause_in, Cause};
use crate::slurm::JobId;
use crate::state::pool::{Pool, Worker, WorkerState};

/// How long before the current allocation's end the next one is asked for: twice the default
/// early-shutdown window (publication 30 s, native state 15 s, cleanup 15 s), so that a
/// `reconcile` run every minute asks at least once before the end with a minute to spare.
pub const RENEW_LEAD_S: i64 = 120;

/// How many next allocations in a row may fail definitely (refused, proven never made, ended
/// before they were the pool's) before renewal stops: each failure is asked again at the next
/// `reconcile`, and a cause that does not go away (a prolog that fails every job, an admin's
/// cancel of each) would otherwise be asked about without end. A renewal resets the count.
pub const FAILED_RENEWALS_STOP: u32 = 3;

/// What a renewing pool's renewal does now (no successor in flight).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// Not yet: when it will be.
    Later(Micros),
    /// Ask for allocation `generation`; `after`: the job it must not run beside.
    Ask {
        generation: u32,
        after: Option<JobId>,
    },
    /// A bound is reached: renewal stops, and why.
    Stop(String),
}

/// What pool `p`'s renewal does at `now`; `None`: it does not renew, its renewal stopped, it
/// is being released, or a successor is in flight.
pub fn due(p: &Pool, now: Micros) -> Option<Due> {
    let r = p.renewal.as_ref()?;
    if r.stopped.is_some() || p.releasing || r.successor.is_some() {
        return None;
    }
    if let Some(max) = r.asked.max_allocations {
        if r.generation >= max {
            return Some(Due::Stop(format!(
                "the pool had its {max} allocations (--renew-max {max})"
            )));
        }
    }
    if r.failed_in_row >= FAILED_RENEWALS_STOP {
        return Some(Due::Stop(format!(
            "the last {} next allocations in a row failed (the last: {})",
            r.failed_in_row,
            r.last_failure.as_deref().unwrap_or("no reason recorded")
        )));
    }
    let end = p.allocation.end_time;
    if let Some(until) = r.asked.until {
        if end.0 >= until.0 {
            return Some(Due::Stop(format!(
                "allocation {} ends at or after --renew-until {}",
                p.allocation.job_id,
                until.to_rfc3339()
            )));
        }
    }
    let from = Micros(end.0 - RENEW_LEAD_S * 1_000_000);
    let over = p.ended.is_some();
    if !over && now.0 < from.0 {
        return Some(Due::Later(from));
    }
    let after = (!over && !r.asked.overlap).then_some(p.allocation.job_id);
    Some(Due::Ask {
        generation: r.generation + 1,
        after,
    })
}

/// May the running successor of `p` become its allocation? The cause of the last one's end
/// and Slurm's proof of it, or why not yet.
pub fn may_adopt(p: &Pool) -> Result<(Cause, String), String> {
    let job = p.allocation.job_id;
    if p.releasing {
        return Err(format!("pool {} is being released", p.name));
    }
    if p.ended.is_none() {
        return Err(format!("allocation {job} is not proven over yet"));
    }
    if !p.active.is_empty() {
        return Err(format!(
            "{} worker(s) of allocation {job} are not released with proof yet",
            p.active.len()
        ));
    }
    Ok(end_cause(p).expect("its end is recorded"))
}

/// How `p`'s current allocation ended, once proven over, with the proof: the cause Slurm's
/// own words name; when they name none (`CANCELLED`, "Invalid job id", all its nodes lost),
/// the time limit if dispatch ended it early once every worker had stopped for that limit
/// (the proof names both its intent and Slurm's end), else `lost`.
pub fn end_cause(p: &Pool) -> Option<(Cause, String)> {
    let ended = p.ended.as_ref()?;
    let job = p.allocation.job_id;
    let ending = p
        .renewal
        .as_ref()
        .and_then(|r| r.ending.as_ref())
        .filter(|x| x.job_id == job);
    Some(match (cause_in(&ended.proof), ending) {
        (Some(cause), _) => (cause, ended.proof.clone()),
        (None, Some(x)) => (
            Cause::TimeLimit,
            format!(
                "dispatch ended allocation {job} early ({}); {}",
                x.reason, ended.proof
            ),
        ),
        (None, None) => (Cause::Lost, ended.proof.clone()),
    })
}

/// Why the allocation of a renewing pool may be ended early (`PoolAllocationEndIntent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndEarly {
    pub job_id: JobId,
    pub successor: JobId,
    pub reason: String,
}

/// What the last look at Slurm showed of a renewing pool, for [`may_end_early`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastLook {
    /// The next allocation's job, when it was listed pending or running.
    pub successor_live: Option<JobId>,
    /// The current allocation is in Slurm's preemption grace (`PreemptTime` shown).
    pub preempted: bool,
}

/// May `reconcile` end `p`'s current allocation itself, now, rather than leave it idle until
/// Slurm's time limit ends it? Only once its next allocation is asked for and recorded, and
/// the last look (`look`) lists it pending or running and the allocation outside Slurm's
/// preemption grace (a preempted allocation's end is Slurm's, and so is its cause: `preempted`,
/// never dispatch's cancel); the pool renews (not stopped,
/// not being released, dispatch's own); the allocation is not over nor already being ended;
/// at least one worker ended in it, and every worker ever placed there is released with proof
/// (none holds budget: no submission whose outcome is unknown, none running or stopping; none
/// forgotten, which is no proof). A `pool submit` after the intent is refused
/// (`policy::pool::Refusal::AllocationEnding`), so the decision, checked again under the
/// writer's lock, holds. With `--renew-overlap` the successor may already run: still fine.
pub fn may_end_early(p: &Pool, look: LastLook) -> Result<EndEarly, String> {
    let job = p.allocation.job_id;
    if look.preempted {
        return Err(format!(
            "allocation {job} is in Slurm's preemption grace: Slurm ends it, for its own cause"
        ));
    }
    let Some(r) = p.renewal.as_ref().filter(|_| p.created.is_some()) else {
        return Err(format!("pool {} does not renew", p.name));
    };
    if let Some(why) = &r.stopped {
        return Err(format!("its renewal stopped: {why}"));
    }
    if p.releasing {
        return Err(format!("pool {} is being released", p.name));
    }
    if p.ended.is_some() {
        return Err(format!("allocation {job} is over already"));
    }
    if r.ending.as_ref().is_some_and(|x| x.job_id == job) {
        return Err(format!("allocation {job} is being ended already"));
    }
    let Some(successor) = r.successor.as_ref().and_then(|s| s.job_id) else {
        return Err("its next allocation is not recorded yet".to_owned());
    };
    if look.successor_live != Some(successor) {
        return Err(format!(
            "allocation {successor} is not seen waiting or running"
        ));
    }
    if !p.active.is_empty() {
        return Err(format!(
            "{} worker(s) of allocation {job} are not released with proof yet",
            p.active.len()
        ));
    }
    let here: Vec<&Worker> = p.finished_in_this_allocation().collect();
    if here.is_empty() {
        return Err(format!("no worker ran in allocation {job}"));
    }
    if let Some(w) = here.iter().find(|w| w.state == WorkerState::Forgotten) {
        return Err(format!("worker {} was forgotten, not proven over", w.name));
    }
    Ok(EndEarly {
        job_id: job,
        successor,
        reason: format!(
            "its {} worker(s) are over, released with proof, and allocation {successor} waits \
             to follow it",
            here.len()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::pool::*;
    use crate::event::test_job;
    use crate::state::pool::tests::{attached, intent, renewal_intent};
    use crate::state::pool::Pools;
    use uuid::Uuid;

    const END_S: i64 = 1000;

    /// Pool `p` created with these bounds, on job 7 ending at [`END_S`].
    fn renewing(max: Option<u32>, until: Option<Micros>, overlap: bool) -> Pools {
        let id = Uuid::from_u128(1);
        let mut pools = Pools::default();
        pools.create_intent(Micros(0), &intent(1));
        pools.renew_asked(&PoolRenewalAsked {
            pool: "p".into(),
            creation_id: id,
            until,
            max_allocations: max,
            overlap,
        });
        let mut a = attached(7);
        a.allocation.end_time = Micros::from_secs(END_S);
        pools.attach(Micros(1), &a);
        pools.owned(&PoolOwned {
            pool: "p".into(),
            creation_id: id,
            job_id: test_job(7),
        });
        pools
    }

    fn end(pools: &mut Pools, proof: &str) {
        pools.allocation_ended(
            Micros(9),
            &PoolAllocationEnded {
                pool: "p".into(),
                job_id: test_job(7),
                proof: proof.into(),
            },
        );
    }

    #[test]
    fn the_next_allocation_is_due_before_the_end_after_it_and_at_once_after_a_proven_end() {
        let mut pools = renewing(None, None, false);
        let lead = Micros::from_secs(END_S - RENEW_LEAD_S);
        assert_eq!(due(&pools.pools["p"], Micros(0)), Some(Due::Later(lead)));
        let ask = Due::Ask {
            generation: 2,
            after: Some(test_job(7)),
        };
        assert_eq!(due(&pools.pools["p"], lead), Some(ask));
        // Preempted early: at once, and without a dependency on a job proven over.
        end(&mut pools, "squeue shows job 7 PREEMPTED");
        let now = Micros(0);
        assert_eq!(
            due(&pools.pools["p"], now),
            Some(Due::Ask {
                generation: 2,
                after: None
            })
        );
        let overlap = renewing(None, None, true);
        assert_eq!(
            due(&overlap.pools["p"], lead),
            Some(Due::Ask {
                generation: 2,
                after: None
            })
        );
    }

    #[test]
    fn bounds_stop_renewal_and_a_successor_in_flight_or_a_release_asks_nothing() {
        let at_max = renewing(Some(1), None, false);
        assert!(matches!(
            due(&at_max.pools["p"], Micros(0)),
            Some(Due::Stop(_))
        ));
        let until = renewing(None, Some(Micros::from_secs(END_S)), false);
        assert!(matches!(
            due(&until.pools["p"], Micros(0)),
            Some(Due::Stop(_))
        ));
        let mut pools = renewing(Some(3), Some(Micros::from_secs(END_S + 1)), false);
        pools.renewal_intent(
            Micros(2),
            &PoolRenewalIntent {
                pool: "p".into(),
                renewal_id: Uuid::from_u128(9),
                generation: 2,
                job_name: "x-pool-p-00000009".into(),
                salloc_limit_s: 40,
                previous_job_id: test_job(7),
                after: Some(test_job(7)),
            },
        );
        assert_eq!(due(&pools.pools["p"], Micros::from_secs(END_S)), None);
        let mut released = renewing(None, None, false);
        released.release_intent(&PoolReleaseIntent {
            pool: "p".into(),
            job_id: test_job(7),
        });
        assert_eq!(due(&released.pools["p"], Micros::from_secs(END_S)), None);
    }

    /// Pool `p`'s next allocation `id` asked for and then failed, definitely or not.
    fn failed(pools: &mut Pools, id: u128, definite: bool) {
        pools.renewal_intent(Micros(2), &renewal_intent(id, None));
        pools.renewal_failed(&PoolRenewalFailed {
            pool: "p".into(),
            renewal_id: Uuid::from_u128(id),
            definite,
            reason: format!("allocation {id} ended: FAILED"),
        });
    }

    #[test]
    fn renewal_stops_after_its_bound_of_definite_failures_in_a_row() {
        let mut pools = renewing(None, None, false);
        end(&mut pools, "squeue shows job 7 PREEMPTED");
        let ask = Some(Due::Ask {
            generation: 2,
            after: None,
        });
        for id in 1..u128::from(FAILED_RENEWALS_STOP) {
            failed(&mut pools, id, true);
            assert_eq!(due(&pools.pools["p"], Micros(0)), ask, "failure {id}");
        }
        // An unclear answer is no failure yet: its successor is still in flight.
        failed(&mut pools, 50, false);
        assert_eq!(due(&pools.pools["p"], Micros(0)), None);
        pools.renewal_failed(&PoolRenewalFailed {
            pool: "p".into(),
            renewal_id: Uuid::from_u128(50),
            definite: true,
            reason: "allocation 50 ended: FAILED".into(),
        });
        let Some(Due::Stop(why)) = due(&pools.pools["p"], Micros(0)) else {
            panic!("no stop after {FAILED_RENEWALS_STOP} failures");
        };
        assert!(
            why.contains(&format!("last {FAILED_RENEWALS_STOP} next"))
                && why.contains("allocation 50 ended: FAILED"),
            "{why}"
        );
        // A renewal between failures starts the count again.
        let mut pools = renewing(None, None, false);
        end(&mut pools, "squeue shows job 7 PREEMPTED");
        failed(&mut pools, 1, true);
        pools.renewal_intent(Micros(3), &renewal_intent(60, None));
        let mut a = attached(8);
        a.allocation.end_time = Micros::from_secs(END_S * 2);
        pools.renewed(&PoolRenewed {
            pool: "p".into(),
            renewal_id: Uuid::from_u128(60),
            generation: 2,
            allocation: a.allocation,
            previous_job_id: test_job(7),
            cause: "preempted".into(),
            proof: "squeue shows job 7 PREEMPTED".into(),
        });
        assert_eq!(pools.pools["p"].renewal.as_ref().unwrap().failed_in_row, 0);
    }

    #[test]
    fn a_successor_is_taken_only_once_the_last_allocation_is_proven_over() {
        let mut pools = renewing(None, None, false);
        assert!(may_adopt(&pools.pools["p"]).is_err());
        end(&mut pools, "squeue shows job 7 TIMEOUT");
        let (cause, proof) = may_adopt(&pools.pools["p"]).unwrap();
        assert_eq!(
            (cause, proof.as_str()),
            (Cause::TimeLimit, "squeue shows job 7 TIMEOUT")
        );
        let mut lost = renewing(None, None, false);
        end(&mut lost, "every node of job 7 is lost: vm");
        assert_eq!(may_adopt(&lost.pools["p"]).unwrap().0, Cause::Lost);
    }

    /// Pool `p` (job 7) with its next allocation job 8 recorded.
    fn with_successor() -> Pools {
        let mut pools = renewing(None, None, false);
        pools.renewal_intent(Micros(2), &renewal_intent(50, Some(test_job(7))));
        pools.renewal_job(&PoolRenewalJob {
            pool: "p".into(),
            renewal_id: Uuid::from_u128(50),
            job_id: test_job(8),
            how: "salloc".into(),
        });
        pools
    }

    /// [`with_successor`], with worker `id` submitted.
    fn with_successor_and_worker(id: u128) -> Pools {
        let mut pools = with_successor();
        submit(&mut pools, id);
        pools
    }

    /// Worker `w{id}` submitted to pool `p`.
    fn submit(pools: &mut Pools, id: u128) {
        pools.submit(
            Micros(3),
            &WorkerSubmitIntent {
                pool: "p".into(),
                worker: format!("w{id}"),
                submission_id: Uuid::from_u128(id),
                cpus: 1,
                mem_mb: 10,
                publication_timeout_s: 5,
                command: vec!["true".into()],
            },
        );
    }

    fn released(pools: &mut Pools, id: u128) {
        pools.terminal(&WorkerTerminal {
            submission_id: Uuid::from_u128(id),
            proof: "step 7.0 COMPLETED".into(),
        });
    }

    #[test]
    fn the_old_allocation_may_end_early_only_once_every_worker_of_it_is_over() {
        let live = LastLook {
            successor_live: Some(test_job(8)),
            preempted: false,
        };
        let seen = |job: Option<u32>| LastLook {
            successor_live: job.map(test_job),
            preempted: false,
        };
        // No worker ever: Slurm's time limit ends it, as before.
        let none = with_successor();
        assert!(may_end_early(&none.pools["p"], live).is_err());
        // A worker submitted (its outcome unknown) or running: not yet.
        let mut pools = with_successor_and_worker(1);
        let why = may_end_early(&pools.pools["p"], live).unwrap_err();
        assert!(why.contains("not released with proof"), "{why}");
        released(&mut pools, 1);
        let decided = may_end_early(&pools.pools["p"], live).unwrap();
        assert_eq!(
            (decided.job_id, decided.successor),
            (test_job(7), test_job(8))
        );
        // Not seen in Slurm's last look, or another job: not yet.
        assert!(may_end_early(&pools.pools["p"], seen(None)).is_err());
        assert!(may_end_early(&pools.pools["p"], seen(Some(9))).is_err());
        // In Slurm's preemption grace: Slurm ends it, as preempted.
        let grace = LastLook {
            preempted: true,
            ..live
        };
        let why = may_end_early(&pools.pools["p"], grace).unwrap_err();
        assert!(why.contains("preemption grace"), "{why}");
        // Being released, stopped, already ending, or over: no.
        let mut releasing = pools.clone();
        releasing.release_intent(&PoolReleaseIntent {
            pool: "p".into(),
            job_id: test_job(7),
        });
        assert!(may_end_early(&releasing.pools["p"], live).is_err());
        let mut ending = pools.clone();
        ending.end_intent(
            Micros(4),
            &PoolAllocationEndIntent {
                pool: "p".into(),
                job_id: test_job(7),
                reason: decided.reason.clone(),
            },
        );
        assert!(may_end_early(&ending.pools["p"], live).is_err());
        let mut over = pools.clone();
        end(&mut over, "squeue shows job 7 TIMEOUT");
        assert!(may_end_early(&over.pools["p"], live).is_err());
        // A forgotten worker was never proven over.
        let mut forgotten = with_successor_and_worker(2);
        forgotten.forgotten(&Uuid::from_u128(2));
        assert!(may_end_early(&forgotten.pools["p"], live).is_err());
        // With --renew-overlap the successor may run already: still fine.
        let mut overlap = renewing(None, None, true);
        overlap.renewal_intent(Micros(2), &renewal_intent(50, None));
        overlap.renewal_job(&PoolRenewalJob {
            pool: "p".into(),
            renewal_id: Uuid::from_u128(50),
            job_id: test_job(8),
            how: "salloc".into(),
        });
        submit(&mut overlap, 3);
        released(&mut overlap, 3);
        assert!(may_end_early(&overlap.pools["p"], live).is_ok());
    }

    /// The renewal after dispatch's own end: `time-limit`, the proof naming the intent and
    /// Slurm's CANCELLED; Slurm's own cause, when its proof names one, stands.
    #[test]
    fn an_end_dispatch_asked_for_is_the_time_limit_not_a_loss() {
        let mut pools = with_successor_and_worker(1);
        released(&mut pools, 1);
        pools.end_intent(
            Micros(4),
            &PoolAllocationEndIntent {
                pool: "p".into(),
                job_id: test_job(7),
                reason: "all over".into(),
            },
        );
        let mut cancelled = pools.clone();
        end(&mut cancelled, "squeue shows job 7 CANCELLED");
        let (cause, proof) = may_adopt(&cancelled.pools["p"]).unwrap();
        assert_eq!(cause, Cause::TimeLimit);
        assert_eq!(
            proof,
            "dispatch ended allocation 7 early (all over); squeue shows job 7 CANCELLED"
        );
        let mut preempted = pools.clone();
        end(&mut preempted, "squeue shows job 7 PREEMPTED");
        assert_eq!(
            may_adopt(&preempted.pools["p"]).unwrap().0,
            Cause::Preempted
        );
        // Without dispatch's intent a CANCELLED is someone else's: lost.
        let mut other = with_successor_and_worker(1);
        released(&mut other, 1);
        end(&mut other, "squeue shows job 7 CANCELLED");
        assert_eq!(may_adopt(&other.pools["p"]).unwrap().0, Cause::Lost);
        // The early end survives a snapshot, and a renewal without one reads back as before.
        let bytes = rmp_serde::to_vec(&cancelled).unwrap();
        assert_eq!(rmp_serde::from_slice::<Pools>(&bytes).unwrap(), cancelled);
        let bytes = rmp_serde::to_vec(&other).unwrap();
        assert_eq!(rmp_serde::from_slice::<Pools>(&bytes).unwrap(), other);
    }

    /// Worker `id`'s next step, by `op`: launched, seen running, exited, released with proof,
    /// a definite or unclear launch failure, forgotten. What a model of it says afterwards:
    /// whether it still holds budget, and whether it was ended without proof.
    fn step_worker(pools: &mut Pools, id: u128, op: u8) {
        let submission_id = Uuid::from_u128(id);
        match op % 7 {
            0 => pools.launched(
                &WorkerLaunched {
                    submission_id,
                    srun_pid: 1,
                },
                "h",
            ),
            1 => pools.step_observed(&WorkerStepObserved {
                submission_id,
                step_id: 0,
            }),
            2 => pools.exited(&WorkerExited {
                submission_id,
                code: Some(0),
                signal: None,
            }),
            3 => released(pools, id),
            4 | 5 => pools.launch_failed(&WorkerLaunchFailed {
                submission_id,
                definite: op % 7 == 4,
                reason: "srun said no".into(),
            }),
            _ => pools.forgotten(&submission_id),
        }
    }

    quickcheck::quickcheck! {
        /// Whatever happens to the workers of the allocation, it may end early exactly when at
        /// least one was submitted, each ended with proof (a release or a definite launch
        /// failure) and none was forgotten: an unclear launch, a running or an exited worker
        /// keeps it.
        fn prop_an_early_end_needs_every_worker_over_with_proof(ops: Vec<(u8, u8)>) -> bool {
            let mut pools = with_successor_and_worker(0);
            let look = LastLook { successor_live: Some(test_job(8)), preempted: false };
            // The model: each submission's last word (None: holds budget).
            let mut last: Vec<Option<bool>> = vec![None];
            for &(who, op) in ops.iter().take(30) {
                let id = usize::from(who % 4);
                if id >= last.len() {
                    submit(&mut pools, last.len() as u128);
                    last.push(None);
                    continue;
                }
                if last[id].is_some() {
                    continue;
                }
                step_worker(&mut pools, id as u128, op);
                last[id] = match op % 7 {
                    3 | 4 => Some(true),
                    6 => Some(false),
                    _ => None,
                };
            }
            let expected = last.iter().all(|l| *l == Some(true));
            may_end_early(&pools.pools["p"], look).is_ok() == expected
        }
    }
}
