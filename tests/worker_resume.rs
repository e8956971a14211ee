//! A continuation on its node (`dispatch worker run --resume-from … --resume-state-from …
//! --generation N`, outside Slurm): it starts from its predecessor's verified publication and a
//! checked copy of its native state, or not at all.

use std::path::{Path, PathBuf};
use std::process::Command;

use dispatch::event::asset::{AssetKind, AssetRecord};
use dispatch::worker::preflight::LocalAsset;
use dispatch::worker::report;

const SID1: &str = "6f1c1c1e-0000-4000-8000-0000000000a1";
const SID2: &str = "6f1c1c1e-0000-4000-8000-0000000000a2";

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.org"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A source asset as `asset add` leaves one: a bundle of one commit, `HEAD` only.
fn source_asset(root: &Path) -> LocalAsset {
    let repo = root.join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("README"), "pinned\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-qm", "pinned"]);
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    let bundle = root.join("source.bundle");
    git(
        &repo,
        &["bundle", "create", "-q", bundle.to_str().unwrap(), "HEAD"],
    );
    let (sha256, bytes) = dispatch::worker::files::hash_file(&bundle, None, |_| {}).unwrap();
    LocalAsset {
        record: AssetRecord {
            name: "src".into(),
            kind: AssetKind::Source,
            sha256,
            bytes,
            file: "assets/source.bundle".into(),
            commit: Some(commit),
            tree_files: Some(1),
            tree_bytes: Some(7),
        },
        path: bundle,
    }
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// `dispatch worker run` of generation `generation` in `root/<sid>`, publishing into
/// `root/published`.
fn generation(
    root: &Path,
    sid: &str,
    asset: Option<&LocalAsset>,
    resume: Option<(&Path, &Path, u32)>,
    script: &str,
) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.args(["worker", "run", "--submission-id", sid, "--worker", "w"])
        .arg("--worker-dir")
        .arg(root.join(sid))
        .arg("--publish-dir")
        .arg(root.join("published"))
        .args(["--deadline", &(now_s() + 3600).to_string(), "--grace", "2"])
        .args(["--native-state-budget", "4"]);
    if let Some(asset) = asset {
        c.args(["--asset", &serde_json::to_string(asset).unwrap()]);
    }
    if let Some((from, state_from, n)) = resume {
        c.arg("--resume-from")
            .arg(from)
            .arg("--resume-state-from")
            .arg(state_from)
            .args(["--generation", &n.to_string()]);
    }
    c.args(["--", "sh", "-c", script])
        .env_remove("DISPATCH_FAILPOINTS");
    c
}

/// Generation 1: native state (a file and one in a subdirectory), a commit and an uncommitted
/// change in its checkout, a declared checkpoint; published. Returns its published directory
/// and native-state directory.
fn first_generation(root: &Path, asset: &LocalAsset) -> (PathBuf, PathBuf) {
    let script = "env | grep ^DISPATCH_ > \"$DISPATCH_EVIDENCE_DIR/env\"; \
        echo 5 > \"$DISPATCH_STATE_DIR/n\"; mkdir \"$DISPATCH_STATE_DIR/sub\"; \
        echo deep > \"$DISPATCH_STATE_DIR/sub/f\"; \
        echo gen1 > committed.txt; git add committed.txt; \
        git -c user.name=t -c user.email=t@example.org commit -qm gen1; \
        echo wip > uncommitted.txt; echo more >> README; \
        touch \"$DISPATCH_CHECKPOINT\"";
    let st = generation(root, SID1, Some(asset), None, script)
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(0));
    let dirs = dispatch::worker::dirs::WorkerDirs::at(root.join(SID1));
    let r = report::read(&dirs.evidence).unwrap().unwrap();
    assert_eq!(r.cleaned.as_ref().unwrap().state_class, "checkpointed");
    assert!(r.resumed.is_none());
    let env = std::fs::read_to_string(dirs.evidence.join("env")).unwrap();
    assert!(env.contains("DISPATCH_GENERATION=1\n"), "{env}");
    assert!(!env.contains("DISPATCH_RESUME_FROM"), "{env}");
    let published = match r.publication.unwrap() {
        report::Publication::Published(p) => PathBuf::from(p.dir),
        other => panic!("{other:?}"),
    };
    (published, dirs.state)
}

