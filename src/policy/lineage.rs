//! What the listings (`pool status`, `jobs`) show of a worker's lineage (`--continue N`):
//! its generation, the continuations it may still ask, the worker it continued and the one
//! that continued it, and where its own continuation stands. Pure, from the state alone: a
//! listing makes no Slurm call for it.
//!
//! A continuation is `due` once the worker is proven over (the next `reconcile` decides it and
//! submits its successor); `waiting` when its pool cannot take it now, with why: the pool is
//! gone, being released or its allocation is over ([`pool_unready`], the words `reconcile`
//! gives), or it has no room for it on its nodes as they were recorded (the refusal a submit
//! would give); `refused` with the reason `ContinuationRefused` recorded; `continued` once its
//! successor's receipt is written.
//!
//! It also says which ended workers a successor is due for ([`due`]): the one set
//! `ops::successor` walks, for a continuation and for a replacement after a node failure alike.

use std::collections::HashMap;

use serde::Serialize;
use uuid::Uuid;

use crate::event::pool::WorkerContinued;
use crate::policy::placement;
use crate::policy::pool::{place_among, Budgets, WorkerAsk};
use crate::slurm::JobId;
use crate::state::continuation::{Continuable, Request};
use crate::state::pool::Resubmittable;
use crate::state::State;

crate::words! {
    /// Where a worker's own continuation stands.
    pub enum Standing {
        /// Proven over: the next `reconcile` decides it and submits its successor.
        Due => "due",
        /// Due, but its pool cannot take it now: it waits for room (or for its pool).
        Waiting => "waiting",
        /// Not continued, for the reason recorded.
        Refused => "refused",
        /// Its successor's receipt is written.
        Continued => "continued",
    }
}

/// One worker's place in its lineage, as the listings show it (their JSON keys:
/// docs/cli.md, `pool status`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Lineage {
    /// 1 for a first run.
    pub generation: u32,
    /// The continuations it asked and may still have, until it is continued or refused.
    pub continues_left: Option<u32>,
    /// The worker it continued (its submission id).
    pub predecessor: Option<Uuid>,
    /// The worker that continued it.
    pub successor: Option<Uuid>,
    #[serde(rename = "continuation")]
    pub standing: Option<Standing>,
    /// Why it waits (`Waiting`), or why it was refused (`Refused`).
    #[serde(rename = "continuation_why")]
    pub why: Option<String>,
}

impl Lineage {
    /// Whether a listing shows its generation: a later one, or one that asked to be continued.
    pub fn shown(&self) -> bool {
        self.generation > 1 || self.continues_left.is_some() || self.standing.is_some()
    }
}

/// The state's continuations, indexed once for a listing of many workers.
pub struct Lineages<'s> {
    state: &'s State,
    /// By successor: the continuation that made it.
    made: HashMap<Uuid, &'s WorkerContinued>,
    /// By predecessor: the continuation of it.
    next: HashMap<Uuid, &'s WorkerContinued>,
    /// By worker: the reason its continuation was refused.
    refused: HashMap<Uuid, &'s str>,
}

