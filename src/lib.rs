//! dispatch: run workers on Slurm clusters without ever losing track of them.
//!
//! See `ARCHITECTURE.md` for the map of modules and their invariants.

pub mod cli;
pub mod config;
pub mod event;
pub mod failpoint;
pub mod journal;
pub mod names;
pub mod ops;
pub mod policy;
pub mod slurm;
pub mod state;
pub mod statedir;
pub mod worker;
