//! What dispatch trusts below its state directory: only what the caller owns, writable by
//! nobody else, and never through a symbolic link. Anything else is refused (exit 3) with the
//! path and the command that fixes it, and nothing is written.
//!
//! These tests run as root (the project's test machine does), and make "another user" by
//! giving files to uid 65534 (nobody).

mod fake_cli;

use std::collections::BTreeMap;
use std::os::unix::fs::{chown, symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dispatch::journal::reader::snapshot_now;
use dispatch::journal::{self, Options, Writer};

const NOBODY: u32 = 65534;
const REFUSED: i32 = 3;

fn dispatch(state_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--state-dir")
        .arg(state_dir)
        .args(args)
        .env_remove("DISPATCH_STATE_DIR")
        .env_remove("DISPATCH_CONFIG")
        .output()
        .expect("run dispatch")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A state directory with a journal that has one trial in it.
fn state_with_journal() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let o = dispatch(t.path(), &["trial", "open", "first"]);
    assert!(o.status.success(), "{}", text(&o));
    t
}

fn journal_dir(state: &Path) -> PathBuf {
    state.join("journal")
}

fn segment(state: &Path) -> PathBuf {
    journal_dir(state).join("segment-00000001.djl")
}

/// Every file below `dir` (following nothing) and its bytes.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                out.insert(e.path(), std::fs::read(e.path()).unwrap());
            } else {
                out.insert(e.path(), b"<link>".to_vec());
            }
        }
    }
    out
}

fn give_to_nobody(path: &Path) {
    chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
}

