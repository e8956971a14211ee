//! Typed requests and the exact argv each one becomes.
//!
//! Every value reaches Slurm as (part of) one argv element; nothing passes through a
//! shell. Validation refuses what Slurm would read differently from what the caller
//! meant (a comma in a job name would make `--name=a,b` a list of two names) and
//! control characters, which no Slurm output format can carry back unambiguously.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use chrono::NaiveDateTime;
use serde::{Deserialize, Serialize};

use super::duration::SlurmDuration;
use super::error::RequestError;
use super::ids::{JobId, StepId};
use super::memory::MemoryMb;
use super::sacct::ACCT_FORMAT;
use super::squeue::{JOB_FORMAT, STEP_FORMAT};
use super::timestamp::format_slurm_time;

/// Longest job name we submit; Slurm stores names far longer, but output lines stay sane.
pub const MAX_JOB_NAME_BYTES: usize = 200;
const MAX_WORD_BYTES: usize = 200;

/// A job or step name that reaches Slurm as exactly what it says.
///
/// Allowed: any text without control characters (newline, tab, CR, NUL, DEL...) and
/// without `,` (squeue/scancel read `--name=a,b` as two names), at most 200 bytes, not
/// empty. Spaces, quotes, `;`, `$(...)`, `|` and non-ASCII are fine: they travel as one
/// argv element and come back whole because the name is the last output column.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobName(String);

