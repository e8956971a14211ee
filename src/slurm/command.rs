//! The Slurm client programs and how one ended: plain types, shared by the runner that starts
//! them and the errors that name them.

use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use serde::{Deserialize, Serialize};

/// The Slurm client programs this boundary runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SlurmCommand {
    Sbatch,
    Salloc,
    Srun,
    Squeue,
    Scontrol,
    Scancel,
    Sacct,
}

impl SlurmCommand {
    pub const ALL: [SlurmCommand; 7] = [
        SlurmCommand::Sbatch,
        SlurmCommand::Salloc,
        SlurmCommand::Srun,
        SlurmCommand::Squeue,
        SlurmCommand::Scontrol,
        SlurmCommand::Scancel,
        SlurmCommand::Sacct,
    ];

    pub fn program(self) -> &'static str {
        match self {
            SlurmCommand::Sbatch => "sbatch",
            SlurmCommand::Salloc => "salloc",
            SlurmCommand::Srun => "srun",
            SlurmCommand::Squeue => "squeue",
            SlurmCommand::Scontrol => "scontrol",
            SlurmCommand::Scancel => "scancel",
            SlurmCommand::Sacct => "sacct",
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for SlurmCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.program())
    }
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitInfo {
    Code(i32),
    Signal(i32),
}

impl ExitInfo {
    pub(crate) fn from_status(s: ExitStatus) -> ExitInfo {
        match (s.code(), s.signal()) {
            (Some(c), _) => ExitInfo::Code(c),
            (None, Some(sig)) => ExitInfo::Signal(sig),
            // Neither code nor signal is impossible on Unix for a waited child.
            (None, None) => ExitInfo::Signal(0),
        }
    }

    pub fn success(self) -> bool {
        self == ExitInfo::Code(0)
    }
}

impl fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitInfo::Code(c) => write!(f, "exit {c}"),
            ExitInfo::Signal(s) => write!(f, "killed by signal {s}"),
        }
    }
}
