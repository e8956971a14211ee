//! Issue 38 item 2: a pool created with `--renew` on the fake Slurm. `reconcile` asks for the
//! next allocation after the current one (`--dependency=afterany`), in its own salloc that
//! waits on in the background, takes it once it runs and the last one is proven over, stops at
//! `--renew-max`, and never asks a second while the first could exist (a crash at each new
//! failpoint, then `reconcile`: exactly one successor). `pool release` ends both.

mod fake_cli;

use fake_cli::Fake;
use serde_json::{json, Value};

/// A local time `secs` from now, as scontrol prints it.
fn at(secs: i64) -> String {
    (chrono::Local::now() + chrono::Duration::seconds(secs))
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

/// One start time for every job of this process: a pool's allocation read again must show the
/// start it was attached with (its incarnation).
fn started() -> String {
    static AT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    AT.get_or_init(|| at(-5)).clone()
}

/// `scontrol --oneliner show job J`: running on vm, 4 CPUs and 4 GB, ending in `left` s.
fn show_job(job: u32, left: i64) -> String {
    format!(
        "JobId={job} JobName=x UserId=root(0) GroupId=root(0) Account=dev QOS=normal \
         JobState=RUNNING Reason=None RunTime=00:00:05 TimeLimit=01:00:00 SubmitTime={s} \
         StartTime={s} EndTime={e} Partition=debug NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=4 \
         NumTasks=1 CPUs/Task=4 TRES=cpu=4,mem=4G,node=1,billing=4 MinMemoryNode=4G\n",
        s = started(),
        e = at(left),
    )
}

fn row(job: u32, state: &str, reason: &str, name: &str) -> String {
    format!(
        "{job}|{job}|{state}|debug|dev|normal|root|1|4|vm|59:55|1:00:00|N/A|N/A|{reason}|{name}\n"
    )
}

/// Squeue's answers: no steps, and each job in its state.
fn squeue(jobs: &[(u32, &str, &str)], name: &str) -> Value {
    let mut rules = vec![json!({"match": ["--steps"], "stdout": ""})];
    for (job, state, reason) in jobs {
        rules.push(
            json!({"match": [format!("--jobs={job}")], "stdout": row(*job, state, reason, name)}),
        );
    }
    rules.push(json!({"match": ["--me"], "stdout": jobs.iter().map(|(j, s, r)| row(*j, s, r, name)).collect::<String>()}));
    Value::Array(rules)
}

/// A pool `p` created with `extra` flags, its allocation 901 ending in `left` s.
fn create(fake: &Fake, left: i64, extra: &[&str]) {
    fake.scenario(json!({
        "salloc": [{"stderr": "salloc: Granted job allocation 901\n"}],
        "squeue": squeue(&[(901, "RUNNING", "None")], "x"),
        "scontrol": [{"stdout": show_job(901, left)}],
    }));
    let mut args = vec![
        "pool", "create", "p", "--cpus", "4", "--mem", "4G", "--time", "1:00:00", "--wait", "5",
    ];
    args.extend_from_slice(extra);
    let (code, _, err) = fake.run(&args);
    assert_eq!(code, 0, "{err}");
}

fn reconcile(fake: &Fake) -> Value {
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(out.trim()).unwrap()
}

fn status(fake: &Fake) -> Value {
    let (code, out, err) = fake.run(&["pool", "status", "p", "--json"]);
    assert_eq!(code, 0, "{err}");
    let s: Value = serde_json::from_str(out.trim()).unwrap();
    s["pools"][0].clone()
}

fn sallocs(fake: &Fake) -> Vec<Vec<String>> {
    fake.calls()
        .into_iter()
        .filter(|(p, _)| p == "salloc")
        .map(|(_, a)| a)
        .collect()
}

/// The successor's salloc: names job 902 and waits on for the grant.
fn pending_salloc() -> Value {
    json!([{"stderr": "salloc: Pending job allocation 902\nsalloc: job 902 queued and waiting for resources\n", "hang": 20}])
}

#[test]
fn the_next_allocation_is_asked_after_the_last_and_taken_once_the_last_is_over() {
    let fake = Fake::new();
    create(&fake, 123, &["--renew-max", "2"]);
    assert_eq!(status(&fake)["renewal"]["generation"], 1);
    // Within the lead time (2 minutes) of the end.
    std::thread::sleep(std::time::Duration::from_secs(4));
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": squeue(&[(901, "RUNNING", "None"), (902, "PENDING", "Dependency")], "x"),
    }));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "asked", "{r}");
    assert_eq!(r["renewals"][0]["job_id"], 902, "{r}");
    let s = sallocs(&fake);
    assert_eq!(s.len(), 1, "{s:?}");
    assert!(
        s[0].contains(&"--dependency=afterany:901".to_owned()),
        "{s:?}"
    );
    assert!(s[0].contains(&"--no-shell".to_owned()), "{s:?}");
    assert!(!s[0].iter().any(|a| a.starts_with("--immediate")), "{s:?}");
    assert!(
        s[0].iter()
            .any(|a| a.starts_with("--job-name=dispatch-pool-p-")),
        "{s:?}"
    );
    // Pending behind the last one: waited for, never asked twice.
    fake.forget_calls();
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "waiting", "{r}");
    assert!(
        r["renewals"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("Dependency"),
        "{r}"
    );
    assert_eq!(sallocs(&fake).len(), 0);
    let p = status(&fake);
    assert_eq!(p["renewal"]["successor"]["job_id"], 902, "{p}");
    assert_eq!(p["renewal"]["successor"]["after"], 901, "{p}");
    // The last one hits its time limit; the next one runs.
    fake.scenario(json!({
        "squeue": squeue(&[(901, "TIMEOUT", "None"), (902, "RUNNING", "None")], "x"),
        "scontrol": [{"stdout": show_job(902, 3595)}],
    }));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "renewed", "{r}");
    let p = status(&fake);
    assert_eq!(p["allocation"]["job_id"], 902, "{p}");
    assert_eq!(p["renewal"]["generation"], 2, "{p}");
    assert_eq!(p["renewal"]["successor"], Value::Null, "{p}");
    // The last allocation --renew-max allows: the table says no next one will come.
    let (_, text, _) = fake.run(&["pool", "status", "p"]);
    assert!(
        text.contains("allocation 2 of 2") && text.contains("no next: this is the last"),
        "{text}"
    );
    let renewed: Vec<Value> = fake
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "PoolRenewed")
        .collect();
    assert_eq!(renewed.len(), 1);
    assert_eq!(renewed[0]["event"]["cause"], "time-limit", "{renewed:?}");
    assert_eq!(renewed[0]["event"]["previous_job_id"], 901);
    // Two allocations were asked for: renewal stops, and says why.
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "stopped", "{r}");
    assert!(status(&fake)["renewal"]["stopped"]
        .as_str()
        .unwrap()
        .contains("--renew-max 2"));
    let (code, out, _) = fake.run(&["audit", "--json"]);
    assert_eq!(code, 0, "{out}");
}

