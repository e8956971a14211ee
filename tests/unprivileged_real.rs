//! Issue 21 item 12: every other test runs dispatch as root, and no user is root. Here the
//! whole daily flow runs as `dispatchuser`, the unprivileged user `tools/slurm-dev-cluster`
//! makes with an association of its own: the binary copied to `~/bin`, nothing of root's
//! environment, the default state directory (`~/.local/state/dispatch`) and config
//! (`~/.config/dispatch/config.toml`). A permission only root has (a file it may write, a
//! Slurm field only an operator may set) fails here.
//!
//! The two Slurm versions' runs share the user's home, so they take turns (a lock file).

mod real_cluster;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use real_cluster::{json, require_cluster, Allocation, Run};
use serde_json::Value;

const USER: &str = "dispatchuser";
const HOME: &str = "/home/dispatchuser";

/// The directory of the `sbatch` this test's PATH finds: 22.05's or 24.11's clients.
fn slurm_bin_dir() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|d| d.join("sbatch").is_file())
        .expect("no sbatch on PATH: start a dev cluster (tools/slurm-dev-cluster start)")
}

/// dispatch as the user, from `~/bin`, with only the environment a login shell would give.
fn as_user(args: &[&str]) -> Run {
    let path = format!("{HOME}/bin:{}:/usr/bin:/bin", slurm_bin_dir().display());
    let out = Command::new("runuser")
        .args(["-u", USER, "--", "env", "-i"])
        .args([
            format!("HOME={HOME}"),
            format!("USER={USER}"),
            format!("LOGNAME={USER}"),
            format!("PATH={path}"),
        ])
        .arg("dispatch")
        .args(args)
        .current_dir(HOME)
        .output()
        .expect("runuser");
    real_cluster::run(out)
}

/// `chown -R USER: path`.
fn give(path: &Path) {
    let st = Command::new("chown")
        .args(["-R", &format!("{USER}:"), path.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success(), "chown {}", path.display());
}

/// A fresh home: no state, config or cache of an earlier run; this build in `~/bin`; a config
/// with one confined target under `prefix`.
fn fresh_home(prefix: &str) {
    let home = Path::new(HOME);
    assert!(
        home.is_dir(),
        "{HOME} is missing: tools/slurm-dev-cluster start makes {USER}"
    );
    for d in [
        ".local/state/dispatch",
        ".config/dispatch",
        ".cache/dispatch",
        "bin",
    ] {
        let _ = std::fs::remove_dir_all(home.join(d));
    }
    std::fs::create_dir_all(home.join("bin")).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_dispatch"), home.join("bin/dispatch")).unwrap();
    let config = home.join(".config/dispatch");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        format!(
            "job_name_prefix = \"{prefix}\"\n\n[targets.t]\npartition = \"debug\"\n\
             account = \"dev\"\ntime = \"00:10:00\"\nmem = \"100M\"\nconfined = true\n"
        ),
    )
    .unwrap();
    for d in ["bin", ".config", ".local", ".cache"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
        give(&home.join(d));
    }
}

/// The user's jobs whose name starts with `prefix` are cancelled when dropped.
struct CancelOnDrop(String);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let out = Command::new("squeue")
            .args(["-h", "-u", USER, "-o", "%i %j"])
            .output();
        for line in out
            .map(|o| o.stdout)
            .unwrap_or_default()
            .split(|b| *b == b'\n')
        {
            let line = String::from_utf8_lossy(line);
            if let Some((id, name)) = line.trim().split_once(' ') {
                if name.starts_with(&self.0) {
                    let _ = Command::new("scancel").arg(id).status();
                }
            }
        }
    }
}

fn ok(r: &Run, what: &str) -> Value {
    assert_eq!(r.code, 0, "{what} as {USER}: {}\n{}", r.stderr, r.stdout);
    json(r.stdout.trim())
}

#[test]
fn the_daily_flow_works_as_an_unprivileged_user() {
    let _cluster = require_cluster();
    let turn = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/dispatch-unprivileged-test.lock")
        .unwrap();
    turn.lock().unwrap();
    let prefix = format!("du{}-", std::process::id());
    let _cancel = CancelOnDrop(prefix.clone());
    fresh_home(&prefix);

    let doctor = as_user(&["--json", "doctor"]);
    let d = ok(&doctor, "doctor");
    assert_eq!(d["ready"], true, "{d}");

    // A pool dispatch creates: its allocation, a worker step, the worker's own output.
    let created = as_user(&[
        "--json", "pool", "create", "p", "--cpus", "2", "--mem", "1G", "--time", "10:00", "--wait",
        "120",
    ]);
    let c = ok(&created, "pool create");
    assert_eq!(c["allocation"]["user"], USER, "{c}");
    let submitted = as_user(&[
        "--json",
        "pool",
        "submit",
        "p",
        "--cpus",
        "1",
        "--mem",
        "100M",
        "--name",
        "w",
        "--",
        "sh",
        "-c",
        "echo hello-from-$(id -un)",
    ]);
    ok(&submitted, "pool submit");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        ok(&as_user(&["--json", "reconcile"]), "reconcile");
        let st = ok(&as_user(&["--json", "pool", "status", "p"]), "pool status");
        let state = st["pools"][0]["workers"][0]["state"].clone();
        if state == "released" {
            break;
        }
        assert!(Instant::now() < deadline, "the worker did not end: {st}");
        std::thread::sleep(Duration::from_secs(1));
    }
    let logs = as_user(&["logs", "w"]);
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    assert!(
        logs.stdout.contains(&format!("hello-from-{USER}")),
        "{}",
        logs.stdout
    );
    ok(
        &as_user(&["--json", "pool", "release", "p"]),
        "pool release",
    );

    // An allocation the user made and attaches: marking its comment is the owner's right.
    let alloc = Allocation::salloc_as(
        USER,
        &format!("{prefix}own"),
        &["-c", "1", "--mem", "100M", "--time", "5"],
    );
    let attached = as_user(&[
        "--json",
        "pool",
        "attach",
        "q",
        "--job",
        &alloc.id.to_string(),
    ]);
    let a = ok(&attached, "pool attach");
    assert!(
        real_cluster::job_comment(alloc.id).contains(a["mark"].as_str().unwrap()),
        "{a}"
    );
    let detached = as_user(&["--json", "pool", "detach", "q"]);
    assert_eq!(ok(&detached, "pool detach")["unmarked"], true);

    // A session: launched as a confined job, released.
    let launched = as_user(&["--json", "session", "launch", "m", "-T", "t", "--detached"]);
    let l = ok(&launched, "session launch");
    assert_eq!(l["action"], "submitted", "{l}");
    let released = as_user(&["--json", "session", "release", "m", "-T", "t", "--force"]);
    ok(&released, "session release");

    let audit = as_user(&["--json", "audit"]);
    assert_eq!(ok(&audit, "audit")["status"], "ok");
    // Everything went where a user's dispatch puts it, owned by the user.
    let state = Path::new(HOME).join(".local/state/dispatch");
    let owner = Command::new("stat")
        .args(["-c", "%U", state.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&owner.stdout).trim(), USER);
}
