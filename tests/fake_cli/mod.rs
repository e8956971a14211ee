//! The dispatch binary run against the fake Slurm (`tools/fake-slurm`), with its own state dir
//! and scenario. Shared by `tests/pool_fake.rs` and `tests/submit_fake.rs`.

#![allow(dead_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn fake_bin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/fake-slurm/bin")
}

/// The pids of the running fake Slurm clients (`tools/fake-slurm/bin/*`, whether still in
/// `env` or already in Python) whose `FAKE_SLURM_LOG` is `log`.
fn fake_clients_logging_to(log: &Path) -> Vec<u32> {
    let bin = fake_bin().display().to_string();
    let mut wanted = b"FAKE_SLURM_LOG=".to_vec();
    wanted.extend_from_slice(log.as_os_str().as_encoded_bytes());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let dir = Path::new("/proc").join(pid.to_string());
            let is_fake = std::fs::read(dir.join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&bin));
            is_fake
                && std::fs::read(dir.join("environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == wanted.as_slice()))
        })
        .collect()
}

/// Wait (10 s at most) until every running fake Slurm client that logs to `log` has logged its
/// call. A detached `srun` starts a Python interpreter that, on a busy machine, logs (and reads
/// its scenario) after the dispatch that spawned it has returned: without the wait its call
/// lands in the next scenario's log, or it answers from that scenario, or a count of the log
/// misses it. `log` must never be cut while clients that logged to it still run.
pub fn settle(log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logged: HashSet<u32> = std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["pid"].as_u64())
            .map(|p| p as u32)
            .collect();
        let running = fake_clients_logging_to(log);
        if running.iter().all(|p| logged.contains(p)) || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub struct Fake {
    pub dir: tempfile::TempDir,
    /// Where in the call log [`Fake::calls`] starts: the log is never cut, so every fake
    /// client that ever logged stays known to [`Fake::settle`].
    calls_from: AtomicU64,
}

impl Fake {
    pub fn new() -> Fake {
        Fake {
            dir: tempfile::tempdir().unwrap(),
            calls_from: AtomicU64::new(0),
        }
    }

    /// Replace the scenario; its use counts and the call log start afresh, once every fake
    /// client already started has read the old one (see [`Fake::settle`]).
    pub fn scenario(&self, scenario: Value) {
        std::fs::write(self.dir.path().join("scenario.json"), scenario.to_string()).unwrap();
        let _ = std::fs::remove_file(self.dir.path().join("scenario.json.state"));
        self.forget_calls();
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// dispatch with the fake first on its PATH (and a 2 s Slurm timeout).
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_in(&self.state(), args)
    }

    /// [`Fake::command`] with another state directory: a second login node's dispatch, or a
    /// second user's, in front of the same fake controller.
    pub fn command_in(&self, state: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
        c.arg("--state-dir")
            .arg(state)
            .args(args)
            .env("PATH", format!("{}:/usr/bin:/bin", fake_bin().display()))
            .env("FAKE_SLURM_SCENARIO", self.dir.path().join("scenario.json"))
            .env("FAKE_SLURM_LOG", self.dir.path().join("calls.jsonl"))
            .env("DISPATCH_SLURM_TIMEOUT", "2")
            .env_remove("DISPATCH_FAILPOINTS");
        c
    }

