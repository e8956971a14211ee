//! The crash matrix (peers-and-journals.md §D.5.1): every way a crash can leave the end of a
//! journal must read as a torn tail and repair to the valid prefix with an audit record; every
//! other kind of damage must read as corrupt or tampered and be left exactly as found.

mod common;

use std::path::Path;

use common::*;
use dispatch::event::Event;
use dispatch::journal::frame;
use dispatch::journal::scan::Status;
use dispatch::journal::segment::SEGMENT_HEADER_LEN;
use dispatch::journal::{self, JournalError, Options, Writer};
use dispatch::ops::journal as ops;
use sha2::{Digest, Sha256};

/// Events appended after Genesis: the brief asks for a journal of at least 50.
const EVENTS: usize = 60;

fn base_journal(root: &Path) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let dir = root.join("base");
    build_journal(&dir, EVENTS, Options::default());
    let bytes = std::fs::read(segment_path(&dir, 1)).unwrap();
    let fr = frames(&bytes);
    assert_eq!(fr.len(), EVENTS + 1, "Genesis plus the appended events");
    (bytes, fr)
}

fn seg1(bytes: Vec<u8>) -> Vec<(String, Vec<u8>)> {
    vec![(dispatch::journal::segment::file_name(1), bytes)]
}

/// The journal must be refused and left byte for byte as it was, by every entry point that
/// could write: `Writer::open` and `ops::journal::repair`.
fn assert_refused_untouched(dir: &Path, want: Status, ctx: &str) {
    let before = files_but_lock(dir);
    let scan = scan_dir(dir);
    assert_eq!(scan.status(), want, "{ctx}: scan says {:?}", scan.damage());
    assert!(
        !scan.damage().as_ref().unwrap().reason.is_empty(),
        "{ctx}: damage needs a reason"
    );
    let report = ops::verify(dir).unwrap_or_else(|e| panic!("{ctx}: verify failed: {e}"));
    assert_eq!(report.status, want, "{ctx}: verify");
    match Writer::open(dir, Options::default()) {
        Err(JournalError::Damaged { status, .. }) => assert_eq!(status, want, "{ctx}"),
        Err(e) => panic!("{ctx}: Writer::open failed with {e}, not Damaged"),
        Ok(_) => panic!("{ctx}: Writer::open accepted a {want:?} journal"),
    }
    assert!(
        matches!(ops::repair(dir), Err(JournalError::Damaged { .. })),
        "{ctx}: repair must refuse"
    );
    assert_eq!(
        files_but_lock(dir),
        before,
        "{ctx}: the journal was modified"
    );
}

/// The lock file is created by any opener; it holds no journal data. The checkpoint a
/// successful writer leaves is not journal data either (the cases below damage segments as a
/// disk or an attacker would, with no checkpoint vouching for them; checkpoints have their
/// own tests).
fn files_but_lock(dir: &Path) -> Vec<(String, Vec<u8>)> {
    snapshot_files(dir)
        .into_iter()
        .filter(|(n, _)| {
            n != journal::writer::LOCK_FILE && n != journal::checkpoint::CHECKPOINT_FILE
        })
        .collect()
}

/// Repair a torn journal and check everything the repair promises: the valid prefix kept byte
/// for byte, the cut bytes saved beside the segment, a `Recovered` event that names them, and a
/// clean journal afterwards.
fn assert_repairs_to_prefix(dir: &Path, original: &[u8], valid_len: usize, via_ops: bool) {
    let seg = segment_path(dir, 1);
    let damaged = std::fs::read(&seg).unwrap();
    let cut = damaged[valid_len..].to_vec();
    let frames_before = frames(&damaged[..valid_len]).len();

    let recovered = if via_ops {
        let r = ops::repair(dir).expect("repair a torn tail");
        assert_eq!(r.status.as_str(), "repaired");
        r.recovered.expect("repair reports what it cut")
    } else {
        let w = Writer::open(dir, Options::default()).expect("open repairs a torn tail");
        w.opened()
            .repaired
            .clone()
            .expect("open reports what it cut")
    };
    assert_eq!(recovered.offset, valid_len as u64);
    assert_eq!(recovered.length, cut.len() as u64);
    let sha: [u8; 32] = Sha256::digest(&cut).into();
    assert_eq!(recovered.sha256.0, sha);
    let saved = std::fs::read(dir.join(&recovered.saved_as)).expect("cut bytes are kept");
    assert_eq!(saved, cut, "the saved file holds exactly the cut bytes");
    assert!(recovered.saved_as.starts_with("segment-00000001.djl."));

    let after = std::fs::read(&seg).unwrap();
    assert_eq!(
        &after[..valid_len],
        &original[..valid_len],
        "the valid prefix is kept byte for byte"
    );
    let fr = frames(&after);
    assert_eq!(
        fr.len(),
        frames_before + 1,
        "prefix plus one Recovered frame"
    );
    assert_eq!(fr[frames_before].start, valid_len);

    let mut last = None;
    journal::replay(dir, None, |env| {
        last = Some(env);
        Ok(())
    })
    .unwrap();
    let last = last.unwrap();
    assert_eq!(last.seq as usize, frames_before + 1);
    assert_eq!(last.event, Event::Recovered(recovered));

    let v = ops::verify(dir).unwrap();
    assert_eq!((v.status.as_str(), v.damage.is_none()), ("clean", true));
}

