//! The worker's life on its node, against the real single-node Slurm cluster
//! (`tools/slurm-dev-cluster start`): verified assets, private checkouts, publication within
//! the timeout, evidence, and step-scoped cleanup. Never skipped: without a cluster these
//! tests fail and say how to start one.

mod real_cluster;
mod support;

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dispatch::worker::dirs::WorkerDirs;
use dispatch::worker::report::{self, Publication, WorkerReport};
use dispatch::worker::{cleanup, publish};
use real_cluster::{
    cpus_in, dispatch, dispatch_cmd, json, require_cluster, squeue_steps, Allocation, Run,
};
use serde_json::Value;
use support::git;
use uuid::Uuid;

// ---- helpers ------------------------------------------------------------------------------

/// A repository with two commits; returns its path and HEAD.
fn make_repo(root: &Path) -> (PathBuf, String) {
    let repo = root.join("repo");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("README"), "a project\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "first"]);
    std::fs::write(repo.join("src/lib.txt"), "some code\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "second"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    (repo, head)
}

fn ok(r: Run, what: &str) -> Value {
    assert_eq!(r.code, 0, "{what}: {}{}", r.stdout, r.stderr);
    json(&r.stdout)
}

fn add_assets(sd: &Path, root: &Path) -> (Value, Value, PathBuf) {
    let (repo, _) = make_repo(root);
    let image = root.join("image.sif");
    std::fs::write(&image, vec![0x5au8; 3 << 20]).unwrap();
    let src = ok(
        dispatch(
            sd,
            &[
                "asset",
                "add-source",
                "src",
                repo.to_str().unwrap(),
                "--json",
            ],
        ),
        "add-source",
    );
    let img = ok(
        dispatch(
            sd,
            &[
                "asset",
                "add-image",
                "img",
                image.to_str().unwrap(),
                "--json",
            ],
        ),
        "add-image",
    );
    (src, img, repo)
}

fn attach(sd: &Path, pool: &str, alloc: &Allocation) {
    ok(
        dispatch(
            sd,
            &[
                "pool",
                "attach",
                pool,
                "--job",
                &alloc.id.to_string(),
                "--json",
            ],
        ),
        "attach",
    );
}

/// `pool submit POOL --cpus 1 --mem 200M --name NAME EXTRA… -- sh -c SCRIPT sh ARGS…`, with
/// `env` added to dispatch's (and so, through srun, to the step's) environment.
fn submit(
    sd: &Path,
    pool: &str,
    name: &str,
    extra: &[&str],
    env: &[(&str, &str)],
    script: &str,
    args: &[&str],
) -> Value {
    let mut argv = vec![
        "pool", "submit", pool, "--cpus", "1", "--mem", "200M", "--name", name, "--json",
    ];
    argv.extend_from_slice(extra);
    argv.extend_from_slice(&["--", "sh", "-c", script, "sh"]);
    argv.extend_from_slice(args);
    let out = dispatch_cmd(sd, &argv)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    let v = ok(r, &format!("submit {name}"));
    assert_eq!(v["state"], "running", "{v}");
    v
}

fn dirs_of(sd: &Path, pool: &str, w: &Value) -> WorkerDirs {
    let sid: Uuid = w["submission_id"].as_str().unwrap().parse().unwrap();
    WorkerDirs::new(&sd.join("pools"), pool, sid)
}

fn wait_for(what: &str, bound: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The worker journal once its supervisor has written its last event.
fn finished(dirs: &WorkerDirs, bound: Duration) -> WorkerReport {
    let mut last = None;
    wait_for("the supervisor's end", bound, || {
        last = report::read(&dirs.evidence).ok().flatten();
        last.as_ref().is_some_and(|r| r.finished.is_some())
    });
    last.unwrap()
}

/// (device, inode, links) of every file below `dir`.
fn inodes(dir: &Path) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.path().symlink_metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else if m.is_file() {
                out.push((m.dev(), m.ino(), m.nlink()));
            }
        }
    }
    out
}

/// `DISPATCH_*=…` lines a payload printed.
/// The `DISPATCH_*` variables the payload printed, once its stdout has reached the file.
fn env_lines(dirs: &WorkerDirs) -> Vec<(String, String)> {
    let stdout = dirs.evidence.join("stdout");
    let printed = || {
        std::fs::read_to_string(&stdout)
            .unwrap_or_default()
            .lines()
            .any(|l| l == "env-printed")
    };
    wait_for("the payload's stdout", Duration::from_secs(30), printed);
    std::fs::read_to_string(&stdout)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("DISPATCH_"))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn published(r: &WorkerReport) -> &dispatch::event::worker::Published {
    match &r.publication {
        Some(Publication::Published(p)) => p,
        other => panic!("not published: {other:?}"),
    }
}

