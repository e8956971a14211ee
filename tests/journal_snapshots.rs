//! Snapshots are an accelerator, never a source of truth: one that disagrees with the journal
//! in any way is rejected (with a reason) and state comes from full replay; one that agrees
//! gives the same state as full replay while reading only the events after it.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use dispatch::journal::reader::snapshot_now;
use dispatch::journal::{self, snapshot, Loaded, Options, Writer};
use dispatch::state::State;

const BEFORE: usize = 150;
const AFTER: usize = 90;
const SEGMENT_BYTES: u64 = 8 << 10;

/// A journal over several segments with a snapshot taken after `BEFORE` events.
fn journal_with_snapshot(root: &Path, name: &str) -> (PathBuf, PathBuf) {
    let dir = root.join(name);
    let opts = Options {
        max_segment_bytes: SEGMENT_BYTES,
    };
    build_journal(&dir, BEFORE, opts.clone());
    let loaded = journal::load::<dispatch::state::State>(&dir).unwrap();
    let snap = snapshot_now(&dir, &loaded).unwrap();
    let w = Writer::open(&dir, opts).unwrap();
    for i in BEFORE..BEFORE + AFTER {
        w.append_one(pool_event(i)).unwrap();
    }
    (dir, snap)
}

/// State folded from every event, without snapshots.
fn full_replay(dir: &Path) -> State {
    let mut state = State::default();
    journal::replay(dir, None, |env| Ok(state.apply(&env)?)).unwrap();
    state
}

fn assert_rejected(dir: &Path, want_reason: &str, ctx: &str) -> Loaded<State> {
    let loaded = journal::load::<dispatch::state::State>(dir).unwrap();
    let why = loaded
        .snapshot_rejected
        .as_deref()
        .unwrap_or_else(|| panic!("{ctx}: the snapshot was not rejected"));
    assert!(why.contains(want_reason), "{ctx}: rejected because {why}");
    assert_eq!(loaded.snapshot_seq, None, "{ctx}");
    assert_eq!(
        loaded.state,
        full_replay(dir),
        "{ctx}: state is full replay's"
    );
    assert_eq!(
        loaded.scan.events,
        (1 + BEFORE + AFTER) as u64,
        "{ctx}: every event was read"
    );
    loaded
}

/// Rewrite a snapshot file's header field and recompute both CRCs, so that only the field's
/// meaning is wrong.
fn rewrite_header(path: &Path, at: std::ops::Range<usize>, value: &[u8]) {
    let mut b = std::fs::read(path).unwrap();
    b[at].copy_from_slice(value);
    reseal_snapshot(&mut b);
    std::fs::write(path, b).unwrap();
}

fn reseal_snapshot(b: &mut [u8]) {
    let crc = crc32fast::hash(&b[..92]);
    b[92..96].copy_from_slice(&crc.to_le_bytes());
    let n = b.len() - 4;
    let crc = crc32fast::hash(&b[..n]);
    b[n..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn a_valid_snapshot_gives_full_replay_state_from_the_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, snap) = journal_with_snapshot(tmp.path(), "j");
    let (covers, _) =
        snapshot::decode::<dispatch::state::State>(&std::fs::read(&snap).unwrap()).unwrap();
    assert!(covers.segment_no > 1, "the snapshot covers a later segment");
    let loaded = journal::load::<dispatch::state::State>(&dir).unwrap();
    assert_eq!(loaded.snapshot_rejected, None);
    assert_eq!(loaded.snapshot_seq, Some(1 + BEFORE as u64));
    assert_eq!(loaded.scan.events, AFTER as u64, "only the tail was read");
    assert_eq!(loaded.state, full_replay(&dir));
    assert_eq!(loaded.state.events, (1 + BEFORE + AFTER) as u64);
    assert!(!loaded.state.pools.pools.is_empty());

    // A snapshot of the head itself leaves nothing to read.
    snapshot_now(&dir, &loaded).unwrap();
    let again = journal::load::<dispatch::state::State>(&dir).unwrap();
    assert_eq!(
        (again.snapshot_seq, again.scan.events),
        (Some(loaded.state.events), 0)
    );
    assert_eq!(again.state, loaded.state);
}

