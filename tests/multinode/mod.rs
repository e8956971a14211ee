//! The multi-node dev cluster (`tools/slurm-dev-cluster [--slurm V] start --nodes 3`): where
//! it is, its client commands, its lock, and small readers of what Slurm says about its nodes.
//! The Slurm release is the one under test (`support::cluster_version`: what `scontrol` on
//! `PATH` says), so the suite against 24.11 uses the 24.11 multi-node cluster.
//!
//! Never skipped: without the cluster every test fails, saying what to start.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::{cluster_script, cluster_version};

/// The node count the tests use.
pub const NODES: u32 = 3;

/// What `tools/slurm-dev-cluster --nodes 3 env` says, checked to answer.
pub struct Cluster {
    pub env: BTreeMap<String, String>,
    pub nodes: Vec<String>,
    pub cpus: u32,
    pub mem_mb: u32,
    pub gpus: u32,
    pub slurmd_timeout: u64,
    /// Slurm's `MessageTimeout` there: how long a ping of a dead node may take to fail.
    pub msg_timeout: u64,
    _lock: File,
}

/// `tools/slurm-dev-cluster --slurm V --nodes 3 ARGS…`
pub fn script(args: &[&str]) -> Command {
    let mut c = Command::new(cluster_script());
    c.args(["--slurm", &cluster_version(), "--nodes", &NODES.to_string()]);
    c.args(args);
    c
}

pub fn start_command() -> String {
    format!(
        "tools/slurm-dev-cluster --slurm {} start --nodes {NODES}",
        cluster_version()
    )
}

