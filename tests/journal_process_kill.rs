//! Real processes appending to one journal, killed with SIGKILL at random moments or crashed at
//! the journal's failpoints. After every crash the journal must read as clean or torn (never
//! corrupt or tampered), and every append whose call returned must still be there.
//!
//! The appenders are this test binary re-executed with `CHILD_DIR` set, running only the
//! `child_appender` test, so the product needs no test-only entry point.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dispatch::event::pool::WorkerStepObserved;
use dispatch::event::Event;
use dispatch::journal::{self, segment, Options, Status, Writer};
use dispatch::ops::journal as ops;
use dispatch::state::State;
use uuid::Uuid;

const CHILD_DIR: &str = "DISPATCH_TEST_APPENDER_DIR";
const CHILD_SEED: &str = "DISPATCH_TEST_APPENDER_SEED";
const CHILD_MAX: &str = "DISPATCH_TEST_APPENDER_MAX";
/// Small segments, so that kills also land in the middle of a rotation.
const SEGMENT_BYTES: u64 = 16 << 10;

/// splitmix64: enough randomness for kill times, and reproducible from a printed seed.
struct Rng(u64);

impl Rng {
    fn from_env(var: &str) -> Rng {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("seed {seed} ({var}={seed} replays it)");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The appender: opens the journal, appends a few events one call at a time, closes it so the
/// other appenders get the lock, and again, until killed or until it has appended `CHILD_MAX`
/// events. An event is printed only after `append` returned: the parent's list of committed
/// events is exactly what the journal promised.
#[test]
fn child_appender() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let mut rng = Rng(std::env::var(CHILD_SEED).unwrap().parse().unwrap());
    let max: u64 = std::env::var(CHILD_MAX).map_or(u64::MAX, |m| m.parse().unwrap());
    let opts = Options {
        max_segment_bytes: SEGMENT_BYTES,
    };
    let mut out = std::io::stdout().lock();
    let mut appended = 0;
    while appended < max {
        let w = Writer::open(&dir, opts.clone()).expect("the appender opens the journal");
        for _ in 0..=rng.below(4) {
            let event = Event::WorkerStepObserved(WorkerStepObserved {
                submission_id: Uuid::from_u64_pair(std::process::id().into(), appended),
                step_id: appended as u32,
            });
            let c = w.append_one(event).expect("append");
            writeln!(out, "COMMITTED {} {}", c.seq, c.id).unwrap();
            out.flush().unwrap();
            appended += 1;
            if appended == max {
                break;
            }
        }
    }
}

struct Appender {
    child: Child,
    reader: std::thread::JoinHandle<Vec<(u64, Uuid)>>,
}

fn spawn_appender(dir: &Path, seed: u64, max: Option<u64>, failpoints: Option<&str>) -> Appender {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_appender",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_DIR, dir)
    .env(CHILD_SEED, seed.to_string())
    .env_remove(dispatch::failpoint::ENV)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if let Some(m) = max {
        cmd.env(CHILD_MAX, m.to_string());
    }
    if let Some(f) = failpoints {
        cmd.env(dispatch::failpoint::ENV, f);
    }
    let mut child = cmd.spawn().expect("re-execute the test binary");
    let stdout = child.stdout.take().unwrap();
    // Read while the child runs, so a full pipe can never block it.
    let reader = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for line in std::io::BufReader::new(stdout).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line);
            // The harness prints `test child_appender ... ` with no newline before the first
            // of these, so the marker need not start the line.
            let Some(at) = line.find("COMMITTED ") else {
                continue;
            };
            let mut parts = line[at..].split_whitespace().skip(1);
            let seq = parts.next().unwrap().parse().unwrap();
            let id = parts.next().unwrap().parse().unwrap();
            acked.push((seq, id));
        }
        acked
    });
    Appender { child, reader }
}

impl Appender {
    fn kill(&mut self) {
        // SIGKILL: no unwinding, no destructors, no flush; the journal must cope.
        let _ = self.child.kill();
    }

    /// Wait for the child; its committed events and its exit status.
    fn finish(mut self) -> (Vec<(u64, Uuid)>, std::process::ExitStatus) {
        let status = self.child.wait().unwrap();
        (self.reader.join().unwrap(), status)
    }
}

/// Every committed event, by seq. Two processes claiming one seq would be a lost append.
#[derive(Default)]
struct Committed(BTreeMap<u64, Uuid>);

