//! `dispatch worker run`: the supervisor, started inside a worker's job step.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use uuid::Uuid;

use super::exit::{self, Failure};
use crate::event::Micros;
use crate::policy::node::DEFAULT_APPEND_ONLY_GLOB;
use crate::policy::pool::{Budgets, PUBLICATION_TIMEOUT_DEFAULT_S};
use crate::worker::dirs::WorkerDirs;
use crate::worker::preflight::LocalAsset;
use crate::worker::supervisor::{self, NodeSpec, Resume, RunSpec};

#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Run a payload under supervision (used inside a worker's job step)
    #[command(after_help = "Examples:\n  \
        # started by pool submit and submit inside the job step; by hand, for a test:\n  \
        dispatch worker run --submission-id 0b5e7c1e-8a1f-4a55-9f6e-0d4b8e2a9c11 --evidence-dir /tmp/ev --deadline +600 -- ./run.sh")]
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The submission this worker belongs to
    #[arg(long)]
    submission_id: Uuid,
    /// The worker's own directory: checkout, runtime, cache, state and evidence below it.
    /// Without it only the payload is supervised and recorded.
    #[arg(long, value_name = "DIR")]
    worker_dir: Option<PathBuf>,
    /// Where the worker's own journal and evidence go (default: <worker-dir>/evidence)
    #[arg(long, value_name = "DIR", required_unless_present = "worker_dir")]
    evidence_dir: Option<PathBuf>,
    /// Early-shutdown deadline: seconds since the Unix epoch, or `+N` for N seconds after
    /// the supervisor starts (a batch job does not know its start in advance)
    #[arg(long, value_name = "UNIX_SECONDS|+SECONDS", value_parser = parse_deadline, allow_hyphen_values = false)]
    deadline: Deadline,
    /// Seconds between SIGTERM and SIGKILL
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=3600))]
    grace: u32,
    /// The worker's name (names its publication)
    #[arg(long, default_value = "worker", value_parser = crate::names::arg::path_name("worker"))]
    worker: String,
    /// The pool the worker belongs to, if any
    #[arg(long, value_parser = crate::names::arg::path_name("pool"))]
    pool: Option<String>,
    /// Where to publish the workspace and evidence (a `<worker>-<submission>` directory is
    /// made in it)
    #[arg(long, value_name = "DIR", requires = "worker_dir")]
    publish_dir: Option<PathBuf>,
    /// An asset to verify and use, as JSON: its record (name, kind, sha256, bytes, file,
    /// commit, tree_files, tree_bytes) and `path`, where its file is on this node
    #[arg(long = "asset", value_name = "JSON", value_parser = parse_asset, requires = "worker_dir")]
    assets: Vec<LocalAsset>,
    /// Seconds publication may take (1 to 300)
    #[arg(long, default_value_t = PUBLICATION_TIMEOUT_DEFAULT_S,
          value_parser = clap::value_parser!(u32).range(1..=300))]
    publication_timeout: u32,
    /// Seconds for writer quiescence and native-state hashing
    #[arg(long, default_value_t = Budgets::DEFAULT_NATIVE_STATE_S,
          value_parser = clap::value_parser!(u32).range(0..=3600))]
    native_state_budget: u32,
    /// Seconds for cleanup
    #[arg(long, default_value_t = Budgets::DEFAULT_CLEANUP_S,
          value_parser = clap::value_parser!(u32).range(0..=3600))]
    cleanup_budget: u32,
    /// File names in the native-state directory that are append-only logs (`*` and `?`)
    #[arg(long, default_value = DEFAULT_APPEND_ONLY_GLOB)]
    append_only_glob: String,
    /// Continue an earlier worker: its published directory (verified against its manifest;
    /// the checkout starts from its workspace)
    #[arg(long, value_name = "DIR", requires_all = ["worker_dir", "resume_state_from"])]
    resume_from: Option<PathBuf>,
    /// With --resume-from: the earlier worker's native-state directory, copied into this
    /// worker's and checked against its recorded hashes
    #[arg(long, value_name = "DIR", requires = "resume_from")]
    resume_state_from: Option<PathBuf>,
    /// This worker's generation (1 for a first run)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    generation: u32,
    /// The payload's command and arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
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

fn parse_asset(s: &str) -> Result<LocalAsset, String> {
    serde_json::from_str(s).map_err(|e| format!("not an asset description: {e}"))
}

pub fn run(cmd: &WorkerCommand) -> Result<u8, Failure> {
    let WorkerCommand::Run(a) = cmd;
    let node = a.worker_dir.as_ref().map(|root| NodeSpec {
        dirs: WorkerDirs::at(root.clone()),
        pool: a.pool.clone(),
        worker: a.worker.clone(),
        publish_dir: a.publish_dir.clone(),
        assets: a.assets.clone(),
        publication_timeout_s: a.publication_timeout,
        native_state_s: a.native_state_budget,
        cleanup_s: a.cleanup_budget,
        append_only_glob: a.append_only_glob.clone(),
        resume: a.resume_from.clone().map(|from| Resume {
            from,
            state_from: a.resume_state_from.clone().unwrap_or_default(),
            generation: a.generation,
        }),
    });
    let evidence_dir = match (&a.evidence_dir, &node) {
        (Some(e), _) => e.clone(),
        (None, Some(n)) => n.dirs.evidence.clone(),
        (None, None) => unreachable!("clap requires one of --evidence-dir and --worker-dir"),
    };
    let spec = RunSpec {
        submission_id: a.submission_id,
        evidence_dir,
        deadline: match a.deadline {
            Deadline::At(t) => Micros::from_secs(t),
            Deadline::After(n) => Micros(Micros::now().0 + n * 1_000_000),
        },
        grace_s: a.grace,
        command: a.command.clone(),
        node,
    };
    let code = supervisor::run(&spec).map_err(|e| {
        Failure::new(
            exit::FAILED,
            format!(
                "worker {} (submission {}): {e}; see its evidence in {}",
                a.worker,
                a.submission_id,
                spec.evidence_dir.display()
            ),
        )
    })?;
    Ok(u8::try_from(code.clamp(0, 255)).unwrap_or(exit::FAILED))
}
