//! The supervisor (`dispatch worker run`) outside Slurm: deadline, grace, forwarded stop, and
//! what it records in the worker's own journal.

use std::process::Command;
use std::time::{Duration, Instant};

use dispatch::worker::report;

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn supervisor(evidence: &std::path::Path, deadline: i64, grace: u32, cmd: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.args([
        "worker",
        "run",
        "--submission-id",
        "6f1c1c1e-0000-4000-8000-000000000001",
        "--evidence-dir",
    ])
    .arg(evidence)
    .args([
        "--deadline",
        &deadline.to_string(),
        "--grace",
        &grace.to_string(),
        "--",
    ])
    .args(cmd);
    c
}

#[test]
fn a_payload_that_finishes_is_recorded_with_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let st = supervisor(dir.path(), now_s() + 3600, 5, &["sh", "-c", "exit 7"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(7));
    let r = report::read(dir.path()).unwrap().expect("a worker journal");
    let started = r.started.unwrap();
    assert!(!started.cpu_set.is_empty());
    assert_eq!(started.command, vec!["sh", "-c", "exit 7"]);
    let exited = r.exited.unwrap();
    assert_eq!(
        (exited.code, exited.signal, exited.interrupted),
        (Some(7), None, false)
    );
    assert!(r.signals.is_empty());
}

