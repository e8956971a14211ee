//! Issue 38 item 2 on the real cluster: a pool created with `--time 3 --renew-max 2`, no
//! workers. `reconcile`, run every few seconds as a user's scrontab or `--watch` would, asks
//! for the second allocation before the first ends (`--dependency=afterany`), and makes it the
//! pool's only once the first is proven over: Slurm starts it no earlier than the first ended
//! (sacct), `pool status` shows generation 2, and `pool release` ends it with proof.

mod real_cluster;
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use real_cluster::{cancel_jobs_named, dispatch_cmd, json, require_cluster, Run};

const PREFIX: &str = "dtrn-";

struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        cancel_jobs_named(&self.0);
    }
}

fn run(sd: &std::path::Path, config: &std::path::Path, args: &[&str]) -> Run {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    real_cluster::run(dispatch_cmd(sd, &all).output().unwrap())
}

/// sacct's start and end of `job` (`YYYY-MM-DDTHH:MM:SS`, which order as text).
fn start_end(job: u64) -> (String, String) {
    let out = Command::new("sacct")
        .args(["-X", "-n", "-P", "-j", &job.to_string(), "-o", "Start,End"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap_or_default().to_owned();
    let (s, e) = line.split_once('|').unwrap_or_default();
    (s.to_owned(), e.to_owned())
}

#[test]
fn a_renewing_pool_gets_its_second_allocation_only_after_the_first_is_over() {
    let _cluster = require_cluster();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("job_name_prefix = \"{PREFIX}\"\n")).unwrap();
    let sd = dir.path().join("state");
    let pool = format!("rn{}", std::process::id() % 100_000);
    let _cleanup = Cleanup(format!("{PREFIX}pool-{pool}-"));
    let created = run(
        &sd,
        &config,
        &[
            "pool",
            "create",
            &pool,
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
        ],
    );
    assert_eq!(created.code, 0, "{}", created.stderr);
    let first = json(&created.stdout)["allocation"]["job_id"]
        .as_u64()
        .unwrap();

    // Reconcile every 5 s until the pool is on its second allocation (the first's 3 minutes,
    // and a margin for Slurm's scheduling and the end's proof).
    let deadline = Instant::now() + Duration::from_secs(330);
    let mut asked = Vec::new();
    let second = loop {
        assert!(Instant::now() < deadline, "not renewed in time: {asked:?}");
        let r = run(&sd, &config, &["reconcile", "--json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let r = json(&r.stdout);
        let line = r["renewals"].get(0).cloned().unwrap_or_default();
        if line["outcome"] == "asked" {
            asked.push(line["job_id"].as_u64().unwrap());
        }
        if line["outcome"] == "renewed" {
            break line["job_id"].as_u64().unwrap();
        }
        std::thread::sleep(Duration::from_secs(5));
    };
    assert_eq!(asked, vec![second], "one successor, asked once");
    let status = json(&run(&sd, &config, &["pool", "status", &pool, "--json"]).stdout);
    let p = &status["pools"][0];
    assert_eq!(p["allocation"]["job_id"], second, "{p}");
    assert_eq!(p["renewal"]["generation"], 2, "{p}");
    // Slurm started the second no earlier than the first ended.
    let (_, first_end) = start_end(first);
    let (second_start, _) = start_end(second);
    assert!(
        !first_end.is_empty() && first_end != "Unknown",
        "{first_end}"
    );
    assert!(second_start >= first_end, "{second_start} < {first_end}");

    let released = run(&sd, &config, &["pool", "release", &pool, "--json"]);
    assert_eq!(released.code, 0, "{}", released.stderr);
    let r = json(&released.stdout);
    assert_eq!(r["job_id"], second, "{r}");
    assert!(!r["proof"].as_str().unwrap().is_empty(), "{r}");
    let audit = run(&sd, &config, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);
}

/// The job ids among `jobs` that squeue still lists pending, running or completing (a job it
/// lists in a terminal state, or no longer lists, is over).
fn release_test_jobs_not_over(jobs: &[u64]) -> Vec<String> {
    let ids: Vec<String> = jobs.iter().map(u64::to_string).collect();
    let out = Command::new("squeue")
        .args(["-h", "-j", &ids.join(","), "-o", "%i|%T"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            let state = l.split_once('|').map_or("", |(_, s)| s);
            !matches!(
                state,
                "CANCELLED" | "COMPLETED" | "FAILED" | "TIMEOUT" | "PREEMPTED"
            )
        })
        .map(str::to_owned)
        .collect()
}

/// Whether a process runs whose command line names `word` (the successor's salloc, which
/// waits on for its grant in its own session).
fn release_test_process_naming(word: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(word))
    })
}

