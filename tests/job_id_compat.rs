//! Job ids in pool and `dispatch submit` events were `u64` until the events carried
//! `slurm::JobId` (a non-zero `u32`). rmp-serde writes an integer in the smallest format that
//! holds its value, so the bytes are the same for every id Slurm can assign; these tests hold
//! the new code to a journal, a snapshot and the `--json` output that the old code wrote.
//!
//! `tests/fixtures/journal/u64-job-ids/` (a segment and a snapshot at seq 13) and
//! `tests/golden/u64-job-ids/` (what `journal dump`, `jobs`, `pool status` and `audit` printed
//! with `--json`) were written by commit 9a23a2c, whose ids were `u64`. Never regenerate them:
//! they are the old format. Their ids take every MessagePack integer width an id can have:
//! 1 (fixint), 200 (uint 8), 40000 (uint 16), 4000000 and u32::MAX (uint 32).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::frames;
use dispatch::event::{decode_payload, encode_payload, Actor, Micros, FLAG_MUST_UNDERSTAND};
use dispatch::journal::scan::Status;
use dispatch::journal::{self, frame, snapshot};
use dispatch::ops::journal::verify;
use dispatch::state::State;
use serde::Serialize;
use uuid::Uuid;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/journal/u64-job-ids"
);
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/u64-job-ids");
const SEGMENT: &str = "segment-00000001.djl";
const SNAPSHOT: &str = "snapshot-00000000000000000013.dsnap";

/// A state directory holding a copy of the fixture journal; `with_snapshot` keeps its snapshot.
fn state_dir(with_snapshot: bool) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let sd = tmp.path().join("state");
    let journal = sd.join("journal");
    std::fs::create_dir_all(&journal).unwrap();
    let mut names = vec![SEGMENT];
    if with_snapshot {
        names.push(SNAPSHOT);
    }
    for name in names {
        std::fs::copy(Path::new(FIXTURE).join(name), journal.join(name)).unwrap();
    }
    (tmp, sd)
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(FIXTURE).join(name)).unwrap()
}

#[test]
fn every_old_frame_decodes_and_encodes_to_its_own_bytes() {
    let segment = fixture(SEGMENT);
    let all = frames(&segment);
    assert_eq!(all.len(), 19);
    for r in all {
        let f = frame::decode(&segment[r.clone()]).unwrap();
        let env = decode_payload(f.seq, f.kind, f.flags, f.payload)
            .unwrap_or_else(|e| panic!("seq {}: {e}", f.seq));
        let mut again = Vec::new();
        encode_payload(&mut again, env.time, &env.id, &env.actor, &env.event).unwrap();
        assert_eq!(
            again,
            f.payload,
            "seq {} ({})",
            f.seq,
            env.event.kind_name()
        );
    }
}

/// The old snapshot is version 7: today's reader ignores it by its version (journal-format.md
/// §9: version 8 writes every field of a pool worker) and rebuilds the state from the journal;
/// its state, read as today's (the version field alone changed), holds every id as the old
/// code wrote it and is the replay's.
#[test]
fn the_old_snapshot_is_ignored_by_its_version_and_its_state_still_reads() {
    let bytes = fixture(SNAPSHOT);
    assert_eq!(
        snapshot::decode::<State>(&bytes).unwrap_err(),
        format!("snapshot version 7 is not {}", snapshot::SNAPSHOT_VERSION)
    );
    let (covers, old_state) = snapshot::decode::<State>(&snapshot_with_todays_version()).unwrap();
    assert_eq!(covers.seq, 13);
    let json = serde_json::to_value(&old_state).unwrap();
    assert_eq!(json["pools"]["creations"]["pending"]["job_id"], 40000);

    let (_keep, with) = state_dir(true);
    let loaded = journal::load::<State>(&with.join("journal")).unwrap();
    assert_eq!(loaded.snapshot_seq, None);
    assert!(loaded.snapshot_rejected.is_some());
    let (_keep2, without) = state_dir(false);
    let replayed = journal::load::<State>(&without.join("journal")).unwrap();
    assert_eq!(replayed.snapshot_seq, None);
    assert_eq!(loaded.state, replayed.state);
    let json = serde_json::to_value(&replayed.state).unwrap();
    assert_eq!(
        json["pools"]["pools"]["top"]["allocation"]["job_id"],
        4294967295u64
    );
    assert_eq!(json["pools"]["creations"]["pending"]["job_id"], 40000);
}