#[test]
fn a_payload_that_ignores_sigterm_is_killed_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    // TERM at the deadline (2 s away, so the shell has installed its trap), KILL 1 s later.
    let st = supervisor(
        dir.path(),
        now_s() + 2,
        1,
        &["sh", "-c", "trap '' TERM; sleep 30 & wait; sleep 30"],
    )
    .status()
    .unwrap();
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(
        took >= Duration::from_millis(1900),
        "KILL came before deadline plus grace: {took:?}"
    );
    assert_eq!(st.code(), Some(128 + 9));
    let r = report::read(dir.path()).unwrap().unwrap();
    let sigs: Vec<_> = r
        .signals
        .iter()
        .map(|s| (s.signal.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(sigs, vec![("TERM", "deadline"), ("KILL", "grace")]);
    let exited = r.exited.unwrap();
    assert_eq!((exited.signal, exited.interrupted), (Some(9), true));
}

#[test]
fn a_stop_sent_to_the_supervisor_reaches_the_payload() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = supervisor(dir.path(), now_s() + 3600, 5, &["sleep", "60"])
        .spawn()
        .unwrap();
    // Wait until the payload runs, then ask the supervisor to stop.
    let deadline = Instant::now() + Duration::from_secs(10);
    while report::read(dir.path())
        .ok()
        .flatten()
        .and_then(|r| r.payload_pid)
        .is_none()
    {
        assert!(Instant::now() < deadline, "payload never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(128 + 15));
    let r = report::read(dir.path()).unwrap().unwrap();
    assert_eq!(r.signals[0].reason, "forwarded");
    assert_eq!(r.exited.unwrap().signal, Some(15));
}

/// Wait (10 s at most) until `path` exists.
fn await_file(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < deadline, "no {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Slurm's TERM of a stop or a preemption reaches every process of the step: the payload's
/// and the supervisor's, which passes it on. The payload's handler ignores a second TERM and
/// runs a program that handles TERM itself (`git commit` does: it drops its lock file and
/// fails). The supervisor's copy, however late it comes, must reach the payload's own process
/// only, never the program its handler started (CI, 24.11: a third generation's `git add`
/// failed with "index.lock write error: Bad file descriptor").
#[test]
fn a_stop_the_payload_got_from_slurm_is_passed_on_to_its_first_process_only() {
    let dir = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let m = marks.path().display().to_string();
    let child = format!(
        "import pathlib, signal, sys, time\n\
         d = pathlib.Path('{m}')\n\
         def termed(*_):\n    (d / 'child').write_text('TERM'); sys.exit(1)\n\
         signal.signal(signal.SIGTERM, termed)\n\
         (d / 'ready').touch()\n\
         time.sleep(2)\n\
         (d / 'child').write_text('done')\n"
    );
    std::fs::write(marks.path().join("child.py"), child).unwrap();
    let script = format!(
        "trap 'trap \"\" TERM; python3 {m}/child.py; exit 0' TERM; touch {m}/armed; \
         while :; do sleep 0.05; done"
    );
    let mut sup = supervisor(dir.path(), now_s() + 3600, 10, &["sh", "-c", &script])
        .spawn()
        .unwrap();
    await_file(&marks.path().join("armed"));
    let payload = report::read(dir.path())
        .unwrap()
        .unwrap()
        .payload_pid
        .unwrap();
    // The sweep reaches the payload's group first; the supervisor's share comes once the
    // handler's program runs (a supervisor that was slow to be scheduled).
    unsafe { libc::kill(-(payload as i32), libc::SIGTERM) };
    await_file(&marks.path().join("ready"));
    unsafe { libc::kill(sup.id() as i32, libc::SIGTERM) };
    let st = sup.wait().unwrap();
    assert_eq!(st.code(), Some(0));
    let got = std::fs::read_to_string(marks.path().join("child")).unwrap();
    assert_eq!(
        got, "done",
        "the handler's program was sent the supervisor's TERM"
    );
    let r = report::read(dir.path()).unwrap().unwrap();
    assert_eq!(r.signals.len(), 1, "{:?}", r.signals);
    assert_eq!(r.signals[0].reason, "forwarded");
}

#[test]
fn a_missing_program_is_recorded_as_127() {
    let dir = tempfile::tempdir().unwrap();
    let st = supervisor(dir.path(), now_s() + 3600, 5, &["/nonexistent/program"])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(127));
    let r = report::read(dir.path()).unwrap().unwrap();
    assert_eq!(r.exited.unwrap().code, Some(127));
    assert!(r.payload_pid.is_none());
}

// ---- node mode (`--worker-dir`): the worker's directories, checks, publication, cleanup ----

const SID: &str = "6f1c1c1e-0000-4000-8000-000000000002";

/// `dispatch worker run` in node mode: directories below `root/w`, publication into
/// `root/published`, a 2 s native-state budget.
fn node_supervisor(root: &std::path::Path, cmd: &[&str]) -> Command {
    node_supervisor_until(root, now_s() + 3600, 1, cmd)
}

/// [`node_supervisor`] with its early-shutdown deadline and grace.
fn node_supervisor_until(
    root: &std::path::Path,
    deadline: i64,
    grace: u32,
    cmd: &[&str],
) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.args(["worker", "run", "--submission-id", SID, "--worker", "w"])
        .arg("--worker-dir")
        .arg(root.join("w"))
        .arg("--publish-dir")
        .arg(root.join("published"))
        .args([
            "--deadline",
            &deadline.to_string(),
            "--grace",
            &grace.to_string(),
            "--native-state-budget",
            "2",
            "--",
        ])
        .args(cmd)
        .env_remove("DISPATCH_FAILPOINTS");
    c
}

fn node_dirs(root: &std::path::Path) -> dispatch::worker::dirs::WorkerDirs {
    dispatch::worker::dirs::WorkerDirs::at(root.join("w"))
}

/// Run `sh -c script` in node mode to a successful end; its worker journal.
fn node_run(root: &std::path::Path, script: &str) -> report::WorkerReport {
    let st = node_supervisor(root, &["sh", "-c", script])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(0));
    report::read(&node_dirs(root).evidence).unwrap().unwrap()
}

