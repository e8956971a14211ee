//! The `Scheduler` boundary and its real implementation over the Slurm CLI.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::future::Future;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::answer::{Answer, GoneProof};
use super::error::{ParseError, SlurmError};
use super::ids::{JobId, StepId};
use super::request::{
    comment_argv, release_argv, show_job_argv, steps_argv, AcctQuery, AllocRequest, BatchRequest,
    CancelTarget, JobName, JobQuery, Signal, StepRequest,
};
use super::runner::{CallCounts, ExitInfo, Output, Runner, RunnerConfig, SlurmCommand};
use super::sacct::{parse_rows, AcctRow};
use super::scontrol::{parse_show_job, JobDetails};
use super::squeue::{parse_jobs, parse_steps, JobRow, StepRow};
use super::submit::{parse_salloc, parse_sbatch_parsable, Submitted};

/// The phrase Slurm uses when a job id is unknown to the controller.
pub const INVALID_JOB_ID: &str = "Invalid job id specified";

use super::action::failed_submission;
pub use super::action::ActionError;
pub use super::held_salloc::HeldAllocation;

/// What `sbatch --test-only` said it would do (its one stderr line, the same on 22.05 and
/// 24.11: `sbatch: Job N to start at T using C processors on nodes L in partition P`; the id
/// is not the one a real submission gets, and nothing was created).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestedBatch {
    pub start: String,
    pub cpus: u32,
    pub nodes: String,
    pub partition: String,
}

/// Parse `sbatch --test-only`'s answer; `None` for anything else.
pub fn parse_test_only(stderr: &str) -> Option<TestedBatch> {
    stderr.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("sbatch: Job ")?;
        let (_id, rest) = rest.split_once(" to start at ")?;
        let (start, rest) = rest.split_once(" using ")?;
        let (cpus, rest) = rest.split_once(" processors on nodes ")?;
        let (nodes, partition) = rest.split_once(" in partition ")?;
        Some(TestedBatch {
            start: start.to_owned(),
            cpus: cpus.parse().ok()?,
            nodes: nodes.to_owned(),
            partition: partition.trim().to_owned(),
        })
    })
}

/// salloc granted an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocated {
    pub job_id: JobId,
}

/// An srun client was started, detached. The step exists only once a query shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchedStep {
    pub srun_pid: u32,
}

/// What scancel said, in the words we recognise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScancelSaid {
    /// Exit 0 and nothing on stderr. scancel says this for unknown ids too.
    Accepted,
    InvalidJobId,
    AccessDenied,
    Other,
}

/// scancel's answer. It proves nothing: termination is proven by a later query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelReport {
    pub target: CancelTarget,
    pub status: ExitInfo,
    pub stderr: String,
    pub said: ScancelSaid,
}

impl CancelReport {
    /// Why scancel did not accept the cancel, in its words; `None` when it did (exit 0, nothing
    /// on stderr). A cancel by name that scancel did not accept leaves unknown whether anything
    /// of that name is left.
    pub fn not_accepted(&self) -> Option<String> {
        (self.said != ScancelSaid::Accepted)
            .then(|| format!("scancel said {:?}: {}", self.said, self.stderr.trim()))
    }
}

/// The Slurm boundary. Queries give [`Answer`]s; actions give a definite result or an
/// [`ActionError`] that says whether anything may have happened.
pub trait Scheduler: Send + Sync {
    /// `sbatch --parsable ...`.
    fn submit_batch(
        &self,
        req: &BatchRequest,
    ) -> impl Future<Output = Result<Submitted, ActionError>> + Send;

    /// `sbatch --test-only ...`: would Slurm take this job, and where and when would it start?
    /// Nothing is submitted (`--dry-run`). A scheduler that cannot ask says so as an error.
    fn test_batch(
        &self,
        req: &BatchRequest,
    ) -> impl Future<Output = Result<TestedBatch, SlurmError>> + Send {
        let _ = req;
        async {
            Err(SlurmError::Spawn {
                command: SlurmCommand::Sbatch,
                message: "this scheduler cannot test a job without submitting it".to_owned(),
            })
        }
    }

