//! Crash tests on the real cluster: `pool submit` and `pool stop-worker` are killed at every
//! intent/effect boundary (a failpoint aborts the process), then `dispatch reconcile` runs.
//! Afterwards: no step runs that the journal does not know, no budget is lost or counted twice,
//! and nothing was launched twice.

mod real_cluster;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use real_cluster::{dispatch, dispatch_cmd, json, require_cluster, squeue_steps, Allocation};

/// Run dispatch with `failpoint` (`name` or `name@K` for the K-th hit) armed to abort.
fn crash(state: &Path, failpoint: &str, args: &[&str]) {
    let spec = match failpoint.split_once('@') {
        Some((name, k)) => format!("{name}=abort@{k}"),
        None => format!("{failpoint}=abort"),
    };
    let out = dispatch_cmd(state, args)
        .env("DISPATCH_FAILPOINTS", spec)
        .output()
        .unwrap();
    // abort(3) ends the process with SIGABRT: no exit code.
    assert_eq!(
        out.status.code(),
        None,
        "{failpoint} did not fire: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Worker names with a submission intent in the journal, and how often each was submitted.
fn submitted(state: &Path) -> BTreeMap<String, usize> {
    let dump = dispatch(state, &["journal", "dump", "--json"]);
    assert_eq!(dump.code, 0, "{}", dump.stderr);
    let mut names = BTreeMap::new();
    for line in dump.stdout.lines() {
        let e = json(line);
        if e["kind"] == "WorkerSubmitIntent" {
            *names
                .entry(e["event"]["worker"].as_str().unwrap().to_owned())
                .or_insert(0) += 1;
        }
    }
    names
}

/// The invariants every crash must leave intact, checked after `dispatch reconcile`.
fn check_invariants(state: &Path, job: u32, pool: &str) {
    let r = dispatch(state, &["reconcile", "--json"]);
    assert_eq!(r.code, 0, "reconcile failed: {}", r.stderr);
    let journal_workers = submitted(state);
    let steps = squeue_steps(job);
    // Nothing launched twice: one step per worker name at most.
    let unique: BTreeSet<_> = steps.iter().collect();
    assert_eq!(unique.len(), steps.len(), "a worker runs twice: {steps:?}");
    let status = json(&dispatch(state, &["pool", "status", pool, "--json"]).stdout);
    let p = &status["pools"][0];
    let holding: BTreeMap<String, (u64, u64)> = p["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| !matches!(w["state"].as_str(), Some("released" | "failed")))
        .map(|w| {
            (
                w["name"].as_str().unwrap().to_owned(),
                (w["cpus"].as_u64().unwrap(), w["mem_mb"].as_u64().unwrap()),
            )
        })
        .collect();
    for step in &steps {
        let worker = step
            .strip_prefix(&format!("{pool}."))
            .unwrap_or_else(|| panic!("unknown step {step}"));
        // No step runs that the journal does not know, and every running step holds budget.
        assert!(
            journal_workers.contains_key(worker),
            "step {step} is not in the journal"
        );
        assert!(
            holding.contains_key(worker),
            "step {step} runs but its budget was released"
        );
    }
    // Budget is counted once per holding worker, never twice.
    let sum = holding
        .values()
        .fold((0, 0), |(c, m), (wc, wm)| (c + wc, m + wm));
    assert_eq!(
        (
            p["reserved"]["cpus"].as_u64().unwrap(),
            p["reserved"]["mem_mb"].as_u64().unwrap()
        ),
        sum
    );
    assert!(
        journal_workers.values().all(|&n| n == 1),
        "a worker was submitted twice: {journal_workers:?}"
    );
    let v = json(&dispatch(state, &["journal", "verify", "--json"]).stdout);
    assert!(matches!(v["status"].as_str(), Some("clean")), "{v}");
    // And the whole history keeps the rules: no effect without intent, no double release.
    let audit = dispatch(state, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);
}

#[test]
fn submit_crashes_at_every_boundary() {
    let _cluster = require_cluster();
    let alloc = Allocation::salloc(
        "dispatch-crash-submit",
        &["-c", "4", "--mem", "2G", "--time", "20"],
    );
    let state = tempfile::tempdir().unwrap();
    let sd = state.path();
    assert_eq!(
        dispatch(sd, &["pool", "attach", "c", "--job", &alloc.id.to_string()]).code,
        0
    );
    for (i, fp) in [
        "pool-submit-after-intent",
        "pool-submit-before-launch",
        "pool-submit-after-launch",
        "journal-before-sync@2",
    ]
    .iter()
    .enumerate()
    {
        let name = format!("w{i}");
        crash(
            sd,
            fp,
            &[
                "pool", "submit", "c", "--cpus", "1", "--mem", "100M", "--name", &name, "--",
                "sleep", "300",
            ],
        );
        check_invariants(sd, alloc.id, "c");
    }
    // A worker launched before the crash was found by reconcile and holds its step.
    let status = json(&dispatch(sd, &["pool", "status", "c", "--json"]).stdout);
    let w2 = status["pools"][0]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "w2")
        .cloned()
        .unwrap();
    assert_eq!(w2["state"], "running", "{w2}");
    assert!(
        w2["step_id"].is_string(),
        "reconcile did not find the step launched before the crash: {w2}"
    );
    // Intents without a launch keep their budget: 4 crashed submissions hold all 4 CPUs, so one
    // more is refused rather than overbooked.
    let r = dispatch(
        sd,
        &[
            "pool", "submit", "c", "--cpus", "1", "--mem", "100M", "--name", "extra", "--", "true",
        ],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
}

#[test]
fn stop_worker_crashes_at_every_boundary() {
    let _cluster = require_cluster();
    let alloc = Allocation::salloc(
        "dispatch-crash-stop",
        &["-c", "3", "--mem", "1G", "--time", "20"],
    );
    let state = tempfile::tempdir().unwrap();
    let sd = state.path();
    assert_eq!(
        dispatch(sd, &["pool", "attach", "s", "--job", &alloc.id.to_string()]).code,
        0
    );
    for (i, fp) in [
        "pool-stop-after-intent",
        "pool-stop-after-term",
        "pool-stop-after-cancel",
    ]
    .iter()
    .enumerate()
    {
        let name = format!("w{i}");
        // A payload that ignores SIGTERM, and a supervisor that lingers after killing it at the
        // stop's grace, so that the final cancel is needed.
        let r = real_cluster::run(
            dispatch_cmd(
                sd,
                &[
                    "pool",
                    "submit",
                    "s",
                    "--cpus",
                    "1",
                    "--mem",
                    "100M",
                    "--name",
                    &name,
                    "--json",
                    "--",
                    "sh",
                    "-c",
                    "trap '' TERM; touch \"$DISPATCH_EVIDENCE_DIR/ready\"; sleep 300",
                ],
            )
            .env(
                "DISPATCH_FAILPOINTS",
                "worker:supervisor-before-exit-record=sleep:120000",
            )
            .output()
            .unwrap(),
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        // Stop only once the payload ignores SIGTERM, or the TERM could beat the trap.
        let id = json(&r.stdout)["submission_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let ready = sd.join("pools/s/workers").join(id).join("evidence/ready");
        let t0 = std::time::Instant::now();
        while !ready.exists() {
            assert!(
                t0.elapsed().as_secs() < 20,
                "worker {name} never became ready"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        crash(sd, fp, &["pool", "stop-worker", "s", &name, "--grace", "1"]);
        check_invariants(sd, alloc.id, "s");
        // Stopping again finishes the job, whatever state the crash left.
        let again = dispatch(
            sd,
            &["pool", "stop-worker", "s", &name, "--grace", "1", "--json"],
        );
        if again.code == 0 {
            assert_eq!(json(&again.stdout)["state"], "released");
        } else {
            // Reconcile already proved the step over and released the worker.
            assert!(again.stderr.contains("no worker"), "{}", again.stderr);
        }
        check_invariants(sd, alloc.id, "s");
        assert!(
            !squeue_steps(alloc.id).contains(&format!("s.{name}")),
            "{name} still runs"
        );
    }
}