/// Runs `cmd` (stdin closed), killed after `bound`: its output, or a panic saying what hung.
pub fn output(mut cmd: Command, bound: Duration) -> Output {
    let what = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(bound) {
        Ok(out) => out.unwrap_or_else(|e| panic!("{what}: {e}")),
        Err(_) => {
            // SAFETY: kill(2) on the pid of our own child, which has not been reaped (the
            // waiting thread still waits for it).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{what} did not finish within {bound:?}");
        }
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Cluster {
    /// The cluster, with this test holding its lock exclusively (the tests fail nodes and
    /// take every GPU). Fails when the cluster is not there or not every node is usable.
    #[must_use]
    pub fn require() -> Cluster {
        let out = output(script(&["env"]), Duration::from_secs(30));
        assert!(
            out.status.success(),
            "{:?} failed: {}; run `{}` (as root)",
            script(&["env"]),
            text(&out.stderr),
            start_command()
        );
        let env: BTreeMap<String, String> = text(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let get = |k: &str| {
            env.get(k)
                .unwrap_or_else(|| panic!("`env` printed no {k}: {env:?}"))
                .clone()
        };
        let num = |k: &str| get(k).parse::<u64>().unwrap_or_else(|e| panic!("{k}: {e}"));
        let lock = lock_exclusive(&get("SLURM_DEV_MULTI_LOCK"));
        let c = Cluster {
            nodes: get("SLURM_DEV_MULTI_NODES")
                .split(',')
                .map(str::to_owned)
                .collect(),
            cpus: num("SLURM_DEV_MULTI_CPUS") as u32,
            mem_mb: num("SLURM_DEV_MULTI_MEM_MB") as u32,
            gpus: num("SLURM_DEV_MULTI_GPUS") as u32,
            slurmd_timeout: num("SLURM_DEV_MULTI_SLURMD_TIMEOUT"),
            msg_timeout: num("SLURM_DEV_MULTI_MSG_TIMEOUT"),
            env,
            _lock: lock,
        };
        c.require_usable();
        c
    }

    /// Every node usable; a node still `completing` an earlier test's job (seconds, longer
    /// under load), or still `planned` for one, is waited for, at most a minute.
    fn require_usable(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = output(
                self.slurm("sinfo", &["-h", "-N", "-p", "debug", "-o", "%N|%T"]),
                Duration::from_secs(30),
            );
            let listing = text(&out.stdout);
            let states: BTreeMap<&str, &str> =
                listing.lines().filter_map(|l| l.split_once('|')).collect();
            let state = |n: &String| states.get(n.as_str()).copied().unwrap_or("missing");
            let usable = self
                .nodes
                .iter()
                .all(|n| matches!(state(n), "idle" | "mixed" | "allocated"));
            if out.status.success() && usable {
                return;
            }
            // `planned`: backfill kept the node for a job that is gone now (the preemption
            // test's `high` job); the next scheduling pass frees it.
            let settling = self
                .nodes
                .iter()
                .any(|n| matches!(state(n), "completing" | "planned"));
            assert!(
                settling && Instant::now() < deadline,
                "the {NODES}-node Slurm {} dev cluster is not there or not every node is usable \
                 (sinfo: {} {}); run `{}` (as root)",
                cluster_version(),
                listing.trim(),
                text(&out.stderr).trim(),
                start_command()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// A client command of this cluster (its wrapper first on PATH, its SLURM_CONF).
    pub fn slurm(&self, prog: &str, args: &[&str]) -> Command {
        let mut c = self.command(format!("{}/{prog}", self.env["SLURM_DEV_MULTI_BIN"]));
        c.args(args);
        c
    }

    /// `program` as a client of this cluster: its client commands first on PATH, its
    /// SLURM_CONF.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let bin = &self.env["SLURM_DEV_MULTI_BIN"];
        let path = format!("{bin}:{}", std::env::var("PATH").unwrap_or_default());
        let mut c = Command::new(program);
        c.env("PATH", path)
            .env("SLURM_CONF", &self.env["SLURM_CONF"]);
        c
    }

    /// `dispatch --state-dir STATE` as a client of this cluster.
    pub fn dispatch(&self, state: &std::path::Path) -> Command {
        let mut c = self.command(env!("CARGO_BIN_EXE_dispatch"));
        c.arg("--state-dir").arg(state);
        c
    }

    /// `scontrol show node -o NODE`'s `State=` (e.g. `IDLE`, `IDLE+NOT_RESPONDING`).
    pub fn node_state(&self, node: &str) -> String {
        let out = output(
            self.slurm("scontrol", &["show", "node", "-o", node]),
            Duration::from_secs(30),
        );
        text(&out.stdout)
            .split_whitespace()
            .find_map(|w| w.strip_prefix("State="))
            .unwrap_or_else(|| panic!("no State= for {node}: {}", text(&out.stderr)))
            .to_owned()
    }

    /// `salloc --no-shell ARGS…`, cancelled when dropped.
    pub fn salloc(&self, name: &str, args: &[&str]) -> Job<'_> {
        let mut a = vec!["--no-shell", "--immediate=30", "-t", "5", "-J", name];
        a.extend_from_slice(args);
        let out = output(self.slurm("salloc", &a), Duration::from_secs(60));
        let err = text(&out.stderr);
        let id = err
            .lines()
            .find_map(|l| l.strip_prefix("salloc: Granted job allocation "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("salloc {args:?} was not granted: {err}"));
        Job { cluster: self, id }
    }
}

fn lock_exclusive(path: &str) -> File {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(600);
    while file.try_lock().is_err() {
        assert!(Instant::now() < deadline, "could not lock {path} in 600 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    file
}

/// A job of the cluster, cancelled when dropped (also when the test panics).
pub struct Job<'a> {
    pub cluster: &'a Cluster,
    pub id: u32,
}

impl Job<'_> {
    /// `scontrol -d show job`'s per-node lines, by node: (`CPU_IDs`, `Mem`, `GRES`).
    pub fn placement(&self) -> BTreeMap<String, (String, String, String)> {
        let out = output(
            self.cluster
                .slurm("scontrol", &["-d", "show", "job", &self.id.to_string()]),
            Duration::from_secs(30),
        );
        let mut by_node = BTreeMap::new();
        for line in text(&out.stdout).lines() {
            let fields: BTreeMap<&str, &str> = line
                .split_whitespace()
                .filter_map(|w| w.split_once('='))
                .collect();
            let (Some(nodes), Some(cpus)) = (fields.get("Nodes"), fields.get("CPU_IDs")) else {
                continue;
            };
            let mem = fields.get("Mem").unwrap_or(&"").to_string();
            let gres = fields.get("GRES").unwrap_or(&"").to_string();
            for n in expand_hostlist(nodes) {
                by_node.insert(n, (cpus.to_string(), mem.clone(), gres.clone()));
            }
        }
        by_node
    }
}

impl Drop for Job<'_> {
    fn drop(&mut self) {
        let mut c = self.cluster.slurm("scancel", &[&self.id.to_string()]);
        let _ = crate::support::run_bounded(&mut c, Duration::from_secs(30));
    }
}

/// `node[1-3]`, `node[1,3]`, `node2` -> the node names.
pub fn expand_hostlist(list: &str) -> Vec<String> {
    let Some((prefix, rest)) = list.split_once('[') else {
        return vec![list.to_owned()];
    };
    let ranges = rest.trim_end_matches(']');
    let mut out = Vec::new();
    for r in ranges.split(',') {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        let (a, b): (u32, u32) = (a.parse().unwrap(), b.parse().unwrap());
        out.extend((a..=b).map(|i| format!("{prefix}{i}")));
    }
    out
}
