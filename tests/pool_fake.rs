//! `pool attach/submit` against the fake Slurm, for what a real controller will not do on
//! demand: a live-metadata refusal that clears on the one re-inspection, an allocation replaced
//! under the same id, a step Slurm refuses to create, a controller that does not answer.

mod fake_cli;

use chrono::{Duration, Local};
use fake_cli::Fake;
use serde_json::{json, Value};

/// A fixed start time per process: the allocation's incarnation must not drift between calls.
fn started(ago_s: i64) -> chrono::DateTime<Local> {
    static BASE: std::sync::OnceLock<chrono::DateTime<Local>> = std::sync::OnceLock::new();
    *BASE.get_or_init(Local::now) - Duration::seconds(ago_s)
}

/// `scontrol --oneliner show job 901` for a running 4-CPU, 4 GB allocation owned by root.
fn show_job(start_ago_s: i64, end_in_s: i64) -> String {
    let fmt = |t: chrono::DateTime<Local>| t.format("%Y-%m-%dT%H:%M:%S").to_string();
    format!(
        "JobId=901 JobName=alloc UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 Account=dev \
         QOS=normal JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=0 Reboot=0 \
         ExitCode=0:0 RunTime=00:01:00 TimeLimit=01:00:00 TimeMin=N/A SubmitTime={s} EligibleTime={s} \
         AccrueTime=Unknown StartTime={s} EndTime={e} Deadline=N/A Partition=debug AllocNode:Sid=vm:1 \
         ReqNodeList=(null) ExcNodeList=(null) NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=4 NumTasks=1 \
         CPUs/Task=4 ReqB:S:C:T=0:0:*:* TRES=cpu=4,mem=4G,node=1,billing=4 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* \
         CoreSpec=* MinCPUsNode=4 MinMemoryNode=4G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 \
         OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/root Power=\n",
        s = fmt(started(start_ago_s)),
        e = fmt(Local::now() + Duration::seconds(end_in_s)),
    )
}

/// A fake cluster where pool `p` is attached to job 901, started `start_ago_s` ago.
trait Attached {
    fn attached(start_ago_s: i64) -> Fake;
}

impl Attached for Fake {
    fn attached(start_ago_s: i64) -> Fake {
        let fake = Fake::new();
        fake.scenario(json!({"scontrol": [{"stdout": show_job(start_ago_s, 3600)}]}));
        let (code, _, err) = fake.run(&["pool", "attach", "p", "--job", "901"]);
        assert_eq!(code, 0, "{err}");
        fake
    }
}

const SUBMIT: &[&str] = &[
    "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--name", "w", "--json", "--", "true",
];

#[test]
fn a_refusal_that_clears_on_the_one_reinspection_lets_the_worker_through() {
    let fake = Fake::attached(60);
    // Same incarnation (start time), first read says 100 s left (too short), the second an hour.
    fake.scenario(json!({
        "scontrol": [
            {"times": 1, "stdout": show_job(60, 100)},
            {"stdout": show_job(60, 3600)},
        ],
        "srun": [{"hang": 3}],
        "squeue": [{"match": ["--steps"], "stdout": "901.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w\n"}],
    }));
    let (code, out, err) = fake.run(SUBMIT);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["step_id"], "901.0");
    // The fake srun runs detached and logs its call when it starts, which on a busy machine
    // can be after dispatch has returned.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !fake.programs().iter().any(|p| p == "srun") {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            fake.programs()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let programs = fake.programs();
    assert_eq!(
        programs.iter().filter(|p| *p == "scontrol").count(),
        2,
        "{programs:?}"
    );
    // srun is started detached and step discovery polls at once: the fakes' log lines for
    // srun and the first squeue may land in either order.
    assert_eq!(programs[..2], ["scontrol", "scontrol"]);
    assert!(programs[2..4].contains(&"srun".to_owned()), "{programs:?}");
}

#[test]
fn a_refusal_that_holds_on_reinspection_refuses_with_nothing_launched() {
    let fake = Fake::attached(60);
    fake.scenario(json!({"scontrol": [{"stdout": show_job(60, 100)}]}));
    let before = fake.kinds().len();
    let (code, _, err) = fake.run(SUBMIT);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("100 s left") || err.contains("s left"),
        "{err}"
    );
    assert_eq!(
        fake.programs(),
        ["scontrol", "scontrol"],
        "exactly one complete re-inspection"
    );
    assert_eq!(fake.kinds().len(), before, "a refusal wrote events");
}

#[test]
fn an_allocation_replaced_under_the_same_id_is_refused_without_reinspection() {
    let fake = Fake::attached(60);
    fake.scenario(json!({"scontrol": [{"stdout": show_job(5, 3600)}]}));
    let (code, _, err) = fake.run(SUBMIT);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not the allocation"), "{err}");
    assert_eq!(fake.programs(), ["scontrol"]);
}

#[test]
fn a_step_slurm_refuses_to_create_releases_its_budget() {
    let fake = Fake::attached(60);
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"stderr": "srun: error: Unable to create step for job 901: More processors requested than permitted\n", "exit": 1}],
        "squeue": [{"match": ["--steps"], "stdout": ""}],
    }));
    let (code, _, err) = fake.run(SUBMIT);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("More processors requested"), "{err}");
    let kinds = fake.kinds();
    assert_eq!(
        kinds[kinds.len() - 4..],
        [
            "WorkerSubmitIntent",
            "WorkerPlaced",
            "WorkerLaunched",
            "WorkerLaunchFailed"
        ]
    );
    let (_, out, _) = fake.run(&["pool", "status", "--json"]);
    let st: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(st["pools"][0]["reserved"]["cpus"], 0, "{st}");
    assert_eq!(st["pools"][0]["workers"][0]["state"], "failed");
}

#[test]
fn a_controller_that_does_not_answer_changes_nothing() {
    let fake = Fake::attached(60);
    fake.scenario(json!({"scontrol": [{"delay": 30}]}));
    let before = fake.kinds().len();
    let (code, _, err) = fake.run(SUBMIT);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nothing was done"), "{err}");
    assert_eq!(fake.kinds().len(), before);
    assert!(!fake.programs().contains(&"srun".to_owned()));
}

