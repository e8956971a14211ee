//! `dispatch submit` and `dispatch stop`: one job per worker (the path without a pool),
//! argument definitions and rendering.

use std::time::Duration;

use clap::Args;

use super::exit::{self, Failure};
use super::output::emit;
use super::pool::{parse_time, ContinueArgs, SubmitExtras, WorkerArgs};
use crate::ops::context::Ctx;
use crate::slurm::Scheduler;

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Target from the config file (partition, account, QOS)
    #[arg(short = 'T', long, value_parser = crate::names::arg::label("target"))]
    pub target: Option<String>,
    /// The job's time limit (Slurm syntax: MM, HH:MM:SS, D-HH:MM:SS)
    #[arg(long, value_parser = parse_time)]
    pub time: crate::slurm::SlurmDuration,
    /// Seconds between SIGTERM and SIGKILL when the worker must stop early
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=300))]
    pub grace: u32,
    #[command(flatten)]
    pub worker: WorkerArgs,
    #[command(flatten)]
    pub assets: SubmitExtras,
    #[command(flatten)]
    pub continuation: ContinueArgs,
    /// Check everything a submit checks, ask `sbatch --test-only` where and when the job would
    /// start, and say so; submit nothing, journal nothing
    #[arg(long)]
    pub dry_run: bool,
}

pub async fn run<S: Scheduler>(
    args: &SubmitArgs,
    ctx: &Ctx<S>,
    config: &crate::config::Config,
    config_path: &std::path::Path,
    json: bool,
) -> Result<u8, Failure> {
    let target = match &args.target {
        Some(name) => Some(
            config
                .target(name, config_path)
                .map_err(|e| Failure::new(exit::USAGE, e.to_string()))?
                .clone(),
        ),
        None => None,
    };
    let req = crate::ops::submit::JobSubmitRequest {
        job_name_prefix: config.job_name_prefix.clone(),
        target_name: args.target.clone(),
        target,
        time: args.time,
        spec: args.worker.spec(args.grace, &args.assets),
        continuation: args.continuation.ask(),
        continues: None,
    };
    if args.dry_run {
        let plan = crate::ops::submit::submit_dry_run(ctx, &req).await?;
        emit(json, &plan, || {
            crate::outln!(
                "would submit worker {} as job {:?}: sbatch --test-only says it would start at {} on {} in partition {}",
                plan.worker,
                plan.job_name,
                plan.would_start,
                plan.nodes,
                plan.partition
            )
        })?;
        return Ok(exit::OK);
    }
    let r = crate::ops::submit::submit(ctx, &req).await?;
    emit(json, &r, || {
        crate::outln!(
            "worker {} submitted as job {} (submission {})",
            r.worker,
            r.job_id
                .map_or_else(|| "unknown".to_owned(), |j| j.to_string()),
            r.submission_id
        )
    })?;
    Ok(exit::OK)
}

pub async fn stop<S: Scheduler>(
    worker: &str,
    grace: Option<u64>,
    ctx: &Ctx<S>,
    json: bool,
) -> Result<u8, Failure> {
    let r = crate::ops::submit::stop(ctx, worker, grace.map(Duration::from_secs)).await?;
    emit(json, &r, || {
        crate::outln!(
            "worker {} (job {}) {}: {}",
            r.worker,
            r.job_id,
            if r.already_released {
                "was already released"
            } else {
                "stopped"
            },
            r.proof.as_deref().unwrap_or("not proven yet")
        )
    })?;
    Ok(exit::OK)
}
