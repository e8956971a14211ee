//! dispatch: run workers on Slurm clusters without ever losing track of them.
//!
//! See `ARCHITECTURE.md` for the map of modules and their invariants.

pub mod slurm;
