//! A continuation's hand-over on the real dev cluster (issue 37, "Performance"): from the
//! predecessor's proven end (the time of its `JobTerminal`, or `WorkerTerminal` in a pool) to
//! the successor payload's first instruction (it writes a timestamp), against the bare Slurm
//! command that starts the same payload, measured in the same run, alternating round by round:
//! - `dispatch submit --continue 1 --continue-on checkpoint` against what a script does without
//!   dispatch: `squeue` asked back to back until a first job shows `COMPLETED`, then
//!   `sbatch --wrap` of the next, measured from that answer to RUNNING (`squeue` polled every
//!   20 ms) and to its payload's timestamp; and, for scale, a lone `sbatch` (no job just
//!   ended) from its submission;
//! - a pool worker (`pool submit … --continue 1`) against `srun --jobid=J` in the same
//!   allocation, from its spawn to its payload's timestamp.
//!
//! The first generation writes a native state (`STATE_FILES` files of 64 KiB), declares a
//! checkpoint and exits 0 on its own: cause `checkpoint`, the quickest end to prove.
//! `dispatch reconcile` runs back to back from the moment its payload wrote its timestamp until
//! one run has continued it (the run that proves the end continues it at once). The successor
//! copies the state before its payload starts; its `ResumedFrom.took_ms` is reported as the
//! copy's share. Target: gap ≤ 1.2 × bare + the copy.
//!
//! Where the time goes, per round, from the coordinator's journal (proof → receipt →
//! sbatch/srun answered) and the successor's own journal (supervisor started → resumed →
//! payload started).
//!
//! Needs the dev cluster (`tools/slurm-dev-cluster start`). `DISPATCH_BENCH_QUICK=1` does
//! fewer rounds; `DISPATCH_BENCH_ONLY=job|pool` one of the two.

#[path = "timing/mod.rs"]
mod timing;
use timing::{json_of, now_us, run_ok, salloc, stamp};

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Files of 64 KiB in the predecessor's native state.
const STATE_FILES: usize = 64;

fn dispatch(state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.arg("--state-dir").arg(state);
    c.env_remove("DISPATCH_FAILPOINTS");
    c
}

/// The payload: writes the time it starts (ns since the epoch) to `<dir>/<tag>-<generation>`;
/// the first generation of a dispatch worker then writes its native state and declares a
/// checkpoint. Bare runs are generation 1 without `DISPATCH_CHECKPOINT`.
fn payload(dir: &Path, tag: &str) -> String {
    timing::stamping_payload(dir, tag, STATE_FILES, "touch \"$DISPATCH_CHECKPOINT\"")
}

fn events(state: &Path) -> Vec<Value> {
    let (_, out) = timing::timed(dispatch(state).args(["journal", "dump", "--json"]));
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// An event's time (`journal dump --json`: RFC 3339), µs since the epoch.
fn micros(e: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(e["time"].as_str().unwrap())
        .unwrap()
        .timestamp_micros()
}

/// The time (µs) of the first event of `kind` about `id`.
fn time_of(evs: &[Value], kind: &str, id: &str) -> i64 {
    micros(
        evs.iter()
            .find(|e| e["kind"] == kind && e["event"]["submission_id"] == id)
            .unwrap_or_else(|| panic!("no {kind} of {id}")),
    )
}

/// Run `reconcile` back to back until it continues `worker`; the successor's submission id.
fn reconcile_until_continued(state: &Path, worker: &str) -> String {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let r = json_of(dispatch(state).args(["reconcile", "--json"]));
        for c in r["continued"].as_array().into_iter().flatten() {
            if c["worker"] == worker {
                assert_eq!(c["outcome"], "continued", "{r}");
                return c["submission_id"].as_str().unwrap().to_owned();
            }
        }
        assert!(Instant::now() < until, "{worker} never continued: {r}");
    }
}