impl JobName {
    pub fn new(name: impl Into<String>) -> Result<JobName, RequestError> {
        let name = name.into();
        let refuse = |reason| RequestError::JobName {
            name: name.clone(),
            reason,
        };
        if name.is_empty() {
            return Err(refuse("empty"));
        }
        if name.len() > MAX_JOB_NAME_BYTES {
            return Err(refuse("longer than 200 bytes"));
        }
        if name.chars().any(char::is_control) {
            return Err(refuse("contains a control character (newline, tab, ...)"));
        }
        if name.contains(',') {
            return Err(refuse(
                "contains ',' which squeue and scancel read as a list separator",
            ));
        }
        Ok(JobName(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for JobName {
    type Error = RequestError;
    fn try_from(s: String) -> Result<Self, RequestError> {
        JobName::new(s)
    }
}

impl From<JobName> for String {
    fn from(n: JobName) -> String {
        n.0
    }
}

impl fmt::Display for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A partition, account or QOS name: one word, no commas (a list), no controls. The config
/// asks it too, so that a bad target fails at load with its line.
pub fn check_word(field: &'static str, value: &str) -> Result<(), RequestError> {
    let refuse = |reason| RequestError::Field {
        field,
        value: value.to_owned(),
        reason,
    };
    if value.is_empty() {
        return Err(refuse("empty"));
    }
    if value.len() > MAX_WORD_BYTES {
        return Err(refuse("too long"));
    }
    if value
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || c == ',')
    {
        return Err(refuse("must be one word without ',' or control characters"));
    }
    Ok(())
}

fn check_path(field: &'static str, p: &std::path::Path) -> Result<(), RequestError> {
    if p.as_os_str().is_empty() {
        return Err(RequestError::Field {
            field,
            value: String::new(),
            reason: "empty path",
        });
    }
    Ok(())
}

/// Flags we set ourselves; an extra flag must not override them.
const RESERVED_FLAGS: &[&str] = &[
    "--parsable",
    "--job-name",
    "-J",
    "--wrap",
    "--no-shell",
    "--jobid",
    "--overlap",
    "--output",
    "--error",
    "--partition",
    "--account",
    "--qos",
    "--time",
    "--cpus-per-task",
    "--mem",
    "--immediate",
    "--nodes",
    "--ntasks",
    "--cpu-bind",
    "--chdir",
];

fn check_extra(flag: &str) -> Result<(), RequestError> {
    let refuse = |reason| RequestError::ExtraFlag {
        flag: flag.to_owned(),
        reason,
    };
    if !flag.starts_with("--") || flag.len() < 3 {
        return Err(refuse(
            "extra flags must be long options (--name or --name=value)",
        ));
    }
    if flag.chars().any(char::is_control) {
        return Err(refuse("contains a control character"));
    }
    let name = flag.split_once('=').map(|(n, _)| n).unwrap_or(flag);
    if RESERVED_FLAGS.contains(&name) {
        return Err(refuse("this flag is set by the request itself"));
    }
    Ok(())
}

fn time_arg(t: SlurmDuration) -> Result<String, RequestError> {
    match t {
        SlurmDuration::Finite(0) => Err(RequestError::Field {
            field: "time",
            value: t.to_string(),
            reason: "a zero time limit",
        }),
        SlurmDuration::Finite(_) | SlurmDuration::Unlimited => Ok(t.to_string()),
        other => Err(RequestError::Field {
            field: "time",
            value: other.to_string(),
            reason: "not a time limit one can request",
        }),
    }
}

fn positive(field: &'static str, v: u32) -> Result<u32, RequestError> {
    if v == 0 {
        return Err(RequestError::Field {
            field,
            value: "0".to_owned(),
            reason: "must be at least 1",
        });
    }
    Ok(v)
}

fn flag(name: &str, value: impl fmt::Display) -> OsString {
    OsString::from(format!("--{name}={value}"))
}

/// `--NAME=PATH` for each path that is set; an empty path is refused.
fn push_path_flags<const N: usize>(
    argv: &mut Vec<OsString>,
    paths: [(&'static str, &Option<PathBuf>); N],
) -> Result<(), RequestError> {
    for (name, path) in paths {
        if let Some(p) = path {
            check_path(name, p)?;
            argv.push(path_flag(name, p));
        }
    }
    Ok(())
}

fn path_flag(name: &str, p: &std::path::Path) -> OsString {
    let mut s = OsString::from(format!("--{name}="));
    s.push(p.as_os_str());
    s
}

/// Where a job runs: the fields shared by sbatch and salloc.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub time: Option<SlurmDuration>,
    pub nodes: Option<u32>,
    pub cpus_per_task: Option<u32>,
    pub mem: Option<MemoryMb>,
}

impl Placement {
    fn push_argv(&self, argv: &mut Vec<OsString>) -> Result<(), RequestError> {
        if let Some(p) = &self.partition {
            check_word("partition", p)?;
            argv.push(flag("partition", p));
        }
        if let Some(a) = &self.account {
            check_word("account", a)?;
            argv.push(flag("account", a));
        }
        if let Some(q) = &self.qos {
            check_word("qos", q)?;
            argv.push(flag("qos", q));
        }
        if let Some(t) = self.time {
            argv.push(flag("time", time_arg(t)?));
        }
        if let Some(n) = self.nodes {
            argv.push(flag("nodes", positive("nodes", n)?));
        }
        if let Some(c) = self.cpus_per_task {
            argv.push(flag("cpus-per-task", positive("cpus_per_task", c)?));
        }
        if let Some(m) = self.mem {
            if m.get() == 0 {
                // --mem=0 means "all the node's memory" to Slurm.
                return Err(RequestError::Field {
                    field: "mem",
                    value: m.to_string(),
                    reason: "0 means the whole node to Slurm",
                });
            }
            argv.push(flag("mem", m.to_slurm_arg()));
        }
        Ok(())
    }
}

/// What the batch job runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BatchPayload {
    /// A script file plus its arguments (after the script path in argv).
    Script { path: PathBuf, args: Vec<OsString> },
    /// `--wrap=CMD`: sbatch wraps CMD in `#!/bin/sh`; CMD is shell text by design.
    Wrap(String),
}

/// `sbatch --parsable ...`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRequest {
    pub name: JobName,
    pub placement: Placement,
    pub output: Option<PathBuf>,
    pub error: Option<PathBuf>,
    pub chdir: Option<PathBuf>,
    /// Long options such as `--no-requeue`, placed before the payload.
    pub extra: Vec<String>,
    pub payload: BatchPayload,
}

impl BatchRequest {
    pub fn new(name: JobName, payload: BatchPayload) -> BatchRequest {
        BatchRequest {
            name,
            placement: Placement::default(),
            output: None,
            error: None,
            chdir: None,
            extra: Vec::new(),
            payload,
        }
    }

    /// `sbatch --parsable --job-name=N [placement] [--output=] [--error=] [--chdir=]
    /// [extra...] (--wrap=CMD | SCRIPT [ARGS...])`
    pub fn argv(&self) -> Result<Vec<OsString>, RequestError> {
        let mut argv = vec![OsString::from("--parsable"), flag("job-name", &self.name)];
        self.placement.push_argv(&mut argv)?;
        push_path_flags(
            &mut argv,
            [
                ("output", &self.output),
                ("error", &self.error),
                ("chdir", &self.chdir),
            ],
        )?;
        for e in &self.extra {
            check_extra(e)?;
            argv.push(e.into());
        }
        match &self.payload {
            BatchPayload::Wrap(cmd) => {
                if cmd.trim().is_empty() {
                    return Err(RequestError::EmptyCommand);
                }
                argv.push(flag("wrap", cmd));
            }
            BatchPayload::Script { path, args } => {
                check_path("script", path)?;
                argv.push(path.clone().into_os_string());
                argv.extend(args.iter().cloned());
            }
        }
        Ok(argv)
    }
}

/// `salloc --no-shell ...`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocRequest {
    pub name: JobName,
    pub placement: Placement,
    /// `--immediate=N`: give up (and cancel the queued job) after N seconds of waiting.
    /// Without it only the driver's timeout bounds the wait.
    pub immediate_secs: Option<u32>,
    /// `--hold`: the job waits (held, reason `JobHeldUser`) until `scontrol release`, and salloc
    /// waits with it (`Scheduler::allocate_held`).
    pub hold: bool,
    pub extra: Vec<String>,
}

impl AllocRequest {
    pub fn new(name: JobName) -> AllocRequest {
        AllocRequest {
            name,
            placement: Placement::default(),
            immediate_secs: None,
            hold: false,
            extra: Vec::new(),
        }
    }

