//! A forked journal is not a dead end (journal-format.md §8.1): `journal verify` classifies it
//! `forked` and shows its branches, every other writer refuses it naming `journal repair`, and
//! `journal repair` merges it keeping every event, in file order, each with its own id; the
//! state is then the merged order's and `audit` explains the merge.
//!
//! Two forks: one made by hand (two copies of one journal written on, then their new frames
//! interleaved into one segment, as two writers appending at once leave them), and one made by
//! the old writer itself: `tests/fixtures/journal/forked-by-0ed985d` was written by dispatch
//! at commit 0ed985d (before the writer's lease), by two loops of `trial open` through two
//! bindfs mounts of one directory, the two-hosts set-up of tests/two_hosts.rs.

use std::path::{Path, PathBuf};
use std::process::Command;

use dispatch::event;
use dispatch::journal::frame;
use dispatch::journal::segment::SEGMENT_HEADER_LEN;
use serde_json::Value;
use uuid::Uuid;

const BIN: &str = env!("CARGO_BIN_EXE_dispatch");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn dispatch_with(state: &Path, args: &[&str], failpoints: Option<&str>) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("DISPATCH_FAILPOINTS")
        .env_remove("DISPATCH_LOG")
        .env_remove("DISPATCH_STATE_DIR");
    if let Some(f) = failpoints {
        cmd.env("DISPATCH_FAILPOINTS", f);
    }
    let out = cmd.output().expect("run dispatch");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

fn dispatch(state: &Path, args: &[&str]) -> Run {
    dispatch_with(state, args, None)
}

fn ok(state: &Path, args: &[&str]) -> Run {
    let r = dispatch(state, args);
    assert_eq!(r.code, 0, "dispatch {args:?}: {}{}", r.stdout, r.stderr);
    r
}

fn json(r: &Run) -> Value {
    serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

fn segment(state: &Path) -> PathBuf {
    state.join("journal").join("segment-00000001.djl")
}

/// (offset, event id, kind) of every frame from `from` on, decoded straight from the bytes.
fn frames_from(bytes: &[u8], from: usize) -> Vec<(usize, Uuid, u16)> {
    let mut out = Vec::new();
    let mut at = from;
    while at < bytes.len() {
        let f = frame::decode(&bytes[at..]).expect("whole frames");
        let env = event::decode_payload(f.seq, f.kind, f.flags, f.payload).expect("decodes");
        out.push((at, env.id, f.kind));
        at += f.len();
    }
    out
}

/// Every event id `journal dump` shows, in order, but the merge's own record.
fn dumped_ids(state: &Path) -> Vec<Uuid> {
    let r = ok(state, &["journal", "dump", "--json"]);
    r.stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["kind"] != "JournalMerged")
        .map(|v| v["id"].as_str().unwrap().parse().unwrap())
        .collect()
}

/// The independent reader written from journal-format.md alone (`tools/journal-read.py`) sees
/// the same fork, branch for branch, as `journal verify`; and after the merge the same clean
/// journal.
fn the_spec_reader_agrees(state: &Path) {
    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tools/journal-read.py"
        ))
        .arg(state.join("journal"))
        .output()
        .expect("python3");
    let theirs: Value = serde_json::from_slice(&out.stdout).expect("the reader prints JSON");
    let ours = json(&dispatch(state, &["--json", "journal", "verify"]));
    assert_eq!(theirs["status"], ours["status"], "{theirs} vs {ours}");
    for key in ["events", "last_seq", "head"] {
        assert_eq!(theirs[key], ours[key], "{key}: {theirs} vs {ours}");
    }
    if ours["status"] == "forked" {
        assert_eq!(theirs["fork"], ours["fork"], "the branches");
        assert_eq!(theirs["offset"], ours["damage"]["offset"]);
    }
}

/// Every frame of the region, re-framed by the merge, kept its kind, flags and payload.
fn payloads_kept(forked: &[u8], merged: &[u8], region_at: usize) {
    let payloads = |bytes: &[u8], from: usize| -> Vec<(u16, u16, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = from;
        while at < bytes.len() {
            let f = frame::decode(&bytes[at..]).unwrap();
            out.push((f.kind, f.flags, f.payload.to_vec()));
            at += f.len();
        }
        out
    };
    let before = payloads(forked, region_at);
    let after = payloads(merged, region_at);
    assert_eq!(after[0].0, 3, "the merge's record comes first");
    assert_eq!(after[1..], before[..], "byte for byte");
    assert_eq!(
        merged[..region_at],
        forked[..region_at],
        "the trunk is untouched"
    );
}

fn trials(state: &Path) -> Vec<String> {
    let v = json(&ok(state, &["--json", "trials"]));
    let mut names: Vec<String> = v
        .as_array()
        .or_else(|| v["trials"].as_array())
        .expect("a list of trials")
        .iter()
        .map(|t| {
            t["trial"]
                .as_str()
                .or(t["name"].as_str())
                .unwrap()
                .to_owned()
        })
        .collect();
    names.sort();
    names
}

