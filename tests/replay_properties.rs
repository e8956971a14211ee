//! `--at` agrees with a fresh replay: for random pool histories written to a journal (with a
//! snapshot at its end, which a cut before it must not use), the state `ops::replay::state_at`
//! folds at a seq or a time equals the fold of that prefix of the journal's events, and
//! `dispatch pool status --at SEQ --json` prints that prefix's `status_of`.

mod pool_ops;

use std::process::Command;

use dispatch::event::{Envelope, Micros};
use dispatch::journal::{self, Writer};
use dispatch::ops::pool::status_of;
use dispatch::state::replay::Cut;
use dispatch::state::State;
use pool_ops::{journal_of, Op, NOW};
use quickcheck::{QuickCheck, TestResult};

/// Write `ops`' events one append each, at times that mostly advance and sometimes step back
/// (another host's clock), then snapshot the end. Returns the events as the journal has them.
fn written(dir: &std::path::Path, ops: &[Op], steps: &[i8]) -> Vec<Envelope> {
    let mut t = Micros::from_secs(NOW).0;
    Micros::pin_this_threads_clock(Some(Micros(t)));
    let w = Writer::open(dir, Default::default()).unwrap();
    for (i, e) in journal_of(ops).into_iter().enumerate() {
        let step = steps.get(i % steps.len().max(1)).copied().unwrap_or(1);
        t += i64::from(step) * 1_000_000;
        Micros::pin_this_threads_clock(Some(Micros(t)));
        w.append_one(e).unwrap();
    }
    Micros::pin_this_threads_clock(None);
    drop(w);
    let loaded = journal::load::<dispatch::state::State>(dir).unwrap();
    journal::reader::snapshot_now(dir, &loaded).unwrap();
    let mut events = Vec::new();
    journal::replay(dir, None, |env| {
        events.push(env);
        Ok(())
    })
    .unwrap();
    events
}

fn fold(events: &[Envelope]) -> State {
    let mut s = State::default();
    for env in events {
        s.apply(env).unwrap();
    }
    s
}

#[test]
fn at_a_seq_is_the_fold_of_that_prefix() {
    fn prop(ops: Vec<Op>, steps: Vec<i8>, pick: usize) -> TestResult {
        let dir = tempfile::tempdir().unwrap();
        let events = written(dir.path(), &ops, &steps);
        let seq = 1 + pick % events.len();
        let at = dispatch::ops::replay::state_at(dir.path(), Cut::Seq(seq as u64)).unwrap();
        let fresh = fold(&events[..seq]);
        let time = events[seq - 1].time;
        TestResult::from_bool(
            at.state == fresh
                && (at.seq, at.time, at.now) == (seq as u64, time, time)
                && serde_json::to_value(status_of(&at.state, None, at.now).unwrap()).unwrap()
                    == serde_json::to_value(status_of(&fresh, None, time).unwrap()).unwrap(),
        )
    }
    QuickCheck::new()
        .tests(60)
        .quickcheck(prop as fn(Vec<Op>, Vec<i8>, usize) -> TestResult);
}

#[test]
fn at_a_time_is_the_fold_of_the_prefix_up_to_the_first_later_event() {
    fn prop(ops: Vec<Op>, steps: Vec<i8>, offset: i16) -> TestResult {
        let dir = tempfile::tempdir().unwrap();
        let events = written(dir.path(), &ops, &steps);
        let cut = Micros(Micros::from_secs(NOW).0 + i64::from(offset) * 250_000);
        let prefix = events.iter().take_while(|e| e.time <= cut).count();
        let at = dispatch::ops::replay::state_at(dir.path(), Cut::Time(cut));
        if prefix == 0 {
            // Genesis was written after the cut: there is no state "then" (exit 3).
            return TestResult::from_bool(matches!(
                at,
                Err(dispatch::ops::error::OpError::NotFound(_))
            ));
        }
        let at = at.unwrap();
        TestResult::from_bool(
            at.state == fold(&events[..prefix]) && at.seq == prefix as u64 && at.now == cut,
        )
    }
    QuickCheck::new()
        .tests(60)
        .quickcheck(prop as fn(Vec<Op>, Vec<i8>, i16) -> TestResult);
}

/// The binary: `pool status --at SEQ --json` is the prefix's view with its `at` point, for
/// every seq of one random journal; `--at` past the end is exit 3; with `--refresh`, exit 2.
#[test]
fn pool_status_at_prints_the_prefix_view() {
    fn prop(ops: Vec<Op>, steps: Vec<i8>) -> TestResult {
        let state = tempfile::tempdir().unwrap();
        let journal_dir = state.path().join("journal");
        let events = written(&journal_dir, &ops, &steps);
        // A few seqs per journal: each is a process.
        let last = events.len();
        for seq in [1, last / 2 + 1, last] {
            let out = Command::new(env!("CARGO_BIN_EXE_dispatch"))
                .arg("--state-dir")
                .arg(state.path())
                .args(["pool", "status", "--json", "--at", &seq.to_string()])
                .env("PATH", "/nonexistent") // no Slurm to call, even by mistake
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let fresh = fold(&events[..seq]);
            let time = events[seq - 1].time;
            let mut expected =
                serde_json::to_value(status_of(&fresh, None, time).unwrap()).unwrap();
            expected["at"] = serde_json::json!({
                "seq": seq, "time": time.to_rfc3339(), "now": time.to_rfc3339()
            });
            if printed != expected {
                eprintln!("at {seq}: printed {printed}\nexpected {expected}");
                return TestResult::failed();
            }
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(15)
        .quickcheck(prop as fn(Vec<Op>, Vec<i8>) -> TestResult);
}
