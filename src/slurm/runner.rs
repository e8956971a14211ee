//! Runs one Slurm command: argv vector (never a shell string), bounded time, bounded
//! output, a debug log line and a counter bump per call.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

use super::error::{Excerpt, ParseError, SlurmError};

pub use super::command::{ExitInfo, SlurmCommand};

/// A finished child's answer.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: ExitInfo,
    /// Lossy UTF-8: invalid bytes become U+FFFD, which no parser accepts as a digit.
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// The child ran and did not exit as asked: its whole answer, kept.
    pub(crate) fn failed(self, command: SlurmCommand) -> SlurmError {
        SlurmError::Failed {
            command,
            status: self.status,
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }

    /// The child's answer does not parse: why, and its whole answer.
    pub(crate) fn unparsable(self, command: SlurmCommand, source: ParseError) -> SlurmError {
        SlurmError::Unparsable {
            command,
            source,
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }
}

/// Settings of the runner.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// `PATH` used to find the Slurm programs *and* given to them; `None` = this
    /// process's `PATH`. Tests point it at the fake without touching their own env.
    pub search_path: Option<OsString>,
    /// Extra environment for every child (after scrubbing).
    pub env: Vec<(OsString, OsString)>,
    /// Default bound of one call.
    pub timeout: Duration,
    /// After the timeout: SIGTERM, this long to exit (salloc then cancels its pending
    /// job), then SIGKILL.
    pub kill_grace: Duration,
    /// Beyond this many bytes on stdout or stderr the answer is unknown.
    pub max_output_bytes: usize,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            search_path: None,
            env: Vec::new(),
            timeout: Duration::from_secs(30),
            kill_grace: Duration::from_secs(2),
            max_output_bytes: 4 << 20,
        }
    }
}

/// Calls per command since the driver was made. Copyable snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCounts {
    counts: [u64; 7],
}

impl CallCounts {
    pub fn get(&self, command: SlurmCommand) -> u64 {
        self.counts[command.index()]
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Calls made between `earlier` and `self` (what an operation cost).
    pub fn since(&self, earlier: &CallCounts) -> CallCounts {
        let mut counts = [0; 7];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = self.counts[i].saturating_sub(earlier.counts[i]);
        }
        CallCounts { counts }
    }

    pub fn iter(&self) -> impl Iterator<Item = (SlurmCommand, u64)> + '_ {
        SlurmCommand::ALL.iter().map(|c| (*c, self.get(*c)))
    }
}

impl fmt::Display for CallCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (c, n) in self.iter().filter(|(_, n)| *n > 0) {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{c}={n}")?;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Counters {
    counts: [AtomicU64; 7],
}

/// Spawns Slurm commands. Cheap to clone; clones share counters.
#[derive(Debug, Clone)]
pub struct Runner {
    config: Arc<RunnerConfig>,
    counters: Arc<Counters>,
}

enum Stop {
    Exited(ExitStatus),
    TimedOut,
    TooLarge,
    Io(std::io::Error),
}

impl Runner {
    pub fn new(config: RunnerConfig) -> Runner {
        assert!(
            config.max_output_bytes > 0,
            "max_output_bytes must be positive"
        );
        Runner {
            config: Arc::new(config),
            counters: Arc::new(Counters::default()),
        }
    }

    pub fn config(&self) -> &RunnerConfig {
        &self.config
    }

    /// Same counters, other settings (e.g. extra environment for one call).
    pub fn with_config(&self, config: RunnerConfig) -> Runner {
        Runner {
            config: Arc::new(config),
            counters: Arc::clone(&self.counters),
        }
    }

