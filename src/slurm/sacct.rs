//! `sacct --parsable2 --noheader --format=ACCT_FORMAT`: jobs *and* steps from the
//! accounting database. Fields are `|`-separated; the name is last and kept whole.
//!
//! sacct lags (a new allocation shows up after seconds; a job started just before a
//! controller outage only after the controller is back) and it answers from slurmdbd
//! even while slurmctld is down, so a missing row proves nothing. A row with a terminal state proves the job or step ended.
//!
//! Strict fields (a bad value fails the answer): ids, State, ExitCode, times, CPUs.
//! Informational fields are kept as text: slurmdbd sometimes holds a placeholder job
//! record (recorded verbatim: `JobName=allocation`, `QOS=Unknown`, `ReqMem=16?`, empty
//! Timelimit and Partition) whose State and ExitCode are still right. So never match
//! sacct rows by name; the job name there can also lose non-ASCII characters (`✓`
//! came back as `?`).

use serde::{Deserialize, Serialize};

use super::digits::parse_u32;
use super::duration::SlurmDuration;
use super::error::{ParseError, Parsed};
use super::exit_code::ExitCode;
use super::ids::{JobId, SlurmId, StepId};
use super::memory::MemoryMb;
use super::state::JobState;
use super::timestamp::SlurmTime;

pub const ACCT_FORMAT: &str = "JobIDRaw,JobID,State,ExitCode,DerivedExitCode,Submit,Start,End,\
Elapsed,Timelimit,NodeList,AllocCPUS,ReqMem,Partition,Account,QOS,User,JobName";
const ACCT_FIELDS: usize = 18;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcctRow {
    /// `JobIDRaw`: the job's own id (`6`, `6.batch` for array element `4_1`).
    pub id_raw: SlurmId,
    /// `JobID` as users know it (`4_1`, `4_1.batch`).
    pub id: SlurmId,
    pub state: JobState,
    pub exit_code: Option<ExitCode>,
    /// Jobs only (the highest exit code of any step); empty for steps.
    pub derived_exit_code: Option<ExitCode>,
    pub submit: Option<SlurmTime>,
    pub start: Option<SlurmTime>,
    pub end: Option<SlurmTime>,
    pub elapsed: Option<SlurmDuration>,
    pub time_limit: Option<SlurmDuration>,
    /// `None` for empty or `None assigned`.
    pub node_list: Option<String>,
    pub alloc_cpus: Option<u32>,
    /// `ReqMem` when it reads as a size; see `req_mem_raw` for what sacct printed.
    pub req_mem: Option<MemoryMb>,
    pub req_mem_raw: String,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    /// Jobs only.
    pub user: Option<String>,
    pub name: String,
}

impl AcctRow {
    /// `J.S` when this row is a step of plain job J (by raw id).
    pub fn step_id(&self) -> Option<StepId> {
        self.id_raw.as_step()
    }

    /// The plain job id when this row is a job (not a step).
    pub fn job_id(&self) -> Option<JobId> {
        self.id_raw.as_plain()
    }

    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }
}

/// One run of a job in a sacct answer: the job's own row and the rows of its steps. A requeued
/// batch job keeps its id and starts again, its step ids from 0; `sacct --duplicates` lists
/// every run, oldest first, each job row followed by its steps (the earlier run's job row
/// `REQUEUED`); without it sacct shows the newest run alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcctRun<'a> {
    pub job: &'a AcctRow,
    pub steps: Vec<&'a AcctRow>,
}

/// The runs of job `job` in `rows` (by the raw id's base job), oldest first. A step row before
/// any row of its job belongs to no run it can be told apart from, and is left out.
pub fn runs(rows: &[AcctRow], job: JobId) -> Vec<AcctRun<'_>> {
    let mut out: Vec<AcctRun<'_>> = Vec::new();
    for r in rows.iter().filter(|r| r.id_raw.job().base() == job) {
        match (r.id_raw.step(), out.last_mut()) {
            (None, _) => out.push(AcctRun {
                job: r,
                steps: Vec::new(),
            }),
            (Some(_), Some(run)) => run.steps.push(r),
            (Some(_), None) => {}
        }
    }
    out
}

pub fn parse_rows(stdout: &str) -> Result<Vec<AcctRow>, ParseError> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(parse_row)
        .collect()
}

fn text(v: &str) -> Option<String> {
    (!v.is_empty() && v != "(null)").then(|| v.to_owned())
}