#[test]
fn every_cut_inside_the_last_frame_is_a_torn_tail_and_repairs_to_the_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let (bytes, fr) = base_journal(tmp.path());
    let last = fr.last().unwrap().clone();
    for cut in last.start + 1..last.end {
        let ctx = format!("cut at {cut} (last frame {last:?})");
        let dir = materialize(
            tmp.path(),
            &format!("cut-{cut}"),
            &seg1(bytes[..cut].to_vec()),
        );
        let scan = scan_dir(&dir);
        assert_eq!(
            scan.status(),
            Status::TornTail,
            "{ctx}: {:?}",
            scan.damage()
        );
        let damage = scan.damage().unwrap();
        assert_eq!(damage.offset, last.start as u64, "{ctx}");
        assert_eq!(damage.bytes, (cut - last.start) as u64, "{ctx}");
        assert_eq!(
            scan.events, EVENTS as u64,
            "{ctx}: the N-1 whole frames are read"
        );
        let v = ops::verify(&dir).unwrap();
        assert_eq!(v.status.as_str(), "torn_tail", "{ctx}");
        assert_eq!(v.last_seq, EVENTS as u64, "{ctx}");
        assert_repairs_to_prefix(&dir, &bytes, last.start, cut % 2 == 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_cut_at_a_frame_boundary_is_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let (bytes, fr) = base_journal(tmp.path());
    for r in [&fr[0], &fr[EVENTS / 2], &fr[EVENTS - 1]] {
        let dir = materialize(
            tmp.path(),
            &format!("b{}", r.end),
            &seg1(bytes[..r.end].to_vec()),
        );
        assert_eq!(scan_dir(&dir).status(), Status::Clean);
        let w = Writer::open(&dir, Options::default()).unwrap();
        assert!(
            w.opened().repaired.is_none(),
            "nothing to repair at a boundary"
        );
    }
}

#[test]
fn zero_filled_tails_are_torn() {
    let tmp = tempfile::tempdir().unwrap();
    let (bytes, fr) = base_journal(tmp.path());
    for n in [512usize, 4096] {
        assert!(
            bytes.len() - n > SEGMENT_HEADER_LEN + 1000,
            "journal long enough"
        );
        // Overwritten in place: blocks the file system allocated but never wrote.
        let mut zeroed = bytes.clone();
        let len = zeroed.len();
        zeroed[len - n..].fill(0);
        let dir = materialize(tmp.path(), &format!("over-{n}"), &seg1(zeroed));
        let scan = scan_dir(&dir);
        assert_eq!(
            scan.status(),
            Status::TornTail,
            "last {n} zeroed: {:?}",
            scan.damage()
        );
        let valid = fr.iter().rfind(|r| r.end <= len - n).unwrap().end;
        assert_eq!(scan.damage().unwrap().offset, valid as u64);
        assert_eq!(ops::verify(&dir).unwrap().status.as_str(), "torn_tail");
        assert_repairs_to_prefix(&dir, &bytes, valid, n == 512);

        // Appended: a size update that reached the disk before the data did.
        let mut grown = bytes.clone();
        grown.resize(len + n, 0);
        let dir = materialize(tmp.path(), &format!("grown-{n}"), &seg1(grown));
        let scan = scan_dir(&dir);
        assert_eq!(scan.status(), Status::TornTail, "{n} zeros appended");
        assert_eq!(scan.damage().unwrap().offset, len as u64);
        assert_repairs_to_prefix(&dir, &bytes, len, n != 512);
    }
}

#[test]
fn a_bit_flip_in_every_byte_of_a_middle_frame_is_corrupt_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let (bytes, fr) = base_journal(tmp.path());
    let mid = fr[EVENTS / 2].clone();
    for at in mid.clone() {
        let mut b = bytes.clone();
        b[at] ^= 1 << (at % 8);
        let dir = materialize(tmp.path(), &format!("flip-{at}"), &seg1(b));
        let ctx = format!("flip at {at} in frame {mid:?}");
        assert_refused_untouched(&dir, Status::Corrupt, &ctx);
        assert_eq!(
            scan_dir(&dir).damage().unwrap().offset,
            mid.start as u64,
            "{ctx}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_zeroed_block_mid_file_is_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let (bytes, _) = base_journal(tmp.path());
    // HyperQueue #1059: zeroed 4 KiB blocks well before the end of the journal.
    for start in [SEGMENT_HEADER_LEN, 4096, bytes.len() / 2 - 2048] {
        assert!(
            start + 4096 + 1000 < bytes.len(),
            "valid frames follow the block"
        );
        let mut b = bytes.clone();
        b[start..start + 4096].fill(0);
        let dir = materialize(tmp.path(), &format!("zero-{start}"), &seg1(b));
        assert_refused_untouched(&dir, Status::Corrupt, &format!("zeroed 4 KiB at {start}"));
    }
}

#[test]
fn duplicated_and_swapped_frames_are_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let (bytes, fr) = base_journal(tmp.path());
    let (a, b) = (fr[20].clone(), fr[21].clone());

    let mut dup = bytes[..a.end].to_vec();
    dup.extend_from_slice(&bytes[a.clone()]);
    dup.extend_from_slice(&bytes[a.end..]);
    let dir = materialize(tmp.path(), "dup", &seg1(dup));
    assert_refused_untouched(&dir, Status::Corrupt, "duplicated frame");
    assert!(scan_dir(&dir).damage().unwrap().reason.contains("seq"));

    // The last frame duplicated: nothing follows it, yet it is no torn write.
    let last = fr.last().unwrap().clone();
    let mut dup_last = bytes.clone();
    dup_last.extend_from_slice(&bytes[last]);
    let dir = materialize(tmp.path(), "dup-last", &seg1(dup_last));
    assert_refused_untouched(&dir, Status::Corrupt, "duplicated last frame");

    let mut swapped = bytes[..a.start].to_vec();
    swapped.extend_from_slice(&bytes[b.clone()]);
    swapped.extend_from_slice(&bytes[a]);
    swapped.extend_from_slice(&bytes[b.end..]);
    assert_eq!(swapped.len(), bytes.len());
    let dir = materialize(tmp.path(), "swap", &seg1(swapped));
    assert_refused_untouched(&dir, Status::Corrupt, "swapped frames");
}

#[test]
fn a_payload_rewritten_with_valid_crcs_is_tampered() {
    let tmp = tempfile::tempdir().unwrap();
    let (bytes, fr) = base_journal(tmp.path());
    for (i, r) in [fr[25].clone(), fr.last().unwrap().clone()]
        .into_iter()
        .enumerate()
    {
        let mut b = bytes.clone();
        // Change a byte well inside the payload; the frame still decodes as MessagePack or not,
        // it does not matter: the chain is checked before the payload is decoded.
        let at = r.start + frame::HEADER_LEN + 5;
        b[at] ^= 0x20;
        reseal_crcs(&mut b, r.clone());
        assert!(frame::decode(&b[r.start..]).is_ok(), "CRCs are valid again");
        let dir = materialize(tmp.path(), &format!("tamper-{i}"), &seg1(b));
        assert_refused_untouched(&dir, Status::Tampered, &format!("payload of {r:?}"));
        let d = scan_dir(&dir).damage().cloned().unwrap();
        assert_eq!(d.offset, r.start as u64);
        assert!(d.reason.contains("chain"), "{}", d.reason);
    }
}

/// A journal spread over several small segments.
fn segmented(root: &Path) -> (Vec<(String, Vec<u8>)>, usize) {
    let dir = root.join("segmented");
    build_journal(
        &dir,
        EVENTS,
        Options {
            max_segment_bytes: 2048,
        },
    );
    let files = files_but_lock(&dir);
    let n = files.len();
    assert!(n >= 4, "expected several segments, got {n}");
    assert_eq!(scan_dir(&dir).status(), Status::Clean);
    (files, n)
}

#[test]
fn damage_in_an_older_segment_is_corrupt_even_at_its_end() {
    let tmp = tempfile::tempdir().unwrap();
    let (files, n) = segmented(tmp.path());
    for victim in [0, n - 2] {
        let name = files[victim].0.clone();
        let seg = &files[victim].1;
        let fr = frames(seg);
        let last = fr.last().unwrap().clone();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("cut inside its last frame", seg[..last.start + 7].to_vec()),
            ("cut at its last frame boundary", seg[..last.start].to_vec()),
            ("its last 512 bytes zeroed", {
                let mut s = seg.clone();
                let l = s.len();
                s[l - 512..].fill(0);
                s
            }),
            ("zeros appended to it", {
                let mut s = seg.clone();
                s.resize(s.len() + 512, 0);
                s
            }),
            ("a flip in its last frame CRC", {
                let mut s = seg.clone();
                let l = s.len();
                s[l - 1] ^= 0x80;
                s
            }),
        ];
        for (what, damaged) in cases {
            let mut fs = files.clone();
            fs[victim].1 = damaged;
            let dir = materialize(
                tmp.path(),
                &format!("{victim}-{}", what.replace(' ', "-")),
                &fs,
            );
            let ctx = format!("{name}: {what}");
            assert_refused_untouched(&dir, Status::Corrupt, &ctx);
        }
    }

    // The same cut in the newest segment is an ordinary torn tail.
    let mut fs = files.clone();
    let last_seg = &mut fs[n - 1].1;
    let l = frames(last_seg).last().unwrap().start + 7;
    last_seg.truncate(l);
    let dir = materialize(tmp.path(), "newest", &fs);
    assert_eq!(scan_dir(&dir).status(), Status::TornTail);
}

