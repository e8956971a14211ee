//! What `session launch --dry-run` reads from a probe of the job the record names, as a launch
//! would read it (a launch also settles a job its dead launcher left held; a dry run changes
//! nothing, so a held live job reads as reused).

use super::{is_ending, Probe};

/// What a launch would do with the recorded job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// It is live: the launch reuses it.
    Reuse,
    /// It is live but COMPLETING: the launch waits for it to end, then submits.
    WaitThenSubmit,
    /// Proven gone: the launch looks for another by name.
    Gone,
    /// Slurm could not tell: the launch stops here.
    Unknown(String),
}

pub fn recorded(probe: Probe) -> Recorded {
    match probe {
        Probe::Live { state, .. } if is_ending(&state) => Recorded::WaitThenSubmit,
        Probe::Live { .. } => Recorded::Reuse,
        Probe::Gone { .. } => Recorded::Gone,
        Probe::Unknown(e) => Recorded::Unknown(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::JobState;

    #[test]
    fn a_live_job_is_reused_unless_it_is_ending() {
        let live = |state| Probe::Live { state, node: None };
        assert_eq!(recorded(live(JobState::Running)), Recorded::Reuse);
        assert_eq!(recorded(live(JobState::Pending)), Recorded::Reuse);
        assert_eq!(
            recorded(live(JobState::Completing)),
            Recorded::WaitThenSubmit
        );
        assert_eq!(recorded(Probe::Gone { state: None }), Recorded::Gone);
        assert_eq!(
            recorded(Probe::Gone {
                state: Some(JobState::Completed)
            }),
            Recorded::Gone
        );
        assert_eq!(
            recorded(Probe::Unknown("timeout".into())),
            Recorded::Unknown("timeout".into())
        );
    }
}