/// Let the temp dir holding sealed (read-only) state be removed.
fn unseal(state: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for d in [state.to_path_buf(), state.join("sub")] {
        let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700));
    }
}

const SECOND: &str = "env | grep ^DISPATCH_ > \"$DISPATCH_EVIDENCE_DIR/env\"; \
    cat \"$DISPATCH_STATE_DIR/n\" \"$DISPATCH_STATE_DIR/sub/f\" > \"$DISPATCH_EVIDENCE_DIR/state\"; \
    echo 9 > \"$DISPATCH_STATE_DIR/n\"; \
    cat committed.txt uncommitted.txt README > \"$DISPATCH_EVIDENCE_DIR/work\"; \
    git log --format=%s > \"$DISPATCH_EVIDENCE_DIR/log\"";

/// Generation 2 (`SECOND`) from `from` and `state_from`: it ran, exit 0.
fn second_generation(
    root: &Path,
    asset: &LocalAsset,
    from: &Path,
    state_from: &Path,
) -> dispatch::worker::dirs::WorkerDirs {
    let st = generation(root, SID2, Some(asset), Some((from, state_from, 2)), SECOND)
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(0));
    dispatch::worker::dirs::WorkerDirs::at(root.join(SID2))
}

#[test]
fn a_continuation_starts_from_its_predecessors_work_and_its_own_copy_of_the_state() {
    let root = tempfile::tempdir().unwrap();
    let asset = source_asset(root.path());
    let (published, state1) = first_generation(root.path(), &asset);
    let dirs = second_generation(root.path(), &asset, &published, &state1);
    let read = |name: &str| std::fs::read_to_string(dirs.evidence.join(name)).unwrap();
    assert_eq!(read("state"), "5\ndeep\n");
    assert_eq!(read("work"), "gen1\nwip\npinned\nmore\n");
    assert_eq!(read("log"), "gen1\npinned\n");
    let env = read("env");
    assert!(env.contains("DISPATCH_GENERATION=2\n"), "{env}");
    let from = format!("DISPATCH_RESUME_FROM={}\n", published.display());
    assert!(env.contains(&from), "{env}");
    // Its own copy: writing it left the predecessor's as it was.
    assert_eq!(std::fs::read_to_string(state1.join("n")).unwrap(), "5\n");
    assert_eq!(
        std::fs::read_to_string(dirs.state.join("n")).unwrap(),
        "9\n"
    );
    let r = report::read(&dirs.evidence).unwrap().unwrap();
    let resumed = r.resumed.as_ref().expect("ResumedFrom");
    assert_eq!(resumed.generation, 2);
    assert_eq!(resumed.from, published.display().to_string());
    assert_eq!((resumed.state_files, resumed.state_bytes), (2, 7));
    let (manifest_sha, _) =
        dispatch::worker::files::hash_file(&published.join("MANIFEST.json"), None, |_| {}).unwrap();
    assert_eq!(resumed.manifest_sha256, manifest_sha);
    assert!(resumed.head.is_some());
    // Its publication holds both generations' commits.
    let p = match r.publication.unwrap() {
        report::Publication::Published(p) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(p.commits, 1, "gen1's commit, on top of the pinned one");
    // Taking it up changed nothing in the predecessor's publication.
    dispatch::worker::publish::verify_published(&published).unwrap();
    unseal(&state1);
    unseal(&dirs.state);
}

/// Generation 2 after `tamper` changed generation 1's leftovers: refused, exit 3, its
/// payload never ran, nothing of the state kept.
fn refused_after(tamper: impl FnOnce(&Path, &Path), says: &str) {
    let root = tempfile::tempdir().unwrap();
    let asset = source_asset(root.path());
    let (published, state1) = first_generation(root.path(), &asset);
    tamper(&published, &state1);
    let ran = root.path().join("ran");
    let script = format!("touch {}", ran.display());
    let resume = Some((published.as_path(), state1.as_path(), 2));
    let st = generation(root.path(), SID2, Some(&asset), resume, &script)
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(3));
    assert!(!ran.exists(), "the payload ran");
    let dirs = dispatch::worker::dirs::WorkerDirs::at(root.path().join(SID2));
    let r = report::read(&dirs.evidence).unwrap().unwrap();
    let refused = r.refused.as_ref().expect("PreflightRefused");
    assert_eq!(refused.stage, "resume");
    assert!(refused.reason.contains(says), "{}", refused.reason);
    assert!(r.resumed.is_none() && r.payload_pid.is_none());
    assert_eq!(std::fs::read_dir(&dirs.state).unwrap().count(), 0);
    unseal(&state1);
}

