//! `--at SEQ|TIME` on `pool status`, `sessions`, `trials` and `inspect`: the argument, the
//! `"at"` key every such output gains, and the offline `sessions` view (docs/cli.md, "Replay").

use serde::Serialize;

use super::exit::{self, Failure};
use super::output::emit;
use crate::state::replay::{At, Cut, Point};
use crate::state::session::Session;

/// clap's value parser for `--at`: local times are read in this host's time zone.
pub fn at_arg(text: &str) -> Result<Cut, String> {
    Cut::parse(text, crate::ops::context::local_to_micros)
}

/// clap's value parser for `--since`/`--until`: a time as `--at` takes it, not a seq.
pub fn time_arg(text: &str) -> Result<crate::event::Micros, String> {
    match at_arg(text)? {
        Cut::Time(t) => Ok(t),
        Cut::Seq(_) => Err(format!(
            "{text} is a seq; --since and --until take a time (RFC 3339, or YYYY-MM-DD HH:MM[:SS] \
             local); --from and --to take seqs"
        )),
    }
}

/// The state after `cut`, offline: the state directory is checked, the journal read alone.
pub fn state_at(checked: &crate::statedir::Checked, cut: Cut) -> Result<At, Failure> {
    Ok(crate::ops::replay::state_at(&checked.journal_dir(), cut)?)
}

/// A report with the point it was replayed to, when it was.
#[derive(Serialize)]
pub struct WithAt<'a, T: Serialize> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<Point>,
    #[serde(flatten)]
    pub report: &'a T,
}

/// The first line of a human `--at` output.
pub fn heading(p: &Point) -> String {
    format!(
        "as recorded after event {} ({}), replayed offline",
        p.seq, p.time
    )
}

/// `--json`: `report` with the point it was replayed to, when it was; else that point's
/// [`heading`], when it was, then what `human` prints.
pub fn emit_at<T: Serialize>(
    at: Option<Point>,
    report: &T,
    json: bool,
    human: impl FnOnce(),
) -> Result<(), Failure> {
    let heading = at.as_ref().map(heading);
    emit(json, &WithAt { at, report }, || {
        if let Some(h) = heading {
            crate::outln!("{h}");
        }
        human();
    })
}

/// One session record as the journal had it (no Slurm listing: that is today's, not then's).
#[derive(Debug, Serialize)]
pub struct SessionRecord {
    pub session: String,
    pub mirror: String,
    pub target: String,
    pub job_id: Option<u32>,
    pub node: Option<String>,
    /// `submitted` or `adopted`, with the job.
    #[serde(serialize_with = "crate::state::word_opt")]
    pub origin: Option<crate::state::session::Origin>,
    pub since: Option<String>,
    /// A submission whose job was not known yet, if any.
    pub submission: Option<SubmissionRecord>,
    pub replaced: Option<u32>,
    pub cancelling: Option<u32>,
}

#[derive(Debug, Serialize)]
pub struct SubmissionRecord {
    pub submission_id: String,
    pub job_name: String,
    pub since: String,
    pub failure: Option<String>,
}

impl SessionRecord {
    pub fn of(s: &Session) -> SessionRecord {
        SessionRecord {
            session: s.key.to_string(),
            mirror: s.key.mirror.clone(),
            target: s.key.target.clone(),
            job_id: s.job.as_ref().map(|j| j.job_id.get()),
            node: s.job.as_ref().and_then(|j| j.node.clone()),
            origin: s.job.as_ref().map(|j| j.origin),
            since: s.job.as_ref().map(|j| j.since.to_rfc3339()),
            submission: s.submission.as_ref().map(|u| SubmissionRecord {
                submission_id: u.submission_id.to_string(),
                job_name: u.job_name.clone(),
                since: u.since.to_rfc3339(),
                failure: u.failure.clone(),
            }),
            replaced: s.replaced.map(|j| j.get()),
            cancelling: s.cancelling.map(|j| j.get()),
        }
    }
}

/// `dispatch sessions --at`: the session records after the cut.
pub fn run_sessions(
    checked: &crate::statedir::Checked,
    cut: Cut,
    json: bool,
) -> Result<u8, Failure> {
    let at = state_at(checked, cut)?;
    let sessions: Vec<SessionRecord> = at
        .state
        .sessions
        .sessions
        .values()
        .map(SessionRecord::of)
        .collect();
    // The point through a JSON value, as this output always had it: its keys sorted.
    let doc = serde_json::json!({ "at": at.point(), "sessions": sessions });
    emit(json, &doc, || {
        crate::outln!("{}", heading(&at.point()));
        if sessions.is_empty() {
            crate::outln!("no session held anything");
        }
        for s in &sessions {
            let job = s.job_id.map_or("-".to_owned(), |j| j.to_string());
            let mut line = format!(
                "  {} job {:<10} {:<10} {}",
                // A mirror or target label may hold wide characters (path names cannot).
                super::table::pad(&s.session, 30),
                job,
                s.origin.map_or("-", |o| crate::state::Word::as_str(o)),
                s.node.as_deref().unwrap_or("-")
            );
            if let Some(u) = &s.submission {
                line.push_str(&format!(
                    "  submission {} {}",
                    u.job_name,
                    u.failure.as_deref().unwrap_or("in flight")
                ));
            }
            crate::outln!("{line}");
        }
    })?;
    Ok(exit::OK)
}