    /// `salloc --no-shell --job-name=N [placement] [--immediate=S] [--hold] [extra...]`
    pub fn argv(&self) -> Result<Vec<OsString>, RequestError> {
        let mut argv = vec![OsString::from("--no-shell"), flag("job-name", &self.name)];
        self.placement.push_argv(&mut argv)?;
        if let Some(s) = self.immediate_secs {
            argv.push(flag("immediate", positive("immediate_secs", s)?));
        }
        if self.hold {
            argv.push("--hold".into());
        }
        for e in &self.extra {
            check_extra(e)?;
            argv.push(e.into());
        }
        Ok(argv)
    }
}

/// A step inside an existing allocation, started detached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRequest {
    pub job: JobId,
    pub name: JobName,
    pub cpus: u32,
    pub mem: MemoryMb,
    /// `--overlap`: share CPUs and memory with other steps. Without it Slurm gives the step
    /// CPUs no other non-overlapping step holds (disjoint CPU sets), and the step waits while
    /// they are taken.
    pub overlap: bool,
    /// `--gres=…`: the step's generic resources. Without it a step inherits every GRES of the
    /// job (every GPU of a GPU allocation); `none` gives it none.
    pub gres: Option<String>,
    /// `--nodes=1 --nodelist=NODE --exact --cpu-bind=none`: the step runs on that node of the
    /// allocation, with only the CPUs and memory it asks for, its task on all of those CPUs. Without it Slurm picks, and a step asks for the
    /// job's node count.
    pub node: Option<String>,
    /// The task's stdout/stderr, written on the node (`--output`/`--error`).
    pub output: Option<PathBuf>,
    pub error: Option<PathBuf>,
    pub chdir: Option<PathBuf>,
    /// Where the srun *client* writes its own messages (appended); /dev/null if `None`.
    pub client_log: Option<PathBuf>,
    /// Extra environment for srun (and so for the task).
    pub env: Vec<(String, OsString)>,
    pub command: Vec<OsString>,
}

impl StepRequest {
    pub fn new(
        job: JobId,
        name: JobName,
        cpus: u32,
        mem: MemoryMb,
        command: Vec<OsString>,
    ) -> StepRequest {
        StepRequest {
            job,
            name,
            cpus,
            mem,
            overlap: true,
            gres: None,
            node: None,
            output: None,
            error: None,
            chdir: None,
            client_log: None,
            env: Vec::new(),
            command,
        }
    }

