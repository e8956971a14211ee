//! Allocations dispatch makes (`pool create`) and cancels (`pool release`): what may be created
//! or released, and what Slurm's answers say about a creation's job. The rules are the ones
//! sessions and `dispatch submit` keep: intent before salloc, a job name unique to the
//! creation, found by that name after a lost answer, proven never created only after salloc's
//! limit plus the settle margin (`policy::reconcile::find_lost`), and a job over only with a
//! terminal state or "Invalid job id" (`policy::reconcile::job_seen`).

use crate::policy::pool::{Refusal, MIN_ATTACH_LIFETIME_S};
use crate::policy::reconcile::{job_seen, JobSeen};
use crate::slurm::{AcctRow, JobId, JobRow, JobState, Lookup};
use crate::state::pool::{Creation, Pools};

/// What a created allocation must have beyond the attach minimum: the time from salloc's grant
/// to the attach, and a worker's first minutes.
pub const CREATE_MARGIN_S: i64 = 60;

/// May `pool` be created with a time limit of `time_s`? `Some(creation)`: an earlier create of
/// this name may have made an allocation, which this one must adopt (or prove gone) first.
pub fn check_create<'p>(
    pools: &'p Pools,
    pool: &str,
    time_s: u64,
) -> Result<Option<&'p Creation>, Refusal> {
    if let Some(existing) = pools.pools.get(pool) {
        return Err(Refusal::PoolExists {
            pool: pool.to_owned(),
            job_id: existing.allocation.job_id,
        });
    }
    let need_s = MIN_ATTACH_LIFETIME_S + CREATE_MARGIN_S;
    if (time_s as i64) < need_s {
        return Err(Refusal::TimeLimitTooShort { time_s, need_s });
    }
    Ok(pools.creations.get(pool))
}

/// What `pool release` may do with `pool`.
#[derive(Debug, PartialEq, Eq)]
pub enum ReleasePlan<'p> {
    /// A created pool: stop its workers, cancel its allocation, prove it gone, forget it.
    Pool(&'p crate::state::pool::Pool),
    /// A creation that has no pool yet: cancel whatever job it made, prove it gone.
    Creation(&'p Creation),
}

pub fn check_release<'p>(pools: &'p Pools, pool: &str) -> Result<ReleasePlan<'p>, Refusal> {
    if let Some(p) = pools.pools.get(pool) {
        if p.created.is_none() {
            return Err(Refusal::AttachedNotCreated {
                pool: pool.to_owned(),
                job_id: p.allocation.job_id,
            });
        }
        return Ok(ReleasePlan::Pool(p));
    }
    pools
        .creations
        .get(pool)
        .map(ReleasePlan::Creation)
        .ok_or_else(|| Refusal::NoPool {
            pool: pool.to_owned(),
        })
}

/// What a creation's job is doing, from a by-id listing (and accounting, if asked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreationSeen {
    /// Running: attach it.
    Running,
    /// Not running yet (pending, configuring) or ending (completing): wait.
    Waiting { state: String, reason: String },
    /// Proven over: no allocation of this creation is left.
    Over(String),
    /// Nothing proves anything.
    Unknown,
}

pub fn seen_by_id(
    job: JobId,
    listed: &Lookup<'_, JobRow>,
    accounting: Option<&[AcctRow]>,
) -> CreationSeen {
    match job_seen(job, listed, accounting) {
        JobSeen::Over(proof) => CreationSeen::Over(proof),
        JobSeen::Unproven => CreationSeen::Unknown,
        JobSeen::Live => {
            let row = listed.live().expect("Live comes from a listed row");
            match row.state {
                JobState::Running => CreationSeen::Running,
                ref state => CreationSeen::Waiting {
                    state: state.to_string(),
                    reason: row.reason.clone(),
                },
            }
        }
    }
}

