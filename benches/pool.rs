//! Pool benchmarks (`cargo bench --bench pool`), each reported against a limit measured in the
//! same run:
//! - `pool submit` on the real dev cluster vs the bare step launch it wraps
//!   (`srun --jobid=J -n1 -c1 --mem=10M true`), medians over several runs;
//! - 20 × `sleep 1` through a 4-CPU pool with `pool submit --wait` vs bare `srun … sleep 1 &`
//!   (wall time, target 1.1×), and a trivial worker's submit → released latency;
//!   `DISPATCH_BENCH_ONLY_WAIT=1` runs only these;
//! - `reconcile` with 1, 10 and 100 workers (fake Slurm): Slurm calls and wall time.
//!
//! Needs the dev cluster (`tools/slurm-dev-cluster start`). `DISPATCH_BENCH_QUICK=1` does
//! fewer rounds.
//!
//! Where `wait_vs_bare`'s time goes, per generation of 4 tasks (medians of the 16 hand-overs
//! of one round, from the journals' timestamps and slurmd's log; 2 shared cores at load 8–10,
//! so every part swings by tens of ms from round to round):
//!
//! | hand-over step (payload exit → next payload start)     | before | after |
//! |--------------------------------------------------------|-------:|------:|
//! | payload exit → supervisor finished (settle, publish, cleanup) |  70 |  41–46 |
//! | supervisor finished → slurmstepd done (Slurm)          |     18 |  18–28 |
//! | slurmstepd done → budget released (notice, proof, release) |  45 |  42–60 |
//! | released → next receipt (reload, scontrol)             |     21 |   2–7 |
//! | receipt → srun started                                 |     10 |   8–9 |
//! | srun started → supervisor's first record (Slurm, exec) |    101 | 98–124 |
//! | supervisor's first record → payload started            |     13 |  11–16 |
//! | total                                                  |    285 | 250–300 |
//!
//! Bare srun hands over in slurmctld itself: a step's end to the next pending step's launch
//! took 8 ms (slurmd's log), so bare pays only the step launch, ~100 ms a generation. What
//! dispatch adds on top cannot go below what the rules need: the supervisor's settle,
//! publication (a dozen fsyncs, now in flight together) and cleanup inside the step; the
//! step's end proven by a step and a job listing (two squeue calls, 15–80 ms under this load,
//! asked once the worker's srun has exited, so they rarely fail and repeat); one commit to
//! release, one to take the room; the srun's step creation. That is ~150 ms a generation over
//! 4 generations, ~0.6 s on ~5.4–5.7 s: 1.10x is within reach when the machine is not
//! saturated, not at load 8–10. Measured 2026-12-01 (2 shared cores): this bench, 3 rounds,
//! 1.15/1.13/1.11 (median 1.13); alternating rounds of the old and the new binary in the
//! same minutes (a script of this bench's steps) old 1.19/1.25/1.17, 1.39/1.09, 1.13 against
//! new 1.07/1.12, 1.05 once the head stopped doing a full look every ms while it watched an
//! srun. The target this design defends: 1.10x on a machine not saturated by other work.

#[path = "timing/mod.rs"]
mod timing;
use timing::{median, run_ok, Salloc};

#[path = "../tests/synthetic/mod.rs"]
mod synthetic;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn dispatch(state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.arg("--state-dir").arg(state);
    c
}

fn salloc() -> Salloc {
    timing::salloc(
        "dispatch-bench-pool",
        &["-c", "2", "--mem", "1G", "--time", "20"],
    )
}

fn submit_overhead(rounds: usize) -> (Duration, Duration) {
    let alloc = salloc();
    let state = tempfile::tempdir().unwrap();
    run_ok(dispatch(state.path()).args(["pool", "attach", "b", "--job", &alloc.0.to_string()]));
    let job = alloc.0.to_string();
    let mut raw = Vec::new();
    let mut submit = Vec::new();
    for i in 0..rounds {
        raw.push(run_ok(Command::new("srun").args([
            "--jobid",
            &job,
            "-n1",
            "-c1",
            "--mem=10M",
            "true",
        ])));
        submit.push(run_ok(dispatch(state.path()).args([
            "pool",
            "submit",
            "b",
            "--cpus",
            "1",
            "--mem",
            "10M",
            "--name",
            &format!("w{i}"),
            "--",
            "true",
        ])));
        // Release the finished worker so that the budget never refuses. The step may still
        // be running (or not yet gone from squeue) when submit returns, so one reconcile is
        // not enough: reconcile until it records the worker's end, within a bound.
        reconcile_until_released(state.path(), &format!("w{i}"));
    }
    (median(raw), median(submit))
}

