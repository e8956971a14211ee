//! What a name probe (`squeue --me --name=N`) says, before any adoption: the rows of that
//! name, the lines no parser understood, and the note a passed-over job earns in a report.

use super::{Listing, Passed, Seen};
use crate::event::session::SessionKey;
use crate::next::Next::Sessions;
use crate::slurm::JobRow;

/// The rows a listing by name holds of that name, and the lines it printed that no parser
/// understood (each is a job of this name dispatch cannot read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    pub rows: Vec<JobRow>,
    pub bad_lines: Vec<String>,
}

/// The listing's rows of any of `names` (a session's own name, and those it adopts under:
/// `Config::session_job_names`); `Err` is why the listing gave nothing usable. squeue --name
/// matches exactly, but a listing is only trusted as far as it goes: rows of another name are
/// dropped.
pub fn rows_named(listing: Listing, names: &[&str]) -> Result<Named, String> {
    match listing {
        Listing::Answered { rows, bad_lines } => Ok(Named {
            rows: rows
                .into_iter()
                .filter(|row| names.contains(&row.name.as_str()))
                .collect(),
            bad_lines,
        }),
        Listing::Failed(e) => Err(e),
    }
}

/// A session's job names for a message: `dispatch-m`, or `dispatch-m or sucoder-m`.
pub fn spoken(names: &[&str]) -> String {
    names.join(" or ")
}

/// Why a listing with `bad_lines` is a failed probe.
pub fn unparsed(bad_lines: &[String]) -> String {
    format!("squeue printed lines dispatch could not parse: {bad_lines:?}")
}

/// The note a job the name probe passed over earns, for session `key` (job name
/// `job_name`); `None` for one a report need not mention: an excluded or ended job, an ending
/// one (the launch waits for it and says so itself) and a younger held one (a racing
/// launch's, which yields it itself).
pub fn passed_note(seen: &Seen, key: &SessionKey, job_name: &str) -> Option<String> {
    let placed = [
        Some(seen.partition.as_str()),
        seen.account.as_deref(),
        seen.qos.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join("/");
    match seen.passed.as_ref()? {
        Passed::OtherTarget(other) => Some(format!(
            "mirror {:?} also has Slurm job {} ({}) on {placed} -- a different target ({}); \
             it does not block a job for {}",
            key.mirror,
            seen.id,
            seen.state,
            other.as_deref().unwrap_or("no configured target claims it"),
            key.target
        )),
        Passed::NotPlain => Some(format!(
            "Slurm job {} ({}) is named {job_name} but is not a plain job id; never adopted",
            seen.id, seen.state
        )),
        Passed::OlderMatch => Some(format!(
            "more than one live job matches {key}: {} ({}) is not adopted; \
             {Sessions} lists it, `scancel {}` removes it",
            seen.id, seen.state, seen.id
        )),
        Passed::Excluded | Passed::Ended | Passed::Ending | Passed::HeldYounger => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::fixtures::job_rows;
    use crate::policy::session::Listed;
    use crate::slurm::JobState;

    #[test]
    fn only_rows_of_the_name_count_and_bad_lines_are_kept() {
        let listing = Listing::Answered {
            rows: job_rows(&[(5, "RUNNING", "sucoder-x"), (6, "RUNNING", "sucoder-xy")]),
            bad_lines: vec!["garbage".into()],
        };
        let got = rows_named(listing.clone(), &["sucoder-x"]).unwrap();
        assert_eq!(got.rows.len(), 1);
        assert_eq!(got.rows[0].name, "sucoder-x");
        assert_eq!(got.bad_lines, ["garbage"]);
        // A session's own name and a name it adopts under, from one listing.
        let both = rows_named(listing, &["dispatch-x", "sucoder-x"]).unwrap();
        assert_eq!(both.rows.len(), 1);
        assert_eq!(both.rows[0].name, "sucoder-x");
        assert_eq!(
            spoken(&["dispatch-x", "sucoder-x"]),
            "dispatch-x or sucoder-x"
        );
        assert_eq!(
            rows_named(Listing::Failed("timeout".into()), &["sucoder-x"]),
            Err("timeout".into())
        );
        assert_eq!(
            unparsed(&["garbage".into()]),
            r#"squeue printed lines dispatch could not parse: ["garbage"]"#
        );
    }

    fn seen(passed: Option<Passed>) -> Seen {
        Seen {
            id: Listed::NotPlain("4242_3".into()),
            state: JobState::Running,
            partition: "savio3".into(),
            account: Some("fc_jevons".into()),
            qos: None,
            node: None,
            held: false,
            preempt_hint: false,
            passed,
        }
    }

    #[test]
    fn notes_name_the_job_and_why_it_was_passed_over() {
        let key = SessionKey::new("m", "T");
        let note = |p| passed_note(&seen(p), &key, "sucoder-m");
        assert_eq!(
            note(Some(Passed::OtherTarget(Some("other".into())))).unwrap(),
            "mirror \"m\" also has Slurm job 4242_3 (RUNNING) on savio3/fc_jevons -- a \
             different target (other); it does not block a job for T"
        );
        assert!(note(Some(Passed::OtherTarget(None)))
            .unwrap()
            .contains("(no configured target claims it)"));
        assert_eq!(
            note(Some(Passed::NotPlain)).unwrap(),
            "Slurm job 4242_3 (RUNNING) is named sucoder-m but is not a plain job id; never \
             adopted"
        );
        assert_eq!(
            note(Some(Passed::OlderMatch)).unwrap(),
            "more than one live job matches m--T: 4242_3 (RUNNING) is not adopted; `dispatch \
             sessions` lists it, `scancel 4242_3` removes it"
        );
        for quiet in [
            None,
            Some(Passed::Excluded),
            Some(Passed::Ended),
            Some(Passed::Ending),
            Some(Passed::HeldYounger),
        ] {
            assert_eq!(note(quiet.clone()), None, "{quiet:?}");
        }
    }
}
