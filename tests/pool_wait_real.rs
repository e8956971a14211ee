//! `pool submit --wait` against the real dev cluster (issue 14): 20 tasks through a 4-CPU
//! pool, every one admitted in its turn, none over-reserved, first come first served.

mod real_cluster;
mod support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use real_cluster::{dispatch, dispatch_cmd, json, require_cluster, Allocation};

/// The pids holding a ticket in pool `pool`'s queue.
fn queued_pids(state: &Path, pool: &str) -> Vec<u32> {
    std::fs::read_dir(state.join("pools").join(pool).join("queue"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("t-"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
        .collect()
}

/// Replay the journal: the most CPUs pool workers ever held at once, at any seq.
fn most_cpus_ever_reserved(state: &Path) -> u64 {
    let dump = dispatch(state, &["journal", "dump", "--json"]);
    assert_eq!(dump.code, 0, "{}", dump.stderr);
    let mut held = HashMap::new();
    let mut most = 0;
    for line in dump.stdout.lines() {
        let e = json(line);
        let ev = &e["event"];
        let id = ev["submission_id"].as_str().map(str::to_owned);
        match e["kind"].as_str().unwrap() {
            "WorkerSubmitIntent" => {
                held.insert(id.unwrap(), ev["cpus"].as_u64().unwrap());
            }
            "WorkerTerminal" | "WorkerForgotten" => {
                held.remove(&id.unwrap());
            }
            "WorkerLaunchFailed" if ev["definite"] == true => {
                held.remove(&id.unwrap());
            }
            _ => {}
        }
        most = most.max(held.values().sum());
    }
    most
}

fn intents_in_order(state: &Path) -> Vec<String> {
    let dump = dispatch(state, &["journal", "dump", "--json"]);
    dump.stdout
        .lines()
        .map(json)
        .filter(|e| e["kind"] == "WorkerSubmitIntent")
        .map(|e| e["event"]["worker"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn twenty_short_tasks_through_a_four_cpu_pool_all_run_in_their_turn() {
    let _cluster = require_cluster();
    let alloc = Allocation::salloc(
        "dispatch-pool-wait",
        &["-c", "4", "--mem", "4G", "--time", "20"],
    );
    let state = tempfile::tempdir().unwrap();
    let sd = state.path();
    let attached = dispatch(sd, &["pool", "attach", "p", "--job", &alloc.id.to_string()]);
    assert_eq!(attached.code, 0, "{}", attached.stderr);

    // Each submitter starts once the one before it is queued (or done with its submit), so
    // the order of arrival is known; the waiters seen queued must be served in that order.
    let mut children: Vec<(String, Child)> = Vec::new();
    let mut seen_queued = Vec::new();
    let started = Instant::now();
    for i in 0..20 {
        let name = format!("t{i:02}");
        let child = dispatch_cmd(
            sd,
            &[
                "pool",
                "submit",
                "p",
                "--cpus",
                "1",
                "--mem",
                "100M",
                "--name",
                &name,
                "--wait",
                "--json",
                "--",
                "sh",
                "-c",
                "sleep 1 && echo done",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let pid = child.id();
        children.push((name.clone(), child));
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if queued_pids(sd, "p").contains(&pid) {
                seen_queued.push(name.clone());
                break;
            }
            let (_, c) = children.last_mut().unwrap();
            if c.try_wait().unwrap().is_some() || Instant::now() > until {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    for (name, child) in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            json(&String::from_utf8_lossy(&out.stdout))["state"],
            "running"
        );
    }
    eprintln!("20 submits returned after {:?}", started.elapsed());

    // The last ones are released by a reconcile once their steps are over.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let r = dispatch(sd, &["reconcile", "--json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let st = json(&dispatch(sd, &["pool", "status", "p", "--json"]).stdout);
        if st["pools"][0]["reserved"]["cpus"] == 0 {
            let workers = st["pools"][0]["workers"].as_array().unwrap();
            assert_eq!(workers.len(), 20, "{st}");
            for w in workers {
                assert_eq!(w["state"], "released", "{w}");
                let out = sd
                    .join("pools/p/workers")
                    .join(w["submission_id"].as_str().unwrap())
                    .join("evidence/stdout");
                assert_eq!(std::fs::read_to_string(&out).unwrap(), "done\n", "{w}");
            }
            break;
        }
        assert!(Instant::now() < until, "not all released: {st}");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        most_cpus_ever_reserved(sd) <= 4,
        "the journal reserved more than the 4 CPUs"
    );
    assert!(
        seen_queued.len() >= 2,
        "fewer than two submitters were seen waiting: {seen_queued:?}"
    );
    let order = intents_in_order(sd);
    let served: Vec<&String> = order.iter().filter(|w| seen_queued.contains(w)).collect();
    let arrived: Vec<&String> = seen_queued.iter().collect();
    assert_eq!(served, arrived, "waiters not served in arrival order");
}

/// Issue 14: `submit --dry-run` against the real controller: `sbatch --test-only` says where and
/// when the job would start, a placement Slurm cannot satisfy is exit 1, and no job exists.
#[test]
fn a_submit_dry_run_asks_the_real_controller_and_creates_no_job() {
    let _cluster = require_cluster();
    let state = tempfile::tempdir().unwrap();
    let sd = state.path();
    let ok = dispatch(
        sd,
        &[
            "submit",
            "--time",
            "10",
            "--cpus",
            "1",
            "--mem",
            "100M",
            "--name",
            "dry",
            "--dry-run",
            "--json",
            "--",
            "true",
        ],
    );
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let plan = json(&ok.stdout);
    assert!(!plan["would_start"].as_str().unwrap().is_empty(), "{plan}");
    assert!(!plan["nodes"].as_str().unwrap().is_empty(), "{plan}");
    let name = plan["job_name"].as_str().unwrap().to_owned();
    let refused = dispatch(
        sd,
        &[
            "submit",
            "--time",
            "10",
            "--cpus",
            "1",
            "--mem",
            "999999G",
            "--dry-run",
            "--",
            "true",
        ],
    );
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(refused.stderr.contains("--test-only"), "{}", refused.stderr);
    let listed = std::process::Command::new("squeue")
        .args([
            "--me",
            "--states=all",
            "--noheader",
            "--format=%j",
            &format!("--name={name}"),
        ])
        .output()
        .unwrap();
    assert!(
        listed.stdout.is_empty(),
        "a dry run made a job: {:?}",
        listed
    );
    assert!(
        std::fs::read_dir(sd).unwrap().next().is_none(),
        "a dry run wrote state"
    );
}
