//! `scontrol --oneliner show job J`: one line of `Key=Value` pairs per job record.
//!
//! Values may contain spaces (`JobName=my job`, `WorkDir=/tmp/a b`) and `=`
//! (`TRES=cpu=1,mem=2000M,node=1`). Keys contain `:` and `/` (`AllocNode:Sid`,
//! `ReqB:S:C:T`, `CPUs/Task`). The split rule:
//!
//! * a key boundary is a single space followed by `Key=` where `Key` matches
//!   `[A-Za-z][A-Za-z0-9_:/-]*`;
//! * inside a *free-text* value (job name, paths, command, comments) only a key from the
//!   known 22.05 vocabulary ends the value, so `Command=/bin/x a=1` stays whole;
//! * a key seen twice in one record means the split was ambiguous (a free-text value
//!   contained ` KnownKey=`): the record is refused rather than guessed.
//!
//! A value that itself ends in spaces cannot be told from the separator; the trailing
//! space Slurm prints after the last pair is dropped.

use serde::{Deserialize, Serialize};

use super::digits::parse_u32;
use super::duration::SlurmDuration;
use super::error::{ParseError, Parsed};
use super::exit_code::ExitCode;
use super::ids::JobId;
use super::memory::MemoryMb;
use super::nodes::{node_shares, NodeShare};
use super::state::JobState;
use super::timestamp::SlurmTime;

/// Keys scontrol 22.05 prints for a job (with `-d` and federation/het extras), and the
/// ones 24.11 prints instead (`ReqTRES`, `AllocTRES` for 22.05's `TRES`).
const KNOWN_KEYS: &[&str] = &[
    "JobId",
    "ArrayJobId",
    "ArrayTaskId",
    "ArrayTaskThrottle",
    "HetJobId",
    "HetJobOffset",
    "HetJobIdSet",
    "JobName",
    "UserId",
    "GroupId",
    "MCS_label",
    "Priority",
    "Nice",
    "Account",
    "QOS",
    "WCKey",
    "JobState",
    "Reason",
    "Dependency",
    "Requeue",
    "Restarts",
    "BatchFlag",
    "Reboot",
    "ExitCode",
    "DerivedExitCode",
    "RunTime",
    "TimeLimit",
    "TimeMin",
    "SubmitTime",
    "EligibleTime",
    "AccrueTime",
    "StartTime",
    "EndTime",
    "Deadline",
    "PreemptEligibleTime",
    "PreemptTime",
    "SuspendTime",
    "SecsPreSuspend",
    "LastSchedEval",
    "Scheduler",
    "Partition",
    "AllocNode:Sid",
    "ReqNodeList",
    "ExcNodeList",
    "NodeList",
    "SchedNodeList",
    "BatchHost",
    "NumNodes",
    "NumCPUs",
    "NumTasks",
    "CPUs/Task",
    "ReqB:S:C:T",
    "TRES",
    "ReqTRES",
    "AllocTRES",
    "Socks/Node",
    "NtasksPerN:B:S:C",
    "CoreSpec",
    "ThreadSpec",
    "MinCPUsNode",
    "MinMemoryNode",
    "MinMemoryCPU",
    "MinTmpDiskNode",
    "Features",
    "ClusterFeatures",
    "Prefer",
    "DelayBoot",
    "Reservation",
    "OverSubscribe",
    "Contiguous",
    "Licenses",
    "Network",
    "Command",
    "WorkDir",
    "AdminComment",
    "SystemComment",
    "Comment",
    "StdErr",
    "StdIn",
    "StdOut",
    "Power",
    "CpusPerTres",
    "MemPerTres",
    "TresBind",
    "TresFreq",
    "TresPerJob",
    "TresPerNode",
    "TresPerSocket",
    "TresPerTask",
    "MailUser",
    "MailType",
    "BurstBuffer",
    "BurstBufferState",
    "Container",
    "NtasksPerTRES",
    "Switches",
    "Wait-for-Switch",
    "Nodes",
    "CPU_IDs",
    "Mem",
    "GRES",
    "JOB_GRES",
    "ResizeTime",
    "FedOrigin",
    "FedViableSiblings",
    "FedActiveSiblings",
    "KillOInInvalidDependent",
    "CpuFreqMin",
    "CpuFreqMax",
    "CpuFreqGov",
    "SelinuxContext",
    "CronJob",
    "CrontabSpec",
    "LicensesAlloc",
    "SpreadJob",
];

