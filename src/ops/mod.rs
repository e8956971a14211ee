//! One function per command: lock, load, decide, append intent, act, append outcome.
//! Ops return typed reports; the CLI renders them.

pub mod journal;
pub mod session;