    /// `srun --jobid=J [--verbose] [--overlap] --job-name=N [--nodes=1 --nodelist=NODE --exact
    /// --cpu-bind=none] --ntasks=1
    /// --cpus-per-task=C --mem=MM [--gres=G] [--output=F] [--error=F] [--chdir=D] -- CMD [ARGS...]`
    pub fn argv(&self) -> Result<Vec<OsString>, RequestError> {
        if self.command.is_empty() || self.command[0].is_empty() {
            return Err(RequestError::EmptyCommand);
        }
        if self.mem.get() == 0 {
            return Err(RequestError::Field {
                field: "mem",
                value: "0".to_owned(),
                reason: "0 means the whole allocation to Slurm",
            });
        }
        for (k, _) in &self.env {
            let ok = k
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(RequestError::Field {
                    field: "env",
                    value: k.clone(),
                    reason: "not a valid environment variable name",
                });
            }
        }
        let mut argv = vec![flag("jobid", self.job)];
        // With a client log srun says there which step the controller created for it
        // (`launching StepId=J.S`, `srun_log`): the step is known without a listing.
        if self.client_log.is_some() {
            argv.push(OsString::from("--verbose"));
        }
        if self.overlap {
            argv.push(OsString::from("--overlap"));
        }
        argv.push(flag("job-name", &self.name));
        if let Some(node) = &self.node {
            check_word("node", node)?;
            // `--cpu-bind=none`: the step's one task gets every CPU of the step, as a mask of
            // them (slurmd's task/affinity still confines it to them), with no layout of tasks
            // over cores. That layout is what slurmd refused on a node that declares more CPUs
            // than its host has (config_overrides): it folds the step's core ids onto the real
            // CPUs, cores 0 and 2 of a 2-CPU step become one CPU, and 22.05's implicit binding
            // to cores then fails with "Unable to layout tasks on given cpus" after the step
            // was created. Explicit, it also overrides a SLURM_CPU_BIND in the environment.
            argv.extend([
                OsString::from("--nodes=1"),
                flag("nodelist", node),
                OsString::from("--exact"),
                OsString::from("--cpu-bind=none"),
            ]);
        }
        argv.extend([
            OsString::from("--ntasks=1"),
            flag("cpus-per-task", positive("cpus", self.cpus)?),
            flag("mem", self.mem.to_slurm_arg()),
        ]);
        if let Some(g) = &self.gres {
            check_word("gres", g)?;
            argv.push(flag("gres", g));
        }
        push_path_flags(
            &mut argv,
            [
                ("output", &self.output),
                ("error", &self.error),
                ("chdir", &self.chdir),
            ],
        )?;
        argv.push("--".into());
        argv.extend(self.command.iter().cloned());
        Ok(argv)
    }
}

/// Which jobs to list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobSelect {
    /// `--jobs=1,2,3`.
    Ids(Vec<JobId>),
    /// `--me --name=N[,N…]`: jobs of any of these names, in one listing (never empty; a job
    /// name holds no comma).
    MineNamed(Vec<JobName>),
    /// `--me`.
    Mine,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobQuery {
    pub select: JobSelect,
    /// `--states=all`: also jobs that ended within MinJobAge, with their terminal state.
    pub include_finished: bool,
}

impl JobQuery {
    pub fn ids(ids: Vec<JobId>) -> JobQuery {
        JobQuery {
            select: JobSelect::Ids(ids),
            include_finished: true,
        }
    }

    pub fn mine_named(name: JobName) -> JobQuery {
        JobQuery::mine_named_any(vec![name])
    }

    /// The user's jobs of any of `names`, in one listing: what it shows of one name it shows
    /// beside the others, one view of the controller (no names: [`RequestError::NoJobNames`]).
    pub fn mine_named_any(names: Vec<JobName>) -> JobQuery {
        JobQuery {
            select: JobSelect::MineNamed(names),
            include_finished: false,
        }
    }

    pub fn mine() -> JobQuery {
        JobQuery {
            select: JobSelect::Mine,
            include_finished: false,
        }
    }

    /// `--me --states=all`: the user's jobs, with those that ended within MinJobAge.
    pub fn mine_including_finished() -> JobQuery {
        JobQuery {
            select: JobSelect::Mine,
            include_finished: true,
        }
    }

    /// One specific job id: "Invalid job id specified" then means that job is gone.
    pub fn single_id(&self) -> Option<JobId> {
        match &self.select {
            JobSelect::Ids(ids) if ids.len() == 1 => Some(ids[0]),
            _ => None,
        }
    }