fn status_worker(sd: &Path, pool: &str, name: &str) -> Value {
    let st = ok(dispatch(sd, &["pool", "status", pool, "--json"]), "status");
    st["pools"][0]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == name)
        .unwrap_or_else(|| panic!("no worker {name} in {st}"))
        .clone()
}

fn sha256_hex(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

/// Commits, changes and writes state, says it is ready, then waits for `$1` to exist.
/// Its stdout reaches the evidence file through slurmstepd, later than the `ready` file:
/// readers wait for the `env-printed` line (see `env_lines`).
const WORK_THEN_WAIT: &str = r#"
set -e
grep Cpus_allowed_list /proc/self/status
env | grep '^DISPATCH_' | sort
echo env-printed
echo "work of $2" >> README
git -c user.name=w -c user.email=w@example.org commit -qam "work of $2"
echo "not committed by $2" >> README
echo "new file of $2" > new-file
printf '{"step":1}\n{"step":2}\n' > "$DISPATCH_STATE_DIR/rollout.jsonl"
echo "db of $2" > "$DISPATCH_STATE_DIR/db.sqlite"
touch "$DISPATCH_RUNTIME_DIR/ready" "$DISPATCH_CACHE_DIR/cached"
while [ ! -e "$1" ]; do sleep 0.2; done
"#;

// ---- the tests ----------------------------------------------------------------------------

#[test]
fn two_workers_from_one_source_asset_own_their_copies_and_both_publish() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let sd = &tmp.path().join("state");
    let (src, img, repo) = add_assets(sd, tmp.path());
    let alloc = real_cluster::salloc_on_distinct_cpus(
        "node-two",
        &["-c", "2", "--mem", "1G", "--time", "10"],
        2,
    );
    attach(sd, "p", &alloc);
    let go = tmp.path().join("go");
    let go = go.to_str().unwrap();
    let assets = ["--source", "src", "--image", "img"];
    let w1 = submit(sd, "p", "w1", &assets, &[], WORK_THEN_WAIT, &[go, "w1"]);
    let w2 = submit(sd, "p", "w2", &assets, &[], WORK_THEN_WAIT, &[go, "w2"]);
    let (d1, d2) = (dirs_of(sd, "p", &w1), dirs_of(sd, "p", &w2));
    for d in [&d1, &d2] {
        wait_for("both payloads at work", Duration::from_secs(60), || {
            d.runtime.join("ready").exists()
        });
    }

    // Both run at once, as separate steps, on disjoint CPUs.
    let steps = squeue_steps(alloc.id);
    assert!(
        steps.contains(&"p.w1".to_owned()) && steps.contains(&"p.w2".to_owned()),
        "{steps:?}"
    );
    let cpu = |d: &WorkerDirs| {
        cpus_in(
            &report::read(&d.evidence)
                .unwrap()
                .unwrap()
                .started
                .unwrap()
                .cpu_set,
        )
    };
    let (c1, c2) = (cpu(&d1), cpu(&d2));
    assert!(!c1.is_empty() && c1.is_disjoint(&c2), "{c1:?} {c2:?}");

    // Each has its own object copy: no alternates, no shared inode with the asset or with
    // the other, no file with a second link.
    let asset_file = PathBuf::from(src["file"].as_str().unwrap());
    let asset_ino = {
        let m = std::fs::metadata(&asset_file).unwrap();
        (m.dev(), m.ino())
    };
    let mut seen = BTreeSet::new();
    for d in [&d1, &d2] {
        let objects = d.checkout.join(".git/objects");
        assert!(!objects.join("info/alternates").exists());
        let files = inodes(&objects);
        assert!(!files.is_empty());
        for (dev, ino, links) in files {
            assert_eq!(
                links,
                1,
                "a hardlinked object file in {}",
                objects.display()
            );
            assert_ne!((dev, ino), asset_ino);
            assert!(seen.insert((dev, ino)), "an object inode is shared");
        }
        assert_eq!(
            git(&d.checkout, &["log", "-1", "--format=%s", "HEAD~1"]),
            "second",
            "the checkout is not on top of the pinned commit"
        );
        let remotes = git(&d.checkout, &["remote"]);
        assert!(remotes.is_empty(), "the checkout still points at {remotes}");
    }

    // Private runtime and native roots, exported by the supervisor.
    let (e1, e2) = (env_lines(&d1), env_lines(&d2));
    for (d, env) in [(&d1, &e1), (&d2, &e2)] {
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .unwrap_or_else(|| panic!("{k} not exported: {env:?}"))
                .1
                .clone()
        };
        assert_eq!(PathBuf::from(get("DISPATCH_WORKSPACE")), d.checkout);
        assert_eq!(PathBuf::from(get("DISPATCH_RUNTIME_DIR")), d.runtime);
        assert_eq!(PathBuf::from(get("DISPATCH_CACHE_DIR")), d.cache);
        assert_eq!(PathBuf::from(get("DISPATCH_STATE_DIR")), d.state);
        assert_eq!(PathBuf::from(get("DISPATCH_EVIDENCE_DIR")), d.evidence);
        assert!(get("DISPATCH_DEADLINE").parse::<i64>().unwrap() > 0);
        assert_eq!(get("DISPATCH_IMAGE"), img["file"].as_str().unwrap());
    }
    let values = |e: &[(String, String)]| -> BTreeSet<String> {
        e.iter()
            // One deadline, one image, and the first generation, for both by design.
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "DISPATCH_DEADLINE" | "DISPATCH_IMAGE" | "DISPATCH_GENERATION"
                )
            })
            .map(|(_, v)| v.clone())
            .collect()
    };
    let shared: Vec<String> = values(&e1).intersection(&values(&e2)).cloned().collect();
    assert!(
        shared.is_empty(),
        "both workers were given {shared:?}: {e1:?} {e2:?}"
    );

    std::fs::write(go, "").unwrap();
    let (r1, r2) = (
        finished(&d1, Duration::from_secs(90)),
        finished(&d2, Duration::from_secs(90)),
    );
    let listed = ok(dispatch(sd, &["asset", "list", "--json"]), "asset list");
    for (name, d, r) in [("w1", &d1, &r1), ("w2", &d2, &r2)] {
        assert_eq!(r.finished.as_ref().unwrap().outcome, "completed");
        assert!(r.checks.as_ref().unwrap().ok);
        assert!(r.checkout.as_ref().unwrap().ok);
        // The asset identities each node computed are the recorded ones.
        for a in &r.asset_checks {
            let recorded = listed["assets"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["name"] == a.name)
                .unwrap();
            assert!(a.ok);
            assert_eq!(
                hex::encode(a.observed.unwrap().0),
                recorded["sha256"].as_str().unwrap()
            );
        }
        assert_eq!(r.asset_checks.len(), 2);
        // Published, and the manifest verifies.
        let p = published(r);
        let dir = PathBuf::from(&p.dir);
        assert_eq!(
            dir,
            sd.join("pools/p/published").join(format!(
                "{name}-{}",
                r.started.as_ref().unwrap().submission_id
            ))
        );
        let manifest = publish::verify_published(&dir).unwrap_or_else(|d| panic!("{d:?}"));
        assert_eq!(
            manifest.pinned_commit.as_deref(),
            src["commit"].as_str(),
            "pinned commit"
        );
        assert_eq!(
            sha256_hex(&dir.join("MANIFEST.json")),
            hex::encode(p.manifest_sha256.0)
        );
        assert_eq!(p.commits, 1);
        // The bundle holds the worker's commit on top of the pinned one; the patch the rest.
        git(
            &repo,
            &[
                "bundle",
                "verify",
                "-q",
                dir.join("workspace.bundle").to_str().unwrap(),
            ],
        );
        let heads = git(
            &repo,
            &[
                "bundle",
                "list-heads",
                dir.join("workspace.bundle").to_str().unwrap(),
            ],
        );
        assert!(
            heads.contains(manifest.head_commit.as_deref().unwrap()),
            "{heads}"
        );
        let patch = std::fs::read_to_string(dir.join("workspace.patch")).unwrap();
        assert!(
            patch.contains(&format!("+not committed by {name}")),
            "{patch}"
        );
        assert!(patch.contains(&format!("+new file of {name}")), "{patch}");
        assert!(dir.join("evidence/journal").is_dir());
        // Native state hashed, logs whole, sealed; the rest cleaned up.
        let h = r.native_state.as_ref().unwrap();
        assert!(h.complete && h.total_files == 2, "{h:?}");
        assert!(r.logs.as_ref().unwrap().ok);
        assert_eq!(r.cleaned.as_ref().unwrap().state_class, "sealed");
        for gone in [&d.checkout, &d.runtime, &d.cache] {
            assert!(!gone.exists(), "{} still exists", gone.display());
        }
        let w = status_worker(sd, "p", name);
        assert_eq!(w["publication"]["outcome"], "published", "{w}");
        assert_eq!(w["publication"]["dir"], p.dir.as_str());
        assert_eq!(w["state_class"], "sealed");
        assert_eq!(w["preflight"], "passed");
        assert_eq!(w["worker_journal"]["status"], "clean");
        let roles: Vec<_> = w["assets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (a["role"].clone(), a["sha256"].clone()))
            .collect();
        assert_eq!(
            roles,
            [
                (Value::from("source"), src["sha256"].clone()),
                (Value::from("image"), img["sha256"].clone())
            ]
        );
    }
    assert_ne!(
        published(&r1).dir,
        published(&r2).dir,
        "one publication per worker"
    );
    // The shared assets are untouched.
    let v = dispatch(sd, &["asset", "verify", "--json"]);
    assert_eq!(v.code, 0, "{}", v.stdout);
    // Damage w2's journal (one payload byte: its frame CRC no longer holds) before reconcile:
    // it is reported, and nothing of it is trusted.
    let segment = d2.evidence.join("journal/segment-00000001.djl");
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&segment, bytes).unwrap();
    // Reconcile ingests w1's journal, reports w2's, and releases both workers (their steps
    // are proven over by Slurm, not by their journals).
    let rec = ok(dispatch(sd, &["reconcile", "--json"]), "reconcile");
    assert_eq!(rec["resolved"].as_array().unwrap().len(), 2, "{rec}");
    let dump = dispatch(sd, &["journal", "dump", "--json"]);
    let kinds: Vec<Value> = dump.stdout.lines().map(json).collect();
    let of = |kind: &str| -> Vec<&Value> { kinds.iter().filter(|e| e["kind"] == kind).collect() };
    assert_eq!(of("WorkerReportIngested").len(), 1, "{}", dump.stdout);
    let damaged = of("WorkerJournalDamaged");
    assert_eq!(damaged.len(), 1, "{}", dump.stdout);
    assert_eq!(damaged[0]["event"]["status"], "corrupt");
    assert_eq!(
        of("WorkerExited").len(),
        1,
        "w2's exit was taken from a damaged journal"
    );
    let s1 = status_worker(sd, "p", "w1");
    assert_eq!(s1["state"], "released");
    assert_eq!(s1["publication"]["outcome"], "published");
    let s2 = status_worker(sd, "p", "w2");
    assert_eq!(s2["state"], "released");
    assert_eq!(s2["worker_journal"]["status"], "corrupt", "{s2}");
    assert!(s2["publication"].is_null(), "{s2}");
    assert!(s2["exit_code"].is_null(), "{s2}");
}

