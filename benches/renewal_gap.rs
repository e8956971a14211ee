//! The gap a pool's renewal leaves (issue 38, "Performance"), on the real dev cluster: from
//! the moment the old allocation's last worker step is over (`squeue --steps` polled every
//! 50 ms no longer lists it) to the first instruction of the continued payload in the new
//! allocation (it writes a timestamp), against what a user does without dispatch at that same
//! moment on the same idle cluster: `salloc --no-shell` and `srun --jobid=J` of the same
//! payload, to its timestamp. Target: gap ≤ 1.3 × bare + the native-state copy
//! (`ResumedFrom.took_ms` in the successor's own journal).
//!
//! Each round: `pool create --time 3 --renew-max 2` (1 CPU, 100M), one worker `pool submit
//! --continue 1 --continue-on time-limit` with 5-second budgets (publication, native state,
//! cleanup, grace: its early-shutdown deadline about 15 s before the allocation's end) whose
//! first generation writes `STATE_FILES` files of 64 KiB of native state, then counts until
//! SIGTERM and declares a checkpoint. `reconcile` runs every 5 s until the step is over (the
//! first run asks for the next allocation, `--dependency=afterany` on the first), then back to
//! back until it has continued the worker. Where the time goes, from the step's end (medians):
//! the old allocation's end (dispatch's own `scancel` once the worker is over and released with
//! proof, the next allocation waiting behind it; before, the rest of the early-shutdown window
//! and however late Slurm enforced the time limit), the next allocation's start, `PoolRenewed`,
//! the successor's receipt, and the payload. Slurm's end and start come from slurmctld's log
//! (`REQUEST_KILL_JOB JobId=J` or `Time limit exhausted for JobId=J`, `Allocate JobId=K`,
//! millisecond stamps) where it is readable, else from sacct's `End` and `Start` (whole
//! seconds). The part from Slurm's end to the payload, what the renewal itself adds, is
//! reported against the bare pair too. The bare pair is
//! started the moment the step is seen over, on a node with room (16 CPUs, the pool holds 1).
//! Measured (docs/performance.md): before dispatch ended the old allocation itself, the gap
//! was almost all before Slurm's end of it (the early-shutdown window's rest and Slurm's
//! periodic time-limit check).
//!
//! Needs the dev cluster (`tools/slurm-dev-cluster start`); about 3.5 minutes a round (3
//! minutes is the least `--time` `pool create` takes with these budgets).
//! `DISPATCH_BENCH_QUICK=1` does one round instead of three. `DISPATCH_BENCH_OVERLAP=1` creates
//! the pool with `--renew-overlap`: the next allocation is asked without the dependency and
//! may run beside the last (its start is then before the step's end).

#[path = "timing/mod.rs"]
mod timing;
// The real-cluster tests' helpers: the same renewing pool and worker budgets.
#[path = "../tests/real_cluster/mod.rs"]
mod real_cluster;
#[path = "../tests/support/mod.rs"]
mod support;
use timing::{json_of, now_us, run_ok, salloc, stamp};

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Files of 64 KiB in the first generation's native state.
const STATE_FILES: usize = 64;
const PREFIX: &str = "dbrg-";

fn dispatch(state: &Path, config: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.arg("--state-dir").arg(state).arg("--config").arg(config);
    c.env_remove("DISPATCH_FAILPOINTS");
    c
}

/// Cancels the bench's jobs by name when dropped (also on panic).
struct Jobs;

impl Drop for Jobs {
    fn drop(&mut self) {
        real_cluster::cancel_jobs_named(PREFIX);
    }
}

/// The payload: writes the time it starts (ns) to `<dir>/<tag>-<generation>`; a dispatch
/// worker's first generation then writes its native state and counts until SIGTERM, when it
/// declares a checkpoint. Bare runs and later generations end at once.
fn payload(dir: &Path, tag: &str) -> String {
    timing::stamping_payload(
        dir,
        tag,
        STATE_FILES,
        "trap 'touch \"$DISPATCH_CHECKPOINT\"; exit 0' TERM; while :; do sleep 0.1; done",
    )
}

/// The time (µs) of the first event of `kind` whose body has `key` = `value`.
fn time_of(evs: &[Value], kind: &str, key: &str, value: &Value) -> i64 {
    let e = evs
        .iter()
        .find(|e| e["kind"] == kind && &e["event"][key] == value)
        .unwrap_or_else(|| panic!("no {kind} with {key} = {value}"));
    chrono::DateTime::parse_from_rfc3339(e["time"].as_str().unwrap())
        .unwrap()
        .timestamp_micros()
}

