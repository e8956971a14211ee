//! The private checkout: an independent copy of the source asset's git objects at the pinned
//! commit. Cloned from the bundle (index-pack writes new pack files: nothing can be hardlinked
//! or borrowed), its remote removed so nothing points back at the shared asset, then verified:
//! no alternates, no object file with a second link or the asset's inode, `git fsck`
//! connectivity, and `HEAD` at the pinned commit.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use super::events::CheckoutPrepared;
use super::preflight::LocalAsset;
use super::{files, git};
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
    let result = (|| {
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
        rec.head = git::line(
            Some(checkout),
            &["rev-parse", "--verify", "HEAD^{commit}"],
            deadline,
        )
        .map_err(e)?;
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
        node::checkout_verdict(&rec)
    })();
    rec.ok = result.is_ok();
    rec.took_ms = started.elapsed().as_millis() as u64;
    (rec, result)
}
