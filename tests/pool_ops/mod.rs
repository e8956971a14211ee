//! Random pool histories for properties: commands and outcomes run through the policies as
//! `ops` would, so every journal they produce is one dispatch could have written. Shared by
//! `tests/pool_properties.rs` and `tests/replay_properties.rs`.
#![allow(dead_code)]

use dispatch::event::pool::*;
use dispatch::event::{Actor, Envelope, Event, Micros};
use dispatch::policy::pool::{self, AllocationFacts, Budgets, Nodes, WorkerAsk};
use dispatch::state::State;
use quickcheck::{Arbitrary, Gen};
use uuid::Uuid;

pub const NOW: i64 = 1_800_000_000;

#[derive(Clone, Debug)]
pub enum Op {
    Attach { pool: u8, cpus: u8, mem_gb: u8 },
    Submit { pool: u8, cpus: u8, mem_gb: u8 },
    Launched(u8),
    LaunchFailed { which: u8, definite: bool },
    StepObserved(u8),
    Stop(u8),
    Exited(u8),
    Terminal(u8),
    Detach(u8),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Op {
        let small = |g: &mut Gen| u8::arbitrary(g) % 4;
        match u8::arbitrary(g) % 9 {
            0 => Op::Attach {
                pool: small(g),
                cpus: 1 + u8::arbitrary(g) % 8,
                mem_gb: 1 + u8::arbitrary(g) % 16,
            },
            1 | 2 => Op::Submit {
                pool: small(g),
                cpus: 1 + u8::arbitrary(g) % 4,
                mem_gb: 1 + u8::arbitrary(g) % 6,
            },
            3 => Op::Launched(u8::arbitrary(g)),
            4 => Op::LaunchFailed {
                which: u8::arbitrary(g),
                definite: bool::arbitrary(g),
            },
            5 => Op::StepObserved(u8::arbitrary(g)),
            6 => Op::Stop(u8::arbitrary(g)),
            7 => Op::Exited(u8::arbitrary(g)),
            _ => {
                if bool::arbitrary(g) {
                    Op::Terminal(u8::arbitrary(g))
                } else {
                    Op::Detach(small(g))
                }
            }
        }
    }
}

fn facts(a: &Allocation) -> AllocationFacts {
    AllocationFacts {
        job_id: a.job_id,
        state: "RUNNING".into(),
        user: a.user.clone(),
        nodes: Nodes::One(a.node.clone()),
        start_time: Some(a.start_time),
        end_time: Some(a.end_time),
        cpus: a.cpus,
        mem_mb: a.mem_mb,
        partition: a.partition.clone(),
        account: a.account.clone(),
        qos: a.qos.clone(),
        comment: String::new(),
        shares: Vec::new(),
    }
}

