//! What `session renew` does next: hold, relaunch while the old job drains, or relaunch a
//! lost job, with capped exponential backoff between failed relaunches.

use std::time::Duration;

use super::{probe_of, Probe};
pub use crate::backoff::Backoff;
use crate::slurm::{Answer, JobId, JobRow, JobState};

pub const DEFAULT_DRAIN_MINUTES: u64 = 20;
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(30);
pub const BACKOFF_MAX: Duration = Duration::from_secs(1800);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Hold,
    /// The job is alive but ends within the drain window: start its replacement now, cancel
    /// it once the replacement runs.
    RelaunchDraining,
    /// The job is proven gone: start a new one; there is nothing to cancel.
    RelaunchLost,
}

/// A failed probe holds: a blip is never a reason to relaunch. Only RUNNING counts the time
/// left (a pending job's `%L` is its whole limit).
pub fn decide(probe: &Probe, time_left_secs: Option<u64>, drain_minutes: u64) -> Action {
    match probe {
        Probe::Unknown(_) => Action::Hold,
        Probe::Gone { .. } => Action::RelaunchLost,
        Probe::Live { state, .. } => match time_left_secs {
            Some(left) if *state == JobState::Running && left <= drain_minutes * 60 => {
                Action::RelaunchDraining
            }
            _ => Action::Hold,
        },
    }
}

/// What the job's listing means for renew: what it proved, and what to do about it. A RUNNING
/// job's time left (`%L`) is what the drain window is measured against.
pub fn judge(answer: &Answer<Vec<JobRow>>, job: JobId, drain_minutes: u64) -> (Probe, Action) {
    let left = answer
        .job(job)
        .live()
        .and_then(|row| row.time_left.as_secs());
    let probe = probe_of(answer, job);
    let action = decide(&probe, left, drain_minutes);
    (probe, action)
}

/// Whether renew takes another step, after `done` of at most `max` (`--once` is 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Take it; `last` says no pause follows it.
    Step { last: bool },
    /// `max` steps are done.
    Done,
    /// A stop was requested (Ctrl-C) before this step.
    Stopped,
}

/// The limit ends renew before a stop request does: a `--once` that ran its step is done,
/// not stopped.
pub fn turn(done: u64, max: Option<u64>, stop_requested: bool) -> Turn {
    if max.is_some_and(|m| done >= m) {
        Turn::Done
    } else if stop_requested {
        Turn::Stopped
    } else {
        Turn::Step {
            last: max == Some(done + 1),
        }
    }
}

/// `session renew`'s pauses between failed renewals: [`BACKOFF_INITIAL`], 2×, … up to
/// [`BACKOFF_MAX`]; an initial below 1 s becomes 1 s.
pub fn backoff(initial: Duration, max: Duration) -> Backoff {
    Backoff::new(initial.max(Duration::from_secs(1)), max)
}

/// [`backoff`] with the defaults.
pub fn default_backoff() -> Backoff {
    backoff(BACKOFF_INITIAL, BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(state: JobState) -> Probe {
        Probe::Live { state, node: None }
    }

    /// Behaviour 68.
    #[test]
    fn decisions() {
        let gone = |state| Probe::Gone { state };
        for (probe, left_s, want) in [
            (Probe::Unknown("x".into()), None, Action::Hold),
            (live(JobState::Running), Some(600 * 60), Action::Hold),
            (live(JobState::Running), None, Action::Hold),
            (
                live(JobState::Running),
                Some(20 * 60),
                Action::RelaunchDraining,
            ),
            // A pending job is not draining.
            (live(JobState::Pending), Some(5 * 60), Action::Hold),
            (gone(None), None, Action::RelaunchLost),
            (
                gone(Some(JobState::Cancelled { by: Some(12345) })),
                None,
                Action::RelaunchLost,
            ),
            (gone(Some(JobState::Completed)), None, Action::RelaunchLost),
        ] {
            assert_eq!(
                decide(&probe, left_s, 20),
                want,
                "{probe:?}, {left_s:?} s left"
            );
        }
    }

    #[test]
    fn judged_by_the_rows_time_left() {
        use crate::slurm::squeue::parse_jobs;
        let job = JobId::new(7).unwrap();
        let answer = |state: &str, left: &str| {
            Answer::Live(
                parse_jobs(&format!(
                    "7|7|{state}|p|a|q|u|1|1|n1|{left}|1:00:00|N/A|N/A|None|n\n"
                ))
                .unwrap(),
            )
        };
        let (probe, action) = judge(&answer("RUNNING", "19:00"), job, 20);
        assert!(matches!(probe, Probe::Live { .. }));
        assert_eq!(action, Action::RelaunchDraining);
        assert_eq!(judge(&answer("RUNNING", "21:00"), job, 20).1, Action::Hold);
        assert_eq!(judge(&answer("PENDING", "5:00"), job, 20).1, Action::Hold);
        assert_eq!(
            judge(&answer("COMPLETED", "0:00"), job, 20).1,
            Action::RelaunchLost
        );
        // An answer without the job proves nothing: hold.
        let (probe, action) = judge(&Answer::Live(Vec::new()), job, 20);
        assert!(matches!(probe, Probe::Unknown(_)));
        assert_eq!(action, Action::Hold);
    }

    #[test]
    fn the_limit_ends_renew_before_a_stop_request() {
        assert_eq!(turn(0, Some(0), true), Turn::Done);
        assert_eq!(turn(1, Some(1), true), Turn::Done);
        assert_eq!(turn(0, Some(1), true), Turn::Stopped);
        assert_eq!(turn(0, Some(1), false), Turn::Step { last: true });
        assert_eq!(turn(0, Some(2), false), Turn::Step { last: false });
        assert_eq!(turn(7, None, false), Turn::Step { last: false });
    }

    quickcheck::quickcheck! {
        /// Driven as renew drives it (no pause, and no further turn, after a last step),
        /// `turn` takes `max` steps, or as many as come before a stop request; only the
        /// `max`-th is marked last; a run is a stopped one only if the stop came first.
        fn turns_take_max_steps_and_none_after_a_stop(max: Option<u8>, stop_at: Option<u8>) -> bool {
            const UNBOUNDED: u64 = 50;
            let max = max.map(|m| u64::from(m % 4));
            let stop_at = stop_at.map(|s| u64::from(s % 4));
            let (mut done, mut lasts, mut stopped) = (0u64, Vec::new(), false);
            loop {
                match turn(done, max, stop_at.is_some_and(|s| done >= s)) {
                    Turn::Step { last } => {
                        done += 1;
                        lasts.push(last);
                        if last || done == UNBOUNDED {
                            break;
                        }
                    }
                    Turn::Done => break,
                    Turn::Stopped => {
                        stopped = true;
                        break;
                    }
                }
            }
            let limit = max.unwrap_or(UNBOUNDED);
            let want = stop_at.map_or(limit, |s| s.min(limit));
            done == want
                && stopped == stop_at.is_some_and(|s| s < limit)
                && lasts.iter().enumerate().all(|(i, l)| *l == (max == Some(i as u64 + 1)))
        }
    }

    /// Behaviour 72: 30, 60, 120, 200, 200; reset starts over.
    #[test]
    fn backoff_doubles_up_to_its_max_and_resets() {
        let mut b = backoff(Duration::from_secs(30), Duration::from_secs(200));
        let got: Vec<u64> = (0..5).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(got, [30, 60, 120, 200, 200]);
        b.reset();
        assert_eq!(b.next_delay().as_secs(), 30);
        let mut b = backoff(Duration::ZERO, Duration::ZERO);
        assert_eq!(b.next_delay(), Duration::from_secs(1));
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }
}