#[test]
fn a_tampered_publication_refuses_the_continuation() {
    refused_after(
        |published, _| {
            let patch = published.join("workspace.patch");
            let mut bytes = std::fs::read(&patch).unwrap();
            bytes.extend_from_slice(b"\n");
            std::fs::write(patch, bytes).unwrap();
        },
        "does not match its manifest",
    );
}

#[test]
fn a_tampered_state_file_refuses_the_continuation() {
    refused_after(
        |_, state| {
            use std::os::unix::fs::PermissionsExt;
            let f = state.join("sub/f");
            std::fs::set_permissions(state.join("sub"), std::fs::Permissions::from_mode(0o700))
                .unwrap();
            std::fs::remove_file(&f).unwrap();
            std::fs::write(&f, "DEEP\n").unwrap();
        },
        "sub/f: listed as 5 bytes",
    );
}

#[test]
fn a_state_file_the_listing_lacks_refuses_the_continuation() {
    refused_after(
        |_, state| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::fs::write(state.join("extra"), "x").unwrap();
        },
        "extra: in the predecessor's state but not in its listing",
    );
}

#[test]
fn without_a_source_asset_the_published_workspace_copy_is_copied_back() {
    let root = tempfile::tempdir().unwrap();
    let first = "mkdir -p d; echo a > d/file; echo 1 > \"$DISPATCH_STATE_DIR/n\"; \
                 touch \"$DISPATCH_CHECKPOINT\"";
    let st = generation(root.path(), SID1, None, None, first)
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(0));
    let dirs1 = dispatch::worker::dirs::WorkerDirs::at(root.path().join(SID1));
    let published = root.path().join("published").join(format!("w-{SID1}"));
    let second = "cat d/file \"$DISPATCH_STATE_DIR/n\" > \"$DISPATCH_EVIDENCE_DIR/seen\"";
    let resume = Some((published.as_path(), dirs1.state.as_path(), 2));
    let st = generation(root.path(), SID2, None, resume, second)
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(0));
    let dirs2 = dispatch::worker::dirs::WorkerDirs::at(root.path().join(SID2));
    let seen = std::fs::read_to_string(dirs2.evidence.join("seen")).unwrap();
    assert_eq!(seen, "a\n1\n");
    let r = report::read(&dirs2.evidence).unwrap().unwrap();
    assert_eq!(r.resumed.as_ref().unwrap().head, None);
    unseal(&dirs1.state);
    unseal(&dirs2.state);
}

