//! The on-node side of a worker: the supervisor that runs inside the worker's job step.

pub mod checkout;
pub mod checkpoint;
pub mod cleanup;
pub mod dirs;
pub mod files;
pub mod git;
pub mod preflight;
pub mod publish;
pub mod report;
pub mod resume;
pub mod settle;
pub mod stop_request;
pub mod supervisor;
