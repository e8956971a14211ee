//! Receiving-node checks, before the payload starts: the worker's directories (exist or can
//! be created, are real directories inside the worker's root, writable, with room, and not
//! another worker's) and every asset's SHA-256. The decisions are `policy::node`'s; this
//! module observes.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::dirs::WorkerDirs;
use super::files;
use crate::event::asset::{AssetKind, AssetRecord};
use crate::event::worker::{AssetChecked, ReceivingChecks};
use crate::next::Next;
use crate::policy::node::{self, DirProbe, Need, OwnerSeen};
use crate::statedir::trust;

/// The file in a worker's root that names its submission; its `flock` is held by the live
/// supervisor for the whole run.
pub const OWNER_FILE: &str = ".owner";

/// An asset as the supervisor receives it: its identity and where its file is on this node.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LocalAsset {
    #[serde(flatten)]
    pub record: AssetRecord,
    pub path: PathBuf,
}

/// Holding this keeps the worker's root marked as in use by a live supervisor.
#[derive(Debug)]
pub struct OwnerLock {
    _file: File,
}

/// Look at (and, if free, take) the root's owner file.
fn claim_owner(root: &Path, submission_id: Uuid) -> (OwnerSeen, Option<OwnerLock>) {
    let ours = submission_id.to_string();
    let path = root.join(OWNER_FILE);
    let Ok(mut f) = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
    else {
        // Unreadable or uncreatable: the directory probes report why.
        return (OwnerSeen::Free, None);
    };
    let live = f.try_lock().is_err();
    let mut text = String::new();
    let _ = f.read_to_string(&mut text);
    let recorded = text.trim().to_owned();
    match (recorded.as_str(), live) {
        ("", false) => {
            let written = f
                .set_len(0)
                .and_then(|()| f.rewind())
                .and_then(|()| f.write_all(ours.as_bytes()))
                .and_then(|()| f.sync_all());
            match written {
                Ok(()) => (OwnerSeen::Free, Some(OwnerLock { _file: f })),
                Err(_) => (OwnerSeen::Free, None),
            }
        }
        (r, false) if r == ours => (OwnerSeen::Ours, Some(OwnerLock { _file: f })),
        (r, true) if r == ours || r.is_empty() => (OwnerSeen::OursLive, None),
        (r, live) => (
            OwnerSeen::Other {
                submission: r.to_owned(),
                live,
            },
            None,
        ),
    }
}

fn probe_dir(role: &str, path: &Path, root: Option<&Path>, need: Need) -> DirProbe {
    let mut p = DirProbe {
        role: role.to_owned(),
        path: path.display().to_string(),
        problem: None,
        inside_root: root.is_none(),
        fs_id: 0,
        free_bytes: 0,
        free_inodes: 0,
        need,
    };
    if let Err(problem) = look_at_dir(&mut p, path, root) {
        p.problem = Some(problem);
    }
    p
}

/// What [`probe_dir`] finds, up to the first problem.
fn look_at_dir(p: &mut DirProbe, path: &Path, root: Option<&Path>) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| format!("{} cannot be created: {e}", path.display()))?;
    // The same rule as for everything below the coordinator's state directory: a real
    // directory, this user's, writable by nobody else.
    let m = std::fs::symlink_metadata(path)
        .map_err(|e| format!("{} cannot be inspected: {e}", path.display()))?;
    trust::judge_metadata(path, &m, trust::Want::Dir).map_err(|u| u.to_string())?;
    let probe = path.join(format!(".dispatch-probe-{}", std::process::id()));
    let writable = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)
        .and_then(|mut f| f.write_all(b"x"))
        .and_then(|()| std::fs::remove_file(&probe));
    if let Err(e) = writable {
        let _ = std::fs::remove_file(&probe);
        return Err(format!("{} is not writable: {e}", path.display()));
    }
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    p.path = canonical.display().to_string();
    if let Some(root) = root {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned());
        p.inside_root = canonical.starts_with(&root) && canonical != root;
    }
    (p.fs_id, p.free_bytes, p.free_inodes) =
        files::space(&canonical).map_err(|e| format!("free space of {}: {e}", path.display()))?;
    Ok(())
}

