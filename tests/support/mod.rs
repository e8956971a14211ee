//! Shared by the real-cluster test binaries (`slurm_real`, `slurm_ctld_down`).
//!
//! Isolation: every real-cluster test holds a lock on one machine-wide file: shared for
//! ordinary tests, exclusive for the test that stops slurmctld. So the controller is
//! never stopped under another test, whether the tests run as threads of one binary,
//! as binaries one after another, or from two `cargo test` runs at once.
//!
//! Two dev clusters can run side by side (Slurm 22.05 and 24.11, `tools/slurm-dev-cluster
//! --slurm 24.11`); the tests use the one whose client commands come first on `PATH`. Each
//! has its own lock file, so the suites of both may run at once.

#![allow(dead_code)]

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dispatch::slurm::{Answer, CliConfig, CliScheduler, JobId, JobQuery, Scheduler};

const LOCK_WAIT: Duration = Duration::from_secs(600);

/// The Slurm release (`22.05`, `24.11`) of the dev cluster under test:
/// `DISPATCH_SLURM_DEV_CLUSTER_VERSION`, else what `scontrol --version` on `PATH` says
/// (`slurm 22.05.8`, `slurm-wlm 24.11.5`), else 22.05.
pub fn cluster_version() -> String {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION
        .get_or_init(|| {
            if let Some(v) = std::env::var_os("DISPATCH_SLURM_DEV_CLUSTER_VERSION") {
                return v.to_string_lossy().into_owned();
            }
            let out = Command::new("scontrol").arg("--version").output();
            let text = out
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            release_of(&text).unwrap_or_else(|| "22.05".to_owned())
        })
        .clone()
}

/// `slurm-wlm 24.11.5` -> `24.11`.
fn release_of(version_line: &str) -> Option<String> {
    let number = version_line.split_whitespace().nth(1)?;
    let mut parts = number.split('.');
    let (major, minor) = (parts.next()?, parts.next()?);
    Some(format!("{major}.{minor}"))
}

/// The machine-wide lock file of the cluster under test (22.05 keeps the historic name).
pub fn lock_path() -> String {
    match cluster_version().as_str() {
        "22.05" => "/tmp/dispatch-slurm-dev-cluster-tests.lock".to_owned(),
        v => format!("/tmp/dispatch-slurm-dev-cluster-tests-{v}.lock"),
    }
}

/// `tools/slurm-dev-cluster [--slurm VERSION]` for the cluster under test.
pub fn cluster_command() -> Command {
    let mut c = Command::new(cluster_script());
    let v = cluster_version();
    if v != "22.05" {
        c.args(["--slurm", &v]);
    }
    c
}

/// The project's cluster script; `DISPATCH_SLURM_DEV_CLUSTER` overrides the path (for a
/// worktree that does not carry the script yet).
pub fn cluster_script() -> PathBuf {
    match std::env::var_os("DISPATCH_SLURM_DEV_CLUSTER") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/slurm-dev-cluster"),
    }
}

pub struct ClusterLock {
    _file: File,
}

fn lock(exclusive: bool) -> ClusterLock {
    let path = lock_path();
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // flock(2) (std's File::lock); the lock goes with the process, also on a crash.
        let r = if exclusive {
            file.try_lock()
        } else {
            file.try_lock_shared()
        };
        match r {
            Ok(()) => return ClusterLock { _file: file },
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => panic!("could not lock {path} within {LOCK_WAIT:?}: {e}"),
        }
    }
}

/// For tests that use the cluster as it is.
pub fn shared_lock() -> ClusterLock {
    lock(false)
}

/// For the test that stops slurmctld.
pub fn exclusive_lock() -> ClusterLock {
    lock(true)
}

pub fn scheduler(timeout: Duration) -> CliScheduler {
    CliScheduler::new(CliConfig {
        timeout,
        ..CliConfig::default()
    })
}

/// Fails the test (never skips it) when the cluster does not answer.
pub async fn require_cluster(s: &CliScheduler) {
    if let Answer::Unknown(e) = s.list_jobs(&JobQuery::mine()).await {
        panic!(
            "the Slurm dev cluster is not reachable ({e}); run `tools/slurm-dev-cluster start` \
             (script: {})",
            cluster_script().display()
        );
    }
}

/// A unique, recognisable job name.
pub fn unique_name(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("dispatch-test-{tag}-{}-{nanos}", std::process::id())
}

/// Cancels every job it tracked when dropped, also when the test panics.
#[derive(Default)]
pub struct JobGuard {
    jobs: Mutex<Vec<JobId>>,
    sruns: Mutex<Vec<u32>>,
}

impl JobGuard {
    pub fn track(&self, job: JobId) {
        self.jobs.lock().unwrap().push(job);
    }

    pub fn track_srun(&self, pid: u32) {
        self.sruns.lock().unwrap().push(pid);
    }
}

impl Drop for JobGuard {
    fn drop(&mut self) {
        let jobs: Vec<String> = self
            .jobs
            .lock()
            .map(|j| j.iter().map(|j| j.to_string()).collect())
            .unwrap_or_default();
        if !jobs.is_empty() {
            run_bounded(Command::new("scancel").args(&jobs), Duration::from_secs(30));
        }
        // Backstop for srun clients whose step somehow survived: only if still srun.
        for pid in self.sruns.lock().map(|p| p.clone()).unwrap_or_default() {
            if std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "srun")
            {
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                }
            }
        }
    }
}

/// Runs a command to completion or kills it after `bound`; returns its success.
pub fn run_bounded(cmd: &mut Command, bound: Duration) -> bool {
    let Ok(mut child) = cmd.stdin(Stdio::null()).spawn() else {
        return false;
    };
    let deadline = Instant::now() + bound;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// Polls `f` until it returns `Some`, at most `bound`.
pub async fn poll<T, F, Fut>(bound: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + bound;
    loop {
        if let Some(t) = f().await {
            return Some(t);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A live, non-zombie process.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            !matches!(state, Some("Z") | Some("X"))
        }
        Err(_) => false,
    }
}

pub mod scripted;

/// `git -C dir args…` with a fixed identity; panics (showing git's stderr) when it fails.
pub fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.org"])
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
