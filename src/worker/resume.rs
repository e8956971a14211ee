//! A continuation's start (issue 37, item 4): before its payload, a worker that continues an
//! earlier one takes up its predecessor's verified publication. The published directory is
//! checked against its manifest; the private checkout (already at the pinned commit) is moved
//! to the predecessor's `HEAD` from `workspace.bundle` and gets its uncommitted work from
//! `workspace.patch` (or, without a source asset, the published workspace copy); the
//! predecessor's native state is copied, never shared, into this worker's own state directory,
//! each file hashed as it is copied (one read) and checked against the listing the
//! predecessor's publication vouches for. Anything that does not match refuses the start.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::time::Instant;

use super::dirs::WorkerDirs;
use super::files;
use super::git;
use super::preflight::LocalAsset;
use super::publish::{self, BUNDLE_NAME, PATCH_NAME};
use super::settle::LISTING_FILE;
use super::supervisor::Resume;
use crate::event::worker::ResumedFrom;
use crate::policy::manifest::{Manifest, MANIFEST_NAME};
use crate::policy::node::NATIVE_WALK_MAX_ENTRIES;

/// One native-state file as the predecessor's listing gives it: bytes and lowercase hex SHA-256.
pub type Listing = BTreeMap<String, (u64, String)>;

/// Take up the predecessor's work and state into `dirs`. Returns the record of what was taken,
/// or why the continuation may not start.
pub fn take_up(
    resume: &Resume,
    dirs: &WorkerDirs,
    source: Option<&LocalAsset>,
    deadline: Instant,
) -> Result<ResumedFrom, String> {
    let started = Instant::now();
    if resume.generation < 2 {
        return Err(format!(
            "generation {} continues nothing; a continuation is generation 2 or later",
            resume.generation
        ));
    }
    let from = &resume.from;
    let manifest = publish::verify_published(from).map_err(|problems| {
        format!(
            "the predecessor's publication {} does not match its manifest: {}",
            from.display(),
            problems.join("; ")
        )
    })?;
    let (manifest_sha256, _) = files::hash_file(&from.join(MANIFEST_NAME), Some(deadline), |_| {})
        .map_err(|e| e.to_string())?;
    let listing = listing_of(resume, &manifest, deadline)?;
    let state = &dirs.state;
    if std::fs::read_dir(state)
        .map_err(|e| format!("{}: {e}", state.display()))?
        .next()
        .is_some()
    {
        return Err(format!(
            "{} already holds files; a predecessor's state is only copied into an empty one",
            state.display()
        ));
    }
    let taken = copy_state(&resume.state_from, state, &listing, deadline).and_then(|copied| {
        let head = match source {
            Some(source) => Some(continue_checkout(
                from,
                &manifest,
                source,
                &dirs.checkout,
                deadline,
            )?),
            None => {
                copy_workspace(from, &manifest, &dirs.checkout, deadline)?;
                None
            }
        };
        Ok((copied, head))
    });
    let ((state_files, state_bytes), head) = match taken {
        Ok(taken) => taken,
        Err(reason) => {
            // Not the predecessor's state, nor this worker's: nothing of it is kept.
            empty_dir(state);
            return Err(reason);
        }
    };
    Ok(ResumedFrom {
        generation: resume.generation,
        from: from.display().to_string(),
        manifest_sha256,
        state_from: resume.state_from.display().to_string(),
        state_files,
        state_bytes,
        head,
        took_ms: started.elapsed().as_millis() as u64,
    })
}