#[test]
fn a_missing_middle_segment_is_corrupt() {
    let tmp = tempfile::tempdir().unwrap();
    let (files, n) = segmented(tmp.path());
    for gone in [1, n / 2] {
        let mut fs = files.clone();
        let removed = fs.remove(gone).0;
        let dir = materialize(tmp.path(), &format!("gone-{gone}"), &fs);
        assert_refused_untouched(&dir, Status::Corrupt, &format!("{removed} removed"));
        assert!(scan_dir(&dir).damage().unwrap().reason.contains("missing"));
    }
    // Without its first segment a journal cannot be checked from genesis.
    let dir = materialize(tmp.path(), "no-first", &files[1..]);
    assert_refused_untouched(&dir, Status::Corrupt, "first segment removed");
}

#[test]
fn a_file_that_is_not_a_journal_is_corrupt_and_never_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let script = b"#!/bin/sh\n# not a journal, whatever its name\nrm -rf \"$HOME/scratch\"\n";
    let long = {
        let mut s = script.to_vec();
        while s.len() < 4096 {
            s.extend_from_slice(b"echo padding padding padding padding padding\n");
        }
        s
    };
    for (i, content) in [script.to_vec(), long, Vec::new(), b"DISPJRN".to_vec()]
        .into_iter()
        .enumerate()
    {
        let dir = materialize(tmp.path(), &format!("script-{i}"), &seg1(content.clone()));
        assert_refused_untouched(&dir, Status::Corrupt, &format!("non-journal #{i}"));
        let d = ops::verify(&dir).unwrap().damage.unwrap();
        assert_eq!(d.segment, "segment-00000001.djl");
        assert!(!d.reason.is_empty());
        assert_eq!(std::fs::read(segment_path(&dir, 1)).unwrap(), content);
    }
    // A stranger after valid segments is refused too.
    let (mut files, _) = segmented(tmp.path());
    let next = files.len() as u64 + 1;
    files.push((dispatch::journal::segment::file_name(next), script.to_vec()));
    let dir = materialize(tmp.path(), "script-after", &files);
    assert_refused_untouched(&dir, Status::Corrupt, "script as the newest segment");
}

