//! Helpers for tests against the real dev cluster: allocations that are always cancelled, the
//! dispatch binary, and small squeue/sacct readers. Shared by `tests/pool_*.rs`.

#![allow(dead_code)]

use std::collections::BTreeSet;
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

pub fn run(out: Output) -> Run {
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

/// `dispatch --state-dir SD --config CONFIG args…`, run to its end.
pub fn dispatch_with_config(state_dir: &Path, config: &Path, args: &[&str]) -> Run {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    dispatch(state_dir, &all)
}

/// sacct's start and end of `job` (`YYYY-MM-DDTHH:MM:SS`, which order as text).
pub fn sacct_start_end(job: u64) -> (String, String) {
    let out = Command::new("sacct")
        .args(["-X", "-n", "-P", "-j", &job.to_string(), "-o", "Start,End"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap_or_default().to_owned();
    let (s, e) = line.split_once('|').unwrap_or_default();
    (s.to_owned(), e.to_owned())
}

/// The counter payload of the continuation and renewal tests: counts in its native state every
/// 0.1 s; on SIGTERM (its early-shutdown deadline, or a stop) saves the count, appends what this
/// generation counted to `counted`, commits a line naming its generation in its checkout, and
/// declares a checkpoint. It ignores a second TERM: a stop's `scancel --signal=TERM` reaches
/// every process of the step, and the supervisor passes its own on to the payload's shell (seen
/// on 24.11: a generation counted twice).
pub const COUNTER: &str = r#"f="$DISPATCH_STATE_DIR/count"
n=$(cat "$f" 2>/dev/null || echo 0)
start=$n
trap 'trap "" TERM; echo $n > "$f"; echo $((n - start)) >> "$DISPATCH_STATE_DIR/counted"; echo "generation $DISPATCH_GENERATION" >> generations; git add generations && git -c user.name=t -c user.email=t@example.org commit -qm "generation $DISPATCH_GENERATION"; touch "$DISPATCH_CHECKPOINT"; exit 0' TERM
while :; do n=$((n + 1)); sleep 0.1; done"#;

/// A source repository of one commit at `root/repo`, added to `state_dir` (with `config`, when
/// given) as asset `src`, for [`COUNTER`]'s commits: the repository.
pub fn add_counter_source(
    state_dir: &Path,
    config: Option<&Path>,
    root: &Path,
) -> std::path::PathBuf {
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    crate::support::git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("README"), "a counter\n").unwrap();
    crate::support::git(&repo, &["add", "."]);
    crate::support::git(&repo, &["commit", "-qm", "first"]);
    let args = ["asset", "add-source", "src", repo.to_str().unwrap()];
    let r = match config {
        Some(config) => dispatch_with_config(state_dir, config, &args),
        None => dispatch(state_dir, &args),
    };
    assert_eq!(r.code, 0, "{}", r.stderr);
    repo
}

/// The budgets a worker gets in the real-cluster tests of continuation (and the renewal-gap
/// bench): short, so that a few-minute job leaves a run after its early-shutdown window.
pub const WORKER_BUDGETS: [&str; 8] = [
    "--publication-timeout",
    "5",
    "--native-state-budget",
    "5",
    "--cleanup-budget",
    "5",
    "--grace",
    "5",
];

/// A pool created for renewal tests: 1 CPU, 100M, 3-minute allocations, two in all
/// (`--renew-max 2`); the first allocation's job id.
pub fn create_renewing_pool(state_dir: &Path, config: &Path, pool: &str) -> u64 {
    create_renewing_pool_with(state_dir, config, pool, &[])
}

/// [`create_renewing_pool`] with `extra` arguments to `pool create` (`--renew-overlap`).
pub fn create_renewing_pool_with(
    state_dir: &Path,
    config: &Path,
    pool: &str,
    extra: &[&str],
) -> u64 {
    let mut args = vec![
        "pool",
        "create",
        pool,
        "--cpus",
        "1",
        "--mem",
        "100M",
        "--time",
        "3",
        "--wait",
        "120",
        "--renew-max",
        "2",
        "--json",
    ];
    args.extend_from_slice(extra);
    let created = dispatch_with_config(state_dir, config, &args);
    assert_eq!(created.code, 0, "{}", created.stderr);
    json(&created.stdout)["allocation"]["job_id"]
        .as_u64()
        .unwrap()
}

/// Slurm started job `second` no earlier than job `first` ended (sacct).
pub fn assert_started_after_end(second: u64, first: u64) {
    let (_, first_end) = sacct_start_end(first);
    let (second_start, _) = sacct_start_end(second);
    assert!(
        !first_end.is_empty() && first_end != "Unknown",
        "{first_end}"
    );
    assert!(second_start >= first_end, "{second_start} < {first_end}");
}

/// `pool release` ends the pool's allocation `job` with proof, and `audit` is ok after it.
pub fn release_with_proof_then_audit(state_dir: &Path, config: &Path, pool: &str, job: u64) {
    let released = dispatch_with_config(state_dir, config, &["pool", "release", pool, "--json"]);
    assert_eq!(released.code, 0, "{}", released.stderr);
    let r = json(&released.stdout);
    assert_eq!(r["job_id"], job, "{r}");
    assert!(!r["proof"].as_str().unwrap().is_empty(), "{r}");
    let audit = dispatch_with_config(state_dir, config, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);
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

/// The job's comment, as `squeue -o %k` shows it (`(null)` when it has none).
pub fn job_comment(job: u32) -> String {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%k", "-j", &job.to_string()])
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `scontrol update JobId=J Comment=TEXT`, as the job's owner would run it.
pub fn set_job_comment(job: u32, text: &str) {
    let st = Command::new("scontrol")
        .args([
            "update",
            &format!("JobId={job}"),
            &format!("Comment={text}"),
        ])
        .status()
        .expect("scontrol update");
    assert!(
        st.success(),
        "scontrol update JobId={job} Comment={text:?} failed"
    );
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

/// The CPUs of a kernel CPU list such as `0-2,5`.
pub fn cpus_in(list: &str) -> BTreeSet<u32> {
    let mut set = BTreeSet::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => set.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => {
                set.insert(part.parse::<u32>().unwrap());
            }
        }
    }
    set
}

/// The CPU ids Slurm gave job `job` (`scontrol -d show job`).
pub fn job_cpu_ids(job: u32) -> BTreeSet<u32> {
    let out = Command::new("scontrol")
        .args(["-d", "show", "job", &job.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let ids = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("CPU_IDs="))
        .unwrap_or_else(|| panic!("no CPU_IDs for job {job}: {text}"));
    cpus_in(ids)
}

/// An allocation whose `first` lowest CPU ids are distinct real CPUs (the ids its first steps
/// get). The dev cluster declares more CPUs than the machine has (16 on 2), and Slurm's CPU ids
/// land on real CPUs modulo their number: a job given ids 1 and 3 has one real CPU, so no two
/// of its steps can have disjoint CPU sets, whatever dispatch does. Such allocations are held
/// (so the next one is placed elsewhere) until one fits, then released.
pub fn salloc_on_distinct_cpus(tag: &str, args: &[&str], first: usize) -> Allocation {
    // SAFETY: sysconf has no preconditions.
    let real = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u32;
    let mut held = Vec::new();
    for _ in 0..6 {
        let a = Allocation::salloc(&crate::support::unique_name(tag), args);
        let lowest: Vec<u32> = job_cpu_ids(a.id).into_iter().take(first).collect();
        let distinct: BTreeSet<u32> = lowest.iter().map(|i| i % real).collect();
        if distinct.len() == lowest.len() {
            return a;
        }
        held.push(a);
    }
    panic!("no allocation on distinct real CPUs after 6 tries (the node is too busy)");
}

/// Cancel, by id, every job of mine whose name starts with `prefix` (a test's own jobs, at
/// the end of the test, whatever state they are in).
pub fn cancel_jobs_named(prefix: &str) {
    let Ok(out) = Command::new("squeue")
        .args(["--me", "-h", "-o", "%A|%j"])
        .output()
    else {
        return;
    };
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('|'))
        .filter(|(_, name)| name.starts_with(prefix))
        .map(|(id, _)| id.to_owned())
        .collect();
    if !ids.is_empty() {
        crate::support::run_bounded(Command::new("scancel").args(&ids), Duration::from_secs(30));
    }
}

/// A [`COUNTER`] worker's chain of `n` generations, as `inspect`, the report and its last
/// generation's native state (`last_state`) show it: `inspect` lists generations 1..=n, the
/// report one chain of `n`, and the state counted `n` times, each more than nothing, the sum
/// its count (nothing lost, nothing counted twice). `run`: dispatch with the test's state
/// directory (and config).
pub fn assert_counted_chain(
    run: &dyn Fn(&[&str]) -> Run,
    worker: &str,
    last_state: &Path,
    n: usize,
) {
    let read = |f: &str| {
        std::fs::read_to_string(last_state.join(f))
            .unwrap_or_else(|e| panic!("{worker}: {}: {e}", last_state.join(f).display()))
    };
    let count: u64 = read("count").trim().parse().unwrap();
    let counted: Vec<u64> = read("counted")
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counted.len(), n, "{worker}: {counted:?}");
    assert!(counted.iter().all(|c| *c > 0), "{worker}: {counted:?}");
    assert_eq!(count, counted.iter().sum::<u64>(), "{worker}: {counted:?}");
    let r = run(&["inspect", worker, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let inspect = json(&r.stdout);
    let generations: Vec<u64> = inspect["chain"]
        .as_array()
        .expect("a chain")
        .iter()
        .map(|g| g["generation"].as_u64().unwrap())
        .collect();
    assert_eq!(generations, (1..=n as u64).collect::<Vec<_>>(), "{inspect}");
    let r = run(&["report", "--worker", worker, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let report = json(&r.stdout);
    let rows = report["chains"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{report}");
    let in_chain = rows[0]["generations"].as_array().unwrap().len();
    assert_eq!(in_chain, n, "{report}");
}

/// The subjects of the commits in publication `published`'s bundle, newest first, as `repo`
/// fetches them.
pub fn published_subjects(repo: &Path, published: &Path) -> String {
    let bundle = published.join("workspace.bundle");
    crate::support::git(repo, &["fetch", "-q", bundle.to_str().unwrap(), "HEAD"]);
    crate::support::git(repo, &["log", "--format=%s", "FETCH_HEAD"])
}