/// Keys whose values are user text (names, paths, commands, comments).
const FREE_TEXT_KEYS: &[&str] = &[
    "JobName",
    "Command",
    "WorkDir",
    "StdErr",
    "StdIn",
    "StdOut",
    "Comment",
    "AdminComment",
    "SystemComment",
    "Container",
    "MailUser",
    "Reservation",
    "BurstBuffer",
    "Dependency",
    "Features",
    "Prefer",
    "CrontabSpec",
    "SelinuxContext",
];

/// The keys of `-d`'s per-node groups (`slurm::nodes`): printed once per group of nodes, so
/// the only keys a record may hold more than once.
const PER_NODE_KEYS: &[&str] = &["Nodes", "CPU_IDs", "Mem", "GRES"];

/// One job record with the fields callers need typed, and every pair verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDetails {
    pub job_id: JobId,
    pub array_job_id: Option<JobId>,
    /// `2` for an element, `2-4%1` for a pending remainder, as printed.
    pub array_task_id: Option<String>,
    pub name: String,
    pub user: Option<String>,
    pub uid: Option<u32>,
    /// `None` when Slurm prints `(null)` or nothing.
    pub account: Option<String>,
    pub qos: Option<String>,
    pub state: JobState,
    pub reason: Option<String>,
    pub exit_code: Option<ExitCode>,
    pub run_time: Option<SlurmDuration>,
    pub time_limit: Option<SlurmDuration>,
    pub submit_time: Option<SlurmTime>,
    pub start_time: Option<SlurmTime>,
    pub end_time: Option<SlurmTime>,
    /// When Slurm preempted the job (`PreemptTime`), null while it is not: during the grace
    /// the job is still `RUNNING` and `EndTime` is this plus the grace; once it is killed
    /// (`PREEMPTED`) both are the kill's time.
    #[serde(default)]
    pub preempt_time: Option<SlurmTime>,
    pub partition: Option<String>,
    pub node_list: Option<String>,
    pub batch_host: Option<String>,
    pub num_nodes: Option<String>,
    pub num_cpus: Option<u32>,
    /// Memory from `TRES=...,mem=500M,...` (22.05); from 24.11's `AllocTRES`, or its
    /// `ReqTRES` while nothing is allocated (`AllocTRES=(null)`), as 22.05's `TRES` shows.
    pub tres_mem: Option<MemoryMb>,
    pub batch: Option<bool>,
    /// `Restarts=`: how many times Slurm requeued the job. Each requeue starts another run of
    /// the same job id, whose step ids start again at 0 (docs/slurm-boundary.md, "Requeue").
    #[serde(default)]
    pub restarts: Option<u32>,
    pub command: Option<String>,
    pub work_dir: Option<String>,
    /// What the job holds on each node (`-d`'s groups); empty without them.
    #[serde(default)]
    pub node_shares: Vec<NodeShare>,
    /// Every pair, in order, verbatim.
    pub fields: Vec<(String, String)>,
}

/// A job Slurm preempted that still runs its grace, as `scontrol show job` shows it: still
/// `RUNNING`, its end pulled forward. Only the later `PREEMPTED` proves it over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Preempted {
    /// `PreemptTime`, Slurm's local time (`2026-12-06T13:29:32`).
    pub at: String,
    /// `EndTime`: when Slurm kills it.
    pub ends_at: String,
}

impl Preempted {
    /// `preempted, ends at 13:30:02` (the clock part of Slurm's time).
    pub fn until(&self) -> String {
        let time = self
            .ends_at
            .split_once('T')
            .map_or(self.ends_at.as_str(), |(_, t)| t);
        format!("preempted, ends at {time}")
    }
}

impl JobDetails {
    /// While Slurm's preemption grace runs: the job is still `RUNNING` with a `PreemptTime`,
    /// and ends (is killed) at `EndTime`. `(preempted at, ends at)`.
    pub fn preempted_in_grace(&self) -> Option<(SlurmTime, SlurmTime)> {
        match (&self.state, self.preempt_time, self.end_time) {
            (JobState::Running, Some(at), Some(end)) => Some((at, end)),
            _ => None,
        }
    }

