//! An in-process scripted Slurm for the session ops: every call is recorded as the exact argv
//! the CLI driver would run (built by the same request types), together with the session
//! event kinds already durable in the journal at that moment; answers are popped from
//! per-command queues, and a call nobody scripted panics, so drift fails loudly.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use dispatch::config::Config;
use dispatch::ops::context::Ctx;
use dispatch::ops::session::{Env, Waits};
use dispatch::slurm::runner::ExitInfo;
use dispatch::slurm::squeue::parse_jobs;
use dispatch::slurm::{
    AcctQuery, AcctRow, ActionError, AllocRequest, Allocated, Answer, BatchRequest, CallCounts,
    CancelReport, CancelTarget, HeldAllocation, JobDetails, JobId, JobName, JobQuery, JobRow,
    JobSelect, LaunchedStep, ScancelSaid, Scheduler, Signal, SlurmCommand, SlurmError, StepId,
    StepRequest, StepRow, Submitted,
};

pub type Rows = Answer<Vec<JobRow>>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub argv: Vec<String>,
    /// Session event kinds in the journal when the call was made.
    pub journal: Vec<String>,
}

#[derive(Default)]
pub struct Queues {
    pub by_id: VecDeque<Rows>,
    pub by_name: VecDeque<Rows>,
    /// The answer of every name probe once `by_name` is used up (a wait that probes a number
    /// of times that depends on the clock); `None`: such a call panics.
    pub by_name_else: Option<Rows>,
    /// The same for the probes by id (a wait for a job to run).
    pub by_id_else: Option<Rows>,
    pub mine: VecDeque<Rows>,
    pub sbatch: VecDeque<Result<Submitted, ActionError>>,
    pub salloc: VecDeque<Result<Allocated, ActionError>>,
    pub scancel: VecDeque<Result<CancelReport, ActionError>>,
    pub sacct: VecDeque<Answer<Vec<AcctRow>>>,
    /// Answers of `scontrol release`; when empty (and `manual_hold` is off) it succeeds.
    pub release: VecDeque<Result<(), ActionError>>,
    /// Off (the default): the name probe right after an `sbatch --hold` is answered with the
    /// held job alone (so the launch releases it) and a release succeeds, so a test of
    /// anything else scripts neither. On: both come from the queues like every other call.
    pub manual_hold: bool,
    /// The automatic answer for the next name probe (set by a held sbatch).
    held_probe: Option<Rows>,
    /// Off (the default): the user's listing (`squeue --me --states=all`) that corroborates an
    /// empty name probe, when `mine` holds no answer, lists one job of the user's that is no
    /// session's (`OTHERS_JOB`), so an empty name probe proves absence as on a healthy
    /// cluster with other work. On: it comes from `mine` like every other call.
    pub manual_listing: bool,
}

/// The user's job that the automatic user's listing shows (see `Queues::manual_listing`).
pub const OTHERS_JOB: u32 = 777;

type Hook = Box<dyn Fn(&str) + Send + Sync>;

pub struct Scripted {
    pub q: Mutex<Queues>,
    calls: Mutex<Vec<Call>>,
    journal_dir: PathBuf,
    /// Runs after a call of that program (e.g. to break the journal after sbatch).
    after: Mutex<Vec<(String, Hook)>>,
}

fn strs(v: Vec<std::ffi::OsString>) -> Vec<String> {
    v.into_iter().map(|s| s.into_string().unwrap()).collect()
}

impl Scripted {
    pub fn new(state_dir: &Path) -> Scripted {
        Scripted {
            q: Mutex::new(Queues::default()),
            calls: Mutex::new(Vec::new()),
            journal_dir: state_dir.join("journal"),
            after: Mutex::new(Vec::new()),
        }
    }

    pub fn after(&self, program: &str, hook: impl Fn(&str) + Send + Sync + 'static) {
        self.after
            .lock()
            .unwrap()
            .push((program.to_owned(), Box::new(hook)));
    }

    fn record(&self, program: &str, args: Vec<String>) {
        let mut argv = vec![program.to_owned()];
        argv.extend(args);
        let journal = session_kinds(&self.journal_dir);
        self.calls.lock().unwrap().push(Call { argv, journal });
    }

    fn run_hooks(&self, program: &str) {
        for (p, h) in self.after.lock().unwrap().iter() {
            if p == program {
                h(&self.journal_dir.to_string_lossy());
            }
        }
    }