/// A payload that ignores SIGTERM, stopped by the early-shutdown deadline: the deadline is
/// the allocation's end minus grace, publication, native-state and cleanup budgets. With a 3
/// minute allocation, a 60 s publication timeout and a 2 s grace it comes about 88 s in.
#[test]
fn a_payload_ignoring_sigterm_is_killed_after_the_grace_and_still_publishes() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let sd = &tmp.path().join("state");
    add_assets(sd, tmp.path());
    let alloc = Allocation::salloc(
        &support::unique_name("node-deadline"),
        &["-c", "1", "--mem", "500M", "--time", "3"],
    );
    attach(sd, "p", &alloc);
    let script = r#"
trap '' TERM
echo "stubborn" >> README
printf '{"tick":0}\n' > "$DISPATCH_STATE_DIR/rollout.jsonl"
while :; do sleep 1; done
"#;
    let w = submit(
        sd,
        "p",
        "stubborn",
        &[
            "--source",
            "src",
            "--grace",
            "2",
            "--publication-timeout",
            "60",
        ],
        &[],
        script,
        &[],
    );
    let d = dirs_of(sd, "p", &w);
    let r = finished(&d, Duration::from_secs(150));
    let sigs: Vec<_> = r
        .signals
        .iter()
        .map(|s| (s.signal.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(sigs, [("TERM", "deadline"), ("KILL", "grace")]);
    let exited = r.exited.as_ref().unwrap();
    assert_eq!((exited.signal, exited.interrupted), (Some(9), true));
    let p = published(&r);
    assert!(p.took_ms < 60_000, "{p:?}");
    publish::verify_published(Path::new(&p.dir)).unwrap_or_else(|d| panic!("{d:?}"));
    let patch = std::fs::read_to_string(Path::new(&p.dir).join("workspace.patch")).unwrap();
    assert!(patch.contains("+stubborn"), "{patch}");
    // Interrupted at the deadline: its native state is crash-class partial state, kept.
    assert_eq!(
        r.cleaned.as_ref().unwrap().state_class,
        "crash_class_partial"
    );
    assert!(d.state.join("rollout.jsonl").exists());
    // All of it before the allocation's end, which is untouched.
    assert_eq!(real_cluster::job_state(alloc.id), "RUNNING");
    let w = status_worker(sd, "p", "stubborn");
    assert_eq!(w["publication"]["outcome"], "published");
    assert_eq!(w["state_class"], "crash_class_partial");
}

/// A publication that cannot finish in time: every file copy is slowed (the
/// `supervisor-publish-copy` failpoint sleeps 1.5 s, as a slow filesystem would) under a 1 s
/// publication timeout.
#[test]
fn a_publication_that_overruns_is_timed_out_and_leaves_nothing_half_published() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let sd = &tmp.path().join("state");
    add_assets(sd, tmp.path());
    let alloc = Allocation::salloc(
        &support::unique_name("node-overrun"),
        &["-c", "1", "--mem", "500M", "--time", "5"],
    );
    attach(sd, "p", &alloc);
    let w = submit(
        sd,
        "p",
        "slow",
        &["--source", "src", "--publication-timeout", "1"],
        &[(
            "DISPATCH_FAILPOINTS",
            "worker:supervisor-publish-copy=sleep:1500",
        )],
        "echo 'work' >> README; echo 'state' > \"$DISPATCH_STATE_DIR/db\"",
        &[],
    );
    let d = dirs_of(sd, "p", &w);
    let r = finished(&d, Duration::from_secs(60));
    assert!(r.exited.as_ref().is_some_and(|e| e.code == Some(0)));
    let t = match &r.publication {
        Some(Publication::TimedOut(t)) => t,
        other => panic!("not timed out: {other:?}"),
    };
    assert_eq!(t.timeout_s, 1);
    assert!(t.temp_removed, "{t:?}");
    assert!(t.took_ms < 4_000, "stopped late: {t:?}");
    // Nothing half-published: neither the final directory nor a temporary one.
    let published = sd.join("pools/p/published");
    let left: Vec<_> = std::fs::read_dir(&published)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The checkout is the only copy of the work now: cleanup keeps it.
    let c = r.cleaned.as_ref().unwrap();
    assert!(c.kept.contains(&"checkout".to_owned()), "{c:?}");
    assert!(d.checkout.join("README").exists());
    assert!(!d.runtime.exists() && !d.cache.exists());
    let w = status_worker(sd, "p", "slow");
    assert_eq!(w["publication"]["outcome"], "timed_out", "{w}");
}

