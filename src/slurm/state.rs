//! Job and step states, the whole Slurm 22.05 vocabulary.
//!
//! [`JobState::is_terminal`] is the only place that decides whether a state proves that
//! a job or step has ended. It is deliberately narrow: a state that may still come back
//! to life (requeued, held, revoked to another cluster, stopped) or that is not fully
//! over (COMPLETING: processes may still be running) is not terminal, and a word we do
//! not know is kept as [`JobState::Other`] and is never terminal.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::digits::parse_u32_canonical;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobState {
    // Base states.
    Pending,
    Running,
    Suspended,
    Completed,
    /// `CANCELLED` or `CANCELLED by <uid>` (sacct).
    Cancelled {
        by: Option<u32>,
    },
    Failed,
    Timeout,
    NodeFail,
    Preempted,
    BootFail,
    Deadline,
    OutOfMemory,
    // Flag states Slurm prints instead of the base state.
    Completing,
    Configuring,
    Requeued,
    RequeueFed,
    RequeueHold,
    Resizing,
    ResvDelHold,
    Revoked,
    Signaling,
    SpecialExit,
    StageOut,
    Stopped,
    PowerUpNode,
    ReconfigFail,
    UpdateDb,
    LaunchFailed,
    /// Any other text, kept verbatim. Never terminal.
    Other(String),
}

const WORDS: &[(&str, JobState)] = &[
    ("PENDING", JobState::Pending),
    ("RUNNING", JobState::Running),
    ("SUSPENDED", JobState::Suspended),
    ("COMPLETED", JobState::Completed),
    ("FAILED", JobState::Failed),
    ("TIMEOUT", JobState::Timeout),
    ("NODE_FAIL", JobState::NodeFail),
    ("PREEMPTED", JobState::Preempted),
    ("BOOT_FAIL", JobState::BootFail),
    ("DEADLINE", JobState::Deadline),
    ("OUT_OF_MEMORY", JobState::OutOfMemory),
    ("COMPLETING", JobState::Completing),
    ("CONFIGURING", JobState::Configuring),
    ("REQUEUED", JobState::Requeued),
    ("REQUEUE_FED", JobState::RequeueFed),
    ("REQUEUE_HOLD", JobState::RequeueHold),
    ("RESIZING", JobState::Resizing),
    ("RESV_DEL_HOLD", JobState::ResvDelHold),
    ("REVOKED", JobState::Revoked),
    ("SIGNALING", JobState::Signaling),
    ("SPECIAL_EXIT", JobState::SpecialExit),
    ("STAGE_OUT", JobState::StageOut),
    ("STOPPED", JobState::Stopped),
    ("POWER_UP_NODE", JobState::PowerUpNode),
    ("RECONFIG_FAIL", JobState::ReconfigFail),
    ("UPDATE_DB", JobState::UpdateDb),
    ("LAUNCH_FAILED", JobState::LaunchFailed),
];

impl JobState {
    /// Never fails: unknown text becomes `Other`. Matching is exact (Slurm prints upper
    /// case); `CANCELLED+` (a truncated column) or `running` stay `Other`.
    pub fn parse(s: &str) -> JobState {
        if s == "CANCELLED" {
            return JobState::Cancelled { by: None };
        }
        if let Some(uid) = s.strip_prefix("CANCELLED by ") {
            if let Ok(uid) = parse_u32_canonical(uid) {
                return JobState::Cancelled { by: Some(uid) };
            }
            return JobState::Other(s.to_owned());
        }
        WORDS
            .iter()
            .find(|(w, _)| *w == s)
            .map(|(_, st)| st.clone())
            .unwrap_or_else(|| JobState::Other(s.to_owned()))
    }

