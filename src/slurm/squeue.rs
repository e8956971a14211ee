//! squeue with our own explicit formats (`--noheader --format=...`, one argv element).
//!
//! Fields are joined by `|`; the job/step name is the *last* field and the split stops
//! before it, so a name containing `|` is kept whole. No other field can contain `|`
//! (ids, states, partition/account/QOS/user names, node lists, times, reasons).

use serde::{Deserialize, Serialize};

use super::digits::parse_u32;
use super::duration::SlurmDuration;
use super::error::{ParseError, Parsed};
use super::ids::{JobId, SlurmId, StepId};
use super::state::JobState;
use super::timestamp::SlurmTime;

/// `%i` id as printed (`4_1`, `5_[2-4%1]`), `%A` the job's own id, `%T` state, `%P`
/// partition, `%a` account, `%q` QOS, `%u` user, `%D` nodes, `%C` CPUs, `%N` node list,
/// `%L` time left, `%l` time limit, `%S` start, `%e` end, `%r` reason, `%j` name.
pub const JOB_FORMAT: &str = "%i|%A|%T|%P|%a|%q|%u|%D|%C|%N|%L|%l|%S|%e|%r|%j";
const JOB_FIELDS: usize = 16;

/// Step format (22.05 has no step state code: every listed step is running; pending
/// steps are not listed). `%i` step id, `%u` user, `%M` time used, `%l` limit, `%S`
/// start, `%N` nodes, `%A` number of tasks, `%j` step name.
pub const STEP_FORMAT: &str = "%i|%u|%M|%l|%S|%N|%A|%j";
const STEP_FIELDS: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRow {
    /// The id as squeue prints it (`%i`): `4_1`, `5_[2-4%1]`, `123`.
    pub id: SlurmId,
    /// The job's own numeric id (`%A`); for array elements it differs from the base.
    pub job_id: JobId,
    pub state: JobState,
    pub partition: String,
    /// `None` for `(null)` (no accounting / no association).
    pub account: Option<String>,
    pub qos: Option<String>,
    pub user: String,
    pub nodes: u32,
    pub cpus: u32,
    /// `None` while pending (empty `%N`).
    pub node_list: Option<String>,
    pub time_left: SlurmDuration,
    pub time_limit: SlurmDuration,
    pub start: SlurmTime,
    pub end: SlurmTime,
    pub reason: String,
    pub name: String,
}

impl JobRow {
    /// The id as a plain job id, when it is one (sessions adopt only these).
    pub fn plain_id(&self) -> Option<JobId> {
        self.id.as_plain()
    }

    /// A running job whose listed end comes before its start plus its time limit: Slurm pulls
    /// the end forward when it preempts a job (to the preemption plus the grace). A hint to
    /// ask `scontrol show job` for its `PreemptTime`, never a proof of preemption (an admin
    /// may have moved the end too).
    pub fn end_pulled_forward(&self) -> bool {
        let (Some(start), Some(end), Some(limit)) =
            (self.start.at(), self.end.at(), self.time_limit.as_secs())
        else {
            return false;
        };
        self.state == JobState::Running
            && i64::try_from(limit)
                .ok()
                .and_then(chrono::TimeDelta::try_seconds)
                .is_some_and(|limit| end < start + limit)
    }

