//! Checkpoints a payload asks for while it runs (docs/operations.md, "Checkpoints"): it saves
//! its state in `DISPATCH_STATE_DIR`, creates `DISPATCH_CHECKPOINT_NOW` and leaves its state
//! alone until that file is gone. The supervisor then publishes its workspace and a copy of its
//! native state, hashed into a manifest, as checkpoint `n` beside the final publication
//! (`publish`, recorded `CheckpointPublishing` then `CheckpointPublished` or
//! `CheckpointUnpublished`), keeps the newest two, and removes the file to say it is done.
//!
//! This is what a continuation resumes from when a run ends with no publication of its own: a
//! node that fails takes the supervisor with it (Slurm kills a DOWN node's steps without a
//! SIGTERM on 22.05 and 24.11), so a checkpoint at the end can never be taken there.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use super::dirs::WorkerDirs;
use super::publish;
use super::supervisor::{NodeSpec, RunSpec};
use crate::event::{Micros, WorkerEvent};
use crate::journal::{JournalError, JournalWriter};

/// The file a running payload creates to ask for a checkpoint, in its runtime directory.
pub const REQUEST_FILE: &str = "checkpoint-now";
/// How many published checkpoints of a worker are kept: the newest, and the one before in
/// case the newest is found damaged.
const KEPT: usize = 2;
/// The least time a checkpoint gets: with less before the deadline, the request waits for the
/// end's own checkpoint.
const MIN_TIMEOUT_S: i64 = 1;

pub fn request_path(dirs: &WorkerDirs) -> PathBuf {
    dirs.runtime.join(REQUEST_FILE)
}

/// The checkpoints of one payload's run, as the supervisor takes them.
#[derive(Debug, Default)]
pub struct Checkpoints {
    /// Taken so far (published or not).
    taken: u32,
    /// Published directories, oldest first, at most [`KEPT`].
    kept: VecDeque<String>,
}

impl Checkpoints {
    /// Take a checkpoint if the payload asked for one and there is time before `deadline`.
    pub fn take_if_asked(
        &mut self,
        journal: &JournalWriter<WorkerEvent>,
        spec: &RunSpec,
        now: Micros,
    ) -> Result<(), JournalError> {
        let Some(n) = &spec.node else {
            return Ok(());
        };
        let request = request_path(&n.dirs);
        let Some(publish_dir) = n.publish_dir.as_deref() else {
            return Ok(());
        };
        if !request.exists() {
            return Ok(());
        }
        let left_s = (spec.deadline.0 - now.0) / 1_000_000 - MIN_TIMEOUT_S;
        if left_s < MIN_TIMEOUT_S {
            return Ok(());
        }
        let timeout_s = u32::try_from(left_s)
            .unwrap_or(u32::MAX)
            .min(n.publication_timeout_s.max(1));
        self.taken += 1;
        let outcome = self.publish(journal, spec, n, publish_dir, timeout_s)?;
        let removed = match &outcome {
            publish::Outcome::Published(p) => self.keep(p.dir.clone()),
            _ => None,
        };
        journal.append_one(outcome.checkpoint_event(self.taken, removed))?;
        // The payload may go on: its state is copied (or the copy failed, and said so).
        if let Err(e) = std::fs::remove_file(&request) {
            eprintln!(
                "dispatch worker: cannot remove {} after checkpoint {}: {e}",
                request.display(),
                self.taken
            );
        }
        Ok(())
    }

    fn publish(
        &self,
        journal: &JournalWriter<WorkerEvent>,
        spec: &RunSpec,
        n: &NodeSpec,
        publish_dir: &Path,
        timeout_s: u32,
    ) -> Result<publish::Outcome, JournalError> {
        let pinned =
            super::preflight::source_of(&n.assets).and_then(|s| s.record.commit.as_deref());
        publish::publish(
            &publish::Request {
                worker: &n.worker,
                submission_id: spec.submission_id,
                dirs: &n.dirs,
                publish_dir,
                pinned,
                timeout_s,
                checkpoint: Some(self.taken),
            },
            journal,
            Vec::new(),
        )
    }

    /// Keep `dir` as the newest; remove and return the oldest once more than [`KEPT`] are.
    fn keep(&mut self, dir: String) -> Option<String> {
        self.kept.push_back(dir);
        if self.kept.len() <= KEPT {
            return None;
        }
        let oldest = self.kept.pop_front()?;
        match std::fs::remove_dir_all(&oldest) {
            Ok(()) => Some(oldest),
            Err(e) => {
                eprintln!("dispatch worker: cannot remove the older checkpoint {oldest}: {e}");
                None
            }
        }
    }
}