/// The name of the renewal in flight, from its intent.
fn renewal_name(fake: &Fake) -> String {
    fake.events()
        .into_iter()
        .find(|e| e["kind"] == "PoolRenewalIntent")
        .expect("a PoolRenewalIntent")["event"]["job_name"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A crash at each new failpoint of the ask, then `reconcile`: the successor found (by its
/// name when its job was not recorded), never a second salloc.
#[test]
fn a_crash_at_each_renewal_failpoint_leaves_exactly_one_successor() {
    for point in [
        "pool-renew-after-intent",
        "pool-renew-after-salloc",
        "pool-renew-after-job",
    ] {
        let fake = Fake::new();
        create(&fake, 3595, &["--renew"]);
        // The allocation is over (preempted): the next one is due at once, without dependency.
        let over = json!({
            "salloc": pending_salloc(),
            "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "PENDING", "Priority")], "x"),
        });
        fake.scenario(over.clone());
        fake.crash(point, &["reconcile"]);
        let asked = sallocs(&fake).len();
        assert!(asked <= 1, "{point}");
        let name = renewal_name(&fake);
        fake.scenario(json!({
            "salloc": pending_salloc(),
            "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "PENDING", "Priority")], &name),
        }));
        if asked == 0 {
            // Killed before its salloc: nothing carries its name, and nothing proves that
            // yet within the settle delay; still no second salloc.
            fake.scenario(json!({
                "salloc": pending_salloc(),
                "squeue": squeue(&[(901, "PREEMPTED", "None")], "x"),
                "sacct": [{"stdout": ""}],
            }));
        }
        let r = reconcile(&fake);
        assert_eq!(sallocs(&fake).len(), 0, "{point}: a second salloc: {r}");
        let outcome = r["renewals"][0]["outcome"].as_str().unwrap().to_owned();
        if asked == 1 {
            assert_eq!(outcome, "waiting", "{point}: {r}");
            assert_eq!(
                status(&fake)["renewal"]["successor"]["job_id"],
                902,
                "{point}"
            );
        } else {
            assert_eq!(outcome, "unknown", "{point}: {r}");
        }
        let intents = fake
            .kinds()
            .iter()
            .filter(|k| *k == "PoolRenewalIntent")
            .count();
        assert_eq!(intents, 1, "{point}");
    }
}

/// Slurm refuses the next allocation in words waiting does not change: renewal stops, with
/// the reason, and is not asked again.
#[test]
fn a_refused_renewal_stops_with_slurms_reason() {
    let fake = Fake::new();
    create(&fake, 3595, &["--renew"]);
    fake.scenario(json!({
        "salloc": [{"stderr": "salloc: error: Job submit/allocate failed: Invalid partition name specified\n", "exit": 1}],
        "squeue": squeue(&[(901, "PREEMPTED", "None")], "x"),
    }));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "stopped", "{r}");
    let stopped = status(&fake)["renewal"]["stopped"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        stopped.contains("Invalid partition name specified"),
        "{stopped}"
    );
    reconcile(&fake);
    assert_eq!(sallocs(&fake).len(), 1, "asked once, not again");
    let (_, out, _) = fake.run(&["pool", "status", "p"]);
    assert!(out.contains("renewal stopped"), "{out}");
}

/// `pool release` with a successor pending: the allocation and the successor, each proven
/// over; nothing left in flight.
#[test]
fn release_ends_the_allocation_and_its_pending_successor() {
    let fake = Fake::new();
    create(&fake, 3595, &["--renew-overlap"]);
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "PENDING", "Priority")], "x"),
    }));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "asked", "{r}");
    let release = json!({
        "scancel": [{"stdout": ""}],
        "squeue": [
            {"match": ["--jobs=901"], "stdout": row(901, "PREEMPTED", "None", "x")},
            {"match": ["--jobs=902"], "times": 1, "stdout": row(902, "PENDING", "Priority", "x")},
            {"match": ["--jobs=902"], "stdout": row(902, "CANCELLED", "None", "x")},
        ],
    });
    // Killed once the successor was proven gone, before that was recorded: the next release
    // finds it over and finishes.
    fake.scenario(release.clone());
    fake.crash("pool-release-after-successor", &["pool", "release", "p"]);
    fake.scenario(release);
    let (code, out, err) = fake.run(&["pool", "release", "p", "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["successor"]["job_id"], 902, "{r}");
    assert!(
        r["successor"]["proof"]
            .as_str()
            .unwrap()
            .contains("CANCELLED"),
        "{r}"
    );
    let calls = fake.calls();
    assert!(
        calls
            .iter()
            .any(|(p, a)| p == "scancel" && a.contains(&"902".to_owned())),
        "{calls:?}"
    );
    let (_, out, _) = fake.run(&["pool", "status", "--json"]);
    assert_eq!(out.trim(), r#"{"pools":[],"creating":[]}"#);
    let (code, out, _) = fake.run(&["audit", "--json"]);
    assert_eq!(code, 0, "{out}");
}

/// A successor whose salloc was never answered (killed after its intent: no job known, none
/// found by its name yet) that `scancel --name` cannot cancel: the release stops (exit 4) and
/// says so in one sentence.
#[test]
fn a_successor_known_only_by_name_that_scancel_cannot_cancel_keeps_the_pool() {
    let fake = Fake::new();
    create(&fake, 3595, &["--renew"]);
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": squeue(&[(901, "PREEMPTED", "None")], "x"),
    }));
    fake.crash("pool-renew-after-intent", &["reconcile"]);
    fake.scenario(json!({
        "squeue": squeue(&[(901, "PREEMPTED", "None")], "x"),
        "sacct": [{"stdout": ""}],
        "scancel": [{"stderr": "scancel: error: Unable to contact slurm controller\n", "exit": 1}],
    }));
    let (code, out, err) = fake.run(&["pool", "release", "p"]);
    assert_eq!(code, 4, "{out}{err}{:?}", fake.calls());
    assert!(err.contains("could not be cancelled by name ("), "{err}");
    assert_eq!(status(&fake)["pool"], "p");
}

