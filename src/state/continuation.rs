//! Workers that asked to be continued (`--continue N`), and the lineage of those that were.
//!
//! A worker that asked (`ContinuationAsked`, in its receipt's commit) is kept here from its
//! receipt until its successor's receipt (`WorkerContinued`) or a refusal
//! (`ContinuationRefused`) settles it; a definite launch failure or `dispatch forget` drops it
//! (nothing of it ran, or an operator gave it up). Its end (`WorkerTerminal`, `JobTerminal`)
//! only records the proof: whether it is continued is `policy::continuation`'s decision,
//! driven by `reconcile`. A stop a user asked for (outside a pool's release) is recorded, so
//! it is never continued. Its pool's end and its node's loss are recorded too, so the cause
//! stays known after the pool is released.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::jobs::JobRequest;
use crate::event::pool::{ContinuationAsked, ContinuationRefused, WorkerContinued, WorkerRequest};
use crate::event::Micros;

/// How many continuations the reduced state remembers (the journal keeps them all).
pub const LINEAGE_KEPT: usize = 1024;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Continuations {
    /// By submission id: workers that asked, until continued or refused.
    pub asked: BTreeMap<Uuid, Continuable>,
    /// The most recent continuations, oldest first.
    pub lineage: VecDeque<Generation>,
    /// The most recent refusals, oldest first (at most [`LINEAGE_KEPT`]): `pool status` and
    /// `jobs` show a refused worker's reason. Last, and written only when it holds one: a
    /// snapshot written before it reads as none (journal-format.md §9).
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub refused: VecDeque<ContinuationRefused>,
}

/// One continuation: the event, and when its receipt was written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generation {
    pub at: Micros,
    pub continued: WorkerContinued,
    /// Until its successor is known to exist: the predecessor as it waited, and who wrote the
    /// successor's receipt (host, pid). Last, and written only when set (journal-format.md §9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unproven: Option<Unproven>,
}

/// A continued predecessor kept until its successor is known to exist, so that a successor
/// proven never created (its driver died before Slurm answered) makes it due again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unproven {
    pub predecessor: Continuable,
    /// The host and pid of the command that wrote the successor's receipt.
    pub host: String,
    pub pid: u32,
}

/// What a definite failure of a submission says of who recorded it, and when.
pub struct FailedBy<'a> {
    pub host: &'a str,
    pub pid: u32,
    pub reason: &'a str,
    pub at: Micros,
    /// Its sbatch's limit (`JobNamed`), for a `dispatch submit` job.
    pub sbatch_limit_s: Option<u32>,
}

impl FailedBy<'_> {
    /// Slurm answered and refused it: the failure was recorded by the command that wrote the
    /// receipt at `receipt`, within its sbatch's limit. A failure recorded after that limit
    /// can only be `reconcile`'s proof by absence (its driver died before Slurm answered).
    /// Without a limit (a pool worker's srun), the command that recorded it tells.
    fn slurm_refused(&self, receipt: Micros, u: &Unproven) -> bool {
        match self.sbatch_limit_s {
            Some(limit) => self.at.0 <= receipt.0 + i64::from(limit) * 1_000_000,
            None => u.host == self.host && u.pid == self.pid,
        }
    }
}

/// What a `dispatch submit` or `pool submit` worker needs to be submitted again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Job(JobRequest),
    Pool(WorkerRequest),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Continuable {
    pub worker: String,
    /// Its pool; `None` for a `dispatch submit` worker.
    pub pool: Option<String>,
    pub cpus: u32,
    pub mem_mb: u64,
    /// 1 for a first run.
    pub generation: u32,
    pub asked: ContinuationAsked,
    /// The request again (`JobRequest`, `WorkerRequest`); `None` until it is folded.
    pub request: Option<Request>,
    /// A user stopped it.
    pub stopped: bool,
    /// The proof that ended it: from then on a continuation is decided.
    pub ended: Option<String>,
    /// Its pool lost its node (`PoolNodeLost`): the proof.
    pub node_lost: Option<String>,
    /// Its pool's allocation is over (`PoolAllocationEnded`): the proof.
    pub allocation_ended: Option<String>,
}

/// Who a worker is, as its receipt recorded it.
pub struct Submitted {
    pub worker: String,
    pub pool: Option<String>,
    pub cpus: u32,
    pub mem_mb: u64,
}

impl Continuations {
    pub fn is_empty(&self) -> bool {
        self.asked.is_empty() && self.lineage.is_empty() && self.refused.is_empty()
    }

    /// Why worker `id`'s continuation was refused, if the state remembers a refusal.
    pub fn refusal_of(&self, id: &Uuid) -> Option<&str> {
        self.refused
            .iter()
            .rev()
            .find(|r| r.predecessor == *id)
            .map(|r| r.reason.as_str())
    }

