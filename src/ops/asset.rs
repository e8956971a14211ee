//! `dispatch asset add-source|add-image|list|verify`.
//!
//! An asset's file is built under a temporary name outside the journal lock (a large image
//! can take a while), hashed, and made read-only. Then, with the lock held: check the name →
//! `AssetAddIntent` (naming the identity) → rename into `assets/<sha256>.<ext>` →
//! `AssetAdded`. Because intent and outcome are written under one lock hold, an intent without
//! outcome found under the lock belongs to a dead process and is marked failed; a name already
//! bound to the very asset just built means an earlier add finished, and is the answer. So the
//! same add run again is right wherever a previous one stopped. The temporary files are
//! held under an `flock` while they may still be used (`TempFiles`); every command that
//! takes the journal lock removes those nobody holds (`sweep_dead_temps`).
//!
//! A source asset is a git bundle of the pinned commit, written by hand around
//! `git pack-objects`, so the user's repository gains no ref. The temporary files
//! (`assets/.tmp-<pid>-<uuid>`, `….tree`) live beside `….lock`, which the add holds under
//! `flock` until they are gone. The sweep trusts that lock, never the pid: a pid may be reused.
//! A name bound to the asset just built (same commit, or same SHA-256 for an image) is a
//! finished earlier add, so the add is right after a kill at any point.

