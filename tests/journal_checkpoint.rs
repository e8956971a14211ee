//! The writer's checkpoint (journal-format.md §7.2): the open checks only what a crash can
//! have damaged, from a point a writer verified; a stale, damaged or lying checkpoint only
//! makes it check more, never less than what a crash can produce at the tail.

mod common;

use std::path::Path;

use common::*;
use dispatch::journal::checkpoint::{self, CHECKPOINT_FILE};
use dispatch::journal::{frame, segment, JournalError, Options, Status, Writer};
use dispatch::ops::journal as ops;
use quickcheck::{QuickCheck, TestResult};

const EVENTS: usize = 300;

fn crc_bytes_of_open(dir: &Path) -> (u64, Result<Writer, JournalError>) {
    let before = frame::crc_bytes_on_this_thread();
    let w = Writer::open(dir, Options::default());
    (frame::crc_bytes_on_this_thread() - before, w)
}

#[test]
fn an_open_after_a_clean_close_reads_only_the_last_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    build_journal(&dir, EVENTS, Options::default());
    assert!(dir.join(CHECKPOINT_FILE).exists());
    let len = std::fs::metadata(segment_path(&dir, 1)).unwrap().len();
    let (with, w) = crc_bytes_of_open(&dir);
    assert_eq!(w.unwrap().next_seq(), EVENTS as u64 + 2);
    // The frame the checkpoint names, and nothing else: not a function of the journal.
    assert!(with < 1_000, "{with} CRC bytes with a checkpoint");
    std::fs::remove_file(dir.join(CHECKPOINT_FILE)).unwrap();
    let (without, w) = crc_bytes_of_open(&dir);
    assert_eq!(w.unwrap().next_seq(), EVENTS as u64 + 2);
    assert!(without >= len - 96, "{without} CRC bytes without one");
}

/// A crash between the append and the checkpoint update leaves the previous checkpoint: the
/// open scans the longer tail, and a torn tail there is still cut.
#[test]
fn a_stale_checkpoint_is_a_longer_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("j");
    build_journal(&dir, 20, Options::default());
    let stale = std::fs::read(dir.join(CHECKPOINT_FILE)).unwrap();
    {
        let w = Writer::open(&dir, Options::default()).unwrap();
        for i in 0..30 {
            w.append_one(pool_event(i)).unwrap();
        }
    }
    std::fs::write(dir.join(CHECKPOINT_FILE), &stale).unwrap();
    // Half a frame after the last durable one.
    let seg = segment_path(&dir, 1);
    let mut b = std::fs::read(&seg).unwrap();
    let last = frames(&b).pop().unwrap();
    let half = b[last.clone()].to_vec();
    b.extend_from_slice(&half[..half.len() / 2]);
    std::fs::write(&seg, &b).unwrap();
    let w = Writer::open(&dir, Options::default()).unwrap();
    assert!(w.opened().repaired.is_some(), "the torn tail is cut");
    // Genesis, 20, 30, Recovered.
    assert_eq!(w.next_seq(), 1 + 20 + 30 + 1 + 1);
    drop(w);
    assert_eq!(ops::verify(&dir).unwrap().status.as_str(), "clean");
}

