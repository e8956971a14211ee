//! The watermark jobs reconcile makes on purpose (`event::watermark`): each made one's id and
//! the time of its intent, candidates for `policy::reconcile::watermark` beside the recorded
//! `dispatch submit` jobs; and every beacon that may still be in Slurm's queue, until a
//! `scancel` of it answered.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::watermark::*;
use crate::event::Micros;
use crate::slurm::JobId;

/// How many made watermarks are kept: the newest serve every submission that settled before
/// them; an older one only gives a lower mark.
pub const WATERMARKS_KEPT: usize = 16;

/// How many beacons not yet cancelled are kept. Each is one reconcile's that was killed or
/// got no answer from Slurm; past this many the oldest is left to its `--deadline` (which
/// Slurm 24.11 honours for a held job and 22.05 does not).
pub const BEACONS_KEPT: usize = 16;

/// A beacon that may be in Slurm's queue: from its intent until a `scancel` of it answered, or
/// sbatch definitely refused it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Beacon {
    pub beacon_id: Uuid,
    pub job_name: String,
    /// When its intent was journaled.
    pub since: Micros,
    /// The longest its sbatch could run: past `since` plus this, a cancel by name is sure to
    /// find it if it exists.
    pub sbatch_limit_s: u32,
    /// Its id, once sbatch answered.
    pub job_id: Option<JobId>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watermarks {
    /// Made beacon jobs: the time of the intent before their sbatch, and their id, oldest first.
    pub made: VecDeque<(Micros, JobId)>,
    /// Beacons that may still be queued, oldest first: the next reconcile cancels them.
    pub beacons: VecDeque<Beacon>,
}

impl Watermarks {
    pub fn is_empty(&self) -> bool {
        self.made.is_empty() && self.beacons.is_empty()
    }

    pub fn intent(&mut self, time: Micros, e: &WatermarkIntent) {
        if self.beacons.len() == BEACONS_KEPT {
            self.beacons.pop_front();
        }
        self.beacons.push_back(Beacon {
            beacon_id: e.beacon_id,
            job_name: e.job_name.clone(),
            since: time,
            sbatch_limit_s: e.sbatch_limit_s,
            job_id: None,
        });
    }

    /// The beacon's id counts from its intent's time: sbatch gave it out after that.
    pub fn made(&mut self, e: &WatermarkMade) {
        let Some(b) = self.beacons.iter_mut().find(|b| b.beacon_id == e.beacon_id) else {
            return;
        };
        b.job_id = Some(e.job_id);
        if self.made.len() == WATERMARKS_KEPT {
            self.made.pop_front();
        }
        self.made.push_back((b.since, e.job_id));
    }

    /// A definite refusal leaves nothing to cancel; an unanswered sbatch may have queued one.
    pub fn failed(&mut self, e: &WatermarkFailed) {
        if e.definite {
            self.beacons.retain(|b| b.beacon_id != e.beacon_id);
        }
    }

    pub fn cancelled(&mut self, e: &WatermarkCancelled) {
        if e.answered {
            self.beacons.retain(|b| b.beacon_id != e.beacon_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::test_job as id;

    fn intent(n: u128) -> WatermarkIntent {
        WatermarkIntent {
            beacon_id: Uuid::from_u128(n),
            job_name: format!("u-watermark-{n:08x}"),
            sbatch_limit_s: 32,
        }
    }

    fn made(n: u128, job: u32) -> WatermarkMade {
        WatermarkMade {
            beacon_id: Uuid::from_u128(n),
            job_id: id(job),
        }
    }

    fn cancelled(n: u128, answered: bool) -> WatermarkCancelled {
        WatermarkCancelled {
            beacon_id: Uuid::from_u128(n),
            job_id: None,
            answered,
            reason: String::new(),
        }
    }

    #[test]
    fn a_made_beacon_counts_from_its_intents_time_and_stays_until_a_cancel_answers() {
        let mut w = Watermarks::default();
        w.intent(Micros(10), &intent(1));
        assert_eq!(
            w.beacons[0].job_id, None,
            "from its intent on, it may exist"
        );
        w.made(&made(1, 77));
        assert_eq!(w.made, [(Micros(10), id(77))]);
        assert_eq!(w.beacons[0].job_id, Some(id(77)));
        w.cancelled(&cancelled(1, false));
        assert_eq!(
            w.beacons.len(),
            1,
            "an unanswered scancel keeps it to cancel"
        );
        w.cancelled(&cancelled(1, true));
        assert!(w.beacons.is_empty());
        // A made beacon whose intent is unknown is no candidate.
        w.made(&made(2, 78));
        assert_eq!(w.made.len(), 1);
    }

    #[test]
    fn an_unanswered_sbatch_leaves_a_beacon_to_cancel_by_name_and_a_refusal_none() {
        let mut w = Watermarks::default();
        w.intent(Micros(10), &intent(1));
        w.intent(Micros(11), &intent(2));
        let failed = |n, definite| WatermarkFailed {
            beacon_id: Uuid::from_u128(n),
            definite,
            reason: String::new(),
        };
        w.failed(&failed(1, false));
        w.failed(&failed(2, true));
        assert_eq!(w.beacons.len(), 1);
        assert_eq!(w.beacons[0].beacon_id, Uuid::from_u128(1));
        assert!(w.made.is_empty());
    }

    /// The snapshot codec (MessagePack, structs as arrays): a state that never made a
    /// watermark is written as version 7 always wrote it, one with watermarks round-trips.
    #[test]
    fn a_snapshot_holds_watermarks_only_when_there_are_some() {
        let mut state = crate::state::State::default();
        let without = rmp_serde::to_vec(&state).unwrap();
        state.watermarks.intent(Micros(10), &intent(1));
        state.watermarks.made(&made(1, 77));
        let with = rmp_serde::to_vec(&state).unwrap();
        // A fixarray: its first byte counts the fields.
        assert_eq!(with[0], without[0] + 1);
        assert_eq!(
            rmp_serde::from_slice::<crate::state::State>(&with).unwrap(),
            state
        );
        assert_eq!(
            rmp_serde::from_slice::<crate::state::State>(&without).unwrap(),
            crate::state::State::default()
        );
    }

    #[test]
    fn both_lists_are_bounded() {
        let mut w = Watermarks::default();
        for n in 0..100u32 {
            w.intent(Micros(i64::from(n)), &intent(u128::from(n)));
            w.made(&made(u128::from(n), n + 100));
        }
        assert_eq!(
            (w.made.len(), w.beacons.len()),
            (WATERMARKS_KEPT, BEACONS_KEPT)
        );
        assert_eq!(w.made.back().unwrap().1, id(199));
    }
}
