//! `dispatch worker run`: the supervisor, started inside a worker's job step.

use std::path::PathBuf;

use clap::Subcommand;
use uuid::Uuid;

use super::exit::{self, Failure};
use crate::event::Micros;
use crate::worker::supervisor::{self, RunSpec};

#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Run a payload under supervision (used inside a worker's job step)
    Run {
        /// The submission this worker belongs to
        #[arg(long)]
        submission_id: Uuid,
        /// Where the worker's own journal and evidence go
        #[arg(long, value_name = "DIR")]
        evidence_dir: PathBuf,
        /// Early-shutdown deadline, seconds since the Unix epoch: SIGTERM is sent then
        #[arg(long, value_name = "UNIX_SECONDS")]
        deadline: i64,
        /// Seconds between SIGTERM and SIGKILL
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=3600))]
        grace: u32,
        /// The payload's command and arguments
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
}

pub fn run(cmd: &WorkerCommand) -> Result<u8, Failure> {
    match cmd {
        WorkerCommand::Run {
            submission_id,
            evidence_dir,
            deadline,
            grace,
            command,
        } => {
            let spec = RunSpec {
                submission_id: *submission_id,
                evidence_dir: evidence_dir.clone(),
                deadline: Micros::from_secs(*deadline),
                grace_s: *grace,
                command: command.clone(),
            };
            let code =
                supervisor::run(&spec).map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
            Ok(u8::try_from(code.clamp(0, 255)).unwrap_or(exit::FAILED))
        }
    }
}