    /// [`Self::preempted_in_grace`] as pools, jobs and sessions show it.
    pub fn preemption(&self) -> Option<Preempted> {
        let (at, end) = self.preempted_in_grace()?;
        Some(Preempted {
            at: at.to_string(),
            ends_at: end.to_string(),
        })
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the whole stdout: one record per job, each starting with `JobId=`. A batch job's
/// `Command=` holds its arguments as given, newlines included (a `dispatch submit` payload
/// `sh -c` script): a line that does not start a record continues the one before, its
/// newline kept in the value.
pub fn parse_show_job(stdout: &str) -> Result<Vec<JobDetails>, ParseError> {
    let mut records: Vec<String> = Vec::new();
    for line in stdout.lines() {
        match records.last_mut() {
            Some(record) if !line.starts_with("JobId=") => {
                record.push('\n');
                record.push_str(line);
            }
            _ if line.trim().is_empty() => {}
            _ => records.push(line.to_owned()),
        }
    }
    records
        .iter()
        .map(|r| parse_record(r.trim_end_matches(['\n', ' '])))
        .collect()
}

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b':' | b'/' | b'-')
}

/// If `rest` starts with `Key=`, returns the key.
fn key_at(rest: &str) -> Option<&str> {
    let b = rest.as_bytes();
    if !b.first()?.is_ascii_alphabetic() {
        return None;
    }
    let len = b.iter().take_while(|c| is_key_char(**c)).count();
    (b.get(len) == Some(&b'=')).then(|| &rest[..len])
}

/// Splits one `-o` line into pairs.
pub fn split_pairs(line: &str) -> Result<Vec<(String, String)>, ParseError> {
    let err = |reason: String| ParseError::new(Parsed::ScontrolRecord, line, reason);
    let text = line.trim_end_matches([' ', '\n', '\r']);
    let first = key_at(text).ok_or_else(|| err("does not start with Key=".to_owned()))?;
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut key = first;
    let mut value_start = first.len() + 1;
    let mut pos = value_start;
    let bytes = text.as_bytes();
    loop {
        // Next candidate boundary: a space followed by Key=.
        let mut boundary = None;
        let mut i = pos;
        while i < bytes.len() {
            if bytes[i] == b' ' {
                if let Some(k) = key_at(&text[i + 1..]) {
                    let free = FREE_TEXT_KEYS.contains(&key);
                    if !free || KNOWN_KEYS.contains(&k) {
                        boundary = Some((i, k));
                        break;
                    }
                }
            }
            i += 1;
        }
        let value_end = boundary.map(|(i, _)| i).unwrap_or(bytes.len());
        let value = &text[value_start..value_end];
        if pairs.iter().any(|(k, _)| k == key) && !PER_NODE_KEYS.contains(&key) {
            return Err(err(format!(
                "key {key} appears twice; a value holds a key-like word"
            )));
        }
        pairs.push((key.to_owned(), value.to_owned()));
        match boundary {
            Some((i, k)) => {
                key = k;
                value_start = i + 1 + k.len() + 1;
                pos = value_start;
            }
            None => break,
        }
    }
    Ok(pairs)
}

