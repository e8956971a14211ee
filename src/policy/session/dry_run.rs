//! What `session launch --dry-run` reads from a probe of the job the record names, as a launch
//! would read it (a launch also settles a job its dead sbatch launcher left held; a dry run
//! changes nothing, so such a job reads as reused; a held salloc job of a dead launcher is one
//! the launch cancels, so it reads as gone).

use super::{is_ending, Probe};

/// What a launch would do with the recorded job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// It is live: the launch reuses it.
    Reuse,
    /// It is live but COMPLETING: the launch waits for it to end, then submits.
    WaitThenSubmit,
    /// Proven gone, or a held salloc job that a launch would cancel: the launch looks for
    /// another by name.
    Gone,
    /// Slurm could not tell: the launch stops here.
    Unknown(String),
}

/// `held_salloc`: the job is held and the target unconfined (its launcher died before
/// settling it; `hold::settle_orphan`).
pub fn recorded(probe: Probe, held_salloc: bool) -> Recorded {
    match probe {
        Probe::Live { .. } if held_salloc => Recorded::Gone,
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
        assert_eq!(recorded(live(JobState::Running), false), Recorded::Reuse);
        assert_eq!(recorded(live(JobState::Pending), false), Recorded::Reuse);
        assert_eq!(
            recorded(live(JobState::Completing), false),
            Recorded::WaitThenSubmit
        );
        assert_eq!(recorded(Probe::Gone { state: None }, false), Recorded::Gone);
        assert_eq!(
            recorded(
                Probe::Gone {
                    state: Some(JobState::Completed)
                },
                false
            ),
            Recorded::Gone
        );
        assert_eq!(
            recorded(Probe::Unknown("timeout".into()), false),
            Recorded::Unknown("timeout".into())
        );
    }

    #[test]
    fn a_held_salloc_job_of_a_dead_launch_is_one_a_launch_cancels() {
        let held = Probe::Live {
            state: JobState::Pending,
            node: None,
        };
        assert_eq!(recorded(held.clone(), true), Recorded::Gone);
        assert_eq!(recorded(held, false), Recorded::Reuse);
        assert_eq!(
            recorded(Probe::Unknown("x".into()), true),
            Recorded::Unknown("x".into())
        );
    }
}
