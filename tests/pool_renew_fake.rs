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

/// The journal's events of `kind`, in order.
fn events_of(fake: &Fake, kind: &str) -> Vec<Value> {
    fake.events()
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
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
    let renewed: Vec<Value> = events_of(&fake, "PoolRenewed");
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
    let renewed: Vec<Value> = events_of(&fake, "PoolRenewed");
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
    assert_eq!(worker_w(&p, 1)["step_id"], "901.0", "{p}");
    fake
}

/// Steps of `job`, one per worker `w0..w{n-1}`, as `squeue --steps` prints them.
fn steps(job: u32, n: usize) -> String {
    (0..n)
        .map(|i| format!("{job}.{i}|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.w{i}\n"))
        .collect()
}

/// A steady `reconcile` of pool `p` on `job` with `n` running workers: its Slurm calls.
fn steady_calls(fake: &Fake, job: u32, n: usize) -> u64 {
    let mut rules = squeue(&[(job, "RUNNING", "None")], "x");
    rules[0] = json!({"match": ["--steps"], "stdout": steps(job, n)});
    fake.scenario(json!({"squeue": rules, "scontrol": [{"stdout": show_job(job, 3595)}]}));
    let r = reconcile(fake);
    assert_eq!(r["resolved"], json!([]), "{r}");
    assert!(
        r["renewals"][0]["outcome"] == "not_due",
        "a steady round: {r}"
    );
    r["slurm_calls"].as_u64().unwrap()
}

/// Issue 38's rule for `reconcile`: its Slurm calls stay constant in the number of workers and
/// of generations. A renewing pool with 1 or 4 continued workers costs the same round in its
/// first allocation and, all of them continued there, in its second.
#[test]
fn reconcile_asks_slurm_as_often_whatever_the_workers_and_generations() {
    let mut rounds = Vec::new();
    for n in [1usize, 4] {
        let fake = Fake::new();
        create(&fake, 3595, &["--renew"]);
        let mut rules = squeue(&[(901, "RUNNING", "None")], "x");
        rules[0] = json!({"match": ["--steps"], "stdout": steps(901, n)});
        fake.scenario(json!({
            "scontrol": [{"stdout": show_job(901, 3595)}],
            "srun": [{"hang": 60}],
            "squeue": rules,
        }));
        let mut ids = Vec::new();
        for i in 0..n {
            let name = format!("w{i}");
            let (code, out, err) = fake.run(&[
                "pool",
                "submit",
                "p",
                "--cpus",
                "1",
                "--mem",
                "100M",
                "--name",
                &name,
                "--continue",
                "1",
                "--json",
                "--",
                "true",
            ]);
            assert_eq!(code, 0, "{err}");
            let doc: Value = serde_json::from_str(out.trim()).unwrap();
            ids.push(doc["submission_id"].as_str().unwrap().parse().unwrap());
        }
        rounds.push(("first allocation", n, steady_calls(&fake, 901, n)));
        for id in &ids {
            checkpointed(&fake, *id);
        }
        // Preempted: every worker released with that proof, the next allocation asked for.
        fake.scenario(json!({
            "salloc": pending_salloc(),
            "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "PENDING", "Priority")], "x"),
        }));
        assert_eq!(reconcile(&fake)["renewals"][0]["outcome"], "asked");
        let mut rules = squeue(&[(901, "PREEMPTED", "None"), (902, "RUNNING", "None")], "x");
        rules[0] = json!({"match": ["--steps"], "stdout": steps(902, n)});
        fake.scenario(json!({
            "squeue": rules,
            "scontrol": [{"stdout": show_job(902, 3595)}],
            "srun": [{"hang": 60}],
        }));
        let r = reconcile(&fake);
        assert_eq!(r["renewals"][0]["outcome"], "renewed", "{r}");
        let continued = r["continued"].as_array().unwrap();
        assert_eq!(continued.len(), n, "{r}");
        assert!(continued.iter().all(|c| c["outcome"] == "continued"), "{r}");
        rounds.push(("second allocation", n, steady_calls(&fake, 902, n)));
    }
    let first = rounds[0].2;
    assert!(
        rounds.iter().all(|(_, _, calls)| *calls == first),
        "Slurm calls per steady round: {rounds:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 38 item 5: never two successors, never a worker lost, across generations (the
// controller down, a successor pending past the old end, a preemption during a renewal).

/// Squeue's answers with the steps listed as `steps` (a step row each, or none).
fn squeue_with_steps(jobs: &[(u32, &str, &str)], steps: &str) -> Value {
    let mut rules = squeue(jobs, "x");
    rules[0] = json!({"match": ["--steps"], "stdout": steps});
    rules
}

/// A renewing pool `p` (allocation 901, `extra` flags) with worker `w` (`--continue 1`, and
/// `submit_extra`) running as step 901.0, its next allocation due: within the lead time of
/// 901's end. The worker's submission id.
fn due_pool_with_a_worker(fake: &Fake, extra: &[&str], submit_extra: &[&str]) -> uuid::Uuid {
    create(fake, 123, extra);
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(901, 123)}],
        "srun": [{"hang": 30}],
        "squeue": squeue_with_steps(&[(901, "RUNNING", "None")], &step(901)),
    }));
    // A shorter publication budget: the worker fits in the 123 s left (105 s of 130 s).
    let mut args: Vec<&str> = SUBMIT_CONTINUED.split(' ').collect();
    args.splice(3..3, ["--publication-timeout", "5"]);
    args.splice(3..3, submit_extra.iter().copied());
    args.extend(["--", "true"]);
    let (code, out, err) = fake.run(&args);
    assert_eq!(code, 0, "{err}");
    let first: Value = serde_json::from_str(out.trim()).unwrap();
    // Within the lead time (2 minutes) of the end.
    std::thread::sleep(std::time::Duration::from_secs(4));
    first["submission_id"].as_str().unwrap().parse().unwrap()
}