#[test]
fn another_journals_snapshot_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, snap) = journal_with_snapshot(tmp.path(), "mine");
    // Same events at the same offsets: only the journal id and the chain tell them apart.
    let (_, theirs) = journal_with_snapshot(tmp.path(), "theirs");
    std::fs::remove_file(&snap).unwrap();
    std::fs::copy(&theirs, dir.join(theirs.file_name().unwrap())).unwrap();
    assert_rejected(&dir, "another journal", "a snapshot of another journal");
}

#[test]
fn a_snapshot_whose_chain_disagrees_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, snap) = journal_with_snapshot(tmp.path(), "j");
    rewrite_header(&snap, 40..72, &[0xAB; 32]);
    assert!(
        snapshot::decode::<dispatch::state::State>(&std::fs::read(&snap).unwrap()).is_ok(),
        "CRCs are valid"
    );
    assert_rejected(&dir, "another chain", "chain rewritten");
}

#[test]
fn a_snapshot_pointing_elsewhere_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, snap) = journal_with_snapshot(tmp.path(), "j");
    let original = std::fs::read(&snap).unwrap();
    let (covers, _) = snapshot::decode::<dispatch::state::State>(&original).unwrap();
    let seg = std::fs::read(segment_path(&dir, covers.segment_no)).unwrap();
    let fr = frames(&seg);
    let i = fr
        .iter()
        .position(|r| r.start as u64 == covers.frame_offset)
        .unwrap();
    let elsewhere = [
        ("the previous frame", fr[i - 1].start as u64, "seq"),
        ("inside the frame", covers.frame_offset + 9, "magic"),
        ("past the segment", seg.len() as u64 + 100, "outside"),
        ("into the header", 8, "outside"),
    ];
    for (what, offset, reason) in elsewhere {
        std::fs::write(&snap, &original).unwrap();
        rewrite_header(&snap, 80..88, &offset.to_le_bytes());
        assert_rejected(&dir, reason, what);
    }
    let mut other_segment = original.clone();
    other_segment[72..80].copy_from_slice(&(covers.segment_no - 1).to_le_bytes());
    reseal_snapshot(&mut other_segment);
    std::fs::write(&snap, &other_segment).unwrap();
    assert_rejected(&dir, "", "another segment");
    let mut missing_segment = original;
    missing_segment[72..80].copy_from_slice(&999u64.to_le_bytes());
    reseal_snapshot(&mut missing_segment);
    std::fs::write(&snap, &missing_segment).unwrap();
    assert_rejected(&dir, "cannot read", "a segment that does not exist");
}

#[test]
fn a_damaged_snapshot_file_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, snap) = journal_with_snapshot(tmp.path(), "j");
    let original = std::fs::read(&snap).unwrap();
    let n = original.len();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("a flipped state byte", flip(&original, 96 + 10), "CRC"),
        ("a flipped header byte", flip(&original, 33), "header CRC"),
        ("truncated", original[..n - 7].to_vec(), "length"),
        ("empty", Vec::new(), "not a snapshot"),
        ("zeroed", vec![0; n], "not a snapshot"),
    ];
    for (what, bytes, reason) in cases {
        std::fs::write(&snap, bytes).unwrap();
        assert_rejected(&dir, reason, what);
    }
    // State that no longer decodes, behind valid CRCs.
    let mut garbage = original.clone();
    garbage[96..n - 4].fill(0xc1);
    reseal_snapshot(&mut garbage);
    std::fs::write(&snap, garbage).unwrap();
    assert_rejected(&dir, "does not decode", "undecodable state");
    // A state of another length than the seq it claims to cover.
    let mut wrong_seq = original;
    wrong_seq[32..40].copy_from_slice(&7u64.to_le_bytes());
    reseal_snapshot(&mut wrong_seq);
    std::fs::write(&snap, wrong_seq).unwrap();
    assert_rejected(&dir, "", "seq rewritten");
}

fn flip(b: &[u8], at: usize) -> Vec<u8> {
    let mut b = b.to_vec();
    b[at] ^= 0x10;
    b
}

#[test]
fn a_snapshot_past_a_repaired_tail_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    build_journal(&dir, 40, Options::default());
    let loaded = journal::load::<dispatch::state::State>(&dir).unwrap();
    snapshot_now(&dir, &loaded).unwrap();
    // The covered frame is then torn away (as if its fsync had never returned) and repaired.
    let seg = segment_path(&dir, 1);
    let bytes = std::fs::read(&seg).unwrap();
    let last = frames(&bytes).pop().unwrap();
    std::fs::write(&seg, &bytes[..last.start + 3]).unwrap();
    drop(Writer::open(&dir, Options::default()).unwrap());
    assert_rejected_with_events(&dir, "", 41);
}

