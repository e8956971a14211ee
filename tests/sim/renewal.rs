//! Renewal in the seeded simulation (issue 38 item 5): pools created with `--renew` whose
//! allocations end by their time limit, by a preemption (a grace, then `PREEMPTED`) and by
//! their loss (`NODE_FAIL`), renewed by `reconcile` at random moments, crashed at the renewal
//! and release failpoints, with Slurm answering unknown at random; their workers ask to be
//! continued (`tests/sim/continuation.rs` checks the chains).
//!
//! The model's side is in `mod.rs`: a renewal's salloc queues (`allocate_queued`) behind the job
//! its `--dependency=afterany` names, a preempted job runs out its grace, and every pool
//! allocation that starts notes whether another of its pool ran then (`started_beside`), so an
//! overlap between two looks is seen too.
//!
//! [`Renewals`] collects what the journal says of each pool's bounds and asks; [`check`] holds
//! after every step: never two allocations of one pool running at once (unless
//! `--renew-overlap`, and then at most two), never more than one next allocation queued or
//! running beside the current one, no allocation asked past `--renew-max` or for an allocation
//! ending at or after `--renew-until`; [`released_leaves_nothing`] after each `pool release`
//! that succeeded.

use std::collections::BTreeMap;

use dispatch::event::{Envelope, Event, Micros};
use dispatch::ops::pool::RenewBounds;
use dispatch::ops::spec::ContinueAsk;
use dispatch::policy::continuation::Cause;
use dispatch::state::State;

use super::{Phase, Rng, World};

/// Where `reconcile` crashes in renewal mode, besides the journal's points.
pub const RENEW_POINTS: &[&str] = &[
    "pool-renew-after-intent",
    "pool-renew-after-salloc",
    "pool-renew-after-job",
    "pool-renew-after-renewed",
];
pub const RELEASE_POINTS: &[&str] = &[
    "pool-release-after-intent",
    "pool-release-after-workers",
    "pool-release-after-cancel",
    "pool-release-after-successor",
    "pool-release-before-record",
];
pub const CREATE_POINTS: &[&str] = &[
    "pool-create-after-intent",
    "pool-create-after-salloc",
    "pool-create-after-job",
];

/// The pool a model job belongs to, from its name (`sim-pool-<POOL>-<8 hex>`): every
/// allocation a creation or a renewal of it made.
pub fn pool_of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("sim-pool-")?;
    rest.rsplit_once('-').map(|(pool, _)| pool)
}

/// What a `pool create` of the renewal simulation asks: short allocations, renewed within
/// bounds drawn now and then.
pub fn draw_bounds(r: &mut Rng, now: Micros) -> RenewBounds {
    RenewBounds {
        until: r
            .chance(20)
            .then(|| Micros(now.0 + r.range(1_200, 6_000) as i64 * 1_000_000)),
        max_allocations: r.chance(35).then(|| r.range(2, 6) as u32),
        overlap: r.chance(25),
    }
}

/// Every worker of a renewing pool asks to be continued, most for every cause.
pub fn draw_continuation(r: &mut Rng) -> ContinueAsk {
    let causes = if r.chance(80) {
        Cause::ALL.to_vec()
    } else {
        vec![Cause::TimeLimit, Cause::Preempted]
    };
    ContinueAsk {
        continues: r.range(2, 8) as u32,
        causes,
        crashed: r.chance(35),
    }
}

/// A running allocation of a pool is preempted, with a grace of 5–60 s.
pub fn preempt_one(w: &mut World) -> Option<u32> {
    let running: Vec<u32> = w
        .jobs
        .values()
        .filter(|j| j.phase == Phase::Running && j.preempt.is_none() && pool_of(&j.name).is_some())
        .map(|j| j.id)
        .collect();
    let id = *w.rng.pick(&running)?;
    let grace = w.rng.range(5, 60) as i64;
    w.preempt(id, grace);
    Some(id)
}

/// One pool's renewal as the journal tells it.
#[derive(Clone, Debug, Default)]
struct PoolRenewal {
    bounds: Option<(Option<Micros>, Option<u32>, bool)>,
    /// The end of the allocation the pool holds now.
    end: Option<Micros>,
    renewals: u32,
}

/// The journal's renewals, pool by pool.
#[derive(Debug, Default)]
pub struct Renewals {
    pools: BTreeMap<String, PoolRenewal>,
    /// Renewals past a bound, with why.
    broken: Vec<String>,
    pub renewed: u64,
    pub stopped: BTreeMap<String, u64>,
}

