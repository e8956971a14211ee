//! `pool create` against the fake Slurm, for what the real controller will not do on demand:
//! an salloc that never answers. Its creation stays recorded (exit 4), and the next `pool
//! create` or `reconcile` adopts its allocation by name: never a second salloc.

mod fake_cli;

use fake_cli::Fake;
use serde_json::{json, Value};

const CREATE: &[&str] = &[
    "pool", "create", "p", "--cpus", "4", "--mem", "4G", "--time", "1:00:00", "--wait", "1",
    "--json",
];

/// `scontrol --oneliner show job 901`: running, root's, 4 CPUs and 4 GB on vm for an hour.
fn show_job() -> String {
    let t = |secs: i64| {
        (chrono::Local::now() + chrono::Duration::seconds(secs))
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    format!(
        "JobId=901 JobName=x UserId=root(0) GroupId=root(0) Account=dev QOS=normal \
         JobState=RUNNING Reason=None RunTime=00:00:05 TimeLimit=01:00:00 SubmitTime={s} \
         StartTime={s} EndTime={e} Partition=debug NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=4 \
         NumTasks=1 CPUs/Task=4 TRES=cpu=4,mem=4G,node=1,billing=4 MinMemoryNode=4G\n",
        s = t(-5),
        e = t(3595),
    )
}

fn row(state: &str, name: &str) -> String {
    format!("901|901|{state}|debug|dev|normal|root|1|4|vm|59:55|1:00:00|N/A|N/A|None|{name}\n")
}

/// A create whose salloc hangs past its limit: exit 4, and the creation in flight.
fn interrupted_create(fake: &Fake) -> String {
    fake.scenario(json!({"salloc": [{"hang": 30}]}));
    let (code, _, err) = fake.run(CREATE);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("finds it by name"), "{err}");
    // The allocation is marked as this journal's from its first moment (issue 21 item 6).
    let (_, out, _) = fake.run(&["journal", "dump", "--json"]);
    let genesis: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let mark = format!(
        "--comment=dispatch-pool/{}/",
        genesis["event"]["journal_id"].as_str().unwrap()
    );
    let salloc = fake
        .calls()
        .into_iter()
        .find(|(p, _)| p == "salloc")
        .unwrap()
        .1;
    assert!(
        salloc
            .iter()
            .any(|a| a.starts_with(&mark) && a.ends_with("/p")),
        "{salloc:?}"
    );
    let (_, out, _) = fake.run(&["pool", "status", "--json"]);
    let status: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(status["pools"], json!([]));
    let c = &status["creating"][0];
    assert_eq!(c["job_id"], Value::Null, "{status}");
    c["job_name"].as_str().unwrap().to_owned()
}

fn live_slurm(fake: &Fake, name: &str) {
    fake.scenario(json!({
        "squeue": [{"stdout": row("RUNNING", name)}],
        "scontrol": [{"stdout": show_job()}],
    }));
}

#[test]
fn a_create_after_an_unanswered_salloc_adopts_its_allocation_by_name() {
    let fake = Fake::new();
    let name = interrupted_create(&fake);
    assert!(name.starts_with("dispatch-pool-p-"), "{name}");
    live_slurm(&fake, &name);
    let (code, out, err) = fake.run(CREATE);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["action"], "adopted");
    assert_eq!(r["allocation"]["job_id"], 901);
    assert!(
        !fake.programs().iter().any(|p| p == "salloc"),
        "a second salloc: {:?}",
        fake.programs()
    );
    let (_, out, _) = fake.run(&["pool", "status", "p", "--json"]);
    let status: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(status["pools"][0]["owner"], "created");
    assert_eq!(status["creating"], json!([]));
    let (code, out, _) = fake.run(&["audit", "--json"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn reconcile_attaches_the_allocation_of_an_unanswered_salloc_and_release_cancels_it() {
    let fake = Fake::new();
    let name = interrupted_create(&fake);
    live_slurm(&fake, &name);
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["creations"][0]["outcome"], "attached", "{r}");
    // Cancelled, then squeue shows it so: the proof.
    fake.scenario(json!({
        "scancel": [{"stdout": ""}],
        "squeue": [
            {"times": 1, "stdout": row("RUNNING", &name)},
            {"stdout": row("CANCELLED", &name)},
        ],
    }));
    let (code, out, err) = fake.run(&["pool", "release", "p", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["job_id"], 901);
    assert!(r["proof"].as_str().unwrap().contains("CANCELLED"), "{r}");
    assert!(fake.programs().iter().any(|p| p == "scancel"));
    let (_, out, _) = fake.run(&["pool", "status", "--json"]);
    assert_eq!(out.trim(), r#"{"pools":[],"creating":[]}"#);
    let (code, out, _) = fake.run(&["audit", "--json"]);
    assert_eq!(code, 0, "{out}");
}

/// An empty listing is no proof: the creation stays in flight, nothing is created, exit 4.
#[test]
fn an_empty_listing_never_lets_a_second_salloc_through_within_the_settle_delay() {
    let fake = Fake::new();
    interrupted_create(&fake);
    fake.scenario(json!({
        "squeue": [{"stdout": ""}],
        "sacct": [{"stdout": ""}],
    }));
    // The next create waits for the earlier salloc's job (its limit + 30 s); interrupted here
    // by the test's own bound, it must not have run salloc.
    let mut child = fake.command(CREATE).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(4));
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !fake.programs().iter().any(|p| p == "salloc"),
        "{:?}",
        fake.programs()
    );
    let (code, out, _) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0);
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["creations"][0]["outcome"], "unknown", "{r}");
}