#[test]
fn node_mode_exports_private_dirs_publishes_and_cleans_up() {
    let root = tempfile::tempdir().unwrap();
    let st = node_supervisor(
        root.path(),
        &[
            "sh",
            "-c",
            "env | grep ^DISPATCH_ | sort > \"$DISPATCH_EVIDENCE_DIR/env\"; \
             echo result > result.txt; printf 'a\\nb\\n' > \"$DISPATCH_STATE_DIR/log.jsonl\"",
        ],
    )
    .status()
    .unwrap();
    assert_eq!(st.code(), Some(0));
    let d = node_dirs(root.path());
    let env = std::fs::read_to_string(d.evidence.join("env")).unwrap();
    for (k, v) in [
        ("DISPATCH_WORKSPACE", &d.checkout),
        ("DISPATCH_RUNTIME_DIR", &d.runtime),
        ("DISPATCH_CACHE_DIR", &d.cache),
        ("DISPATCH_STATE_DIR", &d.state),
        ("DISPATCH_EVIDENCE_DIR", &d.evidence),
        (
            "DISPATCH_CHECKPOINT",
            &d.runtime.join("checkpoint-declared"),
        ),
    ] {
        assert!(
            env.contains(&format!("{k}={}\n", v.display())),
            "{k} in {env}"
        );
    }
    let r = report::read(&d.evidence).unwrap().unwrap();
    assert!(r.checks.as_ref().unwrap().ok);
    assert!(r.quiesced.as_ref().unwrap().quiet);
    assert_eq!(r.logs.as_ref().unwrap().logs[0].records, 2);
    // Without a source asset the workspace is published as a copy of its files.
    let p = match r.publication.as_ref().unwrap() {
        report::Publication::Published(p) => p.clone(),
        other => panic!("{other:?}"),
    };
    let m = dispatch::worker::publish::verify_published(std::path::Path::new(&p.dir)).unwrap();
    assert!(m.files.iter().any(|f| f.path == "workspace/result.txt"));
    assert!(m.files.iter().any(|f| f.path == "evidence/env"));
    assert_eq!(r.cleaned.as_ref().unwrap().state_class, "sealed");
    assert!(r.checkpoint.is_none(), "no marker, no checkpoint");
    assert!(!d.checkout.exists() && !d.runtime.exists() && !d.cache.exists());
    assert_eq!(r.finished.unwrap().outcome, "completed");
}

/// Issue 36, item 2: a payload that exits 3 on its own, or cannot be started at all, is a
/// failure: the supervisor records `failed` and leaves its state crash-class, never sealed.
#[test]
fn a_payload_that_fails_is_recorded_failed_and_its_state_is_not_sealed() {
    for (cmd, code) in [
        (
            &["sh", "-c", "echo half > \"$DISPATCH_STATE_DIR/db\"; exit 3"][..],
            3,
        ),
        (&["no-such-command-for-dispatch"][..], 127),
    ] {
        let root = tempfile::tempdir().unwrap();
        let st = node_supervisor(root.path(), cmd).status().unwrap();
        assert_eq!(st.code(), Some(code), "{cmd:?}");
        let r = report::read(&node_dirs(root.path()).evidence)
            .unwrap()
            .unwrap();
        let f = r.finished.as_ref().unwrap();
        assert_eq!(
            (f.outcome.as_str(), f.exit_code),
            ("failed", code),
            "{cmd:?}"
        );
        let class = r.cleaned.as_ref().map(|c| c.state_class.as_str());
        assert_eq!(class, Some("crash_class_partial"), "{cmd:?}");
    }
}

// ---- checkpoints (docs/operations.md, "Checkpoints") ----

/// A payload that counts in its native state and, on TERM, saves and declares a checkpoint.
const CHECKPOINTING: &str = "trap 'echo 42 > \"$DISPATCH_STATE_DIR/n\"; \
     touch \"$DISPATCH_CHECKPOINT\"; exit 0' TERM; \
     while :; do sleep 0.1; done";

fn mode_of(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode()
}

/// Let a temp dir holding sealed (read-only) state be removed.
fn unseal(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
}

