//! Pure decisions for sessions: which target a job belongs to, what a probe proved, which
//! job (if any) a launch adopts, and what renew does next. No I/O, no clock.

pub mod absence;
pub mod ended;
pub mod probe;
pub mod recorded;
pub mod refusal;
pub mod release;
pub mod renew;
pub mod report;

use crate::slurm::squeue::parse_jobs;
use crate::slurm::{Answer, JobId, JobRow, JobState, Lookup, SlurmError};

/// Bad squeue lines kept for a report; the rest are counted.
pub const BAD_LINES_KEPT: usize = 20;

/// What a target pins. `None` pins nothing (the field neither counts nor disqualifies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pins<'a> {
    pub partition: Option<&'a str>,
    pub account: Option<&'a str>,
    pub qos: Option<&'a str>,
}

impl<'a> Pins<'a> {
    pub fn of(t: &'a crate::config::Target) -> Pins<'a> {
        let set = |s: &'a str| (!s.is_empty()).then_some(s);
        Pins {
            partition: set(&t.partition),
            account: set(&t.account),
            qos: t.qos.as_deref().and_then(set),
        }
    }

    /// `partition / account / qos`, the parts that are set.
    pub fn signature(&self) -> String {
        let parts: Vec<&str> = [self.partition, self.account, self.qos]
            .into_iter()
            .flatten()
            .collect();
        if parts.is_empty() {
            "(scheduler defaults)".to_owned()
        } else {
            parts.join(" / ")
        }
    }
}

/// Where a job runs, as squeue shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed<'a> {
    pub partition: &'a str,
    pub account: Option<&'a str>,
    pub qos: Option<&'a str>,
}

impl<'a> Placed<'a> {
    pub fn of(row: &'a JobRow) -> Placed<'a> {
        Placed {
            partition: &row.partition,
            account: row.account.as_deref(),
            qos: row.qos.as_deref(),
        }
    }
}

/// How many of the target's pins the job matches; `None` if a pin disagrees. Slurm stores
/// account and QOS names in lower case, so those compare without case (the notes' hazard 9:
/// a mixed-case config would otherwise never match); partitions compare exactly.
fn score(job: &Placed, pins: &Pins) -> Option<u32> {
    let mut score = 0;
    if let Some(p) = pins.partition {
        if job.partition != p {
            return None;
        }
        score += 1;
    }
    for (pin, got) in [(pins.account, job.account), (pins.qos, job.qos)] {
        if let Some(pin) = pin {
            if !got.is_some_and(|g| g.eq_ignore_ascii_case(pin)) {
                return None;
            }
            score += 1;
        }
    }
    Some(score)
}

/// The target a job belongs to: the one whose pins all match and that pins the most. A tie
/// at the top, or a best score of 0 (a target pinning nothing), gives `None`: a job shown
/// under no target beats a job filed under the wrong one.
pub fn match_target<'t>(
    job: &Placed,
    targets: impl IntoIterator<Item = (&'t str, Pins<'t>)>,
) -> Option<&'t str> {
    let mut best: Option<(u32, &'t str)> = None;
    let mut tie = false;
    for (name, pins) in targets {
        let Some(s) = score(job, &pins).filter(|s| *s > 0) else {
            continue;
        };
        match best {
            Some((b, _)) if s < b => {}
            Some((b, _)) if s == b => tie = true,
            _ => {
                best = Some((s, name));
                tie = false;
            }
        }
    }
    if tie {
        None
    } else {
        best.map(|(_, n)| n)
    }
}

/// A listing of jobs (`squeue --me [--name=N]`), with the lines no parser understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listing {
    Answered {
        rows: Vec<JobRow>,
        bad_lines: Vec<String>,
    },
    Failed(String),
}