    pub fn counts(&self) -> CallCounts {
        let mut counts = [0; 7];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = self.counters.counts[i].load(Ordering::Relaxed);
        }
        CallCounts { counts }
    }

    fn bump(&self, command: SlurmCommand) {
        self.counters.counts[command.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Finds the program on the search path. Empty and relative `PATH` entries are
    /// skipped: they would resolve against whatever directory we happen to run in.
    pub fn resolve(&self, command: SlurmCommand) -> Result<PathBuf, SlurmError> {
        let path = match &self.config.search_path {
            Some(p) => p.clone(),
            None => std::env::var_os("PATH").unwrap_or_default(),
        };
        for dir in std::env::split_paths(&path) {
            if !dir.is_absolute() {
                continue;
            }
            let candidate = dir.join(command.program());
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
        Err(SlurmError::Spawn {
            command,
            message: format!("{} not found on PATH {:?}", command.program(), path),
        })
    }

    fn command(&self, command: SlurmCommand, program: &Path, args: &[OsString]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args);
        for (key, _) in std::env::vars_os() {
            if should_scrub(command, &key) {
                cmd.env_remove(&key);
            }
        }
        // This process's failpoints are its own; a worker step or batch job (whose supervisor
        // reads the variable) gets only the items aimed at it (`worker:`, prefix stripped).
        cmd.env_remove(crate::failpoint::ENV);
        if matches!(command, SlurmCommand::Srun | SlurmCommand::Sbatch) {
            if let Some(spec) = crate::failpoint::worker_spec() {
                cmd.env(crate::failpoint::ENV, spec);
            }
        }
        if let Some(p) = &self.config.search_path {
            cmd.env("PATH", p);
        }
        for (k, v) in &self.config.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs to completion within `timeout`, capturing stdout and stderr.
    pub async fn run(
        &self,
        command: SlurmCommand,
        args: &[OsString],
        timeout: Duration,
    ) -> Result<Output, SlurmError> {
        self.bump(command);
        let started = Instant::now();
        let result = self.run_inner(command, args, timeout, started).await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok(out) => tracing::debug!(
                command = %command,
                argv = ?args,
                elapsed_ms,
                status = %out.status,
                stdout_bytes = out.stdout.len(),
                stderr = %Excerpt(out.stderr.trim_end()),
                "slurm call"
            ),
            Err(e) => tracing::debug!(
                command = %command,
                argv = ?args,
                elapsed_ms,
                error = %e,
                "slurm call failed"
            ),
        }
        result
    }

    async fn run_inner(
        &self,
        command: SlurmCommand,
        args: &[OsString],
        timeout: Duration,
        started: Instant,
    ) -> Result<Output, SlurmError> {
        let mut child = self.spawn_piped(command, args)?;
        let limit = self.config.max_output_bytes;
        let stop = child.drive(limit, started + timeout).await;
        if let Stop::Exited(status) = stop {
            debug_assert!(
                child.out.len() <= limit && child.err.len() <= limit,
                "a child that says too much is stopped"
            );
            return Ok(Output {
                status: ExitInfo::from_status(status),
                stdout: lossy(child.out),
                stderr: lossy(child.err),
            });
        }
        child.stop(limit, self.config.kill_grace).await;
        Err(match stop {
            Stop::TimedOut => SlurmError::Timeout {
                command,
                timeout,
                stdout: lossy(child.out),
                stderr: lossy(child.err),
            },
            Stop::TooLarge => SlurmError::OutputTooLarge { command, limit },
            Stop::Io(e) => SlurmError::Io {
                command,
                message: e.to_string(),
            },
            Stop::Exited(_) => unreachable!("handled above"),
        })
    }

    /// Start `command` with stdin from /dev/null and both outputs piped to us.
    fn spawn_piped(&self, command: SlurmCommand, args: &[OsString]) -> Result<Piped, SlurmError> {
        let program = self.resolve(command)?;
        let mut cmd = self.command(command, &program, args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| SlurmError::Spawn {
            command,
            message: format!("{}: {e}", program.display()),
        })?;
        let pid = child.id();
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(SlurmError::Io {
                command,
                message: "child pipes missing".to_owned(),
            });
        };
        Ok(Piped {
            child,
            pid,
            stdout,
            stderr,
            out: Vec::new(),
            err: Vec::new(),
            status: None,
        })
    }

    /// Starts a child that must outlive this process: own session (no controlling
    /// terminal, no signals from our process group), stdin from /dev/null, output to
    /// the given files. Returns its pid. The child is never waited for here; tokio
    /// reaps it in the background if it exits while we still run.
    pub fn spawn_detached(
        &self,
        command: SlurmCommand,
        args: &[OsString],
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<u32, SlurmError> {
        self.spawn_session(command, args, stdout, stderr)
            .map(|(_child, pid)| pid)
    }

    /// As [`Runner::spawn_detached`], keeping the child's handle: the caller may watch it
    /// exit while it runs (`try_wait`), and dropping the handle leaves the child running.
    pub fn spawn_session(
        &self,
        command: SlurmCommand,
        args: &[OsString],
        stdout: Stdio,
        stderr: Stdio,
    ) -> Result<(Child, u32), SlurmError> {
        self.bump(command);
        let started = Instant::now();
        let result = (|| {
            let program = self.resolve(command)?;
            let mut cmd = self.command(command, &program, args);
            cmd.stdin(Stdio::null())
                .stdout(stdout)
                .stderr(stderr)
                .kill_on_drop(false);
            crate::sys::new_session_on_spawn(&mut cmd);
            let child = cmd.spawn().map_err(|e| SlurmError::Spawn {
                command,
                message: format!("{}: {e}", program.display()),
            })?;
            let pid = child.id().ok_or_else(|| SlurmError::Io {
                command,
                message: "spawned child has no pid".to_owned(),
            })?;
            Ok((child, pid))
        })();
        let elapsed_ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok((_, pid)) => {
                tracing::debug!(command = %command, argv = ?args, elapsed_ms, pid, "slurm call detached")
            }
            Err(e) => {
                tracing::debug!(command = %command, argv = ?args, elapsed_ms, error = %e, "slurm call failed")
            }
        }
        result
    }
}