fn parse_record(line: &str) -> Result<JobDetails, ParseError> {
    let pairs = split_pairs(line)?;
    let r = Record {
        line,
        pairs: &pairs,
    };
    // The fields are read in this order, which decides the error a record with several
    // bad fields gets.
    let job_id = JobId::parse(r.required("JobId")?).map_err(|e| r.within(e))?;
    let state = JobState::parse(r.required("JobState")?);
    let array_job_id = r.parsed("ArrayJobId", JobId::parse)?;
    let (user, uid) = r.user()?;
    let tres_mem = r.tres_mem()?;
    let num_cpus = r.num_cpus()?;
    let batch = r.batch()?;
    let restarts = r.count("Restarts")?;
    Ok(JobDetails {
        job_id,
        array_job_id,
        array_task_id: r.text("ArrayTaskId"),
        name: r.get("JobName").unwrap_or_default().to_owned(),
        user,
        uid,
        account: r.text("Account"),
        qos: r.text("QOS"),
        state,
        reason: r.text("Reason"),
        exit_code: r.parsed("ExitCode", ExitCode::parse)?,
        run_time: r.parsed("RunTime", SlurmDuration::parse)?,
        time_limit: r.parsed("TimeLimit", SlurmDuration::parse)?,
        submit_time: r.parsed("SubmitTime", SlurmTime::parse)?,
        start_time: r.parsed("StartTime", SlurmTime::parse)?,
        end_time: r.parsed("EndTime", SlurmTime::parse)?,
        preempt_time: r
            .parsed("PreemptTime", SlurmTime::parse)?
            .filter(|t| t.at().is_some()),
        partition: r.text("Partition"),
        node_list: r.text("NodeList"),
        batch_host: r.text("BatchHost"),
        num_nodes: r.text("NumNodes"),
        num_cpus,
        tres_mem,
        batch,
        restarts,
        command: r.text("Command"),
        work_dir: r.text("WorkDir"),
        node_shares: node_shares(&pairs).map_err(|e| r.within(e))?,
        fields: pairs.clone(),
    })
}

/// One record's pairs, with its line for the errors.
struct Record<'a> {
    line: &'a str,
    pairs: &'a [(String, String)],
}

impl Record<'_> {
    /// The value of the first pair with key `k`.
    fn get(&self, k: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    /// A field every record has.
    fn required(&self, k: &str) -> Result<&str, ParseError> {
        self.get(k).ok_or_else(|| self.invalid(format!("no {k}=")))
    }

    /// A text field; empty and `(null)` both mean none.
    fn text(&self, k: &str) -> Option<String> {
        self.get(k)
            .filter(|v| !v.is_empty() && *v != "(null)")
            .map(str::to_owned)
    }

    /// A field read by its own parser.
    fn parsed<T>(
        &self,
        k: &str,
        parse: impl Fn(&str) -> Result<T, ParseError>,
    ) -> Result<Option<T>, ParseError> {
        self.get(k)
            .map(parse)
            .transpose()
            .map_err(|e| self.within(e))
    }

    /// A field parser's error, placed in this record.
    fn within(&self, e: ParseError) -> ParseError {
        e.within(Parsed::ScontrolRecord, self.line)
    }

    /// This record's own error about one of its fields.
    fn invalid(&self, reason: String) -> ParseError {
        ParseError::new(Parsed::ScontrolRecord, self.line, reason)
    }

    /// `UserId=name(uid)`, or a bare name when the uid is unknown.
    fn user(&self) -> Result<(Option<String>, Option<u32>), ParseError> {
        let Some(v) = self.get("UserId") else {
            return Ok((None, None));
        };
        let (name, uid) = split_name_id(v).ok_or_else(|| self.invalid(format!("UserId={v:?}")))?;
        Ok((Some(name), uid))
    }

    /// Memory from 22.05's `TRES`, else 24.11's `AllocTRES` unless nothing is allocated yet
    /// (`(null)`), else its `ReqTRES`.
    fn tres_mem(&self) -> Result<Option<MemoryMb>, ParseError> {
        let tres = self
            .get("TRES")
            .or_else(|| {
                self.get("AllocTRES")
                    .filter(|v| *v != "(null)" && !v.is_empty())
            })
            .or_else(|| self.get("ReqTRES"));
        tres.and_then(|t| t.split(',').find_map(|kv| kv.strip_prefix("mem=")))
            .map(MemoryMb::parse)
            .transpose()
            .map_err(|e| self.within(e))
    }

    /// `NumCPUs`, a plain count.
    fn num_cpus(&self) -> Result<Option<u32>, ParseError> {
        self.count("NumCPUs")
    }

    /// A field that is a plain count (`NumCPUs`, `Restarts`).
    fn count(&self, k: &str) -> Result<Option<u32>, ParseError> {
        self.get(k)
            .map(|v| parse_u32(v).map_err(|e| self.invalid(format!("{k}={v:?}: {}", e.reason()))))
            .transpose()
    }

    /// `BatchFlag`: 1 for a batch job, 0 for an allocation or step.
    fn batch(&self) -> Result<Option<bool>, ParseError> {
        match self.get("BatchFlag") {
            Some("0") => Ok(Some(false)),
            Some("1") => Ok(Some(true)),
            Some(v) => Err(self.invalid(format!("BatchFlag={v:?}"))),
            None => Ok(None),
        }
    }
}