/// Killed right after `PoolRenewed` was recorded: the next `reconcile` finds the pool renewed
/// and asks nothing, adopts nothing twice.
#[test]
fn a_crash_after_the_renewal_is_recorded_renews_once() {
    let fake = Fake::new();
    create(&fake, 3595, &["--renew"]);
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "PENDING", "Priority")], "x"),
    }));
    assert_eq!(reconcile(&fake)["renewals"][0]["outcome"], "asked");
    let running = json!({
        "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "RUNNING", "None")], "x"),
        "scontrol": [{"stdout": show_job(902, 3595)}],
    });
    fake.scenario(running.clone());
    fake.crash("pool-renew-after-renewed", &["reconcile"]);
    fake.scenario(running);
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "not_due", "{r}");
    assert_eq!(sallocs(&fake).len(), 0);
    let p = status(&fake);
    assert_eq!(p["allocation"]["job_id"], 902, "{p}");
    assert_eq!(p["renewal"]["generation"], 2, "{p}");
    let renewed: Vec<Value> = fake
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "PoolRenewed")
        .collect();
    assert_eq!(renewed.len(), 1);
    assert_eq!(renewed[0]["event"]["cause"], "preempted", "{renewed:?}");
}

/// What a pool worker's supervisor records when it checkpointed at the allocation's end and
/// published: the coordinator continues it from there.
fn checkpointed(fake: &Fake, id: uuid::Uuid) {
    let pools = fake.state().join("pools");
    let dirs = dispatch::worker::dirs::WorkerDirs::new(&pools, "p", id);
    let published = pools.join("p/published").join(format!("w-{id}"));
    fake_cli::supervisor_journal(
        &dirs.evidence,
        false,
        Some((
            &published.display().to_string(),
            dispatch::event::Sha256Digest([0x11; 32]),
        )),
        "checkpointed",
    );
}