    /// True only for states that prove the job (or step) is over for good.
    pub fn is_terminal(&self) -> bool {
        match self {
            JobState::Completed
            | JobState::Cancelled { .. }
            | JobState::Failed
            | JobState::Timeout
            | JobState::NodeFail
            | JobState::Preempted
            | JobState::BootFail
            | JobState::Deadline
            | JobState::OutOfMemory => true,
            // COMPLETING: processes may still run. REQUEUE*/SPECIAL_EXIT/RESV_DEL_HOLD:
            // held, can be released. REVOKED: the job runs on a sibling cluster.
            // STOPPED: resources still held. The rest are in flight.
            JobState::Pending
            | JobState::Running
            | JobState::Suspended
            | JobState::Completing
            | JobState::Configuring
            | JobState::Requeued
            | JobState::RequeueFed
            | JobState::RequeueHold
            | JobState::Resizing
            | JobState::ResvDelHold
            | JobState::Revoked
            | JobState::Signaling
            | JobState::SpecialExit
            | JobState::StageOut
            | JobState::Stopped
            | JobState::PowerUpNode
            | JobState::ReconfigFail
            | JobState::UpdateDb
            | JobState::LaunchFailed
            | JobState::Other(_) => false,
        }
    }

    /// A known state that is not terminal: the job holds or may hold resources.
    pub fn is_active(&self) -> bool {
        !self.is_terminal() && !matches!(self, JobState::Other(_))
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobState::Cancelled { by: None } => f.write_str("CANCELLED"),
            JobState::Cancelled { by: Some(uid) } => write!(f, "CANCELLED by {uid}"),
            JobState::Other(s) => f.write_str(s),
            known => {
                let word = WORDS
                    .iter()
                    .find(|(_, st)| st == known)
                    .map(|(w, _)| *w)
                    .unwrap_or("?");
                debug_assert_ne!(word, "?", "state missing from WORDS");
                f.write_str(word)
            }
        }
    }
}

/// Steps use the same vocabulary.
pub type StepState = JobState;

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    #[test]
    fn vocabulary_round_trips() {
        for (w, st) in WORDS {
            assert_eq!(&JobState::parse(w), st);
            assert_eq!(st.to_string(), *w);
        }
        assert_eq!(
            JobState::parse("CANCELLED by 0"),
            JobState::Cancelled { by: Some(0) }
        );
        assert_eq!(
            JobState::parse("CANCELLED by 0").to_string(),
            "CANCELLED by 0"
        );
        assert_eq!(
            JobState::parse("CANCELLED"),
            JobState::Cancelled { by: None }
        );
    }

    #[test]
    fn terminal_set() {
        let terminal = [
            "COMPLETED",
            "CANCELLED",
            "CANCELLED by 123",
            "FAILED",
            "TIMEOUT",
            "NODE_FAIL",
            "PREEMPTED",
            "BOOT_FAIL",
            "DEADLINE",
            "OUT_OF_MEMORY",
        ];
        for w in terminal {
            assert!(JobState::parse(w).is_terminal(), "{w}");
        }
        let not_terminal = [
            "PENDING",
            "RUNNING",
            "SUSPENDED",
            "COMPLETING",
            "CONFIGURING",
            "REQUEUED",
            "REQUEUE_FED",
            "REQUEUE_HOLD",
            "RESIZING",
            "RESV_DEL_HOLD",
            "REVOKED",
            "SIGNALING",
            "SPECIAL_EXIT",
            "STAGE_OUT",
            "STOPPED",
        ];
        for w in not_terminal {
            let st = JobState::parse(w);
            assert!(!st.is_terminal(), "{w}");
            assert!(st.is_active(), "{w}");
        }
    }

    #[test]
    fn unknown_words_are_other_and_not_terminal() {
        for w in [
            "",
            "running",
            "CANCELLED+",
            "CANCELLED by",
            "CANCELLED by x",
            "CANCELLED by ١",
            "COMPLETED ",
            "%T",
            "FANCY_NEW_STATE",
        ] {
            let st = JobState::parse(w);
            assert_eq!(st, JobState::Other(w.to_owned()), "{w:?}");
            assert!(!st.is_terminal());
            assert!(!st.is_active());
            assert_eq!(st.to_string(), w);
        }
    }

    quickcheck! {
        fn prop_never_panics_and_round_trips(s: String) -> bool {
            JobState::parse(&s).to_string() == s
        }
    }
}
