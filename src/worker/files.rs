//! File helpers for the worker and for assets: streaming SHA-256, copies that are fsynced
//! before they count, directory fsync, free space. Every loop checks its deadline between
//! chunks, so a slow filesystem stops an operation at most one chunk late.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};

use crate::event::Sha256Digest;

/// The unit of reading, hashing and copying.
pub const CHUNK: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{what} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("ran out of time")]
    TimedOut,
}

pub fn io(path: &Path, what: &'static str) -> impl FnOnce(std::io::Error) -> FileError {
    let path = path.to_owned();
    move |source| FileError::Io { path, what, source }
}

fn check(deadline: Option<Instant>) -> Result<(), FileError> {
    match deadline {
        Some(d) if Instant::now() >= d => Err(FileError::TimedOut),
        _ => Ok(()),
    }
}

/// SHA-256 and length of a file's bytes; `inspect` sees every chunk (to find a log's last
/// record separator in the same pass).
pub fn hash_file(
    path: &Path,
    deadline: Option<Instant>,
    mut inspect: impl FnMut(&[u8]),
) -> Result<(Sha256Digest, u64), FileError> {
    let mut f = File::open(path).map_err(io(path, "open"))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        check(deadline)?;
        let n = f.read(&mut buf).map_err(io(path, "read"))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        inspect(&buf[..n]);
        total += n as u64;
    }
    Ok((Sha256Digest(h.finalize().into()), total))
}

/// Copy `src` to a new file `dst` (which must not exist), owner-only, and fsync it. Returns
/// the SHA-256 and length of the bytes written. `before_chunk` runs before each chunk.
pub fn copy_file(
    src: &Path,
    dst: &Path,
    deadline: Option<Instant>,
    before_chunk: impl FnMut(),
) -> Result<(Sha256Digest, u64), FileError> {
    let copied = copy_file_unsynced(src, dst, deadline, before_chunk)?;
    File::open(dst)
        .and_then(|f| f.sync_all())
        .map_err(io(dst, "fsync"))?;
    Ok(copied)
}

/// [`copy_file`] without the fsync: it does not count until [`sync_all`] has synced `dst`.
pub fn copy_file_unsynced(
    src: &Path,
    dst: &Path,
    deadline: Option<Instant>,
    before_chunk: impl FnMut(),
) -> Result<(Sha256Digest, u64), FileError> {
    copy_file_with(src, dst, &mut vec![0u8; CHUNK], deadline, before_chunk)
}

/// [`copy_file_unsynced`] through the caller's buffer (one read per chunk feeds both the hash
/// and the write). A copy of many files passes the same buffer for each: a fresh 1 MiB buffer
/// a file, zeroed each time, cost more than copying a 64 KiB file.
pub fn copy_file_with(
    src: &Path,
    dst: &Path,
    buf: &mut [u8],
    deadline: Option<Instant>,
    mut before_chunk: impl FnMut(),
) -> Result<(Sha256Digest, u64), FileError> {
    let mut from = File::open(src).map_err(io(src, "open"))?;
    let mut to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dst)
        .map_err(io(dst, "create"))?;
    let mut h = Sha256::new();
    let mut total = 0u64;
    loop {
        before_chunk();
        check(deadline)?;
        let n = from.read(buf).map_err(io(src, "read"))?;
        if n == 0 {
            break;
        }
        to.write_all(&buf[..n]).map_err(io(dst, "write"))?;
        h.update(&buf[..n]);
        total += n as u64;
    }
    Ok((Sha256Digest(h.finalize().into()), total))
}

/// Write `bytes` to a new file and fsync it.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), FileError> {
    write_new_unsynced(path, bytes, mode)?
        .sync_all()
        .map_err(io(path, "fsync"))
}

/// [`write_new`] without the fsync: it does not count until [`sync_all`] has synced `path`.
pub fn write_new_unsynced(path: &Path, bytes: &[u8], mode: u32) -> Result<File, FileError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io(path, "create"))?;
    f.write_all(bytes).map_err(io(path, "write"))?;
    Ok(f)
}

/// At most this many fsyncs of [`sync_all`] are in flight at once.
pub const SYNCS_IN_FLIGHT: usize = 16;

/// fsync every file and directory of `paths`, several at once: the filesystem's journal
/// commits the fsyncs in flight together (ext4 here: 10 fsyncs took 30–90 ms one after the
/// other and 3–20 ms together), and a publication is a dozen of them. Done when every one
/// is; the first failure is returned. Past `deadline`, no further fsync starts.
pub fn sync_all(paths: &[PathBuf], deadline: Option<Instant>) -> Result<(), FileError> {
    let threads = paths.len().min(SYNCS_IN_FLIGHT);
    if threads <= 1 {
        return paths.iter().try_for_each(|p| sync_one(p, deadline));
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let first_error = std::sync::Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(path) = paths.get(i) else { break };
                if let Err(e) = sync_one(path, deadline) {
                    first_error
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get_or_insert(e);
                    break;
                }
            });
        }
    });
    match first_error
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn sync_one(path: &Path, deadline: Option<Instant>) -> Result<(), FileError> {
    check(deadline)?;
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path, "fsync"))
}