    /// The generation of submission `id`: 1 unless it continued another.
    pub fn generation_of(&self, id: &Uuid) -> u32 {
        self.lineage
            .iter()
            .rev()
            .find(|g| g.continued.submission_id == *id)
            .map_or(1, |g| g.continued.generation)
    }

    /// The continuation that made `id`, if it continued another.
    pub fn made(&self, id: &Uuid) -> Option<&Generation> {
        self.lineage
            .iter()
            .rev()
            .find(|g| g.continued.submission_id == *id)
    }

    /// The lineage submission `id` belongs to, first generation first: each submission with
    /// the continuation that made it (none for the first), as far as the state remembers.
    pub fn chain(&self, id: Uuid) -> Vec<(Uuid, Option<&Generation>)> {
        let mut back = vec![(id, self.made(&id))];
        while let Some(g) = back.last().and_then(|(_, g)| *g) {
            let pred = g.continued.predecessor;
            if back.iter().any(|(x, _)| *x == pred) {
                break;
            }
            back.push((pred, self.made(&pred)));
        }
        back.reverse();
        let mut at = id;
        while let Some(next) = self.lineage.iter().find(|g| g.continued.predecessor == at) {
            at = next.continued.submission_id;
            if back.iter().any(|(x, _)| *x == at) {
                break;
            }
            back.push((at, Some(next)));
        }
        back
    }

    /// `who`: the active worker of that submission (none: the event changes nothing).
    /// `request`: the pool worker's `WorkerRequest`, written before it in the same commit.
    pub fn ask(
        &mut self,
        e: &ContinuationAsked,
        who: Option<Submitted>,
        request: Option<WorkerRequest>,
    ) {
        let Some(who) = who else {
            return;
        };
        let generation = self.generation_of(&e.submission_id);
        self.asked.insert(
            e.submission_id,
            Continuable {
                worker: who.worker,
                pool: who.pool,
                cpus: who.cpus,
                mem_mb: who.mem_mb,
                generation,
                asked: e.clone(),
                request: request.map(Request::Pool),
                stopped: false,
                ended: None,
                node_lost: None,
                allocation_ended: None,
            },
        );
    }

    pub fn job_request(&mut self, e: &JobRequest) {
        if let Some(c) = self.asked.get_mut(&e.submission_id) {
            c.request = Some(Request::Job(e.clone()));
        }
    }

    pub fn stopped(&mut self, id: &Uuid) {
        if let Some(c) = self.asked.get_mut(id) {
            c.stopped = true;
        }
    }

    /// `node_lost`: the proof its pool lost its node, if it did.
    pub fn ended(&mut self, id: &Uuid, proof: &str, node_lost: Option<String>) {
        if let Some(c) = self.asked.get_mut(id) {
            if c.ended.is_none() {
                c.ended = Some(proof.to_owned());
                c.node_lost = node_lost;
            }
        }
    }

    /// The allocation of `pool` is over: every worker of it that asked learns it.
    pub fn allocation_ended(&mut self, pool: &str, proof: &str) {
        for c in self.asked.values_mut() {
            if c.pool.as_deref() == Some(pool) && c.allocation_ended.is_none() {
                c.allocation_ended = Some(proof.to_owned());
            }
        }
    }

    /// Nothing of it ran, or an operator gave it up.
    pub fn dropped(&mut self, id: &Uuid) {
        self.asked.remove(id);
    }

    /// `host`, `pid`: who wrote the successor's receipt.
    pub fn continued(&mut self, at: Micros, e: &WorkerContinued, host: &str, pid: u32) {
        let unproven = self
            .asked
            .remove(&e.predecessor)
            .map(|predecessor| Unproven {
                predecessor,
                host: host.to_owned(),
                pid,
            });
        if self.lineage.len() == LINEAGE_KEPT {
            self.lineage.pop_front();
        }
        self.lineage.push_back(Generation {
            at,
            continued: e.clone(),
            unproven,
        });
    }

    /// Submission `id` exists (or existed): if it is a successor, its predecessor is settled.
    pub fn created(&mut self, id: &Uuid) {
        if let Some(g) = self
            .lineage
            .iter_mut()
            .find(|g| g.continued.submission_id == *id)
        {
            g.unproven = None;
        }
    }

