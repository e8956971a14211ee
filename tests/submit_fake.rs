//! `dispatch submit` and `dispatch reconcile` against the fake Slurm: an sbatch that was
//! accepted but never answered keeps its budget, and reconcile finds the job by name.

mod fake_cli;

use fake_cli::Fake;
use serde_json::{json, Value};

/// The Slurm job name of the one submission in the journal (`JobNamed`).
fn job_name(fake: &Fake) -> String {
    let events = fake.events();
    let named = events
        .iter()
        .find(|e| e["kind"] == "JobNamed")
        .expect("JobNamed in the intent's commit");
    named["event"]["job_name"].as_str().unwrap().to_owned()
}

fn squeue_row(id: u32, state: &str, name: &str) -> String {
    format!("{id}|{id}|{state}|debug|dev|normal|root|1|1|vm|4:00|5:00|2026-11-29T17:00:00|2026-11-29T17:05:00|None|{name}\n")
}

#[test]
fn an_sbatch_without_answer_keeps_its_budget_until_reconcile_finds_the_job_by_name() {
    let fake = Fake::new();
    let accepted = fake.dir.path().join("accepted.jsonl");
    fake.scenario(json!({"sbatch": [{"touch": accepted, "hang": 30}]}));
    let (code, out, err) = fake.run(&[
        "submit",
        "--cpus",
        "2",
        "--mem",
        "1G",
        "--time",
        "10",
        "--name",
        "lost-worker",
        "--json",
        "--",
        "sh",
        "-c",
        "echo $(id); rm -rf /",
        "arg with spaces",
    ]);
    assert_eq!(code, 4, "an unanswered sbatch is an unknown outcome: {err}");
    assert!(err.contains("dispatch reconcile"), "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(out.trim()).unwrap()["error"]["exit_code"],
        4
    );
    assert!(accepted.exists(), "the fake never accepted the job");

    // The exact argv: one element per argument, the command passed through untouched.
    let calls = fake.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (cmd, argv) = &calls[0];
    assert_eq!(cmd, "sbatch");
    // The job is named after the worker under the default prefix (dispatch's own), with a suffix unique to
    // the submission.
    let name = job_name(&fake);
    let suffix = name
        .strip_prefix("dispatch-lost-worker-")
        .unwrap_or_else(|| panic!("{name}"));
    assert!(
        suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_hexdigit()),
        "{name}"
    );
    assert_eq!(
        &argv[..2],
        &["--parsable".to_owned(), format!("--job-name={name}")]
    );
    for flag in [
        "--time=00:10:00",
        "--nodes=1",
        "--cpus-per-task=2",
        "--mem=1024M",
        "--no-requeue",
        "--open-mode=append",
    ] {
        assert!(
            argv.contains(&flag.to_owned()),
            "{flag} missing from {argv:?}"
        );
    }
    let tail: Vec<&str> = argv
        .iter()
        .rev()
        .take(4)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        ["sh", "-c", "echo $(id); rm -rf /", "arg with spaces"]
    );
    assert!(argv.iter().any(|a| a.ends_with("/batch.sh")), "{argv:?}");

    let events = fake.events();
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["Genesis", "JobSubmitIntent", "JobNamed", "JobSubmitFailed"]
    );
    assert_eq!(events[3]["event"]["definite"], false, "the job may exist");

    // Reconcile asks Slurm by name and adopts the job; another job named after the worker
    // alone is not this submission's.
    fake.scenario(json!({"squeue": [{"match": ["--me"], "stdout": format!(
        "{}{}", squeue_row(43, "RUNNING", "lost-worker"), squeue_row(42, "RUNNING", &name)
    )}]}));
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["resolved"][0]["job_id"], 42, "{r}");
    assert_eq!(r["slurm_calls"], 1);
    let found = fake
        .events()
        .into_iter()
        .find(|e| e["kind"] == "JobSubmitted")
        .expect("JobSubmitted");
    assert_eq!(found["event"]["how"], "name");
    assert_eq!(found["event"]["job_id"], 42);
    let squeue = &fake.calls()[0];
    assert_eq!(squeue.0, "squeue");
    assert!(squeue.1.contains(&"--me".to_owned()), "{squeue:?}");
    assert!(
        squeue.1.contains(&"--states=all".to_owned()),
        "a job that already ended is found too: {squeue:?}"
    );
}

#[test]
fn garbage_from_sbatch_is_unknown_and_a_failed_query_changes_nothing() {
    let fake = Fake::new();
    fake.scenario(json!({
        "sbatch": [{"stdout": "Submitted batch job probably\n"}],
        "squeue": [{"fixture": "notes-squeue-ctld-down"}],
    }));
    let (code, _, err) = fake.run(&[
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "g", "--", "true",
    ]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("probably"),
        "the raw answer is not shown: {err}"
    );
    let before = fake.events().len();
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["resolved"], json!([]), "{r}");
    assert_eq!(r["unknown"][0]["worker"], "g");
    assert_eq!(fake.events().len(), before, "a failed query wrote events");
}