impl Committed {
    fn add(&mut self, acked: Vec<(u64, Uuid)>) {
        for (seq, id) in acked {
            if let Some(old) = self.0.insert(seq, id) {
                panic!("seq {seq} was committed twice: {old} and {id}");
            }
        }
    }

    /// The journal, read up to any damage, holds every committed event at its seq.
    fn check(&self, dir: &Path, ctx: &str) {
        let mut ids = BTreeMap::new();
        journal::replay(dir, None, |env| {
            ids.insert(env.seq, env.id);
            Ok(())
        })
        .unwrap();
        for (seq, id) in &self.0 {
            assert_eq!(
                ids.get(seq),
                Some(id),
                "{ctx}: committed event {seq} {id} is not in the journal"
            );
        }
    }
}

fn has_segments(dir: &Path) -> bool {
    segment::list(dir).is_ok_and(|s| !s.is_empty())
}

/// Verify says clean or torn tail; anything else is a bug in the writer or the classifier.
fn assert_crash_consistent(dir: &Path, ctx: &str) -> &'static str {
    let v = ops::verify(dir).unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert!(
        matches!(v.status, Status::Clean | Status::TornTail),
        "{ctx}: journal is {} after a crash: {:?}",
        v.status,
        v.damage
    );
    v.status.as_str()
}

#[test]
fn sigkilled_appenders_never_damage_the_journal_or_lose_a_commit() {
    const ROUNDS: usize = 20;
    const PROCESSES: usize = 4;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let mut rng = Rng::from_env("JOURNAL_KILL_SEED");
    let mut committed = Committed::default();
    let mut torn = 0;
    let started = Instant::now();
    for round in 0..ROUNDS {
        let mut kids: Vec<(Appender, Duration)> = (0..PROCESSES)
            .map(|_| {
                let a = spawn_appender(&dir, rng.next(), None, None);
                (a, Duration::from_millis(10 + rng.below(300)))
            })
            .collect();
        kids.sort_by_key(|k| k.1);
        let t0 = Instant::now();
        for (kid, at) in &mut kids {
            std::thread::sleep(at.saturating_sub(t0.elapsed()));
            kid.kill();
        }
        for (kid, _) in kids {
            let (acked, status) = kid.finish();
            assert!(
                status.code().is_none(),
                "round {round}: an appender exited by itself ({status}), not by our SIGKILL"
            );
            committed.add(acked);
        }
        let ctx = format!("round {round}");
        if !has_segments(&dir) {
            assert!(committed.0.is_empty(), "{ctx}: commits but no journal");
            continue;
        }
        if assert_crash_consistent(&dir, &ctx) == "torn_tail" {
            torn += 1;
        }
        committed.check(&dir, &ctx);
        // Repair here every other round; otherwise the next round's appenders repair on open,
        // with the lock contended and kills landing inside the repair.
        if round % 2 == 1 {
            ops::repair(&dir).unwrap();
            assert_eq!(ops::verify(&dir).unwrap().status, Status::Clean, "{ctx}");
            committed.check(&dir, &format!("{ctx}, repaired"));
        }
    }
    ops::repair(&dir).unwrap();
    committed.check(&dir, "at the end");
    let v = ops::verify(&dir).unwrap();
    assert_eq!(v.status, Status::Clean);
    assert!(
        committed.0.len() >= ROUNDS,
        "appenders barely ran: {} commits",
        committed.0.len()
    );
    eprintln!(
        "{} commits, {} events, {} segments, {torn} torn tails seen, {:?}",
        committed.0.len(),
        v.events,
        segment::list(&dir).unwrap().len(),
        started.elapsed()
    );
}

/// Run one appender to completion or to its failpoint; its commits and exit status.
fn run_one(dir: &Path, seed: u64, max: u64, failpoints: &str) -> (Vec<(u64, Uuid)>, bool) {
    let (acked, status) = spawn_appender(dir, seed, Some(max), Some(failpoints)).finish();
    (acked, status.success())
}