/// A payload that asks for checkpoints while it runs (`DISPATCH_CHECKPOINT_NOW`), each after
/// saving its state and committing, then dies with its supervisor (as on a node that fails:
/// no end of its own is recorded, nothing published at the end). Each checkpoint is published
/// beside the final publication's place, the newest two kept; the continuation resumes from
/// the newest: its state copy and its workspace.
#[test]
fn a_continuation_resumes_from_the_newest_checkpoint_taken_while_running() {
    let root = tempfile::tempdir().unwrap();
    let asset = source_asset(root.path());
    let script = "s=\"$DISPATCH_STATE_DIR\"; \
        ask() { echo $1 > \"$s/n\"; echo $1 > c.txt; git add c.txt; \
          git -c user.name=t -c user.email=t@example.org commit -qm c$1; \
          touch \"$DISPATCH_CHECKPOINT_NOW\"; \
          while [ -e \"$DISPATCH_CHECKPOINT_NOW\" ]; do sleep 0.02; done; }; \
        ask 1; ask 2; ask 3; echo 4 > \"$s/n\"; kill -9 $PPID";
    let st = generation(root.path(), SID1, Some(&asset), None, script)
        .status()
        .unwrap();
    assert_eq!(st.code(), None, "its supervisor was killed");
    let dirs1 = dispatch::worker::dirs::WorkerDirs::at(root.path().join(SID1));
    let r = report::read(&dirs1.evidence).unwrap().unwrap();
    assert!(r.publication.is_none() && r.exited.is_none(), "{r:?}");
    let saved = r.saved.expect("CheckpointPublished");
    assert_eq!(saved.number, 3);
    let name = |n: u32| {
        root.path()
            .join("published")
            .join(format!("w-{SID1}-checkpoint-{n}"))
    };
    assert_eq!(saved.dir, name(3).display().to_string());
    assert_eq!(saved.removed, Some(name(1).display().to_string()));
    assert!(!name(1).exists() && name(2).is_dir());
    dispatch::worker::publish::verify_recorded(&name(3), &saved.manifest_sha256).unwrap();
    // The continuation: from checkpoint 3, its state and its work.
    let dirs = second_generation(root.path(), &asset, &name(3), &name(3).join("state"));
    let read = |name: &str| std::fs::read_to_string(dirs.evidence.join(name)).unwrap();
    assert_eq!(read("log"), "c3\nc2\nc1\npinned\n");
    let n = std::fs::read_to_string(dirs.evidence.join("state")).unwrap_or_default();
    assert!(n.starts_with("3\n"), "{n:?}");
    let r = report::read(&dirs.evidence).unwrap().unwrap();
    let resumed = r.resumed.expect("ResumedFrom");
    assert_eq!(resumed.manifest_sha256, saved.manifest_sha256);
    assert_eq!(resumed.state_files, 1);
    unseal(&dirs.state);
}

/// A checkpoint publication's state is its own `state/`: a continuation told to copy another
/// directory against its listing is refused before its payload runs.
#[test]
fn a_checkpoint_resumed_with_another_state_directory_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let asset = source_asset(root.path());
    let script = "echo 1 > \"$DISPATCH_STATE_DIR/n\"; touch \"$DISPATCH_CHECKPOINT_NOW\"; \
        while [ -e \"$DISPATCH_CHECKPOINT_NOW\" ]; do sleep 0.02; done; kill -9 $PPID";
    generation(root.path(), SID1, Some(&asset), None, script)
        .status()
        .unwrap();
    let dirs1 = dispatch::worker::dirs::WorkerDirs::at(root.path().join(SID1));
    let from = root
        .path()
        .join("published")
        .join(format!("w-{SID1}-checkpoint-1"));
    let resume = Some((from.as_path(), dirs1.state.as_path(), 2));
    let st = generation(root.path(), SID2, Some(&asset), resume, "true")
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(3));
    let dirs = dispatch::worker::dirs::WorkerDirs::at(root.path().join(SID2));
    let r = report::read(&dirs.evidence).unwrap().unwrap();
    let refused = r.refused.expect("PreflightRefused");
    assert!(
        refused.reason.contains("checkpoint publication"),
        "{}",
        refused.reason
    );
}