fn step(job: u32) -> String {
    format!("{job}.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w\n")
}

/// `pool submit` of worker `w`, continued once (its payload, `true`, is added last).
const SUBMIT_CONTINUED: &str = "pool submit p --cpus 1 --mem 100M --name w --continue 1 --json";

/// What a pool worker's supervisor records when Slurm's preemption TERMs every process of its
/// step at once (22.05 and 24.11 here): the payload saves, declares a checkpoint and exits 0
/// before the supervisor forwards the TERM it got too, so there is no `ShutdownSignalled`; its
/// exit is recorded interrupted (a stop reached it), then published and finished.
fn checkpointed_on_slurms_term(fake: &Fake, id: uuid::Uuid) {
    use dispatch::event::worker::{CheckpointDeclared, PayloadExited, SupervisorFinished};
    use dispatch::event::WorkerEvent;
    use dispatch::journal::{JournalWriter, Options};
    let pools = fake.state().join("pools");
    let dirs = dispatch::worker::dirs::WorkerDirs::new(&pools, "p", id);
    let open = || {
        let dir = dispatch::worker::supervisor::journal_dir(&dirs.evidence);
        JournalWriter::<WorkerEvent>::open(&dir, Options::default()).unwrap()
    };
    let exited = PayloadExited {
        code: Some(0),
        signal: None,
        interrupted: true,
    };
    let declared = CheckpointDeclared {
        marker: dirs.root.join("checkpoint").display().to_string(),
        declared_at: dispatch::event::Micros::now(),
        code: Some(0),
        signal: None,
        killed_after_grace: false,
    };
    open()
        .append(vec![
            WorkerEvent::PayloadExited(exited),
            WorkerEvent::CheckpointDeclared(declared),
        ])
        .unwrap();
    checkpointed(fake, id);
    open()
        .append_one(WorkerEvent::SupervisorFinished(SupervisorFinished {
            outcome: "interrupted".into(),
            exit_code: 0,
        }))
        .unwrap();
}

/// A worker that asked `--continue` waits while its pool's allocation is over, and the run
/// that makes the next allocation the pool's continues it there, from its checkpoint.
#[test]
fn a_continued_worker_goes_on_in_the_renewed_allocation() {
    let fake = goes_on_in_the_renewed_allocation(SUBMIT_CONTINUED, checkpointed, false);
    let receipt = continued_receipt(&fake);
    assert_eq!(receipt["cause"], "preempted", "{receipt}");
}

/// The same as a real preemption goes: the worker's step ends in the grace (proven over while
/// Slurm still lists the allocation RUNNING), and its journal is what Slurm's TERM to every
/// process of the step leaves (the payload ended before its supervisor forwarded one). Its end
/// is the preemption's, not a checkpoint of its own: a worker that asked `--continue-on
/// preempted` goes on in the next allocation.
#[test]
fn a_worker_preempted_with_its_allocation_is_continued_for_the_preemption() {
    let submit = format!("{SUBMIT_CONTINUED} --continue-on preempted");
    let fake = goes_on_in_the_renewed_allocation(&submit, checkpointed_on_slurms_term, true);
    let receipt = continued_receipt(&fake);
    assert_eq!(receipt["cause"], "preempted", "{receipt}");
    assert!(
        receipt["proof"].as_str().unwrap().contains("PREEMPTED"),
        "{receipt}"
    );
}

