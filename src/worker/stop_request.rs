//! How a stop tells a running worker's supervisor the grace it asked for.
//!
//! `scancel --signal=TERM` carries no data, and the supervisor was started with the grace given
//! at submit time. So a stop writes its grace into the worker's directory (after its
//! `…StopIntent` records it, before the TERM), and the supervisor reads it when the TERM
//! arrives. Without the file (an older coordinator, a TERM from Slurm itself at the time
//! limit, or a file that cannot be read) the supervisor keeps its own grace: the file can only
//! change how long the payload has, never whether it is stopped.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The longest grace a stop can give (the CLI allows at most this).
pub const MAX_GRACE_S: u32 = 3600;

const FILE: &str = "stop-request";

fn path(worker_root: &Path) -> PathBuf {
    worker_root.join(FILE)
}

/// Record that a stop asked for `grace_s` seconds between TERM and KILL. Written whole under a
/// temporary name and renamed, so the supervisor reads the old file, the new one, or none.
pub fn write(worker_root: &Path, grace_s: u32) -> std::io::Result<()> {
    assert!(grace_s <= MAX_GRACE_S, "grace {grace_s} s over the limit");
    let tmp = worker_root.join(format!(".{FILE}.tmp-{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    writeln!(f, "grace_s={grace_s}")?;
    f.sync_all()?;
    std::fs::rename(&tmp, path(worker_root))
}

/// The grace a stop asked for, if one did and its file reads as one.
pub fn read(worker_root: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(path(worker_root)).ok()?;
    let grace: u32 = text.trim().strip_prefix("grace_s=")?.parse().ok()?;
    (grace <= MAX_GRACE_S).then_some(grace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_grace_reads_back_and_nothing_else_does() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), None);
        write(dir.path(), 15).unwrap();
        assert_eq!(read(dir.path()), Some(15));
        write(dir.path(), 0).unwrap();
        assert_eq!(read(dir.path()), Some(0));
        for junk in [
            "",
            "15",
            "grace_s=",
            "grace_s=-1",
            "grace_s=3601",
            "grace_s=1e3",
        ] {
            std::fs::write(path(dir.path()), junk).unwrap();
            assert_eq!(read(dir.path()), None, "{junk:?}");
        }
        // No temporary file is left beside it.
        write(dir.path(), 3).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE)]);
    }
}
