//! Publication: the workspace (a git bundle of the worker's commits on top of the pinned
//! commit, plus its uncommitted changes as a patch; a plain copy when there is no source
//! asset) and the evidence, into `<published>/<worker>-<submission>/`, atomically: everything
//! is written in a temporary directory beside it, with a manifest of every file's SHA-256, and
//! fsynced (every file and directory, several at once: `files::sync_all`), then renamed into
//! place and the parent fsynced. Past the timeout the work stops,
//! the temporary directory is removed, and nothing half-published is ever visible.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::dirs::WorkerDirs;
use super::files::{self, FileError};
use super::git::{self, GitError};
use crate::event::worker::*;
use crate::event::{Sha256Digest, WorkerEvent};
use crate::failpoint;
use crate::journal::{JournalError, JournalWriter};
use crate::policy::manifest::{Entry, Manifest, MANIFEST_NAME};

/// The most files one publication copies.
pub const MAX_PUBLISHED_FILES: u64 = 100_000;
pub const BUNDLE_NAME: &str = "workspace.bundle";
pub const PATCH_NAME: &str = "workspace.patch";

pub fn published_name(worker: &str, submission_id: Uuid) -> String {
    format!("{worker}-{submission_id}")
}

/// Where checkpoint `number` of a running worker is published, beside its final publication.
pub fn checkpoint_name(worker: &str, submission_id: Uuid, number: u32) -> String {
    format!("{worker}-{submission_id}-checkpoint-{number}")
}

/// A checkpoint publication's copy of the native state, below its directory.
pub const CHECKPOINT_STATE: &str = "state";

fn temp_prefix(worker: &str, submission_id: Uuid) -> String {
    format!(".tmp-{worker}-{submission_id}-")
}

/// What to publish, and where.
pub struct Request<'a> {
    pub worker: &'a str,
    pub submission_id: Uuid,
    pub dirs: &'a WorkerDirs,
    pub publish_dir: &'a Path,
    /// The commit the checkout started from; `None` when the worker had no source asset.
    pub pinned: Option<&'a str>,
    pub timeout_s: u32,
    /// `Some(n)`: checkpoint `n` of a payload still running (the workspace and a copy of the
    /// native state under `state/`); `None`: the final publication (the workspace and the
    /// evidence).
    pub checkpoint: Option<u32>,
}

impl Request<'_> {
    fn name(&self) -> String {
        match self.checkpoint {
            Some(n) => checkpoint_name(self.worker, self.submission_id, n),
            None => published_name(self.worker, self.submission_id),
        }
    }
}

/// How a publication ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Published(Published),
    TimedOut(PublicationTimedOut),
    Failed(PublicationFailed),
}

impl Outcome {
    pub fn published(&self) -> bool {
        matches!(self, Outcome::Published(_))
    }

    /// The record of this outcome for the worker journal.
    pub fn event(&self) -> WorkerEvent {
        match self {
            Outcome::Published(p) => WorkerEvent::Published(p.clone()),
            Outcome::TimedOut(t) => WorkerEvent::PublicationTimedOut(t.clone()),
            Outcome::Failed(f) => WorkerEvent::PublicationFailed(f.clone()),
        }
    }

    /// The record of this outcome for checkpoint `number`, which removed `removed` once it
    /// was in place.
    pub fn checkpoint_event(&self, number: u32, removed: Option<String>) -> WorkerEvent {
        match self {
            Outcome::Published(p) => WorkerEvent::CheckpointPublished(CheckpointPublished {
                number,
                dir: p.dir.clone(),
                manifest_sha256: p.manifest_sha256,
                files: p.files,
                bytes: p.bytes,
                took_ms: p.took_ms,
                removed,
            }),
            Outcome::TimedOut(t) => WorkerEvent::CheckpointUnpublished(CheckpointUnpublished {
                number,
                reason: format!(
                    "its {} s timeout ran out at stage {} after {} ms",
                    t.timeout_s, t.stage, t.took_ms
                ),
                temp_removed: t.temp_removed,
            }),
            Outcome::Failed(f) => WorkerEvent::CheckpointUnpublished(CheckpointUnpublished {
                number,
                reason: f.reason.clone(),
                temp_removed: f.temp_removed,
            }),
        }
    }
}

enum Stop {
    TimedOut,
    Failed(String),
}

impl From<FileError> for Stop {
    fn from(e: FileError) -> Stop {
        match e {
            FileError::TimedOut => Stop::TimedOut,
            other => Stop::Failed(other.to_string()),
        }
    }
}

impl From<GitError> for Stop {
    fn from(e: GitError) -> Stop {
        match e {
            GitError::TimedOut { .. } => Stop::TimedOut,
            other => Stop::Failed(other.to_string()),
        }
    }
}