/// Past MinJobAge the controller says "Invalid job id specified" about the one job asked.
#[test]
fn a_job_unknown_to_squeue_is_released() {
    let fake = Fake::new();
    fake.scenario(json!({
        "sbatch": [{"stdout": "77\n"}],
        "squeue": [{"match": ["--jobs=77"], "stderr": "slurm_load_jobs error: Invalid job id specified\n", "exit": 1}],
    }));
    let (code, out, err) = fake.run(&[
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "d", "--json", "--",
        "true",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(out.trim()).unwrap()["job_id"],
        77
    );
    let (code, out, _) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0);
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["resolved"][0]["job_id"], 77, "{r}");
    assert_eq!(
        r["resolved"][0]["proof"],
        "squeue said \"Invalid job id specified\" for job 77"
    );
    assert!(fake.events().iter().any(|e| e["kind"] == "JobTerminal"));
}

#[test]
fn a_time_limit_shorter_than_the_shutdown_window_is_refused_before_anything() {
    let fake = Fake::new();
    fake.scenario(json!({}));
    let (code, _, err) = fake.run(&[
        "submit", "--cpus", "1", "--mem", "100M", "--time", "1", "--", "true",
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("--time"), "{err}");
    assert!(fake.calls().is_empty());
    for bad in ["0", "301", "abc", "1.5", "+5", "-1", ""] {
        let (code, _, err) = fake.run(&[
            "submit",
            "--cpus",
            "1",
            "--mem",
            "100M",
            "--time",
            "10",
            "--publication-timeout",
            bad,
            "--",
            "true",
        ]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("whole seconds from 1 to 300"),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn submit_crashes_at_every_boundary_leave_nothing_lost_or_doubled() {
    for fp in [
        "submit-after-intent",
        "submit-before-sbatch",
        "submit-after-sbatch",
    ] {
        let fake = Fake::new();
        fake.scenario(json!({"sbatch": [{"stdout": "55\n"}]}));
        fake.crash(
            fp,
            &[
                "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "crashy", "--",
                "true",
            ],
        );
        let sbatches = fake.calls().iter().filter(|(c, _)| c == "sbatch").count();
        // Slurm knows the submission's job only if sbatch ran before the crash.
        let name = job_name(&fake);
        let listed = if fp == "submit-after-sbatch" {
            squeue_row(55, "RUNNING", &name)
        } else {
            String::new()
        };
        fake.scenario(json!({
            "squeue": [
                {"match": ["--me"], "stdout": listed},
                {"match": ["--jobs=55"], "stdout": squeue_row(55, "RUNNING", &name)},
            ],
            "sacct": [{"stdout": ""}],
        }));
        let (code, out, err) = fake.run(&["reconcile", "--json"]);
        assert_eq!(code, 0, "{fp}: {err}");
        let r: Value = serde_json::from_str(out.trim()).unwrap();
        assert!(sbatches <= 1, "{fp}: submitted twice");
        let events = fake.events();
        let submitted = events
            .iter()
            .filter(|e| e["kind"] == "JobSubmitted")
            .count();
        if fp == "submit-after-sbatch" {
            // The job exists: reconcile found it by name, exactly once.
            assert_eq!(submitted, 1, "{fp}: {r}");
            assert_eq!(r["resolved"][0]["job_id"], 55);
        } else {
            // Nothing was submitted: nothing is found, and within the settle delay (an sbatch
            // may still be in flight) the intent stays unknown.
            assert_eq!(submitted, 0, "{fp}: {r}");
            assert_eq!(sbatches, 0, "{fp}");
            assert_eq!(r["unknown"][0]["worker"], "crashy", "{fp}: {r}");
        }
        // The intent still holds budget unless a proof arrived: nothing is ever silently freed.
        assert!(
            !events.iter().any(|e| e["kind"] == "JobTerminal"),
            "{fp}: released without proof"
        );
    }
}

#[test]
fn stop_crashes_leave_the_budget_held_until_reconcile_proves_the_job_over() {
    for (fp, after_crash) in [
        ("stop-after-intent", "RUNNING"),
        ("stop-after-cancel", "CANCELLED"),
    ] {
        let fake = Fake::new();
        fake.scenario(json!({
            "sbatch": [{"stdout": "66\n"}],
            "scancel": [{"stdout": ""}],
            "squeue": [{"match": ["--jobs=66"], "stdout": squeue_row(66, "RUNNING", "s")}],
        }));
        let (code, _, err) = fake.run(&[
            "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "s", "--", "true",
        ]);
        assert_eq!(code, 0, "{err}");
        fake.crash(fp, &["stop", "s", "--grace", "0"]);
        let stdout = squeue_row(66, after_crash, "s");
        fake.scenario(json!({"squeue": [{"match": ["--jobs=66"], "stdout": stdout}]}));
        let (code, out, err) = fake.run(&["reconcile", "--json"]);
        assert_eq!(code, 0, "{fp}: {err}");
        let r: Value = serde_json::from_str(out.trim()).unwrap();
        let released = fake.events().iter().any(|e| e["kind"] == "JobTerminal");
        if after_crash == "RUNNING" {
            assert!(!released, "{fp}: released a running job: {r}");
        } else {
            assert!(released, "{fp}: a cancelled job was not released: {r}");
            assert_eq!(r["resolved"][0]["job_id"], 66);
            assert_eq!(r["resolved"][0]["proof"], "squeue shows job 66 CANCELLED");
        }
    }
}

/// `submit --source/--image`: an asset that is not recorded is refused before anything is
/// journaled or submitted; a recorded one is bound to the job in its intent's commit and handed
/// to the supervisor in the batch job's argv.
#[test]
fn a_job_names_its_assets_and_an_unknown_one_is_refused_before_sbatch() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "91\n"}]}));
    let image = fake.dir.path().join("image.sif");
    std::fs::write(&image, b"an image").unwrap();
    let (code, _, err) = fake.run(&["asset", "add-image", "img", image.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let submit = |asset: &str| {
        fake.run(&[
            "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "a", "--image",
            asset, "--json", "--", "true",
        ])
    };

    let before = fake.kinds();
    let (code, _, err) = submit("no-such-image");
    assert_eq!(code, 3, "an unknown asset is a refusal: {err}");
    assert!(err.contains("no-such-image"), "{err}");
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    assert_eq!(
        fake.kinds(),
        before,
        "a refused submission journaled something"
    );

    let (code, out, err) = submit("img");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(out.trim()).unwrap()["job_id"],
        91
    );
    let events = fake.events();
    let intent = events
        .iter()
        .position(|e| e["kind"] == "JobSubmitIntent")
        .expect("an intent");
    let bound = &events[intent + 1];
    assert_eq!(bound["kind"], "WorkerAssetsBound");
    assert_eq!(
        bound["event"]["submission_id"],
        events[intent]["event"]["submission_id"]
    );
    assert_eq!(bound["event"]["assets"][0]["name"], "img");
    let calls = fake.calls();
    let (cmd, argv) = &calls[0];
    assert_eq!(cmd, "sbatch");
    let at = argv
        .iter()
        .position(|a| a == "--asset")
        .unwrap_or_else(|| panic!("no --asset for the supervisor: {argv:?}"));
    assert!(argv[at + 1].contains("img"), "{argv:?}");
    let (code, out, _) = fake.run(&["audit", "--json"]);
    assert_eq!(code, 0, "{out}");
}