    pub fn clear_calls(&self) {
        self.calls.lock().unwrap().clear();
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub fn argvs(&self) -> Vec<Vec<String>> {
        self.calls().into_iter().map(|c| c.argv).collect()
    }

    /// The programs called, in order.
    pub fn programs(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .map(|c| c.argv[0].clone())
            .collect()
    }

    pub fn called(&self, program: &str) -> bool {
        self.programs().iter().any(|p| p == program)
    }

    /// Everything scripted was used: no answer left over means no expected call went missing.
    pub fn assert_drained(&self) {
        let q = self.q.lock().unwrap();
        assert!(
            q.by_id.is_empty()
                && q.by_name.is_empty()
                && q.mine.is_empty()
                && q.sbatch.is_empty()
                && q.salloc.is_empty()
                && q.scancel.is_empty()
                && q.sacct.is_empty()
                && q.release.is_empty()
                && q.held_probe.is_none(),
            "scripted answers left unused; calls were {:?}",
            self.argvs()
        );
    }
}

fn pop<T>(q: &mut VecDeque<T>, what: &str, argv: &[String]) -> T {
    q.pop_front()
        .unwrap_or_else(|| panic!("unscripted {what} call: {argv:?}"))
}

/// Session event kinds in a journal, in order (empty if there is none yet).
pub fn session_kinds(journal_dir: &Path) -> Vec<String> {
    let mut kinds = Vec::new();
    if !journal_dir.exists() {
        return kinds;
    }
    let _ = dispatch::journal::replay(journal_dir, None, |env| {
        let name = env.event.kind_name();
        if name.starts_with("Session") {
            kinds.push(name.to_owned());
        }
        Ok(())
    });
    kinds
}

/// Partition, account and QOS of a held job's automatic listing row.
fn placed(p: &dispatch::slurm::Placement) -> (&str, &str, &str) {
    (
        p.partition.as_deref().unwrap_or(""),
        p.account.as_deref().unwrap_or(""),
        p.qos.as_deref().unwrap_or("normal"),
    )
}

impl Scheduler for Scripted {
    /// `sbatch --test-only`: always "it would start now on n1"; not among the calls (a launch
    /// asks it before each submission, and the tests' call lists are about what acts).
    async fn test_batch(
        &self,
        req: &BatchRequest,
    ) -> Result<dispatch::slurm::TestedBatch, SlurmError> {
        Ok(dispatch::slurm::TestedBatch {
            start: "2026-12-04T00:00:00".to_owned(),
            cpus: 1,
            nodes: "n1".to_owned(),
            partition: req.placement.partition.clone().unwrap_or_default(),
        })
    }

    async fn submit_batch(&self, req: &BatchRequest) -> Result<Submitted, ActionError> {
        let argv = strs(req.argv()?);
        self.record("sbatch", argv.clone());
        let mut q = self.q.lock().unwrap();
        let r = pop(&mut q.sbatch, "sbatch", &argv);
        if let (Ok(s), false, true) = (&r, q.manual_hold, argv.iter().any(|a| a == "--hold")) {
            let text = held_row(s.job_id.get(), placed(&req.placement), req.name.as_str());
            q.held_probe = Some(live(&text));
        }
        drop(q);
        self.run_hooks("sbatch");
        r
    }

    async fn allocate(&self, req: &AllocRequest) -> Result<Allocated, ActionError> {
        let argv = strs(req.argv()?);
        self.record("salloc", argv.clone());
        let r = pop(&mut self.q.lock().unwrap().salloc, "salloc", &argv);
        self.run_hooks("salloc");
        r
    }

    /// From the `salloc` queue; like a held sbatch, a held salloc's name probe and release
    /// are answered automatically unless `manual_hold` is on.
    async fn allocate_held(
        &self,
        req: &AllocRequest,
        _log: &Path,
    ) -> Result<HeldAllocation, ActionError> {
        let argv = strs(req.argv()?);
        self.record("salloc", argv.clone());
        let mut q = self.q.lock().unwrap();
        let r = pop(&mut q.salloc, "salloc", &argv).map(|a| HeldAllocation { job_id: a.job_id });
        if let (Ok(a), false) = (&r, q.manual_hold) {
            q.held_probe = Some(live(&held_row(
                a.job_id.get(),
                placed(&req.placement),
                req.name.as_str(),
            )));
        }
        drop(q);
        self.run_hooks("salloc");
        r
    }

    async fn launch_step(&self, req: &StepRequest) -> Result<LaunchedStep, ActionError> {
        panic!("sessions never launch steps: {:?}", req.argv());
    }