/// A damaged checkpoint, or one that names bytes that are not there, is not used: the open
/// classifies everything, and refuses damage anywhere.
#[test]
fn a_damaged_or_lying_checkpoint_means_a_full_check() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    build_journal(&base, 40, Options::default());
    let files = snapshot_files(&base);
    let seg_name = segment::file_name(1);
    let seg = files
        .iter()
        .find(|(n, _)| *n == seg_name)
        .unwrap()
        .1
        .clone();
    let fr = frames(&seg);
    let mut damaged = seg.clone();
    damaged[fr[10].start + 30] ^= 0x04;
    let ck = files
        .iter()
        .find(|(n, _)| n == CHECKPOINT_FILE)
        .unwrap()
        .1
        .clone();
    let mut flipped = ck.clone();
    flipped[50] ^= 1;
    let c = checkpoint::Checkpoint::decode(&ck).unwrap();
    let lying = checkpoint::Checkpoint {
        segment_len: c.segment_len + 1,
        ..c.clone()
    }
    .encode()
    .to_vec();
    for (what, ck) in [
        ("flipped", flipped),
        ("lying", lying),
        ("empty", Vec::new()),
    ] {
        let dir = materialize(
            tmp.path(),
            what,
            &[
                (seg_name.clone(), damaged.clone()),
                (CHECKPOINT_FILE.to_owned(), ck),
            ],
        );
        assert!(checkpoint::trusted_point(&dir).is_err(), "{what}");
        match Writer::open(&dir, Options::default()) {
            Err(JournalError::Damaged { status, .. }) => assert_eq!(status, Status::Corrupt),
            other => panic!("{what}: {:?}", other.map(|w| w.next_seq())),
        }
    }
    // A checkpoint of another journal is not used either.
    let other = tmp.path().join("other");
    build_journal(&other, 3, Options::default());
    let foreign = std::fs::read(other.join(CHECKPOINT_FILE)).unwrap();
    let dir = materialize(
        tmp.path(),
        "foreign",
        &[
            (seg_name.clone(), seg.clone()),
            (CHECKPOINT_FILE.to_owned(), foreign),
        ],
    );
    assert!(checkpoint::trusted_point(&dir).is_err());
    assert_eq!(
        Writer::open(&dir, Options::default()).unwrap().next_seq(),
        42
    );
}

/// For a checkpoint at any frame of a clean journal and any damage after it (what a crash, or
/// worse, can leave at the tail), the open accepts exactly when a full verify says the
/// journal is writable (clean or torn tail), and with the same verdict when it refuses.
#[test]
fn the_checkpointed_open_accepts_what_a_full_verify_accepts() {
    fn prop(at_frame: usize, kind: u8, pos: usize, noise: Vec<u8>) -> TestResult {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base");
        build_journal(&base, 25, Options::default());
        let seg_name = segment::file_name(1);
        let seg = std::fs::read(base.join(&seg_name)).unwrap();
        let fr = frames(&seg);
        let k = at_frame % fr.len();
        let c = checkpoint::Checkpoint {
            journal_id: seg[16..32].try_into().unwrap(),
            segment_no: 1,
            segment_len: fr[k].end as u64,
            last_seq: k as u64 + 1,
            last_frame_offset: fr[k].start as u64,
            chain: seg[fr[k].end - 36..fr[k].end - 4].try_into().unwrap(),
        };
        let tail_start = fr[k].end;
        let mut b = seg.clone();
        let tail_len = b.len() - tail_start;
        match kind % 5 {
            0 => b.truncate(tail_start + pos % (tail_len + 1)),
            1 => b.extend_from_slice(&noise),
            2 => b.extend(std::iter::repeat_n(0, pos % 700 + 1)),
            3 if tail_len > 0 => {
                let at = tail_start + pos % tail_len;
                b[at] ^= 1 << (pos % 8);
            }
            _ => {
                let at = tail_start + pos % (tail_len + 1);
                b.splice(at..at, noise.iter().copied());
            }
        }
        let files = [
            (seg_name.clone(), b),
            (CHECKPOINT_FILE.to_owned(), c.encode().to_vec()),
        ];
        let full = materialize(tmp.path(), "full", &files[..1]);
        let verdict = ops::verify(&full).unwrap().status.as_str();
        let dir = materialize(tmp.path(), "ck", &files);
        if checkpoint::trusted_point(&dir).is_err() {
            return TestResult::error("a checkpoint of a verified frame must be used");
        }
        let opened = match Writer::open(&dir, Options::default()) {
            Ok(_) => "writable".to_owned(),
            Err(JournalError::Damaged { status, .. }) => status.as_str().to_owned(),
            Err(e) => format!("error {e}"),
        };
        let agrees = match verdict {
            "clean" | "torn_tail" => opened == "writable",
            v => opened == v,
        };
        if !agrees {
            return TestResult::error(format!(
                "checkpoint at frame {k}, damage {kind}: verify {verdict}, open {opened}"
            ));
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(150)
        .quickcheck(prop as fn(usize, u8, usize, Vec<u8>) -> TestResult);
}
