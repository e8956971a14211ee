//! `dispatch audit`, offline: a sound history passes; an effect without intent, a damaged
//! journal and evidence that no longer matches its manifest are each found.

mod synthetic;

use std::path::Path;
use std::process::Command;

use dispatch::event::pool::WorkerTerminal;
use dispatch::event::Event;
use dispatch::journal::{Options, Writer};
use serde_json::Value;
use uuid::Uuid;

fn audit(state: &Path) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--state-dir")
        .arg(state)
        .args(["audit", "--json"])
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), v)
}

#[test]
fn a_sound_history_passes_and_unknown_outcomes_are_counted_as_held() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    synthetic::write_pool_journal(&state, 20, |i| i % 2 == 0);
    let (code, r) = audit(&state);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["status"], "ok");
    assert_eq!(r["rules"]["violation_count"], 0);
    assert_eq!(r["rules"]["held"], 20);
    assert_eq!(r["reducers"]["replayed"], r["journal"]["events"]);
    assert_eq!(r["evidence"]["checked"], 0);
}

#[test]
fn a_release_without_intent_is_a_violation_at_its_seq() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    synthetic::write_pool_journal(&state, 2, |_| true);
    let w = Writer::open(&state.join("journal"), Options::default()).unwrap();
    let c = w
        .append_one(Event::WorkerTerminal(WorkerTerminal {
            submission_id: Uuid::from_u128(77),
            proof: "made up".into(),
        }))
        .unwrap();
    drop(w);
    let (code, r) = audit(&state);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["status"], "violations");
    let v = &r["rules"]["violations"][0];
    assert_eq!(v["rule"], "effect-without-intent");
    assert_eq!(v["seq"], c.seq);
    assert_eq!(v["kind"], "WorkerTerminal");
}

#[test]
fn a_damaged_journal_is_reported_as_damaged() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    synthetic::write_pool_journal(&state, 30, |_| true);
    let seg = state
        .join("journal")
        .join(dispatch::journal::segment::file_name(1));
    let mut bytes = std::fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&seg, bytes).unwrap();
    let (code, r) = audit(&state);
    assert_eq!(code, 5, "{r}");
    assert_eq!(r["status"], "damaged");
    assert_eq!(r["journal"]["status"], "corrupt");
}

#[test]
fn a_snapshot_is_checked_against_the_full_replay() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    synthetic::write_pool_journal(&state, 5, |_| true);
    let journal = state.join("journal");
    let loaded = dispatch::journal::load::<dispatch::state::State>(&journal).unwrap();
    dispatch::journal::reader::snapshot_now(&journal, &loaded).unwrap();
    let (code, r) = audit(&state);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["snapshot"]["agrees"], true);
    assert_eq!(r["snapshot"]["seq"], r["journal"]["last_seq"]);
}

#[test]
fn published_evidence_that_does_not_match_its_manifest_is_found() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    synthetic::write_pool_journal(&state, 1, |_| true);
    let published = state.join("pools/p/published/w0-00000000-0000-0000-0000-000000000001");
    std::fs::create_dir_all(&published).unwrap();
    std::fs::write(published.join("MANIFEST.json"), b"{not a manifest").unwrap();
    // A publication still in its temp directory is not evidence yet.
    std::fs::create_dir_all(state.join("pools/p/published/.tmp-w9-x")).unwrap();
    let (code, r) = audit(&state);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["evidence"]["checked"], 1);
    assert!(r["evidence"]["failed"][0]["dir"]
        .as_str()
        .unwrap()
        .ends_with("000000000001"));
}

/// Evidence is only evidence in directories that are ours: a published directory another
/// user owns (a planted manifest that would verify) is reported, never verified.
#[test]
fn published_evidence_in_a_directory_of_another_user_is_not_trusted() {
    use std::os::unix::fs::{chown, symlink};
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    synthetic::write_pool_journal(&state, 1, |_| true);
    let published = state.join("pools/p/published");
    std::fs::create_dir_all(&published).unwrap();
    // A manifest listing no files verifies: what is planted would pass if it were read.
    let manifest = r#"{"format":1,"worker":"w0","submission_id":"x","pinned_commit":null,"head_commit":null,"files":[]}"#;
    let planted = published.join("w0-00000000-0000-0000-0000-000000000001");
    std::fs::create_dir(&planted).unwrap();
    std::fs::write(planted.join("MANIFEST.json"), manifest).unwrap();
    chown(&planted, Some(65534), Some(65534)).unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("MANIFEST.json"), manifest).unwrap();
    symlink(
        &outside,
        published.join("w1-00000000-0000-0000-0000-000000000002"),
    )
    .unwrap();
    let (code, r) = audit(&state);
    assert_eq!(code, 1, "{r}");
    let failed = r["evidence"]["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 2, "{r}");
    for f in failed {
        let problem = f["problems"][0].as_str().unwrap();
        assert!(problem.starts_with("not trusted as evidence"), "{problem}");
    }
}