fn assert_rejected_with_events(dir: &Path, reason: &str, events: u64) {
    let loaded = journal::load::<dispatch::state::State>(dir).unwrap();
    let why = loaded.snapshot_rejected.expect("the snapshot was rejected");
    assert!(why.contains(reason), "{why}");
    assert_eq!(loaded.scan.events, events);
    assert_eq!(loaded.state, full_replay(dir));
}

/// Every writing command, offline ones included (`trial open` talks to no Slurm), writes a
/// snapshot once the tail since the newest one passes `SNAPSHOT_EVERY` events.
#[test]
fn an_offline_writing_command_writes_a_snapshot_past_the_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let dir = state.join("journal");
    let w = Writer::open(&dir, Options::default()).unwrap();
    let n = journal::reader::SNAPSHOT_EVERY as usize + 5;
    for chunk in (0..n).collect::<Vec<_>>().chunks(2_000) {
        w.append(chunk.iter().map(|&i| pool_event(i)).collect())
            .unwrap();
    }
    drop(w);
    assert!(snapshot::list(&dir).unwrap().is_empty());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--state-dir")
        .arg(&state)
        .args(["trial", "open", "t1"])
        .env_remove("DISPATCH_FAILPOINTS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snaps = snapshot::list(&dir).unwrap();
    assert_eq!(snaps.len(), 1, "a snapshot after the command");
    let loaded = journal::load::<dispatch::state::State>(&dir).unwrap();
    assert!(loaded.snapshot_seq.is_some_and(|s| s > n as u64));
}

/// journal-format.md §9, the rules a reader checks without knowing the state layout: reserved
/// bytes are 0, and the file name's seq is the seq the header covers.
#[test]
fn a_snapshot_with_reserved_bytes_set_or_a_name_its_header_denies_is_rejected() {
    for at in 10..16 {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, snap) = journal_with_snapshot(tmp.path(), "j");
        rewrite_header(&snap, at..at + 1, &[1]);
        assert_rejected(&dir, "reserved bytes", &format!("reserved byte {at}"));
    }
    // The newest snapshot by name is the one tried; one renamed to look newer is not used.
    let tmp = tempfile::tempdir().unwrap();
    let (dir, snap) = journal_with_snapshot(tmp.path(), "j");
    let later = dir.join(snapshot::file_name(1 + (BEFORE + AFTER) as u64));
    std::fs::rename(&snap, &later).unwrap();
    assert_rejected(&dir, "named for seq", "renamed to a later seq");
}

/// `catch_up` is a whole load by other means: from a state read at any point, with any number of
/// events appended since (across segment ends), it gives the whole replay's state; when the
/// frame it read last is no longer there as it was (here: another journal stands in the
/// directory) it reads the journal whole instead.
#[test]
fn catching_up_gives_the_state_a_whole_load_gives() {
    fn case(first: u8, then: u8, rewrite: bool) -> quickcheck::TestResult {
        let (first, then) = (usize::from(first % 60) + 1, usize::from(then % 60));
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("j");
        let opts = Options {
            max_segment_bytes: 2 << 10,
        };
        build_journal(&dir, first, opts.clone());
        let read = journal::load::<State>(&dir).unwrap();
        if rewrite {
            std::fs::remove_dir_all(&dir).unwrap();
            build_journal(&dir, first, opts.clone());
        }
        let w = Writer::open(&dir, opts).unwrap();
        for i in first..first + then {
            w.append_one(pool_event(i + 1000)).unwrap();
        }
        drop(w);
        let caught_up = journal::reader::catch_up(&dir, read).unwrap();
        let whole = journal::load::<State>(&dir).unwrap();
        let read_whole = rewrite.then_some(whole.scan.events);
        quickcheck::TestResult::from_bool(
            caught_up.state == whole.state
                && caught_up.state == full_replay(&dir)
                && caught_up.scan.head.as_ref().map(|h| h.last_seq)
                    == whole.scan.head.as_ref().map(|h| h.last_seq)
                && read_whole.unwrap_or(then as u64) == caught_up.scan.events,
        )
    }
    quickcheck::QuickCheck::new()
        .tests(60)
        .quickcheck(case as fn(u8, u8, bool) -> quickcheck::TestResult);
}
