//! `dispatch reconcile`: rendering of what it observed, resolved and left unknown.

use super::exit::{self, Failure};
use super::output::emit;
use crate::ops::context::Ctx;
use crate::ops::reconcile;
use crate::slurm::Scheduler;

pub async fn run<S: Scheduler>(ctx: &Ctx<S>, json: bool) -> Result<u8, Failure> {
    let r = reconcile::reconcile(ctx, None).await?;
    emit(json, &r, || {
        crate::outln!(
            "observed {} worker(s) with {} Slurm call(s); resolved {}, unknown {}",
            r.observed,
            r.slurm_calls,
            r.resolved.len(),
            r.unknown.len()
        );
        for x in &r.resolved {
            crate::outln!(
                "  released {}/{}: {}",
                x.pool.as_deref().unwrap_or("submit"),
                x.worker,
                x.proof
            );
        }
        for x in &r.unknown {
            crate::outln!(
                "  still unknown {}/{} ({}): budget held",
                x.pool.as_deref().unwrap_or("submit"),
                x.worker,
                x.state
            );
            if let Some(why) = &x.why {
                crate::outln!("    {why}");
            }
        }
        for c in &r.creations {
            crate::outln!(
                "  pool create {} ({}): {}: {}",
                c.pool,
                c.job_name,
                c.outcome,
                c.detail
            );
        }
    })?;
    Ok(exit::OK)
}
