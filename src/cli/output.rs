//! Shared rendering helpers.

use std::io::Write;

use super::exit::{self, Failure};

static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `-q`: only errors on stderr from now on.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, std::sync::atomic::Ordering::Relaxed);
}

/// A warning or progress line on stderr (never stdout), unless `-q` was given.
pub fn note(line: &str) {
    if !QUIET.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("dispatch: {line}");
    }
}

/// Print exactly one JSON document on stdout.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)
        .map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
    writeln!(out).map_err(|e| Failure::new(exit::FAILED, e.to_string()))
}