#[test]
fn a_checkpoint_declared_at_the_deadline_is_hashed_and_sealed() {
    let root = tempfile::tempdir().unwrap();
    let st = node_supervisor_until(root.path(), now_s() + 2, 10, &["sh", "-c", CHECKPOINTING])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(0));
    let d = node_dirs(root.path());
    let r = report::read(&d.evidence).unwrap().unwrap();
    assert_eq!(r.signals[0].reason, "deadline");
    let c = r.checkpoint.as_ref().expect("CheckpointDeclared");
    assert_eq!(
        (c.code, c.signal, c.killed_after_grace),
        (Some(0), None, false)
    );
    assert!(
        c.marker.ends_with("/runtime/checkpoint-declared"),
        "{}",
        c.marker
    );
    let cleaned = r.cleaned.as_ref().unwrap();
    assert_eq!(cleaned.state_class, "checkpointed", "{}", cleaned.reason);
    let hashed = r.native_state.as_ref().unwrap();
    assert!(hashed.complete && hashed.files.iter().any(|f| f.path == "n"));
    assert_eq!(std::fs::read_to_string(d.state.join("n")).unwrap(), "42\n");
    assert_eq!(mode_of(&d.state.join("n")) & 0o222, 0, "not sealed");
    assert_eq!(mode_of(&d.state) & 0o222, 0, "not sealed");
    let class = std::fs::read_to_string(d.root.join("STATE-CLASS")).unwrap();
    assert!(class.starts_with("checkpointed\n"), "{class}");
    unseal(&d.state);
}

#[test]
fn a_checkpoint_declared_by_a_payload_killed_after_the_grace_is_crash_class() {
    let root = tempfile::tempdir().unwrap();
    let script = "echo 1 > \"$DISPATCH_STATE_DIR/n\"; touch \"$DISPATCH_CHECKPOINT\"; \
                  trap '' TERM; sleep 30 & wait; sleep 30";
    let st = node_supervisor_until(root.path(), now_s() + 2, 1, &["sh", "-c", script])
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(128 + 9));
    let r = report::read(&node_dirs(root.path()).evidence)
        .unwrap()
        .unwrap();
    let c = r.checkpoint.as_ref().expect("CheckpointDeclared");
    assert_eq!((c.signal, c.killed_after_grace), (Some(9), true));
    let cleaned = r.cleaned.as_ref().unwrap();
    assert_eq!(cleaned.state_class, "crash_class_partial");
    assert!(
        cleaned
            .reason
            .contains("declared a checkpoint but was killed after the grace"),
        "{}",
        cleaned.reason
    );
    // Crash-class state is kept as it was, writable.
    assert_ne!(mode_of(&node_dirs(root.path()).state.join("n")) & 0o200, 0);
}

#[test]
fn a_checkpoint_declared_without_a_signal_and_an_exit_0_counts() {
    let root = tempfile::tempdir().unwrap();
    let r = node_run(
        root.path(),
        "echo 7 > \"$DISPATCH_STATE_DIR/n\"; : > \"$DISPATCH_CHECKPOINT\"",
    );
    assert!(r.signals.is_empty());
    assert!(!r.exited.as_ref().unwrap().interrupted);
    assert!(r.checkpoint.is_some());
    assert_eq!(r.cleaned.as_ref().unwrap().state_class, "checkpointed");
    assert_eq!(r.finished.as_ref().unwrap().outcome, "completed");
    unseal(&node_dirs(root.path()).state);
}

#[test]
fn a_checkpoint_declared_with_a_non_zero_exit_is_crash_class() {
    let root = tempfile::tempdir().unwrap();
    let st = node_supervisor(
        root.path(),
        &["sh", "-c", "touch \"$DISPATCH_CHECKPOINT\"; exit 4"],
    )
    .status()
    .unwrap();
    assert_eq!(st.code(), Some(4));
    let r = report::read(&node_dirs(root.path()).evidence)
        .unwrap()
        .unwrap();
    let cleaned = r.cleaned.as_ref().unwrap();
    assert_eq!(cleaned.state_class, "crash_class_partial");
    assert!(
        cleaned.reason.contains("exited with code 4"),
        "{}",
        cleaned.reason
    );
}

