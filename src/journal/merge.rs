//! Merging a fork (journal-format.md §8.1): the segment is rebuilt as its trunk, one
//! `JournalMerged` event, then every frame of the fork's region in file order, renumbered and
//! re-chained with its payload unchanged. The new segment is written beside the old one and
//! renamed over it, so a crash leaves either the fork or the merge, never half of one; the old
//! segment is kept whole under another name first.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::error::JournalError;
use super::files::{fsync_dir, io_err};
use super::fork::Fork;
use super::frame;
use crate::event::{self, Actor, JournalMerged, MergedBranch, Micros, Vocabulary};
use crate::failpoint;

/// The name the segment is kept under: its name, the region's offset and the first 12 hex
/// digits of the region's SHA-256 (the same fork always gets the same name).
fn saved_name(segment_name: &str, offset: u64, sha: &[u8; 32]) -> String {
    format!("{segment_name}.forked-{offset}-{}", hex::encode(&sha[..6]))
}

/// The record of merging `fork`, as the merge will write it.
fn record(segment_name: &str, fork: &Fork, region: &[u8]) -> JournalMerged {
    let sha: [u8; 32] = Sha256::digest(region).into();
    JournalMerged {
        segment: segment_name.to_owned(),
        offset: fork.offset,
        length: fork.bytes,
        sha256: event::Sha256Digest(sha),
        saved_as: saved_name(segment_name, fork.offset, &sha),
        common_seq: fork.common_seq,
        branches: fork
            .branches
            .iter()
            .map(|b| MergedBranch {
                forked_after_seq: b.forked_after_seq,
                first_seq: b.first_seq,
                last_seq: b.last_seq,
                events: b.events,
            })
            .collect(),
        events: fork.frames.len() as u64,
        reason: fork.describe(),
    }
}

/// The segment as the merge leaves it: `bytes` up to the fork, the `JournalMerged` frame, then
/// the region's frames. Pure, so that the properties can check it without a file.
pub fn merged_segment<E: Vocabulary>(
    bytes: &[u8],
    fork: &Fork,
    merged: &JournalMerged,
    time: Micros,
    id: &Uuid,
    actor: &Actor,
) -> Result<Vec<u8>, JournalError> {
    let at = fork.offset as usize;
    assert_eq!(
        at as u64 + fork.bytes,
        bytes.len() as u64,
        "the fork ends the segment"
    );
    let mut out = Vec::with_capacity(bytes.len() + 4096);
    out.extend_from_slice(&bytes[..at]);
    let mut payload = Vec::new();
    let event = E::merged(merged.clone());
    event::encode_payload(&mut payload, time, id, actor, &event).map_err(|e| {
        JournalError::Poisoned(format!("the JournalMerged event does not encode: {e}"))
    })?;
    let mut seq = fork.trunk_seq + 1;
    let mut chain = frame::encode(
        &mut out,
        &fork.trunk_chain,
        seq,
        event.kind(),
        event.flags(),
        &payload,
    );
    for &(offset, len) in &fork.frames {
        let f = frame::decode(&bytes[offset as usize..]).expect("the fork's frames are valid");
        assert_eq!(
            f.len() as u64,
            len,
            "the fork's frame list matches the bytes"
        );
        seq += 1;
        chain = frame::encode(&mut out, &chain, seq, f.kind, f.flags, f.payload);
    }
    assert_eq!(
        out.len() as u64,
        bytes.len() as u64 + (payload.len() + frame::OVERHEAD) as u64,
        "every frame keeps its length; one frame is added"
    );
    Ok(out)
}

