//! `dispatch jobs [--refresh] [--wide]`: every worker started with `dispatch submit`.

use clap::Args;

use super::exit::Failure;
use crate::ops::context::Ctx;
use crate::slurm::Scheduler;

#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Ask Slurm first (as `reconcile` does for these workers): record what it proves, and
    /// show each job's Slurm state and reason now
    #[arg(long)]
    pub refresh: bool,
    /// Full submission ids and uncut cells (rows may pass 80 columns)
    #[arg(long)]
    pub wide: bool,
    /// Look again every SECS seconds (default 5; at least 5 with --refresh) until Ctrl-C:
    /// redrawn on a terminal, one JSON document per look with --json
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "5",
          value_parser = super::watch::parse_secs)]
    pub watch: Option<u64>,
}

/// One look: refreshed first when asked.
pub async fn look<S: Scheduler>(
    args: &JobsArgs,
    ctx: &Ctx<S>,
) -> Result<crate::ops::jobs::JobsReport, Failure> {
    let refreshed = if args.refresh {
        Some(crate::ops::reconcile::reconcile_jobs_only(ctx).await?)
    } else {
        None
    };
    let state = ctx.read_state()?;
    Ok(crate::ops::jobs::jobs(
        &state,
        &ctx.state_dir,
        refreshed.as_ref(),
    ))
}

pub async fn run<S: Scheduler>(args: &JobsArgs, ctx: &Ctx<S>, json: bool) -> Result<u8, Failure> {
    let show = super::watch::Show {
        watch: args.watch,
        refresh: args.refresh,
        json,
        title: "dispatch jobs",
    };
    super::watch::show(
        show,
        || look(args, ctx),
        |r| super::table::jobs(r, args.wide),
    )
    .await
}
