//! Definite refusals and unlimited jobs against the real dev cluster
//! (`tools/slurm-dev-cluster start`). Never skipped. Every job a test may create carries its
//! prefix (test name and pid) and is cancelled by id when the test ends.

mod real_cluster;
mod support;

use std::path::PathBuf;
use std::process::Command;

use real_cluster::{json, require_cluster, Run};
use serde_json::Value;

struct Cluster {
    _lock: support::ClusterLock,
    tmp: tempfile::TempDir,
    prefix: String,
}

impl Cluster {
    fn new(test: &str) -> Cluster {
        Cluster {
            _lock: require_cluster(),
            tmp: tempfile::tempdir().unwrap(),
            prefix: format!("dt-{test}-{}-", std::process::id()),
        }
    }

    fn config(&self, targets: &str) {
        std::fs::write(
            self.config_path(),
            format!("job_name_prefix = \"{}\"\n{targets}", self.prefix),
        )
        .unwrap();
    }

    fn config_path(&self) -> PathBuf {
        self.tmp.path().join("config.toml")
    }

    fn run(&self, args: &[&str]) -> Run {
        let config = self.config_path();
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        let mut c = real_cluster::dispatch_cmd(&self.tmp.path().join("state"), &all);
        c.env("XDG_CACHE_HOME", self.tmp.path().join("cache"));
        let out = c.output().expect("run dispatch");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Ids of this test's live jobs named exactly `name`.
    /// Live jobs of a `dispatch submit` worker: named `<prefix><worker>-<8 hex>`.
    fn jobs_of_worker(&self, worker: &str) -> Vec<String> {
        let out = Command::new("squeue")
            .args(["--me", "-h", "-o", "%A|%T|%j"])
            .output()
            .expect("squeue");
        assert!(out.status.success());
        let name = format!("{}{worker}-", self.prefix);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.splitn(3, '|').collect();
                (f.len() == 3 && f[1] != "COMPLETING" && f[2].starts_with(&name))
                    .then(|| f[0].to_owned())
            })
            .collect()
    }

    fn jobs(&self, name: &str) -> Vec<String> {
        let out = Command::new("squeue")
            .args(["--me", "-h", "-o", "%A|%T", &format!("--name={name}")])
            .output()
            .expect("squeue");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.ends_with("|COMPLETING"))
            .map(|l| l.split('|').next().unwrap().to_owned())
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        real_cluster::cancel_jobs_named(&self.prefix);
    }
}

const SUBMIT_TARGETS: &str = r#"
[targets.bad]
partition = "nope"
account = "dev"

[targets.ok]
partition = "debug"
account = "dev"
"#;

