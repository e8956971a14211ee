//! A worker's private directories: its checkout, runtime, cache, native state and evidence.
//! Together they are the worker's step-scoped cleanup boundary.

use std::path::{Path, PathBuf};

use uuid::Uuid;

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
        Self::at(
            pools_dir
                .join(pool)
                .join("workers")
                .join(submission_id.to_string()),
        )
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
            evidence: root.join("evidence"),
            root,
        }
    }

    pub fn all(&self) -> [&Path; 5] {
        [
            &self.checkout,
            &self.runtime,
            &self.cache,
            &self.state,
            &self.evidence,
        ]
    }

    /// Create them all, owner-only. Existing directories are fine (a retried launch).
    pub fn create(&self) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        for dir in self.all() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        Ok(())
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
    }
}
