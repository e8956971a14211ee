//! A worker's lineage on the report (issue 37): each generation of a worker continued with
//! `--continue N` is its own submission (its own item of `workers`, every key as before); the
//! timeline draws the generations of one lineage as one row, each a segment on it. Each item
//! says which row it is on (`chain`: its first generation's submission id) and what its
//! segment is (job or allocation, state class, publication, what ended it and made the next);
//! `chains` lists the rows. The lineage is `state::continuation`'s, as the fold leaves it.

use serde::Serialize;
use uuid::Uuid;

use super::WorkerTimeline;
use crate::slurm::JobId;
use crate::state::continuation::Continuations;

/// One generation's segment on its lineage's row (flattened into its `workers` item).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Segment {
    /// The first generation's submission id: the row it is drawn on (its own id when alone).
    pub chain: String,
    /// 1 for a first run; a continuation is its predecessor's plus one.
    pub generation: u32,
    /// Its own job (`dispatch submit`), or its pool's allocation when it was submitted.
    pub job_id: Option<JobId>,
    /// `sealed`, `checkpointed`, `crash_class_partial` or `empty`, as its journal says.
    pub state_class: Option<String>,
    /// What it published, as its journal (or the report the coordinator ingested) says.
    pub published_dir: Option<String>,
    /// The publication it resumed from, and whether from a crash-class state.
    pub resumed_from: Option<String>,
    pub from_crash_class: bool,
    /// What ended it and made the next generation (its successor's receipt): the cause, its
    /// proof, and the successor's submission id.
    pub ended_by: Option<String>,
    pub ended_proof: Option<String>,
    pub continued_as: Option<String>,
}

impl Segment {
    /// Submission `id`'s place in its lineage, as the continuations folded so far say (the
    /// reduced state's, which keeps the most recent `LINEAGE_KEPT`).
    pub fn of(continuations: &Continuations, id: &Uuid) -> Segment {
        let chain = continuations.chain(*id);
        let made = continuations.made(id).map(|g| &g.continued);
        let next = chain
            .iter()
            .skip_while(|(x, _)| x != id)
            .nth(1)
            .and_then(|(_, g)| g.map(|g| &g.continued));
        Segment {
            chain: chain.first().map_or(*id, |(first, _)| *first).to_string(),
            generation: made.map_or(1, |c| c.generation),
            resumed_from: made.and_then(|c| c.published_dir.clone()),
            from_crash_class: made.is_some_and(|c| c.from_crash_class),
            ended_by: next.map(|c| c.cause.clone()),
            ended_proof: next.map(|c| c.proof.clone()),
            continued_as: next.map(|c| c.submission_id.to_string()),
            ..Segment::default()
        }
    }
}

/// A row of the timeline: a worker, and its generations' submission ids in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChainRow {
    pub chain: String,
    pub worker: String,
    pub generations: Vec<String>,
}

