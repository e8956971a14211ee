//! Trial events: opened, joined, judged.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::Sha256Digest;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialOpened {
    pub trial: String,
    /// What is under trial, for example the commit of the code being accepted.
    pub pin: Option<String>,
    /// The earlier trial this one is a follow-on of.
    pub follows: Option<String>,
    pub note: String,
}

/// A worker is part of a trial: written in the same commit as its submission intent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialWorkerJoined {
    pub trial: String,
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
}

/// What one worker left behind, as the verdict saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialEvidence {
    #[serde(deserialize_with = "crate::event::wire::uuid")]
    pub submission_id: Uuid,
    pub worker: String,
    /// The worker's state in the reduced state when judged (`released`, `running`, …).
    pub state: String,
    /// The supervisor's outcome from the worker's own journal (`completed`, …), if it got that far.
    pub outcome: Option<String>,
    /// Where its workspace and evidence were published, and the SHA-256 of the manifest there.
    pub published_dir: Option<String>,
    pub manifest_sha256: Option<Sha256Digest>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    Passed,
    Failed,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Verdict> {
        [Verdict::Passed, Verdict::Failed]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialJudged {
    pub trial: String,
    pub verdict: Verdict,
    pub reason: String,
    pub evidence: Vec<TrialEvidence>,
}
