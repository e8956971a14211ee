//! Reducer properties for pools: for any sequence of commands and outcomes, reservations stay
//! within capacity, only proof releases budget, and replay is deterministic.

mod pool_ops;

use dispatch::event::{Event, Micros};
use dispatch::state::State;
use pool_ops::{envelope, journal_of, Op, NOW};
use quickcheck::QuickCheck;

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
    let loaded = dispatch::journal::load::<dispatch::state::State>(dir.path()).unwrap();
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