/// Issue 38's "`pool release` during a pending successor": a pool created with `--time 3
/// --renew`; the first `reconcile` from 2 minutes before its end asks for the second allocation,
/// which pends on its dependency (`afterany` on the first). `pool release` then ends both, each
/// with proof: the report names the first allocation and the successor with what proved each
/// over, squeue lists neither as pending or running, the successor's salloc (which waited for
/// its grant) is gone, the pool is forgotten and the audit is clean.
#[test]
fn releasing_a_renewing_pool_ends_its_allocation_and_its_pending_successor_with_proof() {
    let _cluster = require_cluster();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("job_name_prefix = \"{PREFIX}\"\n")).unwrap();
    let sd = dir.path().join("state");
    let pool = format!("rl{}", std::process::id() % 100_000);
    let _cleanup = Cleanup(format!("{PREFIX}pool-{pool}-"));
    let created = run(
        &sd,
        &config,
        &[
            "pool", "create", &pool, "--cpus", "1", "--mem", "100M", "--time", "3", "--wait",
            "120", "--renew", "--json",
        ],
    );
    assert_eq!(created.code, 0, "{}", created.stderr);
    let first = json(&created.stdout)["allocation"]["job_id"]
        .as_u64()
        .unwrap();

    // The next allocation is due 2 minutes before the first's end (a minute after its start).
    let deadline = Instant::now() + Duration::from_secs(100);
    let (second, asked) = loop {
        assert!(
            Instant::now() < deadline,
            "the successor was never asked for"
        );
        let r = run(&sd, &config, &["reconcile", "--json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let line = json(&r.stdout)["renewals"][0].clone();
        if line["outcome"] == "asked" {
            break (line["job_id"].as_u64().unwrap(), line);
        }
        assert_eq!(line["outcome"], "not_due", "{line}");
        std::thread::sleep(Duration::from_secs(3));
    };
    assert_ne!(second, first, "{asked}");
    let status = json(&run(&sd, &config, &["pool", "status", &pool, "--json"]).stdout);
    let successor = &status["pools"][0]["renewal"]["successor"];
    assert_eq!(successor["job_id"], second, "{status}");
    assert_eq!(successor["after"], first, "{status}");
    // It pends on its dependency while the first runs.
    let r = json(&run(&sd, &config, &["reconcile", "--json"]).stdout);
    let line = &r["renewals"][0];
    assert_eq!(line["outcome"], "waiting", "{r}");
    assert!(
        line["detail"].as_str().unwrap().contains("PENDING"),
        "{line}"
    );

    let t0 = Instant::now();
    let released = run(&sd, &config, &["pool", "release", &pool, "--json"]);
    assert_eq!(released.code, 0, "{}", released.stderr);
    let r = json(&released.stdout);
    assert_eq!(r["job_id"], first, "{r}");
    assert!(!r["proof"].as_str().unwrap().is_empty(), "{r}");
    assert_eq!(r["successor"]["job_id"], second, "{r}");
    assert!(
        r["successor"]["proof"]
            .as_str()
            .unwrap()
            .contains(&second.to_string()),
        "the proof names the successor: {r}"
    );
    eprintln!("released both in {:?}", t0.elapsed());
    assert_eq!(
        release_test_jobs_not_over(&[first, second]),
        Vec::<String>::new()
    );
    let name = successor["job_name"].as_str().unwrap();
    let t1 = Instant::now();
    while release_test_process_naming(name) {
        assert!(
            t1.elapsed() < Duration::from_secs(15),
            "the successor's salloc ({name}) still runs"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let status = json(&run(&sd, &config, &["pool", "status", "--json"]).stdout);
    assert_eq!(status["pools"], serde_json::json!([]), "{status}");
    // Nothing is asked for a released pool.
    let r = json(&run(&sd, &config, &["reconcile", "--json"]).stdout);
    assert!(r["renewals"].is_null(), "{r}");
    let audit = run(&sd, &config, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);
}
