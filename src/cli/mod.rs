//! Command-line definitions, rendering and exit codes. No I/O beyond stdout/stderr.
//! The names, flags, JSON keys and exit codes defined here are a contract: docs/cli.md, kept
//! complete by tests/cli_contract.rs (add, never rename).

pub mod asset;
pub mod doctor;
pub mod exit;
pub mod forget;
mod hint;
pub mod jobs;
pub mod journal;
pub mod logs;
pub mod output;
pub mod pool;
pub mod pool_status;
pub mod reconcile;
pub mod replay;
pub mod report;
pub mod report_html;
pub mod session;
pub mod shell;
pub mod submit;
pub mod table;
pub mod trial;
pub mod usage;
pub mod watch;
pub mod worker;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "dispatch",
    version = env!("VERSION_WITH_COMMIT"),
    about = "Run workers on Slurm clusters without ever losing track of them",
    // Each command's help lists these apart from its own options.
    next_help_heading = "Global options",
    after_help = "The contract (commands, flags, JSON keys, exit codes): docs/cli.md.\n\
        Exit codes: 0 done, 1 failed, 2 usage, 3 refused or not found, 4 outcome unknown, \
        5 journal damaged"
)]
pub struct Cli {
    /// State directory (default: $DISPATCH_STATE_DIR, $XDG_STATE_HOME/dispatch, ~/.local/state/dispatch)
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Config file (default: $DISPATCH_CONFIG, $XDG_CONFIG_HOME/dispatch/config.toml, ~/.config/dispatch/config.toml)
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print exactly one JSON document on stdout (JSON Lines for streaming commands)
    #[arg(long, global = true)]
    pub json: bool,
    /// More diagnostics on stderr (-v debug, -vv trace)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Colour in diagnostics: auto (only on a terminal, and not with NO_COLOR or TERM=dumb),
    /// always, never
    #[arg(long, global = true, value_name = "WHEN", default_value = "auto",
          value_parser = ["auto", "always", "never"])]
    pub color: String,
    /// Seconds to wait for the journal's writer lock before giving up with exit 4 (0-86400,
    /// default 120). A writer on another login node is taken over once its lease (30 s) has gone
    /// silent; one on this host as soon as its process is gone
    #[arg(long, global = true, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(0..=86400))]
    pub wait_lock: Option<u64>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, check, read and repair the journal
    #[command(subcommand)]
    Journal(journal::JournalCommand),
    /// Immutable source and image assets that workers share, identified by SHA-256
    #[command(subcommand)]
    Asset(asset::AssetCommand),
    /// Worker pools inside an allocation you own
    #[command(subcommand)]
    Pool(pool::PoolCommand),
    /// Run one worker as its own Slurm job (the ordinary path; the worker owns the allocation)
    #[command(after_help = concat!(pool::where_it_runs!(), "\n\nExamples:\n  \
        dispatch submit -T savio-htc --cpus 4 --mem 16G --time 2:00:00 --source src --name w1 -- ./run.sh\n  \
        dispatch submit -T savio-htc --cpus 1 --mem 2G --time 30 --name w2 -- \"$HOME/jobs/run.sh\"\n  \
        dispatch submit --cpus 1 --mem 2G --time 30 --source src --trial t1 -- make test"))]
    Submit(submit::SubmitArgs),
    /// Stop a worker started by `dispatch submit`: TERM, the grace, then cancel its job
    #[command(after_help = "Examples:\n  \
        dispatch stop w1\n  \
        dispatch stop w1 --grace 60 --json")]
    Stop {
        /// The worker, by name or submission id
        #[arg(value_parser = crate::names::arg::path_name("worker"))]
        worker: String,
        /// Seconds the payload has between SIGTERM and SIGKILL (its supervisor kills it; the
        /// step is cancelled if it has not ended 10 s after that); default: the worker's own
        /// grace (`--grace` at submit, as its supervisor recorded it), 10 without that record
        #[arg(long, value_parser = clap::value_parser!(u64).range(0..=3600))]
        grace: Option<u64>,
    },
    /// Offline audit: chain, reducer replay, the no-effect-without-intent and release-once
    /// rules, snapshot agreement, published evidence. Exit 0 ok, 1 violations, 5 damaged
    #[command(after_help = "Examples:\n  \
        dispatch audit\n  \
        dispatch audit --json | jq .rules.violations")]
    Audit,
    /// Forensic view of one worker (by name or submission id): its timeline, the last event
    /// about it, and its own journal up to any damage; or, with --trial, of a whole trial and
    /// each of its workers. Offline: no Slurm call, nothing written
    #[command(group(clap::ArgGroup::new("what").required(true).args(["worker", "trial"])))]
    #[command(after_help = "Examples:\n  \
        dispatch inspect w1\n  \
        dispatch inspect 0b5e7c1e-8a1f-4a55-9f6e-0d4b8e2a9c11 --json\n  \
        dispatch inspect --trial t1\n  \
        dispatch inspect w1 --at 120\n  \
        dispatch inspect w1 --at \"2026-12-01 10:30\"")]
    Inspect {
        /// The worker, by name or submission id
        #[arg(value_parser = crate::names::arg::path_name("worker"))]
        worker: Option<String>,
        /// A trial instead of one worker (as `dispatch trial show`)
        #[arg(long, value_name = "TRIAL", value_parser = crate::names::arg::path_name("trial"))]
        trial: Option<String>,
        /// As it was after event SEQ, or at TIME (RFC 3339, or YYYY-MM-DD HH:MM[:SS] local)
        #[arg(long, value_name = "SEQ|TIME", value_parser = replay::at_arg)]
        at: Option<crate::state::replay::Cut>,
    },
    /// A picture of what happened to a trial, a pool or a worker: a timeline per worker, the
    /// budget over time, the evidence and what the audit says. Offline
    #[command(after_help = "Examples:\n  \
        dispatch report --trial t1 --html t1.html\n  \
        dispatch report --pool p --json | jq .audit.findings\n  \
        dispatch report --worker w1 --html w1.html")]
    Report(report::ReportArgs),
    /// Print a worker's stdout (or --stderr); with -f, follow it until the worker ends.
    /// Pool and `submit` workers alike; offline (files only, no Slurm call)
    #[command(after_help = "Examples:\n  \
        dispatch logs w1\n  \
        dispatch logs w1 --pool p --stderr\n  \
        dispatch logs 0b5e7c1e -f")]
    Logs(logs::LogsArgs),
    /// List every worker started with `dispatch submit`, active and finished (no Slurm call
    /// unless --refresh)
    #[command(after_help = "Examples:\n  \
        dispatch jobs\n  \
        dispatch jobs --refresh --json | jq '.jobs[] | select(.active)'")]
    Jobs(jobs::JobsArgs),
    /// Replay the journal against Slurm and resolve what can be proven
    #[command(after_help = "Examples:\n  \
        dispatch reconcile\n  \
        dispatch reconcile --json | jq .unknown\n  \
        dispatch reconcile --watch 60")]
    Reconcile(reconcile::ReconcileArgs),
    /// Give up on a worker or a session that no proof can settle (the controller lost its
    /// accounting, the cluster was rebuilt): releases its budget, or drops the session's record,
    /// as an operator decision that `audit` lists as an override, never as proof. Offline
    #[command(after_help = "Examples:\n  \
        dispatch forget w1 --reason \"cluster rebuilt; job 4242 gone from accounting\"\n  \
        dispatch forget --session mymirror -T savio-htc --reason \"controller lost the job\"")]
    Forget(forget::ForgetArgs),
    /// The worker side: commands that run inside a worker's job step
    #[command(subcommand)]
    Worker(worker::WorkerCommand),
    /// One session (mirror, target) and the one job it holds
    #[command(subcommand)]
    Session(session::SessionCommand),
    /// Report every session job per target, orphans, stale and unknown sessions
    #[command(after_help = "Examples:\n  \
        dispatch sessions\n  \
        dispatch sessions --json | jq .stale\n  \
        dispatch sessions --at 2026-12-01T10:30:00Z")]
    Sessions {
        /// The session records as they were after event SEQ, or at TIME (RFC 3339, or
        /// YYYY-MM-DD HH:MM[:SS] local), from the journal alone: no Slurm call
        #[arg(long, value_name = "SEQ|TIME", value_parser = replay::at_arg)]
        at: Option<crate::state::replay::Cut>,
        /// Uncut cells (rows may pass 80 columns)
        #[arg(long)]
        wide: bool,
    },
    /// Acceptance trials: open one, let workers join it, judge it once with its evidence
    #[command(subcommand)]
    Trial(trial::TrialCommand),
    /// List every trial with its workers and verdict (offline)
    #[command(after_help = "Examples:\n  \
        dispatch trials\n  \
        dispatch trials --json\n  \
        dispatch trials --at 120")]
    Trials {
        /// As they were after event SEQ, or at TIME (RFC 3339, or YYYY-MM-DD HH:MM[:SS] local)
        #[arg(long, value_name = "SEQ|TIME", value_parser = replay::at_arg)]
        at: Option<crate::state::replay::Cut>,
    },
    /// Check that this host and cluster are ready: Slurm's commands, controller and
    /// accounting, the state directory (owner, mode, file system, flock), the config's targets,
    /// and with --on-node what a compute node sees. Exit 0 ready, 1 something failed
    #[command(after_help = "Examples:\n  \
        dispatch doctor\n  \
        dispatch doctor --on-node -T savio-htc --json")]
    Doctor(doctor::DoctorArgs),
    /// Print a shell completion script on stdout
    #[command(after_help = "Examples:\n  \
        source <(dispatch completions bash)\n  \
        dispatch completions zsh > ~/.zfunc/_dispatch\n  \
        dispatch completions fish > ~/.config/fish/completions/dispatch.fish")]
    Completions {
        /// The shell to complete in
        #[arg(value_enum)]
        shell: shell::Shell,
    },
    /// Write man pages: dispatch.1 and one dispatch-COMMAND.1 per command into DIR, or
    /// dispatch.1 on stdout without DIR
    #[command(after_help = "Examples:\n  \
        dispatch man | man -l -\n  \
        dispatch man ~/.local/share/man/man1")]
    Man {
        /// Directory for the pages (created if missing)
        dir: Option<PathBuf>,
    },
}

/// Whether diagnostics on stderr may carry colour: `--color`, else only on a terminal, and never
/// with `NO_COLOR` set (to anything but empty) or `TERM=dumb`.
pub fn use_color(
    flag: &str,
    env: &dyn Fn(&str) -> Option<String>,
    stderr_is_terminal: bool,
) -> bool {
    match flag {
        "always" => true,
        "never" => false,
        _ => {
            stderr_is_terminal
                && env("NO_COLOR").is_none_or(|v| v.is_empty())
                && env("TERM").as_deref() != Some("dumb")
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn colour_only_where_it_is_wanted() {
        let none = |_: &str| None;
        assert!(super::use_color("auto", &none, true));
        assert!(!super::use_color("auto", &none, false));
        assert!(super::use_color("always", &none, false));
        assert!(!super::use_color("never", &none, true));
        let no_color = |k: &str| (k == "NO_COLOR").then(|| "1".to_owned());
        assert!(!super::use_color("auto", &no_color, true));
        let dumb = |k: &str| (k == "TERM").then(|| "dumb".to_owned());
        assert!(!super::use_color("auto", &dumb, true));
        let empty = |k: &str| (k == "NO_COLOR").then(String::new);
        assert!(super::use_color("auto", &empty, true));
    }
}
