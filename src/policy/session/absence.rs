//! When a name listing that shows no job of a session proves that none runs (issue 10 item 7:
//! an empty listing alone is not proof of absence). A controller in a blackout answers every
//! `squeue` with exit 0 and nothing, so `squeue --me --name=N` printing nothing looks exactly
//! like "no job named N". The listing is believed only when something shows that it is the
//! controller's current view:
//!
//! 1. it lists a job of the name (any state, any target): a parsed row is proof that the
//!    controller answered from its job table (nothing to corroborate);
//! 2. else the user's whole listing (`squeue --me --states=all`), asked right after, lists some
//!    job and none of this name: a row there is a job that exists at that moment, the same
//!    answer would list a live job of this name, and it does not. This is the watermark of
//!    `policy::reconcile::watermark` reduced to what a session command has: any job of the
//!    user's (another session, a pool allocation, a `dispatch submit` job, or this session's
//!    job that ended within MinJobAge, which every release that cancels leaves behind);
//! 3. else (the user has no job listed at all, which a blackout also looks like): unknown.
//!    Release, attach and renew answer exit 4 and name what settles it (any job of the user's
//!    listed, then retry). Accounting by name used to vouch here for an unheld (salloc)
//!    launch; it is no proof (it lags, can miss a job, and a controller broken enough to answer
//!    empty may not feed slurmdbd either), and no launch is unheld any more.
//!
//! Anything else is not proof, and the command says the outcome is unknown (exit 4).
//!
//! (A launch needs none of this: its own held job, sbatch or salloc, submitted before the
//! arbitration probe, is its watermark; `hold::settle` decides nothing from a listing that
//! does not show it.)

use crate::slurm::{Answer, JobRow};

/// Why an empty listing stays unproven when the user's listing is empty too; names what
/// settles it.
pub fn nothing_listed(name: &str) -> String {
    format!(
        "squeue lists no job named {name} and no job of the user's at all, not even the held \
         watermark job dispatch made (and cancelled) to check it, which is also what a \
         controller in a blackout answers, so it proves nothing. If `squeue --me` really shows \
         nothing, no job of this session runs; to let dispatch see that, have any job of yours \
         listed (e.g. `sbatch --hold --wrap=true`, `scancel` it afterwards) and retry"
    )
}

/// What a name listing without a job of the name proves, from the user's whole listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Absence {
    /// No job of the name is live; why that is known.
    Proven(String),
    /// Not proven; why, for the message.
    Unproven(String),
}

/// Step 2: the user's listing (`squeue --me --states=all`) asked after a name listing that
/// showed nothing of any of `names` (a session's own job name and those it adopts under).
pub fn by_listing(names: &[&str], mine: &Answer<Vec<JobRow>>) -> Absence {
    let name = super::probe::spoken(names);
    let name = name.as_str();
    let rows = match mine {
        Answer::Live(rows) => rows,
        Answer::Gone(_) => return Absence::Unproven(nothing_listed(name)),
        Answer::Unknown(e) => {
            return Absence::Unproven(format!(
                "squeue listed no job named {name}, which proves nothing alone (a controller in \
                 a blackout answers empty), and listing the user's jobs to check it failed ({e})"
            ))
        }
    };
    // `--states=all` lists jobs that ended within MinJobAge too, which the name listing
    // (live jobs only) leaves out: only a live one of the name contradicts it.
    if let Some(row) = rows
        .iter()
        .find(|r| names.contains(&r.name.as_str()) && !r.state.is_terminal())
    {
        return Absence::Unproven(format!(
            "squeue listed no job named {name}, but the user's listing right after shows job {} \
             of that name ({}): the two answers disagree",
            row.id, row.state
        ));
    }
    match rows.iter().max_by_key(|r| r.job_id.get()) {
        Some(newest) => Absence::Proven(format!(
            "squeue lists no job named {name}, and the user's listing shows job {} beside none \
             of that name (the controller's current view, not an empty answer)",
            newest.id
        )),
        None => Absence::Unproven(nothing_listed(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::{SlurmCommand, SlurmError};

    fn listing(rows: &[(u32, &str, &str)]) -> Answer<Vec<JobRow>> {
        Answer::Live(crate::policy::fixtures::job_rows(rows))
    }

    #[test]
    fn an_empty_listing_of_the_user_proves_nothing_alone() {
        assert_eq!(
            by_listing(&["ss-m0"], &Answer::Live(vec![])),
            Absence::Unproven(nothing_listed("ss-m0"))
        );
        let failed = Answer::Unknown(SlurmError::Spawn {
            command: SlurmCommand::Squeue,
            message: "timeout".into(),
        });
        assert!(matches!(
            by_listing(&["ss-m0"], &failed),
            Absence::Unproven(_)
        ));
    }

    #[test]
    fn another_job_of_the_user_vouches_for_the_listing() {
        let jobs = [(7, "RUNNING", "alloc7"), (9, "CANCELLED", "ss-m1")];
        assert!(matches!(
            by_listing(&["ss-m0"], &listing(&jobs)),
            Absence::Proven(p) if p.contains("job 9")
        ));
        // This session's job that ended (a release's cancel) vouches too.
        assert!(matches!(
            by_listing(&["ss-m0"], &listing(&[(5, "CANCELLED", "ss-m0")])),
            Absence::Proven(_)
        ));
        // A live job of a name the session adopts under, there and not in the name listing:
        // they disagree as well.
        let jobs = [(7, "RUNNING", "alloc7"), (8, "RUNNING", "old-m0")];
        assert!(matches!(
            by_listing(&["ss-m0", "old-m0"], &listing(&jobs)),
            Absence::Unproven(u) if u.contains("job 8")
        ));
        assert!(matches!(
            by_listing(&["ss-m0"], &listing(&jobs)),
            Absence::Proven(_)
        ));
        // A job of the name there that the name listing did not show: they disagree.
        let jobs = [(7, "RUNNING", "alloc7"), (8, "PENDING", "ss-m0")];
        assert!(matches!(
            by_listing(&["ss-m0"], &listing(&jobs)),
            Absence::Unproven(_)
        ));
    }
}
