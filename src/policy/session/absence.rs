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
//! 3. else (the user has no job listed at all, which a blackout also looks like) only an unheld
//!    (salloc) launch lets accounting by name vouch: nothing after salloc could stop a second
//!    job, and without this a user with no other job could never launch such a session on a
//!    healthy cluster. Accounting is no proof: it lags (a job submitted seconds ago is not in
//!    it yet) and can miss a job, and a controller broken enough to answer empty may not be
//!    feeding slurmdbd either, so this is the one place where a correlated double fault can
//!    still start a second job. Release, attach and renew never take it: they answer "unknown"
//!    (exit 4) and name what settles it (any job of the user's listed, then retry).
//!
//! Anything else is not proof, and the command says the outcome is unknown (exit 4).
//!
//! (A launch of a confined target needs none of this: its own held job, submitted before the
//! arbitration probe, is its watermark; `hold::settle` decides nothing from a listing that
//! does not show it.)

use crate::slurm::{AcctRow, Answer, JobRow, SlurmError};

/// How far back accounting is asked when it must vouch: sacct lists a job that was pending or
/// running at any time since then, so a live job of any age is among its rows.
pub const ACCOUNTING_LOOKBACK_DAYS: i64 = 2;

/// Why an empty listing stays unproven when the user's listing is empty too, for commands that
/// do not ask accounting; names what settles it.
pub fn nothing_listed(name: &str) -> String {
    format!(
        "squeue lists no job named {name} and no job of the user's at all, which is also what a \
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
    /// The user's listing lists nothing at all: accounting must vouch (or nothing can).
    AskAccounting,
}

/// Step 2: the user's listing (`squeue --me --states=all`) asked after a name listing that
/// showed nothing of `name`.
pub fn by_listing(name: &str, mine: &Answer<Vec<JobRow>>) -> Absence {
    let rows = match mine {
        Answer::Live(rows) => rows,
        Answer::Gone(_) => return Absence::AskAccounting,
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
        .find(|r| r.name == name && !r.state.is_terminal())
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
        None => Absence::AskAccounting,
    }
}

/// Step 3, for an unheld launch only: accounting by `name` (jobs pending or running since the
/// lookback), asked when the user's listing showed nothing at all.
pub fn by_accounting(name: &str, acct: &Answer<Vec<AcctRow>>) -> Absence {
    let empty = "squeue lists no job at all for the user";
    let rows: &[AcctRow] = match acct {
        Answer::Live(rows) => rows,
        Answer::Unknown(SlurmError::NotInAccounting { .. }) | Answer::Gone(_) => &[],
        Answer::Unknown(e) => {
            return Absence::Unproven(format!(
                "{empty}, which proves nothing alone (a controller in a blackout answers \
                 empty), and accounting could not vouch for it ({e})"
            ))
        }
    };
    let live = rows
        .iter()
        .filter(|r| r.id_raw.step().is_none() && r.name == name)
        .find(|r| !r.state.is_terminal());
    match live {
        Some(r) => Absence::Unproven(format!(
            "{empty}, but accounting shows job {} named {name} {}: squeue's answer is not the \
             controller's current view",
            r.id, r.state
        )),
        None => Absence::Proven(format!(
            "{empty}, and accounting (another daemon) shows no pending or running job named \
             {name} in the last {ACCOUNTING_LOOKBACK_DAYS} days"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::sacct::parse_rows;
    use crate::slurm::squeue::parse_jobs;
    use crate::slurm::SlurmCommand;

    fn row(id: u32, state: &str, name: &str) -> String {
        format!("{id}|{id}|{state}|p|a|q|u|1|1|n|9:58|10:00|N/A|N/A|None|{name}\n")
    }

    fn listing(text: &str) -> Answer<Vec<JobRow>> {
        Answer::Live(parse_jobs(text).unwrap())
    }

    fn acct(id: u32, state: &str, name: &str) -> String {
        format!(
            "{id}|{id}|{state}|0:0|0:0|2026-01-01T00:00:00|Unknown|Unknown||||1|1000M|p|a|q|u|{name}\n"
        )
    }

    #[test]
    fn an_empty_listing_of_the_user_proves_nothing_alone() {
        assert_eq!(
            by_listing("ss-m0", &Answer::Live(vec![])),
            Absence::AskAccounting
        );
        let failed = Answer::Unknown(SlurmError::Spawn {
            command: SlurmCommand::Squeue,
            message: "timeout".into(),
        });
        assert!(matches!(by_listing("ss-m0", &failed), Absence::Unproven(_)));
    }

    #[test]
    fn another_job_of_the_user_vouches_for_the_listing() {
        let text = [row(7, "RUNNING", "alloc7"), row(9, "CANCELLED", "ss-m1")].concat();
        assert!(matches!(
            by_listing("ss-m0", &listing(&text)),
            Absence::Proven(p) if p.contains("job 9")
        ));
        // This session's job that ended (a release's cancel) vouches too.
        assert!(matches!(
            by_listing("ss-m0", &listing(&row(5, "CANCELLED", "ss-m0"))),
            Absence::Proven(_)
        ));
        // A job of the name there that the name listing did not show: they disagree.
        let text = [row(7, "RUNNING", "alloc7"), row(8, "PENDING", "ss-m0")].concat();
        assert!(matches!(
            by_listing("ss-m0", &listing(&text)),
            Absence::Unproven(_)
        ));
    }

    #[test]
    fn accounting_vouches_only_without_a_live_job_of_the_name() {
        let none = Answer::Unknown(SlurmError::NotInAccounting {
            command: SlurmCommand::Sacct,
        });
        assert!(matches!(by_accounting("ss-m0", &none), Absence::Proven(_)));
        let ended = Answer::Live(parse_rows(&acct(5, "COMPLETED", "ss-m0")).unwrap());
        assert!(matches!(by_accounting("ss-m0", &ended), Absence::Proven(_)));
        let running = Answer::Live(parse_rows(&acct(6, "RUNNING", "ss-m0")).unwrap());
        assert!(matches!(
            by_accounting("ss-m0", &running),
            Absence::Unproven(_)
        ));
        let other = Answer::Live(parse_rows(&acct(6, "RUNNING", "ss-m1")).unwrap());
        assert!(matches!(by_accounting("ss-m0", &other), Absence::Proven(_)));
        let down = Answer::Unknown(SlurmError::Spawn {
            command: SlurmCommand::Sacct,
            message: "slurmdbd down".into(),
        });
        assert!(matches!(
            by_accounting("ss-m0", &down),
            Absence::Unproven(_)
        ));
    }
}
