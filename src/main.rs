use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use dispatch::cli::{self, exit, Cli, Command};
use dispatch::ops::context::Ctx;
use dispatch::slurm::{CliConfig, CliScheduler};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    init_tracing(cli.verbose, cli.quiet);
    let code = match run(&cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("dispatch: {}", f.message);
            f.code
        }
    };
    ExitCode::from(code)
}

fn run(cli: &Cli) -> Result<u8, exit::Failure> {
    let env = |k: &str| std::env::var(k).ok();
    let state_dir = || dispatch::statedir::resolve(cli.state_dir.as_deref(), &env);
    match &cli.command {
        Command::Journal(cmd) => cli::journal::run(cmd, &state_dir()?, cli.json),
        Command::Worker(cmd) => cli::worker::run(cmd),
        Command::Pool(cmd) => {
            let ctx = context(state_dir()?)?;
            block_on(cli::pool::run(cmd, &ctx, cli.json))
        }
        Command::Reconcile => {
            let ctx = context(state_dir()?)?;
            block_on(cli::pool::run_reconcile(&ctx, cli.json))
        }
    }
}

fn context(state_dir: std::path::PathBuf) -> Result<Ctx<CliScheduler>, exit::Failure> {
    let mut config = CliConfig::default();
    if let Some(secs) = std::env::var("DISPATCH_SLURM_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        config.timeout = Duration::from_secs(secs.clamp(1, 3600));
    }
    let exe = std::env::current_exe().map_err(|e| {
        exit::Failure::new(
            exit::FAILED,
            format!("cannot find the dispatch executable: {e}"),
        )
    })?;
    Ok(Ctx {
        state_dir,
        sched: CliScheduler::new(config),
        caller: dispatch::event::current_user(),
        exe,
    })
}

fn block_on<F: std::future::Future<Output = Result<u8, exit::Failure>>>(
    f: F,
) -> Result<u8, exit::Failure> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            exit::Failure::new(exit::FAILED, format!("cannot start the async runtime: {e}"))
        })?;
    rt.block_on(f)
}

fn init_tracing(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("DISPATCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
