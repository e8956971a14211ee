//! Puts the commit and its date into `dispatch --version` (`VERSION_WITH_COMMIT`: not named
//! `DISPATCH_*`, because cargo also sets it for the processes it runs and a worker's
//! environment takes every `DISPATCH_*` as its own). Outside a git checkout (a source
//! tarball) they are "unknown". Uncommitted changes are not flagged: the
//! script reruns when HEAD moves, not on every edit, so such a flag could not be trusted.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]);
    let date = git(&["log", "-1", "--format=%cs", "HEAD"]);
    let version = match (commit, date) {
        (Some(c), Some(d)) => format!("{} ({c} {d})", env!("CARGO_PKG_VERSION")),
        _ => format!("{} (commit unknown)", env!("CARGO_PKG_VERSION")),
    };
    println!("cargo:rustc-env=VERSION_WITH_COMMIT={version}");
    // Rebuild when HEAD moves (a commit, a checkout) in this checkout or worktree.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/logs/HEAD");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
