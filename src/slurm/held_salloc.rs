//! `salloc --hold --no-shell` for the CLI driver: a held allocation whose salloc outlives the
//! call (and this process).
//!
//! salloc queues its job held, names it on stderr (`Pending job allocation N`) and then waits
//! for the grant, which comes only after `scontrol release N`. Stopped by TERM or INT before
//! it, salloc cancels its job; killed with KILL, it leaves the job held, and a job released
//! after its salloc died is killed by the controller (`Killing interactive JobId=N:
//! Communication connection failure`, about 10 s after the grant, seen on 22.05). So salloc runs in its own session (no signal of this process group
//! reaches it), with its stderr in a file rather than a pipe (a pipe would break when this
//! process dies, and salloc with it), and the call returns as soon as the file names the job.
//! Whoever settles the hold later — this launch, or the next one after a crash — finds a
//! salloc still waiting for the grant. A request without `--hold` (a pool's renewal) is queued
//! as usual, and its salloc waits for the grant in the background the same way.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::action::{failed_submission, ActionError};
use super::error::{Parsed, SlurmError};
use super::ids::JobId;
use super::request::AllocRequest;
use super::runner::{ExitInfo, Output, Runner, SlurmCommand};
use super::submit::parse_salloc;

/// `salloc --hold` named its job, which waits held for `scontrol release` (then Slurm grants
/// it and the salloc, still running, exits) or `scancel`. (A salloc that says "Granted" at
/// once names a job that was not held; `scontrol release` of it succeeds and changes nothing.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldAllocation {
    pub job_id: JobId,
}

/// How often the log is read while salloc has not yet named its job.
const POLL: Duration = Duration::from_millis(20);

/// The most of salloc's log that is read: it prints a few short lines before the job id.
const MAX_LOG_BYTES: usize = 64 * 1024;

