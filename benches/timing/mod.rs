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