#[test]
fn an_undecodable_payload_under_valid_crcs_and_chain_is_corrupt_at_its_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let (bytes, fr) = base_journal(tmp.path());
    let k = 30;
    let seq = k as u64 + 1; // frame 0 is Genesis, seq 1
    let mut b = bytes.clone();
    // 0xc1 is the one byte MessagePack never uses: no reader can make sense of this payload.
    b[fr[k].start + frame::HEADER_LEN..fr[k].end - 36].fill(0xc1);
    rechain_from(&mut b, &fr, k);
    let dir = materialize(tmp.path(), "undecodable", &seg1(b));
    // The frame walk sees it in every mode, decoding or not: a payload that is not one
    // MessagePack value breaks §6's one-value rule, which the scan checks itself so that
    // `load` (decoding on another thread) and `verify` agree.
    assert_eq!(scan_dir(&dir).status(), Status::Corrupt);
    let v = ops::verify(&dir).unwrap();
    assert_eq!(v.status, Status::Corrupt);
    let d = v.damage.unwrap();
    assert!(d.reason.contains(&format!("event {seq} ")), "{}", d.reason);
    assert_eq!(
        d.offset, fr[k].start as u64,
        "damage points at the bad frame"
    );
    assert_eq!(d.bytes, fr[k].len() as u64);
    assert_eq!(
        v.last_seq,
        seq - 1,
        "the last event that reads is the one before"
    );
    // Every reader takes the classifier's verdict: corrupt, at that frame.
    match journal::load::<dispatch::state::State>(&dir) {
        Err(JournalError::Damaged { status, damage, .. }) => {
            assert_eq!(status, Status::Corrupt);
            assert_eq!(damage.offset, fr[k].start as u64);
        }
        other => panic!("load must refuse an undecodable payload: {other:?}"),
    }
}