fn events(state: &Path, config: &Path) -> Vec<Value> {
    let (_, out) = timing::timed(dispatch(state, config).args(["journal", "dump", "--json"]));
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// sacct's `Start` or `End` of `job`, µs since the epoch (whole seconds).
fn sacct_time(job: u64, field: &str) -> i64 {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new("sacct")
            .env("TZ", "UTC")
            .args(["-X", "-n", "-P", "-j", &job.to_string(), "-o", field])
            .output()
            .expect("sacct");
        let text = String::from_utf8_lossy(&out.stdout);
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(text.trim(), "%Y-%m-%dT%H:%M:%S") {
            return t.and_utc().timestamp_micros();
        }
        assert!(Instant::now() < until, "sacct {field} of {job}: {text}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Whether `job` has a step named `name` (`squeue --steps`).
fn has_step(job: u64, name: &str) -> bool {
    let out = Command::new("squeue")
        .args(["--steps", "-h", "-o", "%j", "-j", &job.to_string()])
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == name)
}

/// `reconcile` every 5 s while the worker's step runs; the moment (µs) it is seen over.
fn step_over(state: &Path, config: &Path, job: u64, step: &str) -> i64 {
    let until = Instant::now() + Duration::from_secs(240);
    let mut next_reconcile = Instant::now();
    loop {
        if !has_step(job, step) {
            return now_us();
        }
        if Instant::now() >= next_reconcile {
            json_of(dispatch(state, config).args(["reconcile", "--json"]));
            next_reconcile = Instant::now() + Duration::from_secs(5);
        }
        assert!(Instant::now() < until, "step {step} of {job} never ended");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `reconcile` back to back until it continues `worker`; the successor's submission id.
fn reconcile_until_continued(state: &Path, config: &Path, worker: &str) -> String {
    let until = Instant::now() + Duration::from_secs(240);
    loop {
        let r = json_of(dispatch(state, config).args(["reconcile", "--json"]));
        for c in r["continued"].as_array().into_iter().flatten() {
            if c["worker"] == worker && c["outcome"] == "continued" {
                return c["submission_id"].as_str().unwrap().to_owned();
            }
        }
        assert!(Instant::now() < until, "{worker} never continued: {r}");
    }
}

/// The bare pair, started now: `salloc --no-shell` then `srun --jobid=J` of the payload; ms
/// from now to the payload's timestamp.
fn bare(dir: &Path, i: usize) -> f64 {
    let start = now_us();
    let alloc = salloc(
        &format!("{PREFIX}bare"),
        &["-c", "1", "--mem", "100M", "--time", "5"],
    );
    let granted_ms = (now_us() - start) as f64 / 1e3;
    let tag = format!("bare{i}");
    let stamp_file = dir.join(format!("{tag}-1"));
    granted_ms + timing::srun_payload_ms(alloc.0, &payload(dir, &tag), &stamp_file)
}

/// One round's figures, ms: the gap, the copy, the bare pair, and the stages from the step's
/// end.
struct Round {
    gap: f64,
    copy: f64,
    bare: f64,
    stages: Vec<(&'static str, f64)>,
}

fn create_and_submit(state: &Path, config: &Path, dir: &Path, pool: &str) -> u64 {
    let overlap: &[&str] = match std::env::var_os("DISPATCH_BENCH_OVERLAP") {
        Some(_) => &["--renew-overlap"],
        None => &[],
    };
    let job = real_cluster::create_renewing_pool_with(state, config, pool, overlap);
    let script = payload(dir, pool);
    json_of(
        dispatch(state, config)
            .args(["pool", "submit", pool, "--cpus", "1", "--mem", "100M"])
            .args(["--continue", "1", "--continue-on", "time-limit"])
            .args(real_cluster::WORKER_BUDGETS)
            .args(["--name", "w", "--json", "--", "sh", "-c", &script]),
    );
    stamp(&dir.join(format!("{pool}-1")), Duration::from_secs(60));
    job
}

fn round(root: &Path, i: usize) -> Round {
    let state = root.join(format!("state{i}"));
    let config = root.join("config.toml");
    let pool = format!("rg{i}p{}", std::process::id() % 10_000);
    let first = create_and_submit(&state, &config, root, &pool);
    let t0 = step_over(&state, &config, first, &format!("{pool}.w"));
    let bare_ms = bare(root, i);
    let successor = reconcile_until_continued(&state, &config, "w");
    let payload_us = stamp(&dir_file(root, &pool, 2), Duration::from_secs(120));
    let evs = events(&state, &config);
    let renewed = evs
        .iter()
        .find(|e| e["kind"] == "PoolRenewed")
        .expect("renewed");
    let second = renewed["event"]["allocation"]["job_id"].as_u64().unwrap();
    let ms = |t: i64| (t - t0) as f64 / 1e3;
    let id = Value::String(successor.clone());
    // Dispatch's own end of it (its scancel, once the worker was over), or Slurm's time limit.
    let ended = timing::slurmctld_stamp_ms(&[
        format!("REQUEST_KILL_JOB JobId={first} "),
        format!("Time limit exhausted for JobId={first}"),
    ])
    .map_or_else(|| sacct_time(first, "End"), |t| t * 1000);
    let started = timing::slurmctld_stamp_ms(&[
        format!("Allocate JobId={second} "),
        format!("Started JobId={second} "),
    ])
    .map_or_else(|| sacct_time(second, "Start"), |t| t * 1000);
    let stages = vec![
        ("old allocation ended", ms(ended)),
        ("next allocation started", ms(started)),
        (
            "PoolRenewed",
            ms(time_of(&evs, "PoolRenewed", "pool", &pool.clone().into())),
        ),
        (
            "receipt",
            ms(time_of(&evs, "WorkerSubmitIntent", "submission_id", &id)),
        ),
        ("payload", ms(payload_us)),
    ];
    let dirs =
        dispatch::worker::dirs::WorkerDirs::of(&state, Some(&pool), successor.parse().unwrap());
    let copy = events(&dirs.evidence, &config)
        .iter()
        .find(|e| e["kind"] == "ResumedFrom")
        .map_or(0.0, |e| e["event"]["took_ms"].as_f64().unwrap());
    run_ok(dispatch(&state, &config).args(["pool", "release", &pool]));
    Round {
        gap: ms(payload_us),
        copy,
        bare: bare_ms,
        stages,
    }
}

fn dir_file(dir: &Path, tag: &str, generation: u32) -> std::path::PathBuf {
    dir.join(format!("{tag}-{generation}"))
}

fn med(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let _jobs = Jobs;
    let quick = std::env::var_os("DISPATCH_BENCH_QUICK").is_some();
    let root = tempfile::tempdir().unwrap();
    std::fs::write(
        root.path().join("config.toml"),
        format!("job_name_prefix = \"{PREFIX}\"\n"),
    )
    .unwrap();
    let rounds: Vec<Round> = (0..if quick { 1 } else { 3 })
        .map(|i| {
            let r = round(root.path(), i);
            println!(
                "round {i}: gap {:.0} ms (copy {:.0}) vs bare salloc + srun {:.0} ms: {:.2}x; \
                 less the copy {:.2}x",
                r.gap,
                r.copy,
                r.bare,
                r.gap / r.bare,
                (r.gap - r.copy) / r.bare
            );
            let stages: Vec<String> = r
                .stages
                .iter()
                .map(|(n, t)| format!("{n} +{t:.0}"))
                .collect();
            println!("  from the step's end (ms): {}", stages.join(", "));
            r
        })
        .collect();
    let gap = med(rounds.iter().map(|r| r.gap).collect());
    let copy = med(rounds.iter().map(|r| r.copy).collect());
    let bare = med(rounds.iter().map(|r| r.bare).collect());
    println!(
        "renewal gap (step over -> continued payload): {gap:.0} ms, of which the copy {copy:.0}; \
         bare salloc --no-shell + srun from the same moment: {bare:.0} ms; {:.2}x less the \
         copy (target <= 1.3x)",
        (gap - copy) / bare
    );
    let stages: Vec<String> = (0..rounds[0].stages.len())
        .map(|k| {
            let at = med(rounds.iter().map(|r| r.stages[k].1).collect());
            format!("{} +{at:.0}", rounds[0].stages[k].0)
        })
        .collect();
    println!("  from the step's end (medians, ms): {}", stages.join(", "));
    let after_end = med(rounds.iter().map(|r| r.gap - r.stages[0].1).collect());
    let after_end_less_copy = med(rounds
        .iter()
        .map(|r| r.gap - r.stages[0].1 - r.copy)
        .collect());
    println!(
        "  from Slurm's end of the old allocation to the payload: {after_end:.0} ms, {:.2}x \
         bare; less the copy {:.2}x",
        after_end / bare,
        after_end_less_copy / bare
    );
}