/// The temporary directory as it fills.
struct Staging {
    temp: PathBuf,
    deadline: Instant,
    entries: Vec<Entry>,
    /// Directories created inside `temp`, to fsync before the rename.
    made: Vec<PathBuf>,
    /// Files written inside `temp`, to fsync before the rename.
    written: Vec<PathBuf>,
    stage: &'static str,
    bytes: u64,
    commits: u64,
    patch_bytes: u64,
    head: Option<String>,
}

impl Staging {
    fn check(&self) -> Result<(), Stop> {
        if Instant::now() >= self.deadline {
            return Err(Stop::TimedOut);
        }
        Ok(())
    }

    fn mkdir(&mut self, rel: &Path) -> Result<PathBuf, Stop> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = self.temp.join(rel);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(files::io(&dir, "create directory"))?;
        self.made.push(dir.clone());
        Ok(dir)
    }

    fn add(&mut self, rel: &Path, bytes: u64, sha256: Sha256Digest) -> Result<(), Stop> {
        if self.entries.len() as u64 >= MAX_PUBLISHED_FILES {
            return Err(Stop::Failed(format!(
                "more than {MAX_PUBLISHED_FILES} files to publish"
            )));
        }
        self.bytes += bytes;
        self.entries.push(Entry {
            path: rel.display().to_string(),
            bytes,
            sha256: hex::encode(sha256.0),
        });
        Ok(())
    }

    /// Hash a file git wrote into the temporary directory (fsynced with the rest).
    fn add_written(&mut self, rel: &Path) -> Result<u64, Stop> {
        let path = self.temp.join(rel);
        let (sha, bytes) = files::hash_file(&path, Some(self.deadline), |_| {})?;
        self.add(rel, bytes, sha)?;
        self.written.push(path);
        Ok(bytes)
    }

    /// Copy the regular files below `src` into `rel` (symlinks and special files are not
    /// published: they are not content). A directory that cannot be read fails the
    /// publication rather than leave a hole in it.
    fn copy_tree(&mut self, src: &Path, rel: &Path) -> Result<(), Stop> {
        self.mkdir(rel)?;
        let t = files::tree(src, MAX_PUBLISHED_FILES);
        if let Some(d) = t.unreadable.first() {
            return Err(Stop::Failed(format!(
                "{} cannot be read",
                src.join(d).display()
            )));
        }
        if !t.complete {
            return Err(Stop::Failed(format!(
                "{} holds more than {MAX_PUBLISHED_FILES} entries",
                src.display()
            )));
        }
        for (child, m) in &t.entries {
            if m.is_dir() {
                self.mkdir(&rel.join(child))?;
            } else if m.is_file() {
                self.check()?;
                failpoint::hit("supervisor-publish-copy");
                let to = self.temp.join(rel).join(child);
                let (sha, bytes) =
                    files::copy_file_unsynced(&src.join(child), &to, Some(self.deadline), || {})?;
                self.add(&rel.join(child), bytes, sha)?;
                self.written.push(to);
            }
        }
        Ok(())
    }

    /// The worker's commits on top of `pinned` as a bundle, and everything not committed
    /// (untracked files included, ignored ones not) as a binary patch against `HEAD`.
    fn workspace_from_git(
        &mut self,
        checkout: &Path,
        pinned: &str,
        scratch: &Path,
    ) -> Result<(), Stop> {
        self.bundle_commits(checkout, pinned)?;
        self.patch_uncommitted(checkout, scratch)
    }

    /// Record `HEAD` and how many commits the worker made on top of `pinned`; bundle them
    /// when there are any.
    fn bundle_commits(&mut self, checkout: &Path, pinned: &str) -> Result<(), Stop> {
        let head = git::line(
            Some(checkout),
            &["rev-parse", "--verify", "HEAD^{commit}"],
            self.deadline,
        )?;
        let range = format!("^{pinned}");
        let count = git::line(
            Some(checkout),
            &["rev-list", "--count", "HEAD", "--branches", &range],
            self.deadline,
        )?;
        self.commits = count.parse().unwrap_or(0);
        self.head = Some(head);
        if self.commits > 0 {
            self.stage = "bundle";
            let out = self.temp.join(BUNDLE_NAME);
            git::run(
                Some(checkout),
                &[
                    OsStr::new("bundle"),
                    OsStr::new("create"),
                    OsStr::new("-q"),
                    out.as_os_str(),
                    OsStr::new("HEAD"),
                    OsStr::new("--branches"),
                    OsStr::new(&range),
                ],
                &[],
                None,
                git::Out::Capture,
                self.deadline,
            )?;
            self.add_written(Path::new(BUNDLE_NAME))?;
        }
        Ok(())
    }

    /// Everything not committed as a binary patch against `HEAD`.
    fn patch_uncommitted(&mut self, checkout: &Path, scratch: &Path) -> Result<(), Stop> {
        self.stage = "patch";
        // A scratch index, so the checkout's own index (what the payload staged) is left as
        // it was: the checkout stays the only copy of the work if publication fails.
        let index = scratch.join(format!(".publish-index-{}", std::process::id()));
        let _ = std::fs::remove_file(&index);
        let own_index = checkout.join(".git/index");
        if own_index.exists() {
            std::fs::copy(&own_index, &index).map_err(files::io(&own_index, "copy"))?;
        }
        let env = [("GIT_INDEX_FILE", index.as_os_str())];
        let result = (|| {
            git::run(
                Some(checkout),
                &["add", "-A"].map(OsStr::new),
                &env,
                None,
                git::Out::Capture,
                self.deadline,
            )?;
            let patch = self.temp.join(PATCH_NAME);
            let out = std::fs::File::create(&patch).map_err(files::io(&patch, "create"))?;
            git::run(
                Some(checkout),
                &[
                    "diff",
                    "--cached",
                    "--binary",
                    "--no-color",
                    "--no-ext-diff",
                    "HEAD",
                ]
                .map(OsStr::new),
                &env,
                None,
                git::Out::File(out),
                self.deadline,
            )?;
            self.patch_bytes = self.add_written(Path::new(PATCH_NAME))?;
            Ok(())
        })();
        let _ = std::fs::remove_file(&index);
        result
    }

    /// Fill the (new) temporary directory, seal it and rename it into place as `dir`, which
    /// must not exist: a publication is never overwritten. Returns the manifest's digest.
    fn publish_into(&mut self, req: &Request<'_>, dir: &Path) -> Result<Sha256Digest, Stop> {
        if dir.exists() {
            return Err(Stop::Failed(format!(
                "{} already exists; a publication is never overwritten",
                dir.display()
            )));
        }
        std::fs::create_dir(&self.temp).map_err(files::io(&self.temp, "create directory"))?;
        match req.pinned {
            Some(pinned) => {
                self.workspace_from_git(&req.dirs.checkout, pinned, &req.dirs.runtime)?
            }
            None => self.copy_tree(&req.dirs.checkout, Path::new("workspace"))?,
        }
        match req.checkpoint {
            Some(_) => {
                self.stage = "state";
                self.copy_tree(&req.dirs.state, Path::new(CHECKPOINT_STATE))?;
            }
            None => {
                self.stage = "evidence";
                self.copy_tree(&req.dirs.evidence, Path::new("evidence"))?;
            }
        }
        let manifest_sha256 = self.seal(req)?;
        failpoint::hit("supervisor-publish-before-rename");
        self.stage = "rename";
        self.check()?;
        std::fs::rename(&self.temp, dir).map_err(files::io(dir, "rename into place"))?;
        files::fsync_dir(req.publish_dir)?;
        Ok(manifest_sha256)
    }

    /// The outcome of [`Staging::publish_into`]; a publication that stopped removes its
    /// temporary directory first, so nothing half-published stays behind.
    fn outcome(
        &self,
        result: Result<Sha256Digest, Stop>,
        req: &Request<'_>,
        dir: &Path,
        took_ms: u64,
    ) -> Outcome {
        let stop = match result {
            Ok(manifest_sha256) => {
                return Outcome::Published(Published {
                    dir: dir.display().to_string(),
                    manifest_sha256,
                    files: self.entries.len() as u64,
                    bytes: self.bytes,
                    commits: self.commits,
                    patch_bytes: self.patch_bytes,
                    took_ms,
                })
            }
            Err(stop) => stop,
        };
        let temp_removed = match std::fs::remove_dir_all(&self.temp) {
            Ok(()) => true,
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
        match stop {
            Stop::TimedOut => Outcome::TimedOut(PublicationTimedOut {
                timeout_s: req.timeout_s,
                took_ms,
                stage: self.stage.to_owned(),
                temp_removed,
            }),
            Stop::Failed(reason) => Outcome::Failed(PublicationFailed {
                reason,
                temp_removed,
            }),
        }
    }

    fn seal(&mut self, req: &Request<'_>) -> Result<Sha256Digest, Stop> {
        self.stage = "manifest";
        let manifest = Manifest::new(
            req.worker,
            &req.submission_id.to_string(),
            req.pinned.map(str::to_owned),
            self.head.clone(),
            std::mem::take(&mut self.entries),
        );
        let bytes = manifest.to_bytes();
        let manifest_path = self.temp.join(MANIFEST_NAME);
        files::write_new_unsynced(&manifest_path, &bytes, 0o600)?;
        self.entries = manifest.files;
        // Every file and directory durable before the rename makes them visible; in which
        // order they get there does not matter.
        let mut sync = std::mem::take(&mut self.written);
        sync.push(manifest_path);
        sync.append(&mut self.made);
        sync.push(self.temp.clone());
        files::sync_all(&sync, Some(self.deadline))?;
        use sha2::Digest;
        Ok(Sha256Digest(sha2::Sha256::digest(&bytes).into()))
    }
}