#[test]
fn native_state_and_cleanup_budgets_are_separate_settings_that_widen_the_shutdown_window() {
    let fake = Fake::attached(60);
    fake.scenario(json!({"scontrol": [{"stdout": show_job(60, 3600)}]}));
    // 30 s publication + 3500 s native state + 15 s cleanup + 60 s minimum run > 3600 s left.
    let (code, _, err) = fake.run(&[
        "pool",
        "submit",
        "p",
        "--cpus",
        "1",
        "--mem",
        "100M",
        "--native-state-budget",
        "3500",
        "--",
        "true",
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("s left"), "{err}");
    let (code, _, err) = fake.run(&[
        "pool",
        "submit",
        "p",
        "--cpus",
        "1",
        "--mem",
        "100M",
        "--cleanup-budget",
        "3601",
        "--",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("whole seconds from 0 to 3600"), "{err}");
}

/// Before any journal exists, `pool status` shows no pools (exit 0), makes no Slurm call and
/// creates nothing.
#[test]
fn status_before_any_journal_shows_no_pools() {
    let fake = Fake::new();
    fake.scenario(serde_json::json!({}));
    let (code, out, err) = fake.run(&["pool", "status", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), r#"{"pools":[],"creating":[]}"#);
    assert!(fake.calls().is_empty());
    assert!(!fake.state().exists(), "status created the state directory");
}

/// Issue 10, item 7: squeue and sacct answer exit 0 with nothing while the step still runs (a
/// lying or misconfigured controller). `stop-worker` must not release the budget, and a submit
/// that only fits in the budget it still holds is refused.
#[test]
fn empty_answers_do_not_prove_a_stopped_step_over() {
    let fake = Fake::attached(60);
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 120}],
        "squeue": [{"match": ["--steps"], "stdout": "901.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w\n"}],
    }));
    let (code, out, err) = fake.run(SUBMIT);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(out.trim()).unwrap()["step_id"],
        "901.0"
    );

    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "squeue": [{"stdout": ""}],
        "sacct": [{"stdout": ""}],
        "scancel": [{"stdout": ""}],
    }));
    let (code, _, err) = fake.run(&["pool", "stop-worker", "p", "w", "--grace", "0"]);
    assert_eq!(code, 4, "an empty answer was taken for proof: {err}");
    let kinds = fake.kinds();
    assert!(!kinds.contains(&"WorkerTerminal".to_owned()), "{kinds:?}");

    // The allocation has 4 CPUs and the worker still holds 1.
    let (code, _, err) = fake.run(&[
        "pool", "submit", "p", "--cpus", "4", "--mem", "100M", "--name", "w2", "--", "true",
    ]);
    assert_eq!(
        code, 3,
        "a submit on top of a held budget was accepted: {err}"
    );
}

/// `scontrol show job` for allocation `id` (running, 4 CPUs, an hour left).
fn show_job_of(id: u32) -> String {
    show_job(60, 3600).replacen("JobId=901", &format!("JobId={id}"), 1)
}

/// A job listing row of allocation 901 in `state`.
fn job_row(state: &str) -> String {
    format!("901|901|{state}|debug|dev|normal|root|1|4|vm|59:00|1:00:00|2026-11-29T16:12:52|2026-11-29T17:12:52|None|alloc\n")
}

fn wait_for_kind(fake: &Fake, kind: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !fake.kinds().iter().any(|k| k == kind) {
        assert!(
            std::time::Instant::now() < deadline,
            "no {kind} in the journal"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Issue 11 §2: no command holds the journal lock across a wait. While `stop-worker --grace 15`
/// waits for its TERM to end the step, `pool attach`, `pool status` and `trial open` on the same
/// state directory each return at once (the issue measured 42.5 s for an attach).
#[test]
fn a_stop_waiting_out_its_grace_blocks_no_other_command() {
    let fake = Fake::attached(60);
    let step_row = "901.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w\n";
    let running = json!({
        "scontrol": [{"match": ["job", "902"], "stdout": show_job_of(902)}, {"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 120}],
        "squeue": [{"match": ["--steps"], "stdout": step_row}, {"stdout": job_row("RUNNING")}],
        "sacct": [{"stdout": ""}],
        "scancel": [{"stdout": ""}],
    });
    fake.scenario(running.clone());
    let (code, _, err) = fake.run(SUBMIT);
    assert_eq!(code, 0, "{err}");

    let mut stop = fake
        .command(&["pool", "stop-worker", "p", "w", "--grace", "15", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_kind(&fake, "WorkerStopIntent");
    let mut took = Vec::new();
    for args in [
        &["pool", "attach", "q", "--job", "902"][..],
        &["pool", "status", "--json"][..],
        &["trial", "open", "t"][..],
    ] {
        let started = std::time::Instant::now();
        let (code, _, err) = fake.run(args);
        let ms = started.elapsed().as_millis();
        assert_eq!(code, 0, "{args:?}: {err}");
        took.push((args[..2].join(" "), ms));
    }
    eprintln!("while stop-worker waits its grace: {took:?}");
    assert!(
        stop.try_wait().unwrap().is_none(),
        "stop-worker ended before the other commands ran"
    );
    for (what, ms) in &took {
        // The issue asks for 100 ms; the bound leaves room for a loaded 2-CPU machine and
        // still fails by an order of magnitude on a lock held for the 15 s grace.
        assert!(*ms < 2_000, "{what} took {ms} ms while stop-worker waited");
    }
    // The step ends: the stop proves it (listed job, step absent) and records the release.
    let mut over = running;
    over["squeue"] = json!([{"match": ["--steps"], "stdout": ""}, {"stdout": job_row("RUNNING")}]);
    fake.scenario(over);
    let out = stop.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kinds = fake.kinds();
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("WorkerTerminal"),
        "{kinds:?}"
    );
}

/// Issue 11 §2: with the lock released across Slurm calls, the budget is re-read under the
/// lock before the receipt: 16 submitters racing into a 4-CPU allocation never reserve more.
#[test]
fn sixteen_racing_submitters_never_over_reserve() {
    let fake = Fake::attached(60);
    let steps: String = (0..16)
        .map(|i| format!("901.{i}|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w{i}\n"))
        .collect();
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 60}],
        "squeue": [{"match": ["--steps"], "stdout": steps}],
    }));
    let children: Vec<_> = (0..16)
        .map(|i| {
            let name = format!("w{i}");
            fake.command(&[
                "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--name", &name, "--",
                "true",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let codes: Vec<i32> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code().unwrap_or(-1))
        .collect();
    assert_eq!(codes.iter().filter(|c| **c == 0).count(), 4, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 3).count(), 12, "{codes:?}");
    let (_, out, _) = fake.run(&["pool", "status", "--json"]);
    let st: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(st["pools"][0]["reserved"]["cpus"], 4, "{st}");
}

/// Issue 10, item 3: an srun that exits without ever making a step. Its exit, the supervisor's
/// journal (no start), the step listing beside the running job and accounting (the job, no
/// such step) after the settle delay together prove that the step never ran: the budget goes.
#[test]
fn an_srun_that_exits_without_a_step_is_proven_never_to_have_run() {
    let fake = Fake::attached(60);
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"stderr": "srun: error: Socket timed out on send/recv operation\n", "exit": 1}],
        "squeue": [{"match": ["--steps"], "stdout": ""}, {"stdout": job_row("RUNNING")}],
        "sacct": [{"stdout": "901|901|RUNNING|0:0|0:0|2026-11-29T16:12:52|2026-11-29T16:12:52|Unknown|00:01:00|01:00:00|vm|4|4G|debug|dev|normal|root|alloc\n"}],
    }));
    let (code, _, err) = fake.run(SUBMIT);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("never ran"), "{err}");
    let events = fake.events();
    let failed = events
        .iter()
        .rfind(|e| e["kind"] == "WorkerLaunchFailed")
        .expect("a WorkerLaunchFailed");
    assert_eq!(failed["event"]["definite"], true, "{failed}");
    let reason = failed["event"]["reason"].as_str().unwrap();
    for evidence in ["srun", "supervisor", "accounting", "step listing"] {
        assert!(
            reason.contains(evidence),
            "proof without {evidence}: {reason}"
        );
    }
    let (_, out, _) = fake.run(&["pool", "status", "--json"]);
    let st: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(st["pools"][0]["reserved"]["cpus"], 0, "{st}");
}