/// What worker `w`'s supervisor records when it checkpointed at the allocation's end and
/// published a publication that verifies (so that `audit` checks the chain whole).
fn published_checkpoint(fake: &Fake, id: uuid::Uuid) {
    fake_cli::checkpointed_at_the_end(&fake.state().join("pools"), "p", "w", id);
}

/// [`due_pool_with_a_worker`], then `reconcile`: the next allocation, 902, asked after 901
/// (`--dependency=afterany:901`) and pending behind it. The worker's submission id.
fn asked_before_the_end(fake: &Fake, submit_extra: &[&str]) -> uuid::Uuid {
    let id = due_pool_with_a_worker(fake, &["--renew"], submit_extra);
    let behind = [(901, "RUNNING", "None"), (902, "PENDING", "Dependency")];
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": squeue_with_steps(&behind, &step(901)),
    }));
    let r = reconcile(fake);
    assert_eq!(r["renewals"][0]["outcome"], "asked", "{r}");
    let s = sallocs(fake);
    assert!(
        s[0].contains(&"--dependency=afterany:901".to_owned()),
        "{s:?}"
    );
    id
}

/// With 902 running (Slurm answering `running`): `reconcile` makes it the pool's and continues
/// worker `w` there; the next `reconcile` changes nothing. In all one `PoolRenewalIntent`, one
/// `PoolRenewed` and one `WorkerContinued` (both returned), `w`'s next generation in 902, and
/// `audit` ok.
fn renewed_and_continued_once(fake: &Fake, running: Value) -> (Value, Value) {
    fake.scenario(running.clone());
    let r = reconcile(fake);
    assert_eq!(r["renewals"][0]["outcome"], "renewed", "{r}");
    assert_eq!(r["continued"][0]["outcome"], "continued", "{r}");
    fake.scenario(running);
    let r = reconcile(fake);
    assert_eq!(r["renewals"][0]["outcome"], "not_due", "{r}");
    assert!(r.get("continued").is_none(), "{r}");
    assert_eq!(sallocs(fake).len(), 0);
    assert_eq!(of_kind(fake, "PoolRenewalIntent").len(), 1);
    let renewed = of_kind(fake, "PoolRenewed");
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    let continued = of_kind(fake, "WorkerContinued");
    assert_eq!(continued.len(), 1, "{continued:?}");
    on_in_902_each_generation_in_its_own_job(fake);
    (renewed[0]["event"].clone(), continued[0]["event"].clone())
}

/// The pool is on allocation 902, its worker's second generation in step 902.0 and its first
/// still shown in 901.0 (step ids start again in each job); `audit` ok.
fn on_in_902_each_generation_in_its_own_job(fake: &Fake) {
    let p = status(fake);
    assert_eq!(p["allocation"]["job_id"], 902, "{p}");
    assert_eq!(worker_w(&p, 2)["step_id"], "902.0", "{p}");
    assert_eq!(worker_w(&p, 1)["step_id"], "901.0", "{p}");
    let (code, out, _) = fake.run(&["audit", "--json"]);
    assert_eq!(code, 0, "{out}");
}

