//! Trial properties: for any sequence of trial events (opened, joined, judged, in any order,
//! repeated), the first verdict after a trial's opening stands, a judged trial's workers do not
//! change, and the audit reports every later verdict as a relabelling and nothing else as one.

use std::collections::BTreeMap;

use dispatch::event::jobs::JobSubmitIntent;
use dispatch::event::trial::*;
use dispatch::event::{Actor, Envelope, Event, Micros};
use dispatch::policy::audit::Auditor;
use dispatch::state::State;
use quickcheck::{Arbitrary, Gen, QuickCheck};
use uuid::Uuid;

#[derive(Clone, Debug)]
enum Op {
    Open(u8),
    Join { trial: u8, worker: u8 },
    Judge { trial: u8, passed: bool },
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Op {
        let trial = u8::arbitrary(g) % 3;
        match u8::arbitrary(g) % 3 {
            0 => Op::Open(trial),
            1 => Op::Join {
                trial,
                worker: u8::arbitrary(g) % 4,
            },
            _ => Op::Judge {
                trial,
                passed: bool::arbitrary(g),
            },
        }
    }
}

fn name(t: u8) -> String {
    format!("t{t}")
}

/// The events of `ops`; every worker's intent comes first, so joins never lack one.
fn events_of(ops: &[Op]) -> Vec<Event> {
    let mut events: Vec<Event> = (0..4u8)
        .map(|w| {
            Event::JobSubmitIntent(JobSubmitIntent {
                submission_id: Uuid::from_u128(u128::from(w) + 1),
                worker: format!("w{w}"),
                target: None,
                cpus: 1,
                mem_mb: 1,
                time_s: 60,
                publication_timeout_s: 30,
                command: vec!["true".into()],
            })
        })
        .collect();
    for op in ops {
        events.push(match op {
            Op::Open(t) => Event::TrialOpened(TrialOpened {
                trial: name(*t),
                pin: None,
                follows: None,
                note: String::new(),
            }),
            Op::Join { trial, worker } => Event::TrialWorkerJoined(TrialWorkerJoined {
                trial: name(*trial),
                submission_id: Uuid::from_u128(u128::from(*worker) + 1),
            }),
            Op::Judge { trial, passed } => Event::TrialJudged(TrialJudged {
                trial: name(*trial),
                verdict: if *passed {
                    Verdict::Passed
                } else {
                    Verdict::Failed
                },
                reason: String::new(),
                evidence: Vec::new(),
            }),
        });
    }
    events
}

fn envelope(seq: u64, event: Event) -> Envelope {
    Envelope {
        seq,
        time: Micros(seq as i64),
        id: Uuid::from_u128(u128::from(seq)),
        actor: Actor {
            user: "u".into(),
            host: "h".into(),
            pid: 1,
            command: vec![],
        },
        event,
    }
}

#[test]
fn the_first_verdict_stands_and_every_later_one_is_reported() {
    fn prop(ops: Vec<Op>) -> bool {
        let events = events_of(&ops);
        let mut state = State::default();
        let mut auditor = Auditor::default();
        for (i, e) in events.into_iter().enumerate() {
            let env = envelope(i as u64 + 1, e);
            auditor.observe(&env);
            state.apply(&env).unwrap();
        }
        // The model: per trial, opened?, its first verdict, workers joined before it, and the
        // verdicts that came after it.
        #[derive(Default)]
        struct Model {
            opened: bool,
            verdict: Option<bool>,
            workers: Vec<u8>,
            later: usize,
        }
        let mut model: BTreeMap<u8, Model> = BTreeMap::new();
        for op in &ops {
            match *op {
                Op::Open(t) => model.entry(t).or_default().opened = true,
                Op::Join { trial, worker } => {
                    let m = model.entry(trial).or_default();
                    if m.opened && m.verdict.is_none() && !m.workers.contains(&worker) {
                        m.workers.push(worker);
                    }
                }
                Op::Judge { trial, passed } => {
                    let m = model.entry(trial).or_default();
                    if m.opened {
                        match m.verdict {
                            None => m.verdict = Some(passed),
                            Some(_) => m.later += 1,
                        }
                    }
                }
            }
        }
        let findings = auditor.finish();
        let relabels = findings
            .violations
            .iter()
            .filter(|v| v.rule == "verdict-relabelled")
            .count();
        let expected_relabels: usize = model.values().map(|m| m.later).sum();
        relabels == expected_relabels
            && model
                .iter()
                .all(|(t, m)| match state.trials.trials.get(&name(*t)) {
                    None => !m.opened,
                    Some(trial) => {
                        let verdict = trial
                            .judgement
                            .as_ref()
                            .map(|j| j.verdict == Verdict::Passed);
                        let workers: Vec<u8> = trial
                            .workers
                            .iter()
                            .map(|w| (w.submission_id.as_u128() - 1) as u8)
                            .collect();
                        m.opened && verdict == m.verdict && workers == m.workers
                    }
                })
    }
    QuickCheck::new()
        .tests(500)
        .quickcheck(prop as fn(Vec<Op>) -> bool);
}