    async fn list_jobs(&self, query: &JobQuery) -> Rows {
        let argv = strs(query.argv().unwrap());
        self.record("squeue", argv.clone());
        let mut q = self.q.lock().unwrap();
        match &query.select {
            JobSelect::Ids(_) if q.by_id.is_empty() && q.by_id_else.is_some() => {
                q.by_id_else.clone().unwrap()
            }
            JobSelect::Ids(_) => match pop(&mut q.by_id, "squeue --jobs", &argv) {
                Answer::Gone(dispatch::slurm::GoneProof::InvalidJobId { command, .. }) => {
                    let job = query.single_id().expect("Invalid job id is for one id");
                    Answer::Gone(dispatch::slurm::GoneProof::InvalidJobId { command, job })
                }
                other => other,
            },
            JobSelect::MineNamed(_) if q.held_probe.is_some() => q.held_probe.take().unwrap(),
            JobSelect::MineNamed(_) => match (q.by_name.is_empty(), &q.by_name_else) {
                (true, Some(rest)) => rest.clone(),
                _ => pop(&mut q.by_name, "squeue --name", &argv),
            },
            JobSelect::Mine if query.include_finished && q.mine.is_empty() && !q.manual_listing => {
                live(&row(
                    &OTHERS_JOB.to_string(),
                    "RUNNING",
                    "n0001",
                    ("other", "other", "normal"),
                    "not-a-session",
                ))
            }
            JobSelect::Mine => pop(&mut q.mine, "squeue --me", &argv),
        }
    }

    async fn list_steps(&self, job: JobId) -> Answer<Vec<StepRow>> {
        panic!("sessions never list steps of {job}");
    }

    async fn show_job(&self, job: JobId) -> Answer<Vec<JobDetails>> {
        panic!("sessions never run scontrol for {job}");
    }

    async fn accounting(&self, query: &AcctQuery) -> Answer<Vec<AcctRow>> {
        let argv = strs(query.argv().unwrap());
        self.record("sacct", argv.clone());
        pop(&mut self.q.lock().unwrap().sacct, "sacct", &argv)
    }

    async fn cancel_job(&self, job: JobId) -> Result<CancelReport, ActionError> {
        let argv = strs(CancelTarget::Job(job).argv());
        self.record("scancel", argv.clone());
        pop(&mut self.q.lock().unwrap().scancel, "scancel", &argv)
    }

    async fn release_job(&self, job: JobId) -> Result<(), ActionError> {
        let argv = vec!["release".to_owned(), job.to_string()];
        self.record("scontrol", argv.clone());
        let mut q = self.q.lock().unwrap();
        if q.release.is_empty() && !q.manual_hold {
            return Ok(());
        }
        pop(&mut q.release, "scontrol release", &argv)
    }

    async fn cancel_step(&self, step: StepId) -> Result<CancelReport, ActionError> {
        panic!("sessions never cancel steps: {step}");
    }

    async fn signal_step(
        &self,
        step: StepId,
        _signal: Signal,
    ) -> Result<CancelReport, ActionError> {
        panic!("sessions never signal steps: {step}");
    }

    async fn cancel_by_name(&self, name: &JobName) -> Result<CancelReport, ActionError> {
        panic!("sessions never cancel by name: {name}");
    }

    fn call_counts(&self) -> CallCounts {
        CallCounts::default()
    }