/// Issue 10, item 3: an srun that hangs without a step proves nothing. `pool submit` says the
/// outcome is unknown (exit 4, CLI.md), not `running` with no step; the budget stays held and
/// reconcile lists it as unknown.
#[test]
fn an_srun_that_hangs_without_a_step_is_unknown_and_keeps_its_budget() {
    let fake = Fake::attached(60);
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 120}],
        "squeue": [{"match": ["--steps"], "stdout": ""}, {"stdout": job_row("RUNNING")}],
        "sacct": [{"stdout": "901|901|RUNNING|0:0|0:0|2026-11-29T16:12:52|2026-11-29T16:12:52|Unknown|00:01:00|01:00:00|vm|4|4G|debug|dev|normal|root|alloc\n"}],
    }));
    let (code, _, err) = fake.run(SUBMIT);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("dispatch reconcile"), "{err}");
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["unknown"][0]["worker"], "w", "{r}");
    let (_, out, _) = fake.run(&["pool", "status", "--json"]);
    let st: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(st["pools"][0]["reserved"]["cpus"], 1, "{st}");
}

/// Issue 10, item 4: once reconcile proves the allocation over, `pool status` shows it ended,
/// with the proof, and no time left (it showed "172 s left").
#[test]
fn a_dead_allocation_is_shown_ended_not_counting_down() {
    let fake = Fake::attached(60);
    fake.scenario(json!({"squeue": [{"stdout": job_row("CANCELLED")}]}));
    let (code, out, err) = fake.run(&["pool", "status", "--refresh", "--json"]);
    assert_eq!(code, 0, "{err}");
    let st: Value = serde_json::from_str(out.trim()).unwrap();
    let a = &st["pools"][0]["allocation"];
    assert_eq!(a["state"], "ended", "{st}");
    assert!(a.get("seconds_left").is_none(), "{st}");
    assert!(
        a["ended_proof"].as_str().unwrap().contains("CANCELLED"),
        "{st}"
    );
    let (_, text, _) = fake.run(&["pool", "status"]);
    assert!(!text.contains("s left"), "{text}");
    assert!(text.contains("ended"), "{text}");
    // Recorded once, and shown without asking Slurm again.
    fake.scenario(json!({}));
    let (code, out, _) = fake.run(&["pool", "status", "--json"]);
    assert_eq!(code, 0);
    assert!(out.contains("\"ended\""), "{out}");
    assert_eq!(
        fake.kinds()
            .iter()
            .filter(|k| *k == "PoolAllocationEnded")
            .count(),
        1
    );
}

/// Issue 10, item 5: a supervisor killed before its cleanup (here: it never wrote a word)
/// leaves runtime, cache and checkout. Once the step is proven over the coordinator finishes
/// the cleanup by the same rules (the unpublished checkout stays), writes STATE-CLASS and
/// journals it, intent before outcome, before the release.
#[test]
fn the_coordinator_finishes_a_killed_supervisors_cleanup() {
    let fake = Fake::attached(60);
    let step_row = "901.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w\n";
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 120}],
        "squeue": [{"match": ["--steps"], "stdout": step_row}],
    }));
    let (code, out, err) = fake.run(SUBMIT);
    assert_eq!(code, 0, "{err}");
    let id = serde_json::from_str::<Value>(out.trim()).unwrap()["submission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let root = fake.state().join("pools/p/workers").join(&id);
    std::fs::write(root.join("cache/blob"), b"c").unwrap();
    std::fs::write(root.join("runtime/sock"), b"r").unwrap();
    std::fs::write(root.join("checkout/work"), b"w").unwrap();
    std::fs::write(root.join("state/db"), b"s").unwrap();
    // The step is gone beside its listed job.
    fake.scenario(json!({
        "squeue": [{"match": ["--steps"], "stdout": ""}, {"stdout": job_row("RUNNING")}],
        "sacct": [{"stdout": ""}],
    }));
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("absent"), "{out}");
    assert!(!root.join("runtime").exists() && !root.join("cache").exists());
    assert_eq!(std::fs::read(root.join("checkout/work")).unwrap(), b"w");
    assert_eq!(std::fs::read(root.join("state/db")).unwrap(), b"s");
    let class = std::fs::read_to_string(root.join("STATE-CLASS")).unwrap();
    assert!(class.starts_with("crash_class_partial\n"), "{class}");
    let kinds = fake.kinds();
    let n = kinds.len();
    assert_eq!(
        kinds[n - 3..],
        ["WorkerCleanupIntent", "WorkerCleanedUp", "WorkerTerminal"],
        "{kinds:?}"
    );
    // Run again: nothing more to do, nothing written.
    let (code, _, _) = fake.run(&["reconcile"]);
    assert_eq!(code, 0);
    assert_eq!(fake.kinds().len(), n);
}

/// The tickets waiting in pool `p`'s queue (`pool submit --wait`).
fn waiting(fake: &Fake) -> usize {
    std::fs::read_dir(fake.state().join("pools/p/queue"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("t-"))
                .count()
        })
        .unwrap_or(0)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `pool submit p --wait … --name NAME --cpus CPUS -- true`, spawned.
fn spawn_waiter(fake: &Fake, name: &str, cpus: &str, wait: &str) -> std::process::Child {
    fake.command(&[
        "pool", "submit", "p", "--cpus", cpus, "--mem", "100M", "--name", name, wait, "--json",
        "--", "true",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap()
}

fn finished(child: std::process::Child) -> (i32, Value, String) {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), json, stderr)
}

/// The most CPUs the journal ever had reserved in pool `p`, replaying it event by event.
fn most_cpus_ever_reserved(fake: &Fake) -> u64 {
    let mut held = std::collections::HashMap::new();
    let mut most = 0;
    for e in fake.events() {
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

/// The full pool for the waiting tests: worker `w0` holds all 4 CPUs in step 901.0.
fn full_pool() -> Fake {
    let fake = Fake::attached(60);
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 30}],
        "squeue": [{"match": ["--steps"], "stdout": "901.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w0\n"}],
    }));
    let (code, _, err) = fake.run(&[
        "pool", "submit", "p", "--cpus", "4", "--mem", "100M", "--name", "w0", "--", "true",
    ]);
    assert_eq!(code, 0, "{err}");
    fake
}

/// Steps listed as running in allocation 901: (step number, worker name).
fn steps_listed(steps: &[(u32, &str)]) -> Value {
    let rows: String = steps
        .iter()
        .map(|(n, w)| format!("901.{n}|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.{w}\n"))
        .collect();
    json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 30}],
        "squeue": [{"match": ["--steps"], "stdout": rows}, {"stdout": job_row("RUNNING")}],
        "sacct": [{"stdout": ""}],
    })
}

