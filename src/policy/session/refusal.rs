//! Why a session command refuses before it does anything (exit 3): typed, as the pool's
//! `policy::pool::Refusal`, so callers and tests match on the reason, not on its text.

use crate::event::session::SessionKey;
use crate::next::Next::{SessionRelease, Submit};
use crate::slurm::JobName;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionRefusal {
    /// A mirror named on the command line shares its token with a configured mirror: their
    /// jobs would share a name and adopt each other's (the config refuses two configured ones).
    #[error(
        "mirror {mirror:?} has the token {token:?}, like the configured mirror {other:?}: \
         their jobs would share the name {prefix}{token}. Use {other:?} or rename one"
    )]
    TokenOfConfiguredMirror {
        mirror: String,
        token: String,
        other: String,
        prefix: String,
    },
    /// Another session the journal knows (another mirror) has this token.
    #[error(
        "mirror {mirror:?} has the token {token:?}, like mirror {:?} of session {other}: their \
         jobs would share the name {job_name}. Release that session first, or use its mirror \
         name",
        .other.mirror
    )]
    TokenOfRecordedSession {
        mirror: String,
        token: String,
        other: SessionKey,
        job_name: JobName,
    },
    /// A mirror neither configured nor recorded whose job name has the shape of a pool's
    /// allocation or a `dispatch submit` job: a session must never adopt or cancel one.
    #[error(
        "mirror {mirror:?} would name its session's job {job_name}, the shape of the names \
         dispatch gives pool allocations and {Submit} jobs (<name>-<8 hex digits>): a session \
         must not take one of those for its own. Name the mirror otherwise, or add it to \
         [mirrors] in the configuration if that job really is this session's"
    )]
    WorkerJobName { mirror: String, job_name: JobName },
    /// The journal's bound on sessions is reached and this launch would add one.
    #[error(
        "the journal already holds {max} sessions; release some with {SessionRelease} before \
         starting {key}"
    )]
    TooManySessions { max: usize, key: SessionKey },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts are those the session commands printed before the refusals were typed
    /// (scripts and users read them): pinned word for word.
    #[test]
    fn messages_are_unchanged() {
        let key = SessionKey::new("K Agg", "T");
        let cases = [
            (
                SessionRefusal::TokenOfConfiguredMirror {
                    mirror: "K/Agg".into(),
                    token: "K_Agg".into(),
                    other: "K Agg".into(),
                    prefix: "sess-".into(),
                },
                "mirror \"K/Agg\" has the token \"K_Agg\", like the configured mirror \"K Agg\": \
                 their jobs would share the name sess-K_Agg. Use \"K Agg\" or rename one",
            ),
            (
                SessionRefusal::TokenOfRecordedSession {
                    mirror: "K/Agg".into(),
                    token: "K_Agg".into(),
                    other: key.clone(),
                    job_name: JobName::new("sess-K_Agg").unwrap(),
                },
                "mirror \"K/Agg\" has the token \"K_Agg\", like mirror \"K Agg\" of session \
                 K Agg--T: their jobs would share the name sess-K_Agg. Release that session \
                 first, or use its mirror name",
            ),
            (
                SessionRefusal::TooManySessions { max: 7, key },
                "the journal already holds 7 sessions; release some with `dispatch session \
                 release` before starting K Agg--T",
            ),
        ];
        for (refusal, text) in cases {
            assert_eq!(refusal.to_string(), text);
        }
    }
}