/// The strict parser refuses a whole answer for one bad line, which is right for a by-id
/// query. A listing by name or of all our jobs keeps the rows it understands (a parsed row is
/// proof that job exists) and reports the other lines, which callers must treat as a listing
/// that may be missing jobs.
pub fn listing_of(answer: Answer<Vec<JobRow>>) -> Listing {
    match answer {
        Answer::Live(rows) => Listing::Answered {
            rows,
            bad_lines: Vec::new(),
        },
        // Only a query of one id can say "Invalid job id": no job of that listing exists.
        Answer::Gone(_) => Listing::Answered {
            rows: Vec::new(),
            bad_lines: Vec::new(),
        },
        Answer::Unknown(SlurmError::Unparsable { stdout, .. }) => {
            let mut rows = Vec::new();
            let mut bad_lines = Vec::new();
            let mut dropped = 0usize;
            for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
                match parse_jobs(line) {
                    Ok(r) => rows.extend(r),
                    Err(_) if bad_lines.len() < BAD_LINES_KEPT => bad_lines.push(line.to_owned()),
                    Err(_) => dropped += 1,
                }
            }
            if dropped > 0 {
                bad_lines.push(format!("… and {dropped} more lines"));
            }
            Listing::Answered { rows, bad_lines }
        }
        Answer::Unknown(e) => Listing::Failed(e.to_string()),
    }
}

/// Is a job in this state still there? Anything not proven over counts as live: the state
/// words Slurm prints while a job holds (or may again hold) resources, and words we do not
/// know. COMPLETING is live too: its processes may still run.
pub fn is_live(state: &JobState) -> bool {
    !state.is_terminal()
}

/// Live, but on its way out: a COMPLETING job still holds its node (processes may run) and is
/// gone seconds later. Never reused or adopted; a launch waits for it to end, then submits.
pub fn is_ending(state: &JobState) -> bool {
    *state == JobState::Completing
}

/// What a probe of one recorded job proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    Live {
        state: JobState,
        /// Only for RUNNING jobs: a state word is never taken for a node.
        node: Option<String>,
    },
    /// Proven gone: a terminal state (`Some`), or "Invalid job id" for it (`None`). An answer
    /// without the job (exit 0, empty: a lying or misconfigured controller, the wrong cluster)
    /// is not proof: it is `Unknown`.
    Gone { state: Option<JobState> },
    /// Slurm did not answer usably; never read as gone.
    Unknown(String),
}

pub fn probe_of(answer: &Answer<Vec<JobRow>>, job: JobId) -> Probe {
    match answer.job(job) {
        Lookup::Listed(row) if is_live(&row.state) => Probe::Live {
            node: running_node(row),
            state: row.state.clone(),
        },
        Lookup::Listed(row) => Probe::Gone {
            state: Some(row.state.clone()),
        },
        Lookup::Gone(_) => Probe::Gone { state: None },
        Lookup::NotListed => Probe::Unknown(format!(
            "squeue answered without job {job}: an empty answer is not proof that it is gone \
             (check that this is the right cluster: `squeue --states=all --jobs={job}`)"
        )),
        Lookup::Unknown(e) => Probe::Unknown(e.to_string()),
    }
}

/// The node of a RUNNING job, if squeue printed one.
pub fn running_node(row: &JobRow) -> Option<String> {
    (row.state == JobState::Running)
        .then(|| row.node_list.clone())
        .flatten()
        .filter(|n| !n.trim().is_empty())
}

/// Why a name-probe row was not adopted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Passed {
    /// An array element, het component or anything but a plain job id.
    NotPlain,
    /// The job this launch already proved gone, or the one it replaces.
    Excluded,
    Ended,
    /// This target's job, COMPLETING: it is ending, so a launch waits for it to be gone.
    Ending,
    /// Another target's job (or nobody's: `None` when no target or several claim it).
    OtherTarget(Option<String>),
    /// Matches this target, but a newer job was adopted.
    OlderMatch,
    /// This target's job, held (`sbatch --hold`: a racing launch has not decided yet) and
    /// younger than another live job of this target: the racer yields it, so never adopted.
    HeldYounger,
}

/// A name-probe row's id, decided once: a plain job, the only kind ever adopted, carries its
/// `JobId`; anything else (`4242_3`, `4242+1`) is kept as squeue printed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listed {
    Plain(JobId),
    NotPlain(String),
}

impl Listed {
    pub fn plain(&self) -> Option<JobId> {
        match self {
            Listed::Plain(job) => Some(*job),
            Listed::NotPlain(_) => None,
        }
    }
}

/// As squeue printed it.
impl std::fmt::Display for Listed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listed::Plain(job) => write!(f, "{job}"),
            Listed::NotPlain(id) => f.write_str(id),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub id: Listed,
    pub state: JobState,
    pub partition: String,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// The node of a RUNNING job.
    pub node: Option<String>,
    /// PENDING because a user held it (`--hold`): it runs only once released.
    pub held: bool,
    /// RUNNING with its end pulled forward (`JobRow::end_pulled_forward`): `scontrol show
    /// job` may show it in a preemption's grace. A hint, never a proof.
    pub preempt_hint: bool,
    pub passed: Option<Passed>,
}

