//! Running git: argv only, never a shell, always with a deadline, output capped.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How much of git's stdout (when captured) and stderr is kept.
pub const OUTPUT_CAP: usize = 1 << 20;
const POLL: Duration = Duration::from_millis(10);

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git ({0}); is git installed and on PATH?")]
    Spawn(std::io::Error),
    #[error("git {args} did not finish in time and was killed")]
    TimedOut { args: String },
    #[error("git {args} failed ({status}): {stderr}")]
    Failed {
        args: String,
        status: String,
        stderr: String,
    },
}

/// Where git's stdout goes.
pub enum Out {
    /// Captured, up to [`OUTPUT_CAP`] bytes.
    Capture,
    /// Written to this file.
    File(File),
}

fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        // Keep reading past the cap, so git never blocks on a full pipe.
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            let room = OUTPUT_CAP.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        kept
    })
}

/// Run `git -C dir args…` (or without `-C`) with `env` added, feeding `stdin`, until it ends
/// or `deadline`. Returns the captured stdout (empty when it went to a file).
pub fn run(
    dir: Option<&Path>,
    args: &[&OsStr],
    env: &[(&str, &OsStr)],
    stdin: Option<&[u8]>,
    out: Out,
    deadline: Instant,
) -> Result<Vec<u8>, GitError> {
    let shown = args
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    if Instant::now() >= deadline {
        return Err(GitError::TimedOut { args: shown });
    }
    let mut c = Command::new("git");
    if let Some(d) = dir {
        c.arg("-C").arg(d);
    }
    c.args(args)
        // Never ask anyone anything, and never let a pager or an editor start.
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat")
        .env("GIT_EDITOR", "true")
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped());
    let capture = matches!(out, Out::Capture);
    match out {
        Out::Capture => c.stdout(Stdio::piped()),
        Out::File(f) => c.stdout(Stdio::from(f)),
    };
    let mut child = c.spawn().map_err(GitError::Spawn)?;
    if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // Small inputs only (a revision list): written before waiting, then closed.
        let _ = pipe.write_all(bytes);
    }
    let out_reader = child.stdout.take().filter(|_| capture).map(drain);
    let err_reader = child.stderr.take().map(drain);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(GitError::TimedOut {
                    args: shown.clone(),
                });
            }
            Err(e) => break Err(GitError::Spawn(e)),
        }
    };
    let stdout = out_reader.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = err_reader.and_then(|h| h.join().ok()).unwrap_or_default();
    let status = status?;
    if !status.success() {
        return Err(GitError::Failed {
            args: shown,
            status: status.to_string(),
            stderr: String::from_utf8_lossy(&stderr).trim().to_owned(),
        });
    }
    Ok(stdout)
}

/// Run git and return its stdout as one trimmed line.
pub fn line(dir: Option<&Path>, args: &[&str], deadline: Instant) -> Result<String, GitError> {
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let out = run(dir, &args, &[], None, Out::Capture, deadline)?;
    Ok(String::from_utf8_lossy(&out).trim().to_owned())
}

/// Is `s` a full hexadecimal object id (SHA-1 or SHA-256)?
pub fn is_object_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_captures_fails_and_times_out() {
        let far = Instant::now() + Duration::from_secs(30);
        let v = line(None, &["--version"], far).unwrap();
        assert!(v.starts_with("git version"), "{v}");
        let e = line(None, &["no-such-subcommand"], far).unwrap_err();
        assert!(matches!(e, GitError::Failed { .. }), "{e}");
        let d = tempfile::tempdir().unwrap();
        let e = line(Some(d.path()), &["init", "-q"], Instant::now()).unwrap_err();
        assert!(matches!(e, GitError::TimedOut { .. }), "{e}");
    }

    #[test]
    fn object_ids() {
        assert!(is_object_id(&"a".repeat(40)));
        assert!(is_object_id(&"F".repeat(64)));
        assert!(!is_object_id("HEAD"));
        assert!(!is_object_id(&"g".repeat(40)));
    }
}
