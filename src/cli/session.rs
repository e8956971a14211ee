//! `dispatch session launch|release|renew|attach` and `dispatch sessions`: arguments,
//! rendering, the release prompt and the exec of `srun --pty`.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};

use super::exit::{self, Failure};
use super::output::{emit, note, print_json, warn};
use crate::config::Config;
use crate::event::session::SessionKey;
use crate::ops::context::Ctx;
use crate::ops::session::launch::{launch, LaunchAction, LaunchReport, LaunchRequest};
use crate::ops::session::release::{self, ReleaseAction};
use crate::ops::session::renew::{renew, RenewSettings};
use crate::ops::session::{attach, command_for, report, Env, Waits};
use crate::policy::session::renew::{default_backoff, DEFAULT_DRAIN_MINUTES};
use crate::slurm::{CliConfig, JobId, Scheduler, SlurmCommand};

#[derive(Debug, Args)]
pub struct SessionArgs {
    /// The mirror (any name without control characters; it becomes the job name's token)
    #[arg(value_parser = crate::names::arg::label("mirror"))]
    pub mirror: String,
    /// The configured target to run on
    #[arg(short = 'T', long = "target", value_name = "TARGET", value_parser = crate::names::arg::label("target"))]
    pub target: String,
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Reuse the session's job, else adopt a live job of this target by name, else submit one
    #[command(after_help = "Examples:\n  \
        dispatch session launch mymirror -T savio-htc\n  \
        dispatch session launch mymirror -T savio-htc --detached -- ./serve.sh")]
    Launch {
        #[command(flatten)]
        session: SessionArgs,
        /// Do not attach afterwards
        #[arg(long)]
        detached: bool,
        /// Seconds to wait for the job to run. A failed name probe is asked again within
        /// them: it fails closed (nothing is submitted without its answer, since a job it
        /// cannot see may run), so a blip only delays the launch
        #[arg(long, value_name = "SECS", default_value_t = 600,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        wait: u64,
        /// Say what the launch would do (reuse, adopt, or submit, checked with `sbatch
        /// --test-only`); submit nothing, journal nothing, attach nothing
        #[arg(long)]
        dry_run: bool,
        /// What the job runs (confined) or what attach runs (salloc targets)
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Cancel the session's job, or only detach when another session holds it too
    #[command(after_help = "Examples:\n  \
        dispatch session release mymirror -T savio-htc\n  \
        dispatch session release mymirror -T savio-htc --yes --json")]
    Release {
        #[command(flatten)]
        session: SessionArgs,
        /// Do not ask
        #[arg(long)]
        force: bool,
        /// Answer yes to the question (needed without a terminal, e.g. in scripts)
        #[arg(long)]
        yes: bool,
    },
    /// Keep the session's job alive: relaunch while it drains or when it is lost
    #[command(after_help = "Examples:\n  \
        dispatch session renew mymirror -T savio-htc\n  \
        dispatch session renew mymirror -T savio-htc --once --drain-minutes 30")]
    Renew {
        #[command(flatten)]
        session: SessionArgs,
        /// One check (and at most one relaunch), then exit
        #[arg(long)]
        once: bool,
        /// Start the replacement when the job has this many minutes left
        #[arg(long, value_name = "N", default_value_t = DEFAULT_DRAIN_MINUTES,
              value_parser = clap::value_parser!(u64).range(0..=100_000))]
        drain_minutes: u64,
        /// Seconds between checks
        #[arg(long, value_name = "SECS", default_value_t = 60,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        poll_interval: u64,
        /// Seconds to wait for a replacement to run
        #[arg(long, value_name = "SECS", default_value_t = 600,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        wait: u64,
    },
    /// Open a terminal in the session's job: srun --jobid=J --overlap --pty CMD
    #[command(after_help = "Examples:\n  \
        dispatch session attach mymirror -T savio-htc\n  \
        dispatch session attach mymirror -T savio-htc -- htop")]
    Attach {
        #[command(flatten)]
        session: SessionArgs,
        /// What to run (default: the session's command for salloc targets, else $SHELL -l)
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
}

/// Default waits, with `--wait` as the budget for the job to run.
fn waits_for(secs: u64) -> Waits {
    Waits {
        run_budget: Duration::from_secs(secs),
        ..Waits::default()
    }
}