/// The rows, in the order their first item comes in `workers`.
pub fn rows(workers: &[WorkerTimeline]) -> Vec<ChainRow> {
    let mut rows: Vec<(ChainRow, Vec<(u32, String)>)> = Vec::new();
    for w in workers {
        let member = (w.segment.generation, w.submission_id.clone());
        match rows.iter_mut().find(|(r, _)| r.chain == w.segment.chain) {
            Some((_, members)) => members.push(member),
            None => rows.push((
                ChainRow {
                    chain: w.segment.chain.clone(),
                    worker: w.worker.clone(),
                    generations: Vec::new(),
                },
                vec![member],
            )),
        }
    }
    rows.into_iter()
        .map(|(mut row, mut members)| {
            members.sort();
            row.generations = members.into_iter().map(|(_, id)| id).collect();
            row
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use crate::event::pool::*;
    use crate::policy::fixtures::{self, envelopes};

    /// Worker `w` in pool `p` (allocation 9) continued twice: submissions 1, 2 and 3, and an
    /// unrelated worker 4 between them.
    fn continued_twice() -> Vec<Envelope> {
        let id = Uuid::from_u128;
        let continued = |n: u128, cause: &str| {
            Event::WorkerContinued(WorkerContinued {
                submission_id: id(n),
                predecessor: id(n - 1),
                generation: n as u32,
                cause: cause.into(),
                proof: format!("squeue shows job 9 step {} gone", n - 1),
                published_dir: Some(format!("/s/published/w-{}", n - 1)),
                manifest_sha256: None,
                from_crash_class: false,
            })
        };
        let terminal = |n: u128| {
            Event::WorkerTerminal(WorkerTerminal {
                submission_id: id(n),
                proof: "step gone".into(),
            })
        };
        envelopes([
            Event::PoolAttached(fixtures::attached("p", 9, "n", 4)),
            Event::WorkerSubmitIntent(fixtures::intent("p", "w", id(1))),
            Event::WorkerSubmitIntent(fixtures::intent("p", "x", id(4))),
            terminal(1),
            Event::WorkerSubmitIntent(fixtures::intent("p", "w", id(2))),
            continued(2, "node-failure"),
            terminal(2),
            Event::WorkerSubmitIntent(fixtures::intent("p", "w", id(3))),
            continued(3, "checkpoint"),
        ])
    }

    fn report(subject: Subject) -> Report {
        let events = continued_twice();
        let mut selector = Selector::new(subject);
        events.iter().for_each(|e| selector.offer(e));
        let mut b = Builder::new(selector.finish().unwrap());
        for e in &events {
            b.offer(e).unwrap();
        }
        b.finish(AuditInput::default(), None)
    }

    #[test]
    fn a_continued_worker_is_one_row_with_a_segment_per_generation() {
        let id = |n: u128| Uuid::from_u128(n).to_string();
        let r = report(Subject::Pool("p".into()));
        // Every submission keeps its own item, as before.
        let items: Vec<_> = r.workers.iter().map(|w| w.submission_id.clone()).collect();
        assert_eq!(items, [id(1), id(4), id(2), id(3)]);
        assert_eq!(
            r.chains,
            [
                ChainRow {
                    chain: id(1),
                    worker: "w".into(),
                    generations: vec![id(1), id(2), id(3)],
                },
                ChainRow {
                    chain: id(4),
                    worker: "x".into(),
                    generations: vec![id(4)],
                },
            ]
        );
        let of = |n: u128| {
            &r.workers
                .iter()
                .find(|w| w.submission_id == id(n))
                .unwrap()
                .segment
        };
        let (first, second, third, alone) = (of(1), of(2), of(3), of(4));
        assert_eq!(
            (first.generation, second.generation, third.generation),
            (1, 2, 3)
        );
        assert_eq!(first.job_id.map(|j| j.to_string()).as_deref(), Some("9"));
        assert_eq!(first.ended_by.as_deref(), Some("node-failure"));
        assert_eq!(
            first.ended_proof.as_deref(),
            Some("squeue shows job 9 step 1 gone")
        );
        assert_eq!(first.continued_as, Some(id(2)));
        assert_eq!(first.resumed_from, None);
        assert_eq!(second.resumed_from.as_deref(), Some("/s/published/w-1"));
        assert_eq!(second.ended_by.as_deref(), Some("checkpoint"));
        assert_eq!(
            (third.ended_by.as_ref(), third.continued_as.as_ref()),
            (None, None)
        );
        assert_eq!(
            (alone.chain.as_str(), alone.generation),
            (id(4).as_str(), 1)
        );
        // The JSON keeps every key of an item and adds the segment's beside them.
        let item = serde_json::to_value(&r.workers[2]).unwrap();
        for key in [
            "worker",
            "submission_id",
            "marks",
            "state",
            "chain",
            "generation",
            "ended_by",
        ] {
            assert!(item.get(key).is_some(), "{key}: {item}");
        }
    }

    #[test]
    fn a_worker_named_by_any_generation_s_id_is_its_whole_lineage() {
        for n in [1, 2, 3] {
            let r = report(Subject::Worker(Uuid::from_u128(n).to_string()));
            assert_eq!(r.chains.len(), 1, "{n}");
            assert_eq!(r.chains[0].generations.len(), 3, "{n}: {:?}", r.chains);
        }
    }
}