/// Publish, recording the start in the worker journal together with `records` (what the
/// supervisor saw since its last commit: one commit, not two). The outcome is returned, not
/// recorded: the caller records it in the commit of whatever it starts next, before it starts.
pub fn publish(
    req: &Request<'_>,
    journal: &JournalWriter<WorkerEvent>,
    records: Vec<WorkerEvent>,
) -> Result<Outcome, JournalError> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(u64::from(req.timeout_s));
    let name = req.name();
    let dir = req.publish_dir.join(&name);
    let temp = req.publish_dir.join(format!(
        "{}{}-{}",
        temp_prefix(req.worker, req.submission_id),
        req.checkpoint.unwrap_or(0),
        std::process::id()
    ));
    let mut commit = records;
    let (dir_text, temp_dir) = (dir.display().to_string(), temp.display().to_string());
    commit.push(match req.checkpoint {
        Some(number) => WorkerEvent::CheckpointPublishing(CheckpointPublishing {
            number,
            dir: dir_text,
            temp_dir,
            timeout_s: req.timeout_s,
        }),
        None => WorkerEvent::PublicationStarted(PublicationStarted {
            dir: dir_text,
            temp_dir,
            timeout_s: req.timeout_s,
        }),
    });
    journal.append(commit)?;
    failpoint::hit("supervisor-publish-after-intent");
    // Left by an earlier run of this same submission that died, or by a checkpoint of this
    // one that stopped: it can never finish.
    sweep_temps(req.publish_dir, req.worker, req.submission_id);
    let mut s = Staging {
        temp: temp.clone(),
        deadline,
        entries: Vec::new(),
        made: Vec::new(),
        written: Vec::new(),
        stage: "workspace",
        bytes: 0,
        commits: 0,
        patch_bytes: 0,
        head: None,
    };
    let result = s.publish_into(req, &dir);
    let took_ms = started.elapsed().as_millis() as u64;
    Ok(s.outcome(result, req, &dir, took_ms))
}