impl<'s> Lineages<'s> {
    pub fn of(state: &'s State) -> Lineages<'s> {
        let c = &state.jobs.continuations;
        let made = c.lineage.iter().map(|g| &g.continued);
        Lineages {
            state,
            made: made.clone().map(|e| (e.submission_id, e)).collect(),
            next: made.map(|e| (e.predecessor, e)).collect(),
            refused: c
                .refused
                .iter()
                .map(|r| (r.predecessor, r.reason.as_str()))
                .collect(),
        }
    }

    /// The lineage of submission `id`.
    pub fn of_worker(&self, id: Uuid) -> Lineage {
        let asked = self.state.jobs.continuations.asked.get(&id);
        let made = self.made.get(&id);
        let mut l = Lineage {
            generation: made.map_or_else(|| asked.map_or(1, |c| c.generation), |e| e.generation),
            continues_left: asked.map(|c| c.asked.continues_left),
            predecessor: made.map(|e| e.predecessor),
            successor: None,
            standing: None,
            why: None,
        };
        if let Some(next) = self.next.get(&id) {
            l.successor = Some(next.submission_id);
            l.standing = Some(Standing::Continued);
        } else if let Some(c) = asked.filter(|c| c.ended.is_some()) {
            l.why = waiting_for(self.state, c);
            l.standing = Some(match l.why {
                Some(_) => Standing::Waiting,
                None => Standing::Due,
            });
        } else if let Some(reason) = self.refused.get(&id) {
            l.standing = Some(Standing::Refused);
            l.why = Some((*reason).to_owned());
        }
        l
    }

    /// The ended workers of pools the state no longer has (detached, released), whose
    /// continuations wait for them: no pool's row lists them. By submission id.
    pub fn of_gone_pools(&self) -> impl Iterator<Item = (Uuid, &'s Continuable)> + '_ {
        self.state
            .jobs
            .continuations
            .ended_ones()
            .filter(|(_, c)| {
                c.pool
                    .as_deref()
                    .is_some_and(|p| !self.state.pools.pools.contains_key(p))
            })
            .map(|(id, c)| (*id, c))
    }
}

/// Why an ended worker's continuation cannot be placed now, if it cannot.
fn waiting_for(state: &State, c: &Continuable) -> Option<String> {
    pool_unready(state, c).or_else(|| no_room(state, c))
}

/// Why a pool worker's continuation cannot be placed in its pool now, if it cannot
/// (`reconcile`'s words, `ops::continuation`).
pub fn pool_unready(state: &State, c: &Continuable) -> Option<String> {
    let name = c.pool.as_deref()?;
    match state.pools.pools.get(name) {
        None => Some(format!(
            "continuation waiting for room: pool {name} is gone; it waits for the pool's next \
             allocation"
        )),
        Some(p) if p.releasing => Some(format!(
            "continuation waiting for room: pool {name} is being released"
        )),
        Some(p) if p.ended.is_some() => Some(format!(
            "continuation waiting for room: the allocation of pool {name} is over{}",
            next_allocation(p)
        )),
        Some(_) => None,
    }
}

/// What a worker of a renewing pool whose allocation is over waits for: the next allocation
/// (asked for, its job once known), unless renewal stopped.
fn next_allocation(p: &crate::state::pool::Pool) -> String {
    let Some(r) = p.renewal.as_ref().filter(|r| r.stopped.is_none()) else {
        return String::new();
    };
    let next = match &r.successor {
        Some(s) => match s.job_id {
            Some(job) => format!("allocation {}, job {job}", s.intent.generation),
            None => format!("allocation {}, its job not known yet", s.intent.generation),
        },
        None => "not asked yet".to_owned(),
    };
    format!("; it waits for the pool's next allocation ({next})")
}

/// A pool worker's continuation that its pool has no room for, on its nodes as recorded: the
/// refusal its submission would meet, in the words `reconcile` gives it.
fn no_room(state: &State, c: &Continuable) -> Option<String> {
    let pool = state.pools.pools.get(c.pool.as_deref()?)?;
    let gpus = match &c.request {
        Some(Request::Pool(r)) => r.gpus,
        _ => 0,
    };
    let ask = WorkerAsk {
        journal: state.journal_id,
        name: c.worker.clone(),
        cpus: c.cpus,
        mem_mb: c.mem_mb,
        gpus,
        node: None,
        // Placement reads none of them.
        budgets: Budgets::with_publication_timeout(0),
    };
    let refusal = place_among(pool, &placement::recorded_rooms(pool), &ask).err()?;
    Some(format!("continuation waiting for room: {refusal}"))
}

/// Whose successors one run decides.
#[derive(Clone, Copy, Debug)]
pub enum Scope<'a> {
    /// `dispatch submit`'s workers.
    Jobs,
    /// Pool workers: of one pool, or of every pool.
    Pools(Option<&'a str>),
}

impl Scope<'_> {
    pub fn covers(self, pool: Option<&str>) -> bool {
        match (self, pool) {
            (Scope::Jobs, pool) => pool.is_none(),
            (Scope::Pools(only), Some(pool)) => only.is_none_or(|p| p == pool),
            (Scope::Pools(_), None) => false,
        }
    }
}

/// What follows a worker proven over, due now.
#[derive(Clone, Copy, Debug)]
pub enum Follow<'s> {
    /// It asked to be continued (`--continue N`).
    Continue(Uuid, &'s Continuable),
    /// A node failure ended it and it asked to be submitted again
    /// (`--resubmit-on-node-failure N`), with no continuation of it pending.
    Replace(Uuid, &'s Resubmittable),
}

impl Follow<'_> {
    pub fn pool(&self) -> Option<&str> {
        match self {
            Follow::Continue(_, c) => c.pool.as_deref(),
            Follow::Replace(_, r) => Some(&r.pool),
        }
    }

    fn id(&self) -> Uuid {
        match self {
            Follow::Continue(id, _) | Follow::Replace(id, _) => *id,
        }
    }
}

/// Every ended worker of `scope` a successor is due for, by submission id. One that asked to be
/// continued is decided as a continuation first, and only once that is refused may a node
/// failure's replacement follow it ([`replacement_after_refusal`]): one successor, never two.
pub fn due<'s>(state: &'s State, scope: Scope<'_>) -> Vec<Follow<'s>> {
    let asked = &state.jobs.continuations.asked;
    let continued = (state.jobs.continuations.ended_ones())
        .filter(|(_, c)| scope.covers(c.pool.as_deref()))
        .map(|(id, c)| Follow::Continue(*id, c));
    let replaced = (state.pools.requests.iter())
        .filter(|(id, r)| r.due.is_some() && scope.covers(Some(&r.pool)) && !asked.contains_key(id))
        .map(|(id, r)| Follow::Replace(*id, r));
    let mut due: Vec<Follow<'s>> = continued.chain(replaced).collect();
    due.sort_by_key(Follow::id);
    due
}

/// The replacement a node failure left due for worker `id`, whose continuation was refused
/// just now: as the state was before the refusal (which settles only the continuation).
pub fn replacement_after_refusal(state: &State, id: Uuid) -> Option<&Resubmittable> {
    state.pools.requests.get(&id).filter(|r| r.due.is_some())
}

/// A pool whose allocation `reconcile` saw in Slurm's preemption grace (`PreemptTime`).
#[derive(Clone, Debug)]
pub struct InGrace<'a> {
    pub pool: &'a str,
    pub job_id: JobId,
    /// `preempted, ends at …`.
    pub until: String,
}

