//! The Slurm boundary: typed requests and observations, the real CLI driver, output
//! parsers.
//!
//! The rule that matters most: a query never mistakes "I could not tell" for "it is
//! gone", and never takes an empty answer for proof. Every query gives [`Answer::Live`]
//! (rows, possibly none), [`Answer::Gone`] ("Invalid job id specified" for one specific id,
//! with its [`GoneProof`]) or [`Answer::Unknown`] (everything else). Only `Gone`, an explicit
//! terminal [`JobState`], or a step missing beside its listed job may release anything. See
//! `docs/slurm-boundary.md`.

pub mod action;
pub mod answer;
mod command;
pub mod digits;
pub mod duration;
pub mod error;
pub mod exit_code;
mod held_salloc;
pub mod ids;
pub mod memory;
pub mod nodes;
pub mod request;
pub mod runner;
pub mod sacct;
pub mod scheduler;
pub mod scontrol;
pub mod squeue;
pub mod srun_log;
pub mod state;
pub mod submit;
pub mod timestamp;

pub use answer::{Answer, GoneProof, Lookup};
pub use duration::SlurmDuration;
pub use error::{ParseError, Parsed, Refusal, RequestError, SlurmError};
pub use exit_code::ExitCode;
pub use ids::{JobId, JobRef, SlurmId, StepId, StepKind};
pub use memory::{MemoryMb, MEMORY_REQUEST_FORMS};
pub use nodes::NodeShare;
pub use request::{
    AcctQuery, AllocRequest, BatchPayload, BatchRequest, CancelTarget, JobName, JobQuery,
    JobSelect, Placement, Signal, StepRequest,
};
pub use runner::{CallCounts, ExitInfo, SlurmCommand};
pub use sacct::AcctRow;
pub use scheduler::{
    ActionError, Allocated, CancelReport, CliConfig, CliScheduler, HeldAllocation, LaunchedStep,
    ScancelSaid, Scheduler, TestedBatch,
};
pub use scontrol::{JobDetails, Preempted};
pub use squeue::{JobRow, StepRow};
pub use state::{JobState, StepState};
pub use submit::{SallocReport, Submitted};
pub use timestamp::SlurmTime;