#[test]
fn torn_writes_at_the_failpoint_are_repaired_without_losing_a_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let mut rng = Rng::from_env("JOURNAL_TORN_SEED");
    let mut committed = Committed::default();
    // A crash tearing the Genesis of a new journal leaves no journal: segment 1 takes its name
    // only once its Genesis is durable (journal-format.md §7), so no reader ever sees it half
    // made. The next appender creates the journal anew.
    let (acked, clean_exit) = run_one(&dir, rng.next(), 40, "journal-torn-write=abort@1");
    assert!(
        !clean_exit && acked.is_empty(),
        "the creator should have crashed"
    );
    assert!(
        !has_segments(&dir),
        "a journal whose creation was torn is no journal"
    );
    assert!(dir.join("segment-00000001.djl.tmp").exists());
    // K counts writes in the crashing process, including its Genesis or Recovered record.
    for (i, k) in [2u64, 3, 7, 1, 12, 4].into_iter().enumerate() {
        let spec = format!("journal-torn-write=abort@{k}");
        let (acked, clean_exit) = run_one(&dir, rng.next(), 40, &spec);
        assert!(!clean_exit, "{spec}: the appender should have crashed");
        committed.add(acked);
        let ctx = format!("crash {i} ({spec})");
        let before = std::fs::read(last_segment(&dir)).unwrap();
        assert_eq!(assert_crash_consistent(&dir, &ctx), "torn_tail", "{ctx}");
        committed.check(&dir, &ctx);

        let v = ops::verify(&dir).unwrap();
        let d = v.damage.unwrap();
        let r = ops::repair(&dir).unwrap();
        let rec = r.recovered.expect("a torn tail is cut and recorded");
        assert_eq!(
            (rec.offset, rec.length),
            (d.offset, before.len() as u64 - d.offset)
        );
        let saved = std::fs::read(dir.join(&rec.saved_as)).unwrap();
        assert_eq!(
            saved,
            before[d.offset as usize..],
            "{ctx}: the torn bytes are kept"
        );
        assert_eq!(ops::verify(&dir).unwrap().status, Status::Clean, "{ctx}");
        committed.check(&dir, &format!("{ctx}, repaired"));
    }
    // And an appender that is not crashed leaves it clean, with everything in it.
    let (acked, clean_exit) = run_one(&dir, rng.next(), 10, "");
    assert!(clean_exit);
    committed.add(acked);
    committed.check(&dir, "final appender");
    assert_eq!(ops::verify(&dir).unwrap().status, Status::Clean);
}

#[test]
fn crashes_between_write_and_sync_keep_every_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let mut rng = Rng::from_env("JOURNAL_SYNC_SEED");
    let mut committed = Committed::default();
    let cases = [
        "journal-before-sync=abort@1",
        "journal-before-sync=abort@5",
        "journal-after-sync=abort@3",
        "journal-before-write=abort@4",
        "journal-before-sync=exit:9@2",
    ];
    // Created here so that every crash below lands on one of the appender's own events.
    drop(Writer::open(&dir, Options::default()).unwrap());
    for spec in cases {
        let events_before = event_count(&dir);
        let (acked, clean_exit) = run_one(&dir, rng.next(), 40, spec);
        assert!(!clean_exit, "{spec}: the appender should have crashed");
        let n = acked.len() as u64;
        committed.add(acked);
        // The process died after its write reached the page cache: the frame is whole, only
        // its commit was never reported. Before the write, nothing of it is there.
        let ctx = spec.to_owned();
        assert_eq!(assert_crash_consistent(&dir, &ctx), "clean", "{ctx}");
        committed.check(&dir, &ctx);
        let unreported = if spec.starts_with("journal-before-write") {
            0
        } else {
            1
        };
        assert_eq!(
            event_count(&dir),
            events_before + n + unreported,
            "{ctx}: the journal holds the reported commits plus the one in flight"
        );
    }
}

#[test]
fn a_crash_during_repair_is_repaired_by_the_next_opener() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let mut rng = Rng::from_env("JOURNAL_REPAIR_SEED");
    let mut committed = Committed::default();
    let (acked, _) = run_one(&dir, rng.next(), 20, "journal-torn-write=abort@6");
    committed.add(acked);
    let torn = std::fs::read(last_segment(&dir)).unwrap();
    assert_eq!(assert_crash_consistent(&dir, "torn"), "torn_tail");

    // The next appender saves the tail, then dies before cutting it.
    let (acked, _) = run_one(&dir, rng.next(), 5, "journal-repair-before-truncate=abort");
    assert!(acked.is_empty());
    assert_eq!(std::fs::read(last_segment(&dir)).unwrap(), torn);
    assert_eq!(assert_crash_consistent(&dir, "crashed repair"), "torn_tail");

    let (acked, ok) = run_one(&dir, rng.next(), 5, "");
    assert!(ok);
    committed.add(acked);
    committed.check(&dir, "after the second repair");
    assert_eq!(ops::verify(&dir).unwrap().status, Status::Clean);
    let recovered = journal::load::<State>(&dir).unwrap().state.recoveries;
    assert_eq!(recovered.len(), 1, "one cut, recorded once: {recovered:?}");
}