/// Issue 14: `pool submit --wait` waits for room instead of refusing, first come first
/// served: `a` queued before `b` gets the room first, although both want all of it. While they
/// wait they hold no journal lock (a writing command returns at once) and ask Slurm nothing.
#[test]
fn waiters_take_room_in_arrival_order_without_the_lock_or_slurm_calls() {
    let fake = full_pool();
    fake.forget_calls();
    let a = spawn_waiter(&fake, "a", "4", "--wait");
    wait_until("a queued", || waiting(&fake) == 1);
    let b = spawn_waiter(&fake, "b", "4", "--wait");
    wait_until("b queued", || waiting(&fake) == 2);
    // Waiting: no lock held (a writing command returns at once), and no Slurm call beyond
    // the first look each made before it queued.
    let started = std::time::Instant::now();
    let (code, _, err) = fake.run(&["trial", "open", "t"]);
    assert_eq!(code, 0, "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let programs = fake.programs();
    assert_eq!(programs, ["scontrol", "scontrol"], "waiters asked Slurm");

    // w0's step ends; reconcile proves it (listed job, step absent) and frees the room: `a`
    // takes it, `b` goes on waiting.
    fake.scenario(steps_listed(&[(1, "a"), (2, "b")]));
    let (code, _, err) = fake.run(&["reconcile"]);
    assert_eq!(code, 0, "{err}");
    let (code, ra, err) = finished(a);
    assert_eq!(code, 0, "{err}");
    assert_eq!(ra["step_id"], "901.1", "{ra}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(waiting(&fake), 1, "b should still wait");

    // `a` ends: `b` gets its turn.
    fake.scenario(steps_listed(&[(2, "b")]));
    let (code, _, err) = fake.run(&["reconcile"]);
    assert_eq!(code, 0, "{err}");
    let (code, rb, err) = finished(b);
    assert_eq!(code, 0, "{err}");
    assert_eq!(rb["step_id"], "901.2", "{rb}");
    assert_eq!(waiting(&fake), 0);

    let intents: Vec<String> = fake
        .events()
        .iter()
        .filter(|e| e["kind"] == "WorkerSubmitIntent")
        .map(|e| e["event"]["worker"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(intents, ["w0", "a", "b"]);
    assert_eq!(most_cpus_ever_reserved(&fake), 4);
}

/// A waiter killed while it waits leaves a ticket nobody holds: the next in line removes it
/// and is served.
#[test]
fn a_killed_waiter_does_not_block_the_queue() {
    let fake = full_pool();
    let mut a = spawn_waiter(&fake, "a", "4", "--wait");
    wait_until("a queued", || waiting(&fake) == 1);
    a.kill().unwrap();
    a.wait().unwrap();
    assert_eq!(waiting(&fake), 1, "SIGKILL leaves the ticket");
    let b = spawn_waiter(&fake, "b", "4", "--wait");
    wait_until("b queued", || waiting(&fake) <= 2);
    fake.scenario(steps_listed(&[(2, "b")]));
    let (code, _, err) = fake.run(&["reconcile"]);
    assert_eq!(code, 0, "{err}");
    let (code, rb, err) = finished(b);
    assert_eq!(code, 0, "{err}");
    assert_eq!(rb["step_id"], "901.2", "{rb}");
    assert_eq!(waiting(&fake), 0);
}

/// The clear exits of `--wait`: a request bigger than the allocation refuses at once; a
/// limit that passes refuses saying so; nothing is journaled and no ticket is left.
#[test]
fn a_wait_that_cannot_succeed_ends_with_a_refusal_that_says_why() {
    let fake = full_pool();
    let before = fake.kinds().len();
    let started = std::time::Instant::now();
    let (code, _, err) = finished(spawn_waiter(&fake, "big", "5", "--wait"));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("can never fit"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    let started = std::time::Instant::now();
    let (code, _, err) = finished(spawn_waiter(&fake, "x", "1", "--wait=1"));
    let took = started.elapsed();
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("within the 1 s of --wait"), "{err}");
    assert!(took >= std::time::Duration::from_secs(1), "{took:?}");
    assert!(took < std::time::Duration::from_secs(6), "{took:?}");
    assert_eq!(fake.kinds().len(), before, "a refused wait wrote events");
    assert_eq!(waiting(&fake), 0, "a ticket was left behind");
}

/// `--wait` without a limit gives up (exit 3) once the allocation has become too short for the
/// worker: here it has 3520 s left and the worker needs 3515 s before its end.
#[test]
fn a_wait_ends_when_the_allocation_becomes_too_short_for_the_worker() {
    let fake = full_pool();
    let mut s = steps_listed(&[(0, "w0")]);
    s["scontrol"] = json!([{"stdout": show_job(60, 3520)}]);
    fake.scenario(s);
    let started = std::time::Instant::now();
    let out = fake
        .command(&[
            "pool",
            "submit",
            "p",
            "--cpus",
            "1",
            "--mem",
            "100M",
            "--native-state-budget",
            "3400",
            "--wait",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("became too short"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    assert_eq!(waiting(&fake), 0);
}

/// Issue 14: `pool submit --dry-run` checks what a submit checks, Slurm included, and writes
/// nothing: a full pool refuses (exit 3) as a submit would, with `--wait` it would go (exit 0,
/// after waiting), and the journal is as it was.
#[test]
fn a_dry_run_checks_everything_and_journals_nothing() {
    let fake = full_pool();
    let before = fake.kinds().len();
    fake.forget_calls();
    let (code, _, err) = fake.run(&[
        "pool",
        "submit",
        "p",
        "--cpus",
        "1",
        "--mem",
        "100M",
        "--dry-run",
        "--",
        "true",
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("no node with room"), "{err}");
    let (code, out, err) = fake.run(&[
        "pool",
        "submit",
        "p",
        "--cpus",
        "1",
        "--mem",
        "100M",
        "--dry-run",
        "--wait",
        "--json",
        "--",
        "true",
    ]);
    assert_eq!(code, 0, "{err}");
    let plan: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(plan["dry_run"], true, "{plan}");
    assert_eq!(plan["room"], "after_waiting", "{plan}");
    assert_eq!(plan["reserved_cpus"], 4, "{plan}");
    let (code, _, err) = fake.run(&[
        "pool",
        "submit",
        "p",
        "--cpus",
        "1",
        "--mem",
        "100M",
        "--dry-run",
        "--name",
        "w0",
        "--",
        "true",
    ]);
    assert_eq!(code, 3, "a duplicate name passed: {err}");
    // The dry run is the submit's own plan: a refusal is asked about once more, as a submit
    // asks (the first and third), and a --wait that passes asks once.
    assert_eq!(fake.programs(), ["scontrol"; 5]);
    assert_eq!(fake.kinds().len(), before, "a dry run wrote events");
    assert_eq!(waiting(&fake), 0);
}

/// Issue 14: `submit --dry-run` asks `sbatch --test-only` with the job's placement and says
/// where and when it would start; a refusal is the refusal's exit; nothing is created.
#[test]
fn a_submit_dry_run_asks_sbatch_test_only_and_creates_nothing() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [
        {"match": ["--test-only"], "absent": ["--mem=999999M"], "stderr": "sbatch: Job 1003 to start at 2026-12-01T11:34:43 using 1 processors on nodes vm in partition debug\n"},
        {"match": ["--test-only"], "stderr": "allocation failure: Requested node configuration is not available\n", "exit": 1},
    ]}));
    let (code, out, err) = fake.run(&[
        "submit",
        "--time",
        "10",
        "--cpus",
        "1",
        "--mem",
        "100M",
        "--dry-run",
        "--json",
        "--",
        "true",
    ]);
    assert_eq!(code, 0, "{err}");
    let plan: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(plan["would_start"], "2026-12-01T11:34:43", "{plan}");
    assert_eq!(plan["nodes"], "vm", "{plan}");
    let (code, _, err) = fake.run(&[
        "submit",
        "--time",
        "10",
        "--cpus",
        "1",
        "--mem",
        "999999M",
        "--dry-run",
        "--",
        "true",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("Requested node configuration"), "{err}");
    let calls = fake.calls();
    assert!(
        calls
            .iter()
            .all(|(c, a)| c == "sbatch" && a[0] == "--test-only"),
        "{calls:?}"
    );
    assert!(
        !fake.state().exists(),
        "a dry run created the state directory"
    );
}

/// Issue 21 item 13: a worker's stop says exactly what is known. With scancel hanging, the
/// cancel's outcome is unknown and the message says so (not "was cancelled"); once the step is
/// proven over, a second stop of the released worker is success, with the proof recorded then.
#[test]
fn a_stop_says_what_scancel_answered_and_a_second_stop_is_success() {
    let fake = Fake::attached(60);
    let step_listed = "901.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w\n";
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 120}],
        "squeue": [{"match": ["--steps"], "stdout": step_listed}],
    }));
    let (code, _, err) = fake.run(SUBMIT);
    assert_eq!(code, 0, "{err}");

    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "squeue": [{"match": ["--steps"], "stdout": step_listed}, {"stdout": job_row("RUNNING")}],
        "scancel": [{"hang": 60}],
    }));
    let (code, _, err) = fake.run(&["pool", "stop-worker", "p", "w", "--grace", "0"]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("the cancel's outcome is unknown") && !err.contains("was cancelled"),
        "{err}"
    );

    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "squeue": [{"match": ["--steps"], "stdout": ""}, {"stdout": job_row("RUNNING")}],
        "scancel": [{"stdout": ""}],
    }));
    let (code, out, err) = fake.run(&["pool", "stop-worker", "p", "w", "--json"]);
    assert_eq!(code, 0, "{err}");
    let first: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (&first["state"], &first["already_released"]),
        (&json!("released"), &json!(false))
    );
    fake.forget_calls();
    let (code, out, err) = fake.run(&["pool", "stop-worker", "p", "w", "--json"]);
    assert_eq!(code, 0, "stopping what is stopped is success: {err}");
    let again: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(again["already_released"], true);
    assert_eq!(again["state"], "released");
    assert_eq!(again["proof"], first["proof"]);
    assert_eq!(again["step_id"], "901.0");
    assert!(
        fake.calls().iter().all(|(p, _)| p != "scancel"),
        "{:?}",
        fake.calls()
    );
    let (code, out, _) = fake.run(&["pool", "stop-worker", "p", "w"]);
    assert_eq!(code, 0);
    assert!(out.contains("was already released"), "{out}");
    let (code, _, err) = fake.run(&["pool", "stop-worker", "p", "nobody"]);
    assert_eq!(
        code, 3,
        "a worker the pool never had is still not found: {err}"
    );
}