#[test]
fn a_writer_that_outlives_the_payload_makes_the_state_crash_class() {
    let root = tempfile::tempdir().unwrap();
    // The daemon leaves the payload's process group (setsid), so the group kill misses it,
    // and it keeps a native-state file open.
    let r = node_run(
        root.path(),
        "setsid sh -c 'exec 3>>\"$DISPATCH_STATE_DIR/held\"; exec sleep 60' & sleep 0.5",
    );
    let q = r.quiesced.as_ref().unwrap();
    for h in &q.holders {
        unsafe { libc::kill(h.pid as i32, libc::SIGKILL) };
    }
    assert!(!q.quiet, "{q:?}");
    assert!(
        q.holders.iter().any(|h| h.path.ends_with("/state/held")),
        "{q:?}"
    );
    assert!(q.waited_ms >= 900, "gave up before half its budget: {q:?}");
    let c = r.cleaned.as_ref().unwrap();
    assert_eq!(c.state_class, "crash_class_partial");
    assert!(c.reason.contains("held files open"), "{}", c.reason);
}

#[test]
fn a_torn_append_only_log_makes_the_state_crash_class() {
    let root = tempfile::tempdir().unwrap();
    let r = node_run(
        root.path(),
        "printf '{\"a\":1}\\n{\"b\"' > \"$DISPATCH_STATE_DIR/rollout.jsonl\"",
    );
    let logs = r.logs.as_ref().unwrap();
    assert!(!logs.ok);
    assert_eq!((logs.logs[0].records, logs.logs[0].trailing_bytes), (1, 4));
    assert_eq!(
        r.cleaned.as_ref().unwrap().state_class,
        "crash_class_partial"
    );
}

#[test]
fn another_workers_directory_is_refused_before_anything_is_written_in_it() {
    for live in [true, false] {
        let root = tempfile::tempdir().unwrap();
        let d = node_dirs(root.path());
        std::fs::create_dir_all(&d.root).unwrap();
        let owner = d.root.join(".owner");
        std::fs::write(&owner, "6f1c1c1e-0000-4000-8000-0000000000ff").unwrap();
        let held = std::fs::File::open(&owner).unwrap();
        if live {
            held.try_lock().unwrap();
        }
        let marker = root.path().join("ran");
        let out = node_supervisor(
            root.path(),
            &["sh", "-c", "touch \"$1\"", "sh", marker.to_str().unwrap()],
        )
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(3), "live={live}");
        assert!(!marker.exists(), "the payload ran");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let expected = if live {
            "another live worker"
        } else {
            "another, finished, worker"
        };
        assert!(stderr.contains(expected), "{stderr}");
        // Nothing was created, probed, journaled or removed in the other worker's root, and
        // its owner record is as it was.
        let inside: Vec<String> = std::fs::read_dir(&d.root)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(inside, [".owner"], "live={live}");
        assert_eq!(
            std::fs::read_to_string(&owner).unwrap(),
            "6f1c1c1e-0000-4000-8000-0000000000ff"
        );
    }
}

#[test]
fn a_supervisor_killed_mid_publication_leaves_nothing_half_published() {
    let root = tempfile::tempdir().unwrap();
    let st = node_supervisor(root.path(), &["sh", "-c", "echo w > work"])
        .env(
            "DISPATCH_FAILPOINTS",
            "supervisor-publish-before-rename=abort",
        )
        .status()
        .unwrap();
    assert_eq!(st.code(), None, "the failpoint did not fire");
    let published = root.path().join("published");
    let names: Vec<String> = std::fs::read_dir(&published)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    // Only a temporary directory: never the published name.
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with(".tmp-w-"), "{names:?}");
    let r = report::read(&node_dirs(root.path()).evidence)
        .unwrap()
        .unwrap();
    assert!(matches!(
        r.publication,
        Some(report::Publication::Started(_))
    ));
    // Once its step is over nothing can finish it: the coordinator removes it, and reports the
    // unrecorded native state as crash-class.
    let sid: uuid::Uuid = SID.parse().unwrap();
    assert_eq!(
        dispatch::worker::publish::sweep_temps(&published, "w", sid),
        1
    );
    assert_eq!(std::fs::read_dir(&published).unwrap().count(), 0);
    assert_eq!(
        r.ingested(sid, true).state_class.as_deref(),
        Some("crash_class_partial")
    );
}

