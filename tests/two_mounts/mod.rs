//! Two hosts on one machine: one temporary backing directory seen through two FUSE mounts
//! (`bindfs`), for `tests/two_hosts.rs`.
//!
//! With `attr_timeout=0,entry_timeout=0,negative_timeout=0` the two mounts are as coherent as
//! a shared file system between login nodes: a write and fsync through one is seen at once
//! through the other (by `stat`, a fresh `open`, an fd opened before), `O_CREAT|O_EXCL` of a
//! name made through the other fails with `EEXIST`, a `rename` is seen. Only `flock` is not:
//! the kernel keeps a FUSE mount's `flock` locks to that mount, so a lock taken through one
//! does not exclude one taken through the other, as on Lustre mounted `localflock` or NFS
//! mounted `local_lock=flock|all`. Without the three options the kernel caches attributes for a
//! second and a fresh `open` through the other mount can read a stale size: no design could be
//! correct on that, so the fixture never mounts without them.
//!
//! The fixture fails (never skips) when FUSE or bindfs is missing: CI installs bindfs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The mount options of both views (see the module comment).
pub const OPTIONS: &str = "attr_timeout=0,entry_timeout=0,negative_timeout=0";

/// A backing directory and two mounts of it; both are unmounted when this is dropped, also
/// when the test panics.
pub struct TwoMounts {
    /// The backing directory (the "file server's" view; tests use the mounts).
    pub back: PathBuf,
    /// The first host's view.
    pub m1: PathBuf,
    /// The second host's view.
    pub m2: PathBuf,
    /// Outside the mounts: for what both hosts share that is not on the file system.
    pub outside: PathBuf,
    mounted: Vec<PathBuf>,
    /// Removed after the mounts are gone (field drop runs after `Drop::drop`); kept on disk
    /// when an unmount failed, so nothing is deleted through a live mount.
    root: Option<tempfile::TempDir>,
}

/// Panics, saying what to install, when this machine cannot mount with bindfs.
pub fn require_bindfs() {
    const HOW: &str =
        "tests/two_hosts.rs models two login nodes as two bindfs (FUSE) mounts of one \
         directory and fails without them: install bindfs (`apt-get install bindfs`, which brings \
         fusermount; `tools/test` does it) and run where /dev/fuse exists (a container needs \
         `--device /dev/fuse --cap-add SYS_ADMIN`)";
    if !Path::new("/dev/fuse").exists() {
        panic!("/dev/fuse does not exist. {HOW}");
    }
    match Command::new("bindfs").arg("--version").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "`bindfs --version` exited {:?}: {}. {HOW}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!("bindfs is not installed ({e}). {HOW}"),
    }
    if fusermount().is_none() {
        panic!("neither fusermount nor fusermount3 is installed. {HOW}");
    }
}

/// `fusermount`, else `fusermount3` (bindfs depends on either fuse or fuse3).
fn fusermount() -> Option<&'static str> {
    ["fusermount", "fusermount3"].into_iter().find(|p| {
        Command::new(p)
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

impl TwoMounts {
    pub fn new() -> TwoMounts {
        require_bindfs();
        let root = tempfile::Builder::new()
            .prefix("dispatch-two-hosts-")
            .tempdir()
            .expect("a temporary directory");
        let dir = |name: &str| {
            let p = root.path().join(name);
            std::fs::create_dir(&p).unwrap();
            p
        };
        let (back, m1, m2, outside) = (dir("back"), dir("m1"), dir("m2"), dir("outside"));
        let mut fixture = TwoMounts {
            back,
            m1,
            m2,
            outside,
            mounted: Vec::new(),
            root: Some(root),
        };
        for m in [fixture.m1.clone(), fixture.m2.clone()] {
            let out = Command::new("bindfs")
                .args(["-o", OPTIONS])
                .arg(&fixture.back)
                .arg(&m)
                .output()
                .expect("run bindfs");
            assert!(
                out.status.success(),
                "bindfs -o {OPTIONS} {} {}: {}",
                fixture.back.display(),
                m.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            fixture.mounted.push(m);
        }
        fixture.check_coherent();
        fixture
    }

    /// Both mounts show the backing directory, and a file made through one is seen through
    /// the other at once: the mounts are up and the timeouts are in force.
    fn check_coherent(&self) {
        for m in &self.mounted {
            let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
            let canon = std::fs::canonicalize(m).unwrap();
            assert!(
                mounts
                    .lines()
                    .any(|l| l.split(' ').nth(1) == Some(canon.to_str().unwrap())),
                "{} is not a mount point after bindfs",
                m.display()
            );
        }
        std::fs::write(self.m1.join(".probe"), b"seen").unwrap();
        assert_eq!(
            std::fs::read(self.m2.join(".probe")).unwrap(),
            b"seen",
            "a file written through the first mount is not seen through the second"
        );
        std::fs::remove_file(self.m2.join(".probe")).unwrap();
        assert!(
            !self.m1.join(".probe").exists(),
            "a removal through one mount is not seen through the other"
        );
    }

    /// The two views, in host order.
    pub fn views(&self) -> [&Path; 2] {
        [&self.m1, &self.m2]
    }
}

/// `fusermount -u`, retried while the mount is busy (a process of the test may still be
/// closing files there), then lazily (`-z`) as a last resort. Whether it is unmounted.
fn unmount(m: &Path) -> bool {
    let Some(fm) = fusermount() else {
        return false;
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ok = Command::new(fm)
            .arg("-u")
            .arg(m)
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return true;
        }
        if Instant::now() >= deadline {
            return Command::new(fm)
                .args(["-u", "-z"])
                .arg(m)
                .output()
                .is_ok_and(|o| o.status.success());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for TwoMounts {
    fn drop(&mut self) {
        let mut all = true;
        for m in self.mounted.drain(..) {
            if !unmount(&m) {
                eprintln!("two_mounts: could not unmount {}", m.display());
                all = false;
            }
        }
        if !all {
            if let Some(root) = self.root.take() {
                let kept = root.keep();
                eprintln!(
                    "two_mounts: kept {} (a mount is still there; `fusermount -u` it)",
                    kept.display()
                );
            }
        }
    }
}
