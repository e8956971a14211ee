//! Where assets live, and the temporary files of an add (`TempFiles`), which every command
//! that takes the journal lock sweeps once their add is no longer running
//! (`sweep_dead_temps`, from `Ctx::lock_and_load`).

use std::path::{Path, PathBuf};

use uuid::Uuid;

const TMP_PREFIX: &str = ".tmp-";

pub fn assets_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("assets")
}

/// The temporary files of one add: `.tmp-<pid>-<uuid>` (the file being built),
/// `….tree` (its tree listing) and `….lock`, on which the add holds an exclusive `flock`
/// from before the others exist until they are gone. A `.lock` that nobody holds, or that
/// is missing, proves the add that made them is no longer running, whatever process its pid
/// now names (the pid is in the name only for people reading the directory).
pub struct TempFiles {
    dir: PathBuf,
    key: String,
    /// Held for the lifetime of the add; dropped after the files are removed.
    lock: std::fs::File,
    /// The file being built, until it is put in place.
    building: Option<PathBuf>,
}

const LOCK_SUFFIX: &str = ".lock";

impl TempFiles {
    pub fn create(dir: &Path) -> std::io::Result<TempFiles> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        // A sweep can take a fresh lock file between its creation and our flock (it is not
        // held yet, so it looks dead): then ours is gone or not ours, and a new name is tried.
        for _ in 0..8 {
            let key = format!(
                "{TMP_PREFIX}{}-{}",
                std::process::id(),
                Uuid::new_v4().simple()
            );
            let lock_path = dir.join(format!("{key}{LOCK_SUFFIX}"));
            let lock = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&lock_path)?;
            if lock.try_lock().is_err() {
                continue;
            }
            let (ours, there) = (lock.metadata()?, std::fs::symlink_metadata(&lock_path));
            if there.is_ok_and(|m| m.ino() == ours.ino() && m.dev() == ours.dev()) {
                let building = Some(dir.join(&key));
                return Ok(TempFiles {
                    dir: dir.to_owned(),
                    key,
                    lock,
                    building,
                });
            }
        }
        Err(std::io::Error::other(format!(
            "temporary files in {} keep disappearing as they are made",
            dir.display()
        )))
    }

    pub fn path(&self) -> &Path {
        self.building
            .as_deref()
            .expect("the file is still being built")
    }
}

impl TempFiles {
    /// The file was renamed into place: nothing of it is left to remove.
    pub fn put_in_place(&mut self) {
        self.building = None;
    }
}

impl Drop for TempFiles {
    fn drop(&mut self) {
        if let Some(p) = self.building.take() {
            let _ = std::fs::remove_file(p);
        }
        let _ = std::fs::remove_file(self.dir.join(format!("{}.tree", self.key)));
        let _ = std::fs::remove_file(self.dir.join(format!("{}{LOCK_SUFFIX}", self.key)));
        // `self.lock` closes after this, releasing the flock on an unlinked file.
        let _ = &self.lock;
    }
}

/// Remove the temporary files of every add that is no longer running (see [`TempFiles`]):
/// nothing can finish them. Returns how many files were removed. Best effort: a file that
/// cannot be judged (its lock cannot be opened) is left.
pub fn sweep_dead_temps(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut groups: std::collections::BTreeMap<String, Vec<PathBuf>> = Default::default();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(TMP_PREFIX) else {
            continue;
        };
        let key = format!("{TMP_PREFIX}{}", rest.split('.').next().unwrap_or_default());
        groups.entry(key).or_default().push(e.path());
    }
    let mut removed = 0;
    for (key, members) in groups {
        let lock_path = dir.join(format!("{key}{LOCK_SUFFIX}"));
        // Held while we remove the others, so a late writer cannot take it meanwhile.
        let _dead_lock = match std::fs::File::open(&lock_path) {
            Ok(f) if f.try_lock().is_ok() => Some(f),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(_) => continue,
        };
        let mut members = members;
        // The lock file goes last.
        members.sort_by_key(|p| *p == lock_path);
        for p in members {
            let is_dir = std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir());
            if !is_dir && std::fs::remove_file(&p).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}
