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
        let gone = |state| Probe::Gone { state };
        let reuse = Recorded::Reuse {
            state: JobState::Running,
            node: None,
        };
        let ending = Recorded::WaitThenSubmit(JobState::Completing);
        for (probe, held, want) in [
            (live(JobState::Running), false, reuse),
            (live(JobState::Completing), false, ending),
            (live(JobState::Pending), true, Recorded::SettleHeld),
            // A held job is settled first, whatever its state.
            (live(JobState::Completing), true, Recorded::SettleHeld),
            (gone(None), true, Recorded::Gone(None)),
            (
                gone(Some(JobState::Completed)),
                false,
                Recorded::Gone(Some(JobState::Completed)),
            ),
            (
                Probe::Unknown("timeout".into()),
                true,
                Recorded::Unknown("timeout".into()),
            ),
        ] {
            assert_eq!(
                recorded(probe.clone(), held),
                want,
                "{probe:?}, held {held}"
            );
        }
    }
}
