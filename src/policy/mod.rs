//! Pure decisions: they take state, observations and time as arguments and return a verdict.

pub mod asset;
pub mod audit;
pub mod continuation;
pub mod doctor;
pub mod forget;
pub mod holder;
pub mod journal_filter;
pub mod lineage;
pub mod manifest;
pub mod node;
pub mod placement;
pub mod pool;
pub mod pool_create;
pub mod reconcile;
pub mod renewal;
pub mod report;
pub mod session;
pub mod trial;

/// Fixtures the policy modules' tests share.
#[cfg(test)]
pub(crate) mod fixtures {
    use crate::event::pool::{
        Allocation, PoolAttached, PoolCreateIntent, WorkerRequest, WorkerSubmitIntent,
    };
    use crate::event::trial::{TrialEvidence, TrialOpened};
    use crate::event::{test_envelope, Envelope, Event, Micros, Sha256Digest};
    use crate::slurm::JobRow;
    use uuid::Uuid;

    /// squeue's rows for jobs (id, state, name) of user `u` on node `n`.
    pub fn job_rows(rows: &[(u32, &str, &str)]) -> Vec<JobRow> {
        rows.iter()
            .flat_map(|(id, state, name)| {
                crate::slurm::squeue::parse_jobs(&format!(
                    "{id}|{id}|{state}|p|a|q|u|1|1|n|9:58|10:00|N/A|N/A|None|{name}\n"
                ))
                .unwrap()
            })
            .collect()
    }

    /// `events` in envelopes, numbered from seq 1.
    pub fn envelopes(events: impl IntoIterator<Item = Event>) -> Vec<Envelope> {
        (1..)
            .zip(events)
            .map(|(seq, e)| test_envelope(seq, e))
            .collect()
    }

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

    /// The intent of `pool create` `creation` for pool `pool` (8 CPUs, 8000 MB, 30 minutes).
    pub fn create_intent(pool: &str, creation: u128) -> PoolCreateIntent {
        PoolCreateIntent {
            pool: pool.into(),
            creation_id: Uuid::from_u128(creation),
            job_name: format!("dispatch-pool-{pool}-{creation:08x}"),
            salloc_limit_s: 632,
            cpus: 8,
            mem_mb: 8000,
            time_s: 1800,
            partition: None,
            account: None,
            qos: None,
            nodelist: Some("vm".into()),
        }
    }

    /// Worker `worker`'s intent in pool `pool` (1 CPU, 100 MB, no command).
    pub fn intent(pool: &str, worker: &str, id: Uuid) -> WorkerSubmitIntent {
        WorkerSubmitIntent {
            pool: pool.into(),
            worker: worker.into(),
            submission_id: id,
            cpus: 1,
            mem_mb: 100,
            publication_timeout_s: 30,
            command: vec![],
        }
    }

    /// The request kept of pool worker `id` (command `true`, no GPU, default budgets), with
    /// `resubmits` resubmissions left after a node failure.
    pub fn worker_request(id: Uuid, resubmits: u32) -> WorkerRequest {
        WorkerRequest {
            submission_id: id,
            resubmits_left: resubmits,
            command: vec!["true".into()],
            gpus: 0,
            publication_timeout_s: 30,
            native_state_s: 15,
            cleanup_s: 15,
            grace_s: 5,
            source: None,
            image: None,
            append_only_glob: None,
            trial: None,
        }
    }

    /// Trial `trial` opened with no pin, no predecessor and no note.
    pub fn opened(trial: &str) -> TrialOpened {
        TrialOpened {
            trial: trial.into(),
            pin: None,
            follows: None,
            note: String::new(),
        }
    }

    /// The evidence of worker `w` (submission 1): its `state` and `outcome`, and whether it
    /// published (in `/p`).
    pub fn evidence(state: &str, outcome: Option<&str>, published: bool) -> TrialEvidence {
        TrialEvidence {
            submission_id: Uuid::from_u128(1),
            worker: "w".into(),
            state: state.into(),
            outcome: outcome.map(Into::into),
            published_dir: published.then(|| "/p".into()),
            manifest_sha256: published.then_some(Sha256Digest([0; 32])),
        }
    }
}
