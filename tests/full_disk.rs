//! A full file system under the state directory: the error says so once, in one line, and
//! once space is back the next command repairs what the failed write left and goes on.
//!
//! Needs root (it mounts a small tmpfs), as the dev cluster's tests do.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn dispatch(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("DISPATCH_FAILPOINTS")
        .output()
        .unwrap()
}

#[test]
fn a_full_disk_is_reported_once_and_healed_by_the_next_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fs");
    std::fs::create_dir(&dir).unwrap();
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512k", "tmpfs"])
        .arg(&dir)
        .status()
        .expect("run mount");
    assert!(status.success(), "this test needs root to mount a tmpfs");
    let _mount = Mount(dir.clone());
    let state = dir.join("state");
    assert!(dispatch(&state, &["journal", "init"]).status.success());

    // Fill the file system, then write until the journal cannot.
    let fill = dir.join("fill");
    let _ = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", fill.display()))
        .arg("bs=1k")
        .output()
        .unwrap();
    let mut failure = None;
    for i in 0..200 {
        let out = dispatch(&state, &["trial", "open", &format!("t{i}")]);
        if !out.status.success() {
            failure = Some(out);
            break;
        }
    }
    let out = failure.expect("a full file system must make a write fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    // Space runs out in the journal's write, or in the writer lock's record before it.
    assert_eq!(
        stderr.matches("stopped after an I/O error").count()
            + stderr
                .matches("cannot take the journal's writer lock")
                .count(),
        1,
        "said once: {stderr}"
    );
    assert_eq!(stderr.matches("No space left").count(), 1, "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");

    // Space is back: the next write repairs the torn tail and the journal is whole.
    std::fs::remove_file(&fill).unwrap();
    let out = dispatch(&state, &["trial", "open", "after"]);
    assert!(out.status.success(), "{out:?}");
    let out = dispatch(&state, &["journal", "verify"]);
    assert!(out.status.success(), "{out:?}");
    let out = dispatch(&state, &["audit"]);
    assert!(out.status.success(), "{out:?}");
}