/// Issue 10, item 7: after the cancel, squeue and sacct answer exit 0 with nothing. That is not
/// proof the job is over (a lying controller, the wrong cluster): `stop` exits 4 and the budget
/// stays held; reconcile on the same answers releases nothing either.
#[test]
fn empty_answers_do_not_prove_a_stopped_job_over() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "67\n"}]}));
    let (code, _, err) = fake.run(&[
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "e", "--", "true",
    ]);
    assert_eq!(code, 0, "{err}");
    fake.scenario(json!({
        "scancel": [{"stdout": ""}],
        "squeue": [{"stdout": ""}],
        "sacct": [{"stdout": ""}],
    }));
    let (code, _, err) = fake.run(&["stop", "e", "--grace", "0"]);
    assert_eq!(code, 4, "an empty answer was taken for proof: {err}");
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["resolved"], json!([]), "{r}");
    assert!(!fake.kinds().contains(&"JobTerminal".to_owned()));
}

/// sbatch's refusals as the real controller printed them (`real-sbatch-refused-*`, recorded
/// from the dev cluster), each with the phrase dispatch must quote. Account and QOS refusals
/// cannot be produced on the dev cluster (it does not enforce associations): their lines are
/// Slurm's own texts as sites report them.
const SBATCH_REFUSALS: &[(&str, &str)] = &[
    (
        "real-sbatch-refused-partition",
        "Invalid partition name specified",
    ),
    (
        "real-sbatch-refused-partition-case",
        "Invalid partition name specified",
    ),
    (
        "real-sbatch-refused-memory",
        "Memory specification can not be satisfied",
    ),
    (
        "real-sbatch-refused-feature",
        "Invalid feature specification",
    ),
    ("real-sbatch-refused-node", "Invalid node name specified"),
    (
        "real-sbatch-refused-gres",
        "Invalid generic resource (gres) specification",
    ),
    (
        "real-sbatch-refused-time-spec",
        "Invalid --time specification",
    ),
    (
        "notes-sbatch-invalid-partition",
        "Invalid partition name specified",
    ),
];

const SBATCH_REFUSALS_UNRECORDED: &[&str] = &[
    "Invalid account or account/partition combination specified",
    "Invalid qos specification",
];

fn submit_named(fake: &Fake, name: &str) -> (i32, String, String) {
    fake.run(&[
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", name, "--", "true",
    ])
}