/// A state directory whose coordinator journal has pool `p` and worker `w` (`sid`), as attach
/// and submit record them, and that worker's supervisor run to its end in its own directory;
/// with `pool status p --json` of that worker, and a supervisor run for `sid` anywhere.
struct OnePoolWorker {
    root: tempfile::TempDir,
    sd: std::path::PathBuf,
    sid: uuid::Uuid,
    dirs: dispatch::worker::dirs::WorkerDirs,
}

impl OnePoolWorker {
    fn new() -> OnePoolWorker {
        use dispatch::event::pool::*;
        use dispatch::event::{Event, Micros};
        use dispatch::journal::{Options, Writer};

        let root = tempfile::tempdir().unwrap();
        let sd = root.path().join("state");
        let sid = uuid::Uuid::new_v4();
        let coordinator = Writer::open(&sd.join("journal"), Options::default()).unwrap();
        coordinator
            .append(vec![
                Event::PoolAttached(PoolAttached {
                    pool: "p".into(),
                    allocation: Allocation {
                        job_id: dispatch::slurm::JobId::new(7).unwrap(),
                        node: "vm".into(),
                        user: "root".into(),
                        start_time: Micros::from_secs(now_s() - 60),
                        end_time: Micros::from_secs(now_s() + 3600),
                        cpus: 2,
                        mem_mb: 1024,
                        partition: "debug".into(),
                        account: "dev".into(),
                        qos: "normal".into(),
                    },
                }),
                Event::WorkerSubmitIntent(WorkerSubmitIntent {
                    pool: "p".into(),
                    worker: "w".into(),
                    submission_id: sid,
                    cpus: 1,
                    mem_mb: 100,
                    publication_timeout_s: 30,
                    command: vec!["true".into()],
                }),
            ])
            .unwrap();
        drop(coordinator);
        let dirs = dispatch::worker::dirs::WorkerDirs::new(&sd.join("pools"), "p", sid);
        let x = OnePoolWorker {
            root,
            sd,
            sid,
            dirs,
        };
        x.run_in(&x.dirs.root);
        x
    }

    fn run_in(&self, worker_dir: &std::path::Path) {
        let st = Command::new(env!("CARGO_BIN_EXE_dispatch"))
            .args(["worker", "run", "--submission-id", &self.sid.to_string()])
            .arg("--worker-dir")
            .arg(worker_dir)
            .arg("--publish-dir")
            .arg(worker_dir.join("published"))
            .args(["--worker", "w", "--deadline", "+3600", "--", "true"])
            .env_remove("DISPATCH_FAILPOINTS")
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(0));
    }

    fn status(&self) -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_dispatch"))
            .arg("--state-dir")
            .arg(&self.sd)
            .args(["pool", "status", "p", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["pools"][0]["workers"][0].clone()
    }

    fn record(&self, events: Vec<dispatch::event::Event>) {
        use dispatch::journal::{Options, Writer};
        let coordinator = Writer::open(&self.sd.join("journal"), Options::default()).unwrap();
        coordinator.append(events).unwrap();
    }
}

/// `pool status` reads each worker's own journal (no Slurm call) and checks it against what the
/// coordinator ingested from it before: a journal replaced after that is reported, not shown.
#[test]
fn pool_status_reads_worker_journals_and_never_trusts_a_rewritten_one() {
    use dispatch::event::Event;

    let x = OnePoolWorker::new();
    let (root, sid, dirs) = (x.root.path(), x.sid, &x.dirs);
    let status = || x.status();
    let run_in = |d: &std::path::Path| x.run_in(d);
    let w = status();
    assert_eq!(w["worker_journal"]["status"], "clean", "{w}");
    assert_eq!(w["preflight"], "passed");
    assert_eq!(w["publication"]["outcome"], "published");
    assert_eq!(w["state_class"], "sealed");

    // What reconcile would record: the anchor.
    let r = report::read(&dirs.evidence).unwrap().unwrap();
    x.record(vec![Event::WorkerReportIngested(r.ingested(sid, false))]);
    assert_eq!(status()["worker_journal"]["status"], "clean");

    // Replace the worker's journal with another supervisor's.
    let other = root.join("other");
    run_in(&other);
    std::fs::remove_dir_all(dirs.evidence.join("journal")).unwrap();
    std::fs::rename(
        other.join("evidence/journal"),
        dirs.evidence.join("journal"),
    )
    .unwrap();
    let w = status();
    assert_eq!(w["worker_journal"]["status"], "rewritten", "{w}");
    assert!(
        w["worker_journal"]["reason"]
            .as_str()
            .unwrap()
            .contains("replaced"),
        "{w}"
    );
    // What is shown is what was ingested before, never the new journal.
    assert_eq!(w["publication"]["outcome"], "published");
    assert_eq!(
        w["publication"]["dir"],
        r.ingested(sid, false).published_dir.unwrap().as_str()
    );
}