/// Item 1: `dispatch submit` with a partition the controller does not know, and with memory no
/// node has: exit 1 quoting Slurm, no budget held (reconcile finds nothing unknown), no job
/// created, and the same worker name accepted again.
#[test]
fn submit_refused_by_the_controller_is_a_failure_and_frees_the_name() {
    let c = Cluster::new("refused-submit");
    c.config(SUBMIT_TARGETS);
    let worker = format!("{}w", c.prefix);
    let submit = |target: &str, mem: &str| {
        c.run(&[
            "submit", "-T", target, "--cpus", "1", "--mem", mem, "--time", "10", "--name", &worker,
            "--", "sleep", "300",
        ])
    };
    for (target, mem, phrase) in [
        ("bad", "100M", "Invalid partition name specified"),
        ("ok", "999999G", "Memory specification can not be satisfied"),
    ] {
        let r = submit(target, mem);
        assert_eq!(r.code, 1, "{phrase}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("{phrase:?}")),
            "Slurm's words not quoted: {}",
            r.stderr
        );
        assert!(
            c.jobs_of_worker(&worker).is_empty(),
            "a refused submission created a job"
        );
        let r = c.run(&["reconcile", "--json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let rec: Value = json(&r.stdout);
        assert_eq!(rec["unknown"], serde_json::json!([]), "{rec}");
        let r = c.run(&["stop", &worker]);
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert!(r.stderr.contains("failed at submission"), "{}", r.stderr);
    }
    let r = submit("ok", "100M");
    assert_eq!(r.code, 0, "the name is not free again: {}", r.stderr);
    assert_eq!(c.jobs_of_worker(&worker).len(), 1);
    let r = c.run(&["stop", &worker, "--grace", "0"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

const SESSION_TARGETS: &str = r#"
[targets.badb]
partition = "nope"
account = "dev"
time = "00:10:00"
mem = "100M"
confined = true

[targets.bada]
partition = "DEBUG"
account = "dev"
time = "00:10:00"
mem = "100M"
confined = false

[targets.memb]
partition = "debug"
account = "dev"
time = "00:10:00"
mem = "999999G"
confined = true

[targets.mema]
partition = "debug"
account = "other"
time = "00:10:00"
mem = "999999G"
confined = false
"#;

/// Item 1: `session launch` refused by sbatch and by salloc: exit 1 quoting Slurm, nothing
/// recorded as possibly existing, no job; once the target is right, the next launch submits.
#[test]
fn session_launch_refused_by_the_controller_is_a_failure() {
    let c = Cluster::new("refused-launch");
    c.config(SESSION_TARGETS);
    for (target, phrase) in [
        ("badb", "Invalid partition name specified"),
        ("bada", "Invalid partition name specified"),
        // Every launch asks `sbatch --test-only` first (a held job that can never run is
        // accepted, by sbatch and salloc alike: BadConstraints for ever), whose verdict is the
        // controller's second line.
        ("memb", "Requested node configuration is not available"),
        ("mema", "Requested node configuration is not available"),
    ] {
        let r = c.run(&["session", "launch", "m", "-T", target, "--detached"]);
        assert_eq!(r.code, 1, "{target}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("{phrase:?}")),
            "{target}: {}",
            r.stderr
        );
    }
    assert!(c.jobs(&format!("{}m", c.prefix)).is_empty());
    let r = c.run(&["--json", "sessions"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        json(&r.stdout)["unknown"],
        serde_json::json!([]),
        "{}",
        r.stdout
    );
    // The same session, its target corrected: submitted at once.
    // batch, not debug: debug/dev with no QOS is memb's, and two such targets are refused.
    c.config(&SESSION_TARGETS.replace("\"nope\"", "\"batch\""));
    let r = c.run(&[
        "--json",
        "session",
        "launch",
        "m",
        "-T",
        "badb",
        "--detached",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json(&r.stdout)["action"], "submitted");
    let r = c.run(&["session", "release", "m", "-T", "badb", "--force"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// Item 13: a target with `time = "UNLIMITED"` (the dev partitions' MaxTime is UNLIMITED):
/// squeue prints the job's end as `NONE`; the launch waits for it, the next launch reuses it,
/// and with the state lost one adopts it. Exactly one job throughout.
#[test]
fn an_unlimited_session_is_reused_and_adopted_never_doubled() {
    let c = Cluster::new("unlimited");
    c.config(
        r#"
[targets.inf]
partition = "debug"
account = "dev"
time = "UNLIMITED"
mem = "100M"
confined = true
"#,
    );
    let name = format!("{}m", c.prefix);
    let launch = || {
        let r = c.run(&[
            "--json",
            "session",
            "launch",
            "m",
            "-T",
            "inf",
            "--detached",
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        json(&r.stdout)
    };
    let first = launch();
    assert_eq!(first["action"], "submitted", "{first}");
    assert_eq!(first["state"], "RUNNING", "{first}");
    let squeue = Command::new("squeue")
        .args(["-h", "-o", "%l|%e", &format!("--name={name}")])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&squeue.stdout).trim(),
        "UNLIMITED|NONE"
    );
    assert_eq!(launch()["action"], "reused");
    std::fs::remove_dir_all(c.tmp.path().join("state")).unwrap();
    let adopted = launch();
    assert_eq!(adopted["action"], "adopted", "{adopted}");
    assert_eq!(adopted["job_id"], first["job_id"]);
    assert_eq!(c.jobs(&name).len(), 1, "a second job was submitted");
    let r = c.run(&["session", "release", "m", "-T", "inf", "--force"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}