fn give_tree_to_nobody(dir: &Path) {
    give_to_nobody(dir);
    for f in contents(dir).keys() {
        give_to_nobody(f);
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Refused with exit 3, naming `path` and the command that fixes it.
#[track_caller]
fn assert_refused(o: &Output, path: &Path, fix: &str, ctx: &str) {
    let all = text(o);
    assert_eq!(o.status.code(), Some(REFUSED), "{ctx}: {all}");
    assert!(
        all.contains(&path.display().to_string()),
        "{ctx}: the message names {}: {all}",
        path.display()
    );
    assert!(all.contains(fix), "{ctx}: the message says `{fix}`: {all}");
}

/// A write and a read command against the state dir, each refused, nothing written below
/// `watched`.
#[track_caller]
fn assert_all_refused(state: &Path, watched: &Path, path: &Path, fix: &str) {
    let before = contents(watched);
    for args in [
        &["trial", "open", "second"][..],
        &["journal", "init"],
        &["journal", "verify"],
        &["journal", "dump"],
        &["trials"],
        &["audit"],
        &["pool", "status"],
    ] {
        let o = dispatch(state, args);
        assert_refused(&o, path, fix, &args.join(" "));
        assert_eq!(
            contents(watched),
            before,
            "{}: nothing was written",
            args.join(" ")
        );
    }
}

#[test]
fn a_journal_directory_of_another_user_is_refused() {
    let t = state_with_journal();
    let journal = journal_dir(t.path());
    give_tree_to_nobody(&journal);
    assert_all_refused(t.path(), &journal, &journal, "chown -R 0 ");
}

#[test]
fn a_segment_of_another_user_is_refused() {
    let t = state_with_journal();
    let seg = segment(t.path());
    give_to_nobody(&seg);
    assert_all_refused(t.path(), &journal_dir(t.path()), &seg, "chown 0 ");
}

#[test]
fn a_group_writable_segment_is_refused() {
    let t = state_with_journal();
    let seg = segment(t.path());
    set_mode(&seg, 0o620);
    assert_all_refused(t.path(), &journal_dir(t.path()), &seg, "chmod go-w ");
    assert_eq!(mode(&seg), 0o620, "the segment's mode is left as it was");
}

#[test]
fn a_snapshot_of_another_user_is_refused() {
    let t = state_with_journal();
    let dir = journal_dir(t.path());
    let loaded = journal::load::<dispatch::state::State>(&dir).unwrap();
    let snap = snapshot_now(&dir, &loaded).unwrap();
    give_to_nobody(&snap);
    assert_all_refused(t.path(), &dir, &snap, "chown 0 ");
}

#[test]
fn an_assets_directory_of_another_user_is_refused() {
    let t = state_with_journal();
    let assets = t.path().join("assets");
    std::fs::create_dir(&assets).unwrap();
    std::fs::write(assets.join("planted.image"), b"not yours").unwrap();
    give_tree_to_nobody(&assets);
    assert_all_refused(t.path(), t.path(), &assets, "chown -R 0 ");
    let o = dispatch(t.path(), &["asset", "list"]);
    assert_refused(&o, &assets, "chown -R 0 ", "asset list");
}

#[test]
fn a_pools_directory_of_another_user_is_refused() {
    let t = state_with_journal();
    let pools = t.path().join("pools");
    std::fs::create_dir(&pools).unwrap();
    give_to_nobody(&pools);
    assert_all_refused(t.path(), t.path(), &pools, "chown -R 0 ");
}

#[test]
fn a_group_writable_state_directory_is_refused_and_left_as_it_was() {
    let t = state_with_journal();
    set_mode(t.path(), 0o770);
    assert_all_refused(t.path(), t.path(), t.path(), "chmod 700 ");
    assert_eq!(mode(t.path()), 0o770);
}

#[test]
fn a_world_writable_state_directory_is_refused_and_stays_world_writable() {
    let t = state_with_journal();
    set_mode(t.path(), 0o777);
    assert_all_refused(t.path(), t.path(), t.path(), "chmod 700 ");
    assert_eq!(
        mode(t.path()),
        0o777,
        "dispatch never chmods the user's directory"
    );

    // A fresh, empty one too: nothing is created in it.
    let fresh = tempfile::tempdir().unwrap();
    set_mode(fresh.path(), 0o777);
    for args in [&["journal", "init"][..], &["trial", "open", "x"]] {
        let o = dispatch(fresh.path(), args);
        assert_refused(&o, fresh.path(), "chmod 700 ", &args.join(" "));
    }
    assert!(contents(fresh.path()).is_empty());
    assert_eq!(std::fs::read_dir(fresh.path()).unwrap().count(), 0);
    assert_eq!(mode(fresh.path()), 0o777);
}

#[test]
fn a_journal_directory_linked_out_of_the_state_directory_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let o = dispatch(elsewhere.path(), &["journal", "init"]);
    assert!(o.status.success(), "{}", text(&o));
    let target = journal_dir(elsewhere.path());
    let link = journal_dir(t.path());
    symlink(&target, &link).unwrap();
    let before = contents(&target);
    assert_all_refused(t.path(), t.path(), &link, "rm ");
    let o = dispatch(t.path(), &["journal", "verify"]);
    assert!(
        text(&o).contains(&format!("mv {} {}", target.display(), link.display())),
        "the fix replaces the link by its target: {}",
        text(&o)
    );
    assert_eq!(
        contents(&target),
        before,
        "the link's target was not written"
    );
}

#[test]
fn a_segment_linked_out_of_the_journal_is_refused() {
    let t = state_with_journal();
    let elsewhere = tempfile::tempdir().unwrap();
    let seg = segment(t.path());
    let target = elsewhere.path().join("segment-00000001.djl");
    std::fs::rename(&seg, &target).unwrap();
    symlink(&target, &seg).unwrap();
    let before = std::fs::read(&target).unwrap();
    assert_all_refused(t.path(), &journal_dir(t.path()), &seg, "rm ");
    assert_eq!(std::fs::read(&target).unwrap(), before);
}

#[test]
fn a_lock_file_linked_elsewhere_is_refused() {
    let t = state_with_journal();
    let elsewhere = tempfile::tempdir().unwrap();
    let lock = journal_dir(t.path()).join("LOCK");
    let target = elsewhere.path().join("victim");
    std::fs::write(&target, b"keep me").unwrap();
    std::fs::remove_file(&lock).unwrap();
    symlink(&target, &lock).unwrap();
    let o = dispatch(t.path(), &["trial", "open", "second"]);
    assert_refused(&o, &lock, "rm ", "trial open");
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
}

#[test]
fn json_gets_one_error_document() {
    let t = state_with_journal();
    let journal = journal_dir(t.path());
    give_tree_to_nobody(&journal);
    for args in [
        &["--json", "trial", "open", "x"][..],
        &["--json", "journal", "verify"],
    ] {
        let o = dispatch(t.path(), args);
        assert_eq!(o.status.code(), Some(REFUSED), "{}", text(&o));
        let stdout = String::from_utf8(o.stdout.clone()).unwrap();
        let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&stdout)
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(docs.len(), 1, "exactly one document: {stdout}");
        assert_eq!(docs[0]["error"]["exit_code"], REFUSED);
        let message = docs[0]["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&journal.display().to_string()),
            "{message}"
        );
        assert!(message.contains("chown -R 0 "), "{message}");
    }
}