    /// `salloc --no-shell ...`; the job id comes from stderr.
    fn allocate(
        &self,
        req: &AllocRequest,
    ) -> impl Future<Output = Result<Allocated, ActionError>> + Send;

    /// `salloc --hold --no-shell ...` (`req.hold` set; without it, a job queued as usual), its
    /// salloc running on in the background with its stderr in `log`: returns once it names the
    /// job. A scheduler whose callers never
    /// hold an allocation (the pool simulation) keeps this default, which allocates nothing.
    fn allocate_held(
        &self,
        req: &AllocRequest,
        log: &Path,
    ) -> impl Future<Output = Result<HeldAllocation, ActionError>> + Send {
        let _ = (req, log);
        async {
            Err(ActionError::Local(
                "this scheduler cannot hold an allocation".to_owned(),
            ))
        }
    }

    /// `srun --jobid=J [--overlap] ... -- CMD`, detached so it outlives this process (pool
    /// workers run without `--overlap`: each step gets CPUs no other step holds).
    fn launch_step(
        &self,
        req: &StepRequest,
    ) -> impl Future<Output = Result<LaunchedStep, ActionError>> + Send;

    /// squeue by ids, by name (always `--me`), or all of the user's jobs.
    fn list_jobs(&self, query: &JobQuery) -> impl Future<Output = Answer<Vec<JobRow>>> + Send;

    /// The running steps of a job (`squeue --steps`); none is `Live(vec![])`, which proves
    /// nothing about a step unless the job is listed beside it. `Gone`: the job is unknown.
    fn list_steps(&self, job: JobId) -> impl Future<Output = Answer<Vec<StepRow>>> + Send;

    /// `scontrol --oneliner show job J` (several records for an array).
    fn show_job(&self, job: JobId) -> impl Future<Output = Answer<Vec<JobDetails>>> + Send;

    /// sacct rows for jobs and their steps. Never `Gone`: a missing row may be lag, so
    /// an empty answer is `Unknown(NotInAccounting)`.
    fn accounting(&self, query: &AcctQuery) -> impl Future<Output = Answer<Vec<AcctRow>>> + Send;

    /// `scancel J`.
    fn cancel_job(
        &self,
        job: JobId,
    ) -> impl Future<Output = Result<CancelReport, ActionError>> + Send;

    /// `scontrol release J`: a job submitted with `--hold` may now be scheduled. Exit 0 is
    /// the only success; anything else is unknown (a query shows whether it is still held).
    /// A scheduler whose callers never submit held (the pool simulation) keeps this default,
    /// which releases nothing and says so.
    fn release_job(&self, job: JobId) -> impl Future<Output = Result<(), ActionError>> + Send {
        async move {
            Err(ActionError::Local(format!(
                "this scheduler cannot release held job {job}"
            )))
        }
    }

    /// `scontrol update JobId=J Comment=TEXT`, as `release_job`: exit 0 is the only success
    /// (a read of the job shows whether it took). A scheduler whose callers never mark an
    /// allocation keeps this default, which sets nothing and says so.
    fn set_comment(
        &self,
        job: JobId,
        comment: &str,
    ) -> impl Future<Output = Result<(), ActionError>> + Send {
        let _ = comment;
        async move {
            Err(ActionError::Local(format!(
                "this scheduler cannot set the comment of job {job}"
            )))
        }
    }

    /// `scancel J.S`: that step only; the allocation and other steps keep running.
    fn cancel_step(
        &self,
        step: StepId,
    ) -> impl Future<Output = Result<CancelReport, ActionError>> + Send;

    /// `scancel --signal=SIG J.S`.
    fn signal_step(
        &self,
        step: StepId,
        signal: Signal,
    ) -> impl Future<Output = Result<CancelReport, ActionError>> + Send;

    /// `scancel --me --name=N`.
    fn cancel_by_name(
        &self,
        name: &JobName,
    ) -> impl Future<Output = Result<CancelReport, ActionError>> + Send;

    /// Slurm calls made so far, per command.
    fn call_counts(&self) -> CallCounts;

