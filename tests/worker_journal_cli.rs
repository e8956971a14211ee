//! A worker's own journal (`<worker>/evidence/journal`, written by its supervisor in the
//! worker vocabulary) is read by the same commands as the coordinator's: `journal dump` names
//! its events in text and JSON, `--kind` takes their names, and `verify`, `dump` and `audit`
//! agree on a worker event whose body does not decode (journal-format.md §8).

use std::path::Path;
use std::process::Command;

use dispatch::event::worker::{PayloadExited, PayloadStarted, SupervisorFinished};
use dispatch::event::{Actor, WorkerEvent};
use dispatch::journal::{frame, JournalWriter, Options};

const BIN: &str = env!("CARGO_BIN_EXE_dispatch");

fn dispatch(state: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("DISPATCH_FAILPOINTS")
        .env_remove("DISPATCH_STATE_DIR")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// An evidence directory whose journal a supervisor wrote: Genesis and three worker events.
fn evidence(root: &Path) -> std::path::PathBuf {
    let state = root.join("evidence");
    let w = JournalWriter::<WorkerEvent>::open_as(
        &state.join("journal"),
        Options::default(),
        Actor::current(),
    )
    .unwrap();
    w.append(vec![
        WorkerEvent::PayloadStarted(PayloadStarted { pid: 4242 }),
        WorkerEvent::PayloadExited(PayloadExited {
            code: Some(0),
            signal: None,
            interrupted: false,
        }),
        WorkerEvent::SupervisorFinished(SupervisorFinished {
            outcome: "completed".to_owned(),
            exit_code: 0,
        }),
    ])
    .unwrap();
    state
}

#[test]
fn journal_dump_names_a_worker_journals_events_in_text_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    let state = evidence(tmp.path());
    let (code, text, err) = dispatch(&state, &["journal", "dump"]);
    assert_eq!(code, 0, "{err}");
    assert!(!text.contains("Unknown"), "{text}");
    for name in [
        "Genesis",
        "PayloadStarted",
        "PayloadExited",
        "SupervisorFinished",
    ] {
        assert!(text.contains(name), "{name} in {text}");
    }
    assert!(text.contains("pid=4242"), "{text}");
    let (code, json, err) = dispatch(&state, &["journal", "dump", "--json"]);
    assert_eq!(code, 0, "{err}");
    let kinds: Vec<String> = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| {
            if v["kind"] == "PayloadStarted" {
                assert_eq!(v["event"]["pid"], 4242, "{v}");
            }
            v["kind"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "Genesis",
            "PayloadStarted",
            "PayloadExited",
            "SupervisorFinished"
        ]
    );
    let (code, only, err) = dispatch(&state, &["journal", "dump", "--kind", "PayloadExited"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(only.lines().count(), 1, "{only}");
    let (code, v, err) = dispatch(&state, &["journal", "verify"]);
    assert_eq!(code, 0, "{v}{err}");
    let (code, a, err) = dispatch(&state, &["--json", "audit"]);
    assert_eq!(code, 0, "{a}{err}");
    let a: serde_json::Value = serde_json::from_str(a.trim()).unwrap();
    assert_eq!(a["reducers"]["replayed"], 4, "{a}");
}

#[test]
fn a_worker_event_whose_body_does_not_decode_is_damage_to_verify_dump_and_audit_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let state = evidence(tmp.path());
    let seg = state.join("journal").join("segment-00000001.djl");
    let mut bytes = std::fs::read(&seg).unwrap();
    // Seq 5: a PayloadStarted (kind 151) whose body is a string, not `{pid}`; CRCs and chain
    // computed as a writer would, so only its payload is wrong.
    let mut chain = [0u8; 32];
    let mut at = dispatch::journal::segment::SEGMENT_HEADER_LEN;
    while at < bytes.len() {
        let f = frame::decode(&bytes[at..]).unwrap();
        chain = f.chain_value();
        at += f.len();
    }
    let mut payload = Vec::new();
    rmp_serde::encode::write(
        &mut payload,
        &(
            dispatch::event::Micros(1),
            uuid::Uuid::from_u128(7),
            Actor::current(),
            "not a body",
        ),
    )
    .unwrap();
    let bad_at = bytes.len() as u64;
    frame::encode(&mut bytes, &chain, 5, 151, 0, &payload);
    std::fs::write(&seg, &bytes).unwrap();

    let (code, out, _) = dispatch(&state, &["--json", "journal", "verify"]);
    assert_eq!(code, 5, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["status"], "corrupt");
    assert_eq!(v["damage"]["offset"], bad_at);
    let (code, json, err) = dispatch(&state, &["journal", "dump", "--json"]);
    assert_eq!(code, 5, "dump stops at the same damage: {json}{err}");
    assert_eq!(json.lines().count(), 4, "the events before it: {json}");
    assert!(err.contains(&format!("offset {bad_at}")), "{err}");
    let (code, out, _) = dispatch(&state, &["--json", "audit"]);
    assert_eq!(code, 5, "{out}");
}