/// `root(0)` -> ("root", Some(0)); a bare name (unknown uid) -> (name, None).
fn split_name_id(v: &str) -> Option<(String, Option<u32>)> {
    match v.strip_suffix(')').and_then(|s| s.rsplit_once('(')) {
        Some((name, id)) => Some((name.to_owned(), Some(parse_u32(id).ok()?))),
        None if !v.is_empty() => Some((v.to_owned(), None)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    const RUNNING_ALLOC: &str =
        include_str!("../../tests/fixtures/slurm/notes-scontrol-show-job-running-alloc.stdout");

    /// Issue 38: in its grace a preempted job is still `RUNNING`, with `PreemptTime` (when it
    /// was preempted) and `EndTime` (when it is killed: that plus the grace), as 22.05 prints
    /// them on the dev cluster; `PreemptTime=None` is no preemption.
    #[test]
    fn preempt_time_is_read_and_a_running_job_with_one_is_in_its_grace() {
        let grace = RUNNING_ALLOC.replace(
            "EndTime=2026-11-29T16:22:52",
            "EndTime=2026-11-29T16:14:00 PreemptEligibleTime=2026-11-29T16:12:52 \
             PreemptTime=2026-11-29T16:13:30",
        );
        let j = &parse_show_job(&grace).unwrap()[0];
        let t = |s: &str| SlurmTime::parse(s).unwrap();
        assert_eq!(j.preempt_time, Some(t("2026-11-29T16:13:30")));
        assert_eq!(
            j.preempted_in_grace(),
            Some((t("2026-11-29T16:13:30"), t("2026-11-29T16:14:00")))
        );
        let over = grace.replace("JobState=RUNNING", "JobState=PREEMPTED");
        let j = &parse_show_job(&over).unwrap()[0];
        assert_eq!(j.preempted_in_grace(), None, "killed: no grace left");
        let none = RUNNING_ALLOC.replace(
            "EndTime=2026-11-29T16:22:52",
            "EndTime=2026-11-29T16:22:52 PreemptEligibleTime=2026-11-29T16:12:52 PreemptTime=None",
        );
        let j = &parse_show_job(&none).unwrap()[0];
        assert_eq!(j.preempt_time, None);
        assert_eq!(j.preempted_in_grace(), None);
        let j = &parse_show_job(RUNNING_ALLOC).unwrap()[0];
        assert_eq!(j.preempted_in_grace(), None);
    }

    /// A batch job whose arguments hold newlines (a `sh -c` script) prints its `Command=` over
    /// several lines: still one record, the script whole in `command`.
    #[test]
    fn a_command_with_newlines_stays_one_record() {
        let script = "f=\"$X/count\"\nn=$(cat \"$f\")\nstart=$n\nwhile :; do sleep 1; done";
        let out = RUNNING_ALLOC.trim_end().replace(
            "Command=(null) WorkDir=/tmp",
            &format!("Command=/s/batch.sh sh -c {script} WorkDir=/w"),
        );
        let two = format!("{out}\n{}", RUNNING_ALLOC.replace("JobId=1 ", "JobId=2 "));
        let jobs = parse_show_job(&two).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            jobs[0].command.as_deref(),
            Some(format!("/s/batch.sh sh -c {script}").as_str())
        );
        assert_eq!(jobs[0].work_dir.as_deref(), Some("/w"));
        assert_eq!(jobs[1].job_id.get(), 2);
    }

    #[test]
    fn verbatim_running_allocation() {
        let jobs = parse_show_job(RUNNING_ALLOC).unwrap();
        assert_eq!(jobs.len(), 1);
        let j = &jobs[0];
        assert_eq!(j.job_id.get(), 1);
        assert_eq!(j.name, "sucoder-demo");
        assert_eq!(j.state, JobState::Running);
        assert_eq!(j.user.as_deref(), Some("root"));
        assert_eq!(j.uid, Some(0));
        assert_eq!(j.account.as_deref(), Some("dev"));
        assert_eq!(j.qos.as_deref(), Some("normal"));
        assert_eq!(j.tres_mem, Some(MemoryMb::new(500)));
        assert_eq!(j.num_cpus, Some(1));
        assert_eq!(j.time_limit, Some(SlurmDuration::Finite(600)));
        assert_eq!(j.node_list.as_deref(), Some("vm"));
        assert_eq!(j.batch, Some(false));
        assert_eq!(j.command, None);
        assert_eq!(j.get("AllocNode:Sid"), Some("localhost:2168"));
        assert_eq!(j.get("ReqB:S:C:T"), Some("0:0:*:*"));
        assert_eq!(j.get("CPUs/Task"), Some("1"));
        assert_eq!(j.get("TRES"), Some("cpu=1,mem=500M,node=1,billing=1"));
        assert_eq!(j.get("Power"), Some(""));
        assert_eq!(j.get("AccrueTime"), Some("Unknown"));
    }

    #[test]
    fn spaces_and_equals_in_values() {
        let line = "JobId=5 JobName=my job Foo=bar UserId=alice(1000) JobState=PENDING \
                    Reason=Resources NodeList= NumNodes=1 TRES=cpu=1,mem=2000M,node=1 \
                    Command=/opt/my tool/run.sh --flag=1 a=b WorkDir=/tmp/a b StdOut=/tmp/o ut Power= ";
        let j = &parse_show_job(line).unwrap()[0];
        assert_eq!(j.name, "my job Foo=bar");
        assert_eq!(
            j.command.as_deref(),
            Some("/opt/my tool/run.sh --flag=1 a=b")
        );
        assert_eq!(j.work_dir.as_deref(), Some("/tmp/a b"));
        assert_eq!(j.get("StdOut"), Some("/tmp/o ut"));
        assert_eq!(j.node_list, None);
        assert_eq!(j.get("NodeList"), Some(""));
        assert_eq!(j.tres_mem, Some(MemoryMb::new(2000)));
        assert_eq!(j.uid, Some(1000));
        assert_eq!(j.state, JobState::Pending);
    }

    #[test]
    fn unknown_keys_split_outside_free_text() {
        let j =
            &parse_show_job("JobId=5 JobState=RUNNING NewKey23=x y Partition=debug").unwrap()[0];
        assert_eq!(j.get("NewKey23"), Some("x y"));
        assert_eq!(j.partition.as_deref(), Some("debug"));
    }

    #[test]
    fn ambiguous_record_is_refused() {
        let line = "JobId=5 JobName=x JobState=FAILED JobState=RUNNING";
        let e = parse_show_job(line).unwrap_err();
        assert!(e.reason.contains("twice"), "{e}");
        assert_eq!(e.raw, line);
    }

    #[test]
    fn refusals() {
        for line in [
            "garbage",
            "=x",
            " JobId=5 JobState=RUNNING",
            "JobState=RUNNING",
            "JobId=abc JobState=RUNNING",
            "JobId=5",
            "JobId=5 JobState=RUNNING TimeLimit=forever",
            "JobId=5 JobState=RUNNING TRES=mem=lots",
            "JobId=5 JobState=RUNNING BatchFlag=2",
            "Job step 1.7 not found",
        ] {
            let e = parse_show_job(line).expect_err(line);
            assert_eq!(e.what, Parsed::ScontrolRecord);
        }
        assert_eq!(parse_show_job("").unwrap(), vec![]);
        assert_eq!(parse_show_job("\n \n").unwrap(), vec![]);
    }

    quickcheck! {
        fn prop_never_panics(s: String) -> bool {
            let _ = parse_show_job(&s);
            true
        }

        fn prop_never_panics_on_kv_alphabet(picks: Vec<u8>) -> bool {
            const ALPHABET: &[&str] = &[
                "JobId=", "JobState=", "JobName=", "Command=", "TRES=", " ", "=", "5", "x",
                "RUNNING", ",mem=", "M", "UserId=", "(", ")", "é", "Reason=", "\n",
            ];
            let s: String = picks.iter().map(|p| ALPHABET[*p as usize % ALPHABET.len()]).collect();
            let _ = parse_show_job(&s);
            true
        }
    }
}