/// Start `salloc` with its stderr in `log` (replaced, see
/// [`create_log`]), and return once it names its job, within `timeout`. A salloc that exits first is a refusal or an
/// unknown outcome, read as a foreground salloc's would be; one that names nothing within
/// `timeout` is stopped with SIGTERM (salloc then cancels the job it may have queued) and the
/// outcome is unknown.
pub async fn allocate_held(
    runner: &Runner,
    req: &AllocRequest,
    log: &Path,
    timeout: Duration,
    kill_grace: Duration,
) -> Result<HeldAllocation, ActionError> {
    let args = req.argv()?;
    let local = |e| ActionError::Local(format!("salloc log {}: {e}", log.display()));
    let file = create_log(log).map_err(local)?;
    let stderr = file.try_clone().map_err(local)?;
    let (mut child, pid) = runner
        .spawn_session(SlurmCommand::Salloc, &args, Stdio::null(), stderr.into())
        .map_err(|e| ActionError::unanswered(e, None))?;
    let mut text = Lines::default();
    let deadline = Instant::now() + timeout;
    loop {
        text.read_from(&file);
        match parse_salloc(text.complete()) {
            Ok(report) => {
                if let Some(job_id) = report.job() {
                    return Ok(HeldAllocation { job_id });
                }
            }
            Err(source) => return Err(unparsable(source, text.all())),
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                text.read_from(&file);
                return Err(exited(ExitInfo::from_status(status), &text));
            }
            Ok(None) => {}
            Err(e) => {
                return Err(ActionError::unanswered(
                    SlurmError::Io {
                        command: SlurmCommand::Salloc,
                        message: e.to_string(),
                    },
                    None,
                ))
            }
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    // Not reaped (try_wait said it runs), so the pid still names our child.
    let _ = crate::sys::signal_process(pid, libc::SIGTERM);
    let _ = tokio::time::timeout(kill_grace, child.wait()).await;
    text.read_from(&file);
    let hint = parse_salloc(text.all()).ok().and_then(|r| r.job());
    Err(ActionError::Unknown {
        job_hint: hint,
        error: SlurmError::Timeout {
            command: SlurmCommand::Salloc,
            timeout,
            stdout: String::new(),
            stderr: text.all().to_owned(),
        },
    })
}

/// A fresh log file, owner-only, never through a symlink, put in place by rename: a salloc of
/// an earlier launch (or of a racing launch from another state directory sharing this cache)
/// keeps writing to its own file, now unlinked, and the path names the newest.
fn create_log(log: &Path) -> std::io::Result<File> {
    let name = log.file_name().unwrap_or_default().to_string_lossy();
    let tmp = log.with_file_name(format!(
        ".{name}.{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    if let Err(e) = std::fs::rename(&tmp, log) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(file)
}

/// salloc exited before it named a job.
fn exited(status: ExitInfo, text: &Lines) -> ActionError {
    let out = Output {
        status,
        stdout: String::new(),
        stderr: text.all().to_owned(),
    };
    let hint = parse_salloc(text.all()).ok().and_then(|r| r.job());
    if status.success() {
        // Exit 0 without a job id: nothing we can name, but something may exist.
        let source = super::error::ParseError::new(
            Parsed::SallocOutput,
            text.all(),
            "exit 0 without 'Pending job allocation N'",
        );
        return ActionError::Unknown {
            job_hint: hint,
            error: out.unparsable(SlurmCommand::Salloc, source),
        };
    }
    failed_submission(SlurmCommand::Salloc, out, hint)
}

fn unparsable(source: super::error::ParseError, stderr: &str) -> ActionError {
    ActionError::Unknown {
        job_hint: None,
        error: SlurmError::Unparsable {
            command: SlurmCommand::Salloc,
            source,
            stdout: String::new(),
            stderr: stderr.to_owned(),
        },
    }
}

/// What salloc has written so far, read with `pread` (the file offset is salloc's: it shares
/// the open file), bounded by [`MAX_LOG_BYTES`].
#[derive(Default)]
struct Lines {
    bytes: Vec<u8>,
    text: String,
}

impl Lines {
    fn read_from(&mut self, file: &File) {
        let mut buf = [0u8; 4096];
        while self.bytes.len() < MAX_LOG_BYTES {
            match file.read_at(&mut buf, self.bytes.len() as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.bytes.extend_from_slice(&buf[..n]),
            }
        }
        self.bytes.truncate(MAX_LOG_BYTES);
        self.text = String::from_utf8_lossy(&self.bytes).into_owned();
    }

    /// Whole lines only: a line being written may end in a partial job id.
    fn complete(&self) -> &str {
        match self.text.rfind('\n') {
            Some(end) => &self.text[..=end],
            None => "",
        }
    }

    fn all(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The job the log names so far, as `allocate_held` reads it.
    fn named(stderr: &str) -> Option<crate::slurm::SallocReport> {
        let l = Lines {
            bytes: stderr.as_bytes().to_vec(),
            text: stderr.to_owned(),
        };
        parse_salloc(l.complete())
            .ok()
            .filter(|r| r.job().is_some())
    }

    #[test]
    fn a_partly_written_line_names_nothing_yet() {
        assert_eq!(named("salloc: Pending job allocation 34"), None);
        let whole = named(
            "salloc: Job is in held state, pending scheduler release\n\
             salloc: Pending job allocation 3418\n",
        )
        .unwrap();
        assert_eq!(whole.pending, JobId::new(3418));
        assert_eq!(whole.granted, None);
        let half = "salloc: Pending job allocation 3418\nsalloc: job 3418 queued and wai";
        assert_eq!(named(half).unwrap().pending, JobId::new(3418));
    }

    #[test]
    fn the_log_replaces_an_older_one_without_touching_its_inode() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("salloc.log");
        let old = create_log(&log).unwrap();
        old.write_at(b"salloc: Granted job allocation 1\n", 0)
            .unwrap();
        let new = create_log(&log).unwrap();
        let mut l = Lines::default();
        l.read_from(&new);
        assert_eq!(l.all(), "");
        // The earlier salloc writes on into its own (now unlinked) file.
        old.write_at(b"more\n", 33).unwrap();
        l.read_from(&new);
        assert_eq!(l.all(), "");
    }

    #[test]
    fn racing_launches_each_get_their_own_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("salloc.log");
        let a = create_log(&log).unwrap();
        let b = create_log(&log).unwrap();
        a.write_at(b"a\n", 0).unwrap();
        b.write_at(b"b\n", 0).unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "b\n");
        let mut l = Lines::default();
        l.read_from(&a);
        assert_eq!(l.all(), "a\n");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temp file left"
        );
    }

    #[test]
    fn a_symlink_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        let log = dir.path().join("salloc.log");
        std::os::unix::fs::symlink(&target, &log).unwrap();
        // The link is replaced (it is ours to replace), never written through.
        create_log(&log).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
