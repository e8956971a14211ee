//! `dispatch logs WORKER [--pool P] [--stderr] [-f]`: a worker's output, and following it
//! until the worker ends. Offline: files only, never a Slurm call.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args;

use super::exit::{self, Failure};
use super::output::{note, print_json, stdout_failed};
use crate::ops::logs::{self, Candidate};

/// How often a follower looks at the output file and the worker's own journal.
const FOLLOW_POLL: Duration = Duration::from_millis(500);
/// How often a follower re-reads the coordinator's state (heavier than one file).
const STATE_POLL: Duration = Duration::from_secs(2);
/// Bytes read and written at a time (and the most one `--json` line carries).
const CHUNK: usize = 64 * 1024;

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The worker: its name, its submission id, or that id's first 8 hex digits
    #[arg(value_parser = crate::names::arg::path_name("worker"))]
    pub worker: String,
    /// Only the worker of that name in this pool (when the name is used in several)
    #[arg(long, value_name = "POOL", value_parser = crate::names::arg::path_name("pool"))]
    pub pool: Option<String>,
    /// Its stderr instead of its stdout
    #[arg(long)]
    pub stderr: bool,
    /// Keep printing what it writes until it ends (its own journal records the exit, or the
    /// coordinator's state has it over)
    #[arg(short, long)]
    pub follow: bool,
}

fn open(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

fn load_state(state_dir: &Path) -> Result<crate::state::State, Failure> {
    match crate::journal::load(&crate::statedir::journal_dir(state_dir)) {
        Ok(l) => Ok(l.state),
        Err(crate::journal::JournalError::Missing(_)) => Ok(crate::state::State::default()),
        Err(e) => Err(e.into()),
    }
}

pub fn run(args: &LogsArgs, checked: &crate::statedir::Checked, json: bool) -> Result<u8, Failure> {
    let state_dir = checked.path();
    let state = load_state(state_dir)?;
    let journal_dir = crate::statedir::journal_dir(state_dir);
    let c = logs::resolve(&state, &journal_dir, &args.worker, args.pool.as_deref())?;
    let dirs = c.dirs(state_dir);
    let path = logs::log_file(state_dir, &dirs, args.stderr)?;
    let stream = if args.stderr { "stderr" } else { "stdout" };
    if args.follow {
        return follow(state_dir, &c, &path, stream, json);
    }
    let mut bytes = Vec::new();
    let exists = match open(&path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes)
                .map_err(|e| read_failed(&path, e))?;
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(read_failed(&path, e)),
    };
    let launch_failure = logs::launch_failure(&state, &c);
    if json {
        print_json(&serde_json::json!({
            "worker": c.worker,
            "submission_id": c.submission_id.to_string(),
            "pool": c.pool,
            "state": c.state,
            "stream": stream,
            "path": path.display().to_string(),
            "exists": exists,
            "bytes": bytes.len(),
            "text": String::from_utf8_lossy(&bytes),
            "launch_failure": launch_failure,
        }))?;
    } else if let Some(why) = &launch_failure {
        write_bytes(&bytes);
        note(&format!(
            "worker {} never ran: its launch failed: {why}",
            c.worker
        ));
    } else if !exists {
        note(&format!(
            "worker {} has no {stream} yet ({} does not exist: its step has not started)",
            c.worker,
            path.display()
        ));
    } else {
        write_bytes(&bytes);
    }
    Ok(exit::OK)
}

fn read_failed(path: &Path, e: std::io::Error) -> Failure {
    Failure::new(exit::FAILED, format!("cannot read {}: {e}", path.display()))
}

fn write_bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        stdout_failed(e);
    }
}

/// Print what is in the file from `offset` on; returns the new offset.
fn drain(
    file: &mut std::fs::File,
    mut offset: u64,
    path: &Path,
    stream: &str,
    json: bool,
) -> Result<u64, Failure> {
    let len = file.metadata().map_err(|e| read_failed(path, e))?.len();
    if len < offset {
        // Truncated under us: start again from its beginning rather than print nothing.
        note(&format!(
            "{} was truncated; reading it from the start",
            path.display()
        ));
        offset = 0;
    }
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| read_failed(path, e))?;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = file.read(&mut buf).map_err(|e| read_failed(path, e))?;
        if n == 0 {
            return Ok(offset);
        }
        if json {
            print_json(&serde_json::json!({
                "stream": stream,
                "offset": offset,
                "text": String::from_utf8_lossy(&buf[..n]),
            }))?;
        } else {
            write_bytes(&buf[..n]);
        }
        offset += n as u64;
    }
}

fn follow(
    state_dir: &Path,
    c: &Candidate,
    path: &Path,
    stream: &str,
    json: bool,
) -> Result<u8, Failure> {
    let dirs = c.dirs(state_dir);
    let mut file = None;
    let mut offset = 0;
    let mut state_checked: Option<Instant> = None;
    let mut ended: Option<String> = None;
    loop {
        if file.is_none() {
            match open(path) {
                Ok(f) => file = Some(f),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(read_failed(path, e)),
            }
        }
        if let Some(f) = file.as_mut() {
            offset = drain(f, offset, path, stream, json)?;
        }
        if let Some(why) = ended {
            if json {
                print_json(&serde_json::json!({"stream": stream, "ended": why}))?;
            } else {
                note(&format!("worker {} ended: {why}", c.worker));
            }
            return Ok(exit::OK);
        }
        // The worker's own journal every poll (one small file); the coordinator's state less
        // often. The last drain comes one poll after the end is seen, so what the node wrote
        // just before its end is printed too.
        let state = if state_checked.is_none_or(|t| t.elapsed() >= STATE_POLL) {
            state_checked = Some(Instant::now());
            Some(load_state(state_dir)?)
        } else {
            None
        };
        ended = logs::ended(state.as_ref(), &dirs, c);
        std::thread::sleep(FOLLOW_POLL);
    }
}