impl Renewals {
    pub fn observe(&mut self, env: &Envelope) {
        match &env.event {
            Event::PoolRenewalAsked(e) => {
                let p = self.pools.entry(e.pool.clone()).or_default();
                *p = PoolRenewal {
                    bounds: Some((e.until, e.max_allocations, e.overlap)),
                    ..PoolRenewal::default()
                };
            }
            Event::PoolAttached(e) => {
                self.pools.entry(e.pool.clone()).or_default().end = Some(e.allocation.end_time);
            }
            Event::PoolRenewed(e) => {
                self.renewed += 1;
                let p = self.pools.entry(e.pool.clone()).or_default();
                p.end = Some(e.allocation.end_time);
                p.renewals += 1;
            }
            Event::PoolRenewalIntent(e) => {
                let p = self.pools.entry(e.pool.clone()).or_default();
                let Some((until, max, _)) = p.bounds else {
                    self.broken.push(format!(
                        "{}: a next allocation asked without --renew",
                        e.pool
                    ));
                    return;
                };
                if max.is_some_and(|m| e.generation > m) {
                    self.broken.push(format!(
                        "{}: allocation {} asked, --renew-max {max:?}",
                        e.pool, e.generation
                    ));
                }
                if let (Some(until), Some(end)) = (until, p.end) {
                    if end.0 >= until.0 {
                        self.broken.push(format!(
                            "{}: allocation {} asked although the current one ends at {} and \
                             --renew-until is {}",
                            e.pool,
                            e.generation,
                            end.to_rfc3339(),
                            until.to_rfc3339()
                        ));
                    }
                }
            }
            Event::PoolRenewalStopped(e) => {
                let general = e
                    .reason
                    .split([':', '('])
                    .next()
                    .unwrap_or_default()
                    .replace(|c: char| c.is_ascii_digit(), "N");
                *self.stopped.entry(general).or_default() += 1;
            }
            _ => {}
        }
    }

    fn overlap(&self, pool: &str, state: &State) -> bool {
        let recorded = state
            .pools
            .pools
            .get(pool)
            .and_then(|p| p.renewal.as_ref())
            .map(|r| r.asked.overlap);
        recorded.unwrap_or_else(|| {
            self.pools
                .get(pool)
                .and_then(|p| p.bounds)
                .is_some_and(|b| b.2)
        })
    }

    /// The invariants that hold after every step, against the model's truth.
    pub fn check(&self, w: &World, state: &State) -> Result<(), String> {
        if let Some(first) = self.broken.first() {
            return Err(format!("renewal: {first}"));
        }
        let mut live: BTreeMap<&str, Vec<&super::SimJob>> = BTreeMap::new();
        for j in w.jobs.values() {
            let Some(pool) = pool_of(&j.name) else {
                continue;
            };
            if let Some(other) = j.started_beside {
                if !self.overlap(pool, state) {
                    return Err(format!(
                        "renewal: pool {pool}'s allocation {} started while its allocation \
                         {other} ran, without --renew-overlap",
                        j.id
                    ));
                }
            }
            if j.live() {
                live.entry(pool).or_default().push(j);
            }
        }
        for (pool, jobs) in live {
            let running = jobs.iter().filter(|j| j.start.is_some()).count();
            let most = if self.overlap(pool, state) { 2 } else { 1 };
            let ids = || {
                jobs.iter()
                    .map(|j| format!("{} {:?}", j.id, j.phase))
                    .collect::<Vec<_>>()
            };
            if running > most {
                return Err(format!(
                    "renewal: pool {pool} has {running} allocations running: {:?}",
                    ids()
                ));
            }
            // The current allocation and at most one next one.
            if jobs.len() > 2 {
                return Err(format!(
                    "renewal: pool {pool} has {} allocations queued or running: {:?}",
                    jobs.len(),
                    ids()
                ));
            }
        }
        for p in state.pools.pools.values() {
            let Some(r) = &p.renewal else { continue };
            if r.asked.max_allocations.is_some_and(|m| r.generation > m) {
                return Err(format!(
                    "renewal: pool {} is at allocation {}, --renew-max {:?}",
                    p.name, r.generation, r.asked.max_allocations
                ));
            }
        }
        Ok(())
    }

    /// Whether pool `pool` was ever created with `--renew` (the simulation creates a name once).
    pub fn knows(&self, pool: &str) -> bool {
        self.pools.contains_key(pool)
    }

    /// The most allocations one pool had.
    pub fn deepest(&self) -> u32 {
        self.pools
            .values()
            .map(|p| p.renewals + 1)
            .max()
            .unwrap_or(0)
    }
}

/// After a `pool release` of `pool` that succeeded: nothing of the pool is queued or runs
/// (one cancelled by its name may still be completing).
pub fn released_leaves_nothing(w: &World, pool: &str) -> Result<(), String> {
    let left: Vec<String> = w
        .jobs
        .values()
        .filter(|j| matches!(j.phase, Phase::Pending | Phase::Running))
        .filter(|j| pool_of(&j.name) == Some(pool))
        .map(|j| format!("{} {:?}", j.id, j.phase))
        .collect();
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "renewal: pool {pool} released, but its allocations {left:?} are left"
        ))
    }
}
