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