/// The events of `kind`, in order.
fn of_kind(fake: &Fake, kind: &str) -> Vec<Value> {
    fake.events()
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// The worker named `w` of pool `p`'s status, in generation `generation`.
fn worker_w(p: &Value, generation: u32) -> Value {
    p["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "w" && w["generation"] == generation)
        .unwrap_or_else(|| panic!("no worker w of generation {generation}: {p}"))
        .clone()
}

/// The last allocation proven over (TIMEOUT) while its successor, asked before the end, is
/// still PENDING for Slurm's reason: the pool waits for it, visibly and with the reason; no
/// second successor is asked; the worker that asked `--continue` waits (`waiting`, listed);
/// once the successor runs, it becomes the pool's once and the worker is continued once.
#[test]
fn a_successor_pending_past_the_old_end_is_waited_for_never_asked_twice() {
    let fake = Fake::new();
    let id = asked_before_the_end(&fake, &[]);
    published_checkpoint(&fake, id);
    // 901 hit its time limit; 902, free of its dependency, waits for resources.
    let past_the_end = json!({
        "salloc": pending_salloc(),
        "squeue": squeue_with_steps(&[(901, "TIMEOUT", "None"), (902, "PENDING", "Resources")], ""),
    });
    for round in 0..3 {
        fake.scenario(past_the_end.clone());
        let r = reconcile(&fake);
        assert_eq!(r["renewals"][0]["outcome"], "waiting", "{round}: {r}");
        assert_eq!(r["renewals"][0]["job_id"], 902, "{round}: {r}");
        let detail = r["renewals"][0]["detail"].as_str().unwrap();
        assert!(detail.contains("PENDING (Resources)"), "{round}: {r}");
        assert_eq!(r["continued"][0]["outcome"], "waiting", "{round}: {r}");
        assert_eq!(r["continued"][0]["worker"], "w", "{round}: {r}");
        assert_eq!(sallocs(&fake).len(), 0, "{round}: a second successor: {r}");
    }
    // `pool status --refresh`: the allocation over, the pool waiting for 902 with Slurm's
    // reason, the worker's continuation waiting.
    fake.scenario(past_the_end.clone());
    let (code, out, err) = fake.run(&["pool", "status", "p", "--refresh", "--json"]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    let p = &doc["pools"][0];
    assert_eq!(p["allocation"]["state"], "ended", "{p}");
    let next = &p["renewal"]["successor"];
    assert_eq!(next["job_id"], 902, "{p}");
    assert_eq!(
        next["slurm"],
        json!({"state": "PENDING", "reason": "Resources"}),
        "{p}"
    );
    let w = worker_w(p, 1);
    assert_eq!(w["continuation"], "waiting", "{w}");
    let why = w["continuation_why"].as_str().unwrap();
    assert!(
        why.contains("waits for the pool's next allocation (allocation 2, job 902)"),
        "{w}"
    );
    fake.scenario(past_the_end);
    let (code, text, err) = fake.run(&["pool", "status", "p", "--refresh"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("next: allocation 2 (job 902, PENDING: Resources"),
        "{text}"
    );
    // Without --refresh: the journal alone, no Slurm call and no reason.
    fake.forget_calls();
    let p = status(&fake);
    assert_eq!(p["renewal"]["successor"]["slurm"], Value::Null, "{p}");
    assert!(fake.calls().is_empty());
    // 902 runs: the pool's, and the worker continued there, once.
    let running = json!({
        "squeue": squeue_with_steps(&[(901, "TIMEOUT", "None"), (902, "RUNNING", "None")], &step(902)),
        "scontrol": [{"stdout": show_job(902, 3595)}],
        "srun": [{"hang": 30}],
    });
    let (renewed, continued) = renewed_and_continued_once(&fake, running);
    assert_eq!(renewed["cause"], "time-limit", "{renewed}");
    assert_eq!(continued["cause"], "time-limit", "{continued}");
}

/// How every client call answers while the controller is down (as recorded on 22.05).
fn controller_down() -> Value {
    let down = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n";
    json!([{"stderr": down, "exit": 1}])
}

/// Squeue's answers once the controller is back: steps as `steps`, the jobs by id, and the
/// user's listing with the successor under the renewal's job name `name`.
fn squeue_named(allocation: &str, successor: (&str, &str), steps: &str, name: &str) -> Value {
    let (state, reason) = successor;
    let (old, new) = (
        row(901, allocation, "None", "x"),
        row(902, state, reason, name),
    );
    json!([
        {"match": ["--steps"], "stdout": steps},
        {"match": ["--jobs=901"], "stdout": old},
        {"match": ["--jobs=902"], "stdout": new},
        {"match": ["--me"], "stdout": format!("{old}{new}")},
    ])
}

/// The state word of worker `w` in generation 1, and whether pool `p`'s allocation is ended,
/// as `pool status` shows them from the journal.
fn worker_and_allocation(fake: &Fake) -> (Value, Value) {
    let p = status(fake);
    (
        worker_w(&p, 1)["state"].clone(),
        p["allocation"]["state"].clone(),
    )
}

/// A due renewing pool with a running worker (`due_pool_with_a_worker`), reconciled three
/// times with the controller down: salloc answering `salloc`, squeue, scontrol and sacct
/// "Unable to contact slurm controller". Nothing is decided on that: the successor stays in
/// flight, unknown, never asked again; the pool is not marked ended, its worker not released,
/// its renewal not stopped. The worker's submission id.
fn renewal_with_the_controller_down(fake: &Fake, salloc: Value) -> uuid::Uuid {
    let id = due_pool_with_a_worker(fake, &["--renew"], &[]);
    let down = json!({
        "salloc": salloc,
        "squeue": controller_down(),
        "scontrol": controller_down(),
        "sacct": controller_down(),
    });
    for round in 0..3 {
        fake.scenario(down.clone());
        let r = reconcile(fake);
        assert_eq!(r["renewals"][0]["outcome"], "unknown", "{round}: {r}");
        let asked = if round == 0 { 1 } else { 0 };
        assert_eq!(sallocs(fake).len(), asked, "{round}: {r}");
        let p = status(fake);
        let next = &p["renewal"]["successor"];
        assert_eq!(next["job_id"], Value::Null, "{round}: {p}");
        assert!(next["unclear"].as_str().is_some(), "{round}: {p}");
        assert_eq!(p["renewal"]["stopped"], Value::Null, "{round}: {p}");
        let (worker, allocation) = worker_and_allocation(fake);
        assert_eq!(
            (worker.as_str(), allocation.as_str()),
            (Some("running"), Some("running")),
            "{round}"
        );
    }
    let kinds = fake.kinds();
    for decided in [
        "PoolAllocationEnded",
        "PoolRenewalStopped",
        "WorkerTerminal",
    ] {
        assert!(!kinds.iter().any(|k| k == decided), "{decided}: {kinds:?}");
    }
    assert_eq!(of_kind(fake, "PoolRenewalIntent").len(), 1);
    id
}

/// salloc's own words when it cannot reach the controller: nothing says no job was queued
/// (a lost reply to an accepted request reads the same), so the renewal is not stopped, and
/// once the controller answers without the renewal's name, within salloc's limit plus the
/// settle margin, still nothing is asked again.
#[test]
fn an_salloc_that_cannot_contact_the_controller_stops_nothing_and_asks_nothing_again() {
    let fake = Fake::new();
    let refused = "salloc: error: Job submit/allocate failed: Unable to contact slurm controller \
                   (connect failure)\n";
    renewal_with_the_controller_down(&fake, json!([{"stderr": refused, "exit": 1}]));
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": squeue_with_steps(&[(901, "RUNNING", "None")], &step(901)),
        "sacct": [{"stdout": ""}],
    }));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "unknown", "{r}");
    assert_eq!(sallocs(&fake).len(), 0, "a second salloc: {r}");
    assert_eq!(status(&fake)["renewal"]["stopped"], Value::Null);
}