/// A snapshot whose state holds a job id of 0 (which no dispatch wrote: its ids came from
/// Slurm) is ignored like any snapshot that does not decode, and state is rebuilt from the
/// journal.
#[test]
fn a_snapshot_holding_job_id_0_is_ignored() {
    let mut bytes = fixture(SNAPSHOT);
    // The creation's job 40000 (`cd 9c 40`, uint 16) becomes a uint 16 zero, same length.
    let at = bytes
        .windows(3)
        .position(|w| w == [0xcd, 0x9c, 0x40])
        .expect("40000 in the snapshot");
    bytes[at + 1..at + 3].copy_from_slice(&[0, 0]);
    let n = bytes.len();
    let crc = crc32fast::hash(&bytes[..n - 4]);
    bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
    assert!(snapshot::decode::<State>(&bytes).is_err());

    let (_keep, sd) = state_dir(true);
    std::fs::write(sd.join("journal").join(SNAPSHOT), &bytes).unwrap();
    let loaded = journal::load::<State>(&sd.join("journal")).unwrap();
    assert_eq!(loaded.snapshot_seq, None);
    assert!(loaded.snapshot_rejected.is_some());
    let (_keep2, clean) = state_dir(false);
    assert_eq!(
        loaded.state,
        journal::load::<State>(&clean.join("journal"))
            .unwrap()
            .state
    );
}

fn dispatch_json(sd: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--state-dir")
        .arg(sd)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .replace(sd.to_str().unwrap(), "STATE")
}

/// Keys the `--json` output gained after 9a23a2c wrote the goldens, as JSON pointers. The CLI
/// contract lets a report gain keys, never lose or rename one (docs/cli.md), so the output must be
/// the golden exactly once these, and only these, are taken out.
const ADDED_SINCE_THE_GOLDENS: &[(&str, &[&str])] = &[
    // A fork is its own class (issue 20): verify's `fork`, audit's merge notes.
    ("audit", &["/journal/fork", "/rules/merges"]),
    // Pools are budgeted per node, GPUs included (issue 23).
    (
        "pool",
        &[
            "/pools/0/capacity/gpus",
            "/pools/0/reserved/gpus",
            "/pools/0/nodes",
            "/pools/0/no_kill",
            "/pools/0/nodes_lost",
            "/pools/0/last_end",
            "/pools/0/workers/0/node",
            "/pools/0/workers/0/gpus",
            "/pools/0/workers/0/step_gpus",
            "/pools/0/workers/0/cuda_visible_devices",
            "/pools/1/capacity/gpus",
            "/pools/1/reserved/gpus",
            "/pools/1/nodes",
            "/pools/1/no_kill",
            "/pools/1/nodes_lost",
            "/pools/1/last_end",
            // How a payload ended, and what its journal says before --refresh (issue 36).
            "/pools/0/workers/0/stage",
            "/pools/0/workers/0/outcome",
            // Why a launch failed, in srun's words (issue 36).
            "/pools/0/workers/0/launch_failure",
            // Each worker's lineage, and where its continuation stands (issue 37).
            "/pools/0/workers/0/generation",
            "/pools/0/workers/0/continues_left",
            "/pools/0/workers/0/predecessor",
            "/pools/0/workers/0/successor",
            "/pools/0/workers/0/continuation",
            "/pools/0/workers/0/continuation_why",
        ],
    ),
    (
        "jobs",
        &[
            "/jobs/0/outcome",
            "/jobs/0/exit_code",
            "/jobs/0/exit_signal",
            "/jobs/0/stage",
            "/jobs/1/outcome",
            "/jobs/1/exit_code",
            "/jobs/1/exit_signal",
            "/jobs/1/stage",
            // Each worker's lineage, and where its continuation stands (issue 37).
            "/jobs/0/generation",
            "/jobs/0/continues_left",
            "/jobs/0/predecessor",
            "/jobs/0/successor",
            "/jobs/0/continuation",
            "/jobs/0/continuation_why",
            "/jobs/1/generation",
            "/jobs/1/continues_left",
            "/jobs/1/predecessor",
            "/jobs/1/successor",
            "/jobs/1/continuation",
            "/jobs/1/continuation_why",
            // A job in a preemption's grace, as a refresh found it (issue 38).
            "/jobs/0/preempted",
            "/jobs/1/preempted",
        ],
    ),
];