pub fn fsync_dir(dir: &Path) -> Result<(), FileError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "fsync directory"))
}

/// The filesystem holding `path`: its id (`st_dev`) and what an unprivileged writer has free.
pub fn space(path: &Path) -> std::io::Result<(u64, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path)?.dev();
    let free = crate::sys::statvfs_free(path)?;
    Ok((
        dev,
        free.blocks.saturating_mul(free.block_size),
        free.inodes,
    ))
}

/// Everything below a directory, as [`tree`] lists it.
#[derive(Debug, Default)]
pub struct Tree {
    /// Relative paths with their (not followed) metadata; a directory comes before what it
    /// holds.
    pub entries: Vec<(PathBuf, std::fs::Metadata)>,
    /// Directories that could not be read (their contents are missing from `entries`).
    pub unreadable: Vec<PathBuf>,
    /// False when the listing stopped at its limit.
    pub complete: bool,
}

impl Tree {
    pub fn files(&self) -> impl Iterator<Item = &(PathBuf, std::fs::Metadata)> {
        self.entries.iter().filter(|(_, m)| m.is_file())
    }
}

/// List everything below `root` without following symlinks, at most `limit` entries.
pub fn tree(root: &Path, limit: u64) -> Tree {
    let mut t = Tree {
        complete: true,
        ..Tree::default()
    };
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
            t.unreadable.push(rel);
            continue;
        };
        for e in entries {
            let Ok(e) = e else {
                t.unreadable.push(rel.clone());
                break;
            };
            if t.entries.len() as u64 >= limit {
                t.complete = false;
                return t;
            }
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            let child = rel.join(e.file_name());
            if m.is_dir() {
                stack.push(child.clone());
            }
            t.entries.push((child, m));
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_all_syncs_files_and_directories_and_reports_the_first_failure() {
        let d = tempfile::tempdir().unwrap();
        let mut paths = vec![d.path().to_path_buf()];
        for i in 0..40 {
            let p = d.path().join(format!("f{i}"));
            drop(write_new_unsynced(&p, b"x", 0o600).unwrap());
            paths.push(p);
        }
        sync_all(&paths, None).unwrap();
        let missing = d.path().join("gone");
        paths.insert(17, missing.clone());
        match sync_all(&paths, None) {
            Err(FileError::Io { path, .. }) => assert_eq!(path, missing),
            other => panic!("{other:?}"),
        }
        let past = Instant::now() - std::time::Duration::from_millis(1);
        assert!(matches!(
            sync_all(&paths[..3], Some(past)),
            Err(FileError::TimedOut)
        ));
    }

    #[test]
    fn copy_hashes_what_it_writes_and_never_overwrites() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, vec![7u8; CHUNK + 3]).unwrap();
        let (h1, n1) = hash_file(&a, None, |_| {}).unwrap();
        let mut chunks = 0;
        let (h2, n2) = copy_file(&a, &b, None, || chunks += 1).unwrap();
        assert_eq!((h1, n1), (h2, n2));
        assert_eq!(n1, CHUNK as u64 + 3);
        assert_eq!(chunks, 3, "two chunks and the final empty read");
        assert!(copy_file(&a, &b, None, || {}).is_err());
        let past = Some(Instant::now());
        assert!(matches!(
            hash_file(&a, past, |_| {}),
            Err(FileError::TimedOut)
        ));
    }

    #[test]
    fn one_buffer_copies_files_one_after_another_each_hashed_alone() {
        let d = tempfile::tempdir().unwrap();
        let mut buf = vec![0u8; CHUNK];
        for (name, body) in [("long", vec![1u8; CHUNK + 9]), ("short", vec![2u8; 5])] {
            let (src, dst) = (d.path().join(name), d.path().join(format!("{name}.copy")));
            std::fs::write(&src, &body).unwrap();
            let copied = copy_file_with(&src, &dst, &mut buf, None, || {}).unwrap();
            assert_eq!(copied, hash_file(&src, None, |_| {}).unwrap());
            assert_eq!(std::fs::read(&dst).unwrap(), body, "{name}");
        }
    }

    #[test]
    fn tree_lists_parents_first_and_stops_at_its_limit() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::fs::write(d.path().join("a/b/f"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("link")).unwrap();
        let t = tree(d.path(), 100);
        assert!(t.complete && t.unreadable.is_empty());
        let names: Vec<_> = t.entries.iter().map(|(p, _)| p.clone()).collect();
        let pos = |p: &str| names.iter().position(|n| n == Path::new(p)).unwrap();
        assert!(pos("a") < pos("a/b") && pos("a/b") < pos("a/b/f"));
        assert_eq!(t.files().count(), 1, "a symlink is not followed or counted");
        assert!(!tree(d.path(), 2).complete);
    }

    #[test]
    fn space_reports_something() {
        let (_, bytes, inodes) = space(Path::new("/")).unwrap();
        assert!(bytes > 0 || inodes > 0);
    }
}
