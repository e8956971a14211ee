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
    assert_eq!(again.code, Some(3), "{}", again.stderr);
    assert!(again.stderr.contains("immutable"), "{}", again.stderr);
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