/// Exit 1 quoting the phrase, the refusal journaled with sbatch's stderr, the budget released
/// (reconcile has nothing unknown), `stop` says it failed, and the name is accepted again.
fn assert_refused_then_free(fake: &Fake, refusal: Value, phrase: &str, stderr: &str) {
    let mut first = refusal;
    first["times"] = json!(1);
    fake.scenario(json!({
        "sbatch": [first, {"stdout": "77\n"}],
        "squeue": [{"match": ["--jobs=77"], "stdout": squeue_row(77, "RUNNING", "w")}],
    }));
    let (code, _, err) = submit_named(fake, "w");
    assert_eq!(code, 1, "{phrase}: a definite refusal is a failure: {err}");
    assert!(
        err.contains(&format!("{phrase:?}")),
        "{phrase} not quoted: {err}"
    );
    assert!(!err.contains("reconcile"), "{phrase}: {err}");
    let events = fake.events();
    let failed = events.last().unwrap();
    assert_eq!(failed["kind"], "JobSubmitFailed", "{events:?}");
    assert_eq!(failed["event"]["definite"], true, "{phrase}");
    let reason = failed["event"]["reason"].as_str().unwrap();
    let last_line = stderr.trim_end().lines().last().unwrap();
    assert!(
        reason.contains(&format!("{last_line:?}").trim_matches('"').to_owned()),
        "{phrase}: the journal lacks sbatch's stderr: {reason}"
    );

    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["unknown"], json!([]), "{phrase}: {r}");

    let (code, _, err) = fake.run(&["stop", "w"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("failed at submission"), "{phrase}: {err}");
    assert!(err.contains(phrase), "{phrase}: {err}");
    assert!(!err.contains("reconcile"), "{phrase}: {err}");

    let (code, _, err) = submit_named(fake, "w");
    assert_eq!(code, 0, "{phrase}: the name is not free again: {err}");
}

#[test]
fn every_recognised_sbatch_refusal_is_a_definite_failure_that_frees_the_budget() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurm");
    for (fixture, phrase) in SBATCH_REFUSALS {
        let stderr = std::fs::read_to_string(dir.join(format!("{fixture}.stderr"))).unwrap();
        assert!(stderr.contains(phrase), "{fixture}");
        assert_refused_then_free(&Fake::new(), json!({"fixture": fixture}), phrase, &stderr);
    }
    for phrase in SBATCH_REFUSALS_UNRECORDED {
        let stderr = format!("sbatch: error: Batch job submission failed: {phrase}\n");
        let refusal = json!({"stderr": stderr, "exit": 1});
        assert_refused_then_free(&Fake::new(), refusal, phrase, &stderr);
    }
}

#[test]
fn an_sbatch_failure_in_other_words_stays_unknown_and_keeps_its_budget() {
    let refused = "sbatch: error: Batch job submission failed: Invalid partition name specified\n";
    for response in [
        json!({"stderr": "sbatch: error: Batch job submission failed: Something new\n", "exit": 1}),
        json!({"stderr": "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n", "exit": 1}),
        json!({"fixture": "real-ctld-down-sbatch"}),
        // The right words, but a job id was printed, or sbatch did not end on its own.
        json!({"stdout": "77\n", "stderr": refused, "exit": 1}),
        json!({"stderr": refused, "signal": 9}),
    ] {
        let fake = Fake::new();
        fake.scenario(json!({"sbatch": [response.clone()]}));
        let (code, _, err) = submit_named(&fake, "u");
        assert_eq!(code, 4, "{response}: {err}");
        assert!(err.contains("dispatch reconcile"), "{err}");
        let events = fake.events();
        let failed = events.last().unwrap();
        assert_eq!(failed["kind"], "JobSubmitFailed");
        assert_eq!(failed["event"]["definite"], false, "{response}");
        let (code, _, err) = submit_named(&fake, "u");
        assert_eq!(code, 3, "{response}: the held name was reused: {err}");
    }
}

#[test]
fn sbatch_missing_from_path_is_a_definite_failure() {
    let fake = Fake::new();
    fake.scenario(json!({}));
    // Everything but sbatch: squeue and friends are there, sbatch is not.
    let bin = fake.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    for p in ["squeue", "scancel", "scontrol", "sacct", "salloc", "srun"] {
        std::os::unix::fs::symlink(fake_cli::fake_bin().join(p), bin.join(p)).unwrap();
    }
    let out = fake
        .command(&[
            "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "nobin", "--",
            "true",
        ])
        .env("PATH", &bin)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nothing ran"), "{err}");
    assert!(err.contains("sbatch"), "{err}");
    let events = fake.events();
    assert_eq!(events.last().unwrap()["event"]["definite"], true);
    let (code, out, _) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0);
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["unknown"], json!([]), "{r}");
}

