//! `dispatch asset …` end to end (no Slurm): JSON shapes, exit codes, refusals, and a crash
//! at each boundary of `add` followed by a retry.

mod support;

use std::path::Path;
use std::process::Command;

use support::git;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn dispatch(sd: &Path, args: &[&str], failpoint: Option<&str>) -> Run {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.arg("--state-dir").arg(sd).args(args);
    match failpoint {
        Some(f) => c.env("DISPATCH_FAILPOINTS", f),
        None => c.env_remove("DISPATCH_FAILPOINTS"),
    };
    let out = c.output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json(r: &Run) -> serde_json::Value {
    serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

fn repo(root: &Path) -> (std::path::PathBuf, String, String) {
    let r = root.join("repo");
    std::fs::create_dir_all(r.join("d")).unwrap();
    git(&r, &["init", "-q"]);
    std::fs::write(r.join("a"), "12345").unwrap();
    git(&r, &["add", "."]);
    git(&r, &["commit", "-qm", "one"]);
    let first = git(&r, &["rev-parse", "HEAD"]);
    std::fs::write(r.join("d/b"), "1234567890").unwrap();
    git(&r, &["add", "."]);
    git(&r, &["commit", "-qm", "two"]);
    let second = git(&r, &["rev-parse", "HEAD"]);
    (r, first, second)
}

/// Files in `<sd>/assets`.
fn asset_files(sd: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(sd.join("assets"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn add_list_and_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let sd = &tmp.path().join("s");
    let (r, first, second) = repo(tmp.path());
    let a = dispatch(
        sd,
        &[
            "asset",
            "add-source",
            "old",
            r.to_str().unwrap(),
            "--rev",
            &first,
            "--json",
        ],
        None,
    );
    assert_eq!(a.code, Some(0), "{}", a.stderr);
    let a = json(&a);
    assert_eq!(a["commit"], first.as_str());
    assert_eq!(
        (a["tree_files"].as_u64(), a["tree_bytes"].as_u64()),
        (Some(1), Some(5))
    );
    let b = json(&dispatch(
        sd,
        &["asset", "add-source", "new", r.to_str().unwrap(), "--json"],
        None,
    ));
    assert_eq!(b["commit"], second.as_str());
    assert_eq!(b["rev"], "HEAD");
    assert_eq!(
        (b["tree_files"].as_u64(), b["tree_bytes"].as_u64()),
        (Some(2), Some(15))
    );
    // The file is read-only, named by its SHA-256, and a bundle of the pinned commit.
    let file = Path::new(b["file"].as_str().unwrap());
    assert!(file.ends_with(format!("{}.bundle", b["sha256"].as_str().unwrap())));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(file).unwrap().permissions().mode() & 0o222,
        0
    );
    let heads = git(&r, &["bundle", "list-heads", file.to_str().unwrap()]);
    assert_eq!(heads, format!("{second} HEAD"));
    // The user's repository gained no ref.
    assert!(!git(&r, &["for-each-ref"]).contains("dispatch"));

    let image = tmp.path().join("x.sif");
    std::fs::write(&image, b"an image").unwrap();
    let i = json(&dispatch(
        sd,
        &[
            "asset",
            "add-image",
            "img",
            image.to_str().unwrap(),
            "--json",
        ],
        None,
    ));
    assert_eq!(i["kind"], "image");
    assert_eq!(i["bytes"], 8);
    use sha2::Digest;
    assert_eq!(
        i["sha256"].as_str().unwrap(),
        hex::encode(sha2::Sha256::digest(b"an image"))
    );
    let list = json(&dispatch(sd, &["asset", "list", "--json"], None));
    let names: Vec<_> = list["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap().to_owned(), a["state"].clone()))
        .collect();
    assert_eq!(names.len(), 3);
    assert!(names.iter().all(|(_, s)| s == "ready"), "{names:?}");
    let v = dispatch(sd, &["asset", "verify", "--json"], None);
    assert_eq!(v.code, Some(0), "{}", v.stdout);
    assert_eq!(json(&v)["ok"], true);

    // Immutable names; bad names; unknown names; missing inputs.
    let again = dispatch(
        sd,
        &["asset", "add-image", "img", image.to_str().unwrap()],
        None,
    );
    // The same add again (a retry of one that may or may not have finished) answers the
    // asset it made; other contents under a bound name are refused.
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    let other = tmp.path().join("y.sif");
    std::fs::write(&other, b"another image").unwrap();
    let taken = dispatch(
        sd,
        &["asset", "add-image", "img", other.to_str().unwrap()],
        None,
    );
    assert_eq!(taken.code, Some(3), "{}", taken.stderr);
    assert!(taken.stderr.contains("immutable"), "{}", taken.stderr);
    let bad = dispatch(
        sd,
        &["asset", "add-image", "../x", image.to_str().unwrap()],
        None,
    );
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    let unknown = dispatch(sd, &["asset", "verify", "nope"], None);
    assert_eq!(unknown.code, Some(3), "{}", unknown.stderr);
    let missing = dispatch(sd, &["asset", "add-image", "m", "/nonexistent/file"], None);
    assert_eq!(missing.code, Some(1), "{}", missing.stderr);
    let not_repo = dispatch(
        sd,
        &[
            "asset",
            "add-source",
            "n",
            tmp.path().to_str().unwrap(),
            "--rev",
            "nope",
        ],
        None,
    );
    assert_eq!(not_repo.code, Some(1), "{}", not_repo.stderr);
    assert!(
        asset_files(sd).iter().all(|f| !f.starts_with(".tmp-")),
        "a failed add left a temporary file: {:?}",
        asset_files(sd)
    );
    assert_eq!(
        json(&dispatch(sd, &["asset", "list", "--json"], None))["assets"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // A changed file is found, and named.
    let f = Path::new(i["file"].as_str().unwrap());
    std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(f, b"an imagf").unwrap();
    let v = dispatch(sd, &["asset", "verify", "--json"], None);
    assert_eq!(v.code, Some(1));
    let bad: Vec<_> = json(&v)["assets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"] != "ok")
        .map(|a| {
            (
                a["name"].clone(),
                a["status"].clone(),
                a["read_only"].clone(),
            )
        })
        .collect();
    assert_eq!(bad, [("img".into(), "mismatch".into(), false.into())]);
}

#[test]
fn a_crash_at_either_boundary_of_add_is_resolved_by_adding_again() {
    for point in ["asset-add-after-intent", "asset-add-before-record"] {
        let tmp = tempfile::tempdir().unwrap();
        let sd = &tmp.path().join("s");
        let image = tmp.path().join("x.sif");
        std::fs::write(&image, b"an image").unwrap();
        let add = |fp| {
            dispatch(
                sd,
                &[
                    "asset",
                    "add-image",
                    "img",
                    image.to_str().unwrap(),
                    "--json",
                ],
                fp,
            )
        };
        let spec = format!("{point}=abort");
        let crashed = add(Some(&spec));
        assert_eq!(
            crashed.code, None,
            "{point} did not fire: {}",
            crashed.stderr
        );
        // The intent is durable, the outcome is not: pending, never usable.
        let list = json(&dispatch(sd, &["asset", "list", "--json"], None));
        assert_eq!(list["assets"][0]["state"], "pending", "{point}");
        let v = json(&dispatch(sd, &["asset", "verify", "--json"], None));
        assert_eq!(v["assets"][0]["status"], "pending");
        // Adding again marks the dead attempt failed and completes.
        let again = add(None);
        assert_eq!(again.code, Some(0), "{point}: {}", again.stderr);
        let list = json(&dispatch(sd, &["asset", "list", "--json"], None));
        assert_eq!(list["assets"][0]["state"], "ready");
        // One file, in place; the dead process's temporary file is gone.
        let files = asset_files(sd);
        assert_eq!(files.len(), 1, "{point}: {files:?}");
        assert!(files[0].ends_with(".image"));
        let dump = dispatch(sd, &["journal", "dump", "--json"], None);
        let kinds: Vec<String> = dump
            .stdout
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .filter(|k| k.starts_with("Asset"))
            .collect();
        assert_eq!(
            kinds,
            [
                "AssetAddIntent",
                "AssetAddFailed",
                "AssetAddIntent",
                "AssetAdded"
            ],
            "{point}"
        );
    }
}

/// Temporary files in `<sd>/assets`.
fn temp_files(sd: &Path) -> Vec<String> {
    match std::fs::read_dir(sd.join("assets")) {
        Ok(_) => asset_files(sd)
            .into_iter()
            .filter(|f| f.starts_with(".tmp-"))
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn state_of(sd: &Path, name: &str) -> Option<(String, String)> {
    let list = json(&dispatch(sd, &["asset", "list", "--json"], None));
    list["assets"].as_array()?.iter().find_map(|a| {
        (a["name"] == name).then(|| {
            (
                a["state"].as_str().unwrap().to_owned(),
                a["sha256"].as_str().unwrap().to_owned(),
            )
        })
    })
}

/// A command that takes the journal lock and has nothing to do with assets.
fn some_locked_command(sd: &Path, n: usize) -> Run {
    dispatch(sd, &["trial", "open", &format!("t{n}"), "--json"], None)
}

/// Kill `add` with SIGKILL at increasing moments from its start to past its end; after each
/// kill, the next command that takes the lock removes the dead add's temporary files, and
/// the same add again completes the asset, with the identity an uninterrupted add gives.
fn kill_add_at_every_moment(args: &[&str], init_first: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let run = |sd: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
            .arg("--state-dir")
            .arg(sd)
            .args(args)
            .env_remove("DISPATCH_FAILPOINTS")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let reference = tmp.path().join("reference");
    let t = std::time::Instant::now();
    assert!(run(&reference).wait().unwrap().success());
    let whole = t.elapsed();
    let (_, sha) = state_of(&reference, args[2]).unwrap();
    let step = (whole / 16).max(std::time::Duration::from_millis(10));
    let mut left_temps = 0;
    let mut round = 0;
    let mut delay = std::time::Duration::ZERO;
    while delay <= whole + 2 * step {
        round += 1;
        let sd = &tmp.path().join(format!("s{round}"));
        if init_first {
            assert_eq!(dispatch(sd, &["journal", "init"], None).code, Some(0));
        }
        let mut child = run(sd);
        std::thread::sleep(delay);
        let _ = child.kill();
        child.wait().unwrap();
        if !temp_files(sd).is_empty() {
            left_temps += 1;
            let r = some_locked_command(sd, round);
            assert_eq!(r.code, Some(0), "{}", r.stderr);
            assert_eq!(
                temp_files(sd),
                Vec::<String>::new(),
                "killed after {delay:?}: the next locked command left the dead add's files"
            );
        }
        let again = dispatch(sd, args, None);
        assert_eq!(
            again.code,
            Some(0),
            "killed after {delay:?}, the same add again: {}",
            again.stderr
        );
        assert_eq!(
            state_of(sd, args[2]),
            Some(("ready".to_owned(), sha.clone())),
            "killed after {delay:?}"
        );
        let files: Vec<_> = asset_files(sd);
        assert_eq!(files.len(), 1, "killed after {delay:?}: {files:?}");
        delay += step;
    }
    assert!(
        left_temps > 0,
        "no kill landed while a temporary file existed ({round} rounds over {whole:?})"
    );
}

#[test]
fn a_sigkill_at_any_moment_of_add_source_is_completed_by_adding_again() {
    let tmp = tempfile::tempdir().unwrap();
    let (r, _, _) = repo(tmp.path());
    // Enough history that building the bundle takes a while.
    for i in 0..30 {
        std::fs::write(r.join(format!("f{i}")), vec![i as u8; 200_000]).unwrap();
        git(&r, &["add", "."]);
        git(&r, &["commit", "-qm", &format!("c{i}")]);
    }
    let r = r.to_str().unwrap();
    kill_add_at_every_moment(&["asset", "add-source", "src", r, "--json"], false);
    kill_add_at_every_moment(&["asset", "add-source", "src", r, "--json"], true);
}

#[test]
fn a_sigkill_at_any_moment_of_add_image_is_completed_by_adding_again() {
    let tmp = tempfile::tempdir().unwrap();
    let image = tmp.path().join("big.sif");
    let bytes: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&image, bytes).unwrap();
    let image = image.to_str().unwrap();
    kill_add_at_every_moment(&["asset", "add-image", "img", image, "--json"], true);
}

#[test]
fn the_next_locked_command_removes_a_dead_adds_temporary_file_and_keeps_a_live_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let sd = &tmp.path().join("s");
    let image = tmp.path().join("x.sif");
    std::fs::write(&image, b"an image").unwrap();
    let crashed = dispatch(
        sd,
        &["asset", "add-image", "img", image.to_str().unwrap()],
        Some("asset-add-after-intent=abort"),
    );
    assert_eq!(crashed.code, None, "{}", crashed.stderr);
    assert!(!temp_files(sd).is_empty(), "{:?}", asset_files(sd));
    // A temporary file named after a process that is alive but is not writing it (this test
    // process), as after pid reuse: nothing holds it, so it is a dead add's too.
    let reused = sd
        .join("assets")
        .join(format!(".tmp-{}-0123456789abcdef", std::process::id()));
    std::fs::write(&reused, b"partial").unwrap();
    // The files of an add that is running: it holds the lock beside them, so they are kept.
    std::fs::write(sd.join("assets").join(".tmp-1-live"), b"partial").unwrap();
    let held = std::fs::File::create(sd.join("assets").join(".tmp-1-live.lock")).unwrap();
    // SAFETY: flock on an open descriptor we own.
    assert_eq!(
        unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&held),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        },
        0
    );
    let r = some_locked_command(sd, 1);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(temp_files(sd), [".tmp-1-live", ".tmp-1-live.lock"]);
    drop(held);
    let r = some_locked_command(sd, 2);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(temp_files(sd), Vec::<String>::new());
    // And the pending add completes when it is made again.
    let again = dispatch(
        sd,
        &["asset", "add-image", "img", image.to_str().unwrap()],
        None,
    );
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(state_of(sd, "img").unwrap().0, "ready");
}