/// Remove the temporary directories a publication of this submission left behind (its
/// supervisor was killed mid-way). Only safe once no supervisor of it can be running.
pub fn sweep_temps(publish_dir: &Path, worker: &str, submission_id: Uuid) -> usize {
    let prefix = temp_prefix(worker, submission_id);
    let Ok(entries) = std::fs::read_dir(publish_dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|e| std::fs::remove_dir_all(e.path()).is_ok())
        .count()
}

/// Check published evidence as it was recorded: the manifest's own SHA-256 is `manifest_sha256`,
/// and the directory matches the manifest (`verify_published`).
pub fn verify_recorded(dir: &Path, manifest_sha256: &Sha256Digest) -> Result<(), Vec<String>> {
    let path = dir.join(MANIFEST_NAME);
    let (sha, _) = files::hash_file(&path, None, |_| {}).map_err(|e| vec![e.to_string()])?;
    let mut problems = Vec::new();
    if sha != *manifest_sha256 {
        problems.push(format!(
            "{}: SHA-256 {} is not the recorded {}",
            path.display(),
            hex::encode(sha.0),
            hex::encode(manifest_sha256.0)
        ));
    }
    if let Err(more) = verify_published(dir) {
        problems.extend(more);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Check a published directory against its manifest: every file listed, none unlisted, every
/// size and SHA-256 equal. Returns the manifest, or every difference found.
pub fn verify_published(dir: &Path) -> Result<Manifest, Vec<String>> {
    let bytes = std::fs::read(dir.join(MANIFEST_NAME))
        .map_err(|e| vec![format!("{}: {e}", dir.join(MANIFEST_NAME).display())])?;
    let manifest = Manifest::parse(&bytes).map_err(|e| vec![e.to_string()])?;
    let t = files::tree(dir, MAX_PUBLISHED_FILES + 1);
    if !t.complete || !t.unreadable.is_empty() {
        return Err(vec![format!(
            "{} cannot be listed completely",
            dir.display()
        )]);
    }
    let mut present = Vec::new();
    for (rel, m) in &t.entries {
        if m.is_dir() || rel == Path::new(MANIFEST_NAME) {
            continue;
        }
        let (sha, bytes) =
            files::hash_file(&dir.join(rel), None, |_| {}).map_err(|e| vec![e.to_string()])?;
        present.push(Entry {
            path: rel.display().to_string(),
            bytes,
            sha256: hex::encode(sha.0),
        });
    }
    let diff = manifest.differences(present);
    if diff.is_empty() {
        Ok(manifest)
    } else {
        Err(diff)
    }
}