/// Issue 11 §2: `dispatch stop` holds no journal lock while it waits out its grace: another
/// command on the same state directory returns at once, and the stop still records the
/// release once the job is proven over.
#[test]
fn a_stop_waiting_out_its_grace_blocks_no_other_command() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "68\n"}]}));
    let (code, _, err) = fake.run(&[
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "g", "--", "true",
    ]);
    assert_eq!(code, 0, "{err}");
    fake.scenario(json!({
        "scancel": [{"stdout": ""}],
        "squeue": [{"match": ["--jobs=68"], "stdout": squeue_row(68, "RUNNING", "g")}],
    }));
    let mut stop = fake
        .command(&["stop", "g", "--grace", "15", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !fake.events().iter().any(|e| e["kind"] == "JobStopIntent") {
        assert!(std::time::Instant::now() < deadline, "no JobStopIntent");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let started = std::time::Instant::now();
    let (code, _, err) = fake.run(&["trial", "open", "t"]);
    let took = started.elapsed();
    assert_eq!(code, 0, "{err}");
    assert!(
        stop.try_wait().unwrap().is_none(),
        "the stop ended before the other command ran"
    );
    // The bound leaves room for a loaded 2-CPU machine; a lock held for the 15 s grace fails it.
    assert!(
        took.as_millis() < 2_000,
        "trial open took {took:?} while stop waited"
    );
    fake.scenario(json!({
        "scancel": [{"stdout": ""}],
        "squeue": [{"match": ["--jobs=68"], "stdout": squeue_row(68, "COMPLETED", "g")}],
    }));
    let out = stop.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        fake.events().last().unwrap()["kind"],
        "JobTerminal",
        "the release was not recorded"
    );
}

/// sbatch can take its whole timeout: `dispatch submit` decides and writes its receipt under
/// the journal's lock, and waits for sbatch without it (issue 11: no lock held across a wait).
#[test]
fn a_submit_waiting_for_sbatch_blocks_no_other_command() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"delay": 8, "stdout": "71\n"}]}));
    let mut submit = fake
        .command(&[
            "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "slow", "--json",
            "--", "true",
        ])
        .env("DISPATCH_SLURM_TIMEOUT", "30")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !fake.calls().iter().any(|(cmd, _)| cmd == "sbatch") {
        assert!(std::time::Instant::now() < deadline, "sbatch never ran");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (code, _, err) = fake.run(&["trial", "open", "t"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        submit.try_wait().unwrap().is_none(),
        "trial open waited for the submit's sbatch (the journal lock was held across it)"
    );
    let out = submit.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kinds = fake.kinds();
    let submitted = kinds.iter().position(|k| k == "JobSubmitted").unwrap();
    let opened = kinds.iter().position(|k| k == "TrialOpened").unwrap();
    assert!(opened < submitted, "{kinds:?}");
}

/// Issue 21 item 13, for `dispatch stop`: with scancel hanging, the message says the cancel's
/// outcome is unknown; a stop of the worker once released is success with the proof recorded.
#[test]
fn a_stop_says_what_scancel_answered_and_a_second_stop_is_success() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "88\n"}]}));
    let (code, _, err) = fake.run(&[
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "s", "--", "true",
    ]);
    assert_eq!(code, 0, "{err}");
    let name = job_name(&fake);
    fake.scenario(json!({
        "scancel": [{"match": ["--signal=TERM"], "stdout": ""}, {"hang": 60}],
        "squeue": [{"stdout": squeue_row(88, "RUNNING", &name)}],
    }));
    let (code, _, err) = fake.run(&["stop", "s", "--grace", "0"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("the cancel's outcome is unknown") && !err.contains("was cancelled"),
        "{err}"
    );
    fake.scenario(json!({
        "scancel": [{"stdout": ""}],
        "squeue": [{"match": ["--jobs=88"], "stderr": "slurm_load_jobs error: Invalid job id specified\n", "exit": 1}],
    }));
    let (code, out, err) = fake.run(&["stop", "s", "--json"]);
    assert_eq!(code, 0, "{err}");
    let first: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(first["already_released"], false);
    fake.forget_calls();
    let (code, out, err) = fake.run(&["stop", "s", "--json"]);
    assert_eq!(code, 0, "stopping what is stopped is success: {err}");
    let again: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (
            &again["already_released"],
            &again["state"],
            &again["job_id"]
        ),
        (&json!(true), &json!("released"), &json!(88))
    );
    assert_eq!(again["proof"], first["proof"]);
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    let (code, _, _) = fake.run(&["stop", "never"]);
    assert_eq!(code, 3);
}

/// A fake cluster where `dispatch submit --name WORKER` was killed between its intent and
/// sbatch: nothing exists, and its sbatch's limit (seconds) is returned.
fn lost_before_sbatch(worker: &str) -> (Fake, u64) {
    let fake = Fake::new();
    fake.crash(
        "submit-before-sbatch",
        &[
            "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", worker, "--",
            "true",
        ],
    );
    let events = fake.events();
    let named = events.iter().find(|e| e["kind"] == "JobNamed").unwrap();
    let limit_s = named["event"]["sbatch_limit_s"].as_u64().unwrap();
    (fake, limit_s)
}