    /// `squeue --noheader --format=F [--states=all] (--jobs=L | --me [--name=N])`
    pub fn argv(&self) -> Result<Vec<OsString>, RequestError> {
        let mut argv = vec![OsString::from("--noheader"), flag("format", JOB_FORMAT)];
        if self.include_finished {
            argv.push("--states=all".into());
        }
        match &self.select {
            JobSelect::Ids(ids) => argv.push(flag("jobs", id_list(ids)?)),
            JobSelect::MineNamed(names) if names.is_empty() => {
                return Err(RequestError::NoJobNames)
            }
            JobSelect::MineNamed(names) => {
                argv.push("--me".into());
                let names: Vec<&str> = names.iter().map(JobName::as_str).collect();
                argv.push(flag("name", names.join(",")));
            }
            JobSelect::Mine => argv.push("--me".into()),
        }
        Ok(argv)
    }
}

fn id_list(ids: &[JobId]) -> Result<String, RequestError> {
    if ids.is_empty() {
        return Err(RequestError::NoJobIds);
    }
    Ok(ids
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(","))
}

/// `squeue --steps --noheader --format=F --jobs=J`
pub fn steps_argv(job: JobId) -> Vec<OsString> {
    vec![
        "--steps".into(),
        "--noheader".into(),
        flag("format", STEP_FORMAT),
        flag("jobs", job),
    ]
}

/// `scontrol release J`: let a job submitted with `--hold` be scheduled.
pub fn release_argv(job: JobId) -> Vec<OsString> {
    vec!["release".into(), job.to_string().into()]
}

/// `scontrol update JobId=J Comment=TEXT`: the text is one argument, spaces and all.
pub fn comment_argv(job: JobId, comment: &str) -> Vec<OsString> {
    vec![
        "update".into(),
        format!("JobId={job}").into(),
        format!("Comment={comment}").into(),
    ]
}

/// `scontrol --oneliner --details show job J`: with the details, what the job holds on each
/// node (`slurm::nodes`).
pub fn show_job_argv(job: JobId) -> Vec<OsString> {
    vec![
        "--oneliner".into(),
        "--details".into(),
        "show".into(),
        "job".into(),
        job.to_string().into(),
    ]
}

/// Accounting for some jobs (and their steps) in an explicit window: by id, or by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcctQuery {
    pub jobs: Vec<JobId>,
    /// `--name=N1,N2` (job names never hold a comma), used when `jobs` is empty.
    #[serde(default)]
    pub names: Vec<JobName>,
    /// `--starttime`: in the cluster's local time. Without it sacct's default window
    /// depends on the flags and the time of day.
    #[serde(with = "crate::slurm::timestamp::naive_text")]
    pub since: NaiveDateTime,
}

impl AcctQuery {
    /// `sacct --parsable2 --noheader --format=F --starttime=T --endtime=now (--jobs=L |
    /// --name=N1,N2)`
    pub fn argv(&self) -> Result<Vec<OsString>, RequestError> {
        let select = if self.jobs.is_empty() && !self.names.is_empty() {
            let names: Vec<&str> = self.names.iter().map(JobName::as_str).collect();
            flag("name", names.join(","))
        } else {
            flag("jobs", id_list(&self.jobs)?)
        };
        Ok(vec![
            "--parsable2".into(),
            "--noheader".into(),
            flag("format", ACCT_FORMAT),
            flag("starttime", format_slurm_time(self.since)),
            "--endtime=now".into(),
            select,
        ])
    }
}

/// Signals `scancel --signal=` may send to a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Signal {
    Term,
    Kill,
    Int,
    Hup,
    Usr1,
    Usr2,
    Cont,
    Stop,
    Quit,
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
            Signal::Int => "INT",
            Signal::Hup => "HUP",
            Signal::Usr1 => "USR1",
            Signal::Usr2 => "USR2",
            Signal::Cont => "CONT",
            Signal::Stop => "STOP",
            Signal::Quit => "QUIT",
        })
    }
}

/// What to cancel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelTarget {
    /// `scancel J`
    Job(JobId),
    /// `scancel J.S`
    Step(StepId),
    /// `scancel --signal=SIG J.S`
    SignalStep(StepId, Signal),
    /// `scancel --me --name=N` (never without `--me`: `--name` alone matches every
    /// user's jobs).
    MineNamed(JobName),
}

