//! Pure decisions: they take state, observations and time as arguments and return a verdict.

pub mod asset;
pub mod audit;
pub mod doctor;
pub mod forget;
pub mod holder;
pub mod journal_filter;
pub mod manifest;
pub mod node;
pub mod placement;
pub mod pool;
pub mod pool_create;
pub mod reconcile;
pub mod report;
pub mod session;
pub mod trial;

/// Fixtures the policy modules' tests share.
#[cfg(test)]
pub(crate) mod fixtures {
    use crate::event::pool::{Allocation, PoolAttached};
    use crate::event::Micros;

    /// Pool `pool` attached to job `job` on `node` with `cpus` CPUs and 1000 MB, for 1000 s.
    pub fn attached(pool: &str, job: u32, node: &str, cpus: u32) -> PoolAttached {
        PoolAttached {
            pool: pool.into(),
            allocation: Allocation {
                job_id: crate::event::test_job(job),
                node: node.into(),
                user: "u".into(),
                start_time: Micros(0),
                end_time: Micros(1_000_000_000),
                cpus,
                mem_mb: 1000,
                partition: "debug".into(),
                account: "dev".into(),
                qos: "normal".into(),
            },
        }
    }
}