fn is_terminal() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// Replace this process with `srun ARGS`; returns only if the exec failed.
fn exec_srun(argv: &[std::ffi::OsString]) -> Failure {
    use std::os::unix::process::CommandExt;
    let runner = crate::slurm::runner::Runner::new(CliConfig::default());
    let program = match runner.resolve(SlurmCommand::Srun) {
        Ok(p) => p,
        Err(e) => return Failure::new(exit::FAILED, e.to_string()),
    };
    let err = std::process::Command::new(&program).args(argv).exec();
    Failure::new(
        exit::FAILED,
        format!("cannot exec {}: {err}", program.display()),
    )
}

/// Runs on the runtime `main` makes for every async command (its `block_on`).
pub async fn run<S: Scheduler>(
    cmd: &SessionCommand,
    ctx: &Ctx<S>,
    config: &Config,
    config_path: &Path,
    json: bool,
) -> Result<u8, Failure> {
    let files = session_files(ctx, config);
    let env = |waits| env_of(ctx, config, config_path, &files, waits);
    match cmd {
        SessionCommand::Launch {
            session,
            detached,
            wait,
            dry_run,
            command,
        } => {
            let req = LaunchRequest {
                mirror: session.mirror.clone(),
                target: session.target.clone(),
                detached: *detached,
                command: command.clone(),
                replacing: None,
            };
            let env = env(waits_for(*wait));
            if *dry_run {
                return run_launch_dry_run(&env, &req, json).await;
            }
            run_launch(&env, &req, json).await
        }
        SessionCommand::Release {
            session,
            force,
            yes,
        } => run_release(&env(Waits::default()), session, *force || *yes, json).await,
        SessionCommand::Renew {
            session,
            once,
            drain_minutes,
            poll_interval,
            wait,
        } => {
            let settings = RenewSettings {
                drain_minutes: *drain_minutes,
                poll: Duration::from_secs(*poll_interval),
                max_iterations: once.then_some(1),
                backoff: default_backoff(),
                stop: Default::default(),
            };
            run_renew(&env(waits_for(*wait)), session, &settings, json).await
        }
        SessionCommand::Attach { session, command } => {
            run_attach(&env(Waits::default()), session, command).await
        }
    }
}

/// Where session batch scripts and Slurm logs go (`config::session_files_dir`).
fn session_files<S: Scheduler>(ctx: &Ctx<S>, config: &Config) -> PathBuf {
    let env = |k: &str| std::env::var(k).ok();
    crate::config::session_files_dir(config, &ctx.state_dir, &env)
}

/// What every session command works with: the common context and the session's own.
fn env_of<'a, S: Scheduler>(
    ctx: &'a Ctx<S>,
    config: &'a Config,
    config_path: &'a Path,
    session_files: &'a Path,
    waits: Waits,
) -> Env<'a, S> {
    Env {
        ctx,
        config,
        config_path,
        session_files,
        waits,
        progress: &note,
    }
}

/// `session launch --dry-run`.
async fn run_launch_dry_run<S: Scheduler>(
    env: &Env<'_, S>,
    req: &LaunchRequest,
    json: bool,
) -> Result<u8, Failure> {
    let plan = crate::ops::session::dry_run::launch_dry_run(env, req).await?;
    emit(json, &plan, || {
        crate::outln!(
            "would {} for {} on {} (job name {}){}",
            plan.would.as_str().replace('_', " "),
            plan.mirror,
            plan.target,
            plan.job_name,
            match (&plan.job_id, &plan.would_start) {
                (Some(j), _) => match &plan.preempted {
                    Some(p) => format!(": job {j}, {}", p.until()),
                    None => format!(": job {j}"),
                },
                (None, Some(t)) => format!(
                    ": sbatch --test-only says it would start at {t} on {}",
                    plan.nodes.as_deref().unwrap_or("?")
                ),
                (None, None) => String::new(),
            }
        )
    })?;
    Ok(exit::OK)
}

