//! One classification everywhere: for random journals with random damage, `journal verify`,
//! `journal dump`, `load` (every command that builds state), the writer's open (`journal
//! repair` and every writing command) and the reference classifier give the same verdict.
//! (`audit` reports `journal verify`'s report as its own.)

mod common;

use std::path::Path;

use common::*;
use dispatch::journal::scan::{self, Status};
use dispatch::journal::segment::{self, SEGMENT_HEADER_LEN};
use dispatch::journal::{self, JournalError, Options};
use dispatch::ops::journal as ops;
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

#[derive(Clone, Debug)]
enum Damage {
    None,
    Flip {
        at: usize,
        bit: u8,
    },
    Truncate {
        at: usize,
    },
    Append(Vec<u8>),
    Zeros(u16),
    /// A frame of the last segment whose CRCs and chain hold but whose payload does not
    /// decode (its first byte made `0xc1`, which MessagePack never uses), frames after it
    /// rechained.
    Undecodable {
        frame: usize,
    },
    /// The first event's kind changed to 101 (`PoolDetached`), the journal rechained.
    NotGenesis,
}

#[derive(Clone, Debug)]
struct Case {
    events: u8,
    small_segments: bool,
    segment_pick: usize,
    damage: Damage,
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Case {
        let damage = match u8::arbitrary(g) % 7 {
            0 => Damage::None,
            1 => Damage::Flip {
                at: usize::arbitrary(g),
                bit: u8::arbitrary(g) % 8,
            },
            2 => Damage::Truncate {
                at: usize::arbitrary(g),
            },
            3 => Damage::Append(Vec::<u8>::arbitrary(g)),
            4 => Damage::Zeros(u16::arbitrary(g) % 600 + 1),
            5 => Damage::Undecodable {
                frame: usize::arbitrary(g),
            },
            _ => Damage::NotGenesis,
        };
        Case {
            events: u8::arbitrary(g) % 40,
            small_segments: bool::arbitrary(g),
            segment_pick: usize::arbitrary(g),
            damage,
        }
    }
}

/// Build the case's journal and damage it; returns its files.
fn damaged_files(case: &Case) -> Vec<(String, Vec<u8>)> {
    let tmp = tempfile::tempdir().unwrap();
    let max_segment_bytes = if case.small_segments { 700 } else { 64 << 20 };
    build_journal(
        tmp.path(),
        usize::from(case.events),
        Options { max_segment_bytes },
    );
    let mut files: Vec<_> = snapshot_files(tmp.path())
        .into_iter()
        .filter(|(n, _)| segment::parse_file_name(n).is_some())
        .collect();
    let last = files.len() - 1;
    let pick = case.segment_pick % files.len();
    match &case.damage {
        Damage::None => {}
        Damage::Flip { at, bit } => {
            let b = &mut files[pick].1;
            let at = at % b.len();
            b[at] ^= 1 << bit;
        }
        Damage::Truncate { at } => {
            let b = &mut files[pick].1;
            let at = at % (b.len() + 1);
            b.truncate(at);
        }
        Damage::Append(noise) => files[last].1.extend_from_slice(noise),
        Damage::Zeros(n) => files[last]
            .1
            .extend(std::iter::repeat_n(0u8, usize::from(*n))),
        Damage::Undecodable { frame } => {
            let b = &mut files[last].1;
            let fr = frames(b);
            if !fr.is_empty() {
                let i = frame % fr.len();
                b[fr[i].start + dispatch::journal::frame::HEADER_LEN] = 0xc1;
                rechain_from(b, &fr, i);
            }
        }
        Damage::NotGenesis => {
            let b = &mut files[0].1;
            let fr = frames(b);
            b[fr[0].start + 16..fr[0].start + 18].copy_from_slice(&101u16.to_le_bytes());
            rechain_from(b, &fr, 0);
        }
    }
    assert!(files[0].1.len() >= SEGMENT_HEADER_LEN || pick == 0);
    files
}

