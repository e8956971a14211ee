//! `dispatch worker run`: runs the payload in its own process group inside the step, keeps the
//! early-shutdown deadline (SIGTERM, then SIGKILL after a grace) and records in the worker's own
//! journal where it ran and how the payload ended.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use uuid::Uuid;

use super::events::*;
use crate::event::{Event, Micros};
use crate::failpoint;
use crate::journal::{JournalError, Options, Writer};

/// How often the supervisor looks at the payload and the clock.
const POLL: Duration = Duration::from_millis(50);

#[derive(Clone, Debug)]
pub struct RunSpec {
    pub submission_id: Uuid,
    pub evidence_dir: PathBuf,
    pub deadline: Micros,
    pub grace_s: u32,
    pub command: Vec<String>,
}

/// The argv that starts the supervisor around `payload`: what `pool submit` runs in a step and
/// `dispatch submit` in a batch job. `deadline` is seconds since the epoch, or `+N` after start.
pub fn command_line(
    exe: &Path,
    submission_id: Uuid,
    evidence_dir: &Path,
    deadline: &str,
    grace_s: u32,
    payload: &[String],
) -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = vec![
        exe.into(),
        "worker".into(),
        "run".into(),
        "--submission-id".into(),
        submission_id.to_string().into(),
        "--evidence-dir".into(),
        evidence_dir.into(),
        "--deadline".into(),
        deadline.into(),
        "--grace".into(),
        grace_s.to_string().into(),
        "--".into(),
    ];
    argv.extend(payload.iter().map(Into::into));
    argv
}

pub fn journal_dir(evidence_dir: &Path) -> PathBuf {
    evidence_dir.join("journal")
}

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn request_stop(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

fn install_stop_handlers() {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: the handler only performs an atomic store; the sigaction struct is zeroed
        // and then fully initialised for the fields the kernel reads.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = request_stop as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The CPUs this process may run on, as the kernel lists them.
pub fn cpu_set() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Cpus_allowed_list:")
                    .map(|v| v.trim().to_owned())
            })
        })
        .unwrap_or_default()
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn signal_group(pgid: u32, signal: libc::c_int) {
    // SAFETY: kill with a negative pid signals a process group; no memory is involved.
    unsafe {
        libc::kill(-(pgid as libc::pid_t), signal);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("worker journal: {0}")]
    Journal(#[from] JournalError),
    #[error("no command to run")]
    NoCommand,
}

/// Run the payload to its end. Returns the exit code the supervisor should exit with: the
/// payload's code, or 128 + the signal that ended it.
pub fn run(spec: &RunSpec) -> Result<i32, SupervisorError> {
    if spec.command.is_empty() {
        return Err(SupervisorError::NoCommand);
    }
    let journal = Writer::open(&journal_dir(&spec.evidence_dir), Options::default())?;
    install_stop_handlers();
    journal.append_one(Event::SupervisorStarted(SupervisorStarted {
        submission_id: spec.submission_id,
        job_id: env_number("SLURM_JOB_ID"),
        step_id: env_number("SLURM_STEP_ID"),
        node: std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| crate::event::current_host()),
        cpu_set: cpu_set(),
        deadline: spec.deadline,
        grace_s: spec.grace_s,
        command: spec.command.clone(),
    }))?;
    failpoint::hit("supervisor-before-spawn");
    let spawned = Command::new(&spec.command[0])
        .args(&spec.command[1..])
        .process_group(0)
        .stdin(Stdio::null())
        .env("DISPATCH_DEADLINE", spec.deadline.secs().to_string())
        .env("DISPATCH_EVIDENCE_DIR", &spec.evidence_dir)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dispatch worker: cannot start {:?}: {e}", spec.command[0]);
            journal.append_one(Event::PayloadExited(PayloadExited {
                code: Some(127),
                signal: None,
                interrupted: false,
            }))?;
            return Ok(127);
        }
    };
    let pgid = child.id();
    journal.append_one(Event::PayloadStarted(PayloadStarted { pid: pgid }))?;

    let mut term_sent_at: Option<Micros> = None;
    let mut kill_sent = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                eprintln!("dispatch worker: waiting for the payload failed: {e}; killing it");
                signal_group(pgid, libc::SIGKILL);
                break child
                    .wait()
                    .unwrap_or_else(|_| std::process::ExitStatus::from_raw(libc::SIGKILL));
            }
        }
        let now = Micros::now();
        match term_sent_at {
            None => {
                let stop = STOP_REQUESTED.load(Ordering::SeqCst);
                if stop || now >= spec.deadline {
                    signal_group(pgid, libc::SIGTERM);
                    term_sent_at = Some(now);
                    let reason = if stop { "forwarded" } else { "deadline" };
                    journal.append_one(Event::ShutdownSignalled(ShutdownSignalled {
                        signal: "TERM".to_owned(),
                        reason: reason.to_owned(),
                    }))?;
                }
            }
            Some(at) if !kill_sent && now.0 - at.0 >= i64::from(spec.grace_s) * 1_000_000 => {
                signal_group(pgid, libc::SIGKILL);
                kill_sent = true;
                journal.append_one(Event::ShutdownSignalled(ShutdownSignalled {
                    signal: "KILL".to_owned(),
                    reason: "grace".to_owned(),
                }))?;
            }
            Some(_) => {}
        }
        std::thread::sleep(POLL);
    };
    // The step is the cleanup boundary: nothing the payload started outlives it.
    signal_group(pgid, libc::SIGKILL);
    let exited = PayloadExited {
        code: status.code(),
        signal: status.signal(),
        interrupted: term_sent_at.is_some() || status.signal().is_some(),
    };
    failpoint::hit("supervisor-before-exit-record");
    journal.append_one(Event::PayloadExited(exited.clone()))?;
    Ok(exited
        .code
        .unwrap_or_else(|| 128 + exited.signal.unwrap_or(0)))
}
