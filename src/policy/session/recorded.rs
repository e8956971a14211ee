//! What a launch does with the job its session records, decided from one probe of it: the
//! one decision `session launch` acts on and `session launch --dry-run` reports.

use super::{is_ending, Probe};
use crate::slurm::JobState;

/// What a launch does with the recorded job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// It is live: the launch reuses it.
    Reuse {
        state: JobState,
        node: Option<String>,
    },
    /// It is held: the launch that submitted it died before settling the hold, so this one
    /// settles it as that launch would have (`ops::session::hold::settle_orphan`): a held
    /// batch job is kept, or yields to an older job of the session; a held salloc job is
    /// cancelled. A dry run changes nothing: it reads the first as reused, the second as gone.
    SettleHeld,
    /// It is live but COMPLETING: the launch waits for it to end, then looks further.
    WaitThenSubmit(JobState),
    /// Proven gone (with its last state, if Slurm still showed one): the launch clears the
    /// record and looks for another job by name.
    Gone(Option<JobState>),
    /// Slurm could not tell: the launch stops here.
    Unknown(String),
}

/// `held`: the job is held (its hold was never settled).
pub fn recorded(probe: Probe, held: bool) -> Recorded {
    match probe {
        Probe::Live { .. } if held => Recorded::SettleHeld,
        Probe::Live { state, .. } if is_ending(&state) => Recorded::WaitThenSubmit(state),
        Probe::Live { state, node } => Recorded::Reuse { state, node },
        Probe::Gone { state } => Recorded::Gone(state),
        Probe::Unknown(e) => Recorded::Unknown(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_job_is_reused_unless_it_is_ending_or_held() {
        let live = |state| Probe::Live { state, node: None };
        assert_eq!(
            recorded(live(JobState::Running), false),
            Recorded::Reuse {
                state: JobState::Running,
                node: None
            }
        );
        assert_eq!(
            recorded(live(JobState::Completing), false),
            Recorded::WaitThenSubmit(JobState::Completing)
        );
        assert_eq!(
            recorded(live(JobState::Pending), true),
            Recorded::SettleHeld
        );
        assert_eq!(
            recorded(live(JobState::Completing), true),
            Recorded::SettleHeld,
            "a held job is settled first, whatever its state"
        );
        assert_eq!(
            recorded(Probe::Gone { state: None }, true),
            Recorded::Gone(None)
        );
        assert_eq!(
            recorded(
                Probe::Gone {
                    state: Some(JobState::Completed)
                },
                false
            ),
            Recorded::Gone(Some(JobState::Completed))
        );
        assert_eq!(
            recorded(Probe::Unknown("timeout".into()), true),
            Recorded::Unknown("timeout".into())
        );
    }
}
