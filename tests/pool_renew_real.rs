//! Issue 38 on the real cluster: a pool created with `--time 3 --renew-max 3` holding two
//! counter workers that asked `--continue 2`. `reconcile`, run every few seconds as a user's
//! scrontab or `--watch` would, asks for each next allocation before the last ends
//! (`--dependency=afterany`) and makes it the pool's only once the last is proven over; the
//! workers checkpoint at their early-shutdown deadline and go on in the next allocation from
//! what they published. Once both are over, `reconcile` ends the old allocation itself rather
//! than leave it idle to its time limit; every cause stays the time limit. About five minutes
//! (303 s on 22.05 and 24.11 here; seven before the early end): `tools/test` runs it in a long
//! shard.

mod real_cluster;
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use real_cluster::{
    add_counter_source, assert_counted_chain, assert_started_after_end, cancel_jobs_named,
    dispatch_with_config, json, published_subjects, require_cluster, Run, COUNTER,
};

const PREFIX: &str = "dtrn-";

struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        cancel_jobs_named(&self.0);
    }
}

fn run(sd: &Path, config: &Path, args: &[&str]) -> Run {
    dispatch_with_config(sd, config, args)
}

/// Short budgets, so a 3-minute allocation leaves a run before the shutdown window; a grace
/// long enough for the payload's `git commit` on a loaded machine (with 5 s, one CI run's
/// third generation was killed mid-commit: its count saved, its commit not).
const BUDGETS: [&str; 8] = [
    "--publication-timeout",
    "5",
    "--native-state-budget",
    "5",
    "--cleanup-budget",
    "5",
    "--grace",
    "20",
];

/// What one `reconcile` did that this test follows.
#[derive(Default, Debug)]
struct Seen {
    asked: Vec<u64>,
    renewed: Vec<u64>,
    continued: usize,
}

impl Seen {
    fn note(&mut self, r: &serde_json::Value) {
        for line in r["renewals"].as_array().into_iter().flatten() {
            let job = line["job_id"].as_u64();
            match (line["outcome"].as_str(), job) {
                (Some("asked"), Some(j)) => self.asked.push(j),
                (Some("renewed"), Some(j)) => self.renewed.push(j),
                _ => {}
            }
        }
        for line in r["continued"].as_array().into_iter().flatten() {
            if line["outcome"] == "continued" {
                self.continued += 1;
            }
        }
    }
}

