//! Sessions against the real single-node Slurm cluster (`tools/slurm-dev-cluster start`).
//! Never skipped: without a cluster these tests fail and say how to start one. Every test uses
//! its own job name prefix (test name and pid) and cancels, by id, every job carrying it.

mod real_cluster;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use real_cluster::{json, require_cluster, Run};
use serde_json::Value;

/// Jobs of one test: all named with its prefix. Dropping it cancels each by id.
struct Session {
    _lock: support::ClusterLock,
    /// This test's turn among the tests of its kind (`one_of_a_kind`).
    _turn: Option<std::sync::MutexGuard<'static, ()>>,
    tmp: tempfile::TempDir,
    prefix: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Job {
    id: String,
    state: String,
    partition: String,
    account: String,
    qos: String,
}

impl Session {
    fn new(test: &str, targets: &str) -> Session {
        Session::holding(require_cluster(), test, targets)
    }

    /// For a test that closes the `gate` partition or keeps four jobs
    /// running: one such test of this file at a time, beside every other real-cluster test.
    fn one_of_a_kind(test: &str, targets: &str, kind: &'static Mutex<()>) -> Session {
        let turn = kind.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = Session::new(test, targets);
        s._turn = Some(turn);
        s
    }

    fn holding(lock: support::ClusterLock, test: &str, targets: &str) -> Session {
        let prefix = format!("dt-{test}-{}-", std::process::id());
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("config.toml"),
            format!("job_name_prefix = \"{prefix}\"\n{targets}"),
        )
        .unwrap();
        Session {
            _lock: lock,
            _turn: None,
            tmp,
            prefix,
        }
    }

    /// The `gate` partition closed (DOWN; UP again when the guard drops, also on a panic), so
    /// that a session's job there stays PENDING (`PartitionDown`) while nothing else waits on
    /// it: a job pending for Resources would keep the node from other partitions' jobs in
    /// slurmctld's scheduling pass, and a blocker job waited behind theirs (both seen on
    /// 24.11). A job an earlier test cancelled there may still be ending: it is waited
    /// for first. For a test that runs `one_of_a_kind(.., &GATE)`.
    fn gate_closed(&self) -> GateClosed {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = Command::new("squeue")
                .args(["-h", "-p", "gate", "-o", "%i %T"])
                .output()
                .unwrap();
            let jobs = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if out.status.success() && jobs.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "jobs in gate still: {jobs}");
            std::thread::sleep(Duration::from_millis(200));
        }
        gate_state("DOWN").unwrap_or_else(|e| panic!("gate State=DOWN: {e}"));
        GateClosed
    }

    fn state(&self) -> PathBuf {
        self.tmp.path().join("state")
    }

    /// The cache home dispatch runs with: session scripts and Slurm logs live under it, out of
    /// the state directory.
    fn cache(&self) -> PathBuf {
        self.tmp.path().join("cache")
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_env(args, &[])
    }

    /// dispatch with this test's config, state directory and cache home.
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = self.command_in(&self.state(), args);
        c.envs(env.iter().copied());
        c
    }

    /// As `command`, with another state directory (another machine's, another
    /// `$XDG_STATE_HOME`): the token lock does not reach across the two.
    fn command_in(&self, state: &Path, args: &[&str]) -> Command {
        let config = self.tmp.path().join("config.toml");
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        let mut c = real_cluster::dispatch_cmd(state, &all);
        c.env("XDG_CACHE_HOME", self.cache());
        c
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let out = self.command(args, env).output().expect("run dispatch");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `session launch MIRROR -T TARGET --detached --json`, which must succeed.
    fn launch(&self, mirror: &str, target: &str) -> Value {
        self.launch_env(mirror, target, &[])
    }

    fn launch_env(&self, mirror: &str, target: &str, env: &[(&str, &str)]) -> Value {
        let r = self.run_env(&detached_launch(mirror, target), env);
        assert_eq!(r.code, 0, "launch {mirror} on {target}: {}", r.stderr);
        json(&r.stdout)
    }

    fn name(&self, token: &str) -> String {
        format!("{}{token}", self.prefix)
    }

    /// Live jobs (not finished) whose name is exactly `name`.
    fn jobs(&self, name: &str) -> Vec<Job> {
        let out = Command::new("squeue")
            .args([
                "--me",
                "-h",
                "-o",
                "%i|%T|%P|%a|%q",
                &format!("--name={name}"),
            ])
            .output()
            .expect("squeue");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                Job {
                    id: f[0].into(),
                    state: f[1].into(),
                    partition: f[2].into(),
                    account: f[3].into(),
                    qos: f[4].into(),
                }
            })
            .filter(|j| j.state != "COMPLETING")
            .collect()
    }

    fn wait_gone(&self, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = Command::new("squeue")
                .args(["-h", "-o", "%T", "-j", id])
                .output()
                .expect("squeue");
            let state = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if state.is_empty() || state == "CANCELLED" || state == "COMPLETED" {
                return;
            }
            assert!(Instant::now() < deadline, "job {id} is still {state}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        real_cluster::cancel_jobs_named(&self.prefix);
    }
}

