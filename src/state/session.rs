//! Sessions: a (mirror, target) pair and the one job it holds, as a projection of journal events.
//!
//! Nothing here is stored as such: a session's record is what its events say. The events
//! carry the job id they are about, and an event about a job the session no longer holds
//! changes nothing (renew cancels the job it replaced after the session has moved on).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::session::{
    SessionAdopted, SessionCancelFailed, SessionCancelIntent, SessionCleared, SessionDetached,
    SessionJobSubmitted, SessionKey, SessionLaunchIntent, SessionNodeResolved, SessionReleased,
    SessionSubmitFailed,
};
use crate::event::Micros;
use crate::slurm::JobId;

/// How the session came to hold its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Origin {
    Submitted,
    Adopted,
}

impl super::Word for Origin {
    fn as_str(self) -> &'static str {
        match self {
            Origin::Submitted => "submitted",
            Origin::Adopted => "adopted",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundJob {
    pub job_id: JobId,
    pub node: Option<String>,
    pub origin: Origin,
    pub since: Micros,
}

/// A submission without a job id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    pub submission_id: Uuid,
    pub job_name: String,
    pub replacing: Option<JobId>,
    pub since: Micros,
    /// `None` while in flight (intent, no outcome yet: a crash leaves it so); `Some` once the
    /// submit failed in a way that may still have created a job.
    pub failure: Option<String>,
    pub job_hint: Option<JobId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub key: SessionKey,
    pub job: Option<BoundJob>,
    /// A submission whose job, if any, is not known yet.
    pub submission: Option<Submission>,
    /// The job a renewal replaced, until it is released.
    pub replaced: Option<JobId>,
    /// A cancel whose outcome is not recorded.
    pub cancelling: Option<JobId>,
    pub confined: bool,
    pub command: Vec<String>,
}

impl Session {
    fn new(key: SessionKey) -> Session {
        Session {
            key,
            job: None,
            submission: None,
            replaced: None,
            cancelling: None,
            confined: false,
            command: Vec::new(),
        }
    }

    pub fn job_id(&self) -> Option<JobId> {
        self.job.as_ref().map(|j| j.job_id)
    }

    /// A job may exist that the record cannot name (an in-flight or ambiguous submission).
    pub fn may_have_unknown_job(&self) -> bool {
        self.submission.is_some()
    }

    fn is_empty(&self) -> bool {
        self.job.is_none()
            && self.submission.is_none()
            && self.replaced.is_none()
            && self.cancelling.is_none()
    }
}

/// Every session that holds something (a job, a submission, a pending cancel). A session that
/// holds nothing is dropped from the map, so it grows only with what is live.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sessions {
    pub sessions: BTreeMap<SessionKey, Session>,
}

impl Sessions {
    pub fn get(&self, key: &SessionKey) -> Option<&Session> {
        self.sessions.get(key)
    }

    /// Sessions other than `except` that hold `job`, by key, sorted.
    pub fn holders(&self, job: JobId, except: Option<&SessionKey>) -> Vec<SessionKey> {
        self.sessions
            .values()
            .filter(|s| s.job_id() == Some(job) && Some(&s.key) != except)
            .map(|s| s.key.clone())
            .collect()
    }

    /// Every job some session names: held, replaced, or being cancelled.
    pub fn recorded_jobs(&self) -> impl Iterator<Item = (&SessionKey, JobId)> {
        self.sessions
            .values()
            .filter_map(|s| s.job_id().map(|j| (&s.key, j)))
    }

    fn entry(&mut self, key: &SessionKey) -> &mut Session {
        self.sessions
            .entry(key.clone())
            .or_insert_with(|| Session::new(key.clone()))
    }

    fn update(&mut self, key: &SessionKey, f: impl FnOnce(&mut Session)) {
        if let Some(s) = self.sessions.get_mut(key) {
            f(s);
            if s.is_empty() {
                self.sessions.remove(key);
            }
        }
    }

    pub fn launch_intent(&mut self, time: Micros, e: &SessionLaunchIntent) {
        let s = self.entry(&e.session);
        s.confined = e.confined;
        s.command = e.command.clone();
        s.submission = Some(Submission {
            submission_id: e.submission_id,
            job_name: e.job_name.clone(),
            replacing: e.replacing,
            since: time,
            failure: None,
            job_hint: None,
        });
    }

    pub fn job_submitted(&mut self, time: Micros, e: &SessionJobSubmitted) {
        self.update(&e.session, |s| {
            let replacing = match &s.submission {
                Some(sub) if sub.submission_id == e.submission_id => {
                    let r = sub.replacing;
                    s.submission = None;
                    r
                }
                _ => None,
            };
            bind(s, e.job_id, Origin::Submitted, time, replacing);
        });
    }

