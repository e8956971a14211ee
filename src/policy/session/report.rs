//! The `sessions` report: every job named `<prefix>…` (the config's prefix, or one it adopts
//! under) grouped by the target it belongs to, jobs no target claims, orphans (live jobs no
//! session names), stale sessions (their job is gone) and sessions whose fate the listing
//! cannot tell.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{match_target, Listing, Pins, Placed};
use crate::config::has_worker_job_shape;
use crate::event::session::SessionKey;
use crate::next::Next::SessionLaunch;
use crate::slurm::{JobId, JobRow};
use crate::state::session::{Session, Sessions};

pub const FLAG_ORPHAN: &str = "no session record";
pub const FLAG_NOT_PLAIN: &str = "not a plain job id (never adopted)";
pub const FLAG_REPLACED: &str = "replaced by a renewal; cancelled once the new job runs";
pub const FLAG_CANCELLING: &str = "a cancel was started; its outcome is not recorded";

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobEntry {
    /// The job's own numeric id (for an array element, not the array's).
    pub job_id: u32,
    /// The id as squeue prints it (`4242`, `4242_3`).
    pub id: String,
    pub mirror: Option<String>,
    pub token: String,
    pub state: String,
    pub time_left: Option<String>,
    pub node: Option<String>,
    /// The first session holding the job (`mirror--target`), if any.
    pub session: Option<String>,
    pub sessions: Vec<String>,
    pub flags: Vec<&'static str>,
    /// Slurm preempted it and its grace runs (`scontrol show job`: `{"at", "ends_at"}`); null
    /// otherwise. Filled in by `ops::session::report`, which asks.
    pub preempted: Option<crate::slurm::Preempted>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TargetGroup {
    pub target: String,
    pub signature: String,
    pub jobs: Vec<JobEntry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SessionLine {
    pub session: String,
    pub mirror: String,
    pub target: String,
    pub job_id: Option<u32>,
    pub reason: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub targets: Vec<TargetGroup>,
    pub unmatched: Vec<JobEntry>,
    pub stale: Vec<SessionLine>,
    pub unknown: Vec<SessionLine>,
    pub errors: Vec<String>,
}

pub struct Inputs<'a, T> {
    /// The prefixes of session job names (`Config::session_prefixes`): the config's own, then
    /// those it adopts under.
    pub prefixes: &'a [&'a str],
    /// Configured targets, in name order.
    pub targets: T,
    /// Mirror names to map tokens back to, in the order to try (config first).
    pub mirrors: &'a [String],
    pub sessions: &'a Sessions,
    pub listing: &'a Listing,
}

fn token_to_mirror<'m>(token: &str, mirrors: &'m [String]) -> Option<&'m String> {
    mirrors
        .iter()
        .find(|m| crate::config::sanitize_token(m) == token)
}

fn line(key: &SessionKey, job: Option<JobId>, reason: Option<String>) -> SessionLine {
    SessionLine {
        session: key.to_string(),
        mirror: key.mirror.clone(),
        target: key.target.clone(),
        job_id: job.map(JobId::get),
        reason,
    }
}

/// The rows squeue gave, and whether it gave every one cleanly (if not, a session whose job
/// is missing is not called stale); what went wrong goes to `errors`.
fn listed_rows<'l>(listing: &'l Listing, errors: &mut Vec<String>) -> (&'l [JobRow], bool) {
    match listing {
        Listing::Answered { rows, bad_lines } => {
            errors.extend(
                bad_lines
                    .iter()
                    .map(|l| format!("could not parse squeue row: {l}")),
            );
            (rows.as_slice(), bad_lines.is_empty())
        }
        Listing::Failed(e) => {
            errors.push(format!("squeue failed: {e}"));
            (&[][..], false)
        }
    }
}

/// The report's entry for one of our jobs, flagged; `None` for a worker's or a pool's job,
/// which no session ever holds.
fn job_entry(
    row: &JobRow,
    token: &str,
    sessions: &Sessions,
    mirrors: &[String],
    replaced: &BTreeSet<JobId>,
    cancelling: &BTreeSet<JobId>,
) -> Option<JobEntry> {
    let plain = row.plain_id();
    let holders: Vec<String> = plain
        .map(|j| sessions.holders(j, None))
        .unwrap_or_default()
        .iter()
        .map(SessionKey::to_string)
        .collect();
    let mirror = token_to_mirror(token, mirrors).cloned();
    if holders.is_empty() && mirror.is_none() && has_worker_job_shape(token) {
        // A pool's allocation or a `dispatch submit` job, never a session's.
        return None;
    }
    let mut flags = Vec::new();
    if plain.is_none() {
        flags.push(FLAG_NOT_PLAIN);
    }
    if holders.is_empty() {
        flags.push(FLAG_ORPHAN);
    }
    if plain.is_some_and(|j| replaced.contains(&j)) {
        flags.push(FLAG_REPLACED);
    }
    if plain.is_some_and(|j| cancelling.contains(&j)) {
        flags.push(FLAG_CANCELLING);
    }
    Some(JobEntry {
        job_id: row.job_id.get(),
        id: row.id.to_string(),
        mirror,
        token: token.to_owned(),
        state: row.state.to_string(),
        time_left: Some(row.time_left.to_string()),
        node: row.node_list.clone(),
        session: holders.first().cloned(),
        sessions: holders,
        flags,
        preempted: None,
    })
}