/// Run ops through the policy (as `ops` would) and return the journal they produce.
pub fn journal_of(ops: &[Op]) -> Vec<Event> {
    let mut state = State::default();
    let mut events = Vec::new();
    let mut submissions: Vec<Uuid> = Vec::new();
    let mut next_job = 100u32;
    let push = |state: &mut State, events: &mut Vec<Event>, e: Event| {
        let env = envelope(events.len() as u64 + 1, e.clone());
        state.apply(&env).unwrap();
        events.push(e);
    };
    for (i, op) in ops.iter().enumerate() {
        let pick = |k: u8| {
            submissions
                .get(k as usize % submissions.len().max(1))
                .copied()
        };
        match *op {
            Op::Attach { pool, cpus, mem_gb } => {
                next_job += 1;
                let f = AllocationFacts {
                    job_id: dispatch::slurm::JobId::new(next_job).unwrap(),
                    state: "RUNNING".into(),
                    user: "ana".into(),
                    nodes: Nodes::One("vm".into()),
                    start_time: Some(Micros::from_secs(NOW - 10)),
                    end_time: Some(Micros::from_secs(NOW + 3600)),
                    cpus: cpus.into(),
                    mem_mb: u64::from(mem_gb) * 1024,
                    partition: "debug".into(),
                    account: "dev".into(),
                    qos: "normal".into(),
                    comment: String::new(),
                    shares: Vec::new(),
                };
                let name = format!("p{pool}");
                if let Ok(allocation) =
                    pool::check_attach(&state.pools, &name, &f, "ana", Micros::from_secs(NOW))
                {
                    push(
                        &mut state,
                        &mut events,
                        Event::PoolAttached(PoolAttached {
                            pool: name,
                            allocation,
                        }),
                    );
                }
            }
            Op::Submit { pool, cpus, mem_gb } => {
                let name = format!("p{pool}");
                let Some(p) = state.pools.pools.get(&name) else {
                    continue;
                };
                let ask = WorkerAsk {
                    journal: None,
                    name: format!("w{i}"),
                    cpus: cpus.into(),
                    mem_mb: u64::from(mem_gb) * 1024,
                    gpus: 0,
                    node: None,
                    budgets: Budgets::with_publication_timeout(30),
                };
                if pool::check_submit(
                    p,
                    &facts(&p.allocation),
                    &ask,
                    "ana",
                    Micros::from_secs(NOW),
                )
                .is_ok()
                {
                    let id = Uuid::from_u128(i as u128 + 1);
                    submissions.push(id);
                    push(
                        &mut state,
                        &mut events,
                        Event::WorkerSubmitIntent(WorkerSubmitIntent {
                            pool: name,
                            worker: ask.name,
                            submission_id: id,
                            cpus: ask.cpus,
                            mem_mb: ask.mem_mb,
                            publication_timeout_s: 30,
                            command: vec!["true".into()],
                        }),
                    );
                }
            }
            Op::Launched(k) => {
                if let Some(id) = pick(k) {
                    push(
                        &mut state,
                        &mut events,
                        Event::WorkerLaunched(WorkerLaunched {
                            submission_id: id,
                            srun_pid: 7,
                        }),
                    );
                }
            }
            Op::LaunchFailed { which, definite } => {
                if let Some(id) = pick(which) {
                    push(
                        &mut state,
                        &mut events,
                        Event::WorkerLaunchFailed(WorkerLaunchFailed {
                            submission_id: id,
                            definite,
                            reason: "x".into(),
                        }),
                    );
                }
            }
            Op::StepObserved(k) => {
                if let Some(id) = pick(k) {
                    push(
                        &mut state,
                        &mut events,
                        Event::WorkerStepObserved(WorkerStepObserved {
                            submission_id: id,
                            step_id: 3,
                        }),
                    );
                }
            }
            Op::Stop(k) => {
                if let Some(id) = pick(k) {
                    push(
                        &mut state,
                        &mut events,
                        Event::WorkerStopIntent(WorkerStopIntent {
                            submission_id: id,
                            grace_s: 5,
                        }),
                    );
                }
            }
            Op::Exited(k) => {
                if let Some(id) = pick(k) {
                    push(
                        &mut state,
                        &mut events,
                        Event::WorkerExited(WorkerExited {
                            submission_id: id,
                            code: Some(0),
                            signal: None,
                        }),
                    );
                }
            }
            Op::Terminal(k) => {
                if let Some(id) = pick(k) {
                    push(
                        &mut state,
                        &mut events,
                        Event::WorkerTerminal(WorkerTerminal {
                            submission_id: id,
                            proof: "sacct".into(),
                        }),
                    );
                }
            }
            Op::Detach(pool) => {
                let name = format!("p{pool}");
                if pool::check_detach(&state.pools, &name, &Default::default()).is_ok() {
                    push(
                        &mut state,
                        &mut events,
                        Event::PoolDetached(PoolDetached { pool: name }),
                    );
                }
            }
        }
    }
    events
}

pub fn envelope(seq: u64, event: Event) -> Envelope {
    Envelope {
        seq,
        time: Micros::from_secs(NOW),
        id: Uuid::from_u128(u128::from(seq)),
        actor: Actor {
            user: "ana".into(),
            host: "h".into(),
            pid: 1,
            command: vec![],
        },
        event,
    }
}
