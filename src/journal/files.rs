//! The journal's file helpers: owner-only directories, directory fsync, and I/O errors that
//! name their path.

use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use super::error::JournalError;

pub(crate) fn io_err(path: &Path, what: &str) -> impl FnOnce(std::io::Error) -> JournalError {
    let path = path.to_owned();
    let what = what.to_owned();
    move |source| JournalError::Io { path, what, source }
}

/// Create `dir` (and parents) with owner-only permissions if missing.
pub fn create_private_dir(dir: &Path) -> Result<(), JournalError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir, "create directory"))
}

pub fn fsync_dir(dir: &Path) -> Result<(), JournalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir, "fsync directory"))
}

/// How every file the journal writes whole is opened: created or truncated, owner-only.
pub(crate) fn private_file() -> std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(true).write(true).mode(0o600);
    options
}

/// Open a lock file (made owner-only if missing, never truncated), refusing a link: the
/// journal's `LOCK` and a session's token lock.
pub(crate) fn open_lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Open for reading, refusing a link (`ELOOP`) even if one appeared after the check.
pub(crate) fn open_no_follow(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}