/// A child with its output piped to us, and what it has written so far.
struct Piped {
    child: Child,
    /// Taken at spawn: while `status` is `None` the child is not reaped, so it names our child.
    pid: Option<u32>,
    stdout: ChildStdout,
    stderr: ChildStderr,
    out: Vec<u8>,
    err: Vec<u8>,
    /// Set as soon as the child has been reaped.
    status: Option<ExitStatus>,
}

impl Piped {
    /// [`drive`] this child until `deadline`.
    async fn drive(&mut self, limit: usize, deadline: Instant) -> Stop {
        drive(
            &mut self.child,
            &mut self.stdout,
            &mut self.stderr,
            &mut self.out,
            &mut self.err,
            &mut self.status,
            limit,
            deadline,
        )
        .await
    }

    /// Stop a child that timed out, wrote too much or broke a pipe. SIGTERM first so that
    /// salloc can cancel the job it may have queued; keep reading meanwhile so its last words
    /// ("Pending job allocation N") are not lost; SIGKILL once `grace` is over.
    async fn stop(&mut self, limit: usize, grace: Duration) {
        if let (Some(pid), None) = (self.pid, self.status) {
            // Not reaped yet (status is None), so the pid still names our child.
            let _ = crate::sys::signal_process(pid, libc::SIGTERM);
        }
        let grace_end = Instant::now() + grace;
        let _ = self.drive(limit.saturating_mul(2), grace_end).await;
        if self.status.is_none() {
            let _ = self.child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        }
    }
}

/// Reads both pipes and waits for the child until it has exited and both pipes are at
/// EOF, or the deadline passes, or a pipe carries more than `limit` bytes. `status` is
/// set as soon as the child has been reaped.
#[allow(clippy::too_many_arguments)]
async fn drive<O, E>(
    child: &mut Child,
    stdout: &mut O,
    stderr: &mut E,
    out: &mut Vec<u8>,
    err: &mut Vec<u8>,
    status: &mut Option<ExitStatus>,
    limit: usize,
    deadline: Instant,
) -> Stop
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let mut out_done = false;
    let mut err_done = false;
    let mut obuf = [0u8; 8192];
    let mut ebuf = [0u8; 8192];
    let sleep = tokio::time::sleep_until(deadline.into());
    tokio::pin!(sleep);
    loop {
        if let (true, true, Some(s)) = (out_done, err_done, *status) {
            return Stop::Exited(s);
        }
        tokio::select! {
            r = stdout.read(&mut obuf), if !out_done => match r {
                Ok(0) => out_done = true,
                Ok(n) => {
                    out.extend_from_slice(&obuf[..n]);
                    if out.len() > limit {
                        return Stop::TooLarge;
                    }
                }
                Err(e) => return Stop::Io(e),
            },
            r = stderr.read(&mut ebuf), if !err_done => match r {
                Ok(0) => err_done = true,
                Ok(n) => {
                    err.extend_from_slice(&ebuf[..n]);
                    if err.len() > limit {
                        return Stop::TooLarge;
                    }
                }
                Err(e) => return Stop::Io(e),
            },
            s = child.wait(), if status.is_none() => match s {
                Ok(s) => *status = Some(s),
                Err(e) => return Stop::Io(e),
            },
            _ = &mut sleep => return Stop::TimedOut,
        }
    }
}