/// A state dir whose journal holds `common` trials, copied after them to a second state dir;
/// each then opens its own trials; the second's new frames are interleaved with the first's
/// into the first's segment, one of each in turn.
fn hand_made_fork(root: &Path, common: &[&str], a: &[&str], b: &[&str]) -> PathBuf {
    let first = root.join("first");
    let second = root.join("second");
    ok(&first, &["journal", "init"]);
    for t in common {
        ok(&first, &["trial", "open", t]);
    }
    let status = Command::new("cp")
        .args(["-a"])
        .arg(&first)
        .arg(&second)
        .status()
        .unwrap();
    assert!(status.success());
    let fork_at = std::fs::metadata(segment(&first)).unwrap().len() as usize;
    for t in a {
        ok(&first, &["trial", "open", t]);
    }
    for t in b {
        ok(&second, &["trial", "open", t]);
    }
    let one = std::fs::read(segment(&first)).unwrap();
    let two = std::fs::read(segment(&second)).unwrap();
    assert_eq!(
        one[..fork_at],
        two[..fork_at],
        "the copies share the common part"
    );
    let spans = |bytes: &[u8]| -> Vec<Vec<u8>> {
        let offsets: Vec<usize> = frames_from(bytes, fork_at).iter().map(|f| f.0).collect();
        let ends = offsets.iter().skip(1).copied().chain([bytes.len()]);
        offsets
            .iter()
            .zip(ends)
            .map(|(&s, e)| bytes[s..e].to_vec())
            .collect()
    };
    let (mut xs, mut ys) = (spans(&one).into_iter(), spans(&two).into_iter());
    let mut forked = one[..fork_at].to_vec();
    loop {
        let (x, y) = (xs.next(), ys.next());
        if x.is_none() && y.is_none() {
            break;
        }
        forked.extend(x.into_iter().flatten());
        forked.extend(y.into_iter().flatten());
    }
    std::fs::write(segment(&first), &forked).unwrap();
    first
}

#[test]
fn a_hand_made_fork_is_classified_refused_and_merged_keeping_every_event() {
    let tmp = tempfile::tempdir().unwrap();
    let state = hand_made_fork(
        tmp.path(),
        &["c1", "c2"],
        &["a1", "a2", "a3"],
        &["b1", "b2"],
    );
    let forked = std::fs::read(segment(&state)).unwrap();
    let every: Vec<Uuid> = frames_from(&forked, SEGMENT_HEADER_LEN)
        .iter()
        .map(|f| f.1)
        .collect();

    let r = dispatch(&state, &["--json", "journal", "verify"]);
    assert_eq!(r.code, 5, "{}", r.stderr);
    let v = json(&r);
    assert_eq!(v["status"], "forked");
    let fork = &v["fork"];
    // Genesis, c1, c2, then a1 (the trunk goes on), b1 (the repeat): forked after seq 3.
    assert_eq!(fork["common_seq"], 3, "{v}");
    assert_eq!(fork["events"], 4, "b1 a2 b2 a3 are the region: {v}");
    let branches = fork["branches"].as_array().unwrap();
    assert_eq!(branches.len(), 2, "{v}");
    assert_eq!(
        (
            branches[0]["first_seq"].as_u64(),
            branches[0]["last_seq"].as_u64()
        ),
        (Some(4), Some(6))
    );
    assert_eq!(
        (
            branches[1]["first_seq"].as_u64(),
            branches[1]["last_seq"].as_u64()
        ),
        (Some(4), Some(5))
    );
    let text = dispatch(&state, &["journal", "verify"]);
    assert_eq!(
        text.stdout.matches("branch: after seq 3").count(),
        2,
        "{}",
        text.stdout
    );

    // Every other command refuses it, naming the way out; nothing is written.
    for args in [&["trial", "open", "z"][..], &["trials"][..]] {
        let r = dispatch(&state, args);
        assert_eq!(r.code, 5, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("dispatch journal repair"),
            "{args:?}: {}",
            r.stderr
        );
    }
    assert_eq!(std::fs::read(segment(&state)).unwrap(), forked);

    let r = json(&ok(&state, &["--json", "journal", "repair"]));
    assert_eq!(r["status"], "merged", "{r}");
    assert_eq!(r["merged"]["events"], 4);
    assert_eq!(r["merged"]["common_seq"], 3);
    let saved = state
        .join("journal")
        .join(r["merged"]["saved_as"].as_str().unwrap());
    assert_eq!(
        std::fs::read(saved).unwrap(),
        forked,
        "the segment as it was is kept"
    );

    let v = json(&ok(&state, &["--json", "journal", "verify"]));
    assert_eq!(v["status"], "clean");
    assert_eq!(
        v["events"],
        1 + every.len() as u64,
        "every frame and the merge's record"
    );
    the_spec_reader_agrees(&state);
    let region_at = r["merged"]["offset"].as_u64().unwrap() as usize;
    payloads_kept(&forked, &std::fs::read(segment(&state)).unwrap(), region_at);
    assert_eq!(
        dumped_ids(&state),
        every,
        "every event, with its own id, in file order"
    );
    assert_eq!(trials(&state), ["a1", "a2", "a3", "b1", "b2", "c1", "c2"]);
    let audit = json(&ok(&state, &["--json", "audit"]));
    assert_eq!(audit["status"], "ok", "{audit}");
    assert_eq!(audit["rules"]["merges"][0]["events"], 4, "{audit}");

    // Repair again: nothing to do. And the journal takes writes again.
    assert_eq!(
        json(&ok(&state, &["--json", "journal", "repair"]))["status"],
        "clean"
    );
    ok(&state, &["trial", "open", "after"]);
    assert_eq!(json(&ok(&state, &["--json", "audit"]))["status"], "ok");
}