/// Sleep until a submission lost at `lost_before_sbatch` is past its settle delay.
fn past_settle_delay(limit_s: u64) {
    std::thread::sleep(std::time::Duration::from_secs(limit_s + 31));
}

/// Issue 21 item 5: a `dispatch submit` killed between its intent and sbatch, by a user with no
/// other job, used to stay unknown for ever (no watermark). Once it settled, reconcile makes one
/// itself: a held beacon under the user's prefix, cancelled at once, and the listing taken after
/// it, which lists the beacon, proves the submission never created.
#[test]
fn a_lost_submit_with_no_later_job_is_settled_by_a_watermark_reconcile_makes() {
    let (fake, limit_s) = lost_before_sbatch("lone");
    let lost = job_name(&fake);
    let empty = json!({"squeue": [{"match": ["--me"], "stdout": ""}], "sacct": [{"stdout": ""}]});
    fake.scenario(empty.clone());
    // Within the settle delay nothing is made: an sbatch may still be in flight.
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["unknown"][0]["worker"], "lone", "{r}");
    assert!(
        !fake.programs().iter().any(|p| p == "sbatch"),
        "{:?}",
        fake.programs()
    );

    past_settle_delay(limit_s);
    let beacon = "dispatch-watermark-[0-9a-f]{8}";
    fake.scenario(json!({
        "squeue": [
            {"match": ["--me"], "times": 1, "stdout": ""},
            {"match": ["--me"], "stdout": squeue_row(77, "CANCELLED", "dispatch-watermark-0badcafe")},
        ],
        "sacct": [{"stdout": ""}],
        "sbatch": [{"match": ["--hold", format!("--job-name={beacon}")], "stdout": "77\n"}],
        "scancel": [{"argv": ["77"], "stdout": ""}],
    }));
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["unknown"], json!([]), "{r}");
    assert_eq!(r["watermark"]["job_id"], 77, "{r}");
    let proof = r["resolved"][0]["proof"].as_str().unwrap();
    assert!(
        proof.contains("never created") && proof.contains("job 77"),
        "{proof}"
    );
    assert!(proof.contains(&lost), "{proof}");
    assert_eq!(
        fake.programs(),
        ["squeue", "sacct", "sbatch", "scancel", "squeue"],
        "one beacon, cancelled at once, then one listing"
    );
    let kinds = fake.kinds();
    let tail = &kinds[kinds.len() - 4..];
    assert_eq!(
        tail,
        [
            "WatermarkIntent",
            "WatermarkMade",
            "WatermarkCancelled",
            "JobSubmitFailed"
        ]
    );
    let (code, out, _) = fake.run(&["audit", "--json"]);
    assert_eq!(code, 0, "{out}");
}

/// A beacon whose scancel got no answer is cancelled by the next reconcile, once.
#[test]
fn a_watermark_whose_cancel_was_lost_is_cancelled_by_the_next_reconcile() {
    let (fake, limit_s) = lost_before_sbatch("lone");
    past_settle_delay(limit_s);
    fake.scenario(json!({
        "squeue": [{"match": ["--me"], "stdout": ""}],
        "sacct": [{"stdout": ""}],
        "sbatch": [{"match": ["--hold"], "stdout": "78\n"}],
        "scancel": [{"hang": 30}],
    }));
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    // The listing after the beacon is empty (a blackout looks the same): still unknown.
    assert_eq!(r["unknown"][0]["worker"], "lone", "{r}");
    let cancelled: Vec<Value> = fake
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "WatermarkCancelled")
        .collect();
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0]["event"]["answered"], false);

    fake.scenario(json!({
        "squeue": [{"match": ["--me"], "stdout": squeue_row(78, "CANCELLED", "dispatch-watermark-0badcafe")}],
        "sacct": [{"stdout": ""}],
        "scancel": [{"argv": ["78"], "stdout": ""}],
    }));
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        r["unknown"],
        json!([]),
        "the beacon made before now settles it: {r}"
    );
    assert!(
        !fake.programs().iter().any(|p| p == "sbatch"),
        "{:?}",
        fake.programs()
    );
    assert_eq!(
        fake.programs().iter().filter(|p| *p == "scancel").count(),
        1
    );
    fake.forget_calls();
    let (_, out, _) = fake.run(&["reconcile", "--json"]);
    assert!(
        !fake.programs().iter().any(|p| p == "scancel"),
        "swept twice: {out}"
    );
}