    pub fn submit_failed(&mut self, e: &SessionSubmitFailed) {
        self.update(&e.session, |s| {
            let Some(sub) = s.submission.as_mut() else {
                return;
            };
            if sub.submission_id != e.submission_id {
                return;
            }
            if e.may_exist {
                sub.failure = Some(e.reason.clone());
                sub.job_hint = e.job_hint;
            } else {
                s.submission = None;
            }
        });
    }

    pub fn node_resolved(&mut self, e: &SessionNodeResolved) {
        self.update(&e.session, |s| {
            if let Some(j) = s.job.as_mut().filter(|j| j.job_id == e.job_id) {
                j.node = Some(e.node.clone());
            }
        });
    }

    pub fn adopted(&mut self, time: Micros, e: &SessionAdopted) {
        let s = self.entry(&e.session);
        // Adoption resolves any submission that may have created a job: the name probe saw
        // every live job of this name, and this one is the session's now.
        s.submission = None;
        bind(s, e.job_id, Origin::Adopted, time, e.replacing);
    }

    /// An operator dropped the record: whatever it held is no longer tracked.
    pub fn forgotten(&mut self, e: &crate::event::overrides::SessionForgotten) {
        self.sessions.remove(&e.session);
    }

    pub fn cancel_intent(&mut self, e: &SessionCancelIntent) {
        self.update(&e.session, |s| s.cancelling = Some(e.job_id));
    }

    pub fn cancel_failed(&mut self, e: &SessionCancelFailed) {
        self.update(&e.session, |s| {
            if s.cancelling == Some(e.job_id) {
                s.cancelling = None;
            }
        });
    }

    pub fn released(&mut self, e: &SessionReleased) {
        self.update(&e.session, |s| forget(s, e.job_id));
    }

    pub fn detached(&mut self, e: &SessionDetached) {
        self.update(&e.session, |s| forget(s, e.job_id));
    }

    pub fn cleared(&mut self, e: &SessionCleared) {
        self.update(&e.session, |s| forget(s, e.job_id));
    }
}

fn bind(s: &mut Session, job_id: JobId, origin: Origin, since: Micros, replacing: Option<JobId>) {
    let previous = s.job_id();
    s.job = Some(BoundJob {
        job_id,
        node: None,
        origin,
        since,
    });
    if replacing.is_some() && replacing == previous && previous != Some(job_id) {
        s.replaced = replacing;
    }
}