    /// The longest one call may run before the driver gives up on it (timeout and kill
    /// grace): an sbatch started by a process that died is over, or orphaned, after this.
    fn longest_call(&self) -> Duration {
        let d = RunnerConfig::default();
        d.timeout + d.kill_grace
    }
}

/// Each async method of [`Scheduler`] for `&T`, handed to `T`'s own.
macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {$(
        fn $method(&self, $($arg: $ty),*) -> impl Future<Output = $out> + Send {
            (**self).$method($($arg),*)
        }
    )*};
}

/// A scheduler may be borrowed (`ops::context::Ctx<&S>`): the seeded simulation runs sessions and pools,
/// each with its own state directory, against one simulated cluster, and the scripted session
/// tests keep their Slurm to script and check it. Every method forwards, the defaulted ones too
/// (a default here would answer for the borrowed scheduler's own, e.g. `test_batch`).
impl<T: Scheduler> Scheduler for &T {
    forward! {
        submit_batch(req: &BatchRequest) -> Result<Submitted, ActionError>;
        test_batch(req: &BatchRequest) -> Result<TestedBatch, SlurmError>;
        allocate(req: &AllocRequest) -> Result<Allocated, ActionError>;
        allocate_held(req: &AllocRequest, log: &Path) -> Result<HeldAllocation, ActionError>;
        launch_step(req: &StepRequest) -> Result<LaunchedStep, ActionError>;
        list_jobs(query: &JobQuery) -> Answer<Vec<JobRow>>;
        list_steps(job: JobId) -> Answer<Vec<StepRow>>;
        show_job(job: JobId) -> Answer<Vec<JobDetails>>;
        accounting(query: &AcctQuery) -> Answer<Vec<AcctRow>>;
        cancel_job(job: JobId) -> Result<CancelReport, ActionError>;
        release_job(job: JobId) -> Result<(), ActionError>;
        set_comment(job: JobId, comment: &str) -> Result<(), ActionError>;
        cancel_step(step: StepId) -> Result<CancelReport, ActionError>;
        signal_step(step: StepId, signal: Signal) -> Result<CancelReport, ActionError>;
        cancel_by_name(name: &JobName) -> Result<CancelReport, ActionError>;
    }

    fn call_counts(&self) -> CallCounts {
        (**self).call_counts()
    }

    fn longest_call(&self) -> Duration {
        (**self).longest_call()
    }
}

/// Configuration of [`CliScheduler`].
pub type CliConfig = RunnerConfig;

/// The real driver: runs the Slurm client programs.
#[derive(Debug, Clone)]
pub struct CliScheduler {
    runner: Runner,
}

impl CliScheduler {
    pub fn new(config: CliConfig) -> CliScheduler {
        CliScheduler {
            runner: Runner::new(config),
        }
    }

    pub fn config(&self) -> &CliConfig {
        self.runner.config()
    }

    fn timeout(&self) -> Duration {
        self.runner.config().timeout
    }

    async fn query<T>(
        &self,
        command: SlurmCommand,
        args: Vec<OsString>,
        single_id: Option<JobId>,
        parse: impl FnOnce(&str) -> Result<Vec<T>, ParseError>,
    ) -> Answer<Vec<T>> {
        let out = match self.runner.run(command, &args, self.timeout()).await {
            Ok(out) => out,
            Err(e) => return Answer::Unknown(e),
        };
        classify_query(command, out, single_id, parse)
    }

    /// An `scontrol` action whose exit 0 is its only success; anything else is unknown.
    async fn scontrol_action(&self, argv: &[std::ffi::OsString]) -> Result<(), ActionError> {
        let out = self
            .runner
            .run(SlurmCommand::Scontrol, argv, self.timeout())
            .await
            .map_err(ActionError::unknown)?;
        if out.status.success() {
            return Ok(());
        }
        Err(ActionError::unknown(out.failed(SlurmCommand::Scontrol)))
    }