#[test]
fn an_interrupted_worker_keeps_crash_class_state_and_a_clean_one_is_cleaned_up() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let sd = &tmp.path().join("state");
    let (src, _, _) = add_assets(sd, tmp.path());
    let alloc = Allocation::salloc(
        &support::unique_name("node-cleanup"),
        &["-c", "2", "--mem", "1G", "--time", "10"],
    );
    attach(sd, "p", &alloc);
    let go = tmp.path().join("go");
    let go = go.to_str().unwrap();
    let clean = submit(
        sd,
        "p",
        "clean",
        &["--source", "src"],
        &[],
        WORK_THEN_WAIT,
        &[go, "clean"],
    );
    // Never given its go: it is stopped while it works.
    let never = tmp.path().join("never");
    let victim = submit(
        sd,
        "p",
        "victim",
        &["--source", "src"],
        &[],
        WORK_THEN_WAIT,
        &[never.to_str().unwrap(), "victim"],
    );
    let (dc, dv) = (dirs_of(sd, "p", &clean), dirs_of(sd, "p", &victim));
    for d in [&dc, &dv] {
        wait_for("both payloads at work", Duration::from_secs(60), || {
            d.runtime.join("ready").exists()
        });
    }
    let stopped = ok(
        dispatch(
            sd,
            &[
                "pool",
                "stop-worker",
                "p",
                "victim",
                "--grace",
                "30",
                "--json",
            ],
        ),
        "stop-worker",
    );
    assert_eq!(stopped["state"], "released", "{stopped}");
    let rv = finished(&dv, Duration::from_secs(10));
    assert_eq!(rv.finished.as_ref().unwrap().outcome, "interrupted");
    // 22.05 (proctrack/cgroup here) signals the step's supervisor, which forwards TERM to the
    // payload's group; 24.11 here (proctrack/linuxproc) signals every process of the step, so
    // the payload may die of the TERM before the supervisor forwards it. Either way the
    // payload was interrupted, and that is what the state class rests on.
    if let Some(first) = rv.signals.first() {
        assert_eq!(first.reason, "forwarded", "{:?}", rv.signals);
    }
    assert!(rv.exited.as_ref().unwrap().interrupted);
    // Crash-class partial state: kept as it was (writable, same bytes), recorded as such.
    let cv = rv.cleaned.as_ref().unwrap();
    assert_eq!(cv.state_class, "crash_class_partial");
    assert!(cv.kept.contains(&"state".to_owned()));
    assert_eq!(
        std::fs::read_to_string(dv.state.join("db.sqlite")).unwrap(),
        "db of victim\n"
    );
    let mode = std::fs::metadata(dv.state.join("db.sqlite"))
        .unwrap()
        .permissions()
        .mode();
    assert_ne!(mode & 0o200, 0, "crash-class state was sealed");
    let marker = std::fs::read_to_string(dv.root.join(cleanup::STATE_CLASS_FILE)).unwrap();
    assert!(marker.starts_with("crash_class_partial\n"), "{marker}");
    assert_eq!(
        status_worker(sd, "p", "victim")["state_class"],
        "crash_class_partial"
    );
    // Its work was still published; its runtime, cache and checkout are gone.
    publish::verify_published(Path::new(&published(&rv).dir)).unwrap_or_else(|d| panic!("{d:?}"));
    for gone in [&dv.checkout, &dv.runtime, &dv.cache] {
        assert!(!gone.exists(), "{} still exists", gone.display());
    }

    // The sibling and the allocation are untouched.
    assert!(squeue_steps(alloc.id).contains(&"p.clean".to_owned()));
    assert_eq!(real_cluster::job_state(alloc.id), "RUNNING");
    assert!(dc.runtime.join("ready").exists() && dc.cache.join("cached").exists());
    assert_eq!(
        std::fs::read_to_string(dc.state.join("db.sqlite")).unwrap(),
        "db of clean\n"
    );
    assert_eq!(
        git(&dc.checkout, &["log", "-1", "--format=%s"]),
        "work of clean"
    );

    std::fs::write(go, "").unwrap();
    let rc = finished(&dc, Duration::from_secs(60));
    assert_eq!(rc.finished.as_ref().unwrap().outcome, "completed");
    let cc = rc.cleaned.as_ref().unwrap();
    assert_eq!(cc.state_class, "sealed");
    assert!(cc.errors.is_empty(), "{cc:?}");
    // A clean worker's directories are gone after cleanup; its native state is sealed, and
    // matches the hashes its supervisor recorded.
    for gone in [&dc.checkout, &dc.runtime, &dc.cache] {
        assert!(!gone.exists(), "{} still exists", gone.display());
    }
    let hashed = rc.native_state.as_ref().unwrap();
    assert_eq!(hashed.total_files, 2);
    for f in &hashed.files {
        let p = dc.state.join(&f.path);
        assert_eq!(sha256_hex(&p), hex::encode(f.sha256.0), "{}", f.path);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o222, 0, "{} is not sealed", f.path);
    }
    // Neither cleanup touched the shared assets.
    let v = dispatch(sd, &["asset", "verify", "--json"]);
    assert_eq!(v.code, 0, "{}", v.stdout);
    assert!(Path::new(src["file"].as_str().unwrap()).exists());
    assert_eq!(real_cluster::job_state(alloc.id), "RUNNING");
}