fn last_segment(dir: &Path) -> PathBuf {
    segment::list(dir).unwrap().pop().unwrap().1
}

fn event_count(dir: &Path) -> u64 {
    if !has_segments(dir) {
        return 0;
    }
    ops::verify(dir).unwrap().events
}

#[test]
fn a_repair_that_stops_before_recording_is_recorded_by_the_next_opener() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let mut rng = Rng::from_env("JOURNAL_REPAIR_SEED");
    let (_, _) = run_one(&dir, rng.next(), 20, "journal-torn-write=abort@6");
    assert_eq!(assert_crash_consistent(&dir, "torn"), "torn_tail");

    // `journal repair` cuts the tail, then dies before its Recovered event reaches the disk.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--state-dir")
        .arg(tmp.path())
        .args(["journal", "repair"])
        .env("DISPATCH_FAILPOINTS", "journal-before-write=abort")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), None, "the failpoint did not fire");
    assert_eq!(
        ops::verify(&dir).unwrap().status,
        Status::Clean,
        "the cut happened"
    );
    assert!(journal::load::<State>(&dir)
        .unwrap()
        .state
        .recoveries
        .is_empty());

    // The next writer finds the saved tail at the segment's end and records the repair.
    let (_, ok) = run_one(&dir, rng.next(), 3, "");
    assert!(ok);
    let recoveries = journal::load::<State>(&dir).unwrap().state.recoveries;
    assert_eq!(recoveries.len(), 1, "{recoveries:?}");
    assert!(
        recoveries[0].reason.contains("later open"),
        "{:?}",
        recoveries[0]
    );
    let saved = std::fs::read(dir.join(&recoveries[0].saved_as)).unwrap();
    assert_eq!(saved.len() as u64, recoveries[0].length);

    // Recorded once: more opens add nothing.
    let (_, ok) = run_one(&dir, rng.next(), 3, "");
    assert!(ok);
    assert_eq!(
        journal::load::<State>(&dir).unwrap().state.recoveries.len(),
        1
    );
}

/// A `dispatch` process killed at `journal-checkpoint-before-rename` (its event committed, its
/// new CHECKPOINT in a temporary file, the old one in place): the next command opens from the
/// stale checkpoint, sees the killed command's event, and leaves a clean journal.
#[test]
fn a_command_killed_before_its_checkpoint_rename_leaves_a_journal_the_next_one_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let dir = state.join("journal");
    let run = |args: &[&str], failpoints: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dispatch"));
        cmd.arg("--state-dir")
            .arg(&state)
            .args(args)
            .env_remove(dispatch::failpoint::ENV)
            .env_remove("DISPATCH_LOG");
        if let Some(f) = failpoints {
            cmd.env(dispatch::failpoint::ENV, f);
        }
        cmd.output().expect("run dispatch")
    };
    let ok = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    ok(run(&["trial", "open", "first"], None));
    let stale = std::fs::read(dir.join("CHECKPOINT")).expect("a closing writer leaves one");

    let killed = run(
        &["trial", "open", "second"],
        Some("journal-checkpoint-before-rename=abort"),
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        killed.status.signal(),
        Some(libc::SIGABRT),
        "killed at the failpoint: {}",
        String::from_utf8_lossy(&killed.stderr)
    );
    assert_eq!(
        std::fs::read(dir.join("CHECKPOINT")).unwrap(),
        stale,
        "the old checkpoint is still in place"
    );
    let temps: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("CHECKPOINT.tmp-"))
        .collect();
    assert_eq!(
        temps.len(),
        1,
        "the new checkpoint was left in its temporary file"
    );
    assert_eq!(ops::verify(&dir).unwrap().status, Status::Clean);

    // The next command opens (from the stale checkpoint: a longer tail to check) and writes.
    ok(run(&["trial", "open", "third"], None));
    let listed = ok(run(&["--json", "trials"], None));
    let trials: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let names: Vec<&str> = trials["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["trial"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["first", "second", "third"],
        "the killed command's event is kept"
    );
    assert_eq!(ops::verify(&dir).unwrap().status, Status::Clean);
    assert_ne!(
        std::fs::read(dir.join("CHECKPOINT")).unwrap(),
        stale,
        "the next writer's close replaced the stale checkpoint"
    );
}