/// The job name of the creation in flight, from its `PoolCreateIntent` (written before salloc
/// runs), waited for while `child` runs.
fn intent_job_name(fake: &Fake) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, out, _) = fake.run(&["journal", "dump", "--json", "--kind", "PoolCreateIntent"]);
        // Before the create made the journal, dump says there is none.
        let first: Option<Value> = out.lines().next().map(|l| serde_json::from_str(l).unwrap());
        if let Some(name) = first.as_ref().and_then(|e| e["event"]["job_name"].as_str()) {
            return name.to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "no PoolCreateIntent");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Issue 36 item 7: a create interrupted while salloc waits, after squeue named its job (the
/// progress line on stderr said "job 901 is PENDING"): `pool status` names that job, not "not
/// known yet", and `pool release` cancels it and names it in its message.
#[test]
fn an_interrupted_create_names_the_job_squeue_showed_in_status_and_release() {
    let fake = Fake::new();
    fake.scenario(json!({"salloc": [{"hang": 60}], "squeue": [{"stdout": ""}]}));
    let args = [
        "pool", "create", "p", "--cpus", "4", "--mem", "4G", "--time", "1:00:00", "--wait", "60",
    ];
    let mut child = fake.command(&args).spawn().unwrap();
    let name = intent_job_name(&fake);
    fake.scenario(json!({
        "salloc": [{"hang": 60}],
        "squeue": [{"stdout": row("PENDING", &name).replace("|None|", "|Resources|")}],
    }));
    // Until squeue was asked by name at least once (and a little more for the append).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !fake.programs().iter().any(|p| p == "squeue") {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            fake.programs()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    let _ = child.kill();
    let _ = child.wait();

    let (_, out, _) = fake.run(&["pool", "status", "--json"]);
    let status: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(status["creating"][0]["job_id"], 901, "{status}");
    let (_, out, _) = fake.run(&["pool", "status"]);
    assert!(out.contains("job 901"), "{out}");
    assert!(!out.contains("not known yet"), "{out}");

    fake.scenario(json!({
        "scancel": [{"stdout": ""}],
        "squeue": [
            {"times": 1, "stdout": row("PENDING", &name)},
            {"stdout": row("CANCELLED", &name)},
        ],
    }));
    let (code, out, err) = fake.run(&["pool", "release", "p"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("allocation 901 gone"), "{out}");
    assert!(!out.contains("none"), "{out}");
}

/// Issue 36 item 7: a creation whose job is found by name already over (salloc cancelled it
/// when the create was interrupted) is released naming that job, not "allocation none was
/// made gone (squeue shows job 901 CANCELLED)".
#[test]
fn a_release_that_finds_the_creations_job_over_names_it() {
    let fake = Fake::new();
    let name = interrupted_create(&fake);
    fake.scenario(json!({"squeue": [{"stdout": row("CANCELLED", &name)}]}));
    let (code, out, err) = fake.run(&["pool", "release", "p"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("allocation 901 gone"), "{out}");
    assert!(!out.contains("none was made"), "{out}");
    let (_, out, _) = fake.run(&["pool", "status", "--json"]);
    assert_eq!(out.trim(), r#"{"pools":[],"creating":[]}"#);
}

/// Issue 36 item 7: a job squeue shows PENDING for a reason that means it can never run is
/// recorded, cancelled and, proven over, refused (exit 3) with the reason and what to change,
/// well before `--wait`; the creation is over, nothing in flight.
#[test]
fn a_job_that_can_never_run_is_cancelled_and_refused_at_once() {
    let fake = Fake::new();
    fake.scenario(json!({"salloc": [{"hang": 60}], "squeue": [{"stdout": ""}]}));
    let args = [
        "pool", "create", "p", "--cpus", "64", "--mem", "4G", "--time", "1:00:00", "--wait", "60",
    ];
    let started = std::time::Instant::now();
    let child = fake
        .command(&args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let name = intent_job_name(&fake);
    fake.scenario(json!({
        "salloc": [{"hang": 60}],
        "scancel": [{"stdout": ""}],
        "squeue": [
            {"times": 1, "stdout": row("PENDING", &name).replace("|None|", "|PartitionConfig|")},
            {"stdout": row("CANCELLED", &name)},
        ],
    }));
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(started.elapsed().as_secs() < 40, "{:?}", started.elapsed());
    for needed in [
        "allocation 901 can never run",
        "PartitionConfig",
        "--cpus",
        "pool create p",
    ] {
        assert!(err.contains(needed), "{needed}: {err}");
    }
    let calls = fake.calls();
    assert!(
        calls
            .iter()
            .any(|(p, argv)| p == "scancel" && argv.contains(&"901".to_owned())),
        "{calls:?}"
    );
    let kinds = fake.kinds();
    let at = kinds.iter().position(|k| k == "PoolCreateJob").unwrap();
    assert_eq!(kinds[at + 1..], ["PoolCreateFailed"], "{kinds:?}");
    let (_, out, _) = fake.run(&["pool", "status", "--json"]);
    assert_eq!(out.trim(), r#"{"pools":[],"creating":[]}"#);
}