#[test]
fn the_state_directory_and_what_dispatch_creates_in_it_are_owner_only() {
    let t = tempfile::tempdir().unwrap();
    let state = t.path().join("state");
    let o = dispatch(&state, &["trial", "open", "x"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&journal_dir(&state)), 0o700);
    for f in contents(&state).keys() {
        assert_eq!(
            mode(f) & 0o022,
            0,
            "{} is writable only by its owner",
            f.display()
        );
    }
    // And the check passes on them: a second command works.
    let o = dispatch(&state, &["trials"]);
    assert!(o.status.success(), "{}", text(&o));
    drop(Writer::open(&journal_dir(&state), Options::default()).unwrap());
}

/// `dispatch submit` against the fake Slurm with one image asset added.
fn fake_with_image() -> fake_cli::Fake {
    let fake = fake_cli::Fake::new();
    fake.scenario(serde_json::json!({"sbatch": [{"stdout": "91\n"}]}));
    let image = fake.dir.path().join("image.sif");
    std::fs::write(&image, b"an image").unwrap();
    let (code, _, err) = fake.run(&["asset", "add-image", "img", image.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    fake
}

fn submit_with_image(fake: &fake_cli::Fake) -> (i32, String, String) {
    fake.run(&[
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "a", "--image", "img",
        "--", "true",
    ])
}

#[test]
fn an_asset_file_of_another_user_is_not_handed_to_a_worker() {
    let fake = fake_with_image();
    let assets = fake.state().join("assets");
    let file = std::fs::read_dir(&assets)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    give_to_nobody(&file);
    let before = fake.kinds();
    let (code, _, err) = submit_with_image(&fake);
    assert_eq!(code, REFUSED, "{err}");
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert!(err.contains("chown 0 "), "{err}");
    assert!(fake.calls().is_empty(), "no sbatch: {:?}", fake.calls());
    assert_eq!(fake.kinds(), before, "nothing journaled");
}

/// `asset verify` does not vouch for another user's file, and `asset add` does not hash
/// through a file someone else put at the asset's name.
#[test]
fn asset_verify_and_add_refuse_a_file_of_another_user() {
    let fake = fake_with_image();
    let assets = fake.state().join("assets");
    let file = std::fs::read_dir(&assets)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "image"))
        .unwrap();
    give_to_nobody(&file);
    let (code, _, err) = fake.run(&["asset", "verify"]);
    assert_eq!(code, REFUSED, "{err}");
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert!(err.contains("chown 0 "), "{err}");
    // The same image again under another name lands on the same content-named file.
    let image = fake.dir.path().join("image.sif");
    let (code, _, err) = fake.run(&["asset", "add-image", "img2", image.to_str().unwrap()]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains(&file.display().to_string()), "{err}");
}

#[test]
fn a_job_tree_linked_out_of_the_state_directory_is_refused_before_sbatch() {
    let fake = fake_with_image();
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), fake.state().join("jobs")).unwrap();
    let journal = journal_dir(&fake.state());
    let before = contents(&journal);
    let (code, _, err) = submit_with_image(&fake);
    assert_eq!(code, REFUSED, "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(fake.calls().is_empty(), "no sbatch: {:?}", fake.calls());
    assert_eq!(contents(&journal), before, "nothing journaled");
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn a_worker_tree_of_another_user_is_not_read() {
    let fake = fake_with_image();
    let jobs = fake.state().join("jobs");
    std::fs::create_dir(&jobs).unwrap();
    let (code, _, err) = submit_with_image(&fake);
    assert_eq!(code, 0, "a clean tree works: {err}");
    let root = std::fs::read_dir(&jobs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let evidence = root.join("evidence");
    give_to_nobody(&evidence);
    let (code, out, err) = fake.run(&["inspect", "a"]);
    assert_eq!(code, REFUSED, "{out}{err}");
    assert!(err.contains(&evidence.display().to_string()), "{err}");
}