/// What the name probe's rows mean for a launch on `this` target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Adoption {
    /// Index into `seen` of the job to adopt.
    pub adopt: Option<usize>,
    /// Every row, newest first, with why it was passed over.
    pub seen: Vec<Seen>,
}

impl Adoption {
    /// The job to adopt, by its `JobId`: only a plain row is ever adopted.
    pub fn adopted(&self) -> Option<(JobId, &Seen)> {
        let seen = &self.seen[self.adopt?];
        Some((seen.id.plain()?, seen))
    }

    pub fn passed(&self) -> impl Iterator<Item = &Seen> {
        self.seen.iter().filter(|s| s.passed.is_some())
    }

    /// Every live plain job of this target that is not excluded: the adopted one, older
    /// matches and ending ones. What a release must leave none of.
    pub fn this_targets(&self) -> impl Iterator<Item = (JobId, &Seen)> {
        self.seen.iter().filter_map(|s| {
            matches!(
                s.passed,
                None | Some(Passed::OlderMatch) | Some(Passed::Ending) | Some(Passed::HeldYounger)
            )
            .then_some((s.id.plain()?, s))
        })
    }

    /// This target's jobs that are ending: a new job must wait until they are gone.
    pub fn ending(&self) -> impl Iterator<Item = JobId> + '_ {
        self.seen
            .iter()
            .filter(|s| s.passed == Some(Passed::Ending))
            .filter_map(|s| s.id.plain())
    }
}

/// Choose the job to adopt among the name probe's rows: the newest live plain job that
/// belongs to `this` target and is not excluded.
pub fn plan_adoption<'t>(
    rows: &[JobRow],
    this: &str,
    targets: impl IntoIterator<Item = (&'t str, Pins<'t>)> + Clone,
    exclude: &[JobId],
) -> Adoption {
    let oldest = oldest_contender(rows, this, targets.clone(), exclude);
    let mut sorted: Vec<&JobRow> = rows.iter().collect();
    // Newest first; rows without a plain id sort by their own job id, they are never adopted.
    sorted.sort_by_key(|r| std::cmp::Reverse(r.plain_id().unwrap_or(r.job_id)));
    let mut plan = Adoption::default();
    for row in sorted {
        let placed = Placed::of(row);
        let id = match row.plain_id() {
            Some(job) => Listed::Plain(job),
            None => Listed::NotPlain(row.id.to_string()),
        };
        let passed = match id.plain() {
            None => Some(Passed::NotPlain),
            Some(j) if exclude.contains(&j) => Some(Passed::Excluded),
            Some(_) if !is_live(&row.state) => Some(Passed::Ended),
            Some(j) => match match_target(&placed, targets.clone()) {
                Some(t) if t == this => {
                    if is_ending(&row.state) {
                        Some(Passed::Ending)
                    } else if is_held(row) && oldest.is_some_and(|o| o < j) {
                        Some(Passed::HeldYounger)
                    } else if plan.adopt.is_some() {
                        Some(Passed::OlderMatch)
                    } else {
                        None
                    }
                }
                other => Some(Passed::OtherTarget(other.map(str::to_owned))),
            },
        };
        if passed.is_none() {
            plan.adopt = Some(plan.seen.len());
        }
        plan.seen.push(Seen {
            id,
            state: row.state.clone(),
            partition: row.partition.clone(),
            account: row.account.clone(),
            qos: row.qos.clone(),
            node: running_node(row),
            held: is_held(row),
            preempt_hint: row.end_pulled_forward(),
            passed,
        });
    }
    plan
}

/// PENDING because a user held it: `squeue` gives the reason `JobHeldUser`.
pub fn is_held(row: &JobRow) -> bool {
    row.state == JobState::Pending && row.reason.starts_with("JobHeld")
}

/// The oldest live, not ending, plain job of `this` target among the rows, `exclude` left
/// out: the one every racing launch of this target keeps (Slurm's job ids grow with
/// submission, so a launch that sees its own job as the oldest knows any later one yields).
pub fn oldest_contender<'t>(
    rows: &[JobRow],
    this: &str,
    targets: impl IntoIterator<Item = (&'t str, Pins<'t>)> + Clone,
    exclude: &[JobId],
) -> Option<JobId> {
    rows.iter()
        .filter(|r| is_live(&r.state) && !is_ending(&r.state))
        .filter_map(|r| r.plain_id().map(|j| (j, r)))
        .filter(|(j, _)| !exclude.contains(j))
        .filter(|(_, r)| match_target(&Placed::of(r), targets.clone()) == Some(this))
        .map(|(j, _)| j)
        .min()
}