#[test]
fn a_renewing_pool_lives_three_allocations_one_at_a_time_and_its_workers_count_on() {
    let _cluster = require_cluster();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("job_name_prefix = \"{PREFIX}\"\n")).unwrap();
    let sd = dir.path().join("state");
    let pool = format!("rn{}", std::process::id() % 100_000);
    let _cleanup = Cleanup(format!("{PREFIX}pool-{pool}-"));
    let repo = add_counter_source(&sd, Some(&config), dir.path());
    let created = run(
        &sd,
        &config,
        &[
            "pool",
            "create",
            &pool,
            "--cpus",
            "2",
            "--mem",
            "400M",
            "--time",
            "3",
            "--wait",
            "120",
            "--renew-max",
            "3",
            "--json",
        ],
    );
    assert_eq!(created.code, 0, "{}", created.stderr);
    let first = json(&created.stdout)["allocation"]["job_id"]
        .as_u64()
        .unwrap();
    let workers = ["a", "b"].map(|w| format!("count-{w}-{pool}"));
    for w in &workers {
        let mut args = vec![
            "pool",
            "submit",
            &pool,
            "--cpus",
            "1",
            "--mem",
            "100M",
            "--name",
            w,
            "--continue",
            "2",
            "--source",
            "src",
            "--json",
        ];
        args.extend_from_slice(&BUDGETS);
        args.extend_from_slice(&["--", "sh", "-c", COUNTER]);
        let r = run(&sd, &config, &args);
        assert_eq!(r.code, 0, "pool submit {w}: {}", r.stderr);
    }

    // Reconcile every 5 s until the pool is on its third allocation and both workers were
    // continued there (two 3-minute allocations, and margins for Slurm's scheduling).
    let deadline = Instant::now() + Duration::from_secs(9 * 60);
    let mut seen = Seen::default();
    while !(seen.renewed.len() == 2 && seen.continued == 4) {
        assert!(
            Instant::now() < deadline,
            "not renewed twice in time: {seen:?}"
        );
        let r = run(&sd, &config, &["reconcile", "--json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        seen.note(&json(&r.stdout));
        std::thread::sleep(Duration::from_secs(5));
    }
    assert_eq!(
        seen.asked, seen.renewed,
        "each successor asked once: {seen:?}"
    );
    let status = json(&run(&sd, &config, &["pool", "status", &pool, "--json"]).stdout);
    let p = &status["pools"][0];
    assert_eq!(p["allocation"]["job_id"], seen.renewed[1], "{p}");
    assert_eq!(p["renewal"]["generation"], 3, "{p}");
    // Never two allocations at once: Slurm started each no earlier than the last ended.
    let jobs = [first, seen.renewed[0], seen.renewed[1]];
    for pair in jobs.windows(2) {
        assert_started_after_end(pair[1], pair[0]);
    }
    ended_early_for_the_time_limit(&sd, &config, &jobs[..2]);

    // The release stops the third generations (they checkpoint) and ends the allocation.
    // Without `--grace` each gets its own (20 s) for its `git commit` (issue 38, what is left
    // (3): the release once gave 10 s, and the commit was KILLed on a loaded machine).
    let released = run(&sd, &config, &["pool", "release", &pool, "--json"]);
    assert_eq!(released.code, 0, "{}", released.stderr);
    let dump = run(&sd, &config, &["journal", "dump", "--json"]);
    let graces: Vec<u64> = (dump.stdout.lines().map(json))
        .filter(|e| e["kind"] == "WorkerStopIntent")
        .map(|e| e["event"]["grace_s"].as_u64().unwrap())
        .collect();
    assert_eq!(graces, [20, 20], "the release's graces");
    let r = json(&released.stdout);
    assert_eq!(r["job_id"], seen.renewed[1], "{r}");
    assert!(!r["proof"].as_str().unwrap().is_empty(), "{r}");
    for w in &workers {
        counted_across_three_generations(&sd, &config, &pool, w, &repo);
    }
    let audit = run(&sd, &config, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);
}

/// The journal's events of `kind`, in order.
fn events_of(sd: &Path, config: &Path, kind: &str) -> Vec<serde_json::Value> {
    let r = run(sd, config, &["journal", "dump", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
        .lines()
        .map(json)
        .filter(|e| e["kind"] == kind)
        .map(|e| e["event"].clone())
        .collect()
}

/// Issue 38's renewal gap: each of `old` (the first two allocations) was ended by dispatch
/// once both workers had stopped at their deadline, not left to its time limit; each renewal's
/// cause is still the time limit (proof: dispatch's end, Slurm's CANCELLED), and so is each
/// continuation's (the worker's own deadline SIGTERM).
fn ended_early_for_the_time_limit(sd: &Path, config: &Path, old: &[u64]) {
    let intents = events_of(sd, config, "PoolAllocationEndIntent");
    let ended: Vec<u64> = intents
        .iter()
        .filter_map(|e| e["job_id"].as_u64())
        .collect();
    assert_eq!(ended, old, "{intents:?}");
    for r in events_of(sd, config, "PoolRenewed") {
        assert_eq!(r["cause"], "time-limit", "{r}");
        let proof = r["proof"].as_str().unwrap();
        assert!(proof.contains("dispatch ended allocation"), "{r}");
    }
    let continued = events_of(sd, config, "WorkerContinued");
    assert_eq!(continued.len(), 4, "{continued:?}");
    for c in continued {
        assert_eq!(c["cause"], "time-limit", "{c}");
    }
}

/// Worker `w`'s chain: three generations in `inspect` and in the report, its last count the
/// sum of what each generation counted, every generation's commit in its last publication.
fn counted_across_three_generations(sd: &Path, config: &Path, pool: &str, w: &str, repo: &Path) {
    let r = run(sd, config, &["inspect", w, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let last = json(&r.stdout)["chain"][2]["submission_id"]
        .as_str()
        .expect("a third generation")
        .parse()
        .unwrap();
    let dirs = dispatch::worker::dirs::WorkerDirs::new(&sd.join("pools"), pool, last);
    assert_counted_chain(&|args| run(sd, config, args), w, &dirs.state, 3);
    let published = sd
        .join("pools")
        .join(pool)
        .join("published")
        .join(format!("{w}-{last}"));
    let log = published_subjects(repo, &published);
    let subjects: Vec<&str> = log.lines().collect();
    // The generations the time limit ended committed before their checkpoint; the third,
    // stopped by the release, did too, unless the stop's grace ran out first: with the
    // release's old default 10 s, on a loaded machine (seen twice on 24.11), its `git commit`
    // was KILLed after it had saved its count and written its line; it now has its own 20 s,
    // but a machine loaded enough could still outlast them. Then its supervisor records the
    // KILL, and the line is in the publication's patch: the work is never lost.
    let patch = std::fs::read_to_string(published.join("workspace.patch")).unwrap_or_default();
    let evidence = dirs.evidence;
    let stderr = std::fs::read_to_string(evidence.join("stderr")).unwrap_or_default();
    match subjects.as_slice() {
        ["generation 3", "generation 2", "generation 1", "first"] => {}
        ["generation 2", "generation 1", "first"] => {
            let own = dispatch::worker::report::read(&evidence).unwrap().unwrap();
            let killed = own
                .signals
                .iter()
                .any(|x| x.signal == "KILL" && x.reason == "grace");
            assert!(
                killed && patch.contains("+generation 3"),
                "{w}: generation 3 neither committed nor KILLed after the grace with its line in \
                 the patch: {log}\npatch: {patch}\nstderr: {stderr}\nsignals: {:?}",
                own.signals
            );
        }
        _ => panic!("{w}: {log}\npatch: {patch}\nstderr: {stderr}"),
    }
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