/// Take the worker's root for this submission: create it if missing, and hold its owner lock.
/// Refused (with why) when the root is another worker's, or another supervisor of this one
/// holds it. Done before anything is written below the root, the worker journal included.
pub fn claim(worker: &str, submission_id: Uuid, root: &Path) -> Result<OwnerLock, String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(|e| format!("{} cannot be created: {e}", root.display()))?;
    let (owner, lock) = claim_owner(root, submission_id);
    if let Some(problem) = node::owner_problem(worker, &owner) {
        return Err(format!("{}: {problem}", root.display()));
    }
    lock.ok_or_else(|| {
        format!(
            "cannot create or lock {}; check the directory's permissions",
            root.join(OWNER_FILE).display()
        )
    })
}

/// Has a run of this submission already begun here? Its worker journal (`journal_dir`) exists
/// with a segment: an earlier supervisor opened it. Slurm requeued the job (the same job id
/// started again: `restarts`, its `SLURM_RESTART_COUNT`), or something started the supervisor
/// twice. What that run recorded is its evidence, so a second run refuses before it writes
/// anything: why, or `None` when no run began here.
pub fn earlier_run(journal_dir: &Path, job: Option<u64>, restarts: Option<u32>) -> Option<String> {
    let segments = crate::journal::segment::list(journal_dir).ok()?;
    if segments.is_empty() {
        return None;
    }
    let requeued = match (job, restarts) {
        (Some(job), Some(n)) if n > 0 => {
            format!("Slurm requeued job {job} (Restarts={n}) and started it again")
        }
        _ => "this supervisor was started again".to_owned(),
    };
    Some(format!(
        "a run of this submission already began here (its worker journal {} exists): {requeued}. \
         A submission never runs twice: the earlier run's evidence stays as it was, and this \
         run ends without starting the payload",
        journal_dir.display()
    ))
}

/// Check the worker's directories (and the publication directory, for space and access),
/// once its root is claimed.
pub fn check_dirs(
    worker: &str,
    dirs: &WorkerDirs,
    publish_dir: Option<&Path>,
    source: Option<&AssetRecord>,
) -> ReceivingChecks {
    let checkout_need = source.map_or(Need::default(), |s| {
        node::checkout_need(
            s.bytes,
            s.tree_bytes.unwrap_or(0),
            s.tree_files.unwrap_or(0),
        )
    });
    let mut probes: Vec<DirProbe> = [
        ("checkout", &dirs.checkout, checkout_need),
        ("runtime", &dirs.runtime, Need::default()),
        ("cache", &dirs.cache, Need::default()),
        ("state", &dirs.state, Need::default()),
        ("evidence", &dirs.evidence, Need::default()),
    ]
    .into_iter()
    .map(|(role, path, need)| probe_dir(role, path, Some(&dirs.root), need))
    .collect();
    if let Some(p) = publish_dir {
        probes.push(probe_dir("publication", p, None, Need::default()));
    }
    let checks = node::check_dirs(worker, &probes);
    let ok = checks.iter().all(|c| c.ok);
    ReceivingChecks { checks, ok }
}

/// Recompute an asset's SHA-256 on this node.
pub fn check_asset(a: &LocalAsset) -> AssetChecked {
    let mut c = AssetChecked {
        name: a.record.name.clone(),
        kind: a.record.kind,
        expected: a.record.sha256,
        observed: None,
        ok: false,
        reason: String::new(),
    };
    match std::fs::symlink_metadata(&a.path) {
        Ok(m) if m.file_type().is_file() => match files::hash_file(&a.path, None, |_| {}) {
            Ok((h, bytes)) => {
                c.observed = Some(h);
                c.ok = h == a.record.sha256 && bytes == a.record.bytes;
                if !c.ok {
                    c.reason = format!(
                        "{} has sha256 {} ({bytes} bytes), not the recorded {} ({} bytes): \
                         the shared asset was changed. Run {}",
                        a.path.display(),
                        hex::encode(h.0),
                        hex::encode(a.record.sha256.0),
                        a.record.bytes,
                        Next::AssetVerify(Some(&a.record.name))
                    );
                }
            }
            Err(e) => c.reason = e.to_string(),
        },
        Ok(_) => c.reason = format!("{} is not a regular file", a.path.display()),
        Err(e) => c.reason = format!("{}: {e}", a.path.display()),
    }
    c
}

/// The source asset among `assets`, if there is one.
pub fn source_of(assets: &[LocalAsset]) -> Option<&LocalAsset> {
    assets.iter().find(|a| a.record.kind == AssetKind::Source)
}
