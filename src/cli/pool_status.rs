//! `dispatch pool status [POOL] [--refresh] [--wide] [--watch [SECS]]`: one look, or many.

use super::exit::Failure;
use crate::ops::context::Ctx;
use crate::ops::{pool as ops, reconcile};
use crate::slurm::Scheduler;

/// What `pool status` was asked for.
pub struct StatusArgs<'a> {
    pub pool: Option<&'a str>,
    pub refresh: bool,
    pub wide: bool,
    pub watch: Option<u64>,
}

/// One look: reconciled first with `--refresh`, then state and each worker's own journal.
async fn look<S: Scheduler>(
    a: &StatusArgs<'_>,
    ctx: &Ctx<S>,
) -> Result<ops::StatusReport, Failure> {
    if a.refresh {
        reconcile::reconcile(ctx, a.pool).await?;
    }
    // No journal yet: no pools (as `sessions` and `trials` see it).
    let state = super::jobs::load_or_empty(ctx)?;
    Ok(ops::status(
        &state,
        Some(&ctx.pools_dir()),
        a.pool,
        ctx.now(),
    )?)
}

pub async fn run<S: Scheduler>(
    a: &StatusArgs<'_>,
    ctx: &Ctx<S>,
    json: bool,
) -> Result<u8, Failure> {
    let title = match a.pool {
        Some(p) => format!("dispatch pool status {p}"),
        None => "dispatch pool status".to_owned(),
    };
    let show = super::watch::Show {
        watch: a.watch,
        refresh: a.refresh,
        json,
        title: &title,
    };
    super::watch::show(
        show,
        || look(a, ctx),
        |r| super::table::pool_status(r, a.wide),
    )
    .await
}