/// A session's submission with no recorded outcome (unknown), and its jobs the listing does
/// not show live: stale only when the listing answered cleanly, unknown otherwise.
fn unsettled(report: &mut Report, s: &Session, rows: &[JobRow], answered_cleanly: bool) {
    if let Some(sub) = &s.submission {
        let why = match &sub.failure {
            Some(f) => format!("a submission failed ambiguously ({f}); a job may exist"),
            None => "a submission was started and its outcome is not recorded".to_owned(),
        };
        report.unknown.push(line(
            &s.key,
            sub.job_hint,
            Some(format!(
                "{why}: {SessionLaunch} adopts it by name, or `scancel --me --name={}`",
                sub.job_name
            )),
        ));
    }
    for job in [s.job_id(), s.replaced].into_iter().flatten() {
        let live = rows
            .iter()
            .any(|r| r.is_job(job) && super::is_live(&r.state));
        if live {
            continue;
        }
        if answered_cleanly {
            report.stale.push(line(&s.key, Some(job), None));
        } else {
            report.unknown.push(line(
                &s.key,
                Some(job),
                Some("the job listing failed or was incomplete; not called stale".into()),
            ));
        }
    }
}

pub fn build<'t, T>(inputs: Inputs<'_, T>) -> Report
where
    T: IntoIterator<Item = (&'t str, Pins<'t>)> + Clone,
{
    let mut report = Report::default();
    for (name, pins) in inputs.targets.clone() {
        report.targets.push(TargetGroup {
            target: name.to_owned(),
            signature: pins.signature(),
            jobs: Vec::new(),
        });
    }
    let sessions = inputs.sessions;
    let (rows, answered_cleanly) = listed_rows(inputs.listing, &mut report.errors);
    let mut ours: Vec<(&JobRow, &str)> = rows
        .iter()
        .filter_map(|r| {
            let prefix = inputs.prefixes.iter().find(|p| r.name.starts_with(**p))?;
            Some((r, &r.name[prefix.len()..]))
        })
        .collect();
    ours.sort_by_key(|(r, _)| r.job_id);
    let replaced: BTreeSet<JobId> = sessions
        .sessions
        .values()
        .filter_map(|s| s.replaced)
        .collect();
    let cancelling: BTreeSet<JobId> = sessions
        .sessions
        .values()
        .filter_map(|s| s.cancelling)
        .collect();
    for (row, token) in ours {
        let Some(entry) = job_entry(row, token, sessions, inputs.mirrors, &replaced, &cancelling)
        else {
            continue;
        };
        let target = row
            .plain_id()
            .and_then(|_| match_target(&Placed::of(row), inputs.targets.clone()))
            .and_then(|t| report.targets.iter_mut().find(|g| g.target == t));
        match target {
            Some(group) => group.jobs.push(entry),
            None => report.unmatched.push(entry),
        }
    }
    for s in sessions.sessions.values() {
        unsettled(&mut report, s, rows, answered_cleanly);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::session::SessionAdopted;
    use crate::event::Micros;
    use crate::slurm::squeue::parse_jobs;

    const HTC: Pins<'static> = Pins {
        partition: Some("savio4_htc"),
        account: Some("co_carleton"),
        qos: Some("carleton_htc4_normal"),
    };

    fn row(id: &str, own: u32, name: &str, p: &str) -> String {
        format!(
            "{id}|{own}|RUNNING|{p}|co_carleton|carleton_htc4_normal|u|1|1|n1|1:00:00|2:00:00|N/A|N/A|None|{name}\n"
        )
    }

    fn adopt(sessions: &mut Sessions, mirror: &str, job: u32) {
        sessions.adopted(
            Micros(0),
            &SessionAdopted {
                session: SessionKey::new(mirror, "carleton-htc"),
                job_id: JobId::new(job).unwrap(),
                how: "name_probe".into(),
                state: "RUNNING".into(),
                partition: "savio4_htc".into(),
                account: None,
                qos: None,
                replacing: None,
            },
        );
    }

    fn report(text: &str, sessions: &Sessions, bad: Vec<String>) -> Report {
        let listing = Listing::Answered {
            rows: parse_jobs(text).unwrap(),
            bad_lines: bad,
        };
        let mirrors = vec![
            "SuCoder".to_owned(),
            "MetricsMiscellany".to_owned(),
            "exp-20261203".to_owned(),
        ];
        build(Inputs {
            prefixes: &["dispatch-", "sucoder-"],
            targets: [("carleton-htc", HTC)],
            mirrors: &mirrors,
            sessions,
            listing: &listing,
        })
    }

    /// A pool's allocation and a `dispatch submit` job under a session prefix are not
    /// sessions: not listed, not orphans; a mirror that is known keeps its job even in that
    /// shape. Session jobs are listed by token under dispatch's own prefix and sucoder's alike
    /// (the default's), and under no other.
    #[test]
    fn pool_and_submit_jobs_are_not_sessions() {
        let text = [
            row("500", 500, "dispatch-pool-ap-00c77252", "savio4_htc"),
            row("501", 501, "sucoder-w1-1234abcd", "savio4_htc"),
            row("502", 502, "sucoder-exp-20261203", "savio4_htc"),
            row("503", 503, "dispatch-SuCoder", "elsewhere"),
            row("504", 504, "other-SuCoder", "savio4_htc"),
        ]
        .concat();
        let r = report(&text, &Sessions::default(), vec![]);
        let listed: Vec<_> = r
            .targets
            .iter()
            .flat_map(|g| &g.jobs)
            .chain(&r.unmatched)
            .map(|e| (e.token.as_str(), e.mirror.as_deref()))
            .collect();
        assert_eq!(
            listed,
            [
                ("exp-20261203", Some("exp-20261203")),
                ("SuCoder", Some("SuCoder"))
            ]
        );
    }

    /// Behaviours 57, 58, 61, 62: foreign rows are ignored, orphans flagged, array elements
    /// never filed under a target, exactly one stale record.
    #[test]
    fn groups_orphans_and_stale() {
        let text = [
            row("39025067", 39025067, "sucoder-SuCoder", "savio4_htc"),
            row("39030000", 39030000, "my-unrelated-batch", "savio4_htc"),
            row("39025070_3", 39025071, "sucoder-X", "savio4_htc"),
            row("39025080", 39025080, "sucoder-Other", "elsewhere"),
        ]
        .concat();
        let mut sessions = Sessions::default();
        adopt(&mut sessions, "SuCoder", 39025067);
        adopt(&mut sessions, "MetricsMiscellany", 38999103);
        let r = report(&text, &sessions, vec!["garbage".into()]);
        let group = &r.targets[0];
        assert_eq!(
            group.signature,
            "savio4_htc / co_carleton / carleton_htc4_normal"
        );
        assert_eq!(group.jobs.len(), 1);
        let j = &group.jobs[0];
        assert_eq!(j.mirror.as_deref(), Some("SuCoder"));
        assert_eq!(j.session.as_deref(), Some("SuCoder--carleton-htc"));
        assert!(j.flags.is_empty());
        let unmatched: Vec<_> = r
            .unmatched
            .iter()
            .map(|e| (e.id.as_str(), e.flags.clone()))
            .collect();
        assert_eq!(
            unmatched,
            [
                ("39025070_3", vec![FLAG_NOT_PLAIN, FLAG_ORPHAN]),
                ("39025080", vec![FLAG_ORPHAN])
            ]
        );
        assert_eq!(
            r.unmatched[1].mirror, None,
            "an unconfigured token shows as the token"
        );
        assert_eq!(r.unmatched[1].token, "Other");
        assert_eq!(r.errors, ["could not parse squeue row: garbage"]);
        // A bad line might have been the missing job: nothing is called stale.
        assert!(r.stale.is_empty());
        assert_eq!(r.unknown.len(), 1);
        let clean = report(&text, &sessions, vec![]);
        assert_eq!(clean.stale.len(), 1);
        assert_eq!(clean.stale[0].session, "MetricsMiscellany--carleton-htc");
        assert_eq!(clean.stale[0].job_id, Some(38999103));
        assert!(clean.unknown.is_empty() && clean.errors.is_empty());
    }

    /// Behaviour 66 [recommend]: a failed query makes records unknown, never stale.
    #[test]
    fn failed_listing_is_unknown_never_stale() {
        let mut sessions = Sessions::default();
        adopt(&mut sessions, "SuCoder", 39025067);
        let mirrors = vec![];
        let r = build(Inputs {
            prefixes: &["sucoder-"],
            targets: [("carleton-htc", HTC)],
            mirrors: &mirrors,
            sessions: &sessions,
            listing: &Listing::Failed("squeue: exit 1: Unable to contact slurm controller".into()),
        });
        assert!(r.stale.is_empty());
        assert_eq!(r.unknown.len(), 1);
        assert_eq!(r.unknown[0].job_id, Some(39025067));
        assert!(r.errors[0].contains("squeue failed"), "{:?}", r.errors);
    }
}
