//! Step-scoped cleanup: remove what the plan says (runtime, cache, and the checkout once its
//! work is published), seal or keep the native state, and touch nothing else. Paths are the
//! worker's own (checked before the payload ran); a directory the payload replaced with a
//! symlink loses only the symlink, never what it points to.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::dirs::WorkerDirs;
use crate::event::worker::CleanedUp;
use crate::policy::node::{CleanupPlan, StateClass};

/// Beside the native-state directory (never inside it: that would change the state): its
/// class and why.
pub const STATE_CLASS_FILE: &str = "STATE-CLASS";

fn path_of<'a>(dirs: &'a WorkerDirs, role: &str) -> Option<&'a Path> {
    match role {
        "checkout" => Some(&dirs.checkout),
        "runtime" => Some(&dirs.runtime),
        "cache" => Some(&dirs.cache),
        "state" => Some(&dirs.state),
        "evidence" => Some(&dirs.evidence),
        _ => None,
    }
}

fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Make the native state read-only: files `a-w`, directories `a-w` too (their entries can no
/// longer change). Symlinks are left alone (their mode means nothing).
fn seal(state: &Path) -> Vec<String> {
    let t = super::files::tree(state, crate::policy::node::NATIVE_WALK_MAX_ENTRIES);
    let mut errors: Vec<String> = t
        .unreadable
        .iter()
        .map(|d| format!("seal {}: unreadable", state.join(d).display()))
        .collect();
    // Files first, then directories deepest first (the state directory itself last), so
    // nothing is made read-only before what is inside it.
    let mut targets: Vec<(PathBuf, u32)> = t
        .entries
        .iter()
        .filter(|(_, m)| m.is_file())
        .map(|(p, m)| (state.join(p), m.permissions().mode()))
        .collect();
    let mut dirs: Vec<_> = t.entries.iter().filter(|(_, m)| m.is_dir()).collect();
    dirs.sort_by_key(|(p, _)| std::cmp::Reverse(p.components().count()));
    targets.extend(
        dirs.iter()
            .map(|(p, m)| (state.join(p), m.permissions().mode())),
    );
    if let Ok(m) = state.symlink_metadata() {
        targets.push((state.to_owned(), m.permissions().mode()));
    }
    for (path, mode) in targets {
        let sealed = std::fs::Permissions::from_mode(mode & !0o222);
        if let Err(err) = std::fs::set_permissions(&path, sealed) {
            errors.push(format!("seal {}: {err}", path.display()));
        }
    }
    errors
}

pub fn run(
    dirs: &WorkerDirs,
    plan: &CleanupPlan,
    class: StateClass,
    reason: &str,
    deadline: Instant,
) -> CleanedUp {
    let mut done = CleanedUp {
        removed: Vec::new(),
        kept: plan.keep.iter().map(|r| r.to_string()).collect(),
        state_class: class.as_str().to_owned(),
        reason: reason.to_owned(),
        errors: Vec::new(),
    };
    for role in &plan.remove {
        if Instant::now() >= deadline {
            done.errors.push(format!(
                "the cleanup budget ran out before {role} was removed"
            ));
            done.kept.push(role.to_string());
            continue;
        }
        let Some(path) = path_of(dirs, role) else {
            continue;
        };
        match remove(path) {
            Ok(()) => done.removed.push(role.to_string()),
            Err(e) => {
                done.errors.push(format!("remove {}: {e}", path.display()));
                done.kept.push(role.to_string());
            }
        }
    }
    let marker = dirs.root.join(STATE_CLASS_FILE);
    if let Err(e) = std::fs::write(&marker, format!("{}\n{reason}\n", class.as_str())) {
        done.errors.push(format!("write {}: {e}", marker.display()));
    }
    if matches!(class, StateClass::Sealed | StateClass::Checkpointed) {
        done.errors.extend(seal(&dirs.state));
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::node::cleanup_plan;
    use std::time::Duration;

    #[test]
    fn removes_only_the_plan_and_never_follows_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let dirs = WorkerDirs::new(d.path(), "p", uuid::Uuid::from_u128(1));
        dirs.create(d.path()).unwrap();
        let sibling = WorkerDirs::new(d.path(), "p", uuid::Uuid::from_u128(2));
        sibling.create(d.path()).unwrap();
        std::fs::write(sibling.cache.join("keep"), b"x").unwrap();
        // The payload replaced its cache with a link to a sibling's cache.
        std::fs::remove_dir(&dirs.cache).unwrap();
        std::os::unix::fs::symlink(&sibling.cache, &dirs.cache).unwrap();
        std::fs::write(dirs.state.join("db"), b"state").unwrap();
        std::fs::write(dirs.checkout.join("work"), b"w").unwrap();

        let plan = cleanup_plan(true, false);
        let far = Instant::now() + Duration::from_secs(10);
        let done = run(&dirs, &plan, StateClass::CrashClassPartial, "stopped", far);
        assert!(done.errors.is_empty(), "{:?}", done.errors);
        assert_eq!(done.removed, ["runtime", "cache"]);
        assert!(!dirs.runtime.exists() && !dirs.cache.exists());
        assert!(sibling.cache.join("keep").exists(), "a sibling's file went");
        assert!(dirs.checkout.join("work").exists(), "unpublished work went");
        assert_eq!(std::fs::read(dirs.state.join("db")).unwrap(), b"state");
        let marker = std::fs::read_to_string(dirs.root.join(STATE_CLASS_FILE)).unwrap();
        assert!(marker.starts_with("crash_class_partial\n"), "{marker}");
        // Crash-class state is kept as it was, writable.
        let mode = std::fs::metadata(dirs.state.join("db"))
            .unwrap()
            .permissions()
            .mode();
        assert_ne!(mode & 0o200, 0);
    }

    #[test]
    fn sealed_state_is_read_only() {
        let d = tempfile::tempdir().unwrap();
        let dirs = WorkerDirs::new(d.path(), "p", uuid::Uuid::from_u128(1));
        dirs.create(d.path()).unwrap();
        std::fs::create_dir(dirs.state.join("sub")).unwrap();
        std::fs::write(dirs.state.join("sub/db"), b"state").unwrap();
        let plan = cleanup_plan(true, true);
        let far = Instant::now() + Duration::from_secs(10);
        let done = run(&dirs, &plan, StateClass::Sealed, "clean", far);
        assert!(done.errors.is_empty(), "{:?}", done.errors);
        assert!(!dirs.checkout.exists());
        for p in [dirs.state.join("sub/db"), dirs.state.join("sub")] {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o222, 0, "{}", p.display());
        }
        // Let the temp dir be removed.
        for p in [dirs.state.join("sub"), dirs.state.clone()] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
    }
}