/// What a launch does with the job it submitted held, once the name probe has listed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arbitration {
    /// Ours is the oldest contender: release it.
    Release,
    /// An older contender exists: cancel ours (it never ran) and adopt that one.
    Yield(JobId),
    /// The probe does not list ours (yet): it cannot decide.
    NotListed,
}

pub fn arbitrate<'t>(
    rows: &[JobRow],
    this: &str,
    targets: impl IntoIterator<Item = (&'t str, Pins<'t>)> + Clone,
    exclude: &[JobId],
    ours: JobId,
) -> Arbitration {
    let listed = rows
        .iter()
        .any(|r| r.plain_id() == Some(ours) && is_live(&r.state));
    match oldest_contender(rows, this, targets, exclude) {
        _ if !listed => Arbitration::NotListed,
        Some(oldest) if oldest != ours => Arbitration::Yield(oldest),
        _ => Arbitration::Release,
    }
}

/// How much longer a launch must wait for a submission whose intent has no outcome (its
/// launcher died with sbatch/salloc in flight; the token lock says it is not running any
/// more) before a name probe that finds nothing proves it created no job: the longest the
/// submit call could have run, plus the settle margin, from the intent. `None`: no wait.
pub fn in_flight_wait(
    intent_at: crate::event::Micros,
    now: crate::event::Micros,
    bound: std::time::Duration,
) -> Option<std::time::Duration> {
    let age_us = now.0.saturating_sub(intent_at.0).max(0) as u128;
    let left = bound.as_micros().saturating_sub(age_us);
    (left > 0).then(|| std::time::Duration::from_micros(left.min(u64::MAX as u128) as u64))
}

/// One poll of a freshly submitted job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Poll {
    Running(String),
    /// Live but not (yet) running on a known node: wait.
    Waiting(JobState),
    Ended(Option<JobState>),
    Unknown(String),
}

pub fn poll_of(answer: &Answer<Vec<JobRow>>, job: JobId) -> Poll {
    match probe_of(answer, job) {
        Probe::Live {
            node: Some(node), ..
        } => Poll::Running(node),
        Probe::Live { state, .. } => Poll::Waiting(state),
        Probe::Gone { state } => Poll::Ended(state),
        Probe::Unknown(e) => Poll::Unknown(e),
    }
}

