//! A synthetic pool journal and matching fake-Slurm answers, shared by
//! `tests/reconcile_calls.rs` and `benches/pool.rs` (which includes this file by path).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use dispatch::event::pool::*;
use dispatch::event::{Event, Micros};
use dispatch::journal::{Options, Writer};
use uuid::Uuid;

pub const JOB: u32 = 900;

pub fn fake_bin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/fake-slurm/bin")
}

/// Pool `p` on job [`JOB`] with workers `w0..w{n-1}`, each launched; worker i was seen in
/// step i when `seen(i)`.
pub fn write_pool_journal(state: &Path, n: u32, seen: impl Fn(u32) -> bool) {
    let w = Writer::open(&state.join("journal"), Options::default()).unwrap();
    let mut events = vec![Event::PoolAttached(PoolAttached {
        pool: "p".into(),
        allocation: allocation("vm", 1024, 1 << 20),
    })];
    for i in 0..n {
        let id = Uuid::from_u128(u128::from(i) + 1);
        events.push(submitted(id, format!("w{i}")));
        events.push(Event::WorkerLaunched(WorkerLaunched {
            submission_id: id,
            srun_pid: 1,
        }));
        if seen(i) {
            events.push(Event::WorkerStepObserved(WorkerStepObserved {
                submission_id: id,
                step_id: i,
            }));
        }
    }
    w.append(events).unwrap();
}

/// Worker `worker` of pool `p` submitted as `id`: 1 CPU, 10 MB, `true`.
pub fn submitted(id: Uuid, worker: String) -> Event {
    Event::WorkerSubmitIntent(WorkerSubmitIntent {
        pool: "p".into(),
        worker,
        submission_id: id,
        cpus: 1,
        mem_mb: 10,
        publication_timeout_s: 30,
        command: vec!["true".into()],
    })
}

/// Job [`JOB`] of root's on `nodes`, started a minute ago, an hour to go.
pub fn allocation(nodes: &str, cpus: u32, mem_mb: u64) -> Allocation {
    let now = Micros::now().secs();
    Allocation {
        job_id: dispatch::slurm::JobId::new(JOB).unwrap(),
        node: nodes.into(),
        user: "root".into(),
        start_time: Micros::from_secs(now - 60),
        end_time: Micros::from_secs(now + 3600),
        cpus,
        mem_mb,
        partition: "debug".into(),
        account: "dev".into(),
        qos: "normal".into(),
    }
}

/// The allocation as `squeue --jobs` prints it (the driver's job format).
pub fn job_row() -> String {
    format!("{JOB}|{JOB}|RUNNING|debug|dev|normal|root|1|8|vm|59:00|1:00:00|2026-11-29T17:00:00|2026-11-29T18:00:00|None|alloc\n")
}

/// Running steps named after their workers, as `squeue --steps` prints them.
pub fn step_rows(steps: impl Iterator<Item = u32>) -> String {
    steps
        .map(|i| format!("{JOB}.{i}|root|0:10|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w{i}\n"))
        .collect()
}