/// The session no longer tracks `job_id` (released, proven gone, or another session's now): a
/// cancel of it that was still in doubt is settled with it, or the record would hold it for
/// ever with no job left to release.
fn forget(s: &mut Session, job_id: JobId) {
    if s.job_id() == Some(job_id) {
        s.job = None;
    }
    if s.cancelling == Some(job_id) {
        s.cancelling = None;
    }
    if s.replaced == Some(job_id) {
        s.replaced = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::session::*;
    use crate::event::test_job as id;

    fn key(m: &str) -> SessionKey {
        SessionKey::new(m, "t")
    }

    fn intent(m: &str, sub: u128, replacing: Option<u32>) -> SessionLaunchIntent {
        SessionLaunchIntent {
            session: key(m),
            submission_id: Uuid::from_u128(sub),
            job_name: format!("sucoder-{m}"),
            confined: true,
            command: vec![],
            replacing: replacing.map(id),
        }
    }

    fn submitted(m: &str, sub: u128, job: u32) -> SessionJobSubmitted {
        SessionJobSubmitted {
            session: key(m),
            submission_id: Uuid::from_u128(sub),
            job_id: id(job),
        }
    }

    fn adopt(m: &str, job: u32) -> SessionAdopted {
        SessionAdopted {
            session: key(m),
            job_id: id(job),
            how: "name_probe".into(),
            state: "RUNNING".into(),
            partition: "p".into(),
            account: None,
            qos: None,
            replacing: None,
        }
    }

    #[test]
    fn intent_then_id_binds_and_a_crash_leaves_a_submission() {
        let mut s = Sessions::default();
        s.launch_intent(Micros(1), &intent("a", 1, None));
        assert!(s.get(&key("a")).unwrap().may_have_unknown_job());
        assert_eq!(s.get(&key("a")).unwrap().job_id(), None);
        s.job_submitted(Micros(2), &submitted("a", 1, 7));
        let a = s.get(&key("a")).unwrap();
        assert_eq!(a.job_id(), Some(id(7)));
        assert!(!a.may_have_unknown_job());
        s.node_resolved(&SessionNodeResolved {
            session: key("a"),
            job_id: id(7),
            node: "vm".into(),
        });
        assert_eq!(
            s.get(&key("a"))
                .unwrap()
                .job
                .as_ref()
                .unwrap()
                .node
                .as_deref(),
            Some("vm")
        );
    }

    #[test]
    fn ambiguous_failure_keeps_the_submission_definite_one_drops_it() {
        let mut s = Sessions::default();
        s.launch_intent(Micros(1), &intent("a", 1, None));
        let failed = |may_exist| SessionSubmitFailed {
            session: key("a"),
            submission_id: Uuid::from_u128(1),
            may_exist,
            job_hint: None,
            reason: "x".into(),
        };
        s.submit_failed(&failed(true));
        assert!(s.get(&key("a")).unwrap().may_have_unknown_job());
        s.launch_intent(Micros(1), &intent("a", 1, None));
        s.submit_failed(&failed(false));
        assert!(s.get(&key("a")).is_none(), "nothing held, nothing kept");
    }

    /// Simulation seed 708 (with held launches): a release crashed after its scancel, then a
    /// launch proved the job gone (`SessionCleared`). The cancel still in doubt was never
    /// settled, so every later release answered success over a record that held it for ever.
    #[test]
    fn a_job_proven_gone_settles_the_cancel_still_in_doubt() {
        let mut s = Sessions::default();
        s.adopted(Micros(1), &adopt("a", 1));
        s.cancel_intent(&SessionCancelIntent {
            session: key("a"),
            job_id: id(1),
        });
        s.cleared(&SessionCleared {
            session: key("a"),
            job_id: id(1),
            reason: "gone".into(),
        });
        assert!(s.get(&key("a")).is_none(), "{:?}", s.get(&key("a")));
    }

    #[test]
    fn holders_release_detach_and_stale_events() {
        let mut s = Sessions::default();
        s.adopted(Micros(1), &adopt("a", 1));
        s.adopted(Micros(1), &adopt("b", 1));
        s.adopted(Micros(1), &adopt("c", 2));
        assert_eq!(s.holders(id(1), Some(&key("a"))), vec![key("b")]);
        assert_eq!(s.holders(id(3), None), vec![]);
        s.detached(&SessionDetached {
            session: key("a"),
            job_id: id(1),
            holders: vec!["b--t".into()],
        });
        assert!(s.get(&key("a")).is_none());
        // An event about a job the session does not hold changes nothing.
        s.cleared(&SessionCleared {
            session: key("b"),
            job_id: id(9),
            reason: "gone".into(),
        });
        assert_eq!(s.get(&key("b")).unwrap().job_id(), Some(id(1)));
        s.cancel_intent(&SessionCancelIntent {
            session: key("b"),
            job_id: id(1),
        });
        s.cancel_failed(&SessionCancelFailed {
            session: key("b"),
            job_id: id(1),
            definite: true,
            reason: "denied".into(),
        });
        let b = s.get(&key("b")).unwrap();
        assert_eq!((b.job_id(), b.cancelling), (Some(id(1)), None));
        s.released(&SessionReleased {
            session: key("b"),
            job_id: id(1),
            proof: "gone".into(),
        });
        assert!(s.get(&key("b")).is_none());
        let jobs: Vec<_> = s.recorded_jobs().map(|(k, j)| (k.clone(), j)).collect();
        assert_eq!(jobs, vec![(key("c"), id(2))]);
    }

    #[test]
    fn a_renewal_remembers_the_job_it_replaces_until_released() {
        let mut s = Sessions::default();
        s.launch_intent(Micros(1), &intent("a", 1, None));
        s.job_submitted(Micros(2), &submitted("a", 1, 111));
        s.launch_intent(Micros(3), &intent("a", 2, Some(111)));
        assert_eq!(
            s.get(&key("a")).unwrap().job_id(),
            Some(id(111)),
            "the old job stays bound while the new submission is in flight"
        );
        s.job_submitted(Micros(4), &submitted("a", 2, 222));
        let a = s.get(&key("a")).unwrap();
        assert_eq!((a.job_id(), a.replaced), (Some(id(222)), Some(id(111))));
        s.released(&SessionReleased {
            session: key("a"),
            job_id: id(111),
            proof: "gone".into(),
        });
        let a = s.get(&key("a")).unwrap();
        assert_eq!((a.job_id(), a.replaced), (Some(id(222)), None));
    }

    /// journal-format.md gives these two bodies byte for byte.
    #[test]
    fn hold_bodies_are_the_bytes_journal_format_gives() {
        let session = SessionKey::new("sample", "T");
        let decided = SessionHoldDecided {
            session: session.clone(),
            job_id: id(900),
            winner: id(899),
        };
        assert_eq!(
            crate::event::body_hex(&decided),
            "93 92 a6 73 61 6d 70 6c 65 a1 54 cd 03 84 cd 03 83"
        );
        let settled = SessionHoldSettled {
            session,
            job_id: id(900),
            action: "cancelled".into(),
            ok: true,
            reason: String::new(),
        };
        assert_eq!(
            crate::event::body_hex(&settled),
            "95 92 a6 73 61 6d 70 6c 65 a1 54 cd 03 84 a9 63 61 6e 63 65 6c 6c 65 64 c3 a0"
        );
    }
}
