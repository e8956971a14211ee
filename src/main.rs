#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use dispatch::cli::{self, exit, Cli, Command};
use dispatch::config::Config;
use dispatch::ops::context::Ctx;
use dispatch::slurm::{CliConfig, CliScheduler};

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return usage_error(&args, e),
    };
    init_tracing(cli.verbose, cli.quiet, &cli.color);
    if let Some(secs) = cli.wait_lock {
        dispatch::journal::lease::set_wait(std::time::Duration::from_secs(secs));
    }
    cli::output::set_quiet(cli.quiet);
    let code = match run(&cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("dispatch: {}", f.message);
            if cli.json {
                // Scripts reading --json still get exactly one document.
                dispatch::outln!("{}", f.document());
            }
            f.code
        }
    };
    ExitCode::from(code)
}

/// Clap's error (with a tip where `cli::usage` has one), exit 2; `--help` and `--version`
/// exit 0.
fn usage_error(args: &[std::ffi::OsString], e: clap::Error) -> ExitCode {
    let tip = cli::usage::tip(args, &e);
    let e = match &tip {
        Some(tip) => cli::usage::with_tip(e, tip),
        None => e,
    };
    let _ = e.print();
    if !e.use_stderr() {
        return ExitCode::from(exit::OK); // --help, --version
    }
    // A script that asked for --json gets its one document even for a usage error.
    if args.iter().any(|a| a == "--json") {
        let message = e.render().to_string();
        // The first paragraph: the error itself, without usage and help hints; and the tip.
        let message = message
            .trim_start_matches("error: ")
            .split("\n\n")
            .next()
            .unwrap_or_default()
            .trim_end();
        let message = match tip {
            Some(tip) => format!("{message}; {tip}"),
            None => message.to_owned(),
        };
        let doc = exit::Failure::new(exit::USAGE, message).document();
        dispatch::outln!("{doc}");
    }
    ExitCode::from(exit::USAGE)
}

fn run(cli: &Cli) -> Result<u8, exit::Failure> {
    let env = |k: &str| std::env::var(k).ok();
    let state_dir = || dispatch::statedir::resolve(cli.state_dir.as_deref(), &env);
    let ctx = || context(state_dir()?);
    // The offline readers take the state directory only once checked.
    let checked = || -> Result<dispatch::statedir::Checked, exit::Failure> {
        Ok(dispatch::statedir::check(&state_dir()?)?)
    };
    match &cli.command {
        Command::Journal(cmd) => cli::journal::run(cmd, &checked()?, cli.json),
        Command::Worker(cmd) => cli::worker::run(cmd),
        Command::Asset(cmd) => cli::asset::run(cmd, &ctx()?, cli.json),
        Command::Pool(cli::pool::PoolCommand::Create(args)) => {
            let (config, path, ctx) = config_and_context(cli, &env)?;
            block_on(cli::pool::run_create(args, &ctx, &config, &path, cli.json))
        }
        Command::Pool(cmd) => block_on(cli::pool::run(cmd, &ctx()?, cli.json)),
        Command::Submit(args) => {
            let (config, path, ctx) = config_and_context(cli, &env)?;
            block_on(cli::submit::run(args, &ctx, &config, &path, cli.json))
        }
        Command::Stop { worker, grace } => {
            block_on(cli::submit::stop(worker, *grace, &ctx()?, cli.json))
        }
        Command::Inspect {
            worker: Some(worker),
            at,
            ..
        } => cli::journal::run_inspect(&checked()?, worker, *at, cli.json),
        Command::Inspect { trial, at, .. } => cli::trial::run_show(
            &checked()?,
            trial.as_deref().expect("clap requires a worker or --trial"),
            *at,
            cli.json,
        ),
        Command::Report(args) => cli::report::run(args, &checked()?, cli.json),
        Command::Logs(args) => cli::logs::run(args, &checked()?, cli.json),
        Command::Jobs(args) => block_on(cli::jobs::run(args, &ctx()?, cli.json)),
        Command::Audit => cli::journal::run_audit(&checked()?, cli.json),
        Command::Reconcile(args) => block_on(cli::reconcile::run(args, &ctx()?, cli.json)),
        Command::Session(cmd) => {
            let (config, path, ctx) = config_and_context(cli, &env)?;
            block_on(cli::session::run(cmd, &ctx, &config, &path, cli.json))
        }
        Command::Forget(args) => cli::forget::run(args, &ctx()?, cli.json),
        Command::Trial(cmd) => cli::trial::run(cmd, &ctx()?, cli.json),
        Command::Completions { shell } => cli::shell::completions(*shell),
        Command::Man { dir } => cli::shell::man(dir.as_deref()),
        Command::Trials { at } => cli::trial::run_list(&checked()?, *at, cli.json),
        Command::Doctor(args) => block_on(cli::doctor::run(
            args,
            cli::doctor::Context {
                state_dir: state_dir()?,
                config_flag: cli.config.as_deref(),
                slurm: slurm_config(),
                json: cli.json,
            },
        )),
        Command::Sessions { at: Some(cut), .. } => {
            cli::replay::run_sessions(&checked()?, *cut, cli.json)
        }
        Command::Sessions { at: None, wide } => {
            let (config, path, ctx) = config_and_context(cli, &env)?;
            block_on(cli::session::run_report(
                &ctx, &config, &path, cli.json, *wide,
            ))
        }
    }
}