/// `session launch`: then attach, from a terminal, unless `--detached`.
async fn run_launch<S: Scheduler>(
    env: &Env<'_, S>,
    req: &LaunchRequest,
    json: bool,
) -> Result<u8, Failure> {
    let report = launch(env, req).await?;
    warn(&report.warnings);
    render_launch(&report, json)?;
    if req.detached {
        return Ok(exit::OK);
    }
    let key = SessionKey::new(&report.mirror, &report.target);
    if json || !is_terminal() {
        note(&format!(
            "no terminal{}; attach with {}",
            if json { " (--json)" } else { "" },
            command_for("attach", &key)
        ));
        return Ok(exit::OK);
    }
    let attach_cmd = if !report.confined && !report.command.is_empty() {
        report.command.clone()
    } else {
        attach::default_command(std::env::var("SHELL").ok())
    };
    Err(exec_srun(&attach::srun_argv(report.job(), &attach_cmd)))
}

/// `session release`: asks first (from a terminal) unless `--yes` or `--force` (`asked`).
async fn run_release<S: Scheduler>(
    env: &Env<'_, S>,
    session: &SessionArgs,
    asked: bool,
    json: bool,
) -> Result<u8, Failure> {
    let plan = release::plan(env, &session.mirror, &session.target)?;
    if !asked && !confirm_release(env.config, &plan)? {
        eprintln!("Aborted.");
        if json {
            print_json(&serde_json::json!({
                "mirror": plan.key.mirror, "target": plan.key.target,
                "action": "aborted", "job_id": plan.job.map(JobId::get),
                "holders": [], "proof": null,
            }))?;
        }
        return Ok(exit::OK);
    }
    let r = release::release(env, &session.mirror, &session.target, plan.job).await?;
    warn(&r.warnings);
    emit(json, &r, || render_release(&plan.key, &r))?;
    Ok(exit::OK)
}

/// The question `session release` asks, answered from the terminal; without one, exit 2.
fn confirm_release(config: &Config, plan: &release::ReleasePlan) -> Result<bool, Failure> {
    let mut question = match plan.job {
        Some(job) => release_question(plan, job),
        None if plan.may_exist => format!(
            "An earlier submission for session {} may have created a job. Look it \
             up by name and cancel it if it is there?",
            plan.key
        ),
        None => format!(
            "No Slurm job is recorded for session {}. Look for one by name \
             (`squeue --me --name={}`) and cancel any live job of this target?",
            plan.key,
            config.job_name(&plan.key.mirror)
        ),
    };
    if let Some(old) = plan.replaced {
        question = format!(
            "Session {} still records Slurm job {old}, which a renewal replaced and \
             never saw end; it is cancelled if it still runs. {question}",
            plan.key
        )
        .trim_end()
        .to_owned();
    }
    if !std::io::stdin().is_terminal() {
        // End of input is not an answer: a script would get "aborted", exit 0,
        // and a job still running.
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "session release asks before it acts ({question}), but stdin is \
                 not a terminal; pass --yes to answer yes without asking"
            ),
        ));
    }
    Ok(confirm(&question))
}

fn render_release(key: &SessionKey, r: &release::ReleaseReport) {
    match (r.action, r.job_id) {
        (ReleaseAction::Detached, Some(j)) => crate::outln!(
            "Detached session {} from Slurm job {j}; the job stays alive for: {}.",
            key,
            r.holders.join(", ")
        ),
        (ReleaseAction::Released, Some(j)) => crate::outln!(
            "Released Slurm job {j} of session {} ({}).",
            key,
            r.proof.as_deref().unwrap_or("")
        ),
        _ if r.replaced.is_some() || !r.also_released.is_empty() => {}
        _ => {
            crate::outln!("No job found for session {}. Nothing to release.", key)
        }
    }
    for a in &r.also_released {
        crate::outln!(
            "Also released Slurm job {} of session {}, found by name ({}).",
            a.job_id,
            key,
            a.proof
        );
    }
    if let Some(o) = &r.replaced {
        crate::outln!(
            "Job {} that a renewal replaced: {} ({}).",
            o.job_id,
            o.action,
            o.proof.as_deref().unwrap_or("")
        );
    }
}