/// `output` (one JSON document, or JSON lines) with the keys added since the goldens removed.
fn without_added_keys(command: &str, output: &str) -> Vec<serde_json::Value> {
    let added: &[&str] = ADDED_SINCE_THE_GOLDENS
        .iter()
        .find(|(name, _)| *name == command)
        .map_or(&[], |(_, pointers)| pointers);
    output
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
            for pointer in added {
                let (parent, key) = pointer.rsplit_once('/').unwrap();
                let object = value
                    .pointer_mut(parent)
                    .and_then(|p| p.as_object_mut())
                    .unwrap_or_else(|| panic!("{command}: no object at {parent}"));
                assert!(
                    object.remove(key).is_some(),
                    "{command}: the added key {pointer} is gone; take it out of ADDED_SINCE_THE_GOLDENS"
                );
            }
            value
        })
        .collect()
}

/// The old snapshot with today's version in its header (and its CRCs made again): its state
/// body is what version 8 reads, every field it lacks empty.
fn snapshot_with_todays_version() -> Vec<u8> {
    let mut bytes = fixture(SNAPSHOT);
    bytes[8..10].copy_from_slice(&snapshot::SNAPSHOT_VERSION.to_le_bytes());
    let header_crc = crc32fast::hash(&bytes[..92]);
    bytes[92..96].copy_from_slice(&header_crc.to_le_bytes());
    let n = bytes.len();
    let crc = crc32fast::hash(&bytes[..n - 4]);
    bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// [`snapshot_with_todays_version`], with what replay derives that the old state lacks filled
/// in as replay fills it: each pool worker's job (version 12), its pool's allocation, as the
/// fixture's pools never renewed. The old state's ids are untouched.
fn snapshot_as_today() -> Vec<u8> {
    let (covers, mut state) = snapshot::decode::<State>(&snapshot_with_todays_version()).unwrap();
    for pool in state.pools.pools.values_mut() {
        let job = pool.allocation.job_id;
        for w in pool.active.values_mut().chain(pool.finished.iter_mut()) {
            assert_eq!(w.job_id, None, "the old snapshot has no worker's job");
            w.job_id = Some(job);
        }
    }
    snapshot::encode(&covers, &state).unwrap()
}

/// What the old code printed from its journal and snapshot (the snapshot's version made
/// today's, so the audit finds it used as the old code did).
#[test]
fn the_json_output_is_what_the_old_code_printed() {
    let (_keep, sd) = state_dir(true);
    std::fs::write(sd.join("journal").join(SNAPSHOT), snapshot_as_today()).unwrap();
    for (args, golden) in [
        (&["journal", "dump", "--json"][..], "journal-dump.jsonl"),
        (&["jobs", "--json"][..], "jobs.json"),
        (&["pool", "status", "--json"][..], "pool-status.json"),
        (&["audit", "--json"][..], "audit.json"),
    ] {
        let expected = std::fs::read_to_string(Path::new(GOLDEN).join(golden)).unwrap();
        let printed = dispatch_json(&sd, args);
        let expected: Vec<serde_json::Value> = expected
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(
            without_added_keys(args[0], &printed),
            expected,
            "{args:?}: {printed}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Ids that do not fit a JobId: 0, or above u32::MAX. No dispatch wrote one (every id came from
// Slurm, which assigns neither), but a reader must refuse one without panicking: it is a value
// outside its type, so the frame is `corrupt` (journal-format.md §8), as for session ids.

/// `PoolCreateJob` as the old code declared it.
#[derive(Serialize)]
struct OldPoolCreateJob {
    pool: String,
    creation_id: Uuid,
    job_id: u64,
    how: String,
}

/// `JobSubmitted` as the old code declared it.
#[derive(Serialize)]
struct OldJobSubmitted {
    submission_id: Uuid,
    job_id: u64,
    how: String,
}

fn old_payload(body: &impl Serialize) -> Vec<u8> {
    let actor = Actor {
        user: "alice".to_owned(),
        host: "login01".to_owned(),
        pid: 1,
        command: vec!["dispatch".to_owned()],
    };
    rmp_serde::to_vec(&(
        Micros(1_700_000_000_000_000),
        Uuid::from_u128(9),
        actor,
        body,
    ))
    .unwrap()
}

/// The fixture's segment with one more frame of `kind` and `payload` after its last.
fn with_frame(kind: u16, payload: &[u8]) -> (Vec<u8>, usize) {
    let mut segment = fixture(SEGMENT);
    let last = frames(&segment).pop().unwrap();
    let prev: frame::Chain = segment[last.end - 36..last.end - 4].try_into().unwrap();
    let at = segment.len();
    frame::encode(&mut segment, &prev, 20, kind, FLAG_MUST_UNDERSTAND, payload);
    (segment, at)
}

#[test]
fn an_id_that_is_no_job_id_is_corrupt_and_never_a_panic() {
    let creation = Uuid::from_u128(0xc2);
    for job_id in [0, 1 << 32, u64::MAX] {
        let cases = [
            (
                103,
                old_payload(&OldPoolCreateJob {
                    pool: "pending".to_owned(),
                    creation_id: creation,
                    job_id,
                    how: "name".to_owned(),
                }),
            ),
            (
                121,
                old_payload(&OldJobSubmitted {
                    submission_id: Uuid::from_u128(0x11),
                    job_id,
                    how: "sbatch".to_owned(),
                }),
            ),
        ];
        for (kind, payload) in cases {
            assert!(decode_payload(20, kind, FLAG_MUST_UNDERSTAND, &payload).is_err());
            let (segment, at) = with_frame(kind, &payload);
            let (_keep, sd) = state_dir(true);
            let journal = sd.join("journal");
            std::fs::write(journal.join(SEGMENT), &segment).unwrap();
            let r = verify(&journal).unwrap();
            assert_eq!(r.status, Status::Corrupt, "kind {kind}, job id {job_id}");
            let damage = r.damage.unwrap();
            assert_eq!(damage.offset, at as u64, "kind {kind}, job id {job_id}");
            assert!(
                damage.reason.contains("does not decode"),
                "{}",
                damage.reason
            );
            assert!(journal::load::<State>(&journal).is_err());
        }
    }
}

/// The same frames with an id that fits are read, and write back to the same bytes.
#[test]
fn the_same_frame_with_an_id_in_range_is_read() {
    for job_id in [1, 127, 128, 255, 256, 65535, 65536, u64::from(u32::MAX)] {
        let payload = old_payload(&OldJobSubmitted {
            submission_id: Uuid::from_u128(0x11),
            job_id,
            how: "sbatch".to_owned(),
        });
        let env = decode_payload(20, 121, FLAG_MUST_UNDERSTAND, &payload).unwrap();
        let mut again = Vec::new();
        encode_payload(&mut again, env.time, &env.id, &env.actor, &env.event).unwrap();
        assert_eq!(again, payload, "job id {job_id}");
        assert_eq!(env.event.body_json()["job_id"], job_id);
        let (segment, _) = with_frame(121, &payload);
        let (_keep, sd) = state_dir(true);
        std::fs::write(sd.join("journal").join(SEGMENT), &segment).unwrap();
        assert_eq!(verify(&sd.join("journal")).unwrap().status, Status::Clean);
    }
}

/// For any `u64` an old writer could have put in a job id: a reader takes exactly the ids
/// Slurm can assign, writes each back to the same bytes, and refuses the rest without a panic.
#[test]
fn prop_any_old_id_is_read_back_alike_or_refused() {
    fn prop(job_id: u64, wide: bool) -> bool {
        // Small ids are rare in a uniform u64: half the cases use a u32.
        let job_id = if wide {
            job_id
        } else {
            job_id & u64::from(u32::MAX)
        };
        let payload = old_payload(&OldPoolCreateJob {
            pool: "p".to_owned(),
            creation_id: Uuid::from_u128(1),
            job_id,
            how: "salloc".to_owned(),
        });
        match decode_payload(2, 103, FLAG_MUST_UNDERSTAND, &payload) {
            Ok(env) => {
                let mut again = Vec::new();
                encode_payload(&mut again, env.time, &env.id, &env.actor, &env.event).unwrap();
                (1..=u64::from(u32::MAX)).contains(&job_id) && again == payload
            }
            Err(_) => !(1..=u64::from(u32::MAX)).contains(&job_id),
        }
    }
    quickcheck::QuickCheck::new()
        .tests(2000)
        .quickcheck(prop as fn(u64, bool) -> bool);
}
