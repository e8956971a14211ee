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
        /// Early-shutdown deadline: seconds since the Unix epoch, or `+N` for N seconds after
        /// the supervisor starts (a batch job does not know its start in advance)
        #[arg(long, value_name = "UNIX_SECONDS|+SECONDS", value_parser = parse_deadline, allow_hyphen_values = false)]
        deadline: Deadline,
        /// Seconds between SIGTERM and SIGKILL
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=3600))]
        grace: u32,
        /// The payload's command and arguments
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
}

#[derive(Clone, Copy, Debug)]
pub enum Deadline {
    At(i64),
    After(i64),
}

fn parse_deadline(s: &str) -> Result<Deadline, String> {
    let bad = || format!("{s:?} is neither seconds since the epoch nor +SECONDS");
    match s.strip_prefix('+') {
        Some(n) => n
            .parse::<u32>()
            .map(|n| Deadline::After(i64::from(n)))
            .map_err(|_| bad()),
        None => s
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .map(Deadline::At)
            .ok_or_else(bad),
    }
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
                deadline: match deadline {
                    Deadline::At(t) => Micros::from_secs(*t),
                    Deadline::After(n) => Micros(Micros::now().0 + n * 1_000_000),
                },
                grace_s: *grace,
                command: command.clone(),
            };
            let code =
                supervisor::run(&spec).map_err(|e| Failure::new(exit::FAILED, e.to_string()))?;
            Ok(u8::try_from(code.clamp(0, 255)).unwrap_or(exit::FAILED))
        }
    }
}
