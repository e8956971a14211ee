//! Reducer properties for pools: for any sequence of commands and outcomes, reservations stay
//! within capacity, only proof releases budget, and replay is deterministic.

use dispatch::event::{Actor, Envelope, Event, Micros};
use dispatch::policy::pool::{self, AllocationFacts, Budgets, Nodes, WorkerAsk};
use dispatch::state::pool::*;
use dispatch::state::State;
use quickcheck::{Arbitrary, Gen, QuickCheck};
use uuid::Uuid;

const NOW: i64 = 1_800_000_000;

#[derive(Clone, Debug)]
enum Op {
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
    }
}

/// Run ops through the policy (as `ops` would) and return the journal they produce.
fn journal_of(ops: &[Op]) -> Vec<Event> {
    let mut state = State::default();
    let mut events = Vec::new();
    let mut submissions: Vec<Uuid> = Vec::new();
    let mut next_job = 100u64;
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
                    job_id: next_job,
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
                    name: format!("w{i}"),
                    cpus: cpus.into(),
                    mem_mb: u64::from(mem_gb) * 1024,
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
                if pool::check_detach(&state.pools, &name).is_ok() {
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

fn envelope(seq: u64, event: Event) -> Envelope {
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

fn fold(events: &[Event]) -> State {
    let mut s = State::default();
    for (i, e) in events.iter().enumerate() {
        s.apply(&envelope(i as u64 + 1, e.clone())).unwrap();
    }
    s
}

#[test]
fn reservations_never_exceed_capacity() {
    fn prop(ops: Vec<Op>) -> bool {
        let events = journal_of(&ops);
        (1..=events.len()).all(|n| {
            let s = fold(&events[..n]);
            s.pools.pools.values().all(|p| {
                let (cpus, mem) = p.reserved();
                cpus <= u64::from(p.allocation.cpus) && mem <= p.allocation.mem_mb
            })
        })
    }
    QuickCheck::new()
        .tests(300)
        .quickcheck(prop as fn(Vec<Op>) -> bool);
}

#[test]
fn only_proof_releases_budget() {
    fn prop(ops: Vec<Op>) -> bool {
        let events = journal_of(&ops);
        let s = fold(&events);
        events.iter().all(|e| {
            let Event::WorkerSubmitIntent(intent) = e else {
                return true;
            };
            let id = intent.submission_id;
            let proven = events.iter().any(|e| match e {
                Event::WorkerTerminal(t) => t.submission_id == id,
                Event::WorkerLaunchFailed(f) => f.submission_id == id && f.definite,
                _ => false,
            });
            let holds = s.pools.pools.values().any(|p| p.active.contains_key(&id));
            // Detach is refused while a worker holds budget, so an unproven worker's pool is still there.
            holds != proven
        })
    }
    QuickCheck::new()
        .tests(300)
        .quickcheck(prop as fn(Vec<Op>) -> bool);
}

#[test]
fn replay_is_deterministic() {
    fn prop(ops: Vec<Op>) -> bool {
        let events = journal_of(&ops);
        fold(&events) == fold(&events)
    }
    QuickCheck::new()
        .tests(200)
        .quickcheck(prop as fn(Vec<Op>) -> bool);
}

#[test]
fn the_journal_replays_to_the_same_state_from_disk() {
    let ops: Vec<Op> = (0..40u8)
        .map(|i| match i % 5 {
            0 => Op::Attach {
                pool: i % 3,
                cpus: 8,
                mem_gb: 16,
            },
            1 | 2 => Op::Submit {
                pool: i % 3,
                cpus: 2,
                mem_gb: 2,
            },
            3 => Op::Launched(i),
            _ => Op::Terminal(i / 2),
        })
        .collect();
    let events = journal_of(&ops);
    assert!(events.len() > 10);
    let dir = tempfile::tempdir().unwrap();
    let w = dispatch::journal::Writer::open(dir.path(), Default::default()).unwrap();
    w.append(events.clone()).unwrap();
    drop(w);
    let loaded = dispatch::journal::load(dir.path()).unwrap();
    // The on-disk journal starts with Genesis; fold the same events after it.
    let mut expected = State::default();
    let mut all = vec![Event::Genesis(dispatch::event::Genesis {
        journal_id: loaded.state.journal_id.unwrap(),
        format_version: 1,
    })];
    all.extend(events);
    for (i, e) in all.into_iter().enumerate() {
        let mut env = envelope(i as u64 + 1, e);
        env.time = Micros::from_secs(NOW);
        expected.apply(&env).unwrap();
    }
    assert_eq!(
        loaded.state.pools.pools.keys().collect::<Vec<_>>(),
        expected.pools.pools.keys().collect::<Vec<_>>()
    );
    for (name, p) in &loaded.state.pools.pools {
        let e = &expected.pools.pools[name];
        assert_eq!(
            p.active.keys().collect::<Vec<_>>(),
            e.active.keys().collect::<Vec<_>>()
        );
        assert_eq!(p.reserved(), e.reserved());
    }
}