/// Reconcile until nothing of this state holds budget (the successors ended).
fn reconcile_until_idle(state: &Path, pool: Option<&str>) {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        json_of(dispatch(state).args(["reconcile", "--json"]));
        let busy = match pool {
            None => json_of(dispatch(state).args(["jobs", "--json"]))["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|j| j["active"] == true),
            Some(p) => json_of(dispatch(state).args(["pool", "status", p, "--json"]))["pools"][0]
                ["workers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w["state"] != "released" && w["state"] != "failed"),
        };
        if !busy {
            return;
        }
        assert!(Instant::now() < until, "workers still live");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The successor's own journal: (event kind, time) in order, and `ResumedFrom.took_ms`.
fn worker_journal(evidence: &Path) -> (Vec<(String, i64)>, i64) {
    let evs = events(evidence);
    let took = evs
        .iter()
        .find(|e| e["kind"] == "ResumedFrom")
        .map_or(0, |e| e["event"]["took_ms"].as_i64().unwrap());
    let kinds = evs
        .iter()
        .map(|e| (e["kind"].as_str().unwrap().to_owned(), micros(e)))
        .collect();
    (kinds, took)
}

/// One hand-over, in ms from the proven end: (stage, ms) pairs, ending with the payload.
struct Handover {
    gap_ms: f64,
    copy_ms: f64,
    /// From the successor's submission to slurmctld's allocation (0 when unknown or a pool).
    wait_ms: f64,
    stages: Vec<(String, f64)>,
}

fn handover(
    state: &Path,
    evidence: &Path,
    terminal: (&str, &str),
    successor: &str,
    submitted_kind: &str,
    payload_us: i64,
) -> Handover {
    let evs = events(state);
    let end = time_of(&evs, terminal.0, terminal.1);
    let ms = |t: i64| (t - end) as f64 / 1e3;
    let mut stages = vec![
        (
            "receipt".to_owned(),
            ms(time_of(&evs, intent_kind(submitted_kind), successor)),
        ),
        (
            submitted_kind.to_owned(),
            ms(time_of(&evs, submitted_kind, successor)),
        ),
    ];
    let (own, took) = worker_journal(evidence);
    for want in [
        "SupervisorStarted",
        "ReceivingChecks",
        "ResumedFrom",
        "PayloadStarted",
    ] {
        if let Some((k, t)) = own.iter().find(|(k, _)| k == want) {
            stages.push((k.clone(), ms(*t)));
        }
    }
    stages.push(("payload".to_owned(), ms(payload_us)));
    let wait_ms = match evs
        .iter()
        .find(|e| e["kind"] == "JobSubmitted" && e["event"]["submission_id"] == successor)
    {
        Some(e) => scheduler_wait_ms(&e["event"]["job_id"].to_string()).unwrap_or(0.0),
        None => 0.0,
    };
    Handover {
        gap_ms: ms(payload_us),
        copy_ms: took as f64,
        wait_ms,
        stages,
    }
}

fn intent_kind(submitted: &str) -> &'static str {
    match submitted {
        "JobSubmitted" => "JobSubmitIntent",
        _ => "WorkerSubmitIntent",
    }
}

/// One round: a first generation submitted with `submit` (`dispatch submit` or `pool submit
/// b`, `pool` set), continued by `reconcile` at its checkpoint; the successor's hand-over.
fn round(state: &Path, dir: &Path, worker: &str, pool: Option<&str>) -> Handover {
    let script = payload(dir, worker);
    let submit: &[&str] = match pool {
        None => &["submit", "--time", "10"],
        Some(p) => &["pool", "submit", p],
    };
    let r = json_of(dispatch(state).args(submit).args([
        "--cpus",
        "1",
        "--mem",
        "100M",
        "--continue",
        "1",
        "--continue-on",
        "checkpoint",
        "--name",
        worker,
        "--json",
        "--",
        "sh",
        "-c",
        &script,
    ]));
    let first = r["submission_id"].as_str().unwrap().to_owned();
    stamp(&dir.join(format!("{worker}-1")), Duration::from_secs(120));
    let successor = reconcile_until_continued(state, worker);
    let payload_us = stamp(&dir.join(format!("{worker}-2")), Duration::from_secs(120));
    let uuid = successor.parse().unwrap();
    // The successor's journal is complete once its run is over.
    reconcile_until_idle(state, pool);
    let (dirs, terminal, launched) = match pool {
        None => (
            dispatch::worker::dirs::WorkerDirs::for_job(&state.join("jobs"), uuid),
            "JobTerminal",
            "JobSubmitted",
        ),
        Some(_) => (
            dispatch::worker::dirs::WorkerDirs::of(state, pool, uuid),
            "WorkerTerminal",
            "WorkerLaunched",
        ),
    };
    handover(
        state,
        &dirs.evidence,
        (terminal, &first),
        &successor,
        launched,
        payload_us,
    )
}

/// How long slurmctld held `job` between its submission RPC and its allocation (`sched:
/// Allocate JobId=J` or backfill's `Started JobId=J`), from its log's millisecond stamps, if
/// the log is readable: the wait for the scheduler's next pass, the same for any submission.
fn scheduler_wait_ms(job: &str) -> Option<f64> {
    let submitted = timing::slurmctld_stamp_ms(&[format!("submit_batch_job: JobId={job} ")])?;
    let allocated = timing::slurmctld_stamp_ms(&[
        format!("Allocate JobId={job} "),
        format!("Started JobId={job} "),
    ])?;
    Some((allocated - submitted) as f64)
}

fn sbatch(dir: &Path, tag: &str) -> String {
    let (_, out) = timing::timed(
        Command::new("sbatch")
            .args([
                "--parsable",
                "-J",
                "dispatch-bench-bare",
                "-N1",
                "-c1",
                "--mem=100M",
                "--time=10",
                "--no-requeue",
            ])
            .arg(format!("--output={}", dir.join("bare-%j.out").display()))
            .arg(format!("--wrap={}", payload(dir, tag))),
    );
    out.trim().split(';').next().unwrap().to_owned()
}

fn job_state(job: &str) -> String {
    let s = Command::new("squeue")
        .args(["-h", "-o", "%T", "-j", job])
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&s.stdout).trim().to_owned()
}

/// The bare `sbatch --wrap` of the same payload, from just before it: (to RUNNING, to the
/// payload's timestamp, of which the wait from its submission to its allocation), ms.
fn bare_sbatch(dir: &Path, tag: &str) -> (f64, f64, f64) {
    let start = now_us();
    let job = sbatch(dir, tag);
    let running = loop {
        let s = job_state(&job);
        // A job this short may be over before a poll sees it RUNNING.
        if s == "RUNNING" || s == "COMPLETING" || s == "COMPLETED" || s.is_empty() {
            break now_us();
        }
        assert!(now_us() - start < 120_000_000, "job {job} never ran");
        std::thread::sleep(Duration::from_millis(20));
    };
    let payload = stamp(&dir.join(format!("{tag}-1")), Duration::from_secs(120));
    let wait = scheduler_wait_ms(&job).unwrap_or(0.0);
    (
        (running - start) as f64 / 1e3,
        (payload - start) as f64 / 1e3,
        wait,
    )
}

/// What a user's script does without dispatch: a first job runs; `squeue` is asked back to back
/// until it shows the job over (`COMPLETED`), and the next job is submitted at once. From that
/// answer: (to RUNNING, to the payload's timestamp), ms. This pays the same scheduler pass
/// after a job's end that a continuation does (slurmctld starts a job at its next pass, about
/// once a second here, and a pass follows a job's end).
fn bare_chain(dir: &Path, i: usize) -> (f64, f64, f64) {
    let first = sbatch(dir, &format!("chain{i}a"));
    let until = Instant::now() + Duration::from_secs(120);
    while !matches!(job_state(&first).as_str(), "COMPLETED" | "") {
        assert!(Instant::now() < until, "job {first} never ended");
    }
    bare_sbatch(dir, &format!("chain{i}b"))
}

/// The bare `srun --jobid=J` of the same payload: spawn to the payload's timestamp, ms.
fn bare_srun(job: u32, dir: &Path, i: usize) -> f64 {
    let tag = format!("srun{i}");
    timing::srun_payload_ms(job, &payload(dir, &tag), &dir.join(format!("{tag}-1")))
}

fn med(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn print_stages(rounds: &[Handover]) {
    let names: Vec<String> = rounds[0].stages.iter().map(|(n, _)| n.clone()).collect();
    let parts: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(k, n)| {
            let at = med(rounds
                .iter()
                .filter_map(|r| r.stages.get(k))
                .map(|s| s.1)
                .collect());
            format!("{n} +{at:.0}")
        })
        .collect();
    println!("  from the proven end (medians, ms): {}", parts.join(", "));
}

fn report(what: &str, ours: &[Handover], bare: &[f64], bare_what: &str) {
    let gap = med(ours.iter().map(|h| h.gap_ms).collect());
    let copy = med(ours.iter().map(|h| h.copy_ms).collect());
    let less_copy = med(ours.iter().map(|h| h.gap_ms - h.copy_ms).collect());
    let b = med(bare.to_vec());
    println!(
        "{what}: proven end -> successor payload {gap:.0} ms (take-up: publication checked + state copied {copy:.0} ms, {:.0}%); \
         {bare_what} {b:.0} ms; ratio (gap - copy) / bare {:.2}x (target <= 1.2x); \
         rounds: {:?} vs {:?}",
        100.0 * copy / gap,
        less_copy / b,
        ours.iter().map(|h| h.gap_ms.round()).collect::<Vec<_>>(),
        bare.iter().map(|b| b.round()).collect::<Vec<_>>(),
    );
    print_stages(ours);
}

fn bench_jobs(rounds: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let (state, dir) = (tmp.path().join("state"), tmp.path().join("stamps"));
    std::fs::create_dir(&dir).unwrap();
    let (mut ours, mut chained, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    round(&state, &dir, "c99", None); // warm-up: the state directory exists
    for i in 0..rounds {
        ours.push(round(&state, &dir, &format!("c{i}"), None));
        chained.push(bare_chain(&dir, i));
        alone.push(bare_sbatch(&dir, &format!("bare{i}")));
    }
    let to_payload: Vec<f64> = chained.iter().map(|c| c.1).collect();
    report(
        "dispatch submit --continue",
        &ours,
        &to_payload,
        "bare sbatch submitted when squeue shows the last job COMPLETED, to its payload",
    );
    let less_copy = med(ours.iter().map(|h| h.gap_ms - h.copy_ms).collect());
    let running = med(chained.iter().map(|c| c.0).collect());
    println!(
        "  that bare sbatch to RUNNING (squeue every 20 ms): {running:.0} ms; (gap - take-up) / \
         that {:.2}x",
        less_copy / running
    );
    // slurmctld starts a job at its next scheduling pass, about once a second here: the wait
    // for it is the same for any submission and swings from 0 to 1 s, so the rounds are
    // compared without it too.
    let ours_less_wait = med(ours
        .iter()
        .map(|h| h.gap_ms - h.copy_ms - h.wait_ms)
        .collect());
    let bare_less_wait = med(chained.iter().map(|c| c.1 - c.2).collect());
    println!(
        "  without the wait for slurmctld's pass (ours {:?} ms, bare {:?} ms): (gap - take-up - \
         wait) {ours_less_wait:.0} ms vs (bare - wait) {bare_less_wait:.0} ms: {:.2}x",
        ours.iter().map(|h| h.wait_ms.round()).collect::<Vec<_>>(),
        chained.iter().map(|c| c.2.round()).collect::<Vec<_>>(),
        ours_less_wait / bare_less_wait
    );
    let (running, payload) = (
        med(alone.iter().map(|c| c.0).collect()),
        med(alone.iter().map(|c| c.1).collect()),
    );
    println!(
        "  a bare sbatch on its own (no job just ended): to RUNNING {running:.0} ms, to its \
         payload {payload:.0} ms; (gap - take-up) / those {:.2}x, {:.2}x",
        less_copy / running,
        less_copy / payload
    );
}

fn bench_pool(rounds: usize) {
    let alloc = salloc(
        "dispatch-bench-cont",
        &["-c", "2", "--mem", "1G", "--time", "30"],
    );
    let tmp = tempfile::tempdir().unwrap();
    let (state, dir) = (tmp.path().join("state"), tmp.path().join("stamps"));
    std::fs::create_dir(&dir).unwrap();
    run_ok(dispatch(&state).args(["pool", "attach", "b", "--job", &alloc.0.to_string()]));
    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    round(&state, &dir, "p99", Some("b"));
    for i in 0..rounds {
        ours.push(round(&state, &dir, &format!("p{i}"), Some("b")));
        bare.push(bare_srun(alloc.0, &dir, i));
    }
    report(
        "pool worker continued",
        &ours,
        &bare,
        "bare srun --jobid to its payload",
    );
    let _ = Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--state-dir")
        .arg(&state)
        .args(["pool", "detach", "b"])
        .output();
}

fn main() {
    let rounds = if std::env::var_os("DISPATCH_BENCH_QUICK").is_some() {
        3
    } else {
        7
    };
    let only = std::env::var("DISPATCH_BENCH_ONLY").unwrap_or_default();
    if only != "pool" {
        bench_jobs(rounds);
    }
    if only != "job" {
        bench_pool(rounds);
    }
}