/// A reconcile killed while making its watermark: after the intent, nothing exists and the next
/// run makes one; after the beacon's id is journaled, the next run cancels it and it serves as
/// the watermark (no second beacon).
#[test]
fn a_reconcile_killed_while_making_its_watermark_is_finished_by_the_next() {
    for fp in ["watermark-after-intent", "watermark-after-made"] {
        let (fake, limit_s) = lost_before_sbatch("w");
        past_settle_delay(limit_s);
        let listed = squeue_row(90, "CANCELLED", "dispatch-watermark-0badcafe");
        fake.scenario(json!({
            "squeue": [
                {"match": ["--me"], "times": 1, "stdout": ""},
                {"match": ["--me"], "stdout": listed},
            ],
            "sacct": [{"stdout": ""}],
            "sbatch": [{"match": ["--hold"], "stdout": "90\n"}],
            "scancel": [{"argv": ["90"], "stdout": ""}],
        }));
        fake.crash(fp, &["reconcile"]);
        let made = fake
            .kinds()
            .iter()
            .filter(|k| *k == "WatermarkMade")
            .count();
        assert_eq!(made, usize::from(fp == "watermark-after-made"), "{fp}");
        fake.forget_calls();
        let (code, out, err) = fake.run(&["reconcile", "--json"]);
        assert_eq!(code, 0, "{fp}: {err}");
        let r: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(r["unknown"], json!([]), "{fp}: {r}");
        let sbatches = fake.programs().iter().filter(|p| *p == "sbatch").count();
        assert_eq!(
            sbatches,
            usize::from(fp == "watermark-after-intent"),
            "{fp}"
        );
        assert_eq!(
            fake.programs().iter().filter(|p| *p == "scancel").count(),
            1,
            "{fp}"
        );
        let (code, out, _) = fake.run(&["audit", "--json"]);
        assert_eq!(code, 0, "{fp}: {out}");
    }
}

/// Issue 22 item 1: `submit --dry-run` is the submit's own plan (the duplicate-worker check, the
/// assets, the directories) plus `sbatch --test-only`: for any sequence of submissions, the
/// dry run's exit is the submit's, and a dry run that passes names the job's shape the submit
/// then gives it.
#[test]
fn prop_a_dry_run_answers_what_the_submit_then_does() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static SEEN: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
    fn prop(asks: Vec<(u8, u8)>) -> bool {
        let fake = Fake::new();
        fake.scenario(json!({"sbatch": [
            {"match": ["--test-only"], "stderr": "sbatch: Job 1003 to start at 2026-12-01T11:34:43 using 1 processors on nodes vm in partition debug\n"},
            {"stdout": "55\n"},
        ]}));
        for (i, (who, minutes)) in asks.into_iter().take(5).enumerate() {
            let name = format!("w{}", who % 3);
            let time = (1 + minutes % 12).to_string();
            let args = |dry: bool| {
                let mut a = vec![
                    "submit", "--cpus", "1", "--mem", "100M", "--time", &time, "--name", &name,
                    "--json",
                ];
                if dry {
                    a.push("--dry-run");
                }
                a.extend(["--", "true"]);
                a.into_iter().map(str::to_owned).collect::<Vec<_>>()
            };
            let run = |a: Vec<String>| fake.run(&a.iter().map(String::as_str).collect::<Vec<_>>());
            let (dry_code, dry_out, dry_err) = run(args(true));
            let (code, out, err) = run(args(false));
            if dry_code != code {
                eprintln!("ask {i} ({name}, {time} min): dry run {dry_code} ({dry_err}), submit {code} ({err})");
                return false;
            }
            SEEN[usize::from(code != 0)].fetch_add(1, Ordering::Relaxed);
            if code == 0 {
                let plan: Value = serde_json::from_str(dry_out.trim()).unwrap();
                let report: Value = serde_json::from_str(out.trim()).unwrap();
                let shape = format!("dispatch-{name}-");
                if !plan["job_name"].as_str().unwrap().starts_with(&shape)
                    || report["worker"] != name.as_str()
                {
                    eprintln!("ask {i}: plan {plan}, report {report}");
                    return false;
                }
            }
        }
        true
    }
    quickcheck::QuickCheck::new()
        .tests(8)
        .quickcheck(prop as fn(Vec<(u8, u8)>) -> bool);
    let (went, refused) = (
        SEEN[0].load(Ordering::Relaxed),
        SEEN[1].load(Ordering::Relaxed),
    );
    assert!(went > 0 && refused > 0, "went {went}, refused {refused}");
}

/// `scontrol show job` of job `id` in state `state`, requeued `restarts` times.
fn show_job_line(id: u32, name: &str, state: &str, reason: &str, restarts: u32) -> String {
    format!(
        "JobId={id} JobName={name} UserId=root(0) GroupId=root(0) Account=dev QOS=normal \
         JobState={state} Reason={reason} Dependency=(null) Requeue=1 Restarts={restarts} \
         BatchFlag=1 Reboot=0 ExitCode=0:0 Partition=debug NodeList=vm\n"
    )
}

