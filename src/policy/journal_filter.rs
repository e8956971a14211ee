//! `journal dump`'s filters (`--worker`, `--pool`, `--kind`, `--since`, `--until`), AND-ed.
//! Pure and streaming: an event about a submission names it only by id, so the filter learns
//! each submission's name and pool from its intent, which always comes first.

use std::collections::HashSet;

use crate::event::{Envelope, Event, Micros};

/// At most this many submission ids are remembered per filter (one per matching intent).
pub const MAX_TRACKED: usize = 1_000_000;

#[derive(Debug, Default)]
pub struct Filter {
    /// A worker by name or submission id.
    pub worker: Option<String>,
    pub pool: Option<String>,
    /// Kind names (as `journal dump` prints them); empty: every kind.
    pub kinds: Vec<String>,
    pub since: Option<Micros>,
    pub until: Option<Micros>,
    of_worker: HashSet<String>,
    of_pool: HashSet<String>,
    /// Whether an event named the `worker` asked for (its intent, or its submission id).
    worker_named: bool,
}

impl Filter {
    pub fn new(
        worker: Option<String>,
        pool: Option<String>,
        kinds: Vec<String>,
        since: Option<Micros>,
        until: Option<Micros>,
    ) -> Filter {
        Filter {
            worker,
            pool,
            kinds,
            since,
            until,
            ..Filter::default()
        }
    }

    /// Whether `env` passes every filter given. Call it on every event in seq order.
    pub fn admits(&mut self, env: &Envelope) -> bool {
        if self.worker.is_none() && self.pool.is_none() {
            return self.admits_kind_and_time(env);
        }
        let body = env.event.body_json();
        let field = |k: &str| body.get(k).and_then(|v| v.as_str()).map(str::to_owned);
        let sid = field("submission_id");
        if let (Some(id), Some((worker, pool))) = (&sid, submitted(&env.event)) {
            let remember = |set: &mut HashSet<String>| {
                if set.len() < MAX_TRACKED {
                    set.insert(id.clone());
                }
            };
            if self.worker.as_deref() == Some(worker) {
                self.worker_named = true;
                remember(&mut self.of_worker);
            }
            if pool.is_some() && self.pool.as_deref() == pool {
                remember(&mut self.of_pool);
            }
        }
        if sid.is_some() && sid == self.worker {
            self.worker_named = true;
        }
        let worker_ok = self.worker.as_deref().is_none_or(|w| {
            sid.as_deref() == Some(w) || sid.as_ref().is_some_and(|s| self.of_worker.contains(s))
        });
        let pool_ok = self.pool.as_deref().is_none_or(|p| {
            field("pool").as_deref() == Some(p)
                || sid.as_ref().is_some_and(|s| self.of_pool.contains(s))
        });
        worker_ok && pool_ok && self.admits_kind_and_time(env)
    }

    /// The `--worker` asked for, if no event the filter saw named it: after a whole journal, a
    /// worker it does not know (not found), not one whose events the other filters left out.
    pub fn worker_never_named(&self) -> Option<&str> {
        self.worker.as_deref().filter(|_| !self.worker_named)
    }

    fn admits_kind_and_time(&self, env: &Envelope) -> bool {
        (self.kinds.is_empty() || self.kinds.iter().any(|k| k == kind_name(&env.event)))
            && self.since.is_none_or(|t| env.time >= t)
            && self.until.is_none_or(|t| env.time <= t)
    }
}

/// The kind's name as `journal dump` prints it: a worker journal's kinds by their own names.
fn kind_name(event: &Event) -> &'static str {
    match event {
        Event::Unknown { kind, .. } => crate::event::kind_name_of(*kind).unwrap_or("Unknown"),
        other => other.kind_name(),
    }
}

/// The worker name and pool (none for `dispatch submit`) a submission intent gives.
fn submitted(event: &Event) -> Option<(&str, Option<&str>)> {
    match event {
        Event::WorkerSubmitIntent(e) => Some((&e.worker, Some(&e.pool))),
        Event::JobSubmitIntent(e) => Some((&e.worker, None)),
        _ => None,
    }
}

/// `--kind`'s check: a kind name this dispatch knows.
pub fn known_kind(name: &str) -> Result<String, String> {
    crate::event::KNOWN_KINDS
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(_, n)| (*n).to_owned())
        .ok_or_else(|| {
            let kinds: Vec<&str> = crate::event::KNOWN_KINDS.iter().map(|(_, n)| *n).collect();
            format!(
                "no event kind {name:?}; the kinds, as `journal dump` prints them: {}",
                kinds.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::event::pool::*;
    use crate::policy::fixtures;
    use uuid::Uuid;

    fn history() -> Vec<Envelope> {
        let sid = |n| Uuid::from_u128(n);
        let intent =
            |pool, worker, n| Event::WorkerSubmitIntent(fixtures::intent(pool, worker, sid(n)));
        let launched = |n| {
            Event::WorkerLaunched(WorkerLaunched {
                submission_id: sid(n),
                srun_pid: 1,
            })
        };
        fixtures::envelopes([
            Event::PoolDetached(PoolDetached { pool: "p".into() }),
            intent("p", "w1", 1),
            intent("q", "w2", 2),
            launched(1),
            launched(2),
            intent("q", "w1", 3),
            launched(3),
        ])
    }

    fn seqs(mut f: Filter) -> Vec<u64> {
        history()
            .iter()
            .filter(|e| f.admits(e))
            .map(|e| e.seq)
            .collect()
    }

    #[test]
    fn filters_learn_submissions_and_and_together() {
        let some = |s: &str| Some(s.to_owned());
        let launched = || vec!["WorkerLaunched".to_owned()];
        // test_envelope's time is its seq, in microseconds.
        let (since, until) = (Some(Micros(3)), Some(Micros(6)));
        let by_id = Uuid::from_u128(2).to_string();
        for (filter, want) in [
            (
                Filter::new(some("w1"), None, vec![], None, None),
                &[2, 4, 6, 7][..],
            ),
            (Filter::new(None, some("p"), vec![], None, None), &[1, 2, 4]),
            (
                Filter::new(some("w1"), some("q"), vec![], None, None),
                &[6, 7],
            ),
            (
                Filter::new(some("w1"), None, launched(), None, None),
                &[4, 7],
            ),
            (Filter::new(None, None, launched(), since, until), &[4, 5]),
            (Filter::new(Some(by_id), None, vec![], None, None), &[3, 5]),
        ] {
            assert_eq!(seqs(filter), want);
        }
        assert!(known_kind("WorkerLaunched").is_ok());
        assert!(known_kind("workerlaunched").is_err());
    }
}
