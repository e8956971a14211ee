//! The on-node side of a worker: the supervisor that runs inside the worker's job step.

pub mod dirs;
pub mod events;
pub mod report;
pub mod supervisor;