/// Why Slurm keeps job `job` waiting, as the answer's row says (squeue `%r`: `Priority`,
/// `Resources`, `QOSMaxJobsPerUserLimit`, …); `None` without a row or with no reason (`None`).
pub fn waiting_reason(answer: &Answer<Vec<JobRow>>, job: JobId) -> Option<String> {
    let row = answer.job(job).live()?;
    let reason = row.reason.trim();
    (!reason.is_empty() && reason != "None").then(|| reason.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::squeue::parse_jobs;

    #[test]
    fn the_waiting_reason_is_the_rows_unless_it_has_none() {
        let job = JobId::new(4242).unwrap();
        let answer = |reason: &str| {
            Answer::Live(
                parse_jobs(&format!(
                    "4242|4242|PENDING|debug|dev|normal|u|1|1||1:00:00|1:00:00|N/A|N/A|{reason}|n\n"
                ))
                .unwrap(),
            )
        };
        assert_eq!(
            waiting_reason(&answer("QOSMaxJobsPerUserLimit"), job).as_deref(),
            Some("QOSMaxJobsPerUserLimit")
        );
        assert_eq!(waiting_reason(&answer("None"), job), None);
        assert_eq!(waiting_reason(&Answer::Live(Vec::new()), job), None);
    }

    fn pins<'a>(p: Option<&'a str>, a: Option<&'a str>, q: Option<&'a str>) -> Pins<'a> {
        Pins {
            partition: p,
            account: a,
            qos: q,
        }
    }

    fn job<'a>(p: &'a str, a: &'a str, q: &'a str) -> Placed<'a> {
        Placed {
            partition: p,
            account: Some(a),
            qos: Some(q),
        }
    }

    /// Behaviour 59: the exact three-field target wins over another account.
    #[test]
    fn matches_by_partition_account_qos() {
        let targets = [
            (
                "savio-htc",
                pins(Some("savio4_htc"), Some("fc_jevons"), Some("savio_normal")),
            ),
            ("carleton-htc", T.1),
        ];
        let j = job("savio4_htc", "co_carleton", "carleton_htc4_normal");
        assert_eq!(match_target(&j, targets), Some("carleton-htc"));
    }

    /// Behaviour 60: most specific wins; a tie and a pins-nothing target claim nothing.
    #[test]
    fn most_specific_wins_ties_and_empty_pins_claim_nothing() {
        let j = job("savio4_htc", "co_carleton", "carleton_htc4_normal");
        let broad = ("broad", pins(Some("savio4_htc"), None, None));
        let exact = ("exact", T.1);
        assert_eq!(match_target(&j, [broad, exact]), Some("exact"));
        assert_eq!(match_target(&j, [exact, broad]), Some("exact"));
        let a = ("a", pins(Some("savio4_htc"), Some("co_carleton"), None));
        let b = ("b", pins(Some("savio4_htc"), Some("co_carleton"), None));
        assert_eq!(match_target(&j, [a, b]), None);
        assert_eq!(match_target(&j, [("none", pins(None, None, None))]), None);
        assert_eq!(match_target(&j, []), None);
        // A tie below the best does not matter.
        assert_eq!(match_target(&j, [a, b, exact]), Some("exact"));
        // A pin that disagrees disqualifies.
        let other_qos = ("o", pins(Some("savio4_htc"), None, Some("normal")));
        assert_eq!(match_target(&j, [other_qos]), None);
    }

    #[test]
    fn account_and_qos_compare_without_case_partition_exactly() {
        let j = job("Debug", "dev", "normal");
        assert_eq!(
            match_target(
                &j,
                [("t", pins(Some("Debug"), Some("DEV"), Some("Normal")))]
            ),
            Some("t")
        );
        assert_eq!(
            match_target(&j, [("t", pins(Some("debug"), Some("dev"), None))]),
            None
        );
        let no_account = Placed {
            partition: "Debug",
            account: None,
            qos: None,
        };
        assert_eq!(
            match_target(&no_account, [("t", pins(Some("Debug"), Some("dev"), None))]),
            None
        );
    }

    fn row(id: &str, own: u32, state: &str, p: &str, a: &str, q: &str) -> String {
        format!("{id}|{own}|{state}|{p}|{a}|{q}|u|1|1|vm|9:58|10:00|N/A|N/A|None|sucoder-sample\n")
    }

    /// A row on target T's placement.
    fn on_t(id: &str, own: u32, state: &str) -> String {
        row(
            id,
            own,
            state,
            "savio4_htc",
            "co_carleton",
            "carleton_htc4_normal",
        )
    }

    fn rows(text: &str) -> Vec<JobRow> {
        parse_jobs(text).unwrap()
    }

    const T: (&str, Pins<'static>) = (
        "T",
        Pins {
            partition: Some("savio4_htc"),
            account: Some("co_carleton"),
            qos: Some("carleton_htc4_normal"),
        },
    );

    /// A COMPLETING job of this target is never adopted: it is ending, and the launch must
    /// wait for it; an older live one is still adopted.
    #[test]
    fn an_ending_job_is_waited_for_not_adopted() {
        let text = [
            on_t("5000", 5000, "COMPLETING"),
            row("4999", 4999, "COMPLETING", "savio3", "fc_jevons", "normal"),
        ]
        .concat();
        let plan = plan_adoption(&rows(&text), "T", [T], &[]);
        assert_eq!(plan.adopted(), None);
        assert_eq!(
            plan.ending().collect::<Vec<_>>(),
            [JobId::new(5000).unwrap()]
        );
        let text = [
            on_t("5000", 5000, "COMPLETING"),
            on_t("4242", 4242, "RUNNING"),
        ]
        .concat();
        let plan = plan_adoption(&rows(&text), "T", [T], &[]);
        assert_eq!(plan.adopted().unwrap().0, JobId::new(4242).unwrap());
    }

    /// Behaviours 26, 27, 29: array elements never, newest first, the gone id skipped.
    #[test]
    fn adoption_plan() {
        let text = [
            on_t("4242_3", 4250, "RUNNING"),
            on_t("39000001", 39000001, "RUNNING"),
            on_t("39000077", 39000077, "PENDING"),
            row("4242", 4242, "RUNNING", "savio3", "fc_jevons", "normal"),
        ]
        .concat();
        let plan = plan_adoption(&rows(&text), "T", [T], &[]);
        assert_eq!(plan.adopted().unwrap().0, JobId::new(39000077).unwrap());
        let passed: Vec<_> = plan
            .passed()
            .map(|s| (s.id.to_string(), s.passed.clone().unwrap()))
            .collect();
        assert_eq!(
            passed,
            [
                ("39000001", Passed::OlderMatch),
                ("4242_3", Passed::NotPlain),
                ("4242", Passed::OtherTarget(None)),
            ]
            .map(|(id, why)| (id.to_owned(), why))
        );
        let excluded = plan_adoption(&rows(&text), "T", [T], &[JobId::new(39000077).unwrap()]);
        assert_eq!(excluded.adopted().unwrap().0, JobId::new(39000001).unwrap());
        let only_array = rows(&on_t("4242_3", 4250, "RUNNING"));
        assert_eq!(plan_adoption(&only_array, "T", [T], &[]).adopt, None);
        let ended = rows(&on_t("5", 5, "COMPLETED"));
        let plan = plan_adoption(&ended, "T", [T], &[]);
        assert_eq!(plan.adopt, None);
        assert_eq!(plan.seen[0].passed, Some(Passed::Ended));
    }

    #[test]
    fn another_targets_job_is_named() {
        let other = ("other", pins(Some("savio3"), Some("fc_jevons"), None));
        let text = row("4242", 4242, "RUNNING", "savio3", "fc_jevons", "normal");
        let plan = plan_adoption(&rows(&text), "T", [T, other], &[]);
        assert_eq!(
            plan.seen[0].passed,
            Some(Passed::OtherTarget(Some("other".into())))
        );
    }

    #[test]
    fn an_interrupted_submission_is_waited_for_until_its_bound() {
        use crate::event::Micros;
        use std::time::Duration;
        let bound = Duration::from_secs(62);
        let at = Micros::from_secs(1000);
        assert_eq!(
            in_flight_wait(at, Micros::from_secs(1002), bound),
            Some(Duration::from_secs(60))
        );
        assert_eq!(in_flight_wait(at, Micros::from_secs(1062), bound), None);
        assert_eq!(in_flight_wait(at, Micros::from_secs(2000), bound), None);
        // A clock that went back: the whole bound, never more.
        assert_eq!(
            in_flight_wait(at, Micros::from_secs(900), bound),
            Some(bound)
        );
    }

    #[test]
    fn listings_keep_the_rows_they_understand() {
        let good = "5|5|RUNNING|p|a|q|u|1|1|n|9:58|10:00|N/A|N/A|None|sucoder-x";
        let unparsable = Answer::Unknown(SlurmError::Unparsable {
            command: crate::slurm::SlurmCommand::Squeue,
            source: crate::slurm::ParseError::new(
                crate::slurm::error::Parsed::SqueueJobRow,
                "x",
                "y",
            ),
            stdout: format!("{good}\n4242|4242|RUNNING|p|a|q\n\ngarbage\n"),
            stderr: String::new(),
        });
        match listing_of(unparsable) {
            Listing::Answered { rows, bad_lines } => {
                assert_eq!(rows.len(), 1);
                assert_eq!(bad_lines, ["4242|4242|RUNNING|p|a|q", "garbage"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            listing_of(Answer::Live(vec![])),
            Listing::Answered {
                rows: vec![],
                bad_lines: vec![]
            }
        );
    }

    #[test]
    fn probes_and_polls() {
        let j = JobId::new(7).unwrap();
        let live = |state: &str, node: &str| {
            Answer::Live(rows(&format!(
                "7|7|{state}|p|a|q|u|1|1|{node}|9:58|10:00|N/A|N/A|None|n\n"
            )))
        };
        for (state, node, want) in [
            ("RUNNING", "n0007", Poll::Running("n0007".into())),
            // A state word is never a node; a pending job has no node.
            ("PENDING", "", Poll::Waiting(JobState::Pending)),
            ("CONFIGURING", "n1", Poll::Waiting(JobState::Configuring)),
            ("FAILED", "n1", Poll::Ended(Some(JobState::Failed))),
        ] {
            assert_eq!(poll_of(&live(state, node), j), want, "{state} on {node:?}");
        }
        let invalid = Answer::Gone(crate::slurm::GoneProof::InvalidJobId {
            command: crate::slurm::SlurmCommand::Squeue,
            job: j,
        });
        assert_eq!(poll_of(&invalid, j), Poll::Ended(None));
        assert!(
            matches!(poll_of(&Answer::Live(vec![]), j), Poll::Unknown(_)),
            "an empty answer is not an end"
        );
        for s in ["SUSPENDED", "CONFIGURING", "COMPLETING", "PENDING", "WEIRD"] {
            assert!(
                matches!(probe_of(&live(s, ""), j), Probe::Live { .. }),
                "{s} is live"
            );
        }
        let unknown: Answer<Vec<JobRow>> = Answer::Unknown(crate::slurm::SlurmError::Spawn {
            command: crate::slurm::SlurmCommand::Squeue,
            message: "ssh: connect timeout".into(),
        });
        assert!(matches!(probe_of(&unknown, j), Probe::Unknown(_)));
        // Another job's row proves nothing about this one, live or gone.
        let other = Answer::Live(rows(
            "8|8|RUNNING|p|a|q|u|1|1|n|9:58|10:00|N/A|N/A|None|n\n",
        ));
        assert!(matches!(probe_of(&other, j), Probe::Unknown(_)));
    }

    /// What the racers list: up to 6 jobs of the session's name with distinct ids from a small
    /// range, each on T or another target, in a random state, held or not.
    #[derive(Clone, Debug)]
    struct RacersView(Vec<(u32, &'static str, bool, bool)>);

    impl quickcheck::Arbitrary for RacersView {
        fn arbitrary(g: &mut quickcheck::Gen) -> Self {
            let states = ["PENDING", "RUNNING", "COMPLETING", "CANCELLED", "SUSPENDED"];
            let n = usize::arbitrary(g) % 7;
            let mut ids: Vec<u32> = (0..n).map(|_| 100 + u32::arbitrary(g) % 20).collect();
            ids.sort_unstable();
            ids.dedup();
            let jobs = ids
                .into_iter()
                .map(|id| {
                    let state = *g.choose(&states).unwrap();
                    (id, state, bool::arbitrary(g), bool::arbitrary(g))
                })
                .collect();
            RacersView(jobs)
        }
    }

    impl RacersView {
        fn rows(&self) -> Vec<JobRow> {
            let text: String = self
                .0
                .iter()
                .map(|&(id, state, on_this, held)| {
                    let id = id.to_string();
                    let line = match on_this {
                        true => on_t(&id, 0, state),
                        false => row(&id, 0, state, "savio3", "fc_jevons", "normal"),
                    };
                    let line = line.replacen(&format!("{id}|0|"), &format!("{id}|{id}|"), 1);
                    match held && state == "PENDING" {
                        true => line.replace("|None|", "|JobHeldUser|"),
                        false => line,
                    }
                })
                .collect();
            rows(&text)
        }
    }

    quickcheck::quickcheck! {
        /// Issue 10 item 12: every racer of target T whose job is live keeps the same job, the
        /// oldest live job of T; a racer whose own job is not listed live decides nothing; and
        /// a name probe never adopts a held job younger than that one.
        fn racers_that_see_the_same_jobs_keep_the_same_one(view: RacersView) -> bool {
            let rows = view.rows();
            let on_t = |r: &JobRow| match_target(&Placed::of(r), [T]) == Some("T");
            let contends = |r: &JobRow| is_live(&r.state) && !is_ending(&r.state) && on_t(r);
            let oldest = rows.iter().filter(|r| contends(r)).filter_map(|r| r.plain_id()).min();
            let agree = rows.iter().all(|r| {
                let ours = r.plain_id().unwrap();
                let contends = contends(r);
                match arbitrate(&rows, "T", [T], &[], ours) {
                    Arbitration::Release => !contends || oldest == Some(ours),
                    Arbitration::Yield(w) => w != ours && (!contends || oldest == Some(w)),
                    Arbitration::NotListed => !is_live(&r.state),
                }
            });
            let plan = plan_adoption(&rows, "T", [T], &[]);
            let no_younger_held = plan
                .adopted()
                .is_none_or(|(job, a)| !a.held || oldest.is_none_or(|o| job <= o));
            agree && no_younger_held
        }
    }
}