/// Slurm requeued a `dispatch submit` job (an administrator; `Restarts=` grows, the job id
/// stays): reconcile records each larger count once (`JobRequeued`), never reads the earlier
/// run's end as the job's, and proves the job over only by the newest run's end, in one
/// commit with the count that run showed. A running job costs no `scontrol` call.
#[test]
fn reconcile_records_a_requeued_job_as_another_run_and_ends_it_only_by_its_newest() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "77\n"}]}));
    let (code, _, err) = fake.run(&[
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "rq", "--", "true",
    ]);
    assert_eq!(code, 0, "{err}");
    let name = job_name(&fake);
    let reconcile = |squeue_state: &str, reason: &str, show: Option<(&str, u32)>| {
        let mut row = squeue_row(77, squeue_state, &name);
        row = row.replace("|None|", &format!("|{reason}|"));
        let mut scenario = json!({"squeue": [{"match": ["--jobs=77"], "stdout": row}]});
        if let Some((state, restarts)) = show {
            scenario["scontrol"] = json!([{"match": ["show", "job", "77"],
                "stdout": show_job_line(77, &name, state, reason, restarts)}]);
        }
        fake.scenario(scenario);
        let (code, out, err) = fake.run(&["reconcile", "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(out.trim()).unwrap()
    };
    let requeues = |fake: &Fake| -> Vec<Value> {
        fake.events()
            .into_iter()
            .filter(|e| e["kind"] == "JobRequeued")
            .map(|e| e["event"].clone())
            .collect()
    };

    let r = reconcile("RUNNING", "None", None);
    assert_eq!(r["resolved"], json!([]), "{r}");
    assert!(
        !fake.programs().contains(&"scontrol".to_owned()),
        "a running job cost a scontrol call"
    );

    // Requeued: the earlier run ended (COMPLETING, then PENDING BeginTime), the job did not.
    for _ in 0..2 {
        let r = reconcile("PENDING", "BeginTime", Some(("PENDING", 1)));
        assert_eq!(
            r["resolved"],
            json!([]),
            "the earlier run's end is not the job's: {r}"
        );
    }
    let seen = requeues(&fake);
    assert_eq!(seen.len(), 1, "one record per larger count: {seen:?}");
    assert_eq!(seen[0]["job_id"], 77);
    assert_eq!(seen[0]["restarts"], 1);
    assert!(
        seen[0]["proof"].as_str().unwrap().contains("Restarts=1"),
        "{seen:?}"
    );
    let r = reconcile("COMPLETING", "None", Some(("COMPLETING", 1)));
    assert_eq!(r["resolved"], json!([]), "{r}");
    assert_eq!(requeues(&fake).len(), 1);

    // Requeued once more, and that run's supervisor refused (exit 3): the job is over, and the
    // count the newest run showed is recorded just before its end.
    let r = reconcile("FAILED", "NonZeroExitCode", Some(("FAILED", 2)));
    assert_eq!(r["resolved"][0]["job_id"], 77, "{r}");
    assert_eq!(r["requeued"][0]["restarts"], 2, "{r}");
    let kinds = fake.kinds();
    let at = kinds.iter().position(|k| k == "JobTerminal").unwrap();
    assert_eq!(kinds[at - 1], "JobRequeued", "{kinds:?}");
    assert_eq!(requeues(&fake)[1]["restarts"], 2);
}

/// Issue 38, what is left (3), for `dispatch stop`: without `--grace` the payload gets the
/// worker's own (`submit --grace 20`, as its supervisor recorded it at its start), not 10 s;
/// `--grace` still wins.
#[test]
fn a_stop_without_grace_gives_the_workers_own() {
    let fake = Fake::new();
    let gone = json!({
        "scancel": [{"stdout": ""}],
        "squeue": [{"match": ["--jobs=.*"], "stderr": "slurm_load_jobs error: Invalid job id specified\n", "exit": 1}],
    });
    let mut given = Vec::new();
    for (name, job, stop) in [
        ("own", "88", &["stop", "own"][..]),
        ("told", "89", &["stop", "told", "--grace", "5"][..]),
    ] {
        fake.scenario(json!({"sbatch": [{"stdout": format!("{job}\n")}]}));
        let (code, out, err) = fake.run(&[
            "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", name, "--grace",
            "20", "--json", "--", "true",
        ]);
        assert_eq!(code, 0, "{err}");
        let r: Value = serde_json::from_str(out.trim()).unwrap();
        let id: uuid::Uuid = r["submission_id"].as_str().unwrap().parse().unwrap();
        let dirs = dispatch::worker::dirs::WorkerDirs::of(&fake.state(), None, id);
        fake_cli::supervisor_started(&dirs.evidence, id, 20);
        fake.scenario(gone.clone());
        let (code, _, err) = fake.run(stop);
        assert_eq!(code, 0, "{err}");
        let intent = fake
            .events()
            .into_iter()
            .find(|e| e["kind"] == "JobStopIntent" && e["event"]["submission_id"] == id.to_string())
            .unwrap();
        let told = std::fs::read_to_string(dirs.root.join("stop-request")).unwrap();
        given.push((intent["event"]["grace_s"].clone(), told.trim().to_owned()));
    }
    assert_eq!(
        given,
        [
            (json!(20), "grace_s=20".to_owned()),
            (json!(5), "grace_s=5".to_owned())
        ]
    );
}