impl CancelTarget {
    pub fn argv(&self) -> Vec<OsString> {
        match self {
            CancelTarget::Job(j) => vec![j.to_string().into()],
            CancelTarget::Step(s) => vec![s.to_string().into()],
            CancelTarget::SignalStep(s, sig) => vec![flag("signal", sig), s.to_string().into()],
            CancelTarget::MineNamed(n) => vec!["--me".into(), flag("name", n)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::ids::StepKind;

    fn strs(v: Vec<OsString>) -> Vec<String> {
        v.into_iter().map(|s| s.into_string().unwrap()).collect()
    }

    fn name(s: &str) -> JobName {
        JobName::new(s).unwrap()
    }

    #[test]
    fn job_names() {
        for ok in [
            "sucoder-x",
            "a b",
            "it's \"q\"",
            "a;b",
            "$(rm -rf /)",
            "ünï©ødé",
            "a|b",
            "-x",
            "`x`",
        ] {
            assert_eq!(name(ok).as_str(), ok);
        }
        for bad in [
            "",
            "a\nb",
            "a\tb",
            "a\rb",
            "a\0b",
            "a,b",
            "\u{7f}",
            &"x".repeat(201),
        ] {
            assert!(JobName::new(bad).is_err(), "{bad:?}");
        }
        assert!(serde_json::from_str::<JobName>("\"a\\nb\"").is_err());
    }

    #[test]
    fn sbatch_argv() {
        let mut r = BatchRequest::new(
            name("n x"),
            BatchPayload::Wrap("sleep 300; echo $(date)".into()),
        );
        r.placement = Placement {
            partition: Some("debug".into()),
            account: Some("dev".into()),
            qos: Some("normal".into()),
            time: Some(SlurmDuration::Finite(600)),
            nodes: Some(1),
            cpus_per_task: Some(2),
            mem: Some(MemoryMb::new(100)),
        };
        r.output = Some("/tmp/o %j.out".into());
        r.extra = vec!["--no-requeue".into()];
        assert_eq!(
            strs(r.argv().unwrap()),
            [
                "--parsable",
                "--job-name=n x",
                "--partition=debug",
                "--account=dev",
                "--qos=normal",
                "--time=00:10:00",
                "--nodes=1",
                "--cpus-per-task=2",
                "--mem=100M",
                "--output=/tmp/o %j.out",
                "--no-requeue",
                "--wrap=sleep 300; echo $(date)",
            ]
        );
        let s = BatchRequest::new(
            name("s"),
            BatchPayload::Script {
                path: "/x/run.sh".into(),
                args: vec!["a b".into(), "--c".into()],
            },
        );
        assert_eq!(
            strs(s.argv().unwrap()),
            ["--parsable", "--job-name=s", "/x/run.sh", "a b", "--c"]
        );
    }

    #[test]
    fn sbatch_refusals() {
        let base = BatchRequest::new(name("n"), BatchPayload::Wrap("true".into()));
        let mut r = base.clone();
        r.extra = vec!["--job-name=other".into()];
        assert!(matches!(r.argv(), Err(RequestError::ExtraFlag { .. })));
        r.extra = vec!["-x".into()];
        assert!(r.argv().is_err());
        let mut r = base.clone();
        r.placement.partition = Some("a,b".into());
        assert!(matches!(
            r.argv(),
            Err(RequestError::Field {
                field: "partition",
                ..
            })
        ));
        let mut r = base.clone();
        r.placement.time = Some(SlurmDuration::Invalid);
        assert!(r.argv().is_err());
        let mut r = base.clone();
        r.placement.mem = Some(MemoryMb::new(0));
        assert!(r.argv().is_err());
        let mut r = base.clone();
        r.placement.cpus_per_task = Some(0);
        assert!(r.argv().is_err());
        let r = BatchRequest::new(name("n"), BatchPayload::Wrap("  ".into()));
        assert_eq!(r.argv(), Err(RequestError::EmptyCommand));
    }

    #[test]
    fn salloc_argv() {
        let mut r = AllocRequest::new(name("pool"));
        r.placement.cpus_per_task = Some(2);
        r.placement.mem = Some(MemoryMb::new(400));
        r.placement.time = Some(SlurmDuration::Finite(300));
        r.immediate_secs = Some(10);
        assert_eq!(
            strs(r.argv().unwrap()),
            [
                "--no-shell",
                "--job-name=pool",
                "--time=00:05:00",
                "--cpus-per-task=2",
                "--mem=400M",
                "--immediate=10"
            ]
        );
    }

    #[test]
    fn srun_argv() {
        let mut r = StepRequest::new(
            JobId::new(8).unwrap(),
            name("pool/w1"),
            2,
            MemoryMb::new(100),
            vec!["sleep".into(), "60".into()],
        );
        r.output = Some("/tmp/w1.out".into());
        assert_eq!(
            strs(r.argv().unwrap()),
            [
                "--jobid=8",
                "--overlap",
                "--job-name=pool/w1",
                "--ntasks=1",
                "--cpus-per-task=2",
                "--mem=100M",
                "--output=/tmp/w1.out",
                "--",
                "sleep",
                "60",
            ]
        );
        // A step asks for its GRES (a worker: none, so it inherits no GPU of the job).
        r.overlap = false;
        r.gres = Some("none".into());
        let argv = strs(r.argv().unwrap());
        assert_eq!(argv[4..6], ["--mem=100M", "--gres=none"]);
        // On a node: exactly its CPUs, the one task on all of them (no layout over cores).
        r.node = Some("node1".into());
        let argv = strs(r.argv().unwrap());
        assert_eq!(
            argv[2..7],
            [
                "--nodes=1",
                "--nodelist=node1",
                "--exact",
                "--cpu-bind=none",
                "--ntasks=1"
            ]
        );
        r.gres = Some("gpu:1,license:2".into());
        assert!(r.argv().is_err(), "one GRES word");
        r.command.clear();
        assert_eq!(r.argv(), Err(RequestError::EmptyCommand));
    }

    #[test]
    fn query_argv() {
        let j = |n| JobId::new(n).unwrap();
        assert_eq!(
            strs(JobQuery::ids(vec![j(1), j(2)]).argv().unwrap()),
            [
                "--noheader",
                &format!("--format={JOB_FORMAT}"),
                "--states=all",
                "--jobs=1,2"
            ]
        );
        assert_eq!(
            strs(JobQuery::mine_named(name("a b")).argv().unwrap()),
            [
                "--noheader",
                &format!("--format={JOB_FORMAT}"),
                "--me",
                "--name=a b"
            ]
        );
        assert_eq!(
            strs(
                JobQuery::mine_named_any(vec![name("dispatch-m"), name("sucoder-m")])
                    .argv()
                    .unwrap()
            ),
            [
                "--noheader",
                &format!("--format={JOB_FORMAT}"),
                "--me",
                "--name=dispatch-m,sucoder-m"
            ]
        );
        assert_eq!(
            JobQuery::mine_named_any(vec![]).argv(),
            Err(RequestError::NoJobNames)
        );
        assert_eq!(JobQuery::ids(vec![]).argv(), Err(RequestError::NoJobIds));
        assert_eq!(JobQuery::ids(vec![j(3)]).single_id(), Some(j(3)));
        assert_eq!(JobQuery::ids(vec![j(3), j(4)]).single_id(), None);
        assert_eq!(strs(release_argv(j(5))), ["release", "5"]);
        assert_eq!(
            strs(show_job_argv(j(5))),
            ["--oneliner", "--details", "show", "job", "5"]
        );
        let since = chrono::NaiveDate::from_ymd_opt(2026, 11, 29)
            .unwrap()
            .and_hms_opt(16, 0, 0)
            .unwrap();
        assert_eq!(
            strs(
                AcctQuery {
                    jobs: vec![j(9)],
                    names: vec![],
                    since
                }
                .argv()
                .unwrap()
            ),
            [
                "--parsable2",
                "--noheader",
                &format!("--format={ACCT_FORMAT}"),
                "--starttime=2026-11-29T16:00:00",
                "--endtime=now",
                "--jobs=9",
            ]
        );
        let by_name = AcctQuery {
            jobs: vec![],
            names: vec![name("a b"), name("c")],
            since,
        };
        assert_eq!(
            strs(by_name.argv().unwrap()).last().unwrap(),
            "--name=a b,c"
        );
        assert_eq!(
            strs(JobQuery::mine_including_finished().argv().unwrap())[2..],
            ["--states=all", "--me"]
        );
        let step = StepId::new(j(9), StepKind::Numbered(1));
        assert_eq!(
            strs(CancelTarget::SignalStep(step, Signal::Term).argv()),
            ["--signal=TERM", "9.1"]
        );
        assert_eq!(
            strs(CancelTarget::MineNamed(name("x y")).argv()),
            ["--me", "--name=x y"]
        );
    }
}
