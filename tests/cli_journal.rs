//! The `dispatch journal` command-line contract (CLI.md): JSON shapes, exit codes, refusals and
//! the state directory rules, checked against the built binary.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_dispatch");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn dispatch(state: &Path, args: &[&str]) -> Run {
    let out: Output = Command::new(BIN)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("DISPATCH_FAILPOINTS")
        .env_remove("DISPATCH_LOG")
        .env_remove("DISPATCH_STATE_DIR")
        .output()
        .expect("run dispatch");
    Run {
        code: out.status.code().expect("dispatch exits, it is not killed"),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

/// `--json` output: exactly one JSON document and nothing else on stdout.
fn one_json(r: &Run) -> Value {
    let mut docs = serde_json::Deserializer::from_str(&r.stdout).into_iter::<Value>();
    let doc = docs
        .next()
        .unwrap_or_else(|| panic!("no JSON on stdout; stderr: {}", r.stderr))
        .expect("stdout is JSON");
    assert!(
        docs.next().is_none(),
        "more than one document: {}",
        r.stdout
    );
    assert_eq!(
        r.stdout.trim_end(),
        r.stdout.trim(),
        "nothing before the document"
    );
    assert_eq!(r.stdout.lines().count(), 1, "one line: {:?}", r.stdout);
    doc
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .expect("an object")
        .keys()
        .map(|k| k.as_str())
        .collect();
    k.sort_unstable();
    k
}

fn journal_dir(state: &Path) -> PathBuf {
    state.join("journal")
}

/// A state directory whose journal holds Genesis plus `n` pool events.
fn state_with_events(root: &Path, n: usize) -> PathBuf {
    let state = root.join("state");
    let r = dispatch(&state, &["journal", "init"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    build_more(&journal_dir(&state), n);
    state
}

fn build_more(dir: &Path, n: usize) {
    let w = dispatch::journal::Writer::open(dir, Default::default()).unwrap();
    for i in 0..n {
        w.append_one(pool_event(i)).unwrap();
    }
}

fn seg(state: &Path) -> PathBuf {
    segment_path(&journal_dir(state), 1)
}

#[test]
fn init_creates_once_and_reports_in_json() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("a/b/state");
    let r = dispatch(&state, &["--json", "journal", "init"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = one_json(&r);
    assert_eq!(keys(&v), ["created", "journal_id", "path"]);
    assert_eq!(v["created"], true);
    let id = v["journal_id"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
    assert_eq!(Path::new(v["path"].as_str().unwrap()), journal_dir(&state));

    for dir in [state.clone(), journal_dir(&state)] {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} has mode {mode:o}", dir.display());
    }

    let again = dispatch(&state, &["journal", "init", "--json"]);
    assert_eq!(again.code, 0);
    let v2 = one_json(&again);
    assert_eq!(v2["created"], false, "init is idempotent");
    assert_eq!(v2["journal_id"], v["journal_id"]);
    let v = one_json(&dispatch(&state, &["--json", "journal", "verify"]));
    assert_eq!(v["events"], 1, "the second init appended nothing");
}

#[test]
fn verify_reports_clean_torn_corrupt_and_tampered_with_their_exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let state = state_with_events(tmp.path(), 30);
    let clean = std::fs::read(seg(&state)).unwrap();
    let fr = frames(&clean);

    let r = dispatch(&state, &["--json", "journal", "verify"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = one_json(&r);
    assert_eq!(
        keys(&v),
        ["damage", "events", "fork", "head", "last_seq", "status"]
    );
    assert_eq!(v["status"], "clean");
    assert_eq!(
        (v["events"].as_u64(), v["last_seq"].as_u64()),
        (Some(31), Some(31))
    );
    assert!(v["damage"].is_null());
    let head = v["head"].as_str().unwrap();
    let last = fr.last().unwrap();
    assert_eq!(
        head,
        hex::encode(&clean[last.end - 36..last.end - 4]),
        "head is the chain"
    );

    let torn = last.start + 10;
    std::fs::write(seg(&state), &clean[..torn]).unwrap();
    let r = dispatch(&state, &["--json", "journal", "verify"]);
    assert_eq!(r.code, 1, "torn tail exits 1");
    let v = one_json(&r);
    assert_eq!(v["status"], "torn_tail");
    assert_eq!(v["last_seq"], 30);
    let d = &v["damage"];
    assert_eq!(keys(d), ["bytes", "offset", "reason", "segment"]);
    assert_eq!(d["segment"], "segment-00000001.djl");
    assert_eq!(d["offset"], last.start as u64);
    assert_eq!(d["bytes"], 10);
    assert!(!d["reason"].as_str().unwrap().is_empty());

    let mut flipped = clean.clone();
    flipped[fr[10].start + 30] ^= 0x04;
    std::fs::write(seg(&state), &flipped).unwrap();
    let r = dispatch(&state, &["--json", "journal", "verify"]);
    assert_eq!(r.code, 5, "corrupt exits 5");
    let v = one_json(&r);
    assert_eq!(v["status"], "corrupt");
    assert_eq!(v["damage"]["offset"], fr[10].start as u64);

    let mut tampered = clean.clone();
    tampered[fr[10].start + 30] ^= 0x04;
    reseal_crcs(&mut tampered, fr[10].clone());
    std::fs::write(seg(&state), &tampered).unwrap();
    let r = dispatch(&state, &["--json", "journal", "verify"]);
    assert_eq!(r.code, 5, "tampered exits 5");
    assert_eq!(one_json(&r)["status"], "tampered");

    std::fs::write(seg(&state), b"#!/bin/sh\necho not a journal\n").unwrap();
    let r = dispatch(&state, &["--json", "journal", "verify"]);
    assert_eq!(r.code, 5, "a stranger file is corrupt: {}", r.stderr);
    let v = one_json(&r);
    assert_eq!(
        (v["status"].as_str(), v["last_seq"].as_u64()),
        (Some("corrupt"), Some(0))
    );

    // Human output says the same, with the next step.
    std::fs::write(seg(&state), &clean[..torn]).unwrap();
    let r = dispatch(&state, &["journal", "verify"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.starts_with("torn_tail"), "{}", r.stdout);
    assert!(r.stdout.contains("dispatch journal repair"), "{}", r.stdout);
}

#[test]
fn dump_prints_json_lines_within_from_and_to() {
    let tmp = tempfile::tempdir().unwrap();
    let state = state_with_events(tmp.path(), 12);
    let r = dispatch(&state, &["--json", "journal", "dump"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON document"))
        .collect();
    assert_eq!(lines.len(), 13);
    for (i, v) in lines.iter().enumerate() {
        assert_eq!(keys(v), ["actor", "event", "id", "kind", "seq", "time"]);
        assert_eq!(v["seq"], i as u64 + 1);
        assert!(v["time"].as_str().unwrap().ends_with('Z'));
        assert!(uuid::Uuid::parse_str(v["id"].as_str().unwrap()).is_ok());
        assert_eq!(keys(&v["actor"]), ["command", "host", "pid", "user"]);
    }
    assert_eq!(lines[0]["kind"], "Genesis");
    assert_eq!(lines[1]["kind"], "PoolAttached");
    assert_eq!(lines[1]["event"]["pool"], "p");
    assert_eq!(lines[2]["kind"], "WorkerSubmitIntent");

    let seqs = |args: &[&str]| -> Vec<u64> {
        let mut a = vec!["--json", "journal", "dump"];
        a.extend_from_slice(args);
        let r = dispatch(&state, &a);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    };
    assert_eq!(seqs(&["--from", "3", "--to", "7"]), [3, 4, 5, 6, 7]);
    assert_eq!(seqs(&["--from", "11"]), [11, 12, 13]);
    assert_eq!(seqs(&["--to", "2"]), [1, 2]);
    assert_eq!(seqs(&["--from", "5", "--to", "5"]), [5]);
    assert!(seqs(&["--from", "99"]).is_empty());

    // A torn tail: every whole event is printed, then the damage is reported on stderr.
    let bytes = std::fs::read(seg(&state)).unwrap();
    std::fs::write(seg(&state), &bytes[..bytes.len() - 5]).unwrap();
    let r = dispatch(&state, &["--json", "journal", "dump"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 12);
    assert!(r.stderr.contains("torn_tail"), "{}", r.stderr);

    let r = dispatch(&state, &["journal", "dump", "--from", "7", "--to", "3"]);
    assert_eq!(r.code, 2, "from after to is a usage error");
    assert!(r.stdout.is_empty());
}

#[test]
fn dump_of_a_worker_the_journal_never_named_is_not_found_and_says_what_to_run() {
    let tmp = tempfile::tempdir().unwrap();
    // w0, and w1 of one event: its intent (seq 9).
    let state = state_with_events(tmp.path(), 8);
    for worker in ["nosuch", "00000000-0000-0000-0000-00005eed0009"] {
        let r = dispatch(&state, &["journal", "dump", "--worker", worker]);
        assert_eq!(r.code, 3, "{worker}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{}", r.stdout);
        assert!(
            r.stderr.contains(&format!("no worker {worker:?}")),
            "{}",
            r.stderr
        );
        assert!(r.stderr.contains("`dispatch pool status`"), "{}", r.stderr);
    }
    // A worker the journal names is found, even when no event of it passes the other filters.
    let r = dispatch(&state, &["journal", "dump", "--worker", "w1"]);
    assert_eq!((r.code, r.stdout.lines().count()), (0, 1), "{}", r.stderr);
    let r = dispatch(
        &state,
        &[
            "journal",
            "dump",
            "--worker",
            "w1",
            "--kind",
            "WorkerExited",
        ],
    );
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.stderr);
    let r = dispatch(
        &state,
        &[
            "journal",
            "dump",
            "--worker",
            "00000000-0000-0000-0000-00005eed0001",
            "--from",
            "99",
        ],
    );
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.stderr);
}

#[test]
fn dump_of_an_unknown_kind_lists_the_kinds() {
    let tmp = tempfile::tempdir().unwrap();
    let state = state_with_events(tmp.path(), 1);
    let r = dispatch(&state, &["journal", "dump", "--kind", "WorkerExit"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    for kind in [
        "Genesis",
        "WorkerSubmitIntent",
        "WorkerExited",
        "PayloadExited",
    ] {
        assert!(r.stderr.contains(kind), "{kind}: {}", r.stderr);
    }
    assert!(r.stderr.contains("\"WorkerExit\""), "{}", r.stderr);
}

#[test]
fn out_of_range_flag_values_are_usage_errors_that_name_the_range() {
    let tmp = tempfile::tempdir().unwrap();
    let state = state_with_events(tmp.path(), 2);
    for args in [
        &["journal", "dump", "--from", "0"][..],
        &["journal", "dump", "--to", "0"],
        &["--json", "journal", "dump", "--from", "0"],
        &["journal", "dump", "--from", "-1"],
    ] {
        let r = dispatch(&state, args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        if args[0] == "--json" {
            // A script that asked for JSON still gets its one document.
            assert_eq!(one_json(&r)["error"]["exit_code"], 2, "{args:?}");
        } else {
            assert!(r.stdout.is_empty(), "{args:?}: usage errors go to stderr");
        }
    }
    let r = dispatch(&state, &["journal", "dump", "--from", "0"]);
    assert!(r.stderr.contains("--from"), "{}", r.stderr);
    assert!(
        r.stderr.contains("1.."),
        "the message states the range: {}",
        r.stderr
    );
}

#[test]
fn repair_cuts_a_torn_tail_then_verify_is_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let state = state_with_events(tmp.path(), 20);
    let clean = std::fs::read(seg(&state)).unwrap();
    let last = frames(&clean).pop().unwrap();
    std::fs::write(seg(&state), &clean[..last.end - 1]).unwrap();

    let r = dispatch(&state, &["--json", "journal", "repair"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = one_json(&r);
    assert_eq!(v["status"], "repaired");
    let rec = &v["recovered"];
    assert_eq!(rec["offset"], last.start as u64);
    assert_eq!(rec["length"], (last.len() - 1) as u64);
    let saved = journal_dir(&state).join(rec["saved_as"].as_str().unwrap());
    assert_eq!(
        std::fs::read(saved).unwrap(),
        &clean[last.start..last.end - 1]
    );

    let r = dispatch(&state, &["--json", "journal", "verify"]);
    assert_eq!(r.code, 0);
    let v = one_json(&r);
    assert_eq!(
        (v["status"].as_str(), v["last_seq"].as_u64()),
        (Some("clean"), Some(21))
    );
    let r = dispatch(&state, &["--json", "journal", "dump", "--from", "21"]);
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["kind"], "Recovered");
    let sha = &v["event"]["sha256"];
    assert_eq!(
        sha.as_str().unwrap().len(),
        64,
        "the digest is hex in JSON: {sha}"
    );

    let r = dispatch(&state, &["--json", "journal", "repair"]);
    assert_eq!(
        (r.code, one_json(&r)["status"].as_str()),
        (0, Some("clean"))
    );
}

#[test]
fn repair_and_init_refuse_a_corrupt_journal_and_point_at_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let state = state_with_events(tmp.path(), 20);
    let mut bytes = std::fs::read(seg(&state)).unwrap();
    let mid = frames(&bytes)[8].clone();
    bytes[mid.start + 40] ^= 0x01;
    std::fs::write(seg(&state), &bytes).unwrap();
    for args in [
        &["journal", "repair"][..],
        &["journal", "init"],
        &["--json", "journal", "repair"],
        &["--json", "journal", "init"],
    ] {
        let r = dispatch(&state, args);
        assert_eq!(r.code, 5, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("dispatch journal verify"),
            "{args:?}: {}",
            r.stderr
        );
        if args[0] == "--json" {
            // With --json a refusal is still exactly one JSON document.
            let v = one_json(&r);
            assert_eq!(v["error"]["exit_code"], 5, "{args:?}: {v}");
            assert!(v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("dispatch journal verify"));
        } else {
            assert!(
                r.stdout.is_empty(),
                "{args:?}: diagnostics never go to stdout"
            );
        }
        assert_eq!(std::fs::read(seg(&state)).unwrap(), bytes, "{args:?} wrote");
    }
}

#[test]
fn a_state_dir_owned_by_someone_else_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let (state, before) = if root {
        let state = state_with_events(tmp.path(), 3);
        let before = std::fs::read(seg(&state)).unwrap();
        std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
        (state, Some(before))
    } else {
        // Without root nothing can be given away, but `/` already belongs to someone else.
        (PathBuf::from("/"), None)
    };
    let owner = std::fs::metadata(&state).unwrap().uid();
    for args in [
        &["journal", "init"][..],
        &["--json", "journal", "verify"],
        &["journal", "dump"],
        &["journal", "repair"],
        // Every other kind of command refuses it the same way, before any Slurm call.
        &["pool", "status"],
        &["reconcile"],
        &["asset", "list"],
        &["asset", "add-image", "i", "/etc/hostname"],
        &["trial", "open", "t"],
        &["trials"],
        &["audit"],
        &[
            "submit", "--cpus", "1", "--mem", "1G", "--time", "10", "--", "true",
        ],
    ] {
        let r = dispatch(&state, args);
        assert_eq!(r.code, 3, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("uid {owner}")),
            "{args:?}: {}",
            r.stderr
        );
        if args[0] == "--json" {
            assert_eq!(one_json(&r)["error"]["exit_code"], 3, "{args:?}");
        } else {
            assert!(r.stdout.is_empty(), "{args:?}");
        }
    }
    if let Some(before) = before {
        assert_eq!(std::fs::read(seg(&state)).unwrap(), before);
        assert_eq!(std::fs::metadata(&state).unwrap().uid(), 65534);
    }
}

#[test]
fn commands_on_a_missing_journal_fail_without_creating_it() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("nowhere");
    for args in [
        &["journal", "verify"][..],
        &["journal", "dump"],
        &["journal", "repair"],
    ] {
        let r = dispatch(&state, args);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("dispatch journal init"),
            "{args:?}: {}",
            r.stderr
        );
        assert!(!state.exists(), "{args:?} created the state directory");
    }
}

/// `DISPATCH_SEGMENT_BYTES` sets the segment size, so that a multi-segment journal takes a
/// few commands, not thousands; below its floor (4096) it is raised to the floor.
#[test]
fn the_segment_size_setting_reaches_segment_2_in_a_few_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let mut commands = 0;
    while !segment_path(&state.join("journal"), 2).exists() {
        assert!(commands < 40, "still one segment after {commands} commands");
        let out = Command::new(BIN)
            .arg("--state-dir")
            .arg(&state)
            .args(["trial", "open", &format!("t{commands}")])
            .env_remove("DISPATCH_FAILPOINTS")
            .env("DISPATCH_SEGMENT_BYTES", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        commands += 1;
    }
    let first = std::fs::metadata(segment_path(&state.join("journal"), 1))
        .unwrap()
        .len();
    // Raised to the floor: it rolled over just before passing 4096 bytes, not at 1.
    assert!((3000..=4096).contains(&first), "segment 1 is {first} bytes");
    let r = dispatch(&state, &["journal", "verify", "--json"]);
    assert_eq!(
        (r.code, one_json(&r)["status"].as_str()),
        (0, Some("clean"))
    );
}

/// journal-format.md §8: a journal directory with no segment holds no journal, whatever else is
/// in it, and every command says so as it does for a missing directory: the commands that need
/// a journal fail (exit 1, "no journal", naming `journal init`), the listings show nothing.
#[test]
fn a_journal_directory_without_a_segment_is_no_journal_to_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let state = state_with_events(tmp.path(), 3);
    let dir = journal_dir(&state);
    std::fs::remove_file(seg(&state)).unwrap();
    let _ = std::fs::remove_file(dir.join("CHECKPOINT"));
    for args in [
        &["journal", "verify"][..],
        &["--json", "journal", "verify"],
        &["journal", "dump"],
        &["--json", "journal", "dump"],
        &["journal", "repair"],
    ] {
        let r = dispatch(&state, args);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        // With --json the error is the one document on stdout; without, it is on stderr.
        let said = if args[0] == "--json" {
            one_json(&r)["error"]["message"]
                .as_str()
                .unwrap()
                .to_owned()
        } else {
            assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
            r.stderr.clone()
        };
        assert!(said.contains("no journal"), "{args:?}: {said}");
        assert!(said.contains("journal init"), "{args:?}: {said}");
    }
    assert!(
        dispatch::journal::segment::list(&dir).unwrap().is_empty(),
        "repair created no journal"
    );
    let r = dispatch(&state, &["--json", "trials"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(one_json(&r), serde_json::json!({"trials": []}));
}

/// §6.3: `journal dump` shows a kind it does not know by its number and frame flags.
#[test]
fn dump_shows_an_unknown_kind_by_number_and_flags() {
    use dispatch::event::{Actor, Event, Micros};
    let tmp = tempfile::tempdir().unwrap();
    let state = state_with_events(tmp.path(), 1);
    let payload =
        rmp_serde::to_vec(&(Micros(1), uuid::Uuid::nil(), Actor::current(), (7u8,))).unwrap();
    let w = dispatch::journal::Writer::open(&journal_dir(&state), Default::default()).unwrap();
    for flags in [0u16, 1] {
        w.append_one(Event::Unknown {
            kind: 999,
            flags,
            payload: payload.clone(),
        })
        .unwrap();
    }
    drop(w);
    let r = dispatch(&state, &["--json", "journal", "dump", "--from", "3"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for (line, flags) in lines.iter().zip([0, 1]) {
        assert_eq!(line["kind"], "Unknown");
        assert_eq!(line["event"]["kind"], 999);
        assert_eq!(line["event"]["flags"], flags);
        assert_eq!(line["event"]["payload_hex"], hex::encode(&payload));
    }
    let r = dispatch(&state, &["journal", "dump", "--from", "3"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("kind=999"), "{}", r.stdout);
    assert!(r.stdout.contains("flags=1"), "{}", r.stdout);
}

/// journal-format.md §8: a name of the segment pattern that is not a regular file is not read;
/// every command refuses (exit 3, the state directory's trust check, naming the path and how to
/// move it aside), verify included: its 0/1/5 are verdicts on a journal it read.
#[test]
fn a_segment_name_that_is_a_directory_is_refused_not_classified() {
    let tmp = tempfile::tempdir().unwrap();
    let state = state_with_events(tmp.path(), 3);
    let odd = segment_path(&journal_dir(&state), 2);
    std::fs::create_dir(&odd).unwrap();
    for args in [
        &["journal", "verify"][..],
        &["journal", "dump"],
        &["journal", "repair"],
        &["audit"],
        &["trials"],
    ] {
        let r = dispatch(&state, args);
        assert_eq!(r.code, 3, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("is not a regular file") && r.stderr.contains("mv "),
            "{args:?}: {}",
            r.stderr
        );
    }
    std::fs::remove_dir(&odd).unwrap();
    assert_eq!(dispatch(&state, &["journal", "verify"]).code, 0);
}