#[test]
fn tampering_with_an_asset_makes_the_receiving_check_refuse_before_the_payload_starts() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let sd = &tmp.path().join("state");
    let (src, img, _) = add_assets(sd, tmp.path());
    // Flip one byte of each stored asset, in place: same size, other content.
    for a in [&src, &img] {
        let f = Path::new(a["file"].as_str().unwrap());
        let mut bytes = std::fs::read(f).unwrap();
        let at = bytes.len() - 10;
        bytes[at] ^= 0xff;
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(f, bytes).unwrap();
    }
    let alloc = Allocation::salloc(
        &support::unique_name("node-tamper"),
        &["-c", "2", "--mem", "1G", "--time", "5"],
    );
    attach(sd, "p", &alloc);
    for (name, flag, asset) in [
        ("uses-image", "--image", "img"),
        ("uses-source", "--source", "src"),
    ] {
        let marker = tmp.path().join(format!("{name}-ran"));
        let w = submit(
            sd,
            "p",
            name,
            &[flag, asset],
            &[],
            "touch \"$1\"",
            &[marker.to_str().unwrap()],
        );
        let d = dirs_of(sd, "p", &w);
        let r = finished(&d, Duration::from_secs(60));
        let checked = &r.asset_checks[0];
        assert_eq!(checked.name, asset);
        assert!(!checked.ok);
        assert_ne!(checked.observed, Some(checked.expected));
        assert!(checked.reason.contains("changed"), "{}", checked.reason);
        let refused = r.refused.as_ref().expect("refused");
        assert_eq!(refused.stage, "assets");
        assert!(
            r.payload_pid.is_none() && r.exited.is_none(),
            "the payload ran"
        );
        assert!(
            r.checkout.is_none(),
            "a checkout was made from a tampered asset"
        );
        assert!(!marker.exists(), "the payload ran");
        let f = r.finished.as_ref().unwrap();
        assert_eq!((f.outcome.as_str(), f.exit_code), ("refused", 3));
        let st = status_worker(sd, "p", name);
        assert_eq!(st["preflight"], "refused", "{st}");
        assert!(st["refusal"].as_str().unwrap().contains(asset), "{st}");
        assert_eq!(st["state_class"], "empty");
    }
    // `asset verify` says the same, and exits 1.
    let v = dispatch(sd, &["asset", "verify", "--json"]);
    assert_eq!(v.code, 1, "{}", v.stdout);
    let v = json(&v.stdout);
    assert_eq!(v["ok"], false);
    assert!(v["assets"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["status"] == "mismatch"));
    // A change the coordinator can see without hashing (the size) is refused at submit.
    let f = Path::new(img["file"].as_str().unwrap());
    std::fs::write(f, b"short").unwrap();
    let r = dispatch(
        sd,
        &[
            "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--image", "img", "--", "true",
        ],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("asset verify"), "{}", r.stderr);
}