/// `session renew`: Ctrl-C finishes the current step, then stops.
async fn run_renew<S: Scheduler>(
    env: &Env<'_, S>,
    session: &SessionArgs,
    settings: &RenewSettings,
    json: bool,
) -> Result<u8, Failure> {
    let stop = std::sync::Arc::clone(&settings.stop);
    let r = async {
        // Ctrl-C: finish the current step, then stop (a relaunch is never cut in two);
        // a second Ctrl-C quits at once, as without dispatch.
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                if stop.requested() {
                    std::process::exit(130);
                }
                note("stopping after the current step (Ctrl-C again quits now); the job is left running");
                stop.request();
            }
        });
        renew(env, &session.mirror, &session.target, settings).await
    }
    .await?;
    if r.stopped {
        note(&format!(
            "renew stopped; job {} of {}--{} is left running",
            r.job_id, r.mirror, r.target
        ));
    }
    emit(json, &r, || {
        crate::outln!(
            "session {}--{} holds job {} after {} check(s); relaunched {:?}, cancelled {:?}",
            r.mirror,
            r.target,
            r.job_id,
            r.iterations,
            numbers(&r.relaunched),
            numbers(&r.cancelled)
        )
    })?;
    Ok(exit::OK)
}

/// `session attach`: replaces this process with srun, from a terminal only.
async fn run_attach<S: Scheduler>(
    env: &Env<'_, S>,
    session: &SessionArgs,
    command: &[String],
) -> Result<u8, Failure> {
    let plan = attach::plan(
        env,
        &session.mirror,
        &session.target,
        command,
        std::env::var("SHELL").ok(),
    )
    .await?;
    if let Some(p) = &plan.preempted {
        warn(&[format!(
            "Slurm job {} was preempted at {}: {} (Slurm's grace); attaching all the same",
            plan.job,
            p.at,
            p.until()
        )]);
    }
    if !is_terminal() {
        return Err(Failure::new(
            exit::FAILED,
            format!(
                "attach needs a terminal; from one, it runs: srun {}",
                plan.argv
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        ));
    }
    Err(exec_srun(&plan.argv))
}

/// Job ids as the list of numbers renew's line has always shown (`[222, 223]`).
fn numbers(jobs: &[JobId]) -> Vec<u32> {
    jobs.iter().map(|j| j.get()).collect()
}

fn release_question(plan: &release::ReleasePlan, job: JobId) -> String {
    if plan.holders.is_empty() {
        format!(
            "Cancel Slurm job {job} on {} for session {}?",
            plan.node.as_deref().unwrap_or("<unknown node>"),
            plan.key
        )
    } else {
        let holders: Vec<String> = plan.holders.iter().map(SessionKey::to_string).collect();
        format!(
            "Slurm job {job} of session {} is shared with {}. Detach {} but keep the job alive \
             for the others?",
            plan.key,
            holders.join(", "),
            plan.key
        )
    }
}

/// Ask on stderr; only `y`/`yes` is yes. End of input or an empty answer is No.
fn confirm(question: &str) -> bool {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(_) => matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes"),
        Err(_) => false,
    }
}

fn render_launch(r: &LaunchReport, json: bool) -> Result<(), Failure> {
    if json {
        return print_json(r);
    }
    let verb = match r.action {
        LaunchAction::Submitted => "submitted",
        LaunchAction::Reused => "reusing",
        LaunchAction::Adopted => "adopted",
    };
    crate::outln!(
        "{verb} Slurm job {} for session {}--{}: {}{}",
        r.job_id,
        r.mirror,
        r.target,
        r.state,
        r.node
            .as_deref()
            .map(|n| format!(" on {n}"))
            .unwrap_or_default()
    );
    Ok(())
}

/// `dispatch sessions`.
pub async fn run_report<S: Scheduler>(
    ctx: &Ctx<S>,
    config: &Config,
    config_path: &Path,
    json: bool,
    wide: bool,
) -> Result<u8, Failure> {
    let files = session_files(ctx, config);
    let r = report::sessions(&env_of(ctx, config, config_path, &files, Waits::default())).await?;
    emit(json, &r, || {
        let release = |mirror: &str, target: &str| {
            let key = SessionKey::new(mirror, target);
            super::hint::command_line(&command_for("release", &key))
        };
        crate::out!("{}", super::table::sessions(&r, wide, &release));
    })?;
    // A report built on a failed or partial listing may miss jobs: the outcome is unknown.
    Ok(if r.errors.is_empty() {
        exit::OK
    } else {
        exit::UNKNOWN
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renew's closing line shows its job lists as it did when they were plain numbers.
    #[test]
    fn renew_lists_job_ids_as_plain_numbers() {
        let jobs: Vec<JobId> = [222, 223].into_iter().filter_map(JobId::new).collect();
        assert_eq!(format!("{:?}", numbers(&jobs)), "[222, 223]");
        assert_eq!(format!("{:?}", numbers(&[])), "[]");
    }
}