/// The tests of a pending job: they set the `gate` partition DOWN and UP again.
static GATE: Mutex<()> = Mutex::new(());

/// `scontrol update PartitionName=gate State=STATE`: what it said when it failed.
fn gate_state(state: &str) -> Result<(), String> {
    let out = Command::new("scontrol")
        .args(["update", "PartitionName=gate", &format!("State={state}")])
        .output()
        .map_err(|e| e.to_string())?;
    match out.status.success() {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// The `gate` partition closed until this drops.
struct GateClosed;

impl Drop for GateClosed {
    fn drop(&mut self) {
        // Never a panic here: it may run while a failed test unwinds.
        if let Err(e) = gate_state("UP") {
            eprintln!("could not open the gate partition again: {e}");
        }
    }
}
/// The tests that keep four jobs running at once: two of them beside the tests that each wait
/// for a job of their own to run once held every CPU while all waited (on an 8-CPU node).
static FOUR_JOBS: Mutex<()> = Mutex::new(());

const TARGETS: &str = r#"
[targets.gate]
partition = "gate"
account = "dev"
qos = "normal"
time = "00:10:00"
mem = "100M"
confined = true

[targets.dbg]
partition = "debug"
account = "dev"
qos = "normal"
time = "00:10:00"
mem = "100M"
confined = true

[targets.bat]
partition = "batch"
account = "dev"
time = "00:10:00"
mem = "100M"
confined = true

[targets.oth]
partition = "debug"
account = "other"
time = "00:10:00"
mem = "100M"
confined = true

[targets.hiq]
partition = "debug"
account = "dev"
qos = "high"
time = "00:10:00"
mem = "100M"
confined = true

[targets.alloc]
partition = "batch"
account = "other"
qos = "high"
time = "00:10:00"
mem = "100M"
confined = false
"#;

/// Lose the whole state directory at once, whatever state the test's jobs are in: their
/// scripts and logs live in the cache home, so not even a pending job notices.
fn move_away(state: &Path) {
    let lost = state.with_extension("lost");
    std::fs::rename(state, &lost).unwrap();
    std::fs::remove_dir_all(&lost).unwrap();
}

/// A launch creates exactly one job named `<prefix><token>`; losing the whole state directory
/// and launching again adopts that job (still exactly one); release cancels it and squeue
/// proves it gone.
#[test]
fn launch_lose_state_adopt_release() {
    let s = Session::new("adopt", TARGETS);
    let name = s.name("my_mirror_x");
    let first = s.launch("my mirror/x", "dbg");
    assert_eq!(first["action"], "submitted");
    let id = first["job_id"].as_u64().unwrap().to_string();
    let jobs = s.jobs(&name);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        (
            jobs[0].id.as_str(),
            jobs[0].state.as_str(),
            jobs[0].partition.as_str()
        ),
        (id.as_str(), "RUNNING", "debug")
    );
    assert!(first["node"].as_str().is_some(), "{first}");

    move_away(&s.state());
    let again = s.launch("my mirror/x", "dbg");
    assert_eq!(again["action"], "adopted", "{again}");
    assert_eq!(again["job_id"].as_u64().unwrap().to_string(), id);
    assert_eq!(s.jobs(&name).len(), 1, "still exactly one job");
    let reused = s.launch("my mirror/x", "dbg");
    assert_eq!(reused["action"], "reused");

    let r = s.run(&[
        "--json",
        "session",
        "release",
        "my mirror/x",
        "-T",
        "dbg",
        "--force",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let rel = json(&r.stdout);
    assert_eq!(rel["action"], "released");
    // Proven by squeue, its cause first (`cancelled: squeue shows job J CANCELLED`).
    let proof = rel["proof"].as_str().unwrap();
    assert!(
        proof.contains(&format!("squeue shows job {id} "))
            || proof.contains(&format!("squeue no longer knows job {id}")),
        "{rel}"
    );
    s.wait_gone(&id);
    assert!(s.jobs(&name).is_empty());
}

/// A job that is still pending when the state directory is lost starts normally later (its
/// batch script and log are not in the state directory), and the next launch adopts it.
#[test]
fn a_pending_job_survives_the_loss_of_the_state_directory() {
    let s = Session::one_of_a_kind("pending", TARGETS, &GATE);
    let name = s.name("m");
    let blocker = s.gate_closed();
    let r = s.run(&[
        "--json",
        "session",
        "launch",
        "m",
        "-T",
        "gate",
        "--detached",
        "--wait",
        "2",
    ]);
    assert_eq!(
        r.code, 1,
        "a launch that cannot run within 2 s: {}",
        r.stderr
    );
    assert!(r.stderr.contains("still PENDING"), "{}", r.stderr);
    // While it waited, it said what for (with Slurm's reason once its scheduler gave one:
    // `is PENDING (PartitionDown); waited`) and how to give up (on stderr: stdout is for --json).
    let waited = r
        .stderr
        .lines()
        .any(|l| l.contains("is PENDING") && l.contains("; waited") && !l.contains("(ending)"));
    assert!(waited, "{}", r.stderr);
    assert!(
        r.stderr.contains("dispatch session release m -T gate"),
        "{}",
        r.stderr
    );
    let jobs = s.jobs(&name);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].state, "PENDING");
    let id = jobs[0].id.clone();

    move_away(&s.state());
    drop(blocker);
    let again = s.launch("m", "gate");
    assert_eq!(again["action"], "adopted", "{again}");
    assert_eq!(again["job_id"].as_u64().unwrap().to_string(), id);
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.jobs(&name).iter().any(|j| j.state == "PENDING") {
        assert!(Instant::now() < deadline, "job {id} never started");
        std::thread::sleep(Duration::from_millis(200));
    }
    // slurmd opens the output a moment after squeue shows the job running.
    let log = s
        .cache()
        .join(format!("dispatch/sessions/logs/job-m-{id}.out"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !log.exists() {
        assert!(
            Instant::now() < deadline,
            "no Slurm log at {}: {:?}",
            log.display(),
            s.jobs(&name)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Still running a while later: it did not fail for want of its files.
    std::thread::sleep(Duration::from_secs(2));
    let jobs = s.jobs(&name);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        (jobs[0].id.as_str(), jobs[0].state.as_str()),
        (id.as_str(), "RUNNING")
    );
}

/// A target with a different partition, account or QOS does not adopt (and is not blocked
/// by) the first job: each allocates its own, with its own placement.
#[test]
fn other_targets_allocate_their_own_job() {
    let s = Session::new("targets", TARGETS);
    let name = s.name("m");
    let base = s.launch("m", "dbg");
    assert_eq!(base["action"], "submitted");
    for (target, placement) in [
        ("bat", ("batch", "dev", "normal")),
        ("oth", ("debug", "other", "normal")),
        ("hiq", ("debug", "dev", "high")),
    ] {
        move_away(&s.state());
        let r = s.run(&[
            "--json",
            "session",
            "launch",
            "m",
            "-T",
            target,
            "--detached",
        ]);
        assert_eq!(r.code, 0, "{target}: {}", r.stderr);
        let j = json(&r.stdout);
        assert_eq!(j["action"], "submitted", "{target}: {j}");
        assert!(
            r.stderr.contains("a different target"),
            "{target}: {}",
            r.stderr
        );
        let id = j["job_id"].as_u64().unwrap().to_string();
        let job = s.jobs(&name).into_iter().find(|j| j.id == id).unwrap();
        assert_eq!(
            (
                job.partition.as_str(),
                job.account.as_str(),
                job.qos.as_str()
            ),
            placement,
            "{target}"
        );
    }
    assert_eq!(s.jobs(&name).len(), 4);
    // And the first target still finds its own job by name, not another target's.
    move_away(&s.state());
    let again = s.launch("m", "dbg");
    assert_eq!(again["action"], "adopted");
    assert_eq!(again["job_id"], base["job_id"]);
}

/// An array job with the session's name is never adopted.
#[test]
fn array_job_with_the_name_is_not_adopted() {
    let s = Session::new("array", TARGETS);
    let name = s.name("arr");
    let out = Command::new("sbatch")
        .args([
            "--parsable",
            "--array=1-2",
            "-J",
            &name,
            "-p",
            "debug",
            "-A",
            "dev",
            "--mem=50M",
            "-t",
            "5",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 300",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let array = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s
        .jobs(&name)
        .iter()
        .any(|j| j.id.contains('_') && j.state == "RUNNING")
    {
        assert!(
            Instant::now() < deadline,
            "array {array} never ran: {:?}",
            s.jobs(&name)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let j = s.launch("arr", "dbg");
    assert_eq!(j["action"], "submitted", "{j}");
    let id = j["job_id"].as_u64().unwrap().to_string();
    assert!(!id.starts_with(&array), "not an element of array {array}");
    let plain: Vec<_> = s
        .jobs(&name)
        .into_iter()
        .filter(|j| !j.id.contains('_'))
        .collect();
    assert_eq!(plain.len(), 1, "{plain:?}");
}

/// Two sessions holding one job: releasing one only detaches it; the job stays.
/// Item 10: a target pinning no QOS beside one pinning the default QOS (debug/dev/normal) on
/// the same partition and account: Slurm shows their jobs alike, so after a lost record a
/// launch on one took the other's job for a different target's and submitted a second. Such a
/// configuration is refused at load (exit 2, both named) and no job is created.
#[test]
fn targets_slurm_cannot_tell_apart_are_refused() {
    let s = Session::new(
        "tied",
        r#"
[targets.wide]
partition = "debug"
account = "dev"
time = "00:10:00"
mem = "100M"
confined = true

[targets.exact]
partition = "debug"
account = "dev"
qos = "normal"
time = "00:10:00"
mem = "100M"
confined = true
"#,
    );
    for target in ["wide", "exact"] {
        let r = s.run(&[
            "--json",
            "session",
            "launch",
            "sh",
            "-T",
            target,
            "--detached",
        ]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(
            r.stderr
                .contains("targets \"exact\" and \"wide\" cannot be told apart"),
            "{}",
            r.stderr
        );
    }
    assert!(s.jobs(&s.name("sh")).is_empty());
}

/// A crash between the submit intent and the recorded id (the process aborts right after
/// sbatch returned): the next launch finds the job by name and adopts it. Never two jobs.
#[test]
fn crash_between_intent_and_id_adopts() {
    let s = Session::new("crash", TARGETS);
    for (mirror, point, then) in [
        ("c1", "session-after-submit", "adopted"),
        // Aborted before sbatch ran: there is no job, so the next launch submits one.
        ("c2", "session-after-launch-intent", "submitted"),
    ] {
        let name = s.name(mirror);
        let r = s.run_env(
            &[
                "--json",
                "session",
                "launch",
                mirror,
                "-T",
                "dbg",
                "--detached",
            ],
            &[("DISPATCH_FAILPOINTS", &format!("{point}=abort"))],
        );
        assert_ne!(r.code, 0, "{point}");
        assert!(r.stderr.contains(point), "{}", r.stderr);
        // The relaunch cannot tell an sbatch that never ran from one still running: it waits
        // out the submit limit (5 s here, + 2 s grace + 30 s margin) before submitting.
        let j = s.launch_env(mirror, "dbg", &[("DISPATCH_SLURM_TIMEOUT", "5")]);
        assert_eq!(j["action"], then, "{point}: {j}");
        let jobs = s.jobs(&name);
        assert_eq!(jobs.len(), 1, "{point}: {jobs:?}");
        assert_eq!(j["job_id"].as_u64().unwrap().to_string(), jobs[0].id);
    }
}

/// `--json session launch MIRROR -T TARGET --detached`.
fn detached_launch<'a>(mirror: &'a str, target: &'a str) -> [&'a str; 7] {
    [
        "--json",
        "session",
        "launch",
        mirror,
        "-T",
        target,
        "--detached",
    ]
}

/// A shim in front of a real client that waits `secs` before running it (a slow submitter).
/// `sbatch --test-only`, which a confined launch asks first, is not slowed: the submit is the
/// call that must be in flight.
fn slow_shim(dir: &Path, program: &str, secs: u32) -> String {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(program);
    // The client the tests run against (22.05's in /usr/bin, or 24.11's wrappers first on
    // PATH), never a fixed path: a shim of the other cluster's client submits elsewhere.
    let real = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no {program} on PATH"));
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" --test-only \"*) ;; *) sleep {secs} ;; esac\nexec {} \"$@\"\n",
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Issue 10 item 11: dispatch is killed (SIGKILL) while its sbatch is in flight (a shim makes
/// sbatch take 4 s) and relaunched at once. The orphaned sbatch creates its job after the
/// relaunch started; the relaunch waits for it (bounded) and adopts it. Five rounds, exactly
/// one job each.
#[test]
fn killed_with_sbatch_in_flight_then_relaunched_at_once_gives_one_job() {
    let s = Session::new("inflight", TARGETS);
    let path = slow_shim(&s.tmp.path().join("shim"), "sbatch", 4);
    let timeout = [("DISPATCH_SLURM_TIMEOUT", "10")];
    for round in 0..5 {
        let mirror = format!("f{round}");
        let args = detached_launch(&mirror, "dbg");
        let mut first = s
            .command(&args, &[("PATH", path.as_str()), timeout[0]])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let spawned = Instant::now();
        std::thread::sleep(Duration::from_millis(1500));
        first.kill().unwrap();
        first.wait().unwrap();
        let j = s.launch_env(&mirror, "dbg", &timeout);
        // Count only once the orphaned sbatch has surely run.
        std::thread::sleep(Duration::from_secs(7).saturating_sub(spawned.elapsed()));
        let jobs = s.jobs(&s.name(&mirror));
        assert_eq!(jobs.len(), 1, "round {round}: {jobs:?}");
        assert_eq!(j["action"], "adopted", "round {round}: {j}");
        assert_eq!(jobs.len(), 1, "round {round}: {jobs:?}");
        assert_eq!(j["job_id"].as_u64().unwrap().to_string(), jobs[0].id);
        let r = s.run(&["session", "release", &mirror, "-T", "dbg", "--force"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
}

/// Issue 10 item 12: two state directories launch the same session at once; the token lock
/// only works inside one, so both probe, find nothing and submit. Slurm arbitrates: each
/// submits held, probes by name, and the younger cancels itself and adopts the older, so each
/// round has exactly one job and both launches report it.
#[test]
fn two_state_directories_racing_give_one_job() {
    race_from_two_state_directories("race", "dbg");
}

/// The same race on an unconfined target: each launch's `salloc --no-shell` is held too
/// (`salloc --hold`, which waits in the background until the launch settles it), so the same
/// arbitration keeps one job.
#[test]
fn two_state_directories_racing_an_salloc_target_give_one_job() {
    race_from_two_state_directories("racealloc", "alloc");
}

fn race_from_two_state_directories(test: &str, target: &str) {
    let s = Session::new(test, TARGETS);
    let other = s.tmp.path().join("state-b");
    let mut doubled = Vec::new();
    for round in 0..20 {
        let mirror = format!("r{round}");
        let args = detached_launch(&mirror, target);
        let spawn = |state: &Path| {
            s.command_in(state, &args)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(&s.state()), spawn(&other));
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        let id = |o: &std::process::Output| {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            json(&String::from_utf8_lossy(&o.stdout))["job_id"].clone()
        };
        let (ja, jb) = (id(&a), id(&b));
        let jobs = s.jobs(&s.name(&mirror));
        if jobs.len() != 1 || ja != jb {
            doubled.push((round, ja, jb, jobs.len()));
        }
        let ids: Vec<String> = jobs.into_iter().map(|j| j.id).collect();
        support::run_bounded(Command::new("scancel").args(&ids), Duration::from_secs(30));
    }
    assert!(
        doubled.is_empty(),
        "rounds with two jobs (round, a, b, live): {doubled:?}"
    );
}

/// Issue 10 item 12, crash safety: a launch killed between its held sbatch and the release or
/// scancel leaves its job held (it cannot run); the next launch settles it as the dead one
/// would have. Alone: released and reused. Beside an older job of another state directory's
/// launch (made while the dying launch slept after its intent, past its first name probe):
/// cancelled, the older one adopted. Never held on, never two jobs.
#[test]
fn a_launch_killed_while_holding_is_settled_by_the_next_launch() {
    killed_while_holding("held", "dbg");
}

/// The same for an unconfined target, except that the dead launch's held job is cancelled
/// rather than released and a new one submitted: released to a salloc that died with its
/// launcher, the controller kills it as an interactive job whose client is gone (about 10 s
/// after the grant). The jobs kept are checked to still run past that.
#[test]
fn an_salloc_launch_killed_while_holding_is_settled_by_the_next_launch() {
    killed_while_holding("heldalloc", "alloc");
}

fn killed_while_holding(test: &str, target: &str) {
    let unconfined = target == "alloc";
    let s = Session::one_of_a_kind(test, TARGETS, &FOUR_JOBS);
    let other = s.tmp.path().join("state-b");
    let racing = "session-after-launch-intent=sleep:4000";
    let mut kept = Vec::new();
    for (mirror, points, racer) in [
        ("h1", "session-after-job-recorded=abort".to_owned(), false),
        ("h2", "session-after-hold-decided=abort".to_owned(), false),
        (
            "h3",
            format!("{racing},session-after-yield-decided=abort"),
            true,
        ),
        (
            "h4",
            format!("{racing},session-after-job-recorded=abort"),
            true,
        ),
    ] {
        let name = s.name(mirror);
        let args = detached_launch(mirror, target);
        let dying = s
            .command_in(&s.state(), &args)
            .env("DISPATCH_FAILPOINTS", &points)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let older = racer.then(|| {
            std::thread::sleep(Duration::from_secs(1));
            let out = s.command_in(&other, &args).output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            json(&stdout)["job_id"].as_u64().unwrap().to_string()
        });
        let out = dying.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("failpoint"),
            "{points}: {stderr}"
        );
        let held: Vec<Job> = s
            .jobs(&name)
            .into_iter()
            .filter(|j| reason(&j.id) == "JobHeldUser")
            .collect();
        assert_eq!(held.len(), 1, "{points}: the dead launch's job is held");
        let j = s.launch(mirror, target);
        let jobs = s.jobs(&name);
        assert_eq!(jobs.len(), 1, "{points}: {jobs:?}");
        assert_eq!(
            j["job_id"].as_u64().unwrap().to_string(),
            jobs[0].id,
            "{points}"
        );
        assert_ne!(reason(&jobs[0].id), "JobHeldUser", "{points}: left held");
        match older {
            Some(older) => {
                assert_eq!(jobs[0].id, older, "{points}");
                assert_eq!(j["action"], "adopted", "{points}");
                s.wait_gone(&held[0].id);
            }
            // A held salloc job is cancelled, never released (its salloc may be gone).
            None if unconfined => {
                assert_ne!(jobs[0].id, held[0].id, "{points}");
                assert_eq!(j["action"], "submitted", "{points}");
                s.wait_gone(&held[0].id);
            }
            None => {
                assert_eq!(jobs[0].id, held[0].id, "{points}");
                assert_eq!(j["action"], "reused", "{points}");
            }
        }
        kept.push((points, name, jobs[0].id.clone()));
    }
    // Past the ~10 s in which the controller kills an interactive job whose salloc is gone.
    std::thread::sleep(Duration::from_secs(15));
    for (points, name, id) in kept {
        let state = s.jobs(&name).into_iter().find(|j| j.id == id);
        assert_eq!(
            state.map(|j| j.state),
            Some("RUNNING".to_owned()),
            "{points}: the kept job {id} did not stay running"
        );
        real_cluster::cancel_jobs_named(&name);
    }
}

/// squeue's reason for job `id` (`JobHeldUser` while held), empty once it is gone.
fn reason(id: &str) -> String {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%r", "-j", id])
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// salloc targets: the allocation carries the name and is found again after the state is
/// lost.
#[test]
fn salloc_session_is_named_and_adopted() {
    let s = Session::new("salloc", TARGETS);
    let name = s.name("u");
    let j = s.launch("u", "alloc");
    assert_eq!(j["action"], "submitted");
    let jobs = s.jobs(&name);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        (
            jobs[0].partition.as_str(),
            jobs[0].account.as_str(),
            jobs[0].qos.as_str()
        ),
        ("batch", "other", "high")
    );
    move_away(&s.state());
    let again = s.launch("u", "alloc");
    assert_eq!(again["action"], "adopted");
    assert_eq!(again["job_id"], j["job_id"]);
}

/// A short `--wait` on an unconfined target: salloc's own limit (`--immediate`) covers the
/// arbitration and the scheduling pass after the release as well as the wait, and is never 1
/// (Slurm 22.05 and 24.11 refuse `--immediate=1` with `--hold`: "Job dependency problem").
#[test]
fn a_short_wait_still_launches_an_unconfined_session() {
    let s = Session::new("shortwait", TARGETS);
    // The other shards share this cluster's CPUs: a node that is full for the whole second
    // rightly makes the launch give up (PENDING for Resources), so a few tries are allowed;
    // Slurm's refusal of the request itself never is.
    let mut tries = Vec::new();
    let j = loop {
        let r = s.run(&[
            "--json",
            "session",
            "launch",
            "w",
            "-T",
            "alloc",
            "--detached",
            "--wait",
            "1",
        ]);
        if r.code == 0 {
            break json(&r.stdout);
        }
        assert!(
            !r.stderr.contains("dependency"),
            "Slurm refused the request: {}",
            r.stderr
        );
        tries.push(r.stderr);
        assert!(tries.len() < 6, "never granted within 1 s: {tries:#?}");
        std::thread::sleep(std::time::Duration::from_secs(10));
    };
    assert_eq!(j["state"], "RUNNING", "{j}");
    let jobs = s.jobs(&s.name("w"));
    assert_eq!(jobs.len(), 1, "{jobs:?}");
}

/// The report: jobs per target, an orphan (a live job no session names), and a stale session
/// (its job cancelled behind dispatch's back).
#[test]
fn sessions_report_orphans_and_stale() {
    let s = Session::new("report", TARGETS);
    let kept = s.launch("kept", "dbg");
    let doomed = s.launch("doomed", "bat");
    let orphan = Command::new("sbatch")
        .args([
            "--parsable",
            "-J",
            &s.name("orphan"),
            "-p",
            "debug",
            "-A",
            "dev",
            "--mem=50M",
            "-t",
            "5",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 300",
        ])
        .output()
        .unwrap();
    assert!(orphan.status.success());
    let orphan_id: u64 = String::from_utf8_lossy(&orphan.stdout)
        .trim()
        .parse()
        .unwrap();
    let doomed_id = doomed["job_id"].as_u64().unwrap().to_string();
    assert!(Command::new("scancel")
        .arg(&doomed_id)
        .status()
        .unwrap()
        .success());
    s.wait_gone(&doomed_id);
    let r = s.run(&["--json", "sessions"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json(&r.stdout);
    let dbg = j["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["target"] == "dbg")
        .unwrap();
    let ids: Vec<u64> = dbg["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["job_id"].as_u64().unwrap())
        .collect();
    assert!(ids.contains(&kept["job_id"].as_u64().unwrap()), "{j}");
    assert!(ids.contains(&orphan_id), "{j}");
    let orphan_entry = dbg["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["job_id"] == orphan_id)
        .unwrap();
    assert_eq!(
        orphan_entry["flags"],
        serde_json::json!(["no session record"])
    );
    assert_eq!(orphan_entry["session"], Value::Null);
    let stale = j["stale"].as_array().unwrap();
    assert_eq!(stale.len(), 1, "{j}");
    assert_eq!(stale[0]["session"], "doomed--bat");
    assert_eq!(stale[0]["job_id"].as_u64().unwrap().to_string(), doomed_id);
    let human = s.run(&["sessions"]);
    assert!(
        human.stdout.contains("stale sessions")
            && human
                .stdout
                .contains("dispatch session release doomed -T bat"),
        "{}",
        human.stdout
    );
    // Releasing the stale session clears it (scancel of a gone job succeeds).
    let r = s.run(&["session", "release", "doomed", "-T", "bat", "--force"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json(&s.run(&["--json", "sessions"]).stdout);
    assert_eq!(j["stale"], serde_json::json!([]));
}

/// Renew --once on a job far from its end holds; with a drain window larger than the time
/// left it starts the replacement, waits for it to run, then cancels the old job.
#[test]
fn renew_drains_into_a_new_job() {
    let s = Session::new("renew", TARGETS);
    let name = s.name("r");
    let first = s.launch("r", "dbg");
    let old = first["job_id"].as_u64().unwrap().to_string();
    let r = s.run(&[
        "--json",
        "session",
        "renew",
        "r",
        "-T",
        "dbg",
        "--once",
        "--drain-minutes",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json(&r.stdout)["relaunched"], serde_json::json!([]));
    let r = s.run(&[
        "--json",
        "session",
        "renew",
        "r",
        "-T",
        "dbg",
        "--once",
        "--drain-minutes",
        "60",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json(&r.stdout);
    let new = j["job_id"].as_u64().unwrap().to_string();
    assert_ne!(new, old);
    assert_eq!(j["cancelled"][0].as_u64().unwrap().to_string(), old);
    s.wait_gone(&old);
    let jobs = s.jobs(&name);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].id, new);
}

/// Hostile names that are legal labels (shell syntax, quotes, backticks) in the mirror, the
/// target and the mirror's configured path reach a real batch script: the job runs the
/// command in the right directory and no value ever runs as code.
#[test]
fn hostile_names_never_run_as_code_in_a_real_job() {
    let marker_dir = tempfile::tempdir().unwrap();
    let mark = marker_dir.path().join("PWNED");
    let m = mark.display().to_string();
    let toml_str = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let target = format!("t$(touch {m})`touch {m}`;'");
    let configured = format!("m $(touch {m})");
    let workdir = marker_dir
        .path()
        .join(format!("src $(touch {m}) 'q' `touch {m}`"));
    std::fs::create_dir_all(&workdir).unwrap();
    let missing = marker_dir.path().join(format!("gone $(touch {m})"));
    let targets = format!(
        "[targets.{}]\npartition = \"debug\"\naccount = \"dev\"\ntime = \"00:10:00\"\n\
         mem = \"100M\"\nconfined = true\n\n[mirrors.{}]\npath = {}\n\n\
         [mirrors.gone]\npath = {}\n",
        toml_str(&target),
        toml_str(&configured),
        toml_str(&workdir.to_string_lossy()),
        toml_str(&missing.to_string_lossy())
    );
    let s = Session::new("hostile", &targets);
    let mirrors = [
        configured.clone(),
        format!("`touch {m}`"),
        format!("x;touch {m}"),
        format!("x' ; touch {m}; '"),
        format!("x\" ; touch {m}; \""),
    ];
    for (i, mirror) in mirrors.iter().enumerate() {
        let ran = marker_dir.path().join(format!("ran-{i}"));
        let r = s.run(&[
            "--json",
            "session",
            "launch",
            mirror,
            "-T",
            &target,
            "--detached",
            "--",
            "sh",
            "-c",
            "pwd > \"$1\"; exec sleep 300",
            "sh",
            ran.to_str().unwrap(),
        ]);
        assert_eq!(r.code, 0, "launch {mirror:?}: {}", r.stderr);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_to_string(&ran).map_or(true, |t| t.is_empty()) {
            assert!(
                Instant::now() < deadline,
                "{mirror:?}: the job never ran its command"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let pwd = std::fs::read_to_string(&ran).unwrap();
        if i == 0 {
            assert_eq!(pwd.trim_end(), workdir.to_str().unwrap(), "{mirror:?}");
        }
        let r = s.run(&["session", "release", mirror, "-T", &target, "--force"]);
        assert_eq!(r.code, 0, "release {mirror:?}: {}", r.stderr);
        assert!(!mark.exists(), "{mirror:?} on {target:?} ran as code");
    }

    // A configured directory that does not exist: the job stops at its `cd`, and the message
    // that names the directory does not run it.
    let r = s.run(&[
        "--json",
        "session",
        "launch",
        "gone",
        "-T",
        &target,
        "--detached",
    ]);
    let logs = s.cache().join("dispatch/sessions/logs");
    let deadline = Instant::now() + Duration::from_secs(30);
    let said = loop {
        let text: String = std::fs::read_dir(&logs)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("job-gone-"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .collect();
        if text.contains("DISPATCH: cd") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the job never reported its failed cd (launch: {} {})",
            r.code,
            r.stderr
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        said.contains("$(touch"),
        "the directory is named as it is: {said}"
    );
    assert!(
        !mark.exists(),
        "the failed cd's message ran the directory's name as code"
    );
}

/// Issue 21 item 11 on a real Slurm: a pool's allocation (`<prefix>pool-<pool>-<8 hex>`) and a
/// `dispatch submit` job (`<prefix><worker>-<8 hex>`) under the session prefix are never
/// sessions: `sessions` lists neither, and a launch of a mirror named after one is refused
/// before it could adopt it.
#[test]
fn pool_and_submit_jobs_are_never_sessions_on_a_real_controller() {
    let s = Session::new("nosess", TARGETS);
    let pool = s.run(&[
        "--json", "pool", "create", "ap", "--cpus", "1", "--mem", "100M", "--time", "10:00",
        "--wait", "60",
    ]);
    assert_eq!(pool.code, 0, "{}", pool.stderr);
    let pool = json(&pool.stdout);
    let submitted = s.run(&[
        "--json", "submit", "--cpus", "1", "--mem", "100M", "--time", "5", "--name", "w1", "--",
        "sleep", "120",
    ]);
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    let submitted = json(&submitted.stdout);
    let theirs = [&pool["allocation"]["job_id"], &submitted["job_id"]];

    let r = s.run(&["--json", "sessions"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json(&r.stdout);
    let listed: Vec<&Value> = j["targets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["jobs"].as_array().unwrap())
        .chain(j["unmatched"].as_array().unwrap())
        .map(|e| &e["job_id"])
        .collect();
    for id in theirs {
        assert!(!listed.contains(&id), "job {id} listed as a session: {j}");
    }
    let token = pool["job_name"]
        .as_str()
        .unwrap()
        .strip_prefix(&s.prefix)
        .unwrap()
        .to_owned();
    let r = s.run(&["session", "launch", &token, "-T", "dbg", "--detached"]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("pool allocations and `dispatch submit` jobs"),
        "{}",
        r.stderr
    );
    assert_eq!(s.run(&["pool", "release", "ap"]).code, 0);
    assert_eq!(s.run(&["stop", "w1", "--grace", "0"]).code, 0);
}

/// Issue 21 item 7 on a real Slurm: a launch whose job is still PENDING when its --wait ends
/// records it; the next launch reuses it and, since it does not run yet, waits for it like a new
/// one, answering with its node once it runs (it was `reused` with `"node": null`).
#[test]
fn a_reused_pending_job_is_waited_for_and_its_node_named_on_a_real_controller() {
    let s = Session::one_of_a_kind("pendreuse", TARGETS, &GATE);
    let blocker = s.gate_closed();
    let launch = |wait: &str| {
        s.run(&[
            "--json",
            "session",
            "launch",
            "m",
            "-T",
            "gate",
            "--detached",
            "--wait",
            wait,
        ])
    };
    let r = launch("3");
    assert_eq!(r.code, 1, "{} {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("PENDING"), "{}", r.stderr);
    let pending = s.jobs(&s.name("m"));
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].state, "PENDING");
    drop(blocker);
    let r = launch("60");
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let j = json(&r.stdout);
    assert_eq!(j["action"], "reused", "{j}");
    assert_eq!(j["job_id"].as_u64().unwrap().to_string(), pending[0].id);
    assert_eq!(j["state"], "RUNNING", "{j}");
    assert!(j["node"].is_string(), "{j}");
    assert_eq!(
        s.run(&["session", "release", "m", "-T", "gate", "--force"])
            .code,
        0
    );
}
