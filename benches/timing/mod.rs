//! What every bench measures with: a median, and a command's wall time (it must succeed).
//! Included by path (`#[path = "timing/mod.rs"] mod timing;`).

#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

pub fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

/// `cmd`'s wall time and its stdout; panics, with its stderr, unless it succeeds.
pub fn timed(cmd: &mut Command) -> (Duration, String) {
    let t = Instant::now();
    let out = cmd.output().expect("spawn");
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (took, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `cmd`'s wall time; panics, with its stderr, unless it succeeds.
pub fn run_ok(cmd: &mut Command) -> Duration {
    timed(cmd).0
}

/// An allocation made with `salloc --no-shell --immediate=60 -J NAME ARGS…`, cancelled when
/// dropped (even on panic).
pub struct Salloc(pub u32);

impl Drop for Salloc {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(self.0.to_string()).status();
    }
}

pub fn salloc(name: &str, args: &[&str]) -> Salloc {
    let out = Command::new("salloc")
        .args(["--no-shell", "--immediate=60", "-J", name])
        .args(args)
        .output()
        .expect("salloc: start the dev cluster with tools/slurm-dev-cluster start");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("salloc: Granted job allocation "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("salloc failed: {stderr}"));
    Salloc(id)
}

/// The millisecond stamp (since the epoch) of slurmctld's last log line that holds one of
/// `needles`, if the log (`SlurmctldLogFile`) is readable here.
pub fn slurmctld_stamp_ms(needles: &[String]) -> Option<i64> {
    let config = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .ok()?;
    let config = String::from_utf8_lossy(&config.stdout).into_owned();
    let log = config
        .lines()
        .find_map(|l| l.strip_prefix("SlurmctldLogFile"))?
        .split('=')
        .nth(1)?
        .trim()
        .to_owned();
    let text = std::fs::read_to_string(log).ok()?;
    let line = text
        .lines()
        .rev()
        .find(|l| needles.iter().any(|n| l.contains(n.as_str())))?;
    let stamp = line.strip_prefix('[')?.split(']').next()?;
    let t = chrono::NaiveDateTime::parse_from_str(stamp, "%Y-%m-%dT%H:%M:%S%.3f").ok()?;
    Some(t.and_utc().timestamp_millis())
}

/// `cmd`'s stdout as one JSON document; panics unless it succeeds.
pub fn json_of(cmd: &mut Command) -> serde_json::Value {
    let (_, out) = timed(cmd);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

pub fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// A payload's timestamp (a file holding ns since the epoch) in µs, once it is written.
pub fn stamp(path: &std::path::Path, within: Duration) -> i64 {
    let until = Instant::now() + within;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(ns) = text.trim().parse::<i64>() {
                return ns / 1000;
            }
        }
        assert!(Instant::now() < until, "{} never written", path.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `srun --jobid=JOB -n1 -c1 --mem=100M sh -c SCRIPT`, a bare step of a payload that writes
/// its start to `stamp_file`: ms from the spawn to that timestamp.
pub fn srun_payload_ms(job: u32, script: &str, stamp_file: &std::path::Path) -> f64 {
    let start = now_us();
    let job = job.to_string();
    run_ok(Command::new("srun").args([
        "--jobid",
        &job,
        "-n1",
        "-c1",
        "--mem=100M",
        "sh",
        "-c",
        script,
    ]));
    (stamp(stamp_file, Duration::from_secs(10)) - start) as f64 / 1e3
}

/// A payload that writes the time it starts (ns since the epoch) to
/// `<dir>/<tag>-<generation>`; a dispatch worker's first generation (one with
/// `DISPATCH_CHECKPOINT`) then writes `state_files` files of 64 KiB of native state and runs
/// `then` (shell). Bare runs and later generations end at once.
pub fn stamping_payload(
    dir: &std::path::Path,
    tag: &str,
    state_files: usize,
    then: &str,
) -> String {
    format!(
        r#"date +%s%N > "{dir}/{tag}-${{DISPATCH_GENERATION:-1}}"
if [ "${{DISPATCH_GENERATION:-1}}" = 1 ] && [ -n "$DISPATCH_CHECKPOINT" ]; then
  i=0; while [ $i -lt {state_files} ]; do
    head -c 65536 /dev/urandom > "$DISPATCH_STATE_DIR/f$i"; i=$((i + 1)); done
  {then}
fi"#,
        dir = dir.display()
    )
}