    /// Short, so that a wait for an interrupted submission (its limit plus the settle margin
    /// of `fast_waits`) lasts a tenth of a second.
    fn longest_call(&self) -> Duration {
        LONGEST_CALL
    }
}

// ---- answers

pub const FORMAT: &str = "--format=%i|%A|%T|%P|%a|%q|%u|%D|%C|%N|%L|%l|%S|%e|%r|%j";

/// The argv of the user's whole listing (`squeue --me --states=all`), which corroborates a name
/// probe that listed nothing (`policy::session::absence`).
pub fn mine_listing() -> Vec<String> {
    ["squeue", "--noheader", FORMAT, "--states=all", "--me"]
        .map(String::from)
        .to_vec()
}

/// The argv of the name probe for mirror `sample`.
pub fn name_probe() -> Vec<String> {
    [
        "squeue",
        "--noheader",
        FORMAT,
        "--me",
        "--name=sucoder-sample",
    ]
    .map(String::from)
    .to_vec()
}

/// The argv of a probe of job `n` by id.
pub fn by_id(n: u32) -> Vec<String> {
    vec![
        "squeue".into(),
        "--noheader".into(),
        FORMAT.into(),
        "--states=all".into(),
        format!("--jobs={n}"),
    ]
}

/// One squeue row in the driver's format.
pub fn row(id: &str, state: &str, node: &str, placement: (&str, &str, &str), name: &str) -> String {
    let own = id.split('_').next().unwrap();
    let own = if id.contains('_') {
        format!("{own}9")
    } else {
        own.to_owned()
    };
    let (p, a, q) = placement;
    format!("{id}|{own}|{state}|{p}|{a}|{q}|u|1|1|{node}|1:00:00|2:00:00|N/A|N/A|None|{name}\n")
}

/// The squeue row of job `n` as `sbatch --hold` leaves it: PENDING, reason `JobHeldUser`
/// (verified on the 22.05 dev cluster, 2026-12-01).
pub fn held_row(n: u32, placement: (&str, &str, &str), name: &str) -> String {
    row(&n.to_string(), "PENDING", "", placement, name).replace("|None|", "|JobHeldUser|")
}

/// The argv of `scontrol release N`.
pub fn release(n: u32) -> Vec<String> {
    vec!["scontrol".into(), "release".into(), n.to_string()]
}

pub fn live(text: &str) -> Rows {
    Answer::Live(parse_jobs(text).unwrap())
}

/// An answer with no rows (exit 0, empty): proves nothing by itself.
pub fn gone() -> Rows {
    Answer::Live(Vec::new())
}

/// "Invalid job id specified" for the one id asked (the real cluster's answer about a job
/// past MinJobAge); `list_jobs` puts the asked id in.
pub fn invalid_id() -> Rows {
    Answer::Gone(dispatch::slurm::GoneProof::InvalidJobId {
        command: SlurmCommand::Squeue,
        job: dispatch::slurm::JobId::new(1).unwrap(),
    })
}

pub fn failed(stderr: &str) -> SlurmError {
    SlurmError::Failed {
        command: SlurmCommand::Squeue,
        status: ExitInfo::Code(255),
        stdout: String::new(),
        stderr: stderr.to_owned(),
    }
}

pub fn unknown(stderr: &str) -> Rows {
    Answer::Unknown(failed(stderr))
}

pub fn unparsable(stdout: &str) -> Rows {
    Answer::Unknown(SlurmError::Unparsable {
        command: SlurmCommand::Squeue,
        source: dispatch::slurm::ParseError::new(
            dispatch::slurm::error::Parsed::SqueueJobRow,
            stdout,
            "bad row",
        ),
        stdout: stdout.to_owned(),
        stderr: String::new(),
    })
}

pub fn submitted(n: u32) -> Result<Submitted, ActionError> {
    Ok(Submitted {
        job_id: JobId::new(n).unwrap(),
        cluster: None,
    })
}

pub fn action_unknown(stderr: &str, hint: Option<u32>) -> ActionError {
    ActionError::Unknown {
        error: failed(stderr),
        job_hint: hint.and_then(JobId::new),
    }
}

pub fn scancel(code: i32, stderr: &str, n: u32) -> Result<CancelReport, ActionError> {
    Ok(CancelReport {
        target: CancelTarget::Job(JobId::new(n).unwrap()),
        status: ExitInfo::Code(code),
        stderr: stderr.to_owned(),
        said: if code == 0 {
            ScancelSaid::Accepted
        } else {
            ScancelSaid::Other
        },
    })
}

// ---- environment

/// What the scripted Slurm says its longest call may take.
pub const LONGEST_CALL: Duration = Duration::from_millis(40);

pub fn fast_waits() -> Waits {
    Waits {
        poll_first: Duration::from_millis(1),
        poll_max: Duration::from_millis(5),
        run_budget: Duration::from_millis(300),
        gone_budget: Duration::from_millis(30),
        unknown_polls: 3,
        submit_settle: Duration::from_millis(60),
    }
}

/// The session commands' environment over `slurm`, which the test keeps to script and check.
pub fn env<'a>(
    config: &'a Config,
    state_dir: &'a Path,
    slurm: &'a Scripted,
) -> Env<'a, &'a Scripted> {
    // Leaked: one small context and path per call, alive as long as the borrowed state dir.
    let ctx = Box::leak(Box::new(Ctx::new(
        dispatch::statedir::check(state_dir).expect("a test state directory passes the check"),
        slurm,
        dispatch::event::current_user(),
        PathBuf::from("/test/bin/dispatch"),
    )));
    Env {
        ctx,
        config,
        config_path: Path::new("/test/config.toml"),
        session_files: Box::leak(state_dir.join("sessions").into_boxed_path()),
        waits: fast_waits(),
        progress: &|_| {},
    }
}

/// sacct with no row of the job (exit 0, empty): what a session's gone job is asked about once
/// squeue no longer knows it (`ops::session::ended_of`); names no cause.
pub fn no_accounting() -> Answer<Vec<AcctRow>> {
    Answer::Live(Vec::new())
}
