//! `dispatch reconcile` costs the same number of Slurm calls for 1, 10 or 100 workers: one job
//! listing, one step listing per pool, at most one accounting query.

mod synthetic;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use synthetic::{fake_bin, job_row, step_rows, write_pool_journal as journal_with_workers, JOB};

fn reconcile(state: &Path, scenario: &Value) -> Value {
    let dir = state.parent().unwrap();
    std::fs::write(dir.join("scenario.json"), scenario.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--state-dir")
        .arg(state)
        .args(["reconcile", "--json"])
        .env("PATH", format!("{}:/usr/bin:/bin", fake_bin().display()))
        .env("FAKE_SLURM_SCENARIO", dir.join("scenario.json"))
        .env("FAKE_SLURM_LOG", dir.join("calls.jsonl"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_number_of_slurm_calls_does_not_grow_with_workers() {
    let mut calls = Vec::new();
    for n in [1u32, 10, 100] {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        journal_with_workers(&state, n, |_| true);
        let r = reconcile(
            &state,
            &json!({"squeue": [
                {"match": ["--steps"], "stdout": step_rows(0..n)},
                {"match": [format!("--jobs={JOB}")], "stdout": job_row()},
            ]}),
        );
        assert_eq!(r["observed"], n, "{r}");
        assert_eq!(
            r["resolved"],
            json!([]),
            "running workers were released: {r}"
        );
        calls.push(r["slurm_calls"].as_u64().unwrap());
    }
    assert_eq!(
        calls,
        vec![2, 2, 2],
        "one job listing and one step listing, whatever the count"
    );
}

#[test]
fn unsettled_workers_cost_one_accounting_query_in_all() {
    let mut calls = Vec::new();
    for n in [1u32, 10, 100] {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        // Never seen in a step: only accounting can tell.
        journal_with_workers(&state, n, |_| false);
        let r = reconcile(
            &state,
            &json!({
                "squeue": [
                    {"match": ["--steps"], "stdout": ""},
                    {"match": [format!("--jobs={JOB}")], "stdout": job_row()},
                ],
                "sacct": [{"stdout": ""}],
            }),
        );
        assert_eq!(r["unknown"].as_array().unwrap().len(), n as usize, "{r}");
        calls.push(r["slurm_calls"].as_u64().unwrap());
    }
    assert_eq!(calls, vec![3, 3, 3]);
}

#[test]
fn half_finished_workers_are_released_with_the_same_calls() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    journal_with_workers(&state, 100, |_| true);
    // Only the even steps still run.
    let rows = step_rows((0..100u32).filter(|i| i % 2 == 0));
    let r = reconcile(
        &state,
        &json!({"squeue": [
            {"match": ["--steps"], "stdout": rows},
            {"match": [format!("--jobs={JOB}")], "stdout": job_row()},
        ]}),
    );
    assert_eq!(r["resolved"].as_array().unwrap().len(), 50, "{r}");
    assert_eq!(r["slurm_calls"], 2);
}

/// Issue 10, item 7: a controller that answers every query with exit 0 and nothing (a lying or
/// misconfigured one, the wrong cluster) proves nothing, while the steps may still run.
#[test]
fn empty_answers_alone_release_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    journal_with_workers(&state, 3, |i| i != 2);
    let r = reconcile(
        &state,
        &json!({"squeue": [{"stdout": ""}], "sacct": [{"stdout": ""}]}),
    );
    assert_eq!(r["resolved"], json!([]), "an empty answer released: {r}");
    assert!(
        !r.to_string().contains("allocation is over"),
        "an empty listing was taken for the end of the allocation: {r}"
    );
}

/// The same listing with the allocation in it: a step seen before and now absent has ended
/// (the ordinary path keeps resolving).
#[test]
fn a_listed_job_without_a_step_seen_before_proves_that_step_over() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    journal_with_workers(&state, 2, |_| true);
    let r = reconcile(
        &state,
        &json!({"squeue": [
            {"match": ["--steps"], "stdout": ""},
            {"match": [format!("--jobs={JOB}")], "stdout": job_row()},
        ]}),
    );
    let resolved = r["resolved"].as_array().unwrap();
    assert_eq!(resolved.len(), 2, "{r}");
    for x in resolved {
        let proof = x["proof"].as_str().unwrap();
        assert!(
            proof.contains(&format!("job {JOB} is listed")),
            "the proof names its corroboration: {proof}"
        );
    }
}

/// A pool over n1..n3 whose node n3 fails between the job listing and the step listing
/// (Slurm drops the node from the `--no-kill` job and its step in one move): the worker on n3
/// is released with a proof that names the node, because the job is asked again after the
/// steps; the worker on n1 runs on.
#[test]
fn a_step_gone_with_its_node_after_the_job_listing_is_proven_over_by_the_node() {
    use dispatch::event::pool::*;
    use dispatch::event::Event;
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let job = dispatch::slurm::JobId::new(JOB).unwrap();
    let share = |n: u32| dispatch::slurm::NodeShare {
        name: format!("n{n}"),
        cpus: 4,
        mem_mb: 8000,
        gpus: Vec::new(),
    };
    let mut events = vec![
        Event::PoolAttached(PoolAttached {
            pool: "p".into(),
            allocation: synthetic::allocation("n[1-3]", 12, 24000),
        }),
        Event::PoolNodes(PoolNodes {
            pool: "p".into(),
            job_id: job,
            nodes: (1..=3).map(share).collect(),
        }),
    ];
    for n in [1u32, 3] {
        let id = uuid::Uuid::from_u128(u128::from(n));
        events.extend([
            synthetic::submitted(id, format!("w{n}")),
            Event::WorkerPlaced(WorkerPlaced {
                submission_id: id,
                node: format!("n{n}"),
                gpus: 0,
            }),
            Event::WorkerLaunched(WorkerLaunched {
                submission_id: id,
                srun_pid: 1,
            }),
            Event::WorkerStepObserved(WorkerStepObserved {
                submission_id: id,
                step_id: n,
            }),
        ]);
    }
    let w = dispatch::journal::Writer::open(&state.join("journal"), Default::default()).unwrap();
    w.append(events).unwrap();
    drop(w);
    let row = |nodes: &str| job_row().replace("|vm|", &format!("|{nodes}|"));
    let r = reconcile(
        &state,
        &json!({"squeue": [
            {"match": ["--steps"], "stdout": format!("{JOB}.1|root|0:10|UNLIMITED|2026-11-29T17:00:00|n1|1|p.w1\n")},
            {"match": [format!("--jobs={JOB}")], "times": 1, "stdout": row("n[1-3]")},
            {"match": [format!("--jobs={JOB}")], "stdout": row("n[1-2]")},
        ]}),
    );
    let resolved = r["resolved"].as_array().unwrap();
    assert_eq!(resolved.len(), 1, "only the worker on n3 ends: {r}");
    assert_eq!(resolved[0]["worker"], "w3", "{r}");
    let proof = resolved[0]["proof"].as_str().unwrap();
    assert!(
        proof.starts_with("ended by the failure of node n3: "),
        "{proof}"
    );
}
