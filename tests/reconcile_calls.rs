//! `dispatch reconcile` costs the same number of Slurm calls for 1, 10 or 100 workers: one job
//! listing, one step listing per pool, at most one accounting query.

use std::path::{Path, PathBuf};
use std::process::Command;

use dispatch::event::{Event, Micros};
use dispatch::journal::{Options, Writer};
use dispatch::state::pool::*;
use serde_json::{json, Value};
use uuid::Uuid;

fn fake_bin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/fake-slurm/bin")
}

const JOB: u64 = 900;

/// A pool on job 900 with `n` workers: those with `step` Some were seen in that step.
fn journal_with_workers(state: &Path, n: u32, seen: impl Fn(u32) -> bool) {
    let w = Writer::open(&state.join("journal"), Options::default()).unwrap();
    let now = Micros::now().secs();
    let mut events = vec![Event::PoolAttached(PoolAttached {
        pool: "p".into(),
        allocation: Allocation {
            job_id: JOB,
            node: "vm".into(),
            user: "root".into(),
            start_time: Micros::from_secs(now - 60),
            end_time: Micros::from_secs(now + 3600),
            cpus: 256,
            mem_mb: 1 << 20,
            partition: "debug".into(),
            account: "dev".into(),
            qos: "normal".into(),
        },
    })];
    for i in 0..n {
        let id = Uuid::from_u128(u128::from(i) + 1);
        events.push(Event::WorkerSubmitIntent(WorkerSubmitIntent {
            pool: "p".into(),
            worker: format!("w{i}"),
            submission_id: id,
            cpus: 1,
            mem_mb: 10,
            publication_timeout_s: 30,
            command: vec!["true".into()],
        }));
        events.push(Event::WorkerLaunched(WorkerLaunched {
            submission_id: id,
            srun_pid: 1,
        }));
        if seen(i) {
            events.push(Event::WorkerStepObserved(WorkerStepObserved {
                submission_id: id,
                step_id: i,
            }));
        }
    }
    w.append(events).unwrap();
}

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

fn job_row() -> String {
    format!("{JOB}|{JOB}|RUNNING|debug|dev|normal|root|1|8|vm|59:00|1:00:00|2026-11-29T17:00:00|2026-11-29T18:00:00|None|alloc\n")
}

/// Steps 0..n-1 running, named after their workers (`%i|%u|%M|%l|%S|%N|%A|%j`).
fn step_rows(n: u32) -> String {
    (0..n)
        .map(|i| format!("{JOB}.{i}|root|0:10|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w{i}\n"))
        .collect()
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
                {"match": ["--steps"], "stdout": step_rows(n)},
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
    let rows: String = (0..100u32)
        .filter(|i| i % 2 == 0)
        .map(|i| format!("{JOB}.{i}|root|0:10|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w{i}\n"))
        .collect();
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
