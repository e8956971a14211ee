//! What `session renew` does next: hold, relaunch while the old job drains, or relaunch a
//! lost job, with capped exponential backoff between failed relaunches.

use std::time::Duration;

use super::Probe;
use crate::slurm::JobState;

pub const DEFAULT_DRAIN_MINUTES: u64 = 20;
pub const DEFAULT_POLL: Duration = Duration::from_secs(60);
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

/// Delays initial, 2×, 4×, … capped at `max`. An initial below 1 s becomes 1 s; a max below
/// the initial becomes the initial.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        let initial = initial.max(Duration::from_secs(1));
        let max = max.max(initial);
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(BACKOFF_INITIAL, BACKOFF_MAX)
    }
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
        assert_eq!(decide(&Probe::Unknown("x".into()), None, 20), Action::Hold);
        assert_eq!(
            decide(&live(JobState::Running), Some(600 * 60), 20),
            Action::Hold
        );
        assert_eq!(decide(&live(JobState::Running), None, 20), Action::Hold);
        assert_eq!(
            decide(&live(JobState::Running), Some(20 * 60), 20),
            Action::RelaunchDraining
        );
        assert_eq!(
            decide(&live(JobState::Pending), Some(5 * 60), 20),
            Action::Hold,
            "a pending job is not draining"
        );
        assert_eq!(
            decide(&Probe::Gone { state: None }, None, 20),
            Action::RelaunchLost
        );
        assert_eq!(
            decide(
                &Probe::Gone {
                    state: Some(JobState::Cancelled { by: Some(12345) })
                },
                None,
                20
            ),
            Action::RelaunchLost
        );
        assert_eq!(
            decide(
                &Probe::Gone {
                    state: Some(JobState::Completed)
                },
                None,
                20
            ),
            Action::RelaunchLost
        );
    }

    /// Behaviour 72: 30, 60, 120, 200, 200; reset starts over.
    #[test]
    fn backoff() {
        let mut b = Backoff::new(Duration::from_secs(30), Duration::from_secs(200));
        let got: Vec<u64> = (0..5).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(got, [30, 60, 120, 200, 200]);
        b.reset();
        assert_eq!(b.next_delay().as_secs(), 30);
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(b.next_delay(), Duration::from_secs(1));
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }
}