    /// Submission `id` definitely failed: nothing of it was created. If it is a successor not
    /// yet known to exist, the command that wrote its receipt recording the failure means
    /// Slurm answered and refused it (it would refuse again): the chain stops, as a refusal.
    /// Another command recording it means its driver died before Slurm answered and a later
    /// `reconcile` proved it absent: the continuation is forgotten and its predecessor is due
    /// again, as it was.
    pub fn never_created(&mut self, id: &Uuid, by: FailedBy<'_>) {
        let Some(at) = (self.lineage.iter())
            .position(|g| g.continued.submission_id == *id && g.unproven.is_some())
        else {
            return;
        };
        let unproven = self.lineage[at].unproven.take().expect("found with one");
        let predecessor = self.lineage[at].continued.predecessor;
        if by.slurm_refused(self.lineage[at].at, &unproven) {
            self.asked.insert(predecessor, unproven.predecessor);
            self.refused(&ContinuationRefused {
                predecessor,
                reason: format!("its successor {id} was refused: {}", by.reason),
            });
        } else {
            self.lineage.remove(at);
            self.asked.insert(predecessor, unproven.predecessor);
        }
    }

    pub fn refused(&mut self, e: &ContinuationRefused) {
        if self.asked.remove(&e.predecessor).is_none() {
            return;
        }
        if self.refused.len() == LINEAGE_KEPT {
            self.refused.pop_front();
        }
        self.refused.push_back(e.clone());
    }