    async fn cancel(&self, target: CancelTarget) -> Result<CancelReport, ActionError> {
        let args = target.argv();
        let out = self
            .runner
            .run(SlurmCommand::Scancel, &args, self.timeout())
            .await
            .map_err(ActionError::unknown)?;
        let said = if out.stderr.contains(INVALID_JOB_ID) {
            ScancelSaid::InvalidJobId
        } else if out.stderr.contains("Access/permission denied")
            || out.stderr.contains("Invalid user id")
        {
            ScancelSaid::AccessDenied
        } else if out.status.success() && out.stderr.trim().is_empty() {
            ScancelSaid::Accepted
        } else {
            ScancelSaid::Other
        };
        Ok(CancelReport {
            target,
            status: out.status,
            stderr: out.stderr,
            said,
        })
    }
}

/// The Live/Gone/Unknown rule for squeue and scontrol. An empty successful answer is
/// `Live` with no rows: it proves nothing by itself.
fn classify_query<T>(
    command: SlurmCommand,
    out: Output,
    single_id: Option<JobId>,
    parse: impl FnOnce(&str) -> Result<Vec<T>, ParseError>,
) -> Answer<Vec<T>> {
    if !out.status.success() {
        // Only for one specific id: with several ids the message cannot say which one.
        if let Some(job) = single_id {
            if out.stderr.contains(INVALID_JOB_ID) && out.stdout.trim().is_empty() {
                return Answer::Gone(GoneProof::InvalidJobId { command, job });
            }
        }
        return Answer::Unknown(out.failed(command));
    }
    // squeue prints format errors on stderr and still exits 0 (notes §3.2).
    if out.stderr.to_ascii_lowercase().contains("error") {
        return Answer::Unknown(SlurmError::ErrorOnSuccess {
            command,
            stdout: out.stdout,
            stderr: out.stderr,
        });
    }
    match parse(&out.stdout) {
        Ok(rows) if rows.is_empty() => {
            if out.stdout.trim().is_empty() {
                Answer::Live(rows)
            } else {
                // Non-blank text that yields no rows cannot happen with our parsers;
                // refuse to call it empty if it ever does.
                let source = ParseError::new(
                    super::error::Parsed::Output,
                    &out.stdout,
                    "text without rows",
                );
                Answer::Unknown(out.unparsable(command, source))
            }
        }
        Ok(rows) => Answer::Live(rows),
        Err(source) => Answer::Unknown(out.unparsable(command, source)),
    }
}

impl Scheduler for CliScheduler {
    async fn submit_batch(&self, req: &BatchRequest) -> Result<Submitted, ActionError> {
        let args = req.argv()?;
        let out = self
            .runner
            .run(SlurmCommand::Sbatch, &args, self.timeout())
            .await
            .map_err(|e| ActionError::unanswered(e, None))?;
        if !out.status.success() {
            return Err(failed_submission(SlurmCommand::Sbatch, out, None));
        }
        parse_sbatch_parsable(&out.stdout).map_err(|source| {
            ActionError::unknown(out.clone().unparsable(SlurmCommand::Sbatch, source))
        })
    }

