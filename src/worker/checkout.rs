//! The private checkout: an independent copy of the source asset's git objects at the pinned
//! commit. Cloned from the bundle (index-pack writes new pack files: nothing can be hardlinked
//! or borrowed), its remote removed so nothing points back at the shared asset, then verified:
//! no alternates, no object file with a second link or the asset's inode, `git fsck`
//! connectivity, and `HEAD` at the pinned commit.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use super::preflight::LocalAsset;
use super::{files, git};
use crate::event::worker::CheckoutPrepared;
use crate::policy::node;

/// How many entries the independence check looks at before it gives up (a repository with
/// more loose objects than this is not one a bundle clone produces).
const MAX_OBJECT_FILES: u64 = 1_000_000;

/// Object files under `objects`: how many, how many have a second link, and whether one is the
/// asset's own inode.
fn scan_objects(objects: &Path, asset: (u64, u64)) -> (u64, u64, bool) {
    let t = files::tree(objects, MAX_OBJECT_FILES);
    t.files()
        .fold((0, 0, false), |(n, linked, shares), (_, m)| {
            (
                n + 1,
                linked + u64::from(m.nlink() > 1),
                shares || (m.dev(), m.ino()) == asset,
            )
        })
}

/// Clone the bundle into `checkout`, which must be empty (a checkout is never made over an
/// earlier run's files), and remove the remote so nothing points back at the asset.
fn clone_into_empty(source: &LocalAsset, checkout: &Path, deadline: Instant) -> Result<(), String> {
    let not_empty = std::fs::read_dir(checkout)
        .map_err(|e| format!("{}: {e}", checkout.display()))?
        .next()
        .is_some();
    if not_empty {
        return Err(format!(
            "{} already holds files (an earlier run of this worker?); a checkout is only \
             ever made into an empty directory",
            checkout.display()
        ));
    }
    let e = |e: git::GitError| e.to_string();
    git::run(
        None,
        &[
            OsStr::new("-c"),
            OsStr::new("advice.detachedHead=false"),
            OsStr::new("clone"),
            OsStr::new("--quiet"),
            OsStr::new("--no-local"),
            OsStr::new("--no-hardlinks"),
            OsStr::new("--"),
            source.path.as_os_str(),
            checkout.as_os_str(),
        ],
        &[],
        None,
        git::Out::Capture,
        deadline,
    )
    .map_err(e)?;
    git::line(Some(checkout), &["remote", "remove", "origin"], deadline).map_err(e)?;
    Ok(())
}

/// Check the clone's independence and integrity into `rec`, then judge it.
fn verify(
    source: &LocalAsset,
    checkout: &Path,
    deadline: Instant,
    rec: &mut CheckoutPrepared,
) -> Result<(), String> {
    rec.head = git::line(
        Some(checkout),
        &["rev-parse", "--verify", "HEAD^{commit}"],
        deadline,
    )
    .map_err(|e| e.to_string())?;
    let objects = checkout.join(".git/objects");
    rec.alternates = objects.join("info/alternates").exists();
    let asset = std::fs::metadata(&source.path)
        .map(|m| (m.dev(), m.ino()))
        .map_err(|e| format!("{}: {e}", source.path.display()))?;
    (
        rec.object_files,
        rec.hardlinked_files,
        rec.shares_asset_inode,
    ) = scan_objects(&objects, asset);
    rec.fsck_ok = git::line(
        Some(checkout),
        &[
            "fsck",
            "--connectivity-only",
            "--no-progress",
            "--no-dangling",
        ],
        deadline,
    )
    .is_ok();
    node::checkout_verdict(rec)
}

/// Clone and verify. Returns the record and, when the checkout may not be used, why.
pub fn prepare(
    source: &LocalAsset,
    checkout: &Path,
    deadline: Instant,
) -> (CheckoutPrepared, Result<(), String>) {
    let started = Instant::now();
    let pinned = source.record.commit.clone().unwrap_or_default();
    let mut rec = CheckoutPrepared {
        commit: pinned,
        head: String::new(),
        object_files: 0,
        hardlinked_files: 0,
        shares_asset_inode: false,
        alternates: false,
        fsck_ok: false,
        ok: false,
        took_ms: 0,
    };
    let result = clone_into_empty(source, checkout, deadline)
        .and_then(|()| verify(source, checkout, deadline, &mut rec));
    rec.ok = result.is_ok();
    rec.took_ms = started.elapsed().as_millis() as u64;
    (rec, result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::asset::{AssetKind, AssetRecord};
    use crate::event::Sha256Digest;
    use std::time::Duration;

    fn git(dir: &Path, args: &[&str]) -> String {
        let far = Instant::now() + Duration::from_secs(30);
        let mut all = vec!["-c", "user.name=t", "-c", "user.email=t@example.org"];
        all.extend_from_slice(args);
        git::line(Some(dir), &all, far).unwrap()
    }

    /// A one-commit repository bundled the way a source asset is: `HEAD` only.
    fn source(root: &Path) -> (LocalAsset, String) {
        let repo = root.join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join("f"), "x\n").unwrap();
        git(&repo, &["add", "f"]);
        git(&repo, &["commit", "-qm", "one"]);
        let head = git(&repo, &["rev-parse", "HEAD"]);
        let bundle = root.join("s.bundle");
        git(
            &repo,
            &["bundle", "create", "-q", bundle.to_str().unwrap(), "HEAD"],
        );
        let asset = LocalAsset {
            record: AssetRecord {
                name: "s".into(),
                kind: AssetKind::Source,
                sha256: Sha256Digest([0; 32]),
                bytes: 0,
                file: "assets/s.bundle".into(),
                commit: Some(head.clone()),
                tree_files: Some(1),
                tree_bytes: Some(2),
            },
            path: bundle,
        };
        (asset, head)
    }

    #[test]
    fn a_checkout_is_an_independent_verified_copy() {
        let d = tempfile::tempdir().unwrap();
        let (asset, head) = source(d.path());
        let checkout = d.path().join("checkout");
        std::fs::create_dir(&checkout).unwrap();
        let far = Instant::now() + Duration::from_secs(60);
        let (rec, verdict) = prepare(&asset, &checkout, far);
        assert_eq!(verdict, Ok(()), "{rec:?}");
        assert!(rec.ok && rec.fsck_ok && !rec.alternates && !rec.shares_asset_inode);
        assert_eq!(
            (rec.head.as_str(), rec.hardlinked_files),
            (head.as_str(), 0)
        );
        assert!(rec.object_files > 0);
        assert_eq!(
            git(&checkout, &["remote"]),
            "",
            "the checkout points at the asset"
        );

        // Only ever into an empty directory.
        let (rec, verdict) = prepare(&asset, &checkout, far);
        assert!(verdict.unwrap_err().contains("already holds files"));
        assert!(!rec.ok);
    }

    #[test]
    fn a_bundle_of_another_commit_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let (mut asset, _) = source(d.path());
        asset.record.commit = Some("0".repeat(40));
        let checkout = d.path().join("checkout");
        std::fs::create_dir(&checkout).unwrap();
        let (_, verdict) = prepare(&asset, &checkout, Instant::now() + Duration::from_secs(60));
        assert!(verdict.unwrap_err().contains("not at the pinned commit"));
    }
}