    /// The workers that ended and wait for a decision (or room), by submission id.
    pub fn ended_ones(&self) -> impl Iterator<Item = (&Uuid, &Continuable)> {
        self.asked.iter().filter(|(_, c)| c.ended.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(id: u128, left: u32) -> ContinuationAsked {
        ContinuationAsked {
            submission_id: Uuid::from_u128(id),
            continues_left: left,
            causes: vec!["time-limit".into()],
            crashed: false,
        }
    }

    fn who() -> Option<Submitted> {
        Some(Submitted {
            worker: "w".into(),
            pool: None,
            cpus: 1,
            mem_mb: 10,
        })
    }

    #[test]
    fn a_worker_that_asked_is_kept_until_continued_or_refused() {
        let mut c = Continuations::default();
        c.ask(&asked(1, 2), who(), None);
        c.ask(&asked(9, 2), None, None);
        assert_eq!(
            c.asked.len(),
            1,
            "an event about no active worker changes nothing"
        );
        c.ended(&Uuid::from_u128(1), "squeue shows job 7 TIMEOUT", None);
        c.ended(&Uuid::from_u128(1), "later", None);
        assert_eq!(
            c.asked[&Uuid::from_u128(1)].ended.as_deref(),
            Some("squeue shows job 7 TIMEOUT"),
            "the first proof stands"
        );
        c.continued(Micros(5), &second_after_first(), "h", 1);
        assert!(c.asked.is_empty());
        c.ask(&asked(2, 1), who(), None);
        assert_eq!(c.asked[&Uuid::from_u128(2)].generation, 2);
        c.refused(&ContinuationRefused {
            predecessor: Uuid::from_u128(2),
            reason: "a user stopped it".into(),
        });
        assert!(c.asked.is_empty());
        assert_eq!(
            c.refusal_of(&Uuid::from_u128(2)),
            Some("a user stopped it"),
            "a refusal's reason is kept for the listings"
        );
        assert_eq!(c.refusal_of(&Uuid::from_u128(1)), None);
        c.refused(&ContinuationRefused {
            predecessor: Uuid::from_u128(3),
            reason: "of no worker that asked".into(),
        });
        assert_eq!(
            c.refused.len(),
            1,
            "a refusal of no waiting worker is not kept"
        );
        assert_eq!(c.generation_of(&Uuid::from_u128(2)), 2);
        assert_eq!(c.generation_of(&Uuid::from_u128(1)), 1);
        let chain: Vec<u128> = c
            .chain(Uuid::from_u128(1))
            .iter()
            .map(|(id, _)| id.as_u128())
            .collect();
        assert_eq!(chain, [1, 2], "from its first generation on");
        assert_eq!(c.chain(Uuid::from_u128(2)).len(), 2, "from its last back");
    }

    /// A snapshot's state written before refusals were kept (two fields) reads as none kept;
    /// one that keeps a refusal reads it back.
    #[test]
    fn refusals_are_read_from_a_snapshot_and_absent_from_an_older_one() {
        let mut c = Continuations::default();
        c.ask(&asked(1, 2), who(), None);
        let older = rmp_serde::to_vec(&c).unwrap();
        c.refused(&ContinuationRefused {
            predecessor: Uuid::from_u128(1),
            reason: "no continuation is left".into(),
        });
        let now = rmp_serde::to_vec(&c).unwrap();
        let read: Continuations = rmp_serde::from_slice(&now).unwrap();
        assert_eq!(read, c);
        let read: Continuations = rmp_serde::from_slice(&older).unwrap();
        assert!(read.refused.is_empty());
        assert_eq!(read.asked.len(), 1);
    }

    fn ended_first(c: &mut Continuations) {
        c.ask(&asked(1, 2), who(), None);
        c.ended(&Uuid::from_u128(1), "squeue shows job 7 TIMEOUT", None);
        c.continued(Micros(5), &second_after_first(), "login1", 40);
        assert!(
            c.ended_ones().next().is_none(),
            "settled by its successor's receipt"
        );
    }

    /// A successor a later `reconcile` proved never created (its driver died before Slurm
    /// answered) makes its predecessor due again, as it was; one the submitting command saw
    /// Slurm refuse stops the chain, with the refusal kept.
    #[test]
    fn a_successor_never_created_makes_its_predecessor_due_again_unless_slurm_refused_it() {
        let two = Uuid::from_u128(2);
        let mut c = Continuations::default();
        ended_first(&mut c);
        let before = c.clone();
        let proof = "job name absent from squeue and sacct";
        let by_reconcile = FailedBy {
            host: "login1",
            pid: 77,
            reason: proof,
            at: Micros(6),
            sbatch_limit_s: None,
        };
        c.never_created(&two, by_reconcile);
        let (id, again) = c.ended_ones().next().expect("due again");
        assert_eq!(id.as_u128(), 1);
        assert_eq!(again.ended.as_deref(), Some("squeue shows job 7 TIMEOUT"));
        assert_eq!((again.generation, again.asked.continues_left), (1, 2));
        assert!(c.lineage.is_empty(), "the successor never existed");
        assert_eq!(c.generation_of(&two), 1);
        let mut c = before.clone();
        c.created(&two);
        c.never_created(
            &two,
            FailedBy {
                host: "login1",
                pid: 77,
                reason: proof,
                at: Micros(6),
                sbatch_limit_s: None,
            },
        );
        assert!(
            c.asked.is_empty(),
            "a successor that exists settled it for good"
        );
        let mut after_its_limit = before.clone();
        let late = FailedBy {
            host: "login1",
            pid: 40,
            reason: proof,
            at: Micros(5 + 31_000_000),
            sbatch_limit_s: Some(30),
        };
        after_its_limit.never_created(&two, late);
        assert_eq!(
            after_its_limit.ended_ones().count(),
            1,
            "past its limit: proof by absence"
        );
        let mut within = before.clone();
        let answered = FailedBy {
            host: "login1",
            pid: 77,
            reason: "sbatch refused the job",
            at: Micros(5 + 2_000_000),
            sbatch_limit_s: Some(30),
        };
        within.never_created(&two, answered);
        assert!(
            within.refusal_of(&Uuid::from_u128(1)).is_some(),
            "Slurm's answer"
        );
        let mut c = before;
        let refused = "sbatch refused the job: \"Invalid partition name specified\"";
        c.never_created(
            &two,
            FailedBy {
                host: "login1",
                pid: 40,
                reason: refused,
                at: Micros(6),
                sbatch_limit_s: None,
            },
        );
        assert!(
            c.asked.is_empty(),
            "Slurm would refuse again: the chain stops"
        );
        assert!(c
            .refusal_of(&Uuid::from_u128(1))
            .unwrap()
            .contains("Invalid partition"));
    }

    /// A generation whose successor is unproven reads back from a snapshot; one written
    /// without the field reads as proven.
    #[test]
    fn an_unproven_successor_is_read_from_a_snapshot() {
        let mut c = Continuations::default();
        ended_first(&mut c);
        let read: Continuations = rmp_serde::from_slice(&rmp_serde::to_vec(&c).unwrap()).unwrap();
        assert_eq!(read, c);
        c.created(&Uuid::from_u128(2));
        assert!(c.lineage[0].unproven.is_none());
        let read: Continuations = rmp_serde::from_slice(&rmp_serde::to_vec(&c).unwrap()).unwrap();
        assert_eq!(read, c);
    }

    /// Submission 2 continuing 1 as its generation 2, after a time-out.
    fn second_after_first() -> WorkerContinued {
        WorkerContinued {
            submission_id: Uuid::from_u128(2),
            predecessor: Uuid::from_u128(1),
            generation: 2,
            cause: "time-limit".into(),
            proof: "squeue shows job 7 TIMEOUT".into(),
            published_dir: None,
            manifest_sha256: None,
            from_crash_class: false,
        }
    }

    /// journal-format.md gives this body byte for byte.
    #[test]
    fn a_continued_body_is_the_bytes_journal_format_gives() {
        assert_eq!(
            crate::event::body_hex(&second_after_first()),
            "98 c4 10 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02 c4 10 00 00 00 00 00 00 00 00 \
             00 00 00 00 00 00 00 01 02 aa 74 69 6d 65 2d 6c 69 6d 69 74 ba 73 71 75 65 75 65 20 \
             73 68 6f 77 73 20 6a 6f 62 20 37 20 54 49 4d 45 4f 55 54 c0 c0 c2"
        );
    }
}
