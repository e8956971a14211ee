//! Events the supervisor writes to the worker's own journal, in its evidence directory.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::Micros;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorStarted {
    pub submission_id: Uuid,
    pub job_id: Option<u64>,
    pub step_id: Option<u32>,
    pub node: String,
    /// The CPUs this step may run on, as the kernel lists them (`Cpus_allowed_list`).
    pub cpu_set: String,
    /// When SIGTERM is sent unless the payload ended first.
    pub deadline: Micros,
    pub grace_s: u32,
    pub command: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadStarted {
    pub pid: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownSignalled {
    /// `TERM` or `KILL`.
    pub signal: String,
    /// `deadline`, `grace`, or `forwarded` (the supervisor itself was told to stop).
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadExited {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// Was the payload interrupted (signal, deadline, stop) rather than finishing on its own?
    pub interrupted: bool,
}
