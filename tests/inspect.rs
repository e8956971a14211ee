//! `dispatch inspect`: a worker's timeline from the coordinator's journal and its own journal,
//! up to any damage, found by name or submission id.

mod synthetic;

use std::path::Path;
use std::process::Command;

use dispatch::event::worker::{PayloadExited, PayloadStarted};
use dispatch::event::{Event, WorkerEvent};
use dispatch::journal::{JournalWriter, Options, Writer};
use dispatch::worker::dirs::WorkerDirs;
use serde_json::Value;
use uuid::Uuid;

fn inspect(state: &Path, key: &str) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--state-dir")
        .arg(state)
        .args(["inspect", key, "--json"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

#[test]
fn a_workers_timeline_and_its_own_journal_up_to_the_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    synthetic::write_pool_journal(&state, 3, |_| true);
    // Worker w1 (submission 2) wrote its own journal; then one of its frames was damaged.
    let id = Uuid::from_u128(2);
    let dirs = WorkerDirs::new(&state.join("pools"), "p", id);
    let wj = dispatch::worker::supervisor::journal_dir(&dirs.evidence);
    let w = JournalWriter::<WorkerEvent>::open(&wj, Options::default()).unwrap();
    w.append_one(WorkerEvent::PayloadStarted(PayloadStarted { pid: 42 }))
        .unwrap();
    w.append_one(WorkerEvent::PayloadExited(PayloadExited {
        code: Some(3),
        signal: None,
        interrupted: false,
    }))
    .unwrap();
    w.append_one(WorkerEvent::PayloadStarted(PayloadStarted { pid: 43 }))
        .unwrap();
    drop(w);
    let seg = wj.join(dispatch::journal::segment::file_name(1));
    let scan = dispatch::journal::scan::scan(&wj, None, |_| true).unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    // Flip a byte in the second-to-last frame: a valid frame follows, so it is corruption.
    let last = scan.head.unwrap().last_frame_offset.unwrap() as usize;
    bytes[last - 10] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();

    for key in ["w1", &id.to_string()] {
        let (code, r) = inspect(&state, key);
        assert_eq!(code, 0, "{r}");
        assert_eq!(r["worker"], "w1");
        assert_eq!(r["pool"], "p");
        assert_eq!(r["submission_id"], id.to_string());
        let kinds: Vec<&str> = r["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["WorkerSubmitIntent", "WorkerLaunched", "WorkerStepObserved"]
        );
        assert_eq!(r["last_event"]["kind"], "WorkerStepObserved");
        let wjr = &r["worker_journal"];
        assert_eq!(wjr["status"], "corrupt", "{wjr}");
        assert!(
            wjr["damage"]
                .as_str()
                .unwrap()
                .contains("valid frame follows"),
            "{wjr}"
        );
        // Genesis and the first payload event are before the damage; nothing after it is shown.
        let seen: Vec<&str> = wjr["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(seen, ["Genesis", "PayloadStarted"]);
    }
    // Inspecting wrote nothing: the damaged worker journal is as it was.
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);
}

#[test]
fn an_unknown_worker_is_an_error_that_says_where_to_look() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    synthetic::write_pool_journal(&state, 1, |_| true);
    let (code, r) = inspect(&state, "nobody");
    assert_eq!(
        code, 3,
        "not found is exit 3, as for every command (docs/cli.md)"
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("pool status"),
        "{r}"
    );
}

/// Once its pool is detached the reduced state no longer holds the worker; inspect finds it in
/// the journal, and shows it as ended with its whole timeline.
#[test]
fn a_worker_of_a_detached_pool_is_still_found() {
    use dispatch::event::pool::{PoolDetached, WorkerTerminal};
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    synthetic::write_pool_journal(&state, 2, |_| true);
    let w = Writer::open(&state.join("journal"), Options::default()).unwrap();
    let mut events: Vec<Event> = (1..=2u128)
        .map(|i| {
            Event::WorkerTerminal(WorkerTerminal {
                submission_id: Uuid::from_u128(i),
                proof: "step absent from a successful step listing".into(),
            })
        })
        .collect();
    events.push(Event::PoolDetached(PoolDetached { pool: "p".into() }));
    w.append(events).unwrap();
    drop(w);
    let (code, r) = inspect(&state, "w1");
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["state"], "ended");
    assert_eq!(r["pool"], "p");
    assert_eq!(r["submission_id"], Uuid::from_u128(2).to_string());
    assert_eq!(r["last_event"]["kind"], "WorkerTerminal", "{r}");
}

/// Issue 36, item 2: a payload that exited 3 is shown failed, with its code, in JSON and in
/// the header line, even when its (older) supervisor recorded `completed`.
#[test]
fn a_payload_that_exited_non_zero_is_inspected_as_a_failure_with_its_code() {
    use dispatch::event::worker::SupervisorFinished;
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    synthetic::write_pool_journal(&state, 3, |_| true);
    let id = Uuid::from_u128(2);
    let dirs = WorkerDirs::new(&state.join("pools"), "p", id);
    let wj = dispatch::worker::supervisor::journal_dir(&dirs.evidence);
    let w = JournalWriter::<WorkerEvent>::open(&wj, Options::default()).unwrap();
    w.append(vec![
        WorkerEvent::PayloadStarted(PayloadStarted { pid: 42 }),
        WorkerEvent::PayloadExited(PayloadExited {
            code: Some(3),
            signal: None,
            interrupted: false,
        }),
        WorkerEvent::SupervisorFinished(SupervisorFinished {
            outcome: "completed".into(),
            exit_code: 3,
        }),
    ])
    .unwrap();
    drop(w);
    let (code, r) = inspect(&state, "w1");
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["outcome"], "failed", "{r}");
    assert_eq!(
        (&r["exit_code"], &r["exit_signal"]),
        (&Value::from(3), &Value::Null),
        "{r}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--state-dir")
        .arg(&state)
        .args(["inspect", "w1"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let header = text.lines().next().unwrap();
    assert!(
        header.contains("exit 3") && header.contains("failed"),
        "{text}"
    );
}
