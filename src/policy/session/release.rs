//! What `session release` leaves alone when it sweeps for other jobs of a session's name.

use crate::event::session::SessionKey;
use crate::slurm::JobId;
use crate::state::session::Sessions;

/// The jobs a release's sweep by name must not touch: those it settled already (proven gone
/// or cancelled here, or detached from), and every job another session holds (the sweep
/// cancels only this session's strays; a shared job is detached from, never cancelled).
pub fn left_alone(sessions: &Sessions, this: &SessionKey, settled: &[JobId]) -> Vec<JobId> {
    let mut jobs = settled.to_vec();
    jobs.extend(
        sessions
            .recorded_jobs()
            .filter(|(key, _)| *key != this)
            .map(|(_, job)| job),
    );
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Micros;
    use crate::state::session::{BoundJob, Origin, Session};

    fn id(n: u32) -> JobId {
        JobId::new(n).unwrap()
    }

    fn holding(mirror: &str, job: Option<u32>) -> Session {
        Session {
            key: SessionKey::new(mirror, "T"),
            job: job.map(|j| BoundJob {
                job_id: id(j),
                node: None,
                origin: Origin::Adopted,
                since: Micros(1),
            }),
            submission: None,
            replaced: None,
            cancelling: Some(id(99)),
            confined: false,
            command: Vec::new(),
        }
    }

    #[test]
    fn the_settled_jobs_and_other_sessions_jobs_are_left_alone() {
        let mut sessions = Sessions::default();
        for s in [
            holding("this", Some(1)),
            holding("other", Some(2)),
            holding("idle", None),
        ] {
            sessions.sessions.insert(s.key.clone(), s);
        }
        let this = SessionKey::new("this", "T");
        assert_eq!(left_alone(&sessions, &this, &[id(5)]), [id(5), id(2)]);
        assert_eq!(left_alone(&Sessions::default(), &this, &[]), []);
    }
}