/// The controller down when the next allocation is due, salloc getting no answer (the request
/// reached the controller, the reply did not come back): nothing decided
/// (`renewal_with_the_controller_down`). Back, the controller lists the job by its name (found,
/// not asked again); down again while it runs (scontrol), it is not adopted on no answer; then
/// the pool renews with exactly one successor and the worker is continued once.
#[test]
fn the_controller_down_during_a_renewal_decides_nothing_and_one_successor_follows() {
    let fake = Fake::new();
    let lost_reply = json!([{"delay": 10, "stderr": "salloc: Pending job allocation 902\n"}]);
    let id = renewal_with_the_controller_down(&fake, lost_reply);
    // Back: the job the lost reply named is found by the renewal's name, pending behind 901.
    let name = renewal_name(&fake);
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": squeue_named("RUNNING", ("PENDING", "Dependency"), &step(901), &name),
    }));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "waiting", "{r}");
    assert_eq!(r["renewals"][0]["job_id"], 902, "{r}");
    assert_eq!(sallocs(&fake).len(), 0, "{r}");
    // 901 over, 902 running, but scontrol (the attach checks) does not answer: not adopted.
    published_checkpoint(&fake, id);
    let over = squeue_named("TIMEOUT", ("RUNNING", "None"), "", &name);
    fake.scenario(json!({"squeue": over, "scontrol": controller_down()}));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "unknown", "{r}");
    assert_eq!(r["continued"][0]["outcome"], "waiting", "{r}");
    assert_eq!(status(&fake)["allocation"]["job_id"], 901);
    // The controller answers again: renewed once, the worker continued once, in 902.
    let running = json!({
        "squeue": squeue_named("TIMEOUT", ("RUNNING", "None"), &step(902), &name),
        "scontrol": [{"stdout": show_job(902, 3595)}],
        "srun": [{"hang": 30}],
    });
    let (renewed, _) = renewed_and_continued_once(&fake, running);
    assert_eq!(renewed["cause"], "time-limit", "{renewed}");
}

/// `scontrol show job 901` in Slurm's preemption grace: still RUNNING, with `PreemptTime`, its
/// `EndTime` pulled forward to the kill.
fn show_job_in_grace(left: i64) -> String {
    show_job(901, left).replace('\n', &format!(" PreemptTime={}\n", at(-2)))
}

/// Squeue's row of 901 in that grace: RUNNING, its end before its start plus its limit.
fn row_in_grace(left: i64) -> String {
    format!(
        "901|901|RUNNING|debug|dev|normal|root|1|4|vm|0:{left:02}|1:00:00|{}|{}|None|x\n",
        started(),
        at(left)
    )
}

/// The successor asked before the end (`--dependency=afterany:901`), then 901 preempted: RUNNING
/// with `PreemptTime` in Slurm's grace (the worker checkpoints and exits), then PREEMPTED. The
/// successor asked is the one that follows, never a second; its adoption records the cause
/// `preempted` with Slurm's proof; the worker (continued only on `preempted`) waits through
/// the grace and is continued once, in the successor, with that cause.
#[test]
fn a_preemption_during_a_renewal_keeps_the_one_successor_asked() {
    let fake = Fake::new();
    let id = asked_before_the_end(&fake, &["--continue-on", "preempted"]);
    // Preempted: Slurm's grace runs; the worker got SIGTERM, checkpointed, published, exited.
    published_checkpoint(&fake, id);
    let pending = row(902, "PENDING", "Dependency", "x");
    let grace = json!({
        "salloc": pending_salloc(),
        "squeue": [
            {"match": ["--steps"], "stdout": ""},
            {"match": ["--jobs=901"], "stdout": row_in_grace(25)},
            {"match": ["--jobs=902"], "stdout": pending},
            {"match": ["--me"], "stdout": format!("{}{pending}", row_in_grace(25))},
        ],
        "scontrol": [{"match": ["901"], "stdout": show_job_in_grace(25)}],
    });
    for round in 0..2 {
        fake.scenario(grace.clone());
        let r = reconcile(&fake);
        assert_eq!(r["preempted"][0]["job_id"], 901, "{round}: {r}");
        assert_eq!(r["renewals"][0]["outcome"], "waiting", "{round}: {r}");
        assert_eq!(r["renewals"][0]["job_id"], 902, "{round}: {r}");
        assert_eq!(sallocs(&fake).len(), 0, "{round}: a second successor: {r}");
        // Its step over, released; never continued in the allocation about to be killed.
        assert_eq!(r["continued"][0]["outcome"], "waiting", "{round}: {r}");
        let why = r["continued"][0]["detail"].as_str().unwrap();
        assert!(why.contains("preemption grace"), "{round}: {r}");
    }
    fake.scenario(grace);
    let (_, text, _) = fake.run(&["pool", "status", "p", "--refresh"]);
    assert!(text.contains("preempted, ends at"), "{text}");
    // 901 PREEMPTED; 902, free of its dependency, runs.
    let over = row(901, "PREEMPTED", "None", "x");
    let running = row(902, "RUNNING", "None", "x");
    let ran = json!({
        "squeue": [
            {"match": ["--steps"], "stdout": step(902)},
            {"match": ["--jobs=901"], "stdout": over},
            {"match": ["--jobs=902"], "stdout": running},
            {"match": ["--me"], "stdout": format!("{over}{running}")},
        ],
        "scontrol": [{"match": ["902"], "stdout": show_job(902, 3595)}],
        "srun": [{"hang": 30}],
    });
    let (renewed, continued) = renewed_and_continued_once(&fake, ran);
    assert_eq!(renewed["cause"], "preempted", "{renewed}");
    assert!(
        renewed["proof"].as_str().unwrap().contains("901 PREEMPTED"),
        "{renewed}"
    );
    assert_eq!(renewed["allocation"]["job_id"], 902, "{renewed}");
    let ended = of_kind(&fake, "PoolAllocationEnded");
    let proof = ended[0]["event"]["proof"].as_str().unwrap();
    assert!(proof.contains("PREEMPTED"), "{ended:?}");
    assert_eq!(continued["cause"], "preempted", "{continued}");
    assert!(
        continued["proof"].as_str().unwrap().contains("PREEMPTED"),
        "{continued}"
    );
}