fn lossy(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Variables that must not reach a Slurm child: job context inherited from an enclosing
/// allocation (`SLURM_JOB_ID`, `SLURM_MEM_PER_CPU`, ...), output shaping
/// (`SLURM_TIME_FORMAT`) and per-command defaults/filters. `SLURM_CONF` says where the
/// cluster is and stays.
fn should_scrub(command: SlurmCommand, key: &OsStr) -> bool {
    let k = key.as_bytes();
    if k == b"SLURM_CONF" {
        return false;
    }
    if k.starts_with(b"SLURM_") {
        return true;
    }
    // The command's own prefix (`SBATCH_`, `SQUEUE_`, ...) changes what it does or prints:
    // filters such as `SQUEUE_STATES`/`SQUEUE_USERS` could turn a live job into an empty answer.
    let own = format!("{}_", command.program().to_ascii_uppercase());
    k.starts_with(own.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_rules() {
        for (command, key, scrub) in [
            (SlurmCommand::Squeue, "SQUEUE_STATES", true),
            (SlurmCommand::Squeue, "SLURM_TIME_FORMAT", true),
            (SlurmCommand::Srun, "SLURM_JOB_ID", true),
            (SlurmCommand::Srun, "SLURM_CONF", false),
            (SlurmCommand::Sacct, "SQUEUE_STATES", false),
            (SlurmCommand::Scancel, "SCANCEL_USER", true),
            (SlurmCommand::Squeue, "PATH", false),
        ] {
            assert_eq!(
                should_scrub(command, OsStr::new(key)),
                scrub,
                "{command} {key}"
            );
        }
    }

    #[test]
    fn counts_since() {
        let mut a = CallCounts::default();
        a.counts[SlurmCommand::Squeue.index()] = 2;
        let mut b = a;
        b.counts[SlurmCommand::Squeue.index()] = 5;
        b.counts[SlurmCommand::Sacct.index()] = 1;
        let d = b.since(&a);
        assert_eq!(d.get(SlurmCommand::Squeue), 3);
        assert_eq!(d.get(SlurmCommand::Sacct), 1);
        assert_eq!(d.total(), 4);
        assert_eq!(d.to_string(), "squeue=3, sacct=1");
        assert_eq!(CallCounts::default().to_string(), "none");
    }

    #[test]
    fn resolve_skips_relative_entries() {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("squeue");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut path = OsString::from("relative:");
        path.push(dir.path());
        let r = Runner::new(RunnerConfig {
            search_path: Some(path),
            ..RunnerConfig::default()
        });
        assert_eq!(r.resolve(SlurmCommand::Squeue).unwrap(), prog);
        assert!(r.resolve(SlurmCommand::Sbatch).is_err());
    }

    fn sh_runner(dir: &Path, script: &str, max: usize) -> Runner {
        let prog = dir.join("squeue");
        std::fs::write(&prog, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut path = OsString::from(dir);
        path.push(":/usr/bin:/bin");
        Runner::new(RunnerConfig {
            search_path: Some(path),
            kill_grace: Duration::from_millis(300),
            max_output_bytes: max,
            ..RunnerConfig::default()
        })
    }

    #[tokio::test]
    async fn captures_output_and_status() {
        let dir = tempfile::tempdir().unwrap();
        let r = sh_runner(dir.path(), "echo out; echo err >&2; exit 3", 1 << 20);
        let out = r
            .run(SlurmCommand::Squeue, &[], Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(out.status, ExitInfo::Code(3));
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(r.counts().get(SlurmCommand::Squeue), 1);
    }

    #[tokio::test]
    async fn timeout_kills_and_keeps_partial_output() {
        let dir = tempfile::tempdir().unwrap();
        let r = sh_runner(dir.path(), "echo partial >&2; exec sleep 30", 1 << 20);
        let t0 = Instant::now();
        let e = r
            .run(SlurmCommand::Squeue, &[], Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        match e {
            SlurmError::Timeout { stderr, .. } => assert_eq!(stderr, "partial\n"),
            other => panic!("{other}"),
        }
    }

    #[tokio::test]
    async fn output_limit() {
        let dir = tempfile::tempdir().unwrap();
        let r = sh_runner(dir.path(), "head -c 100000 /dev/zero", 1000);
        let e = r
            .run(SlurmCommand::Squeue, &[], Duration::from_secs(10))
            .await
            .unwrap_err();
        assert!(
            matches!(e, SlurmError::OutputTooLarge { limit: 1000, .. }),
            "{e}"
        );
    }

    #[tokio::test]
    async fn sets_path_and_explicit_env_for_the_child() {
        let dir = tempfile::tempdir().unwrap();
        let r = sh_runner(
            dir.path(),
            "echo \"${SLURM_JOB_ID-unset} ${SLURM_CONF-unset} $PATH\"",
            1 << 20,
        );
        // Children only: the assertion is about what the child saw.
        let r = Runner::new(RunnerConfig {
            env: vec![
                ("SLURM_JOB_ID".into(), "should-be-kept-explicit".into()),
                ("SLURM_CONF".into(), "/etc/x".into()),
            ],
            ..(*r.config).clone()
        });
        let out = r
            .run(SlurmCommand::Squeue, &[], Duration::from_secs(10))
            .await
            .unwrap();
        let expected_path = format!("{}:/usr/bin:/bin", dir.path().display());
        // Explicit config env wins over scrubbing (it is applied after).
        assert_eq!(
            out.stdout.trim(),
            format!("should-be-kept-explicit /etc/x {expected_path}")
        );
    }
}
