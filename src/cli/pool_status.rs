//! `dispatch pool status [POOL] [--refresh] [--wide] [--watch [SECS]]`: one look, or many.

use super::exit::{self, Failure};
use super::output::print_json;
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
    if let Some(secs) = a.watch {
        let every = super::watch::interval(secs, a.refresh);
        let title = match a.pool {
            Some(p) => format!("dispatch pool status {p}"),
            None => "dispatch pool status".to_owned(),
        };
        return super::watch::watch(every, json, &title, || async move {
            let r = look(a, ctx).await?;
            if json {
                super::watch::json_line(&r)
            } else {
                Ok(super::table::pool_status(&r, a.wide))
            }
        })
        .await;
    }
    let r = look(a, ctx).await?;
    if json {
        print_json(&r)?;
    } else {
        crate::out!("{}", super::table::pool_status(&r, a.wide));
    }
    Ok(exit::OK)
}