use std::ffi::OsStr;
use std::io::{BufRead, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::asset_files::{assets_dir, TempFiles};
use super::context::Ctx;
use super::error::OpError;
use crate::event::asset::*;
use crate::event::{Event, Sha256Digest};
use crate::failpoint;
use crate::names::check_path_name;
use crate::next::Next;
use crate::policy::asset::{self as policy, AssetRefusal};
use crate::slurm::Scheduler;
use crate::state::asset::*;
use crate::worker::files::{self, FileError};
use crate::worker::git::{self, Out};

/// How long git may take to build a source asset.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(3600);

/// The assets a worker submission names (pool or job), checked against the journal and
/// (cheaply) their files, in the order source, image.
pub fn resolve_for_worker(
    state: &crate::state::State,
    state_dir: &Path,
    source: Option<&str>,
    image: Option<&str>,
) -> Result<Vec<AssetRecord>, OpError> {
    let mut out = Vec::new();
    for (name, kind) in [(source, AssetKind::Source), (image, AssetKind::Image)] {
        let Some(name) = name else { continue };
        let a = policy::check_use(
            &state.assets,
            name,
            kind,
            |a| match std::fs::symlink_metadata(state_dir.join(&a.record.file)) {
                Ok(m) if m.is_file() => policy::FileSeen::File { bytes: m.len() },
                Ok(_) => policy::FileSeen::NotAFile,
                Err(_) => policy::FileSeen::Missing,
            },
        )?;
        // The file a worker will be handed: ours, written by nobody else, not a link.
        crate::statedir::trust::check(
            &state_dir.join(&a.record.file),
            crate::statedir::trust::Want::File,
        )?;
        out.push(a.record.clone());
    }
    Ok(out)
}

#[derive(Debug, Serialize)]
pub struct AssetView {
    pub name: String,
    #[serde(serialize_with = "crate::state::word")]
    pub kind: AssetKind,
    #[serde(serialize_with = "crate::state::word")]
    pub state: AssetState,
    pub sha256: String,
    pub bytes: u64,
    pub file: String,
    pub commit: Option<String>,
    pub tree_files: Option<u64>,
    pub tree_bytes: Option<u64>,
    pub origin: String,
    pub rev: Option<String>,
    pub added_at: String,
}

impl AssetView {
    fn of(state_dir: &Path, a: &Asset) -> AssetView {
        AssetView {
            name: a.record.name.clone(),
            kind: a.record.kind,
            state: a.state,
            sha256: hex::encode(a.record.sha256.0),
            bytes: a.record.bytes,
            file: state_dir.join(&a.record.file).display().to_string(),
            commit: a.record.commit.clone(),
            tree_files: a.record.tree_files,
            tree_bytes: a.record.tree_bytes,
            origin: a.origin.clone(),
            rev: a.rev.clone(),
            added_at: a.added_at.to_rfc3339(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct AssetList {
    pub assets: Vec<AssetView>,
}

/// What an add was asked for.
#[derive(Clone, Debug)]
pub enum AddRequest {
    Source { repo: PathBuf, rev: Option<String> },
    Image { file: PathBuf },
}

fn failed(name: &str, what: impl std::fmt::Display) -> OpError {
    OpError::Failed(format!(
        "asset {name:?}: {what}; nothing was added. Fix that and run the same command again"
    ))
}

fn file_failed(name: &str) -> impl FnOnce(FileError) -> OpError + '_ {
    move |e| failed(name, e)
}

/// Removes a file unless it was put in place.
struct Temp(Option<PathBuf>);

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A source asset's file: a git bundle (format v2, or v3 for SHA-256 repositories) whose one
/// ref, `HEAD`, is the pinned commit, holding that commit and its whole history. Written by
/// hand around `git pack-objects`, because `git bundle create` only bundles refs, and
/// creating a ref would change the user's repository.
fn build_source(
    repo: &Path,
    rev: &str,
    tmp: &Path,
    name: &str,
) -> Result<(String, u64, u64), OpError> {
    let deadline = Instant::now() + GIT_TIMEOUT;
    let fail = |e: git::GitError| failed(name, e);
    let commit_rev = format!("{rev}^{{commit}}");
    let commit = git::line(
        Some(repo),
        &["rev-parse", "--verify", "--end-of-options", &commit_rev],
        deadline,
    )
    .map_err(fail)?;
    if !git::is_object_id(&commit) {
        return Err(failed(name, format!("{rev:?} did not resolve to a commit")));
    }
    let format = git::line(Some(repo), &["rev-parse", "--show-object-format"], deadline)
        .unwrap_or_else(|_| "sha1".to_owned());
    let header = if format == "sha1" {
        format!("# v2 git bundle\n{commit} HEAD\n\n")
    } else {
        format!("# v3 git bundle\n@object-format={format}\n{commit} HEAD\n\n")
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)
        .map_err(|e| failed(name, format!("create {}: {e}", tmp.display())))?;
    f.write_all(header.as_bytes())
        .and_then(|()| f.flush())
        .map_err(|e| failed(name, format!("write {}: {e}", tmp.display())))?;
    let input = format!("{commit}\n");
    git::run(
        Some(repo),
        &["pack-objects", "--stdout", "--revs", "-q"].map(OsStr::new),
        &[],
        Some(input.as_bytes()),
        Out::File(f),
        deadline,
    )
    .map_err(fail)?;
    git::run(
        Some(repo),
        &[
            OsStr::new("bundle"),
            OsStr::new("verify"),
            OsStr::new("-q"),
            tmp.as_os_str(),
        ],
        &[],
        None,
        Out::Capture,
        deadline,
    )
    .map_err(fail)?;
    // What a checkout of it needs: the pinned tree's files and bytes.
    let (files, bytes) = tree_size(repo, &commit, tmp, name, deadline)?;
    Ok((commit, files, bytes))
}

/// The number of files of commit `commit`'s tree and their bytes, from `git ls-tree` (its
/// listing kept beside `tmp` while it is read).
fn tree_size(
    repo: &Path,
    commit: &str,
    tmp: &Path,
    name: &str,
    deadline: Instant,
) -> Result<(u64, u64), OpError> {
    let fail = |e: git::GitError| failed(name, e);
    let listing = tmp.with_extension("tree");
    let _listing_guard = Temp(Some(listing.clone()));
    let out = std::fs::File::create(&listing)
        .map_err(|e| failed(name, format!("create {}: {e}", listing.display())))?;
    git::run(
        Some(repo),
        &["ls-tree", "-r", "-l", "--full-tree", commit].map(OsStr::new),
        &[],
        None,
        Out::File(out),
        deadline,
    )
    .map_err(fail)?;
    let (mut files, mut bytes) = (0u64, 0u64);
    let reader = std::io::BufReader::new(
        std::fs::File::open(&listing)
            .map_err(|e| failed(name, format!("read {}: {e}", listing.display())))?,
    );
    for line in reader.split(b'\n') {
        let line = line.map_err(|e| failed(name, format!("read the tree listing: {e}")))?;
        // `<mode> <type> <object> <size>\t<path>`; a submodule's size is `-`.
        let meta = line.split(|b| *b == b'\t').next().unwrap_or_default();
        let size = meta
            .split(|b| *b == b' ')
            .filter(|f| !f.is_empty())
            .nth(3)
            .and_then(|s| std::str::from_utf8(s).ok())
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        files += 1;
        bytes = bytes.saturating_add(size);
    }
    Ok((files, bytes))
}

/// Build asset `name`'s file at `tmp` (a source's bundle, an image's copy), hash it and seal it
/// read-only: its record, where it came from, and the revision asked for.
fn build(
    req: &AddRequest,
    name: &str,
    tmp: &Path,
) -> Result<(AssetRecord, PathBuf, Option<String>), OpError> {
    let (kind, origin, rev, commit, tree, ext) = match req {
        AddRequest::Source { repo, rev } => {
            let r = rev.clone().unwrap_or_else(|| "HEAD".to_owned());
            let (commit, files, bytes) = build_source(repo, &r, tmp, name)?;
            let origin = std::fs::canonicalize(repo).unwrap_or_else(|_| repo.clone());
            (
                AssetKind::Source,
                origin,
                Some(r),
                Some(commit),
                Some((files, bytes)),
                "bundle",
            )
        }
        AddRequest::Image { file } => {
            files::copy_file(file, tmp, None, || {}).map_err(file_failed(name))?;
            let origin = std::fs::canonicalize(file).unwrap_or_else(|_| file.clone());
            (AssetKind::Image, origin, None, None, None, "image")
        }
    };
    let (sha256, bytes) = files::hash_file(tmp, None, |_| {}).map_err(file_failed(name))?;
    std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o444))
        .and_then(|()| std::fs::File::open(tmp)?.sync_all())
        .map_err(|e| failed(name, format!("seal {}: {e}", tmp.display())))?;
    let rel = format!("assets/{}.{ext}", hex::encode(sha256.0));
    let record = AssetRecord {
        name: name.to_owned(),
        kind,
        sha256,
        bytes,
        file: rel,
        commit,
        tree_files: tree.map(|t| t.0),
        tree_bytes: tree.map(|t| t.1),
    };
    Ok((record, origin, rev))
}

/// The intent of adding asset `name`, after the failure of an add that stopped between its
/// intent and its outcome (`abandon_pending`), in one commit.
fn add_intent(
    name: &str,
    record: &AssetRecord,
    origin: &Path,
    rev: &Option<String>,
    abandon_pending: bool,
) -> Vec<Event> {
    let mut events = Vec::new();
    if abandon_pending {
        events.push(Event::AssetAddFailed(AssetAddFailed {
            name: name.to_owned(),
            reason: "the process adding it stopped between its intent and its outcome".to_owned(),
        }));
    }
    events.push(Event::AssetAddIntent(AssetAddIntent {
        asset: record.clone(),
        origin: origin.display().to_string(),
        rev: rev.clone(),
    }));
    events
}

pub fn add<S: Scheduler>(ctx: &Ctx<S>, name: &str, req: &AddRequest) -> Result<AssetView, OpError> {
    check_path_name("asset", name).map_err(OpError::Usage)?;
    let wanted = match req {
        AddRequest::Source { .. } => AssetKind::Source,
        AddRequest::Image { .. } => AssetKind::Image,
    };
    // A cheap early refusal before building anything; the binding check that counts runs
    // again under the lock.
    policy::check_add(&ctx.read_state()?.assets, name, wanted)?;
    ctx.state_dir.prepare()?;
    let dir = assets_dir(&ctx.state_dir);
    crate::journal::files::create_private_dir(&dir)?;
    let mut temp = TempFiles::create(&dir).map_err(|e| {
        failed(
            name,
            format!("create a temporary file in {}: {e}", dir.display()),
        )
    })?;
    let tmp = temp.path().to_owned();
    let (record, origin, rev) = build(req, name, &tmp)?;
    let rel = record.file.clone();
    let sha256 = record.sha256;

    let (writer, loaded) = ctx.lock_and_load()?;
    let abandon_pending = match policy::plan_add(&loaded.state.assets, &record)? {
        policy::AddPlan::AlreadyAdded => {
            let bound = &loaded.state.assets.by_name[name];
            return Ok(AssetView::of(&ctx.state_dir, bound));
        }
        policy::AddPlan::Bind { abandon_pending } => abandon_pending,
    };
    writer.append(add_intent(name, &record, &origin, &rev, abandon_pending))?;
    failpoint::hit("asset-add-after-intent");
    let target = ctx.state_dir.join(&rel);
    if let Err(why) = place(&tmp, &target, &sha256) {
        writer.append_one(Event::AssetAddFailed(AssetAddFailed {
            name: name.to_owned(),
            reason: why.clone(),
        }))?;
        return Err(failed(name, why));
    }
    temp.put_in_place();
    failpoint::hit("asset-add-before-record");
    writer.append_one(Event::AssetAdded(AssetAdded {
        name: name.to_owned(),
        sha256,
    }))?;
    drop(writer);
    drop(temp);
    let asset = Asset {
        record,
        origin: origin.display().to_string(),
        rev,
        state: AssetState::Ready,
        added_at: crate::event::Micros::now(),
    };
    Ok(AssetView::of(&ctx.state_dir, &asset))
}

/// Put the prepared file in place. Files are named by content, so an existing file with the
/// same name must already hold these bytes; if it does not, it was damaged and is left alone.
fn place(tmp: &Path, target: &Path, sha256: &Sha256Digest) -> Result<(), String> {
    match std::fs::symlink_metadata(target) {
        Ok(m) => {
            // Never hash through a link, nor trust a file someone else put there.
            crate::statedir::trust::judge_metadata(target, &m, crate::statedir::trust::Want::File)
                .map_err(|e| e.to_string())?;
            let (existing, _) =
                files::hash_file(target, None, |_| {}).map_err(|e| e.to_string())?;
            if existing != *sha256 {
                return Err(format!(
                    "{} exists with other contents (sha256 {}); run {}",
                    target.display(),
                    hex::encode(existing.0),
                    Next::AssetVerify(None)
                ));
            }
            let _ = std::fs::remove_file(tmp);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::rename(tmp, target)
                .map_err(|e| format!("rename into {}: {e}", target.display()))?;
            let dir = target.parent().expect("assets/<file> has a parent");
            files::fsync_dir(dir).map_err(|e| e.to_string())
        }
        Err(e) => Err(format!("inspect {}: {e}", target.display())),
    }
}

pub fn list<S: Scheduler>(ctx: &Ctx<S>) -> Result<AssetList, OpError> {
    let state = ctx.read_state()?;
    let assets = state.assets.by_name.values();
    Ok(AssetList {
        assets: assets.map(|a| AssetView::of(&ctx.state_dir, a)).collect(),
    })
}

crate::words! {
    /// What `asset verify` found an asset's file to be.
    pub enum FileStatus {
        /// Its SHA-256 is the recorded one.
        Ok => "ok",
        Mismatch => "mismatch",
        Missing => "missing",
        NotAFile => "not_a_file",
        Unreadable => "unreadable",
        /// Its add has no outcome yet: nothing to check.
        Pending => "pending",
    }
}

#[derive(Debug, Serialize)]
pub struct Verified {
    pub name: String,
    #[serde(serialize_with = "crate::state::word")]
    pub kind: AssetKind,
    pub file: String,
    pub sha256: String,
    pub status: FileStatus,
    pub observed_sha256: Option<String>,
    /// Is the file still read-only, as dispatch left it?
    pub read_only: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct VerifyReport {
    pub ok: bool,
    pub assets: Vec<Verified>,
}

/// Recompute every selected asset's SHA-256 (all when `names` is empty).
pub fn verify<S: Scheduler>(ctx: &Ctx<S>, names: &[String]) -> Result<VerifyReport, OpError> {
    let state = ctx.read_state()?;
    let all = &state.assets.by_name;
    if let Some(missing) = names.iter().find(|n| !all.contains_key(*n)) {
        return Err(AssetRefusal::NoSuchAsset {
            name: missing.clone(),
        }
        .into());
    }
    let mut out = Vec::new();
    for a in all.values() {
        if !names.is_empty() && !names.contains(&a.record.name) {
            continue;
        }
        let path = ctx.state_dir.join(&a.record.file);
        let mut v = Verified {
            name: a.record.name.clone(),
            kind: a.record.kind,
            file: path.display().to_string(),
            sha256: hex::encode(a.record.sha256.0),
            status: FileStatus::Ok,
            observed_sha256: None,
            read_only: None,
        };
        if a.state == AssetState::Pending {
            v.status = FileStatus::Pending;
            out.push(v);
            continue;
        }
        match std::fs::symlink_metadata(&path) {
            Err(_) => v.status = FileStatus::Missing,
            Ok(m) if !m.file_type().is_file() => v.status = FileStatus::NotAFile,
            Ok(m) => {
                // Another user's file, or one others may write, is not ours to vouch for.
                crate::statedir::trust::judge_metadata(
                    &path,
                    &m,
                    crate::statedir::trust::Want::File,
                )
                .map_err(crate::statedir::trust::TrustError::from)?;
                v.read_only = Some(m.permissions().mode() & 0o222 == 0);
                match files::hash_file(&path, None, |_| {}) {
                    Ok((h, _)) => {
                        v.observed_sha256 = Some(hex::encode(h.0));
                        if h != a.record.sha256 {
                            v.status = FileStatus::Mismatch;
                        }
                    }
                    Err(_) => v.status = FileStatus::Unreadable,
                }
            }
        }
        out.push(v);
    }
    Ok(VerifyReport {
        ok: out
            .iter()
            .all(|v| matches!(v.status, FileStatus::Ok | FileStatus::Pending)),
        assets: out,
    })
}