/// Merge the fork found in `segment` and return its record. The caller holds the writer's lock
/// and lease, and has just classified the journal: the file must still be as it was then.
pub(crate) fn merge_fork<E: Vocabulary>(
    segment: &Path,
    fork: &Fork,
    actor: &Actor,
) -> Result<JournalMerged, JournalError> {
    let bytes = std::fs::read(segment).map_err(io_err(segment, "read segment"))?;
    if bytes.len() as u64 != fork.offset + fork.bytes {
        return Err(JournalError::TailMoved {
            segment: segment.display().to_string(),
            expected_len: fork.offset + fork.bytes,
            expected_chain: hex::encode(fork.end_chain),
            found: format!("{} bytes", bytes.len()),
            written: false,
        });
    }
    let dir = segment.parent().expect("segments live in a directory");
    let name = segment
        .file_name()
        .and_then(|n| n.to_str())
        .expect("segment names are ASCII");
    let merged = record(name, fork, &bytes[fork.offset as usize..]);
    let new = merged_segment::<E>(&bytes, fork, &merged, Micros::now(), &Uuid::new_v4(), actor)?;

    // The old segment, whole, under its saved name: a second link to the same file. A merge
    // that stopped after this step left it already; the name says it is the same fork.
    let saved = dir.join(&merged.saved_as);
    match std::fs::hard_link(segment, &saved) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err(&saved, "keep the forked segment")(e)),
    }
    let temp = dir.join(format!(".{name}.merging"));
    let mut f = super::files::private_file()
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temp)
        .map_err(io_err(&temp, "write the merged segment"))?;
    f.write_all(&new)
        .map_err(io_err(&temp, "write the merged segment"))?;
    f.sync_all()
        .map_err(io_err(&temp, "fsync the merged segment"))?;
    fsync_dir(dir)?;
    failpoint::hit("journal-merge-before-rename");
    std::fs::rename(&temp, segment).map_err(io_err(segment, "put the merged segment in place"))?;
    fsync_dir(dir)?;
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use quickcheck::{Arbitrary, Gen, QuickCheck};

    use super::*;
    use crate::event::{test_actor as actor, test_launched as event};
    use crate::event::{Envelope, Event};
    use crate::journal::scan::{self, Status};
    use crate::journal::{Options, Writer};

    fn payload(i: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let id = Uuid::from_u128(0xf0_0000 + u128::from(i));
        event::encode_payload(&mut out, Micros(i64::from(i)), &id, &actor(), &event(i)).unwrap();
        out
    }

    /// A journal of Genesis and `trunk - 1` events, written by the writer; returns its segment
    /// path, bytes and the chain after each seq (index = seq).
    fn trunk_journal(dir: &Path, trunk: u32) -> (std::path::PathBuf, Vec<u8>, Vec<frame::Chain>) {
        let w = Writer::open_as(dir, Options::default(), actor()).unwrap();
        w.append((1..trunk).map(event).collect()).unwrap();
        drop(w);
        let path = dir.join(super::super::segment::file_name(1));
        let bytes = std::fs::read(&path).unwrap();
        let header = super::super::segment::SegmentHeader::decode(&bytes).unwrap();
        let mut chains = vec![header.prev_chain];
        let mut at = super::super::segment::SEGMENT_HEADER_LEN;
        while at < bytes.len() {
            let f = frame::decode(&bytes[at..]).unwrap();
            chains.push(f.chain_value());
            at += f.len();
        }
        assert_eq!(chains.len() as u32, trunk + 1);
        (path, bytes, chains)
    }

    /// The ids of every event of the journal, in order (`None` for `JournalMerged`).
    fn ids(dir: &Path) -> Vec<Option<Uuid>> {
        let mut out = Vec::new();
        let scan = crate::journal::replay(dir, None, |env: Envelope| {
            out.push((!matches!(env.event, Event::JournalMerged(_))).then_some(env.id));
            Ok(())
        })
        .unwrap();
        assert_eq!(scan.status(), Status::Clean);
        out
    }

    /// Writers, each appending after a frame it believed was the tail, on a schedule.
    #[derive(Clone, Debug)]
    struct Case {
        trunk: u32,
        /// Per writer: how far back from the trunk's tip its base is, and how many frames it
        /// appends.
        writers: Vec<(u32, u32)>,
        schedule: Vec<usize>,
    }

    impl Arbitrary for Case {
        fn arbitrary(g: &mut Gen) -> Case {
            let trunk = 2 + u32::arbitrary(g) % 6;
            let count = 2 + usize::arbitrary(g) % 3;
            let writers: Vec<(u32, u32)> = (0..count)
                .map(|w| {
                    let back = if w == 0 {
                        0
                    } else {
                        u32::arbitrary(g) % (trunk - 1)
                    };
                    (back, 1 + u32::arbitrary(g) % 4)
                })
                .collect();
            let mut schedule: Vec<usize> = (0..count)
                .flat_map(|w| std::iter::repeat_n(w, writers[w].1 as usize))
                .collect();
            for i in (1..schedule.len()).rev() {
                schedule.swap(i, usize::arbitrary(g) % (i + 1));
            }
            Case {
                trunk,
                writers,
                schedule,
            }
        }
    }

    /// Append the case's frames to `bytes`; returns the ids in file order of the region.
    fn fork(case: &Case, bytes: &mut Vec<u8>, chains: &[frame::Chain]) -> Vec<Uuid> {
        let mut tails: Vec<(u64, frame::Chain)> = case
            .writers
            .iter()
            .map(|&(back, _)| {
                let seq = u64::from(case.trunk - back);
                (seq, chains[seq as usize])
            })
            .collect();
        let mut ids = Vec::new();
        for (n, &w) in case.schedule.iter().enumerate() {
            let i = 1000 + n as u32;
            let (seq, chain) = tails[w];
            let p = payload(i);
            let next = frame::encode(
                bytes,
                &chain,
                seq + 1,
                event(i).kind(),
                event(i).flags(),
                &p,
            );
            tails[w] = (seq + 1, next);
            ids.push(Uuid::from_u128(0xf0_0000 + u128::from(i)));
        }
        ids
    }

    fn merged_keeps_every_event(case: Case) -> bool {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut bytes, chains) = trunk_journal(dir.path(), case.trunk);
        let before: Vec<Option<Uuid>> = ids(dir.path());
        let region = fork(&case, &mut bytes, &chains);
        std::fs::write(&path, &bytes).unwrap();
        let scan = scan::classify(dir.path(), None, |_| true).unwrap();
        // Two writers at least, each appending one frame at least: whichever lands second
        // repeats a seq.
        assert_eq!(scan.status(), Status::Forked, "{:?}", scan.damage());
        let f = scan.fork().cloned().unwrap();
        assert!(f.branches.len() >= 2);
        let w = Writer::open_merging_forks(dir.path(), Options::default()).unwrap();
        let merged = w.opened().merged.clone().unwrap();
        drop(w);
        assert_eq!(merged.events, f.frames.len() as u64);
        let after = ids(dir.path());
        let kept: Vec<Uuid> = after.iter().flatten().copied().collect();
        let expected: Vec<Uuid> = before.iter().flatten().copied().chain(region).collect();
        let saved = std::fs::read(dir.path().join(&merged.saved_as)).unwrap();
        assert_eq!(kept, expected);
        assert_eq!(after.iter().filter(|i| i.is_none()).count(), 1);
        saved == bytes
    }

    #[test]
    fn a_merge_keeps_every_event_of_every_branch_in_file_order() {
        QuickCheck::new()
            .tests(60)
            .quickcheck(merged_keeps_every_event as fn(Case) -> bool);
    }

    #[test]
    fn a_frame_that_continues_no_branch_is_corruption_not_a_fork() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut bytes, chains) = trunk_journal(dir.path(), 4);
        let case = Case {
            trunk: 4,
            writers: vec![(0, 1), (2, 2)],
            schedule: vec![1, 0, 1],
        };
        fork(&case, &mut bytes, &chains);
        // A frame of seq 3 chained to nothing known.
        frame::encode(&mut bytes, &[7u8; 32], 3, event(9).kind(), 0, &payload(9));
        std::fs::write(&path, &bytes).unwrap();
        let scan = scan::classify(dir.path(), None, |_| true).unwrap();
        assert_eq!(scan.status(), Status::Corrupt);
        let reason = scan.damage().unwrap().reason.clone();
        assert!(reason.contains("not a fork: seq 3 at offset"), "{reason}");
        assert!(Writer::open_merging_forks(dir.path(), Options::default()).is_err());
    }

    #[test]
    fn a_fork_of_a_fork_is_one_fork_of_three_branches() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut bytes, chains) = trunk_journal(dir.path(), 3);
        // Writer B forks after seq 2; writer C forks after B's first frame.
        let b1 = frame::encode(&mut bytes, &chains[2], 3, event(1).kind(), 0, &payload(20));
        frame::encode(&mut bytes, &b1, 4, event(1).kind(), 0, &payload(21));
        frame::encode(&mut bytes, &b1, 4, event(1).kind(), 0, &payload(22));
        std::fs::write(&path, &bytes).unwrap();
        let scan = scan::classify(dir.path(), None, |_| true).unwrap();
        assert_eq!(scan.status(), Status::Forked, "{:?}", scan.damage());
        let f = scan.fork().unwrap();
        assert_eq!(f.common_seq, 2);
        let shape: Vec<(u64, u64, u64)> = f
            .branches
            .iter()
            .map(|b| (b.forked_after_seq, b.first_seq, b.last_seq))
            .collect();
        assert_eq!(shape, vec![(2, 3, 3), (3, 4, 4), (3, 4, 4)]);
    }

    #[test]
    fn a_merge_stopped_before_its_rename_leaves_the_fork_and_is_done_again() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut bytes, chains) = trunk_journal(dir.path(), 4);
        let case = Case {
            trunk: 4,
            writers: vec![(0, 2), (1, 2)],
            schedule: vec![1, 0, 1, 0],
        };
        fork(&case, &mut bytes, &chains);
        std::fs::write(&path, &bytes).unwrap();
        let scan = scan::classify(dir.path(), None, |_| true).unwrap();
        let f = scan.fork().unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        let record = record(name, f, &bytes[f.offset as usize..]);
        // What a merge that stopped after step 4's write leaves: the kept link and the file.
        std::fs::hard_link(&path, dir.path().join(&record.saved_as)).unwrap();
        std::fs::write(dir.path().join(format!(".{name}.merging")), b"partial").unwrap();
        let again = scan::classify(dir.path(), None, |_| true).unwrap();
        assert_eq!(again.status(), Status::Forked);
        let w = Writer::open_merging_forks(dir.path(), Options::default()).unwrap();
        assert_eq!(
            w.opened().merged.as_ref().unwrap().saved_as,
            record.saved_as
        );
        drop(w);
        assert_eq!(ids(dir.path()).len(), 4 + 1 + 4);
    }
}
