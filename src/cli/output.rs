//! Shared rendering helpers.

use std::io::Write;

use super::exit::{self, Failure};

/// Print exactly one JSON document on stdout.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, value)
        .map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
    writeln!(out).map_err(|e| Failure::new(exit::FAILED, e.to_string()))
}
