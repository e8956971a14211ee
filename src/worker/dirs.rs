//! A worker's private directories: its checkout, runtime, cache, native state and evidence.
//! Together they are the worker's step-scoped cleanup boundary.

use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::statedir::trust::{self, TrustError};

/// The evidence directory's name below a worker's root.
const EVIDENCE: &str = "evidence";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerDirs {
    pub root: PathBuf,
    pub checkout: PathBuf,
    pub runtime: PathBuf,
    pub cache: PathBuf,
    pub state: PathBuf,
    pub evidence: PathBuf,
}

impl WorkerDirs {
    /// Keyed by submission id, so a later worker with the same name never shares them.
    pub fn new(pools_dir: &Path, pool: &str, submission_id: Uuid) -> WorkerDirs {
        Self::at(Self::workers_of(pools_dir, pool).join(submission_id.to_string()))
    }

    /// The directory of a pool's workers' directories.
    pub fn workers_of(pools_dir: &Path, pool: &str) -> PathBuf {
        pools_dir.join(pool).join("workers")
    }

    /// The evidence directory alone of the worker `submission_id` (as text) of the pool whose
    /// [`workers_of`](Self::workers_of) is `workers_dir`: what `pool status` needs of each of
    /// thousands of workers, without the other four paths.
    pub fn evidence_in(workers_dir: &Path, submission_id: &str) -> PathBuf {
        workers_dir.join(submission_id).join(EVIDENCE)
    }

    /// A worker's directories under the state directory: a pool worker's, or (no pool) a
    /// `dispatch submit` worker's.
    pub fn of(state_dir: &Path, pool: Option<&str>, submission_id: Uuid) -> WorkerDirs {
        match pool {
            Some(pool) => Self::new(&state_dir.join("pools"), pool, submission_id),
            None => Self::for_job(&state_dir.join("jobs"), submission_id),
        }
    }

    /// The directories of a one-job-per-worker submission (`dispatch submit`).
    pub fn for_job(jobs_dir: &Path, submission_id: Uuid) -> WorkerDirs {
        Self::at(jobs_dir.join(submission_id.to_string()))
    }

    /// The layout below a worker's root.
    pub fn at(root: PathBuf) -> WorkerDirs {
        WorkerDirs {
            checkout: root.join("checkout"),
            runtime: root.join("runtime"),
            cache: root.join("cache"),
            state: root.join("state"),
            evidence: root.join(EVIDENCE),
            root,
        }
    }

    /// The directories the payload writes: all but evidence (the supervisor's journal).
    pub fn payload_dirs(&self) -> [&Path; 4] {
        [&self.checkout, &self.runtime, &self.cache, &self.state]
    }

    pub fn all(&self) -> [&Path; 5] {
        let [checkout, runtime, cache, state] = self.payload_dirs();
        [checkout, runtime, cache, state, &self.evidence]
    }

    /// Create them all, owner-only, below `trusted` (the state directory, or a directory in
    /// it already checked): each directory on the way is created or checked one at a time, so
    /// a link or another user's directory there is refused, never followed. Existing
    /// directories of ours are fine (a retried launch).
    pub fn create(&self, trusted: &Path) -> Result<(), TrustError> {
        for dir in self.all() {
            trust::create_below(trusted, dir)?;
        }
        Ok(())
    }

    /// Check the directories from below `trusted` down to the evidence directory (whose
    /// journal the coordinator reads): ours, written by nobody else, no link. A few `lstat`s
    /// for this one worker; `Ok(false)` when some of them do not exist yet.
    pub fn check(&self, trusted: &Path) -> Result<bool, TrustError> {
        trust::check_below(trusted, &self.evidence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirs_are_private_per_submission() {
        let a = WorkerDirs::new(Path::new("/s/pools"), "p", Uuid::from_u128(1));
        let b = WorkerDirs::new(Path::new("/s/pools"), "p", Uuid::from_u128(2));
        for (x, y) in a.all().iter().zip(b.all()) {
            assert_ne!(*x, y);
        }
        assert!(a.evidence.starts_with("/s/pools/p/workers/"));
        let workers = WorkerDirs::workers_of(Path::new("/s/pools"), "p");
        assert_eq!(
            WorkerDirs::evidence_in(&workers, &Uuid::from_u128(1).to_string()),
            a.evidence
        );
    }

    #[test]
    fn creation_refuses_another_users_or_a_linked_directory_on_the_way() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let state = t.path();
        let dirs = WorkerDirs::of(state, Some("p"), Uuid::from_u128(1));
        assert!(!dirs.check(state).unwrap(), "nothing there yet");
        dirs.create(state).unwrap();
        assert!(dirs.check(state).unwrap());
        for d in dirs.all() {
            let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", d.display());
        }

        // Another user's `workers/` (uid 65534 when the tests run as root).
        let workers = state.join("pools/p/workers");
        let other = WorkerDirs::of(state, Some("p"), Uuid::from_u128(2));
        if crate::sys::geteuid() == 0 {
            std::os::unix::fs::chown(&workers, Some(65534), None).unwrap();
            assert!(other.create(state).is_err());
            assert!(dirs.check(state).is_err());
            std::os::unix::fs::chown(&workers, Some(0), None).unwrap();
        }
        // A group-writable one.
        std::fs::set_permissions(&workers, std::fs::Permissions::from_mode(0o770)).unwrap();
        let err = other.create(state).unwrap_err().to_string();
        assert!(
            err.contains(&format!("chmod 700 {}", workers.display())),
            "{err}"
        );
        assert!(!other.root.exists(), "nothing was created below it");
        std::fs::set_permissions(&workers, std::fs::Permissions::from_mode(0o700)).unwrap();

        // A link out of the state directory, as a job tree.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), state.join("jobs")).unwrap();
        let job = WorkerDirs::of(state, None, Uuid::from_u128(3));
        assert!(job.create(state).is_err());
        assert!(job.check(state).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