/// A next allocation that keeps ending before it is the pool's (Slurm shows it `FAILED` each
/// time): it is asked again, but only `policy::renewal::FAILED_RENEWALS_STOP` times in a row;
/// then renewal stops, recorded with the reason, never asked again, and `pool status` says
/// what to do.
#[test]
fn a_renewal_that_keeps_failing_stops_after_a_bound() {
    let bound = dispatch::policy::renewal::FAILED_RENEWALS_STOP as usize;
    let fake = Fake::new();
    create(&fake, 3595, &["--renew"]);
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "FAILED", "None")], "x"),
    }));
    let mut outcomes = Vec::new();
    for _ in 0..(2 * bound + 4) {
        let r = reconcile(&fake);
        outcomes.push(
            r["renewals"][0]["outcome"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
        );
    }
    assert_eq!(sallocs(&fake).len(), bound, "{outcomes:?}");
    assert_eq!(outcomes[2 * bound], "stopped", "{outcomes:?}");
    let stops: Vec<Value> = events_of(&fake, "PoolRenewalStopped");
    assert_eq!(stops.len(), 1, "{stops:?}");
    let reason = stops[0]["event"]["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.contains(&format!("{bound} next allocations in a row")) && reason.contains("FAILED"),
        "{reason}"
    );
    assert_eq!(status(&fake)["renewal"]["stopped"], reason.as_str());
    let (_, text, _) = fake.run(&["pool", "status", "p"]);
    assert!(
        text.contains("renewal stopped")
            && text.contains("`dispatch pool release p`")
            && text.contains("`dispatch pool create p`"),
        "{text}"
    );
    let (code, out, _) = fake.run(&["audit", "--json"]);
    assert_eq!(code, 0, "{out}");
}

/// Found by the renewal simulation (seed 16 with 150–300 s allocations): an allocation that hit
/// its time limit and was forgotten by squeue (MinJobAge) before any `reconcile` looked was
/// recorded over by "Invalid job id" alone, which names no state, so its renewal (and its
/// workers' continuations) took the end for `lost`. Accounting names how it ended: asked
/// then, the proof carries Slurm's state and the cause is `time-limit`.
#[test]
fn an_allocation_squeue_forgot_ends_by_the_state_accounting_shows() {
    let fake = Fake::new();
    create(&fake, 3595, &["--renew"]);
    let forgotten = json!({"match": ["--jobs=901"], "stderr": "slurm_load_jobs error: Invalid job id specified\n", "exit": 1});
    let sacct = json!([{"stdout": "901|901|TIMEOUT|0:0|0:0|2026-11-29T16:12:52|2026-11-29T16:12:52|2026-11-29T17:12:52|01:00:00|01:00:00|vm|4|4G|debug|dev|normal|root|alloc\n"}]);
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": [
            {"match": ["--steps"], "stdout": ""},
            forgotten.clone(),
            {"match": ["--jobs=902"], "stdout": row(902, "PENDING", "Priority", "x")},
        ],
        "sacct": sacct.clone(),
    }));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "asked", "{r}");
    let ended: Vec<Value> = events_of(&fake, "PoolAllocationEnded");
    let proof = ended[0]["event"]["proof"].as_str().unwrap();
    assert!(
        proof.contains("Invalid job id") && proof.contains("TIMEOUT"),
        "{proof}"
    );
    fake.scenario(json!({
        "squeue": [
            {"match": ["--steps"], "stdout": ""},
            forgotten,
            {"match": ["--jobs=902"], "stdout": row(902, "RUNNING", "None", "x")},
        ],
        "sacct": sacct,
        "scontrol": [{"stdout": show_job(902, 3595)}],
    }));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "renewed", "{r}");
    let renewed: Vec<Value> = events_of(&fake, "PoolRenewed");
    assert_eq!(renewed[0]["event"]["cause"], "time-limit", "{renewed:?}");
}

/// Issue 38, what is left (1): `pool status` says how the pool's last allocation ended: the
/// current one once it is proven over (JSON `last_end`, the cause read from the proof), then,
/// once renewed, the one the renewal replaced with the cause `PoolRenewed` recorded; and a line
/// under the pool in the human output.
#[test]
fn pool_status_names_the_last_allocations_end_and_its_cause() {
    let fake = Fake::new();
    create(&fake, 3595, &["--renew"]);
    assert_eq!(status(&fake)["last_end"], Value::Null);
    // Preempted, the next one pending: the current allocation's end is recorded.
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "PENDING", "Priority")], "x"),
    }));
    assert_eq!(reconcile(&fake)["renewals"][0]["outcome"], "asked");
    let end = status(&fake)["last_end"].clone();
    assert_eq!(
        (&end["generation"], &end["job_id"], &end["cause"]),
        (&json!(1), &json!(901), &json!("preempted")),
        "{end}"
    );
    assert!(
        end["proof"].as_str().unwrap().contains("PREEMPTED"),
        "{end}"
    );
    let at = end["at"].as_str().unwrap().to_owned();
    assert!(at.starts_with("20"), "{end}");
    // Renewed: the pool runs on job 902, and still says how allocation 1 ended.
    fake.scenario(json!({
        "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "RUNNING", "None")], "x"),
        "scontrol": [{"stdout": show_job(902, 3595)}],
    }));
    assert_eq!(reconcile(&fake)["renewals"][0]["outcome"], "renewed");
    let p = status(&fake);
    assert_eq!(p["allocation"]["state"], "running", "{p}");
    assert_eq!(p["last_end"], end, "{p}");
    let (code, text, err) = fake.run(&["pool", "status", "p"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(&format!(
            "allocation 1 (job 901) ended: preempted, {}, {at}",
            end["proof"].as_str().unwrap()
        )),
        "{text}"
    );
}