/// Why nothing follows `f` yet although it is due: its pool's allocation is in Slurm's
/// preemption grace. Its workers got Slurm's SIGTERM, and one that checkpointed and exited
/// already ended as if on its own; its cause is Slurm's, `preempted`, proven when the
/// allocation's end is, and a successor belongs in no allocation about to be killed.
pub fn held_by_preemption(f: &Follow<'_>, in_grace: &[InGrace<'_>]) -> Option<String> {
    let pool = f.pool()?;
    let g = in_grace.iter().find(|g| g.pool == pool)?;
    Some(format!(
        "its pool's allocation (job {}) is in Slurm's preemption grace, {}: decided once its \
         end is proven",
        g.job_id, g.until
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::pool::*;
    use crate::event::Event;
    use crate::policy::fixtures::{attached, envelopes, intent, worker_request};

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    /// Pool `p` (4 CPUs) with worker `w` (submission 1, 1 CPU), which asked for 2
    /// continuations.
    fn asking() -> Vec<Event> {
        vec![
            Event::PoolAttached(attached("p", 9, "a", 4)),
            Event::WorkerSubmitIntent(intent("p", "w", id(1))),
            Event::ContinuationAsked(ContinuationAsked {
                submission_id: id(1),
                continues_left: 2,
                causes: vec!["time-limit".into()],
                crashed: false,
            }),
        ]
    }

    fn terminal(n: u128) -> Event {
        Event::WorkerTerminal(WorkerTerminal {
            submission_id: id(n),
            proof: "step 9.0 is listed by neither squeue nor sacct".into(),
        })
    }

    fn state_of(events: Vec<Event>) -> State {
        let mut state = State::default();
        for env in envelopes(events) {
            state.apply(&env).unwrap();
        }
        state
    }

    fn lineage(events: &[Event], n: u128) -> Lineage {
        Lineages::of(&state_of(events.to_vec())).of_worker(id(n))
    }

    #[test]
    fn a_worker_that_never_asked_is_a_first_generation_shown_as_nothing_more() {
        let l = lineage(&asking()[..2], 1);
        assert_eq!(
            (l.generation, l.continues_left, l.standing),
            (1, None, None)
        );
        assert!(!l.shown());
        let l = lineage(&asking(), 1);
        assert_eq!(
            (l.generation, l.continues_left, l.standing),
            (1, Some(2), None)
        );
        assert!(l.shown(), "it asked to be continued");
    }

    /// Issue 37, item 3: due once proven over; waiting for room (with the refusal a submit
    /// would meet) while another worker holds it; waiting for the pool when its allocation is
    /// over (`reconcile`'s words); then continued, its successor a generation 2.
    #[test]
    fn an_ended_worker_is_due_then_waits_with_why_until_it_is_continued() {
        let mut events = asking();
        events.push(terminal(1));
        let l = lineage(&events, 1);
        assert_eq!((l.standing, l.why.as_deref()), (Some(Standing::Due), None));

        let mut big = intent("p", "x", id(3));
        big.cpus = 4;
        events.push(Event::WorkerSubmitIntent(big));
        let l = lineage(&events, 1);
        assert_eq!(l.standing, Some(Standing::Waiting));
        let why = l.why.unwrap();
        assert!(
            why.starts_with("continuation waiting for room: pool \"p\" has no node with room"),
            "{why}"
        );

        events.push(Event::PoolAllocationEnded(PoolAllocationEnded {
            pool: "p".into(),
            job_id: crate::event::test_job(9),
            proof: "squeue shows job 9 CANCELLED".into(),
        }));
        let state = state_of(events.clone());
        let l = Lineages::of(&state).of_worker(id(1));
        let c = &state.jobs.continuations.asked[&id(1)];
        assert_eq!(l.why, pool_unready(&state, c), "reconcile's words");
        assert_eq!(
            l.why.as_deref(),
            Some("continuation waiting for room: the allocation of pool p is over")
        );

        events.push(Event::WorkerContinued(WorkerContinued {
            submission_id: id(2),
            predecessor: id(1),
            generation: 2,
            cause: "lost".into(),
            proof: "squeue shows job 9 CANCELLED".into(),
            published_dir: None,
            manifest_sha256: None,
            from_crash_class: false,
        }));
        let state = state_of(events);
        let all = Lineages::of(&state);
        let (first, second) = (all.of_worker(id(1)), all.of_worker(id(2)));
        assert_eq!(first.standing, Some(Standing::Continued));
        assert_eq!((first.successor, first.why), (Some(id(2)), None));
        assert_eq!((first.generation, first.continues_left), (1, None));
        assert_eq!((second.generation, second.predecessor), (2, Some(id(1))));
        assert!(second.shown());
    }

    #[test]
    fn a_refused_worker_shows_the_reason_recorded() {
        let mut events = asking();
        events.push(terminal(1));
        events.push(Event::ContinuationRefused(ContinuationRefused {
            predecessor: id(1),
            reason: "no verified publication: its journal records none".into(),
        }));
        let l = lineage(&events, 1);
        assert_eq!(l.standing, Some(Standing::Refused));
        assert_eq!(
            l.why.as_deref(),
            Some("no verified publication: its journal records none")
        );
        assert_eq!(l.continues_left, None);
    }

    fn ended(pool: Option<&str>) -> Continuable {
        Continuable {
            worker: "w".into(),
            pool: pool.map(str::to_owned),
            cpus: 1,
            mem_mb: 10,
            generation: 1,
            asked: ContinuationAsked {
                submission_id: Uuid::nil(),
                continues_left: 1,
                causes: vec!["node-failure".into()],
                crashed: false,
            },
            request: None,
            stopped: false,
            ended: Some("gone".into()),
            node_lost: None,
            allocation_ended: None,
        }
    }

    fn replaceable(pool: &str, due: bool) -> Resubmittable {
        Resubmittable {
            pool: pool.into(),
            worker: "r".into(),
            cpus: 1,
            mem_mb: 10,
            request: worker_request(Uuid::nil(), 1),
            due: due.then(|| "node n2 lost".to_owned()),
            continuation: None,
        }
    }

    fn ids(due: &[Follow<'_>]) -> Vec<(char, u128)> {
        due.iter()
            .map(|f| match f {
                Follow::Continue(id, _) => ('c', id.as_u128()),
                Follow::Replace(id, _) => ('r', id.as_u128()),
            })
            .collect()
    }

    /// Issue 37: one set of due successors, continuations and replacements in one
    /// submission-id order; a worker that asked to be continued is never also a replacement
    /// until its continuation is refused; each scope sees only its own workers.
    #[test]
    fn continuations_and_replacements_are_one_due_set_with_one_successor_each() {
        let mut state = State::default();
        let asked = &mut state.jobs.continuations.asked;
        asked.insert(id(4), ended(Some("p")));
        asked.insert(id(2), ended(None));
        let mut running = ended(Some("p"));
        running.ended = None;
        asked.insert(id(6), running);
        asked.insert(id(5), ended(Some("q")));
        let requests = &mut state.pools.requests;
        requests.insert(id(3), replaceable("p", true));
        requests.insert(id(1), replaceable("p", true));
        requests.insert(id(7), replaceable("p", false));
        // Asked to be continued as well: its continuation is decided first.
        requests.insert(id(4), replaceable("p", true));

        let every_pool = due(&state, Scope::Pools(None));
        assert_eq!(ids(&every_pool), [('r', 1), ('r', 3), ('c', 4), ('c', 5)]);
        let p = due(&state, Scope::Pools(Some("p")));
        assert_eq!(ids(&p), [('r', 1), ('r', 3), ('c', 4)]);
        assert_eq!(ids(&due(&state, Scope::Jobs)), [('c', 2)]);

        assert!(replacement_after_refusal(&state, id(4)).is_some());
        assert!(replacement_after_refusal(&state, id(5)).is_none());
        assert!(
            replacement_after_refusal(&state, id(7)).is_none(),
            "not due"
        );
        state.jobs.continuations.refused(&ContinuationRefused {
            predecessor: id(4),
            reason: "no checkpoint".into(),
        });
        let after = due(&state, Scope::Pools(Some("p")));
        assert_eq!(ids(&after), [('r', 1), ('r', 3), ('r', 4)], "then replaced");
    }

    #[test]
    fn nothing_follows_a_worker_of_a_pool_in_its_preemption_grace() {
        let (c, r) = (ended(Some("p")), replaceable("q", true));
        let grace = [InGrace {
            pool: "p",
            job_id: crate::event::test_job(9),
            until: "preempted, ends at 13:30:02".into(),
        }];
        let why = held_by_preemption(&Follow::Continue(id(1), &c), &grace).unwrap();
        assert_eq!(
            why,
            "its pool's allocation (job 9) is in Slurm's preemption grace, preempted, ends at \
             13:30:02: decided once its end is proven"
        );
        assert_eq!(
            held_by_preemption(&Follow::Replace(id(2), &r), &grace),
            None
        );
        let both = [
            &grace[..],
            &[InGrace {
                pool: "q",
                ..grace[0].clone()
            }],
        ]
        .concat();
        assert!(held_by_preemption(&Follow::Replace(id(2), &r), &both).is_some());
        let job = ended(None);
        assert_eq!(
            held_by_preemption(&Follow::Continue(id(3), &job), &both),
            None
        );
    }

    #[test]
    fn a_gone_or_releasing_pool_is_said_so() {
        let mut events = asking();
        events.push(terminal(1));
        let mut state = state_of(events);
        state.pools.pools.get_mut("p").unwrap().releasing = true;
        let why = Lineages::of(&state).of_worker(id(1)).why.unwrap();
        assert_eq!(
            why,
            "continuation waiting for room: pool p is being released"
        );
        assert_eq!(Lineages::of(&state).of_gone_pools().count(), 0);
        state.pools.pools.clear();
        let all = Lineages::of(&state);
        let why = all.of_worker(id(1)).why.unwrap();
        assert!(why.contains("pool p is gone"), "{why}");
        let gone: Vec<Uuid> = all.of_gone_pools().map(|(id, _)| id).collect();
        assert_eq!(gone, [id(1)], "listed beside the pools that remain");
    }
}
