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