/// A released worker's journal was ingested for the last time in the commit that proved its
/// step over, and nothing can write to it after: `pool status` shows what was ingested and reads
/// no file of it (a pool keeps hundreds of finished workers), even when the journal was damaged
/// since; `inspect`, which reads it, shows the damage.
#[test]
fn pool_status_shows_a_released_worker_from_state_without_reading_its_journal() {
    use dispatch::event::pool::WorkerTerminal;
    use dispatch::event::Event;

    let x = OnePoolWorker::new();
    let r = report::read(&x.dirs.evidence).unwrap().unwrap();
    let ingested = r.ingested(x.sid, true);
    x.record(vec![
        Event::WorkerReportIngested(ingested.clone()),
        Event::WorkerTerminal(WorkerTerminal {
            submission_id: x.sid,
            proof: "sacct: step COMPLETED 0:0".into(),
        }),
    ]);
    // One payload byte of its journal flipped after the release: a read would call it corrupt.
    let segment = x.dirs.evidence.join("journal/segment-00000001.djl");
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&segment, bytes).unwrap();

    let w = x.status();
    assert_eq!(w["state"], "released", "{w}");
    assert_eq!(w["worker_journal"]["status"], "ingested", "{w}");
    assert_eq!(w["worker_journal"]["last_seq"], ingested.last_seq, "{w}");
    assert_eq!(w["publication"]["outcome"], "published", "{w}");
    assert_eq!(
        w["publication"]["dir"],
        ingested.published_dir.as_deref().unwrap(),
        "{w}"
    );
    assert_eq!(w["state_class"], "sealed", "{w}");
    assert_eq!(w["preflight"], "passed", "{w}");
    assert!(
        w["stdout"].as_str().unwrap().ends_with("/evidence/stdout"),
        "{w}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--state-dir")
        .arg(&x.sd)
        .args(["inspect", "w", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["worker_journal"]["status"], "corrupt", "{v}");
}