/// What a pending creation's request must change (a sentence) when Slurm's reason says it can never run: the
/// request is more than the partition's nodes hold, or past a per-job (or per-node) maximum of
/// the partition, QOS or association. Waiting never changes that (only an administrator
/// does), so `pool create` refuses at once instead of waiting out `--wait`. `None`: the job
/// may still run (Resources, Priority, `ReqNodeNotAvail, UnavailableNodes:…` for nodes down
/// or drained for now, `PartitionNodeLimit`, which Slurm also gives while the nodes a job
/// needs are down or drained, aggregate limits `AssocGrp*`/`QOSGrp*`, per-user or per-account
/// limits that the user's own jobs ending frees, holds, dependencies).
/// Slurm's reason codes: https://slurm.schedmd.com/job_reason_codes.html; 22.05 pends a
/// `--cpus` past every node with `PartitionConfig` where 24.11 refuses it at submission.
pub fn never_runs(state: &JobState, reason: &str) -> Option<&'static str> {
    if *state != JobState::Pending {
        return None;
    }
    let per_job_limit = (reason.starts_with("QOSMax") || reason.starts_with("AssocMax"))
        && (reason.contains("PerJob") || reason.contains("PerNode"));
    Some(match reason {
        "PartitionConfig" => {
            "No node of the partition has that much: ask for fewer --cpus, less --mem or \
             fewer --gpus-per-node, fewer --nodes, or another partition"
        }
        "PartitionTimeLimit" => {
            "--time is past the partition's time limit (`scontrol show partition` shows \
             MaxTime): ask for less --time, or another partition"
        }
        "BadConstraints" => {
            "Its constraints cannot be met (--nodelist, or what the request asks of a node): \
             name another node, or ask for less"
        }
        "InvalidAccount" | "InvalidQOS" | "AccountNotAllowed" | "QOSNotAllowed" => {
            "The account or QOS cannot be used here: choose another (--account, --qos, or \
             the target's in the config)"
        }
        _ if per_job_limit => {
            "It is past a per-job or per-node maximum of its QOS or association \
             (`sacctmgr show qos`, `sacctmgr show assoc` list them): ask for less, or use \
             another QOS or account"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 36 item 7: the reasons that mean a pending job can never run, and some that do
    /// not (it may run once resources, nodes or the user's other jobs free up).
    #[test]
    fn never_runs_only_on_reasons_waiting_cannot_change() {
        let pending = JobState::Pending;
        for reason in [
            "PartitionConfig",
            "PartitionTimeLimit",
            "QOSMaxCpuPerJobLimit",
            "QOSMaxMemoryPerJob",
            "QOSMaxWallDurationPerJobLimit",
            "QOSMaxGRESPerNode",
            "AssocMaxCpuPerJobLimit",
            "AssocMaxNodePerJobLimit",
            "BadConstraints",
            "InvalidAccount",
        ] {
            assert!(never_runs(&pending, reason).is_some(), "{reason}");
        }
        for reason in [
            "Resources",
            "Priority",
            "None",
            "ReqNodeNotAvail, UnavailableNodes:vm",
            "ReqNodeNotAvail",
            "AssocGrpCpuLimit",
            "QOSGrpNodeLimit",
            "QOSMaxJobsPerUserLimit",
            "QOSMaxCpuPerUserLimit",
            "MaxCpuPerAccount",
            "JobHeldUser",
            "Dependency",
            "BeginTime",
            "NodeDown",
            "PartitionNodeLimit",
            "",
        ] {
            assert_eq!(never_runs(&pending, reason), None, "{reason}");
        }
        assert_eq!(never_runs(&JobState::Running, "PartitionConfig"), None);
        let cpus = never_runs(&pending, "PartitionConfig").unwrap();
        assert!(cpus.contains("--cpus"), "{cpus}");
        let time = never_runs(&pending, "PartitionTimeLimit").unwrap();
        assert!(time.contains("--time"), "{time}");
    }
    use crate::event::pool::PoolOwned;
    use crate::event::Micros;
    use crate::policy::fixtures::{attached, create_intent};
    use crate::slurm::squeue::parse_jobs;
    use crate::slurm::{Answer, GoneProof, SlurmCommand};
    use uuid::Uuid;

    #[test]
    fn create_refuses_an_existing_pool_and_a_short_time_and_finds_its_earlier_creation() {
        let mut pools = Pools::default();
        assert!(matches!(
            check_create(&pools, "p", 179),
            Err(Refusal::TimeLimitTooShort { need_s: 180, .. })
        ));
        assert_eq!(check_create(&pools, "p", 180), Ok(None));
        pools.create_intent(Micros(5), &create_intent("p", 7));
        assert_eq!(
            check_create(&pools, "p", 600).unwrap().map(|c| c.since),
            Some(Micros(5))
        );
        pools.attach(Micros(1), &attached("q", 9, "vm", 8));
        assert!(matches!(
            check_create(&pools, "q", 600),
            Err(Refusal::PoolExists { job_id, .. }) if job_id.get() == 9
        ));
    }

    #[test]
    fn only_a_created_pool_or_a_creation_is_released() {
        let mut pools = Pools::default();
        assert!(matches!(
            check_release(&pools, "p"),
            Err(Refusal::NoPool { .. })
        ));
        pools.create_intent(Micros(5), &create_intent("p", 7));
        assert!(matches!(
            check_release(&pools, "p"),
            Ok(ReleasePlan::Creation(_))
        ));
        pools.attach(Micros(1), &attached("u", 3, "vm", 8));
        assert!(matches!(
            check_release(&pools, "u"),
            Err(Refusal::AttachedNotCreated { job_id, .. }) if job_id.get() == 3
        ));
        pools.attach(Micros(1), &attached("p", 4, "vm", 8));
        pools.owned(&PoolOwned {
            pool: "p".into(),
            creation_id: Uuid::from_u128(7),
            job_id: crate::event::test_job(4),
        });
        assert!(pools.creations.is_empty(), "the creation became the pool");
        assert!(matches!(
            check_release(&pools, "p"),
            Ok(ReleasePlan::Pool(p)) if p.created == Some(Uuid::from_u128(7))
        ));
    }

    #[test]
    fn a_creations_job_is_over_only_with_proof() {
        let job = JobId::new(900).unwrap();
        let rows = |state: &str, reason: &str| {
            parse_jobs(&format!(
                "900|900|{state}|debug|dev|normal|root|1|8||9:58|10:00|N/A|N/A|{reason}|n\n"
            ))
            .unwrap()
        };
        let pending = Answer::Live(rows("PENDING", "Resources"));
        assert_eq!(
            seen_by_id(job, &pending.job(job), None),
            CreationSeen::Waiting {
                state: "PENDING".into(),
                reason: "Resources".into()
            }
        );
        let running = Answer::Live(rows("RUNNING", "None"));
        assert_eq!(
            seen_by_id(job, &running.job(job), None),
            CreationSeen::Running
        );
        let cancelled = Answer::Live(rows("CANCELLED", "None"));
        assert!(matches!(
            seen_by_id(job, &cancelled.job(job), None),
            CreationSeen::Over(_)
        ));
        let empty: Answer<Vec<JobRow>> = Answer::Live(vec![]);
        assert_eq!(
            seen_by_id(job, &empty.job(job), None),
            CreationSeen::Unknown,
            "an empty answer proves nothing"
        );
        let gone: Answer<Vec<JobRow>> = Answer::Gone(GoneProof::InvalidJobId {
            command: SlurmCommand::Squeue,
            job,
        });
        assert!(matches!(
            seen_by_id(job, &gone.job(job), None),
            CreationSeen::Over(_)
        ));
    }
}