/// `dispatch submit --source --image`: a worker on the one-job-per-worker path gets what a
/// pool worker gets (verified assets, a private checkout of the pinned commit, the image,
/// publication, sealed native state), and reconcile releases the job once Slurm shows it over.
/// It runs as the one worker of an acceptance trial, which then passes on its evidence; the
/// audit re-checks that evidence offline and reports it once it is changed.
#[test]
fn a_job_worker_gets_its_assets_and_a_private_checkout_and_publishes() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let sd = &tmp.path().join("state");
    let (src, img, repo) = add_assets(sd, tmp.path());
    ok(
        dispatch(sd, &["trial", "open", "accept", "--json"]),
        "trial open",
    );
    let script = r#"
set -e
test "$DISPATCH_IMAGE" = "$1"
echo "job work" >> README
git -c user.name=w -c user.email=w@example.org commit -qam "job work"
printf '{"step":1}\n' > "$DISPATCH_STATE_DIR/rollout.jsonl"
"#;
    let v = ok(
        dispatch(
            sd,
            &[
                "submit",
                "--cpus",
                "1",
                "--mem",
                "200M",
                "--time",
                "5",
                "--name",
                "jw",
                "--source",
                "src",
                "--image",
                "img",
                "--trial",
                "accept",
                "--json",
                "--",
                "sh",
                "-c",
                script,
                "sh",
                img["file"].as_str().unwrap(),
            ],
        ),
        "submit",
    );
    let sid: Uuid = v["submission_id"].as_str().unwrap().parse().unwrap();
    let job = v["job_id"].as_u64().unwrap();
    let dirs = WorkerDirs::for_job(&sd.join("jobs"), sid);
    let r = finished(&dirs, Duration::from_secs(120));
    assert_eq!(r.finished.as_ref().unwrap().outcome, "completed", "{r:?}");
    assert!(r.checks.as_ref().unwrap().ok);
    assert!(r.checkout.as_ref().unwrap().ok);
    assert_eq!(r.asset_checks.len(), 2);
    assert!(r.asset_checks.iter().all(|a| a.ok), "{:?}", r.asset_checks);
    let p = published(&r);
    let dir = PathBuf::from(&p.dir);
    assert_eq!(dir, sd.join("jobs/published").join(format!("jw-{sid}")));
    let manifest = publish::verify_published(&dir).unwrap_or_else(|d| panic!("{d:?}"));
    assert_eq!(manifest.pinned_commit.as_deref(), src["commit"].as_str());
    assert_eq!(p.commits, 1);
    let heads = git(
        &repo,
        &[
            "bundle",
            "list-heads",
            dir.join("workspace.bundle").to_str().unwrap(),
        ],
    );
    assert!(
        heads.contains(manifest.head_commit.as_deref().unwrap()),
        "{heads}"
    );
    assert_eq!(r.cleaned.as_ref().unwrap().state_class, "sealed");
    assert!(
        !dirs.checkout.exists(),
        "the private checkout is left behind"
    );

    // The job ends with its supervisor; reconcile proves it and releases the budget.
    wait_for("the job to leave squeue", Duration::from_secs(60), || {
        real_cluster::job_state(job as u32).is_empty()
    });
    let rec = ok(dispatch(sd, &["reconcile", "--json"]), "reconcile");
    assert_eq!(rec["resolved"][0]["job_id"], job, "{rec}");
    let dump = dispatch(sd, &["journal", "dump", "--json"]);
    let events: Vec<Value> = dump.stdout.lines().map(json).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    let intent = kinds.iter().position(|k| *k == "JobSubmitIntent").unwrap();
    assert_eq!(kinds[intent + 1], "WorkerAssetsBound", "{kinds:?}");
    assert!(kinds.contains(&"JobTerminal"), "{kinds:?}");
    let audit = dispatch(sd, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);

    // The trial passes on that evidence, once; the verdict records the manifest's SHA-256.
    let judged = ok(
        dispatch(
            sd,
            &[
                "trial",
                "verdict",
                "accept",
                "passed",
                "--reason",
                "published",
                "--json",
            ],
        ),
        "verdict",
    );
    let e = &judged["verdict"]["evidence"][0];
    assert_eq!(e["outcome"], "completed", "{judged}");
    assert_eq!(e["state"], "released", "{judged}");
    assert_eq!(e["published_dir"], p.dir.as_str());
    assert_eq!(
        e["manifest_sha256"],
        serde_json::to_value(p.manifest_sha256).unwrap()
    );
    let again = dispatch(
        sd,
        &["trial", "verdict", "accept", "failed", "--reason", "x"],
    );
    assert_eq!(again.code, 3, "{}", again.stderr);
    assert!(
        again.stderr.contains("never relabelled"),
        "{}",
        again.stderr
    );
    let audit = dispatch(sd, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);
    // Evidence changed after the verdict: the audit says which trial rested on it.
    let patch = dir.join("workspace.patch");
    std::fs::set_permissions(&patch, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&patch, "rewritten\n").unwrap();
    let audit = dispatch(sd, &["audit", "--json"]);
    assert_eq!(audit.code, 1, "{}", audit.stdout);
    let report = json(&audit.stdout);
    let failed = report["evidence"]["failed"].as_array().unwrap();
    assert!(
        failed.iter().any(|f| f["dir"]
            .as_str()
            .unwrap()
            .contains("evidence of trial \"accept\"")),
        "{report}"
    );
}