/// A `reconcile` while allocation 901 is in its preemption grace and the worker's step is
/// over: the worker is released, its continuation waits, and nothing is asked yet.
fn in_the_preemption_grace(fake: &Fake) {
    let (end, preempted) = (at(30), at(0));
    let listed = format!(
        "901|901|RUNNING|debug|dev|normal|root|1|4|vm|0:30|1:00:00|{}|{end}|None|x\n",
        started()
    );
    let shown = show_job(901, 3595).replace(
        &format!("EndTime={}", at(3595)),
        &format!("EndTime={end} PreemptEligibleTime={preempted} PreemptTime={preempted}"),
    );
    assert!(shown.contains("PreemptTime"), "{shown}");
    fake.scenario(json!({
        "squeue": [
            {"match": ["--steps"], "stdout": ""},
            {"match": ["--jobs=901"], "stdout": listed},
        ],
        "scontrol": [{"stdout": shown}],
    }));
    let r = reconcile(fake);
    assert_eq!(r["resolved"].as_array().map(Vec::len), Some(1), "{r}");
    assert_eq!(r["continued"][0]["outcome"], "waiting", "{r}");
    assert!(r["renewals"][0]["outcome"] != "asked", "{r}");
}

/// The one `WorkerContinued` of the journal.
fn continued_receipt(fake: &Fake) -> Value {
    let receipts: Vec<Value> = fake
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "WorkerContinued")
        .map(|e| e["event"].clone())
        .collect();
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    receipts[0].clone()
}

/// A renewing pool whose worker (`submit`, its journal written by `journal`) is preempted
/// with its allocation: it waits, and the run that takes the next allocation continues it there.
/// With `in_grace`, a `reconcile` first sees the allocation in its preemption grace (listed
/// RUNNING with its end pulled forward, `PreemptTime` shown) and the worker's step over: the
/// worker is released then, and its continuation waits for the allocation's proven end.
fn goes_on_in_the_renewed_allocation(
    submit: &str,
    journal: fn(&Fake, uuid::Uuid),
    in_grace: bool,
) -> Fake {
    let fake = Fake::new();
    create(&fake, 3595, &["--renew"]);
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(901, 3595)}],
        "srun": [{"hang": 30}],
        "squeue": [
            {"match": ["--steps"], "stdout": step(901)},
            {"match": ["--jobs=901"], "stdout": row(901, "RUNNING", "None", "x")},
        ],
    }));
    let mut args: Vec<&str> = submit.split(' ').collect();
    args.extend(["--", "true"]);
    let (code, out, err) = fake.run(&args);
    assert_eq!(code, 0, "{err}");
    let first: Value = serde_json::from_str(out.trim()).unwrap();
    let id: uuid::Uuid = first["submission_id"].as_str().unwrap().parse().unwrap();
    journal(&fake, id);
    if in_grace {
        in_the_preemption_grace(&fake);
    }
    // Preempted: the worker is released with that proof, the next allocation asked for, and
    // the continuation waits for it.
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "PENDING", "Priority")], "x"),
    }));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "asked", "{r}");
    assert_eq!(r["continued"][0]["outcome"], "waiting", "{r}");
    // The next allocation runs: it is the pool's, and the worker goes on there.
    let mut rules = squeue(&[(901, "PREEMPTED", "None"), (902, "RUNNING", "None")], "x");
    rules[0] = json!({"match": ["--steps"], "stdout": step(902)});
    fake.scenario(json!({
        "squeue": rules,
        "scontrol": [{"stdout": show_job(902, 3595)}],
        "srun": [{"hang": 30}],
    }));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "renewed", "{r}");
    assert_eq!(r["continued"][0]["outcome"], "continued", "{r}");
    let srun = fake
        .calls()
        .into_iter()
        .find(|(p, _)| p == "srun")
        .map(|(_, a)| a)
        .unwrap_or_default();
    assert!(srun.iter().any(|a| a == "--jobid=902"), "{srun:?}");
    let p = status(&fake);
    assert_eq!(p["renewal"]["generation"], 2, "{p}");
    let workers = p["workers"].as_array().unwrap();
    assert!(
        workers
            .iter()
            .any(|w| w["name"] == "w" && w["step_id"] == "902.0"),
        "{p}"
    );
    fake
}
