//! Renewal of a created pool (`pool create --renew`): when its next allocation is asked for,
//! and when that allocation may become the pool's. Pure: the time is an argument.
//!
//! The next allocation is asked for [`RENEW_LEAD_S`] before the current one ends, or at once
//! when the current one is proven over (a preemption, all its nodes lost). Without
//! `--renew-overlap` it depends on the current one (`--dependency=afterany:<job>`), so Slurm
//! cannot run it beside the last: it is queued early and starts as soon as the last ends. It
//! becomes the pool's allocation only once it runs, the last one is proven over and every
//! worker of the last one is released with proof: a pool has one allocation at a time.

use crate::event::Micros;
use crate::policy::continuation::{cause_in, Cause};
use crate::slurm::JobId;
use crate::state::pool::Pool;

/// How long before the current allocation's end the next one is asked for: twice the default
/// early-shutdown window (publication 30 s, native state 15 s, cleanup 15 s), so that a
/// `reconcile` run every minute asks at least once before the end with a minute to spare.
pub const RENEW_LEAD_S: i64 = 120;

/// What a renewing pool's renewal does now (no successor in flight).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// Not yet: when it will be.
    Later(Micros),
    /// Ask for allocation `generation`; `after`: the job it must not run beside.
    Ask {
        generation: u32,
        after: Option<JobId>,
    },
    /// A bound is reached: renewal stops, and why.
    Stop(String),
}

/// What pool `p`'s renewal does at `now`; `None`: it does not renew, its renewal stopped, it
/// is being released, or a successor is in flight.
pub fn due(p: &Pool, now: Micros) -> Option<Due> {
    let r = p.renewal.as_ref()?;
    if r.stopped.is_some() || p.releasing || r.successor.is_some() {
        return None;
    }
    if let Some(max) = r.asked.max_allocations {
        if r.generation >= max {
            return Some(Due::Stop(format!(
                "the pool had its {max} allocations (--renew-max {max})"
            )));
        }
    }
    let end = p.allocation.end_time;
    if let Some(until) = r.asked.until {
        if end.0 >= until.0 {
            return Some(Due::Stop(format!(
                "allocation {} ends at or after --renew-until {}",
                p.allocation.job_id,
                until.to_rfc3339()
            )));
        }
    }
    let from = Micros(end.0 - RENEW_LEAD_S * 1_000_000);
    let over = p.ended.is_some();
    if !over && now.0 < from.0 {
        return Some(Due::Later(from));
    }
    let after = (!over && !r.asked.overlap).then_some(p.allocation.job_id);
    Some(Due::Ask {
        generation: r.generation + 1,
        after,
    })
}

/// May the running successor of `p` become its allocation? The cause of the last one's end
/// and Slurm's proof of it, or why not yet.
pub fn may_adopt(p: &Pool) -> Result<(Cause, String), String> {
    let job = p.allocation.job_id;
    if p.releasing {
        return Err(format!("pool {} is being released", p.name));
    }
    let Some(ended) = &p.ended else {
        return Err(format!("allocation {job} is not proven over yet"));
    };
    if !p.active.is_empty() {
        return Err(format!(
            "{} worker(s) of allocation {job} are not released with proof yet",
            p.active.len()
        ));
    }
    let cause = cause_in(&ended.proof).unwrap_or(Cause::Lost);
    Ok((cause, ended.proof.clone()))
}