// One owner per allocation (issue 21 item 6): the journal holding a pool's allocation marks it
// in the job's comment, and another state directory's attach is refused unless `--steal`.

const ATTACH: &[&str] = &["pool", "attach", "p", "--job", "901", "--json"];

/// This journal's id, from its Genesis.
fn journal_id(fake: &Fake, state: &std::path::Path) -> String {
    let (code, out, err) = fake.run_in(state, &["journal", "dump", "--json"]);
    assert_eq!(code, 0, "{err}");
    let genesis: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    genesis["event"]["journal_id"].as_str().unwrap().to_owned()
}

fn kinds_in(fake: &Fake, state: &std::path::Path) -> Vec<String> {
    let (code, out, err) = fake.run_in(state, &["journal", "dump", "--json"]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// The comments set by `scontrol update`, in order.
fn comments_set(fake: &Fake) -> Vec<String> {
    fake.calls()
        .into_iter()
        .filter(|(p, argv)| p == "scontrol" && argv.first().is_some_and(|a| a == "update"))
        .map(|(_, argv)| {
            assert!(argv.contains(&"JobId=901".to_owned()), "{argv:?}");
            argv.iter()
                .find_map(|a| a.strip_prefix("Comment="))
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn an_attach_marks_the_allocation_and_another_state_dir_is_refused() {
    let fake = Fake::new();
    fake.scenario(json!({"scontrol": [{"stdout": show_job(60, 3600)}]}));
    let (code, out, err) = fake.run(ATTACH);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    let journal = journal_id(&fake, &fake.state());
    let mark = r["mark"].as_str().unwrap();
    assert!(
        mark.starts_with(&format!("dispatch-pool/{journal}/")),
        "{r}"
    );
    assert!(mark.ends_with("/p"), "{r}");
    assert_eq!(comments_set(&fake), [mark]);
    assert_eq!(fake.programs(), ["scontrol", "scontrol", "scontrol"]);
    let kinds = fake.kinds();
    assert_eq!(
        kinds[kinds.len() - 3..],
        ["AllocationMarkIntent", "AllocationMarked", "PoolAttached"]
    );

    // A detach whose unmarking gets no answer says so and leaves the mark; this journal's
    // next attach finds its own mark and writes nothing into Slurm.
    fake.scenario(json!({"scontrol": [
        {"match": ["update"], "hang": 30},
        {"stdout": show_job(60, 3600)},
    ]}));
    let (code, out, err) = fake.run(&["pool", "detach", "p", "--json"]);
    assert_eq!(code, 0, "{err}");
    let d: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(d["unmarked"], false, "{d}");
    assert!(
        d["warnings"][0].as_str().unwrap().contains("--steal"),
        "{d}"
    );
    fake.scenario(json!({"scontrol": [{"stdout": show_job(60, 3600)}]}));
    let (code, _, err) = fake.run(ATTACH);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        fake.programs(),
        ["scontrol"],
        "its own mark is not written again"
    );
    assert_eq!(fake.kinds().last().unwrap(), "PoolAttached");
    fake.run(&["pool", "detach", "p"]);
    fake.forget_calls();

    // Another state directory (another login node, or another user of the account).
    let other = fake.dir.path().join("other-state");
    let (code, _, err) = fake.run_in(&other, &["pool", "attach", "q", "--job", "901"]);
    assert_eq!(code, 0, "the detach took the mark out: {err}");
    fake.forget_calls();
    let (code, _, err) = fake.run(&["pool", "attach", "p", "--job", "901"]);
    assert_eq!(code, 3, "{err}");
    let other_journal = journal_id(&fake, &other);
    for needed in [
        other_journal.as_str(),
        "pool \"q\"",
        "--steal",
        "pool detach q",
    ] {
        assert!(err.contains(needed), "{needed:?} missing: {err}");
    }
    assert!(
        comments_set(&fake).is_empty(),
        "a refused attach wrote the comment"
    );
    let (_, out, _) = fake.run(&["pool", "status", "--json"]);
    let st: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(st["pools"], json!([]), "{st}");
}

#[test]
fn a_steal_is_an_override_and_the_robbed_pool_then_refuses_to_submit() {
    let fake = Fake::attached(60);
    let other = fake.dir.path().join("other-state");
    let steal = |reason: &str| {
        fake.run_in(
            &other,
            &[
                "pool", "attach", "q", "--job", "901", "--json", "--steal", reason,
            ],
        )
    };
    let (code, _, err) = steal(" ");
    assert_eq!(code, 2, "an empty reason is a usage error: {err}");
    let (code, out, err) = steal("login1 is gone for good");
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    let first = journal_id(&fake, &fake.state());
    assert!(r["stolen_from"].as_str().unwrap().contains(&first), "{r}");
    assert!(
        r["mark"]
            .as_str()
            .unwrap()
            .contains(&journal_id(&fake, &other)),
        "{r}"
    );
    let kinds = kinds_in(&fake, &other);
    assert_eq!(
        kinds[kinds.len() - 4..],
        [
            "AllocationStolen",
            "AllocationMarkIntent",
            "AllocationMarked",
            "PoolAttached"
        ]
    );
    let (code, out, err) = fake.run_in(&other, &["audit", "--json"]);
    assert_eq!(code, 0, "{err}");
    let audit: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(audit["rules"]["override_count"], 1, "{audit}");
    let said = audit["rules"]["overrides"].to_string();
    assert!(
        said.contains("login1 is gone for good") && said.contains(&first),
        "{said}"
    );

    // The robbed journal's next submit sees the other mark and starts nothing.
    fake.forget_calls();
    let (code, _, err) = fake.run(SUBMIT);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("another state directory"), "{err}");
    assert!(
        !fake.programs().iter().any(|p| p == "srun"),
        "{:?}",
        fake.programs()
    );
}

#[test]
fn a_detach_takes_only_the_mark_out_of_the_users_comment() {
    let fake = Fake::new();
    fake.scenario(json!({"scontrol": [{"stdout": show_job(60, 3600)}]}));
    std::fs::write(
        fake.dir.path().join("scenario.json.state.comments"),
        json!({"901": "my own words"}).to_string(),
    )
    .unwrap();
    let (code, out, err) = fake.run(ATTACH);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    let mark = r["mark"].as_str().unwrap();
    let (code, out, err) = fake.run(&["pool", "detach", "p", "--json"]);
    assert_eq!(code, 0, "{err}");
    let d: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(d["unmarked"], true, "{d}");
    assert_eq!(
        comments_set(&fake),
        [format!("my own words {mark}"), "my own words".to_owned()]
    );
    let kinds = fake.kinds();
    assert_eq!(
        kinds[kinds.len() - 3..],
        ["PoolDetached", "AllocationMarkIntent", "AllocationMarked"]
    );
}

#[test]
fn a_mark_that_does_not_show_attaches_nothing() {
    let fake = Fake::new();
    // scontrol update answers but changes nothing; then it hangs.
    fake.scenario(json!({"scontrol": [
        {"match": ["update"], "times": 1, "stdout": ""},
        {"match": ["update"], "hang": 30},
        {"stdout": show_job(60, 3600)},
    ]}));
    for _ in 0..2 {
        let (code, _, err) = fake.run(&["pool", "attach", "p", "--job", "901"]);
        assert_eq!(code, 4, "{err}");
        assert!(err.contains("pool p was not attached"), "{err}");
        let kinds = fake.kinds();
        assert_eq!(
            kinds[kinds.len() - 2..],
            ["AllocationMarkIntent", "AllocationMarked"]
        );
        let (_, out, _) = fake.run(&["pool", "status", "--json"]);
        assert_eq!(
            serde_json::from_str::<Value>(out.trim()).unwrap()["pools"],
            json!([])
        );
    }
    let events = fake.events();
    let outcomes: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "AllocationMarked")
        .collect();
    assert!(
        outcomes.iter().all(|e| e["event"]["ok"] == false),
        "{outcomes:?}"
    );
}

#[test]
fn an_attach_that_loses_the_race_for_the_mark_is_refused() {
    let fake = Fake::new();
    let theirs = "dispatch-pool/00000000-0000-4000-8000-000000000042/login2/q";
    let shown_after = show_job(60, 3600).replace('\n', &format!(" Comment={theirs}\n"));
    fake.scenario(json!({"scontrol": [
        {"match": ["show"], "times": 1, "stdout": show_job(60, 3600)},
        {"match": ["update"], "stdout": ""},
        {"stdout": shown_after},
    ]}));
    let (code, _, err) = fake.run(&["pool", "attach", "p", "--job", "901"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("00000000-0000-4000-8000-000000000042") && err.contains("login2"),
        "{err}"
    );
    let kinds = fake.kinds();
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["AllocationMarkIntent", "AllocationMarked"]
    );
}

#[test]
fn an_attach_killed_after_its_mark_intent_is_settled_by_the_next() {
    let fake = Fake::new();
    fake.scenario(json!({"scontrol": [{"stdout": show_job(60, 3600)}]}));
    fake.crash(
        "pool-attach-after-mark-intent",
        &["pool", "attach", "p", "--job", "901"],
    );
    assert_eq!(fake.kinds().last().unwrap(), "AllocationMarkIntent");
    assert!(comments_set(&fake).is_empty());
    let (code, _, err) = fake.run(&["pool", "attach", "p", "--job", "901"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(comments_set(&fake).len(), 1);
    let (code, out, err) = fake.run(&["audit", "--json"]);
    assert_eq!(code, 0, "{err} {out}");
}

/// Issue 22 item 1: `pool submit --dry-run` is the submit's own plan, so its answer is what the
/// submit then does. For any sequence of workers against a 4-CPU, 4 GB pool: the dry run's exit
/// is the submit's, and a dry run that passes predicts the step's name and the reservation the
/// submit then makes.
#[test]
fn prop_a_dry_run_answers_what_the_submit_then_does() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // (went, refused): the cases must have tried both.
    static SEEN: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
    fn prop(asks: Vec<(u8, u16)>) -> bool {
        let fake = Fake::attached(60);
        let mut running: Vec<(u32, String)> = Vec::new();
        for (i, (cpus, mem)) in asks.into_iter().take(5).enumerate() {
            let (cpus, mem_mb) = (1 + u32::from(cpus % 4), 100 + u64::from(mem % 2500));
            let name = format!("w{i}");
            let mut listed: Vec<(u32, &str)> =
                running.iter().map(|(n, w)| (*n, w.as_str())).collect();
            let step_no = running.len() as u32;
            listed.push((step_no, &name));
            fake.scenario(steps_listed(&listed));
            let args = |dry: bool| {
                let (c, m) = (cpus.to_string(), format!("{mem_mb}M"));
                let mut a = vec![
                    "pool", "submit", "p", "--cpus", &c, "--mem", &m, "--name", &name, "--json",
                ]
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>();
                if dry {
                    a.push("--dry-run".to_owned());
                }
                a.extend(["--".to_owned(), "true".to_owned()]);
                a
            };
            let run = |a: Vec<String>| fake.run(&a.iter().map(String::as_str).collect::<Vec<_>>());
            let (dry_code, dry_out, dry_err) = run(args(true));
            let (code, out, err) = run(args(false));
            if dry_code != code {
                eprintln!("ask {i} ({cpus} CPUs, {mem_mb} MB): dry run {dry_code} ({dry_err}), submit {code} ({err})");
                return false;
            }
            SEEN[usize::from(code != 0)].fetch_add(1, Ordering::Relaxed);
            if code != 0 {
                continue;
            }
            let plan: Value = serde_json::from_str(dry_out.trim()).unwrap();
            let report: Value = serde_json::from_str(out.trim()).unwrap();
            let (_, status, _) = fake.run(&["pool", "status", "p", "--json"]);
            let status: Value = serde_json::from_str(status.trim()).unwrap();
            let reserved = &status["pools"][0]["reserved"];
            let agrees = plan["step_name"] == format!("p.{name}")
                && report["step_id"] == format!("901.{step_no}")
                && reserved["cpus"].as_u64()
                    == Some(plan["reserved_cpus"].as_u64().unwrap() + u64::from(cpus))
                && reserved["mem_mb"].as_u64()
                    == Some(plan["reserved_mem_mb"].as_u64().unwrap() + mem_mb);
            if !agrees {
                eprintln!("ask {i}: plan {plan}, report {report}, status {status}");
                return false;
            }
            running.push((step_no, name));
        }
        true
    }
    quickcheck::QuickCheck::new()
        .tests(8)
        .quickcheck(prop as fn(Vec<(u8, u16)>) -> bool);
    let (went, refused) = (
        SEEN[0].load(Ordering::Relaxed),
        SEEN[1].load(Ordering::Relaxed),
    );
    assert!(went > 0 && refused > 0, "went {went}, refused {refused}");
}

/// A command reads the journal whole once: each later read under the lock (after its Slurm
/// calls) folds in only what was appended since (`journal::reader::catch_up`).
#[test]
fn pool_submit_reads_the_journal_whole_once_and_catches_up_after() {
    let fake = Fake::attached(60);
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 3}],
        "squeue": [{"match": ["--steps"], "stdout": "901.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w\n"}],
    }));
    let out = fake
        .command(SUBMIT)
        .env("DISPATCH_LOG", "dispatch::journal::reader=debug")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let whole = err.matches(" read whole: ").count();
    let caught_up = err.matches(" caught up: ").count();
    assert_eq!(whole, 1, "{err}");
    assert!(
        caught_up >= 2,
        "the receipt and the launch's outcome: {err}"
    );
    let r: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert_eq!(r["step_id"], "901.0");
}

