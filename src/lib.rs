//! dispatch: run workers on Slurm clusters without ever losing track of them.
//!
//! See `ARCHITECTURE.md` for the map of modules and their invariants.

// Every `unsafe` is a libc call behind a safe wrapper in `sys`.
#![deny(unsafe_code)]

/// `Display` for an enum of unit variants that serializes as a string: its serde name, so
/// the text a command prints and its `--json` cannot drift apart.
#[macro_export]
macro_rules! display_as_serde {
    ($t:ty) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match serde_json::to_value(self) {
                    Ok(serde_json::Value::String(s)) => f.write_str(&s),
                    other => unreachable!("a unit variant serializes as a string: {other:?}"),
                }
            }
        }
    };
}

pub mod backoff;
pub mod cli;
pub mod config;
pub mod event;
pub mod failpoint;
pub mod journal;
pub mod names;
pub mod next;
pub mod ops;
pub mod policy;
pub mod slurm;
pub mod state;
pub mod statedir;
#[allow(unsafe_code)]
pub mod sys;
pub mod words;
pub mod worker;