fn verdict_of(result: Result<Status, JournalError>) -> String {
    match result {
        Ok(s) => s.as_str().to_owned(),
        Err(JournalError::Damaged { status, .. }) => status.as_str().to_owned(),
        Err(e) => format!("error: {e}"),
    }
}

fn verify(dir: &Path) -> (String, Option<(String, u64, u64)>) {
    match ops::verify(dir) {
        Ok(r) => (
            r.status.to_string(),
            Some((r.head, r.last_seq, r.damage.map_or(0, |d| d.offset))),
        ),
        Err(e) => (verdict_of(Err(e)), None),
    }
}

#[test]
fn every_command_classifies_random_damage_alike() {
    fn prop(case: Case) -> TestResult {
        let files = damaged_files(&case);
        let tmp = tempfile::tempdir().unwrap();
        let at = |name: &str| materialize(tmp.path(), name, &files);

        let (verified, verified_at) = verify(&at("verify"));
        let reference = scan::classify_with_reference_search(&at("reference"), None, |_| true)
            .unwrap()
            .status()
            .as_str()
            .to_owned();
        let dumped =
            verdict_of(ops::dump(&at("dump"), 1, u64::MAX, |_| Ok(())).map(|s| s.status()));
        let loaded = verdict_of(
            journal::load::<dispatch::state::State>(&at("load")).map(|l| l.scan.status()),
        );
        let repaired = match ops::repair(&at("repair")) {
            Ok(_) => "writable".to_owned(),
            Err(e) => verdict_of(Err(e)),
        };
        let writable = matches!(verified.as_str(), "clean" | "torn_tail");
        let repair_agrees = if writable {
            repaired == "writable"
        } else {
            repaired == verified
        };
        if verified != reference || dumped != verified || loaded != verified || !repair_agrees {
            return TestResult::error(format!(
                "{case:?}: verify {verified}, reference {reference}, dump {dumped}, \
                 load {loaded}, repair {repaired}"
            ));
        }
        // The head and offset verify reports are the classifier's.
        let scan = scan::classify(&at("classify"), None, |_| true).unwrap();
        let from_scan = (
            scan.head
                .as_ref()
                .map_or(String::new(), |h| hex::encode(h.chain)),
            scan.head.as_ref().map_or(0, |h| h.last_seq),
            scan.damage().as_ref().map_or(0, |d| d.offset),
        );
        if verified_at.is_some_and(|v| v != from_scan) {
            return TestResult::error(format!("{case:?}: verify's head/offset differ"));
        }
        TestResult::passed()
    }
    let tests = std::env::var("QUICKCHECK_TESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    QuickCheck::new()
        .tests(tests)
        .max_tests(tests * 4)
        .quickcheck(prop as fn(Case) -> TestResult);
}

#[test]
fn an_undecodable_payload_is_corrupt_for_repair_as_for_verify() {
    let case = Case {
        events: 5,
        small_segments: false,
        segment_pick: 0,
        damage: Damage::Undecodable { frame: 3 },
    };
    let files = damaged_files(&case);
    let tmp = tempfile::tempdir().unwrap();
    let dir = materialize(tmp.path(), "j", &files);
    assert_eq!(ops::verify(&dir).unwrap().status.as_str(), "corrupt");
    let before = snapshot_files(&dir);
    match ops::repair(&dir) {
        Err(JournalError::Damaged { status, damage, .. }) => {
            assert_eq!(status, Status::Corrupt);
            assert!(
                damage.reason.contains("does not decode"),
                "{}",
                damage.reason
            );
        }
        other => panic!("repair must refuse an undecodable payload: {other:?}"),
    }
    let after: Vec<_> = snapshot_files(&dir)
        .into_iter()
        .filter(|(n, _)| n != "LOCK")
        .collect();
    assert_eq!(after, before, "nothing was cut or written");
}