/// Issue 38, what is left (1): a pool that does not renew, its allocation proven over: the
/// same `last_end`, and its line says the cause.
#[test]
fn an_ended_pool_that_does_not_renew_names_its_allocations_end() {
    let fake = Fake::new();
    create(&fake, 3595, &[]);
    fake.scenario(json!({"squeue": squeue(&[(901, "TIMEOUT", "None")], "x")}));
    reconcile(&fake);
    let p = status(&fake);
    assert_eq!(p["allocation"]["state"], "ended", "{p}");
    let end = &p["last_end"];
    assert_eq!(
        (&end["generation"], &end["job_id"], &end["cause"]),
        (&json!(1), &json!(901), &json!("time-limit")),
        "{p}"
    );
    let (_, text, _) = fake.run(&["pool", "status", "p", "--wide"]);
    assert!(
        text.contains("allocation 1 (job 901) ended: time-limit, "),
        "{text}"
    );
}

/// Issue 38, what is left (2): plain `reconcile` (no `--json`, no `--watch`) prints a line for
/// each renewal: asked, waited for, renewed with the last end's cause, stopped.
#[test]
fn plain_reconcile_prints_each_renewal() {
    let fake = Fake::new();
    create(&fake, 3595, &["--renew-max", "2"]);
    let plain = |fake: &Fake| {
        let (code, out, err) = fake.run(&["reconcile"]);
        assert_eq!(code, 0, "{err}");
        out
    };
    fake.scenario(json!({
        "salloc": pending_salloc(),
        "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "PENDING", "Priority")], "x"),
    }));
    let out = plain(&fake);
    assert!(
        out.contains("  pool p: allocation 2 asked (job 902): allocation 902 asked for"),
        "{out}"
    );
    let out = plain(&fake);
    assert!(
        out.contains("  pool p: allocation 2 waited for (job 902, PENDING: Priority): "),
        "{out}"
    );
    fake.scenario(json!({
        "squeue": squeue(&[(901, "PREEMPTED", "None"), (902, "RUNNING", "None")], "x"),
        "scontrol": [{"stdout": show_job(902, 3595)}],
    }));
    let out = plain(&fake);
    assert!(
        out.contains("  pool p: allocation 2 adopted (job 902): ")
            && out.contains("(the last ended: preempted, "),
        "{out}"
    );
    let out = plain(&fake);
    assert!(
        out.contains("  pool p: renewal stopped: ") && out.contains("--renew-max 2"),
        "{out}"
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 38, what is left (3): a stop without `--grace` gives each worker its own grace.

/// Worker `name` of pool `p` submitted with `--grace grace` as step 901.`step` (srun hangs),
/// and, when `recorded`, its supervisor's start in its own journal (with that grace, as the
/// supervisor records what it was started with). Its submission id.
fn worker_with_grace(fake: &Fake, name: &str, step: u32, grace: u32, recorded: bool) -> uuid::Uuid {
    let listed = format!("901.{step}|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|p.{name}\n");
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(901, 3595)}],
        "srun": [{"hang": 30}],
        "squeue": squeue_with_steps(&[(901, "RUNNING", "None")], &listed),
    }));
    let given = grace.to_string();
    let (code, out, err) = fake.run(&[
        "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--name", name, "--grace", &given,
        "--json", "--", "true",
    ]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(out.trim()).unwrap();
    let id: uuid::Uuid = r["submission_id"].as_str().unwrap().parse().unwrap();
    if recorded {
        let pools = fake.state().join("pools");
        let dirs = dispatch::worker::dirs::WorkerDirs::new(&pools, "p", id);
        fake_cli::supervisor_started(&dirs.evidence, id, grace);
    }
    id
}

/// The grace each stop gave, by submission id: its `WorkerStopIntent`, and what the file that
/// tells the worker's supervisor says.
fn graces_given(fake: &Fake, id: uuid::Uuid) -> (Value, String) {
    let intent = events_of(fake, "WorkerStopIntent")
        .into_iter()
        .find(|e| e["event"]["submission_id"] == id.to_string())
        .expect("a WorkerStopIntent");
    let dirs = dispatch::worker::dirs::WorkerDirs::new(&fake.state().join("pools"), "p", id);
    let told = std::fs::read_to_string(dirs.root.join("stop-request")).unwrap_or_default();
    (intent["event"]["grace_s"].clone(), told.trim().to_owned())
}

/// Preempted before the stops: each step is proven over at its TERM, and the allocation too.
fn everything_over(fake: &Fake) {
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(901, 3595)}],
        "squeue": squeue_with_steps(&[(901, "PREEMPTED", "None")], ""),
        "scancel": [{"stdout": ""}],
    }));
}