fn parse_row(line: &str) -> Result<AcctRow, ParseError> {
    const W: Parsed = Parsed::SacctRow;
    let f: Vec<&str> = line.splitn(ACCT_FIELDS, '|').collect();
    let [raw, id, state, exit, derived, submit, start, end, elapsed, limit, nodes, cpus, mem, partition, account, qos, user, name] =
        f.as_slice()
    else {
        return Err(ParseError::new(
            W,
            line,
            format!("expected {ACCT_FIELDS} fields"),
        ));
    };
    let ctx = |e: ParseError| e.within(W, line);
    fn opt<T>(v: &str, p: impl Fn(&str) -> Result<T, ParseError>) -> Result<Option<T>, ParseError> {
        if v.is_empty() {
            Ok(None)
        } else {
            p(v).map(Some)
        }
    }
    if state.is_empty() {
        return Err(ParseError::new(W, line, "empty State"));
    }
    let alloc_cpus = opt(cpus, |v| {
        parse_u32(v).map_err(|e| ParseError::new(Parsed::Number, v, e.reason()))
    })
    .map_err(ctx)?;
    Ok(AcctRow {
        id_raw: SlurmId::parse(raw).map_err(ctx)?,
        id: SlurmId::parse(id).map_err(ctx)?,
        state: JobState::parse(state),
        exit_code: opt(exit, ExitCode::parse).map_err(ctx)?,
        derived_exit_code: opt(derived, ExitCode::parse).map_err(ctx)?,
        submit: opt(submit, SlurmTime::parse).map_err(ctx)?,
        start: opt(start, SlurmTime::parse).map_err(ctx)?,
        end: opt(end, SlurmTime::parse).map_err(ctx)?,
        elapsed: opt(elapsed, SlurmDuration::parse).map_err(ctx)?,
        time_limit: opt(limit, SlurmDuration::parse).map_err(ctx)?,
        node_list: text(nodes).filter(|n| n != "None assigned"),
        alloc_cpus,
        req_mem: MemoryMb::parse(mem).ok(),
        req_mem_raw: (*mem).to_owned(),
        partition: text(partition),
        account: text(account),
        qos: text(qos),
        user: text(user),
        name: (*name).to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    #[test]
    fn jobs_and_steps() {
        let out = "25|25|FAILED|2:0|7:0|2026-11-29T16:07:41|2026-11-29T16:07:41|2026-11-29T16:07:41|00:00:00|00:05:00|vm|1|100M|debug|dev|normal|root|bw|step\n\
                   25.batch|25.batch|FAILED|2:0||2026-11-29T16:07:41|2026-11-29T16:07:41|2026-11-29T16:07:41|00:00:00||vm|1||||||batch\n\
                   1.0|1.0|CANCELLED by 0|0:9||2026-11-29T16:12:56|2026-11-29T16:12:56|2026-11-29T16:12:58|00:00:02||vm|1||||||sleep\n\
                   6|4_1|RUNNING|0:0|0:0|2026-11-29T16:12:52|2026-11-29T16:12:52|Unknown|00:00:09|00:10:00|vm|1|500M|debug|dev|normal|root|arr\n\
                   9|9|PENDING|0:0|0:0|2026-11-29T16:12:52|Unknown|Unknown|00:00:00|00:10:00|None assigned|0|500M|debug|dev|normal|root|p\n";
        let rows = parse_rows(out).unwrap();
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[0].job_id(), JobId::new(25));
        assert_eq!(rows[0].exit_code, Some(ExitCode { code: 2, signal: 0 }));
        assert_eq!(
            rows[0].derived_exit_code,
            Some(ExitCode { code: 7, signal: 0 })
        );
        assert_eq!(rows[0].name, "bw|step");
        assert_eq!(
            rows[1].step_id().map(|s| s.to_string()),
            Some("25.batch".into())
        );
        assert_eq!(rows[1].job_id(), None, "a step is not a job");
        assert_eq!(rows[1].id_raw.to_string(), "25.batch");
        assert_eq!(rows[1].derived_exit_code, None);
        assert_eq!(rows[1].req_mem, None);
        assert_eq!(rows[2].step_id().map(|s| s.to_string()), Some("1.0".into()));
        assert_eq!(rows[2].state, JobState::Cancelled { by: Some(0) });
        assert!(rows[2].is_terminal());
        assert_eq!(rows[3].id.to_string(), "4_1");
        assert_eq!(rows[3].job_id(), JobId::new(6));
        assert_eq!(rows[3].end, Some(SlurmTime::Unknown));
        assert!(!rows[3].is_terminal());
        assert_eq!(rows[4].node_list, None);
        assert_eq!(rows[4].alloc_cpus, Some(0));
    }

    #[test]
    fn placeholder_record_is_kept() {
        // Verbatim from the dev cluster (tests/fixtures/slurm/real-sacct-placeholder-rows).
        let line = "16|16|CANCELLED by 0|0:0|0:0|2026-11-29T17:07:09|2026-11-29T17:07:09|2026-11-29T17:07:14|00:00:05||vm|1|16?||dev|Unknown|root|allocation";
        let r = &parse_rows(line).unwrap()[0];
        assert_eq!(r.req_mem, None);
        assert_eq!(r.req_mem_raw, "16?");
        assert_eq!(r.time_limit, None);
        assert_eq!(r.partition, None);
        assert_eq!(r.qos.as_deref(), Some("Unknown"));
        assert!(r.is_terminal());
    }

    #[test]
    fn bad_rows() {
        for bad in [
            "x",
            "25|25|FAILED",
            "25|25||2:0|7:0|||||||||||||x",
            "25|25|FAILED|2|7:0|||||||||||||x",
            "25|25|FAILED|2:0|7:0|never|||||||||||x",
            "25|x|FAILED|2:0|7:0|||||||||||||x",
            "25|25|FAILED|2:0|7:0||||||vm|one||||||x",
        ] {
            let e = parse_rows(bad).expect_err(bad);
            assert_eq!(e.raw, bad);
        }
        assert_eq!(parse_rows("").unwrap(), vec![]);
    }

    quickcheck! {
        fn prop_never_panics(s: String) -> bool {
            let _ = parse_rows(&s);
            true
        }

        fn prop_never_panics_on_row_alphabet(picks: Vec<u8>) -> bool {
            const ALPHABET: &[&str] = &["|", "1", "0", ".", "batch", "FAILED", ":", "-", "T", "\n", "M", "é", "CANCELLED by "];
            let s: String = picks.iter().map(|p| ALPHABET[*p as usize % ALPHABET.len()]).collect();
            let _ = parse_rows(&s);
            true
        }
    }
}