#[test]
fn a_trial_opened_on_both_branches_is_a_repeat_the_merge_explains_not_a_violation() {
    let tmp = tempfile::tempdir().unwrap();
    let state = hand_made_fork(tmp.path(), &["c"], &["same"], &["same", "b"]);
    ok(&state, &["journal", "repair"]);
    let audit = json(&ok(&state, &["--json", "audit"]));
    assert_eq!(audit["status"], "ok", "{audit}");
    let merge = &audit["rules"]["merges"][0];
    assert_eq!(merge["explained_count"], 1, "{audit}");
    assert_eq!(merge["explained"][0]["rule"], "trial-reopened", "{audit}");
    let text = ok(&state, &["audit"]).stdout;
    assert!(
        text.contains("1 repeat(s) there only the merge explains"),
        "{text}"
    );
    assert_eq!(trials(&state), ["b", "c", "same"]);
}

#[test]
fn a_merge_killed_before_its_rename_leaves_the_fork_and_the_next_repair_merges_it() {
    let tmp = tempfile::tempdir().unwrap();
    let state = hand_made_fork(tmp.path(), &["c"], &["a1", "a2"], &["b1"]);
    let forked = std::fs::read(segment(&state)).unwrap();
    let r = dispatch_with(
        &state,
        &["journal", "repair"],
        Some("journal-merge-before-rename=abort"),
    );
    assert_ne!(r.code, 0, "the failpoint stops it: {}", r.stderr);
    assert_eq!(
        std::fs::read(segment(&state)).unwrap(),
        forked,
        "nothing of the merge is in place"
    );
    assert_eq!(
        json(&dispatch(&state, &["--json", "journal", "verify"]))["status"],
        "forked"
    );
    let r = json(&ok(&state, &["--json", "journal", "repair"]));
    assert_eq!(r["status"], "merged");
    assert_eq!(
        dumped_ids(&state).len(),
        frames_from(&forked, SEGMENT_HEADER_LEN).len()
    );
    assert_eq!(trials(&state), ["a1", "a2", "b1", "c"]);
}

#[test]
fn a_fork_the_old_writer_made_through_two_mounts_is_merged_keeping_every_event() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let journal = state.join("journal");
    std::fs::create_dir_all(&journal).unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/journal/forked-by-0ed985d");
    for name in ["segment-00000001.djl", "CHECKPOINT"] {
        std::fs::copy(fixture.join(name), journal.join(name)).unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    for d in [&state, &journal] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    for f in std::fs::read_dir(&journal).unwrap() {
        std::fs::set_permissions(f.unwrap().path(), std::fs::Permissions::from_mode(0o600))
            .unwrap();
    }
    let forked = std::fs::read(segment(&state)).unwrap();
    let every: Vec<(usize, Uuid, u16)> = frames_from(&forked, SEGMENT_HEADER_LEN);
    let opened: Vec<Uuid> = every.iter().filter(|f| f.2 == 140).map(|f| f.1).collect();
    assert_eq!(
        opened.len(),
        12,
        "the old writer's two loops opened twelve trials before the fork stopped them"
    );

    let r = dispatch(&state, &["--json", "journal", "verify"]);
    assert_eq!(r.code, 5);
    let v = json(&r);
    assert_eq!(v["status"], "forked", "{v}");
    assert_eq!(v["fork"]["branches"].as_array().unwrap().len(), 2, "{v}");
    the_spec_reader_agrees(&state);
    // The old writer's checkpoint names a branch's tail; the commands that use it refuse too.
    assert_eq!(dispatch(&state, &["trial", "open", "z"]).code, 5);

    assert_eq!(
        json(&ok(&state, &["--json", "journal", "repair"]))["status"],
        "merged"
    );
    let ids: Vec<Uuid> = every.iter().map(|f| f.1).collect();
    assert_eq!(dumped_ids(&state), ids);
    let names = trials(&state);
    assert_eq!(names.len(), 12, "{names:?}");
    assert!(names.iter().filter(|n| n.starts_with('a')).count() >= 1);
    assert!(names.iter().filter(|n| n.starts_with('b')).count() >= 1);
    assert_eq!(json(&ok(&state, &["--json", "audit"]))["status"], "ok");
    ok(&state, &["trial", "open", "after-the-merge"]);
    // Every event is an envelope the coordinator knows: nothing was read as Unknown.
    let r = ok(&state, &["journal", "dump", "--json"]);
    assert!(!r.stdout.contains("\"Unknown\""));
}