/// The supervisor killed after its asset checks, before the checkout (failpoint
/// `supervisor-before-checkout`, forwarded to the step): no payload ran, the worker's own
/// journal says how far it got, reconcile proves the step over and releases the budget, the
/// coordinator finishes the cleanup the supervisor never did, and nothing is published.
#[test]
fn a_supervisor_killed_before_the_checkout_runs_nothing_and_is_released_by_reconcile() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let sd = &tmp.path().join("state");
    let (_, _, _) = add_assets(sd, tmp.path());
    let alloc = Allocation::salloc(
        &support::unique_name("node-before-checkout"),
        &["-c", "1", "--mem", "1G", "--time", "10"],
    );
    attach(sd, "p", &alloc);
    let w = submit(
        sd,
        "p",
        "early",
        &["--source", "src"],
        &[(
            "DISPATCH_FAILPOINTS",
            "worker:supervisor-before-checkout=abort",
        )],
        "touch \"$DISPATCH_EVIDENCE_DIR/ran\"",
        &[],
    );
    let dirs = dirs_of(sd, "p", &w);
    wait_for("the step to end", Duration::from_secs(60), || {
        !squeue_steps(alloc.id).contains(&"p.early".to_owned())
    });
    let r = report::read(&dirs.evidence)
        .expect("the worker journal reads whole")
        .expect("a worker journal");
    assert!(r.checks.as_ref().is_some_and(|c| c.ok), "{:?}", r.checks);
    assert!(r.payload_pid.is_none(), "a payload started");
    assert!(r.exited.is_none() && r.finished.is_none());
    assert!(!dirs.evidence.join("ran").exists(), "the payload ran");

    let rec = ok(dispatch(sd, &["reconcile", "--json"]), "reconcile");
    assert!(
        rec["resolved"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["worker"] == "early"),
        "{rec}"
    );
    let s = status_worker(sd, "p", "early");
    assert_eq!(s["state"], "released", "{s}");
    // The coordinator's cleanup: runtime and cache gone, nothing published.
    assert!(!dirs.runtime.exists() && !dirs.cache.exists());
    let published = sd.join("pools/p/published");
    let names: Vec<_> = std::fs::read_dir(&published)
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(names.is_empty(), "{names:?}");
    let audit = dispatch(sd, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);
}