#[test]
fn release_without_grace_gives_each_worker_its_own() {
    let fake = Fake::new();
    create(&fake, 3595, &[]);
    let long = worker_with_grace(&fake, "long", 0, 20, true);
    let short = worker_with_grace(&fake, "short", 1, 3, true);
    // Its supervisor has recorded nothing yet: its payload has not started.
    let quiet = worker_with_grace(&fake, "quiet", 2, 30, false);
    everything_over(&fake);
    fake.forget_calls();
    let (code, out, err) = fake.run(&["pool", "release", "p", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    // Every worker is sent SIGTERM before any stop waits for its proof: their graces run side
    // by side, and the release waits for the longest, not their sum.
    let calls = fake.calls();
    let is_term =
        |(p, a): &(String, Vec<String>)| p == "scancel" && a.iter().any(|x| x == "--signal=TERM");
    let terms: Vec<usize> = (0..calls.len()).filter(|i| is_term(&calls[*i])).collect();
    assert_eq!(terms.len(), 3, "{calls:?}");
    let first_look = (terms[0]..calls.len())
        .find(|i| calls[*i].0 == "squeue" && calls[*i].1.iter().any(|x| x == "--steps"))
        .unwrap();
    assert!(terms[2] < first_look, "{calls:?}");
    assert_eq!(graces_given(&fake, long), (json!(20), "grace_s=20".into()));
    assert_eq!(graces_given(&fake, short), (json!(3), "grace_s=3".into()));
    assert_eq!(graces_given(&fake, quiet), (json!(10), "grace_s=10".into()));
}

#[test]
fn an_explicit_grace_wins_and_stop_worker_gives_the_workers_own_too() {
    let fake = Fake::new();
    create(&fake, 3595, &[]);
    let first = worker_with_grace(&fake, "first", 0, 20, true);
    let second = worker_with_grace(&fake, "second", 1, 20, true);
    everything_over(&fake);
    let (code, out, err) = fake.run(&["pool", "stop-worker", "p", "first", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(graces_given(&fake, first), (json!(20), "grace_s=20".into()));
    let (code, out, err) = fake.run(&["pool", "release", "p", "--grace", "5", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(graces_given(&fake, second), (json!(5), "grace_s=5".into()));
}

// ---------------------------------------------------------------------------------------------
// Issue 38's renewal gap: once every worker of the allocation is over, released with proof, and
// the next allocation waits behind it, `reconcile` ends the old one itself (intent, scancel,
// answer) instead of leaving it idle until Slurm's time limit.

/// What worker `w`'s supervisor records when it stopped at its early-shutdown deadline (SIGTERM,
/// reason `deadline`), checkpointed and published a publication that verifies.
fn stopped_at_its_deadline(fake: &Fake, id: uuid::Uuid) {
    let pools = fake.state().join("pools");
    let dirs = dispatch::worker::dirs::WorkerDirs::new(&pools, "p", id);
    let published = pools.join("p/published").join(format!("w-{id}"));
    let published = published.display().to_string();
    let sha = fake_cli::plant_publication(&published, "w", id);
    fake_cli::supervisor_journal(
        &dirs.evidence,
        true,
        Some((&published, sha)),
        "checkpointed",
    );
}

/// Squeue's answers once `w`'s step is over: 901 listed `running_901` times RUNNING, then
/// CANCELLED; 902 listed `pending_902` times PENDING behind it, then RUNNING (with its step).
fn ended_early(running_901: u32, pending_902: u32) -> Value {
    json!({
        "scancel": [{"stdout": ""}],
        "scontrol": [{"stdout": show_job(902, 3595)}],
        "srun": [{"hang": 30}],
        "squeue": [
            {"match": ["--steps"], "times": 1, "stdout": ""},
            {"match": ["--steps"], "stdout": step(902)},
            {"match": ["--jobs=901"], "times": running_901, "stdout": row(901, "RUNNING", "None", "x")},
            {"match": ["--jobs=901"], "stdout": row(901, "CANCELLED", "None", "x")},
            {"match": ["--jobs=902"], "times": pending_902, "stdout": row(902, "PENDING", "Dependency", "x")},
            {"match": ["--jobs=902"], "stdout": row(902, "RUNNING", "None", "x")},
            {"match": ["--me"], "stdout": row(901, "RUNNING", "None", "x") + &row(902, "PENDING", "Dependency", "x")},
        ],
    })
}

fn scancels(fake: &Fake) -> Vec<Vec<String>> {
    fake.calls()
        .into_iter()
        .filter(|(p, _)| p == "scancel")
        .map(|(_, a)| a)
        .collect()
}

/// The worker continued once in 902 for its time limit (its own journal's deadline SIGTERM),
/// the renewal's cause the time limit, its proof naming dispatch's end and Slurm's CANCELLED;
/// `pool status` and `audit` say so.
fn renewed_for_the_time_limit(fake: &Fake) {
    let renewed = of_kind(fake, "PoolRenewed");
    assert_eq!(renewed.len(), 1, "{renewed:?}");
    let r = &renewed[0]["event"];
    assert_eq!(r["cause"], "time-limit", "{r}");
    let proof = r["proof"].as_str().unwrap();
    assert!(
        proof.contains("dispatch ended allocation 901 early") && proof.contains("CANCELLED"),
        "{proof}"
    );
    let continued = of_kind(fake, "WorkerContinued");
    assert_eq!(continued.len(), 1, "{continued:?}");
    let c = &continued[0]["event"];
    assert_eq!(c["cause"], "time-limit", "{c}");
    assert!(
        c["proof"]
            .as_str()
            .unwrap()
            .contains("early-shutdown deadline"),
        "{c}"
    );
    assert_eq!(of_kind(fake, "PoolRenewalIntent").len(), 1);
    on_in_902_each_generation_in_its_own_job(fake);
}

/// While the worker runs, the old allocation is left alone; once its step is over, one
/// `reconcile` ends it (intent, `scancel 901`, accepted), proves it CANCELLED, waits for 902 to
/// run, makes 902 the pool's and continues the worker there for its time limit.
#[test]
fn the_old_allocation_is_ended_early_once_every_worker_is_over() {
    let fake = Fake::new();
    let id = asked_before_the_end(&fake, &[]);
    // The worker runs: nothing is ended, whatever the successor does.
    for successor in ["PENDING", "RUNNING"] {
        let reason = if successor == "PENDING" {
            "Dependency"
        } else {
            "None"
        };
        fake.scenario(json!({
            "squeue": squeue_with_steps(&[(901, "RUNNING", "None"), (902, successor, reason)], &step(901)),
        }));
        let r = reconcile(&fake);
        assert_eq!(r["renewals"][0]["outcome"], "waiting", "{r}");
        assert!(scancels(&fake).is_empty(), "{:?}", fake.calls());
    }
    assert!(of_kind(&fake, "PoolAllocationEndIntent").is_empty());
    stopped_at_its_deadline(&fake, id);
    fake.scenario(ended_early(2, 1));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "renewed", "{r}");
    assert_eq!(r["continued"][0]["outcome"], "continued", "{r}");
    assert_eq!(scancels(&fake), vec![vec!["901".to_owned()]]);
    let intents = of_kind(&fake, "PoolAllocationEndIntent");
    assert_eq!(intents.len(), 1, "{intents:?}");
    assert_eq!(intents[0]["event"]["job_id"], 901);
    let answers = of_kind(&fake, "PoolAllocationEndAnswered");
    assert_eq!(answers[0]["event"]["outcome"], "accepted", "{answers:?}");
    renewed_for_the_time_limit(&fake);
}

/// `pool submit` of another worker `name` into pool `p`.
fn another_worker(name: &str) -> Vec<&str> {
    let args = "pool submit p --cpus 1 --mem 100M --publication-timeout 5 --name";
    let mut argv: Vec<&str> = args.split(' ').collect();
    argv.extend([name, "--", "true"]);
    argv
}

/// Nothing is ended while a submission's outcome is unknown (its budget stays held): worker `w`
/// over, but `w2`'s submission killed after its intent.
#[test]
fn an_unknown_submission_keeps_the_old_allocation() {
    let fake = Fake::new();
    let id = asked_before_the_end(&fake, &[]);
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(901, 120)}],
        "squeue": squeue_with_steps(&[(901, "RUNNING", "None"), (902, "PENDING", "Dependency")], &step(901)),
    }));
    fake.crash("pool-submit-after-intent", &another_worker("w2"));
    stopped_at_its_deadline(&fake, id);
    fake.scenario(ended_early(100, 100));
    let r = reconcile(&fake);
    assert_eq!(r["renewals"][0]["outcome"], "waiting", "{r}");
    assert!(scancels(&fake).is_empty(), "{:?}", fake.calls());
    assert!(of_kind(&fake, "PoolAllocationEndIntent").is_empty());
}