/// A worker journal as an older supervisor left it for a payload that exited 3: published,
/// its state called sealed, its outcome `completed`.
fn journal_of_a_failed_payload(evidence: &std::path::Path) {
    use dispatch::event::worker::*;
    use dispatch::event::{Actor, Sha256Digest, WorkerEvent};
    let w = dispatch::journal::JournalWriter::<WorkerEvent>::open_as(
        &evidence.join("journal"),
        dispatch::journal::Options::default(),
        Actor::current(),
    )
    .unwrap();
    w.append(vec![
        WorkerEvent::StepDevices(StepDevices {
            step_gpus: Some("2".into()),
            cuda_visible_devices: Some("0".into()),
        }),
        WorkerEvent::PayloadStarted(PayloadStarted { pid: 4242 }),
        WorkerEvent::PayloadExited(PayloadExited {
            code: Some(3),
            signal: None,
            interrupted: false,
        }),
        WorkerEvent::Published(Published {
            dir: "/published/w".into(),
            manifest_sha256: Sha256Digest([7; 32]),
            files: 1,
            bytes: 1,
            commits: 0,
            patch_bytes: 0,
            took_ms: 1,
        }),
        WorkerEvent::CleanedUp(CleanedUp {
            removed: vec![],
            kept: vec![],
            state_class: "sealed".into(),
            reason: "the payload finished on its own".into(),
            errors: vec![],
        }),
        WorkerEvent::SupervisorFinished(SupervisorFinished {
            outcome: "completed".into(),
            exit_code: 3,
        }),
    ])
    .unwrap();
}

