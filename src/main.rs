use std::process::ExitCode;

use clap::Parser;
use dispatch::cli::{self, exit, Cli, Command};

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
    }
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