    async fn test_batch(&self, req: &BatchRequest) -> Result<TestedBatch, SlurmError> {
        let mut args = req.argv().map_err(|e| SlurmError::Spawn {
            command: SlurmCommand::Sbatch,
            message: e.to_string(),
        })?;
        args.insert(0, "--test-only".into());
        let out = self
            .runner
            .run(SlurmCommand::Sbatch, &args, self.timeout())
            .await?;
        if !out.status.success() {
            return Err(out.failed(SlurmCommand::Sbatch));
        }
        parse_test_only(&out.stderr).ok_or(SlurmError::ErrorOnSuccess {
            command: SlurmCommand::Sbatch,
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }

    async fn allocate(&self, req: &AllocRequest) -> Result<Allocated, ActionError> {
        let args = req.argv()?;
        let timeout =
            self.timeout() + Duration::from_secs(u64::from(req.immediate_secs.unwrap_or(0)));
        let result = self.runner.run(SlurmCommand::Salloc, &args, timeout).await;
        let out = match result {
            Ok(out) => out,
            Err(error) => {
                let job_hint = error
                    .stderr()
                    .and_then(|s| parse_salloc(s).ok())
                    .and_then(|r| r.job());
                return Err(ActionError::unanswered(error, job_hint));
            }
        };
        let report = match parse_salloc(&out.stderr) {
            Ok(r) => r,
            Err(source) => {
                return Err(ActionError::unknown(
                    out.unparsable(SlurmCommand::Salloc, source),
                ))
            }
        };
        match (out.status.success(), report.granted) {
            (true, Some(job_id)) => Ok(Allocated { job_id }),
            (true, None) => {
                let source = ParseError::new(
                    super::error::Parsed::SallocOutput,
                    &out.stderr,
                    "exit 0 without 'Granted job allocation N'",
                );
                Err(ActionError::Unknown {
                    job_hint: report.job(),
                    error: out.unparsable(SlurmCommand::Salloc, source),
                })
            }
            (false, _) => Err(failed_submission(SlurmCommand::Salloc, out, report.job())),
        }
    }

    async fn allocate_held(
        &self,
        req: &AllocRequest,
        log: &Path,
    ) -> Result<HeldAllocation, ActionError> {
        let config = self.runner.config();
        super::held_salloc::allocate_held(&self.runner, req, log, config.timeout, config.kill_grace)
            .await
    }

    async fn launch_step(&self, req: &StepRequest) -> Result<LaunchedStep, ActionError> {
        let args = req.argv()?;
        // Environment for the step travels as `--export`-free inheritance: srun passes
        // its own environment to the task. Put it on a dedicated runner config so the
        // shared runner stays untouched.
        let runner = if req.env.is_empty() {
            self.runner.clone()
        } else {
            let mut config = self.runner.config().clone();
            config
                .env
                .extend(req.env.iter().map(|(k, v)| (OsString::from(k), v.clone())));
            self.runner.with_config(config)
        };
        let (stdout, stderr) = match &req.client_log {
            Some(path) => {
                let f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| ActionError::Local(format!("{}: {e}", path.display())))?;
                let g = f
                    .try_clone()
                    .map_err(|e| ActionError::Local(format!("{}: {e}", path.display())))?;
                (Stdio::from(f), Stdio::from(g))
            }
            None => (Stdio::null(), Stdio::null()),
        };
        let srun_pid = runner
            .spawn_detached(SlurmCommand::Srun, &args, stdout, stderr)
            .map_err(|e| ActionError::unanswered(e, None))?;
        Ok(LaunchedStep { srun_pid })
    }

    async fn list_jobs(&self, query: &JobQuery) -> Answer<Vec<JobRow>> {
        let args = match query.argv() {
            Ok(a) => a,
            // No ids asked: nothing was looked up, and nothing can be said to be gone.
            Err(source) => {
                return Answer::Unknown(SlurmError::InvalidRequest {
                    command: SlurmCommand::Squeue,
                    source,
                })
            }
        };
        self.query(SlurmCommand::Squeue, args, query.single_id(), parse_jobs)
            .await
    }

    async fn list_steps(&self, job: JobId) -> Answer<Vec<StepRow>> {
        self.query(
            SlurmCommand::Squeue,
            steps_argv(job),
            Some(job),
            parse_steps,
        )
        .await
    }

    async fn show_job(&self, job: JobId) -> Answer<Vec<JobDetails>> {
        self.query(
            SlurmCommand::Scontrol,
            show_job_argv(job),
            Some(job),
            parse_show_job,
        )
        .await
    }

    async fn accounting(&self, query: &AcctQuery) -> Answer<Vec<AcctRow>> {
        let args = match query.argv() {
            Ok(a) => a,
            Err(source) => {
                return Answer::Unknown(SlurmError::InvalidRequest {
                    command: SlurmCommand::Sacct,
                    source,
                })
            }
        };
        // sacct never says a job does not exist: "Invalid job id" is not its language
        // and an empty answer may be lag. So no `Gone` here, and no empty `Live` either.
        match self
            .query(SlurmCommand::Sacct, args, None, parse_rows)
            .await
        {
            Answer::Live(rows) if rows.is_empty() => Answer::Unknown(SlurmError::NotInAccounting {
                command: SlurmCommand::Sacct,
            }),
            Answer::Gone(_) => unreachable!("no single id was given"),
            other => other,
        }
    }

    async fn cancel_job(&self, job: JobId) -> Result<CancelReport, ActionError> {
        self.cancel(CancelTarget::Job(job)).await
    }

    async fn release_job(&self, job: JobId) -> Result<(), ActionError> {
        self.scontrol_action(&release_argv(job)).await
    }

    async fn set_comment(&self, job: JobId, comment: &str) -> Result<(), ActionError> {
        self.scontrol_action(&comment_argv(job, comment)).await
    }

    async fn cancel_step(&self, step: StepId) -> Result<CancelReport, ActionError> {
        self.cancel(CancelTarget::Step(step)).await
    }

    async fn signal_step(&self, step: StepId, signal: Signal) -> Result<CancelReport, ActionError> {
        self.cancel(CancelTarget::SignalStep(step, signal)).await
    }

    async fn cancel_by_name(&self, name: &JobName) -> Result<CancelReport, ActionError> {
        self.cancel(CancelTarget::MineNamed(name.clone())).await
    }

    fn call_counts(&self) -> CallCounts {
        self.runner.counts()
    }

    fn longest_call(&self) -> Duration {
        self.timeout() + self.runner.config().kill_grace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(code: i32, stdout: &str, stderr: &str) -> Output {
        Output {
            status: ExitInfo::Code(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    fn classify(o: Output, single: Option<JobId>) -> Answer<Vec<JobRow>> {
        classify_query(SlurmCommand::Squeue, o, single, parse_jobs)
    }

    #[test]
    fn the_rule() {
        let one = JobId::new(7);
        let empty = |a: Answer<Vec<JobRow>>| matches!(a, Answer::Live(rows) if rows.is_empty());
        assert!(empty(classify(out(0, "", ""), one)), "empty is not gone");
        assert!(empty(classify(out(0, "\n", ""), None)));
        let invalid = "slurm_load_jobs error: Invalid job id specified\n";
        match classify(out(1, "", invalid), one) {
            Answer::Gone(p) => assert_eq!(
                p.to_string(),
                "squeue said \"Invalid job id specified\" for job 7"
            ),
            other => panic!("{other:?}"),
        }
        assert!(
            classify(out(1, "", invalid), None).is_unknown(),
            "several ids: which one?"
        );
        let down = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n";
        assert!(classify(out(1, "", down), one).is_unknown());
        assert!(classify(out(0, "garbage\n", ""), one).is_unknown());
        assert!(classify(
            out(
                0,
                "",
                "squeue: error: Invalid job format specification: T\n"
            ),
            one
        )
        .is_unknown());
        assert!(classify(out(1, "", ""), one).is_unknown());
        let row = "1|1|RUNNING|debug|dev|normal|root|1|1|vm|9:58|10:00|N/A|N/A|None|x\n";
        assert!(classify(out(0, row, ""), one).is_live());
        match classify(out(0, "garbage\n", ""), one) {
            Answer::Unknown(SlurmError::Unparsable { stdout, source, .. }) => {
                assert_eq!(stdout, "garbage\n");
                assert_eq!(source.raw, "garbage");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[cfg(test)]
mod test_only_tests {
    use super::*;

    #[test]
    fn test_only_answers_parse_and_nothing_else_does() {
        // Recorded on the dev cluster (22.05 and 24.11 alike).
        let said = "sbatch: Job 1003 to start at 2026-12-01T11:34:43 using 1 processors on nodes vm in partition debug\n";
        assert_eq!(
            parse_test_only(said),
            Some(TestedBatch {
                start: "2026-12-01T11:34:43".into(),
                cpus: 1,
                nodes: "vm".into(),
                partition: "debug".into(),
            })
        );
        assert_eq!(
            parse_test_only("allocation failure: Invalid partition name specified\n"),
            None
        );
        assert_eq!(parse_test_only(""), None);
    }
}
