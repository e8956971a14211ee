//! `dispatch pool status [POOL] [--refresh] [--wide] [--watch [SECS]] [--at SEQ|TIME]`: one
//! look, many, or one of the past.

use super::exit::Failure;
use crate::ops::context::Ctx;
use crate::ops::{pool as ops, reconcile};
use crate::slurm::Scheduler;

/// What `pool status` was asked for.
pub struct StatusArgs<'a> {
    pub pool: Option<&'a str>,
    pub refresh: bool,
    /// As it was at this cut of the journal (no Slurm call, no worker journal read).
    pub at: Option<crate::state::replay::Cut>,
    pub wide: bool,
    pub watch: Option<u64>,
}

/// One look: reconciled first with `--refresh`, then state and each worker's own journal.
async fn look<S: Scheduler>(a: &StatusArgs<'_>, ctx: &Ctx<S>) -> Result<ops::StatusDoc, Failure> {
    let refreshed = if a.refresh {
        let r = reconcile::reconcile(ctx, a.pool).await?;
        ops::Refreshed {
            preempted: r.preempted,
            renewals: r.renewals,
        }
    } else {
        ops::Refreshed::default()
    };
    // No journal yet: no pools (as `sessions` and `trials` see it).
    let state = ctx.read_state()?;
    Ok(
        ops::StatusDoc::new(state, Some(ctx.pools_dir()), a.pool, ctx.now())?
            .with_refreshed(refreshed),
    )
}

pub async fn run<S: Scheduler>(
    a: &StatusArgs<'_>,
    ctx: &Ctx<S>,
    json: bool,
) -> Result<u8, Failure> {
    if let Some(cut) = a.at {
        let at = super::replay::state_at(&ctx.state_dir, cut)?;
        let r = ops::status(&at.state, None, a.pool, at.now)?;
        super::replay::emit_at(Some(at.point()), &r, json, || {
            crate::out!("{}", super::table::pool_status(&r, a.wide))
        })?;
        return Ok(super::exit::OK);
    }
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
        |d| super::table::pool_status(&d.report(), a.wide),
    )
    .await
}