/// The config and the context, for the commands that need both: the config is read first, so
/// that a bad one is the error they report.
fn config_and_context(
    cli: &Cli,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, PathBuf, Ctx<CliScheduler>), exit::Failure> {
    let (config, path) = load_config(cli, env)?;
    let state_dir = dispatch::statedir::resolve(cli.state_dir.as_deref(), env)?;
    Ok((config, path, context(state_dir)?))
}

/// The Slurm driver's settings; `DISPATCH_SLURM_TIMEOUT` (seconds) bounds one call.
fn slurm_config() -> CliConfig {
    let mut config = CliConfig::default();
    if let Some(secs) = std::env::var("DISPATCH_SLURM_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        config.timeout = Duration::from_secs(secs.clamp(1, 3600));
    }
    config
}

fn context(state_dir: std::path::PathBuf) -> Result<Ctx<CliScheduler>, exit::Failure> {
    let failed = |message: String| exit::Failure::new(exit::FAILED, message);
    // Absolute: the paths handed to worker steps are used from other working directories.
    let state_dir = std::path::absolute(&state_dir).map_err(|e| {
        failed(format!(
            "cannot resolve the state directory {}: {e}",
            state_dir.display()
        ))
    })?;
    let exe = std::env::current_exe()
        .map_err(|e| failed(format!("cannot find the dispatch executable: {e}")))?;
    Ok(Ctx::new(
        dispatch::statedir::check(&state_dir)?,
        CliScheduler::new(slurm_config()),
        dispatch::event::current_user(),
        exe,
    ))
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

/// A missing file found by the search means defaults (a missing `--config` file is an error); a
/// malformed one is a usage error naming file, line and key.
fn load_config(
    cli: &Cli,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(dispatch::config::Config, std::path::PathBuf), exit::Failure> {
    use dispatch::config::{resolve, Config};
    let Some(path) = resolve(cli.config.as_deref(), env) else {
        return Ok((Config::default(), "<defaults>".into()));
    };
    // Only a file dispatch found by itself may be missing: one named on purpose must exist.
    if cli.config.is_some() && !path.exists() {
        return Err(exit::Failure::new(
            exit::USAGE,
            format!(
                "config file {} does not exist; create it (see README, \"Sessions and their \
                 configuration\") or drop --config to use the defaults",
                path.display()
            ),
        ));
    }
    let config = Config::load(&path).map_err(|e| exit::Failure::new(exit::USAGE, e.to_string()))?;
    Ok((config, path))
}

fn init_tracing(verbose: u8, quiet: bool, color: &str) {
    use std::io::IsTerminal;
    let env = |k: &str| std::env::var(k).ok();
    let ansi = cli::use_color(color, &env, std::io::stderr().is_terminal());
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
        .with_ansi(ansi)
        .init();
}