/// How long a finished `true` step may take to be proven gone.
const RELEASE_WITHIN: Duration = Duration::from_secs(60);

/// Run `dispatch reconcile` until one run resolves `worker` (records its terminal proof, which
/// frees its budget). Panics after [`RELEASE_WITHIN`]: a bench that cannot release its workers
/// would measure refusals.
fn reconcile_until_released(state: &Path, worker: &str) {
    let until = Instant::now() + RELEASE_WITHIN;
    loop {
        let out = dispatch(state)
            .args(["reconcile", "--json"])
            .output()
            .expect("spawn");
        assert!(
            out.status.success(),
            "reconcile: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        let resolved = r["resolved"].as_array().into_iter().flatten();
        if resolved
            .into_iter()
            .any(|w| w["worker"].as_str() == Some(worker))
        {
            return;
        }
        assert!(
            Instant::now() < until,
            "worker {worker} not released within {RELEASE_WITHIN:?}: {r}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn reconcile_cost(n: u32) -> (u64, Duration) {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    synthetic::write_pool_journal(&state, n, |_| true);
    let scenario = serde_json::json!({"squeue": [
        {"match": ["--steps"], "stdout": synthetic::step_rows(0..n)},
        {"match": [format!("--jobs={}", synthetic::JOB)], "stdout": synthetic::job_row()},
    ]});
    std::fs::write(tmp.path().join("s.json"), scenario.to_string()).unwrap();
    let t = Instant::now();
    let out = dispatch(&state)
        .args(["reconcile", "--json"])
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", synthetic::fake_bin().display()),
        )
        .env("FAKE_SLURM_SCENARIO", tmp.path().join("s.json"))
        .output()
        .unwrap();
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (r["slurm_calls"].as_u64().unwrap(), took)
}

/// A 4-CPU allocation for the waiting bench.
fn salloc_four() -> Salloc {
    timing::salloc(
        "dispatch-bench-wait",
        &["-c", "4", "--mem", "4G", "--time", "20"],
    )
}

/// Steps of `job` still listed whose name starts with `prefix`.
fn steps_named(job: u32, prefix: &str) -> usize {
    let out = Command::new("squeue")
        .args([
            "--steps",
            "--noheader",
            "--format=%j",
            &format!("--jobs={job}"),
        ])
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim().starts_with(prefix))
        .count()
}

const TASKS: usize = 20;

/// 20 × `sleep 1` through a 4-CPU allocation: bare `srun -n1 -c1 sleep 1 &` (Slurm queues the
/// steps itself) against `dispatch pool submit --wait` (all started at once, like the sruns).
/// Wall time until every task has run: the sruns exited / no worker step is listed any more.
/// Also: until every worker is released (a reconcile for the last four, which no waiter
/// releases).
fn wait_vs_bare() -> (Duration, Duration, Duration) {
    let alloc = salloc_four();
    let job = alloc.0.to_string();
    let t = Instant::now();
    let bare: Vec<_> = (0..TASKS)
        .map(|_| {
            Command::new("srun")
                .args([
                    "--jobid",
                    &job,
                    "-n1",
                    "-c1",
                    "--mem=100M",
                    "-J",
                    "bare",
                    "sleep",
                    "1",
                ])
                .spawn()
                .expect("srun")
        })
        .collect();
    for mut c in bare {
        assert!(c.wait().unwrap().success());
    }
    let bare = t.elapsed();

    let state = tempfile::tempdir().unwrap();
    run_ok(dispatch(state.path()).args(["pool", "attach", "b", "--job", &job]));
    let t = Instant::now();
    let submits: Vec<_> = (0..TASKS)
        .map(|i| {
            dispatch(state.path())
                .args([
                    "pool",
                    "submit",
                    "b",
                    "--cpus",
                    "1",
                    "--mem",
                    "100M",
                    "--name",
                    &format!("t{i}"),
                    "--wait",
                    "--",
                    "sleep",
                    "1",
                ])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("dispatch")
        })
        .collect();
    for mut c in submits {
        assert!(c.wait().unwrap().success());
    }
    while steps_named(alloc.0, "b.") > 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let waited = t.elapsed();
    for i in TASKS - 8..TASKS {
        reconcile_until_released_or_done(state.path(), &format!("t{i}"));
    }
    let released = t.elapsed();
    (bare, waited, released)
}

/// Like [`reconcile_until_released`], but a worker released earlier (by a waiter) is done.
fn reconcile_until_released_or_done(state: &Path, worker: &str) {
    let out = dispatch(state)
        .args(["pool", "status", "b", "--json"])
        .output()
        .expect("spawn");
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let released = st["pools"][0]["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|w| w["name"].as_str() == Some(worker) && w["state"] == "released");
    if !released {
        reconcile_until_released(state, worker);
    }
}

/// A trivial worker from `pool submit` to its release by `reconcile` (run at once, again every
/// 10 ms until it releases), against a bare `srun true`: medians.
fn submit_to_released(rounds: usize) -> (Duration, Duration, Duration) {
    let alloc = salloc();
    let state = tempfile::tempdir().unwrap();
    let job = alloc.0.to_string();
    run_ok(dispatch(state.path()).args(["pool", "attach", "r", "--job", &job]));
    let (mut raw, mut submitted, mut released) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        raw.push(run_ok(Command::new("srun").args([
            "--jobid",
            &job,
            "-n1",
            "-c1",
            "--mem=10M",
            "true",
        ])));
        let t = Instant::now();
        run_ok(dispatch(state.path()).args([
            "pool",
            "submit",
            "r",
            "--cpus",
            "1",
            "--mem",
            "10M",
            "--name",
            &format!("w{i}"),
            "--",
            "true",
        ]));
        submitted.push(t.elapsed());
        loop {
            let out = dispatch(state.path())
                .args(["reconcile", "--json"])
                .output()
                .expect("spawn");
            let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            if r["resolved"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|w| w["worker"].as_str() == Some(&format!("w{i}")))
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        released.push(t.elapsed());
    }
    (median(raw), median(submitted), median(released))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::var_os("DISPATCH_BENCH_QUICK").is_some();
    let rounds = if quick { 3 } else { 15 };
    let wait_rounds = if quick { 1 } else { 3 };
    let mut ratios = Vec::new();
    for _ in 0..wait_rounds {
        let (bare, waited, released) = wait_vs_bare();
        let ratio = waited.as_secs_f64() / bare.as_secs_f64();
        println!(
            "{TASKS} x sleep 1 through 4 CPUs: bare srun & {:.0} ms   pool submit --wait {:.0} ms   \
             ratio {ratio:.2}x (target <= 1.10x)   all released {:.0} ms",
            bare.as_secs_f64() * 1e3,
            waited.as_secs_f64() * 1e3,
            released.as_secs_f64() * 1e3
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    let wait_ratio = ratios[ratios.len() / 2];
    let (raw_true, submitted, released) = submit_to_released(if quick { 3 } else { 9 });
    println!(
        "trivial worker (median): srun true {:.1} ms   pool submit {:.1} ms   submit -> released {:.1} ms",
        raw_true.as_secs_f64() * 1e3,
        submitted.as_secs_f64() * 1e3,
        released.as_secs_f64() * 1e3
    );
    if std::env::var_os("DISPATCH_BENCH_ONLY_WAIT").is_some() {
        println!(
            "{}",
            serde_json::json!({
                "bench": "pool-wait",
                "wait_over_bare": wait_ratio,
                "srun_true_ms": raw_true.as_secs_f64() * 1e3,
                "submit_ms": submitted.as_secs_f64() * 1e3,
                "submit_to_released_ms": released.as_secs_f64() * 1e3,
            })
        );
        return;
    }
    let (raw, submit) = submit_overhead(rounds);
    let ratio = submit.as_secs_f64() / raw.as_secs_f64();
    println!("pool submit vs bare srun step launch (median of {rounds}, real cluster):");
    println!(
        "  srun true: {:.1} ms   dispatch pool submit: {:.1} ms   ratio {:.2}x   overhead {:+.1} ms",
        raw.as_secs_f64() * 1e3,
        submit.as_secs_f64() * 1e3,
        ratio,
        (submit.as_secs_f64() - raw.as_secs_f64()) * 1e3
    );
    println!("reconcile (fake Slurm): Slurm calls and wall time by number of workers:");
    let mut summary = Vec::new();
    for n in [1, 10, 100] {
        let (calls, took) = reconcile_cost(n);
        println!(
            "  {n:>4} workers: {calls} calls, {:.1} ms",
            took.as_secs_f64() * 1e3
        );
        summary.push(
            serde_json::json!({"workers": n, "slurm_calls": calls, "ms": took.as_secs_f64() * 1e3}),
        );
    }
    let flat = summary
        .windows(2)
        .all(|w| w[0]["slurm_calls"] == w[1]["slurm_calls"]);
    println!(
        "  calls constant in the number of workers: {}",
        if flat { "PASS" } else { "FAIL" }
    );
    println!(
        "{}",
        serde_json::json!({
            "bench": "pool",
            "submit_ms": submit.as_secs_f64() * 1e3,
            "srun_ms": raw.as_secs_f64() * 1e3,
            "submit_over_srun": ratio,
            "wait_over_bare": wait_ratio,
            "submit_to_released_ms": released.as_secs_f64() * 1e3,
            "reconcile": summary,
        })
    );
}