    /// Whether this row is about job `id` (its own id or its printed plain id).
    pub fn is_job(&self, id: JobId) -> bool {
        self.job_id == id || self.plain_id() == Some(id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRow {
    pub id: StepId,
    pub user: String,
    pub time_used: SlurmDuration,
    pub time_limit: SlurmDuration,
    pub start: SlurmTime,
    pub node_list: Option<String>,
    pub tasks: u32,
    pub name: String,
}

fn opt(v: &str) -> Option<String> {
    (!v.is_empty() && v != "(null)").then(|| v.to_owned())
}

fn lines(stdout: &str) -> impl Iterator<Item = &str> {
    stdout.lines().filter(|l| !l.trim().is_empty())
}

fn count(v: &str, what: Parsed, line: &str) -> Result<u32, ParseError> {
    parse_u32(v).map_err(|e| ParseError::new(what, line, format!("{v:?}: {}", e.reason())))
}

/// Parses `squeue --noheader --format=JOB_FORMAT` output. Any bad row fails the whole
/// answer: a half-understood listing must not be read as "these are all the jobs".
pub fn parse_jobs(stdout: &str) -> Result<Vec<JobRow>, ParseError> {
    lines(stdout).map(parse_job_row).collect()
}

fn parse_job_row(line: &str) -> Result<JobRow, ParseError> {
    const W: Parsed = Parsed::SqueueJobRow;
    let f: Vec<&str> = line.splitn(JOB_FIELDS, '|').collect();
    let [id, own, state, partition, account, qos, user, nodes, cpus, node_list, left, limit, start, end, reason, name] =
        f.as_slice()
    else {
        return Err(ParseError::new(
            W,
            line,
            format!("expected {JOB_FIELDS} fields"),
        ));
    };
    let ctx = |e: ParseError| e.within(W, line);
    let slurm_id = SlurmId::parse(id).map_err(ctx)?;
    let state = JobState::parse(state);
    if let JobState::Other(s) = &state {
        if s.is_empty() || s.contains('%') {
            return Err(ParseError::new(W, line, "empty or unexpanded state field"));
        }
    }
    Ok(JobRow {
        id: slurm_id,
        job_id: JobId::parse(own).map_err(ctx)?,
        state,
        partition: (*partition).to_owned(),
        account: opt(account),
        qos: opt(qos),
        user: (*user).to_owned(),
        nodes: count(nodes, W, line)?,
        cpus: count(cpus, W, line)?,
        node_list: opt(node_list),
        time_left: SlurmDuration::parse(left).map_err(ctx)?,
        time_limit: SlurmDuration::parse(limit).map_err(ctx)?,
        start: SlurmTime::parse(start).map_err(ctx)?,
        end: SlurmTime::parse(end).map_err(ctx)?,
        reason: (*reason).to_owned(),
        name: (*name).to_owned(),
    })
}

/// Parses `squeue --steps --noheader --format=STEP_FORMAT` output.
pub fn parse_steps(stdout: &str) -> Result<Vec<StepRow>, ParseError> {
    lines(stdout).map(parse_step_row).collect()
}

fn parse_step_row(line: &str) -> Result<StepRow, ParseError> {
    const W: Parsed = Parsed::SqueueStepRow;
    let f: Vec<&str> = line.splitn(STEP_FIELDS, '|').collect();
    let [id, user, used, limit, start, nodes, tasks, name] = f.as_slice() else {
        return Err(ParseError::new(
            W,
            line,
            format!("expected {STEP_FIELDS} fields"),
        ));
    };
    let ctx = |e: ParseError| e.within(W, line);
    Ok(StepRow {
        id: StepId::parse(id).map_err(ctx)?,
        user: (*user).to_owned(),
        time_used: SlurmDuration::parse(used).map_err(ctx)?,
        time_limit: SlurmDuration::parse(limit).map_err(ctx)?,
        start: SlurmTime::parse(start).map_err(ctx)?,
        node_list: opt(nodes),
        tasks: count(tasks, W, line)?,
        name: (*name).to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    /// Issue 38: a running job whose end is before its start plus its limit (Slurm pulled it
    /// forward at a preemption: 22.05 lists it so in the grace) is worth asking about.
    #[test]
    fn a_running_job_ending_before_its_limit_has_its_end_pulled_forward() {
        let row = |state: &str, limit: &str, end: &str| {
            let line = format!(
                "1|1|{state}|debug|dev|normal|root|1|1|vm|9:55|{limit}|2026-12-06T13:29:31|{end}|None|x\n"
            );
            parse_jobs(&line).unwrap().remove(0)
        };
        assert!(row("RUNNING", "10:00", "2026-12-06T13:30:02").end_pulled_forward());
        assert!(!row("RUNNING", "10:00", "2026-12-06T13:39:31").end_pulled_forward());
        assert!(!row("PENDING", "10:00", "2026-12-06T13:30:02").end_pulled_forward());
        assert!(!row("RUNNING", "UNLIMITED", "2026-12-06T13:30:02").end_pulled_forward());
        assert!(!row("RUNNING", "10:00", "N/A").end_pulled_forward());
    }

    #[test]
    fn job_rows() {
        let out = "1|1|RUNNING|debug|dev|normal|root|1|1|vm|9:58|10:00|2026-11-29T16:12:52|2026-11-29T16:22:52|None|sucoder-demo\n\
                   5_[2-4%1]|5|PENDING|debug|(null)|(null)|root|1|1||5:00|5:00|N/A|N/A|JobArrayTaskLimit|arr|pend|ing\n\
                   4_1|6|COMPLETED|batch|other|high|alice|1|2|vm|INVALID|UNLIMITED|2026-11-29T16:12:52|2026-11-29T16:22:52|None|\n";
        let rows = parse_jobs(out).unwrap();
        assert_eq!(rows.len(), 3);
        let a = &rows[0];
        assert_eq!(a.plain_id(), JobId::new(1));
        assert_eq!(a.time_left, SlurmDuration::Finite(598));
        assert_eq!(a.name, "sucoder-demo");
        assert_eq!(a.node_list.as_deref(), Some("vm"));
        let b = &rows[1];
        assert_eq!(b.plain_id(), None);
        assert!(b.is_job(JobId::new(5).unwrap()));
        assert_eq!(b.account, None);
        assert_eq!(b.node_list, None);
        assert_eq!(b.name, "arr|pend|ing", "the name keeps its '|'");
        let c = &rows[2];
        assert_eq!(c.job_id.get(), 6);
        assert!(c.is_job(JobId::new(6).unwrap()));
        assert!(!c.is_job(JobId::new(4).unwrap()));
        assert_eq!(c.name, "");
        assert!(c.state.is_terminal());
        assert_eq!(c.time_left, SlurmDuration::Invalid);
    }

    #[test]
    fn bad_rows_fail_the_answer() {
        let good = "1|1|RUNNING|debug|dev|normal|root|1|1|vm|9:58|10:00|2026-11-29T16:12:52|2026-11-29T16:22:52|None|x";
        for bad in [
            "garbage",
            "1|1|RUNNING",
            "1_2|x|RUNNING|debug|dev|normal|root|1|1|vm|9:58|10:00|N/A|N/A|None|x",
            "١|1|RUNNING|debug|dev|normal|root|1|1|vm|9:58|10:00|N/A|N/A|None|x",
            "1|1|%T|debug|dev|normal|root|1|1|vm|9:58|10:00|N/A|N/A|None|x",
            "1|1||debug|dev|normal|root|1|1|vm|9:58|10:00|N/A|N/A|None|x",
            "1|1|RUNNING|debug|dev|normal|root|one|1|vm|9:58|10:00|N/A|N/A|None|x",
            "1|1|RUNNING|debug|dev|normal|root|1|1|vm|soon|10:00|N/A|N/A|None|x",
            "1|1|RUNNING|debug|dev|normal|root|1|1|vm|9:58|10:00|yesterday|N/A|None|x",
        ] {
            let text = format!("{good}\n{bad}\n");
            let e = parse_jobs(&text).expect_err(bad);
            assert_eq!(e.raw, bad);
        }
        assert_eq!(parse_jobs("").unwrap(), vec![]);
        assert_eq!(parse_jobs("\n").unwrap(), vec![]);
    }

    #[test]
    fn step_rows() {
        let out = "1.0|root|0:02|UNLIMITED|2026-11-29T16:12:56|vm|1|sleep\n\
                   2.batch|root|0:05|UNLIMITED|2026-11-29T16:12:53|vm|1|batch\n\
                   3.extern|root|1:00:05|UNLIMITED|2026-11-29T16:12:53|vm|1|extern|x\n";
        let rows = parse_steps(out).unwrap();
        assert_eq!(rows[0].id.to_string(), "1.0");
        assert_eq!(rows[0].name, "sleep");
        assert_eq!(rows[1].id.to_string(), "2.batch");
        assert_eq!(rows[2].time_used, SlurmDuration::Finite(3605));
        assert_eq!(rows[2].name, "extern|x");
        for bad in [
            "1|root|0:02|UNLIMITED|N/A|vm|1|x",
            "4_1.0|root|0:02|UNLIMITED|N/A|vm|1|x",
            "1.0|root",
        ] {
            assert!(parse_steps(bad).is_err(), "{bad}");
        }
    }

    quickcheck! {
        fn prop_never_panics(s: String) -> bool {
            let _ = parse_jobs(&s);
            let _ = parse_steps(&s);
            true
        }

        fn prop_never_panics_on_row_alphabet(picks: Vec<u8>) -> bool {
            const ALPHABET: &[&str] = &["|", "1", "0", "_", "[", "]", ".", "RUNNING", "N/A", ":", "-", "\n", "x", "é"];
            let s: String = picks.iter().map(|p| ALPHABET[*p as usize % ALPHABET.len()]).collect();
            let _ = parse_jobs(&s);
            let _ = parse_steps(&s);
            true
        }
    }
}