/// The supervisor aborted at each of its boundaries (no source asset, so no checkout): its
/// journal always reads back whole (at most a torn tail, which reading recovers), the payload
/// ran exactly when the point comes after its start, nothing is ever published under its final
/// name unless the point comes after the rename, and what the coordinator would ingest calls
/// the native state crash-class, never sealed.
#[test]
fn a_supervisor_killed_at_any_point_leaves_a_journal_that_says_how_far_it_got() {
    for (point, payload_ran, published) in [
        ("supervisor-before-asset-check", false, false),
        ("supervisor-before-spawn", false, false),
        ("supervisor-before-exit-record", true, false),
        ("supervisor-publish-after-intent", true, false),
        ("supervisor-before-cleanup", true, true),
    ] {
        let root = tempfile::tempdir().unwrap();
        let st = node_supervisor(
            root.path(),
            &["sh", "-c", "echo ran > \"$DISPATCH_EVIDENCE_DIR/ran\""],
        )
        .env("DISPATCH_FAILPOINTS", format!("{point}=abort"))
        .status()
        .unwrap();
        assert_eq!(st.code(), None, "{point}: the failpoint did not fire");
        let d = node_dirs(root.path());
        assert_eq!(d.evidence.join("ran").exists(), payload_ran, "{point}");
        let r = report::read(&d.evidence)
            .unwrap_or_else(|e| panic!("{point}: the worker journal does not read: {e}"))
            .expect("a worker journal");
        assert_eq!(r.payload_pid.is_some(), payload_ran, "{point}");
        let exit_recorded = matches!(
            point,
            "supervisor-publish-after-intent" | "supervisor-before-cleanup"
        );
        assert_eq!(r.exited.is_some(), exit_recorded, "{point}");
        let finals: Vec<String> = std::fs::read_dir(root.path().join("published"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with(".tmp-"))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(!finals.is_empty(), published, "{point}: {finals:?}");
        let sid: uuid::Uuid = SID.parse().unwrap();
        let class = r.ingested(sid, true).state_class;
        assert_ne!(class.as_deref(), Some("sealed"), "{point}");
        assert!(r.cleaned.is_none(), "{point}: cleanup recorded");
    }
}

/// Issue 36 item 5: `pool detach` of a pool whose worker exited (its own journal says so) but
/// is not yet reconciled names `reconcile`, which proves it over, not `pool stop-worker`; a
/// worker whose step may still run is named with `pool stop-worker`.
#[test]
fn detach_names_reconcile_for_an_exited_worker_and_stop_worker_for_a_running_one() {
    use dispatch::event::pool::WorkerSubmitIntent;
    use dispatch::event::Event;

    let x = OnePoolWorker::new();
    let detach = || {
        let out = Command::new(env!("CARGO_BIN_EXE_dispatch"))
            .arg("--state-dir")
            .arg(&x.sd)
            .args(["pool", "detach", "p"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = detach();
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("`dispatch reconcile`") && err.contains("exited") && err.contains("w"),
        "{err}"
    );
    assert!(!err.contains("stop-worker"), "{err}");

    x.record(vec![Event::WorkerSubmitIntent(WorkerSubmitIntent {
        pool: "p".into(),
        worker: "busy".into(),
        submission_id: uuid::Uuid::new_v4(),
        cpus: 1,
        mem_mb: 100,
        publication_timeout_s: 30,
        command: vec!["sleep".into(), "1000".into()],
    })]);
    let (code, err) = detach();
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("busy") && err.contains("`dispatch pool stop-worker p busy`"),
        "{err}"
    );
    assert!(err.contains("`dispatch reconcile`"), "{err}");
}

/// Every file below `dir` with its bytes, in order: what a later run must leave as it was.
fn tree_bytes(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                todo.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Slurm requeued the job (the same job id started again, `SLURM_RESTART_COUNT=1`): the
/// supervisor starts a second time in the same worker's directories. It refuses before the
/// payload, says why, and leaves the first run's evidence (its journal, its publication) as
/// it was: one submission never runs twice.
#[test]
fn a_second_run_of_a_requeued_job_refuses_and_leaves_the_first_runs_evidence() {
    let root = tempfile::tempdir().unwrap();
    let first = node_run(
        root.path(),
        "echo first > \"$DISPATCH_STATE_DIR/n\"; echo one > \"$DISPATCH_RUNTIME_DIR/r\"",
    );
    assert!(first.finished.is_some());
    let d = node_dirs(root.path());
    let evidence = tree_bytes(&d.evidence);
    let published = tree_bytes(&root.path().join("published"));
    let marker = root.path().join("ran-again");
    let out = node_supervisor(
        root.path(),
        &["sh", "-c", "touch \"$1\"", "sh", marker.to_str().unwrap()],
    )
    .env("SLURM_JOB_ID", "77")
    .env("SLURM_RESTART_COUNT", "1")
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(3), "a refusal's exit code");
    assert!(!marker.exists(), "the payload ran a second time");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("requeued"), "{stderr}");
    assert!(stderr.contains("Restarts=1"), "{stderr}");
    assert_eq!(
        tree_bytes(&d.evidence),
        evidence,
        "the first run's evidence changed"
    );
    assert_eq!(tree_bytes(&root.path().join("published")), published);
    let again = report::read(&d.evidence).unwrap().unwrap();
    assert_eq!(
        again.finished, first.finished,
        "the journal's end is the first run's"
    );
}
