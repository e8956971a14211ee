//! Issue 10, item 2, on the real dev cluster: a `dispatch submit` whose outcome is unknown is
//! always resolved by `dispatch reconcile`, and the worker's name can be used again.
//! - sbatch ran, dispatch crashed before recording the job, and the job finished: found by its
//!   submission-unique name with `squeue --states=all` (or in accounting past MinJobAge) and
//!   released with its terminal state.
//! - dispatch crashed after the intent, before sbatch: once both listings answer without a job
//!   of that name and the settle delay (sbatch's limit + 30 s; `DISPATCH_SLURM_TIMEOUT=1` at
//!   submit makes that limit 3 s) has passed, and a job given out later is listed in the same
//!   squeue answer (the watermark that shows the answer current), it is proven never created
//!   and released; with no such job, reconcile makes one (a held beacon, cancelled at once).

mod real_cluster;
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use real_cluster::{dispatch, dispatch_cmd, json, require_cluster};

fn crash(state: &Path, failpoint: &str, args: &[&str]) {
    let out = dispatch_cmd(state, args)
        .env("DISPATCH_FAILPOINTS", format!("{failpoint}=abort"))
        .env("DISPATCH_SLURM_TIMEOUT", "1")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        None,
        "{failpoint} did not fire: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn events(state: &Path) -> Vec<serde_json::Value> {
    let r = dispatch(state, &["journal", "dump", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout.lines().map(json).collect()
}

fn job_name(state: &Path) -> String {
    events(state)
        .iter()
        .rev()
        .find(|e| e["kind"] == "JobNamed")
        .expect("JobNamed")["event"]["job_name"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn submit_args(worker: &str) -> Vec<String> {
    [
        "submit", "--cpus", "1", "--mem", "100M", "--time", "5", "--name", worker, "--json", "--",
        "true",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `squeue --me --states=all --name=N`: the state of the job of that name, if listed.
fn squeue_state(name: &str) -> Option<String> {
    let out = Command::new("squeue")
        .args(["--me", "--states=all", "--noheader", "--format=%T"])
        .arg(format!("--name={name}"))
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(|l| l.trim().to_owned())
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn a_finished_job_whose_sbatch_answer_was_lost_is_found_by_name_and_released() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let worker = format!("gone-a-{}", std::process::id());
    crash(&state, "submit-after-sbatch", &strs(&submit_args(&worker)));
    let name = job_name(&state);
    assert!(name.starts_with(&format!("dispatch-{worker}-")), "{name}");

    // The job runs `true` under the supervisor and ends; squeue without --states=all no longer
    // lists it, which is what left it unknown for ever before.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match squeue_state(&name).as_deref() {
            Some("COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT") => break,
            other => assert!(
                Instant::now() < deadline,
                "job {name} did not end: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    let r = dispatch(&state, &["reconcile", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let report = json(&r.stdout);
    assert_eq!(report["unknown"], serde_json::json!([]), "{report}");
    let proof = report["resolved"][0]["proof"].as_str().unwrap();
    assert!(
        proof.contains(&format!("named {name:?}")) && proof.contains("squeue shows job"),
        "{proof}"
    );
    let kinds: Vec<String> = events(&state)
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        kinds.ends_with(&["JobSubmitted".to_owned(), "JobTerminal".to_owned()]),
        "{kinds:?}"
    );

    // The name is free again.
    let again = dispatch(&state, &strs(&submit_args(&worker)));
    assert_eq!(again.code, 0, "{}", again.stderr);
    let job = json(&again.stdout)["job_id"].as_u64().unwrap();
    let _ = Command::new("scancel").arg(job.to_string()).status();
}

#[test]
fn a_submission_killed_before_sbatch_is_proven_never_created_after_the_settle_delay() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let worker = format!("gone-b-{}", std::process::id());
    let started = Instant::now();
    crash(&state, "submit-after-intent", &strs(&submit_args(&worker)));
    let limit = events(&state)
        .iter()
        .find(|e| e["kind"] == "JobNamed")
        .unwrap()["event"]["sbatch_limit_s"]
        .as_u64()
        .unwrap();
    assert_eq!(limit, 3, "DISPATCH_SLURM_TIMEOUT=1 plus the 2 s kill grace");

    // Within the settle delay an sbatch may still be in flight: unknown, nothing released.
    let r = dispatch(&state, &["reconcile", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let report = json(&r.stdout);
    assert_eq!(report["unknown"][0]["worker"], worker.as_str(), "{report}");
    let refused = dispatch(&state, &strs(&submit_args(&worker)));
    assert_eq!(
        refused.code, 3,
        "the name is still held: {}",
        refused.stderr
    );

    let settle = Duration::from_secs(limit + 30);
    std::thread::sleep(settle.saturating_sub(started.elapsed()) + Duration::from_secs(1));
    // Both listings answer without it, past the delay, but nothing this journal knows shows
    // that squeue's answer is the controller's current view (an empty lie looks the same), and
    // no later `dispatch submit` exists to show it (issue 21 item 5: it used to stay unknown
    // for ever). Reconcile makes the watermark itself: a held beacon, cancelled at once, whose
    // id the listing after it shows.
    let r = dispatch(&state, &["reconcile", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let report = json(&r.stdout);
    assert_eq!(report["unknown"], serde_json::json!([]), "{report}");
    let beacon = report["watermark"]["job_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no watermark made: {report}"));
    let proof = report["resolved"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["worker"] == worker.as_str())
        .unwrap_or_else(|| panic!("{report}"))["proof"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(proof.starts_with("never created"), "{proof}");
    assert!(proof.contains(&format!("job {beacon}")), "{proof}");
    let beacon_name = events(&state)
        .iter()
        .find(|e| e["kind"] == "WatermarkIntent")
        .expect("WatermarkIntent")["event"]["job_name"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        beacon_name.starts_with("dispatch-watermark-"),
        "{beacon_name}"
    );
    // Held, then cancelled at once: it never ran.
    let beacon_state = squeue_state(&beacon_name);
    assert!(
        beacon_state.as_deref().is_none_or(|s| s == "CANCELLED"),
        "{beacon_state:?}"
    );
    let cancelled = events(&state)
        .into_iter()
        .find(|e| e["kind"] == "WatermarkCancelled")
        .expect("WatermarkCancelled");
    assert_eq!(cancelled["event"]["answered"], true, "{cancelled}");
    let failed = events(&state)
        .into_iter()
        .find(|e| e["kind"] == "JobSubmitFailed")
        .expect("JobSubmitFailed");
    assert_eq!(failed["event"]["definite"], true);
    assert_eq!(failed["event"]["reason"], proof);

    let again = dispatch(&state, &strs(&submit_args(&worker)));
    assert_eq!(again.code, 0, "the name is free again: {}", again.stderr);
    let job = json(&again.stdout)["job_id"].as_u64().unwrap();
    let _ = Command::new("scancel").arg(job.to_string()).status();
    let audit = dispatch(&state, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);
}

/// `scontrol` as the cluster's operator (these tests run as root), exit status checked.
fn scontrol_ok(args: &[&str]) {
    let out = Command::new("scontrol").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "scontrol {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn requeued_events(state: &Path) -> Vec<serde_json::Value> {
    events(state)
        .into_iter()
        .filter(|e| e["kind"] == "JobRequeued")
        .map(|e| e["event"].clone())
        .collect()
}

/// Issue 37, item 6, on real Slurm: dispatch submits `--no-requeue`, so the operator must first
/// allow it (`scontrol update JobId=J Requeue=1`; `scontrol requeue` alone is refused), then
/// requeues the running job. reconcile records the new run (`JobRequeued`, Restarts=1) and does
/// not take the first run's end for the job's; the new run's supervisor refuses (its worker
/// journal was begun), the job ends FAILED, and reconcile releases it by that end. The first
/// run's evidence stays: its journal (one start, the payload signalled by the requeue), and its
/// stdout beside the refusal in the appended stderr.
#[test]
fn a_requeued_job_is_another_run_whose_supervisor_refuses_and_the_first_runs_evidence_stays() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let worker = format!("rq-{}", std::process::id());
    let r = dispatch(
        &state,
        &[
            "submit",
            "--cpus",
            "1",
            "--mem",
            "100M",
            "--time",
            "10",
            "--name",
            &worker,
            "--json",
            "--",
            "sh",
            "-c",
            "echo first run; exec sleep 600",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let submitted = json(&r.stdout);
    let job = submitted["job_id"].as_u64().unwrap().to_string();
    let sid: uuid::Uuid = submitted["submission_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let dirs = dispatch::worker::dirs::WorkerDirs::of(&state, None, sid);
    let cancel = scopeguard(job.clone());

    // The payload runs (its start is in the worker journal).
    let deadline = Instant::now() + Duration::from_secs(120);
    while dispatch::worker::report::read(&dirs.evidence)
        .ok()
        .flatten()
        .and_then(|r| r.payload_pid)
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "job {job}'s payload never started"
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    let refused = Command::new("scontrol")
        .args(["requeue", &job])
        .output()
        .unwrap();
    assert!(!refused.status.success(), "a --no-requeue job was requeued");
    scontrol_ok(&["update", &format!("JobId={job}"), "Requeue=1"]);
    scontrol_ok(&["requeue", &job]);

    let r = dispatch(&state, &["reconcile", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let report = json(&r.stdout);
    assert_eq!(report["resolved"], serde_json::json!([]), "{report}");
    assert_eq!(report["requeued"][0]["restarts"], 1, "{report}");
    assert_eq!(requeued_events(&state).len(), 1);

    // The new run waits out Slurm's requeue delay (about 2 min). Not shortened: on 24.11 a
    // `scontrol update StartTime=now` at once after the requeue started the new run within a
    // second, and it failed before its batch script ran (FAILED 1:0, nothing on stderr).
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let r = dispatch(&state, &["reconcile", "--json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let report = json(&r.stdout);
        if let Some(proof) = report["resolved"][0]["proof"].as_str() {
            assert!(proof.contains("FAILED"), "{proof}");
            break;
        }
        assert!(Instant::now() < deadline, "job {job} did not end: {report}");
        std::thread::sleep(Duration::from_secs(3));
    }
    drop(cancel);
    assert_eq!(requeued_events(&state).len(), 1, "the same count twice");
    let first = dispatch::worker::report::read(&dirs.evidence)
        .unwrap()
        .unwrap();
    assert_eq!(
        first.started.as_ref().and_then(|s| s.job_id),
        Some(job.parse().unwrap())
    );
    assert!(first.payload_pid.is_some(), "the first run's journal");
    let stdout = std::fs::read_to_string(dirs.evidence.join("stdout")).unwrap();
    assert!(
        stdout.contains("first run"),
        "the first run's stdout was lost: {stdout:?}"
    );
    let stderr = std::fs::read_to_string(dirs.evidence.join("stderr")).unwrap();
    assert!(
        stderr.contains(&format!("Slurm requeued job {job} (Restarts=1)")),
        "{stderr}"
    );
}

/// Cancels job `job` when dropped (a test that fails midway leaves nothing running).
fn scopeguard(job: String) -> impl Drop {
    struct Cancel(String);
    impl Drop for Cancel {
        fn drop(&mut self) {
            let _ = Command::new("scancel").arg(&self.0).status();
        }
    }
    Cancel(job)
}