/// Killed after the intent (no scancel yet): a `pool submit` is refused, naming the next
/// allocation and what to run; the next `reconcile` cancels, renews once and continues.
/// Killed after the scancel (no answer recorded): the next `reconcile` proves the end and
/// renews once, without a second scancel.
#[test]
fn a_crash_at_each_early_end_failpoint_renews_once() {
    for (point, scancels_after) in [
        ("pool-renew-end-after-intent", 1),
        ("pool-renew-end-after-cancel", 0),
    ] {
        let fake = Fake::new();
        let id = asked_before_the_end(&fake, &[]);
        stopped_at_its_deadline(&fake, id);
        fake.scenario(ended_early(1000, 1000));
        fake.crash(point, &["reconcile"]);
        assert_eq!(
            of_kind(&fake, "PoolAllocationEndIntent").len(),
            1,
            "{point}"
        );
        assert!(
            of_kind(&fake, "PoolAllocationEndAnswered").is_empty(),
            "{point}"
        );
        fake.scenario(json!({
            "scontrol": [{"stdout": show_job(901, 110)}],
            "squeue": squeue_with_steps(&[(901, "RUNNING", "None"), (902, "PENDING", "Dependency")], ""),
        }));
        let (code, _, err) = fake.run(&another_worker("w3"));
        assert_eq!(code, 3, "{point}: {err}");
        assert!(
            err.contains("allocation 901 is being ended")
                && err.contains("job 902")
                && err.contains("dispatch reconcile"),
            "{point}: {err}"
        );
        let ending = &status(&fake)["renewal"]["ending"];
        assert_eq!(ending["job_id"], 901, "{point}: {ending}");
        assert_eq!(ending["answer"], Value::Null, "{point}: {ending}");
        let (_, text, _) = fake.run(&["pool", "status", "p"]);
        assert!(
            text.contains("allocation 901 ended early by dispatch (its 1 worker(s) are over"),
            "{point}: {text}"
        );
        let running = if scancels_after == 1 { 2 } else { 0 };
        fake.scenario(ended_early(running, 0));
        let r = reconcile(&fake);
        assert_eq!(r["renewals"][0]["outcome"], "renewed", "{point}: {r}");
        assert_eq!(r["continued"][0]["outcome"], "continued", "{point}: {r}");
        assert_eq!(scancels(&fake).len(), scancels_after, "{point}");
        renewed_for_the_time_limit(&fake);
    }
}
