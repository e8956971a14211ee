//! Helpers for tests against the real dev cluster: allocations that are always cancelled, the
//! dispatch binary, and small squeue/sacct readers. Shared by `tests/pool_*.rs`.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Hold the shared real-cluster lock (see `tests/support`) and fail, never skip, when the
/// cluster does not answer. Keep the returned guard for the whole test.
#[must_use]
pub fn require_cluster() -> crate::support::ClusterLock {
    let lock = crate::support::shared_lock();
    let out = Command::new("sinfo").args(["-h", "-o", "%T"]).output();
    match out {
        Ok(o) if o.status.success() && !o.stdout.is_empty() => {}
        Ok(o) => panic!(
            "the Slurm dev cluster does not answer (sinfo: {}); run `tools/slurm-dev-cluster start` first",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!("Slurm is not installed ({e}); run `tools/slurm-dev-cluster start` first"),
    }
    lock
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

fn run(out: Output) -> Run {
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn dispatch_cmd(state_dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.arg("--state-dir").arg(state_dir).args(args);
    c.env_remove("DISPATCH_FAILPOINTS");
    c
}

pub fn dispatch(state_dir: &Path, args: &[&str]) -> Run {
    run(dispatch_cmd(state_dir, args)
        .output()
        .expect("run dispatch"))
}

pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {text:?}"))
}

/// An allocation made with `salloc --no-shell`, cancelled when dropped (even on panic).
pub struct Allocation {
    pub id: u32,
}

impl Allocation {
    pub fn salloc(name: &str, args: &[&str]) -> Allocation {
        Self::salloc_as("root", name, args)
    }

    pub fn salloc_as(user: &str, name: &str, args: &[&str]) -> Allocation {
        let mut c = if user == "root" {
            Command::new("salloc")
        } else {
            let mut c = Command::new("runuser");
            c.args(["-u", user, "--", "salloc"]);
            c
        };
        c.args(["--no-shell", "--immediate=30", "-J", name])
            .args(args);
        let out = run(c.output().expect("run salloc"));
        let id = out
            .stderr
            .lines()
            .find_map(|l| l.strip_prefix("salloc: Granted job allocation "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("salloc failed: {}", out.stderr));
        Allocation { id }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(self.id.to_string()).status();
    }
}

/// Names of the running steps of `job`.
pub fn squeue_steps(job: u32) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["--steps", "-h", "-o", "%i|%j", "-j", &job.to_string()])
        .output()
        .expect("squeue");
    assert!(
        out.status.success(),
        "squeue --steps failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('|').map(|(_, n)| n.trim().to_owned()))
        .collect()
}

pub fn job_state(job: u32) -> String {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%T", "-j", &job.to_string()])
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A user other than root that exists and can run jobs (created once).
pub fn other_user() -> String {
    let name = "dispatchalice";
    let exists = Command::new("id")
        .arg(name)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !exists {
        let st = Command::new("useradd")
            .args(["-m", name])
            .status()
            .expect("useradd");
        assert!(st.success() || Command::new("id").arg(name).status().unwrap().success());
    }
    name.to_owned()
}

/// Submit a batch job and wait until it has finished.
pub fn sbatch_and_wait(name: &str, wrap: &str) -> u32 {
    let out = run(Command::new("sbatch")
        .args(["--parsable", "-J", name, "-o", "/dev/null", "--wrap", wrap])
        .output()
        .expect("sbatch"));
    assert_eq!(out.code, 0, "sbatch: {}", out.stderr);
    let id: u32 = out
        .stdout
        .trim()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(
        job_state(id).as_str(),
        "" | "COMPLETED" | "FAILED" | "CANCELLED"
    ) {
        assert!(Instant::now() < deadline, "job {id} did not finish");
        std::thread::sleep(Duration::from_millis(200));
    }
    id
}