/// Issue 36, items 2 and 3: a payload that exited 3 is a failure wherever its end is shown,
/// with its code; before the refresh proves its step over, `pool status` says what the
/// worker journal knows (it exited and published) instead of `running`.
#[test]
fn a_failed_payload_is_shown_failed_with_its_exit_code_before_and_after_the_refresh() {
    let fake = Fake::attached(60);
    let step_row = "901.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w\n";
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 120}],
        "squeue": [{"match": ["--steps"], "stdout": step_row}],
    }));
    let (code, out, err) = fake.run(SUBMIT);
    assert_eq!(code, 0, "{err}");
    let id = serde_json::from_str::<Value>(out.trim()).unwrap()["submission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    journal_of_a_failed_payload(
        &fake
            .state()
            .join("pools/p/workers")
            .join(&id)
            .join("evidence"),
    );
    let worker = |fake: &Fake| {
        let (code, out, err) = fake.run(&["pool", "status", "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(out.trim()).unwrap()["pools"][0]["workers"][0].clone()
    };
    let w = worker(&fake);
    assert_eq!(w["state"], "running", "the coordinator's word stays: {w}");
    assert_eq!(w["stage"], "published", "{w}");
    assert_eq!(w["outcome"], "failed", "{w}");
    assert_eq!(w["exit_code"], 3, "{w}");
    assert_eq!(w["step_gpus"], "2", "{w}");
    let (_, text, _) = fake.run(&["pool", "status"]);
    assert!(text.contains("published, exit 3"), "{text}");
    let row = text.lines().find(|l| l.contains(&id[..8])).unwrap();
    assert!(!row.contains("running"), "{text}");
    assert!(text.contains("failed: exit 3"), "{text}");

    fake.scenario(json!({
        "squeue": [{"match": ["--steps"], "stdout": ""}, {"stdout": job_row("RUNNING")}],
        "sacct": [{"stdout": ""}],
    }));
    let (code, _, err) = fake.run(&["pool", "status", "--refresh"]);
    assert_eq!(code, 0, "{err}");
    let w = worker(&fake);
    assert_eq!(w["state"], "released", "{w}");
    assert_eq!(w["stage"], Value::Null, "{w}");
    assert_eq!(
        (&w["outcome"], &w["exit_code"]),
        (&json!("failed"), &json!(3)),
        "{w}"
    );
    // What the supervisor recorded of the step's GPUs is kept after the release.
    assert_eq!(
        (&w["step_gpus"], &w["cuda_visible_devices"]),
        (&json!("2"), &json!("0")),
        "{w}"
    );
    let (_, text, _) = fake.run(&["pool", "status"]);
    assert!(text.contains("released, exit 3"), "{text}");
    assert!(text.contains("GPU 2 of its node"), "{text}");
    assert!(text.contains("failed: exit 3"), "{text}");
}

/// Worker `w` of pool `p` with `cpus` CPUs, asking for one continuation, in step 901.0: its
/// submission id.
fn submit_continuing(fake: &Fake, cpus: &str) -> String {
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 30}],
        "squeue": [{"match": ["--steps"], "stdout": step_of(0, "w")}],
    }));
    let args = "pool submit p --mem 100M --name w --continue 1 --json --cpus";
    let mut args: Vec<&str> = args.split(' ').collect();
    args.extend([cpus, "--", "true"]);
    let (code, out, err) = fake.run(&args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Value>(out.trim()).unwrap()["submission_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Step `901.n` of worker `w`, as squeue lists it.
fn step_of(n: u32, w: &str) -> String {
    format!("901.{n}|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.{w}\n")
}

/// `reconcile --json` while squeue lists `steps` in the running allocation 901 (a launch's
/// step among them).
fn reconcile_listing(fake: &Fake, steps: &str) -> Value {
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 30}],
        "squeue": [{"match": ["--steps"], "stdout": steps}, {"stdout": job_row("RUNNING")}],
        "sacct": [{"stdout": ""}],
    }));
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(out.trim()).unwrap()
}