/// The predecessor's native-state listing, as its published evidence holds it: the listing
/// file (whose bytes the manifest vouches for) must be the one its worker journal recorded,
/// and that hashing must have been complete.
fn vouched_listing(from: &Path, deadline: Instant) -> Result<Listing, String> {
    let evidence = from.join("evidence");
    let report = super::report::read(&evidence)
        .map_err(|e| format!("the predecessor's published worker journal: {e}"))?
        .ok_or("the predecessor's publication holds no worker journal")?;
    let hashed = report
        .native_state
        .ok_or("the predecessor's worker journal records no native-state hashes")?;
    if !hashed.complete {
        return Err(
            "the predecessor's native state was not hashed completely; it cannot be \
                    verified"
                .to_owned(),
        );
    }
    let path = evidence.join(LISTING_FILE);
    let (sha, _) = files::hash_file(&path, Some(deadline), |_| {}).map_err(|e| e.to_string())?;
    if sha != hashed.listing_sha256 {
        return Err(format!(
            "{} is not the listing the predecessor's worker journal recorded",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let listing = parse_listing(&text).ok_or_else(|| format!("{} is malformed", path.display()))?;
    if listing.len() as u64 != hashed.total_files {
        return Err(format!(
            "{} lists {} files; the predecessor's worker journal recorded {}",
            path.display(),
            listing.len(),
            hashed.total_files
        ));
    }
    Ok(listing)
}

/// What the predecessor's native state must be: a checkpoint publication's own `state/` copy,
/// as its manifest lists it, or the listing a final publication's evidence vouches for.
fn listing_of(resume: &Resume, manifest: &Manifest, deadline: Instant) -> Result<Listing, String> {
    let from = &resume.from;
    if !from.join(publish::CHECKPOINT_STATE).is_dir() {
        return vouched_listing(from, deadline);
    }
    if resume.state_from != from.join(publish::CHECKPOINT_STATE) {
        return Err(format!(
            "{} is a checkpoint publication; its state is its own {}/, not {}",
            from.display(),
            publish::CHECKPOINT_STATE,
            resume.state_from.display()
        ));
    }
    Ok(checkpoint_listing(manifest))
}

/// A checkpoint publication's native state (its `state/` copy, published while the payload
/// ran): the manifest, verified above, vouches for every file of it.
fn checkpoint_listing(manifest: &Manifest) -> Listing {
    let prefix = format!("{}/", publish::CHECKPOINT_STATE);
    manifest
        .files
        .iter()
        .filter_map(|e| {
            let rel = e.path.strip_prefix(&prefix)?;
            Some((rel.to_owned(), (e.bytes, e.sha256.clone())))
        })
        .collect()
}

/// `<sha256>  <bytes>  <path>` lines, as `settle::hash_state` writes them.
pub fn parse_listing(text: &str) -> Option<Listing> {
    text.lines()
        .map(|line| {
            let mut parts = line.splitn(3, "  ");
            let (sha, bytes, path) = (parts.next()?, parts.next()?, parts.next()?);
            let bytes = bytes.parse().ok()?;
            Some((path.to_owned(), (bytes, sha.to_owned())))
        })
        .collect()
}

/// Copy the predecessor's state into `to` (empty: a state is never copied over another),
/// hashing each file as it is read, and check it against `listing`. Symlinks are copied as
/// links (the listing, like the sealing, is about regular files). Returns files and bytes.
///
/// One read of each file feeds both its hash and its write, through one buffer for the whole
/// copy (a fresh 1 MiB buffer a file cost more than copying a 64 KiB file). Nothing is
/// fsynced (per file or at the end): the copy needs no durability before the payload starts.
/// A crash before then leaves no `ResumedFrom` and no payload start in this worker's journal,
/// so nothing ever relied on the copy's bytes: the predecessor's state, only read, keeps the
/// checked original, and a copy a crash cut short is never taken up (`take_up` refuses a
/// state directory that already holds files). After the start the copy is the payload's own
/// working state, as unsynced as what the payload writes to it, and is hashed and sealed at
/// its end like any state.
pub fn copy_state(
    from: &Path,
    to: &Path,
    listing: &Listing,
    deadline: Instant,
) -> Result<(u64, u64), String> {
    let fail = |e: files::FileError| format!("copying the predecessor's native state: {e}");
    let t = files::tree(from, NATIVE_WALK_MAX_ENTRIES);
    if !t.complete || !t.unreadable.is_empty() {
        return Err(format!("{} cannot be listed completely", from.display()));
    }
    let (mut copied, mut bytes) = (0u64, 0u64);
    let mut buf = vec![0u8; files::CHUNK];
    for (rel, m) in &t.entries {
        let (src, dst) = (from.join(rel), to.join(rel));
        if m.is_dir() {
            std::fs::create_dir(&dst)
                .map_err(files::io(&dst, "create directory"))
                .map_err(fail)?;
        } else if m.is_symlink() {
            let target = std::fs::read_link(&src)
                .map_err(files::io(&src, "read link"))
                .map_err(fail)?;
            std::os::unix::fs::symlink(target, &dst)
                .map_err(files::io(&dst, "create link"))
                .map_err(fail)?;
        } else if m.is_file() {
            let key = rel.display().to_string();
            let Some((want_bytes, want_sha)) = listing.get(&key) else {
                return Err(format!(
                    "{key}: in the predecessor's state but not in its listing"
                ));
            };
            let (sha, n) =
                files::copy_file_with(&src, &dst, &mut buf, Some(deadline), || {}).map_err(fail)?;
            if n != *want_bytes || hex::encode(sha.0) != *want_sha {
                return Err(format!(
                    "{key}: listed as {want_bytes} bytes sha256 {want_sha}, found {n} bytes \
                     sha256 {}",
                    hex::encode(sha.0)
                ));
            }
            copied += 1;
            bytes += n;
        }
    }
    if copied != listing.len() as u64 {
        let missing = listing.keys().find(|k| !to.join(k).is_file());
        return Err(format!(
            "{}: listed in the predecessor's state but missing",
            missing.map_or("a file", String::as_str)
        ));
    }
    Ok((copied, bytes))
}

/// Move the checkout (at the pinned commit) to the predecessor's `HEAD` with its bundle, then
/// apply its uncommitted work. Returns the `HEAD` it is at.
fn continue_checkout(
    from: &Path,
    manifest: &Manifest,
    source: &LocalAsset,
    checkout: &Path,
    deadline: Instant,
) -> Result<String, String> {
    let pinned = source.record.commit.as_deref();
    if manifest.pinned_commit.as_deref() != pinned {
        return Err(format!(
            "the predecessor started from commit {}, this worker from {}; a continuation \
             keeps its source",
            manifest.pinned_commit.as_deref().unwrap_or("(none)"),
            pinned.unwrap_or("(none)")
        ));
    }
    let head = manifest
        .head_commit
        .clone()
        .ok_or("the predecessor's manifest names no HEAD")?;
    let e = |e: git::GitError| format!("continuing the predecessor's checkout: {e}");
    let bundle = from.join(BUNDLE_NAME);
    if bundle.exists() {
        let fetch = ["fetch", "--quiet", "--no-tags"];
        let refs = ["HEAD", "+refs/heads/*:refs/heads/*"];
        git_on_file(checkout, &fetch, &bundle, &refs, deadline).map_err(e)?;
    }
    let detach = [
        "-c",
        "advice.detachedHead=false",
        "checkout",
        "--quiet",
        "--detach",
    ];
    git::line(
        Some(checkout),
        &[&detach[..], &[head.as_str()]].concat(),
        deadline,
    )
    .map_err(e)?;
    let patch = from.join(PATCH_NAME);
    if patch.metadata().is_ok_and(|m| m.len() > 0) {
        git_on_file(checkout, &["apply", "--binary"], &patch, &[], deadline).map_err(e)?;
    }
    let now = git::line(
        Some(checkout),
        &["rev-parse", "--verify", "HEAD^{commit}"],
        deadline,
    )
    .map_err(e)?;
    if !now.eq_ignore_ascii_case(&head) {
        return Err(format!(
            "the checkout is at {now}, not at the predecessor's HEAD {head}"
        ));
    }
    Ok(head)
}

/// Without a source asset the workspace was published as a copy of its files: copy them back,
/// each checked against the manifest as it is copied.
fn copy_workspace(
    from: &Path,
    manifest: &Manifest,
    checkout: &Path,
    deadline: Instant,
) -> Result<(), String> {
    for entry in &manifest.files {
        let Some(rel) = entry.path.strip_prefix("workspace/") else {
            continue;
        };
        let dst = checkout.join(rel);
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        let (sha, n) =
            files::copy_file_unsynced(&from.join(&entry.path), &dst, Some(deadline), || {})
                .map_err(|e| format!("copying the predecessor's workspace: {e}"))?;
        if n != entry.bytes || hex::encode(sha.0) != entry.sha256 {
            return Err(format!(
                "{}: changed since its manifest was checked",
                entry.path
            ));
        }
    }
    Ok(())
}

/// Remove everything below `dir`, keeping `dir`.
fn empty_dir(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        let _ = match e.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
    }
}

/// `git -C checkout <before…> <file> <after…>`.
fn git_on_file(
    checkout: &Path,
    before: &[&str],
    file: &Path,
    after: &[&str],
    deadline: Instant,
) -> Result<(), git::GitError> {
    let mut args: Vec<&OsStr> = before.iter().map(OsStr::new).collect();
    args.push(file.as_os_str());
    args.extend(after.iter().map(OsStr::new));
    git::run(
        Some(checkout),
        &args,
        &[],
        None,
        git::Out::Capture,
        deadline,
    )
    .map(drop)
}
