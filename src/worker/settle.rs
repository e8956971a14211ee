//! After the payload: wait (bounded) until no process holds files open under the worker's
//! directories, then hash the native state and check its append-only logs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::files::{self, FileError};
use crate::event::worker::*;
use crate::event::Sha256Digest;
use crate::policy::node::{self, HOLDERS_LISTED, LOGS_LISTED, NATIVE_FILES_LISTED};

const QUIET_POLL: Duration = Duration::from_millis(100);
/// The full native-state listing, in the evidence directory.
pub const LISTING_FILE: &str = "native-state.sha256";

fn under(path: &str, dirs: &[String]) -> bool {
    dirs.iter().any(|d| {
        path == d
            || path
                .strip_prefix(d.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Processes other than this one with a file open under `dirs` (canonical paths), at most
/// `limit` of them.
pub fn holders(dirs: &[String], limit: usize) -> Vec<OpenFileHolder> {
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        // A process we may not inspect holds nothing of ours: ours run as this user.
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let target = target.to_string_lossy();
            let target = target.strip_suffix(" (deleted)").unwrap_or(&target);
            if under(target, dirs) {
                let command = std::fs::read_to_string(p.path().join("comm"))
                    .map(|c| c.trim().to_owned())
                    .unwrap_or_default();
                out.push(OpenFileHolder {
                    pid,
                    command,
                    path: target.to_owned(),
                });
                break;
            }
        }
        if out.len() >= limit {
            break;
        }
    }
    out
}

/// Wait until nothing holds files under `dirs`, or until `deadline`.
pub fn wait_quiet(dirs: &[&Path], deadline: Instant) -> WritersQuiesced {
    let started = Instant::now();
    let canonical: Vec<String> = dirs
        .iter()
        .map(|d| {
            std::fs::canonicalize(d)
                .unwrap_or_else(|_| d.to_path_buf())
                .display()
                .to_string()
        })
        .collect();
    loop {
        let h = holders(&canonical, HOLDERS_LISTED);
        if h.is_empty() || Instant::now() >= deadline {
            return WritersQuiesced {
                quiet: h.is_empty(),
                waited_ms: started.elapsed().as_millis() as u64,
                holders: h,
            };
        }
        std::thread::sleep(QUIET_POLL);
    }
}

/// Hash one file; for a log, also count its records (lines) and where the last whole one
/// ends. Returns the digest, the bytes, that end and the records (both 0 unless `is_log`).
fn hash_counting_records(
    full: &Path,
    is_log: bool,
    deadline: Instant,
) -> Result<(Sha256Digest, u64, u64, u64), FileError> {
    let (mut offset, mut end_of_record, mut records) = (0u64, 0u64, 0u64);
    let (sha256, bytes) = files::hash_file(full, Some(deadline), |chunk| {
        if is_log {
            if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
                end_of_record = offset + i as u64 + 1;
            }
            records += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        }
        offset += chunk.len() as u64;
    })?;
    Ok((sha256, bytes, end_of_record, records))
}

/// Write the full listing (`sha256  bytes  path` per file) afresh into the evidence: its
/// digest, and whether it was written (if not, the hashing is not complete).
fn write_listing(evidence: &Path, digests: &[FileDigest]) -> (Sha256Digest, bool) {
    let mut listing = Vec::new();
    for d in digests {
        let _ = writeln!(
            listing,
            "{}  {}  {}",
            hex::encode(d.sha256.0),
            d.bytes,
            d.path
        );
    }
    let listing_sha256 = Sha256Digest(Sha256::digest(&listing).into());
    let listing_path = evidence.join(LISTING_FILE);
    let _ = std::fs::remove_file(&listing_path);
    let written = files::write_new(&listing_path, &listing, 0o600).is_ok();
    (listing_sha256, written)
}

/// Hash every native-state file, check the append-only logs among them (files whose name
/// matches `glob`), and write the full listing to `<evidence>/native-state.sha256`.
pub fn hash_state(
    state: &Path,
    evidence: &Path,
    glob: &str,
    deadline: Instant,
) -> (NativeStateHashed, AppendOnlyLogsChecked) {
    let tree = files::tree(state, node::NATIVE_WALK_MAX_ENTRIES);
    let mut complete = tree.complete && tree.unreadable.is_empty();
    let mut paths: Vec<&PathBuf> = tree.files().map(|(p, _)| p).collect();
    paths.sort();
    let mut digests = Vec::new();
    let mut logs = Vec::new();
    let mut logs_whole = true;
    let mut total_bytes = 0u64;
    for rel in paths {
        let full = state.join(rel);
        let is_log = rel
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| node::glob_match(glob, n));
        match hash_counting_records(&full, is_log, deadline) {
            Ok((sha256, bytes, end_of_record, records)) => {
                total_bytes += bytes;
                let path = rel.display().to_string();
                if is_log {
                    let trailing = node::trailing_bytes(bytes, end_of_record);
                    logs_whole &= trailing == 0;
                    if logs.len() < LOGS_LISTED {
                        logs.push(LogCheck {
                            path: path.clone(),
                            bytes,
                            records,
                            trailing_bytes: trailing,
                        });
                    }
                }
                digests.push(FileDigest {
                    path,
                    bytes,
                    sha256,
                });
            }
            Err(FileError::TimedOut) => {
                complete = false;
                break;
            }
            Err(_) => {
                // Vanished or unreadable after the payload ended: the state is not whole.
                complete = false;
                if is_log {
                    logs_whole = false;
                }
            }
        }
    }
    let (listing_sha256, written) = write_listing(evidence, &digests);
    complete &= written;
    let total_files = digests.len() as u64;
    digests.truncate(NATIVE_FILES_LISTED);
    (
        NativeStateHashed {
            files: digests,
            total_files,
            total_bytes,
            listing_sha256,
            complete,
        },
        AppendOnlyLogsChecked {
            glob: glob.to_owned(),
            logs,
            ok: logs_whole,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_state_and_finds_torn_logs() {
        let d = tempfile::tempdir().unwrap();
        let (state, evidence) = (d.path().join("state"), d.path().join("evidence"));
        std::fs::create_dir_all(state.join("db")).unwrap();
        std::fs::create_dir_all(&evidence).unwrap();
        std::fs::write(state.join("db/a.sqlite"), b"abc").unwrap();
        std::fs::write(state.join("rollout.jsonl"), b"{}\n{}\n").unwrap();
        let far = Instant::now() + Duration::from_secs(30);
        let (h, l) = hash_state(&state, &evidence, "*.jsonl", far);
        assert!(h.complete && l.ok);
        assert_eq!(h.total_files, 2);
        assert_eq!(h.files[0].path, "db/a.sqlite");
        assert_eq!(l.logs[0].records, 2);
        let listing = std::fs::read_to_string(evidence.join(LISTING_FILE)).unwrap();
        assert!(listing.contains("db/a.sqlite"), "{listing}");

        std::fs::write(state.join("rollout.jsonl"), b"{}\n{\"half").unwrap();
        let (_, l) = hash_state(&state, &evidence, "*.jsonl", far);
        assert!(!l.ok);
        assert_eq!(l.logs[0].trailing_bytes, 6);
    }

    #[test]
    fn an_open_file_is_seen_until_it_is_closed() {
        let d = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(d.path()).unwrap();
        std::fs::write(dir.join("f"), b"x").unwrap();
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg("exec 3<f; exec sleep 30")
            .current_dir(&dir)
            .spawn()
            .unwrap();
        let soon = Instant::now() + Duration::from_secs(5);
        // Wait for the shell to open the file, then check that it is reported.
        let mut seen = Vec::new();
        while seen.is_empty() && Instant::now() < soon {
            seen = holders(&[dir.display().to_string()], 4);
        }
        assert!(seen.iter().any(|h| h.path.ends_with("/f")), "{seen:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        let q = wait_quiet(&[&dir], Instant::now() + Duration::from_secs(5));
        assert!(q.quiet, "{q:?}");
    }
}