    /// (exit code, stdout, stderr); exit code -1 when killed by a signal.
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        self.run_in(&self.state(), args)
    }

    /// [`Fake::run`] with another state directory ([`Fake::command_in`]).
    pub fn run_in(&self, state: &Path, args: &[&str]) -> (i32, String, String) {
        let out = self.command_in(state, args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Run with `failpoint=abort` armed and check that it fired.
    pub fn crash(&self, failpoint: &str, args: &[&str]) {
        let out = self
            .command(args)
            .env("DISPATCH_FAILPOINTS", format!("{failpoint}=abort"))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            None,
            "{failpoint} did not fire: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// (command, argv) of every Slurm call, in order.
    pub fn calls(&self) -> Vec<(String, Vec<String>)> {
        self.settle();
        let log = std::fs::read(self.calls_log()).unwrap_or_default();
        let from = (self.calls_from.load(Ordering::SeqCst) as usize).min(log.len());
        String::from_utf8_lossy(&log[from..])
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let argv = v["argv"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap().to_owned())
                    .collect();
                (v["cmd"].as_str().unwrap().to_owned(), argv)
            })
            .collect()
    }

    pub fn programs(&self) -> Vec<String> {
        self.calls().into_iter().map(|(c, _)| c).collect()
    }

    pub fn forget_calls(&self) {
        self.settle();
        let len = std::fs::metadata(self.calls_log()).map_or(0, |m| m.len());
        self.calls_from.store(len, Ordering::SeqCst);
    }

    fn calls_log(&self) -> PathBuf {
        self.dir.path().join("calls.jsonl")
    }

    /// [`settle`] this fake's call log.
    pub fn settle(&self) {
        settle(&self.calls_log());
    }

    /// The journal as `journal dump --json` shows it.
    pub fn events(&self) -> Vec<Value> {
        let (code, out, err) = self.run(&["journal", "dump", "--json"]);
        assert_eq!(code, 0, "{err}");
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn kinds(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// What a worker's supervisor would have recorded in its own journal (below `evidence`):
/// SIGTERM at its early-shutdown deadline (or not), a publication in `published` with its
/// manifest's digest (or none), and its native state's `class`.
pub fn supervisor_journal(
    evidence: &Path,
    deadline: bool,
    published: Option<(&str, dispatch::event::Sha256Digest)>,
    class: &str,
) {
    use dispatch::event::worker::{CleanedUp, Published, ShutdownSignalled};
    use dispatch::event::WorkerEvent;
    use dispatch::journal::{JournalWriter, Options};
    let dir = dispatch::worker::supervisor::journal_dir(evidence);
    let w = JournalWriter::<WorkerEvent>::open(&dir, Options::default()).unwrap();
    if deadline {
        w.append_one(WorkerEvent::ShutdownSignalled(ShutdownSignalled {
            signal: "TERM".into(),
            reason: "deadline".into(),
        }))
        .unwrap();
    }
    if let Some((dir, manifest_sha256)) = published {
        w.append_one(WorkerEvent::Published(Published {
            dir: dir.to_owned(),
            manifest_sha256,
            files: 1,
            bytes: 2,
            commits: 0,
            patch_bytes: 0,
            took_ms: 3,
        }))
        .unwrap();
    }
    w.append_one(WorkerEvent::CleanedUp(CleanedUp {
        removed: vec![],
        kept: vec!["state".into()],
        state_class: class.into(),
        reason: String::new(),
        errors: vec![],
    }))
    .unwrap();
}

/// What a worker's supervisor records first when it starts (below `evidence`): the grace it
/// was started with (`--grace` at submit), which a stop without `--grace` gives its payload.
pub fn supervisor_started(evidence: &Path, id: uuid::Uuid, grace_s: u32) {
    use dispatch::event::worker::SupervisorStarted;
    use dispatch::event::WorkerEvent;
    use dispatch::journal::{JournalWriter, Options};
    let dir = dispatch::worker::supervisor::journal_dir(evidence);
    let w = JournalWriter::<WorkerEvent>::open(&dir, Options::default()).unwrap();
    w.append_one(WorkerEvent::SupervisorStarted(SupervisorStarted {
        submission_id: id,
        job_id: None,
        step_id: None,
        node: "vm".into(),
        cpu_set: "0".into(),
        deadline: dispatch::event::Micros::now(),
        grace_s,
        command: vec!["true".into()],
    }))
    .unwrap();
}

/// A publication that verifies (a manifest listing no files) at `dir`, of worker `worker`'s
/// submission `id`: its manifest's SHA-256.
pub fn plant_publication(dir: &str, worker: &str, id: uuid::Uuid) -> dispatch::event::Sha256Digest {
    use sha2::Digest;
    let manifest = format!(
        r#"{{"format":1,"worker":"{worker}","submission_id":"{id}","pinned_commit":null,"head_commit":null,"files":[]}}"#
    );
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(Path::new(dir).join("MANIFEST.json"), &manifest).unwrap();
    dispatch::event::Sha256Digest(sha2::Sha256::digest(manifest.as_bytes()).into())
}

/// What worker `worker` (submission `id`) of pool `pool` below `pools` records when it
/// checkpointed at its allocation's end and published (a publication that verifies).
pub fn checkpointed_at_the_end(pools: &Path, pool: &str, worker: &str, id: uuid::Uuid) {
    let dirs = dispatch::worker::dirs::WorkerDirs::new(pools, pool, id);
    let published = pools
        .join(pool)
        .join("published")
        .join(format!("{worker}-{id}"));
    let published = published.display().to_string();
    let sha = plant_publication(&published, worker, id);
    supervisor_journal(
        &dirs.evidence,
        false,
        Some((&published, sha)),
        "checkpointed",
    );
}