/// Worker `id` of pool `p` ends at its deadline with a checkpoint, and the reconcile that
/// proves it over is killed before it submits the successor: its continuation is due.
fn ended_before_its_successor(fake: &Fake, id: &str) {
    let dirs = dispatch::worker::dirs::WorkerDirs::new(
        &fake.state().join("pools"),
        "p",
        id.parse().unwrap(),
    );
    let published = fake
        .state()
        .join("pools/p/published")
        .join(format!("w-{id}"));
    let published = published.display().to_string();
    fake_cli::supervisor_journal(
        &dirs.evidence,
        true,
        Some((&published, dispatch::event::Sha256Digest([0x11; 32]))),
        "checkpointed",
    );
    fake.scenario(json!({
        "squeue": [{"match": ["--steps"], "stdout": ""}, {"stdout": job_row("RUNNING")}],
        "sacct": [{"stdout": ""}],
    }));
    fake.crash("continue-before-submit", &["reconcile", "--json"]);
}

/// `pool status --json` and the human table (within 80 columns but for a path); neither
/// asks Slurm anything.
fn pool_status_now(fake: &Fake) -> (Value, String) {
    fake.scenario(json!({}));
    let (code, out, err) = fake.run(&["pool", "status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let (_, text, _) = fake.run(&["pool", "status"]);
    assert!(fake.calls().is_empty(), "pool status asked Slurm");
    for line in text.lines().filter(|l| !l.contains(" in /")) {
        assert!(line.chars().count() <= 80, "{line:?} passes 80 columns");
    }
    (serde_json::from_str(out.trim()).unwrap(), text)
}

/// `pool status --json`'s view of the worker of submission `id` in pool `p`, and the table.
fn status_of_worker(fake: &Fake, id: &str) -> (Value, String) {
    let (st, text) = pool_status_now(fake);
    let w = st["pools"][0]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["submission_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no worker {id}: {st}"));
    (w, text)
}

/// Issue 37, item 3: a pool worker whose continuation cannot be placed (another worker took
/// its room) stays due and visible in `pool status`: "continuation waiting", with the words
/// `reconcile` gives; once room comes, `reconcile` continues it and its successor is shown as
/// generation 2, naming its predecessor.
#[test]
fn a_continuation_without_room_is_shown_waiting_with_why_until_it_is_continued() {
    let fake = Fake::attached(60);
    let step = step_of;
    let first = submit_continuing(&fake, "2");
    let (w, text) = status_of_worker(&fake, &first);
    assert_eq!(
        (&w["generation"], &w["continues_left"]),
        (&json!(1), &json!(1)),
        "{w}"
    );
    assert_eq!(w["continuation"], Value::Null);
    assert!(text.contains("GEN"), "{text}");

    // Its step ends at its deadline with a checkpoint; the reconcile that proves it over is
    // killed before it submits the successor: the continuation is due.
    ended_before_its_successor(&fake, &first);
    let (w, text) = status_of_worker(&fake, &first);
    assert_eq!(
        (&w["state"], &w["continuation"]),
        (&json!("released"), &json!("due")),
        "{w}"
    );
    assert!(text.contains("continuation due"), "{text}");

    // Another worker takes 3 of the 4 CPUs: no room for its 2.
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(60, 3600)}],
        "srun": [{"hang": 30}],
        "squeue": [{"match": ["--steps"], "stdout": step(1, "x")}],
    }));
    let (code, _, err) = fake.run(&[
        "pool", "submit", "p", "--cpus", "3", "--mem", "100M", "--name", "x", "--", "true",
    ]);
    assert_eq!(code, 0, "{err}");
    let (w, text) = status_of_worker(&fake, &first);
    assert_eq!(w["continuation"], "waiting", "{w}");
    let why = w["continuation_why"].as_str().unwrap().to_owned();
    assert!(
        why.starts_with("continuation waiting for room: pool \"p\" has no node with room"),
        "{why}"
    );
    assert!(text.contains("continuation waiting"), "{text}");
    assert!(
        text.contains("continuation waiting for room: pool \"p\""),
        "{text}"
    );

    // reconcile tries, and leaves it waiting in the same words.
    let r = reconcile_listing(&fake, &step(1, "x"));
    assert_eq!(r["continued"][0]["outcome"], "waiting", "{r}");
    assert_eq!(r["continued"][0]["detail"], why.as_str(), "{r}");
    assert!(!fake.programs().contains(&"srun".to_owned()));

    // x's step ends: room comes, and reconcile continues w as its generation 2.
    let r = reconcile_listing(&fake, &step(2, "w"));
    assert_eq!(r["continued"][0]["outcome"], "continued", "{r}");
    let second = r["continued"][0]["submission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (w, text) = status_of_worker(&fake, &second);
    assert_eq!(
        (&w["generation"], &w["continues_left"]),
        (&json!(2), &Value::Null),
        "{w}"
    );
    assert_eq!(w["predecessor"], first.as_str());
    assert_eq!(w["continuation"], Value::Null);
    assert!(text.contains("continued as generation 2"), "{text}");
    let gen2 = text.lines().find(|l| l.contains(&second[..8])).unwrap();
    assert!(gen2.contains(" 2 "), "{text}");
    let (w, _) = status_of_worker(&fake, &first);
    assert_eq!(
        (&w["continuation"], &w["successor"]),
        (&json!("continued"), &json!(second)),
        "{w}"
    );
}

/// Issue 37, item 3: a continuation waiting for a pool that is gone (detached after its worker
/// ended) is listed beside the pools, with `reconcile`'s words, never dropped from view.
#[test]
fn a_continuation_waiting_for_a_gone_pool_is_still_listed() {
    let fake = Fake::attached(60);
    let first = submit_continuing(&fake, "1");
    ended_before_its_successor(&fake, &first);
    fake.scenario(json!({"scontrol": [{"stdout": show_job(60, 3600)}]}));
    let (code, _, err) = fake.run(&["pool", "detach", "p"]);
    assert_eq!(code, 0, "{err}");

    let (st, text) = pool_status_now(&fake);
    assert_eq!(st["pools"], json!([]), "{st}");
    let w = &st["waiting_for_gone_pools"][0];
    assert_eq!((&w["pool"], &w["name"]), (&json!("p"), &json!("w")), "{st}");
    assert_eq!(
        (&w["submission_id"], &w["continuation"]),
        (&json!(first), &json!("waiting"))
    );
    let why = w["continuation_why"].as_str().unwrap();
    assert!(why.contains("pool p is gone"), "{why}");
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains("worker w of pool p"), "{text}");
    assert!(words.contains(why), "{text}");

    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["continued"][0]["outcome"], "waiting", "{r}");
    assert_eq!(r["continued"][0]["detail"], why, "{r}");
}
