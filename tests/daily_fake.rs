//! The daily loop against the fake Slurm (issue 14): `dispatch logs` for pool and `submit`
//! workers (ambiguous names, following until the worker ends), `dispatch jobs`, `--watch`, and
//! the human tables at 80 columns.

mod fake_cli;

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fake_cli::Fake;
use serde_json::{json, Value};

/// `scontrol --oneliner show job ID`: a running 4-CPU, 4 GB allocation owned by root that
/// started a minute ago (a fixed start per process: the incarnation must not drift).
fn show_job(id: u32) -> String {
    static BASE: std::sync::OnceLock<chrono::DateTime<chrono::Local>> = std::sync::OnceLock::new();
    let start = *BASE.get_or_init(chrono::Local::now) - chrono::Duration::seconds(60);
    let fmt = |t: chrono::DateTime<chrono::Local>| t.format("%Y-%m-%dT%H:%M:%S").to_string();
    format!(
        "JobId={id} JobName=alloc UserId=root(0) GroupId=root(0) Account=dev QOS=normal \
         JobState=RUNNING Reason=None RunTime=00:01:00 TimeLimit=01:00:00 SubmitTime={s} \
         StartTime={s} EndTime={e} Partition=debug NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=4 \
         NumTasks=1 CPUs/Task=4 TRES=cpu=4,mem=4G,node=1,billing=4 MinMemoryNode=4G\n",
        s = fmt(start),
        e = fmt(chrono::Local::now() + chrono::Duration::seconds(3600)),
    )
}

fn attach(fake: &Fake, pool: &str, job: u32) {
    fake.scenario(json!({"scontrol": [{"stdout": show_job(job)}]}));
    let (code, _, err) = fake.run(&["pool", "attach", pool, "--job", &job.to_string()]);
    assert_eq!(code, 0, "{err}");
}

/// Submit worker `name` to `pool` (attached to `job`); its srun hangs, its step is listed.
/// Returns the submission id.
fn pool_worker(fake: &Fake, pool: &str, job: u32, name: &str) -> String {
    let step = format!("{job}.0|root|0:01|UNLIMITED|2026-11-29T17:00:00|vm|1|{pool}.{name}\n");
    fake.scenario(json!({
        "scontrol": [{"stdout": show_job(job)}],
        "srun": [{"hang": 120}],
        "squeue": [{"match": ["--steps"], "stdout": step}],
    }));
    let (code, out, err) = fake.run(&[
        "pool", "submit", pool, "--cpus", "1", "--mem", "100M", "--name", name, "--json", "--",
        "true",
    ]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Value>(out.trim()).unwrap()["submission_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Submit `dispatch submit` worker `name` as job `job`. Returns the submission id.
fn job_worker(fake: &Fake, name: &str, job: u32) -> String {
    fake.scenario(json!({"sbatch": [{"stdout": format!("{job}\n")}]}));
    let (code, out, err) = fake.run(&[
        "submit", "--cpus", "2", "--mem", "1G", "--time", "10", "--name", name, "--json", "--",
        "true",
    ]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str::<Value>(out.trim()).unwrap()["submission_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn evidence(fake: &Fake, pool: Option<&str>, id: &str) -> std::path::PathBuf {
    match pool {
        Some(p) => fake.state().join("pools").join(p).join("workers").join(id),
        None => fake.state().join("jobs").join(id),
    }
    .join("evidence")
}

#[test]
fn logs_prints_a_pool_workers_and_a_submit_workers_output_offline() {
    let fake = Fake::new();
    attach(&fake, "p", 901);
    let pooled = pool_worker(&fake, "p", 901, "w");
    let batch = job_worker(&fake, "b", 43);
    std::fs::write(
        evidence(&fake, Some("p"), &pooled).join("stdout"),
        "hello\n",
    )
    .unwrap();
    std::fs::write(evidence(&fake, Some("p"), &pooled).join("stderr"), "oops\n").unwrap();
    std::fs::write(evidence(&fake, None, &batch).join("stdout"), "batch out\n").unwrap();
    fake.scenario(json!({}));

    let (code, out, err) = fake.run(&["logs", "w"]);
    assert_eq!((code, out.as_str()), (0, "hello\n"), "{err}");
    let (code, out, err) = fake.run(&["logs", "w", "--stderr"]);
    assert_eq!((code, out.as_str()), (0, "oops\n"), "{err}");
    let (code, out, err) = fake.run(&["logs", "b"]);
    assert_eq!((code, out.as_str()), (0, "batch out\n"), "{err}");
    // By submission id and by its short form.
    let (code, out, _) = fake.run(&["logs", &batch]);
    assert_eq!((code, out.as_str()), (0, "batch out\n"));
    let (code, out, _) = fake.run(&["logs", &pooled[..8]]);
    assert_eq!((code, out.as_str()), (0, "hello\n"));
    // No stderr file yet: nothing on stdout, a note, exit 0.
    let (code, out, err) = fake.run(&["logs", "b", "--stderr"]);
    assert_eq!((code, out.as_str()), (0, ""));
    assert!(err.contains("no stderr yet"), "{err}");

    let (code, out, _) = fake.run(&["--json", "logs", "w"]);
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(doc["text"], "hello\n");
    assert_eq!(doc["pool"], "p");
    assert_eq!(doc["submission_id"], pooled.as_str());
    assert_eq!(doc["exists"], true);

    // pool status and inspect say where the files are.
    let (_, out, _) = fake.run(&["--json", "pool", "status"]);
    let status: Value = serde_json::from_str(out.trim()).unwrap();
    let w = &status["pools"][0]["workers"][0];
    assert_eq!(
        w["stdout"],
        evidence(&fake, Some("p"), &pooled)
            .join("stdout")
            .display()
            .to_string()
    );
    assert!(w["stderr"].as_str().unwrap().ends_with("/evidence/stderr"));
    let (_, out, _) = fake.run(&["--json", "inspect", "b"]);
    let inspected: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        inspected["stdout"],
        evidence(&fake, None, &batch)
            .join("stdout")
            .display()
            .to_string()
    );

    assert!(
        fake.calls().is_empty(),
        "logs is offline: {:?}",
        fake.calls()
    );
}

#[test]
fn an_ambiguous_worker_name_is_a_usage_error_naming_the_choices() {
    let fake = Fake::new();
    attach(&fake, "p", 901);
    attach(&fake, "q", 902);
    let in_p = pool_worker(&fake, "p", 901, "w");
    let in_q = pool_worker(&fake, "q", 902, "w");
    std::fs::write(evidence(&fake, Some("p"), &in_p).join("stdout"), "from p\n").unwrap();
    std::fs::write(evidence(&fake, Some("q"), &in_q).join("stdout"), "from q\n").unwrap();

    let (code, out, err) = fake.run(&["logs", "w"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    for needle in ["--pool", "pool p", "pool q", in_p.as_str(), in_q.as_str()] {
        assert!(err.contains(needle), "{needle:?} missing from {err}");
    }
    let (code, out, _) = fake.run(&["logs", "w", "--pool", "q"]);
    assert_eq!((code, out.as_str()), (0, "from q\n"));

    // The name used again in one pool: --pool is not enough, the submission id is.
    let (code, _, err) = fake.run(&["forget", &in_p, "--reason", "test: free the name"]);
    assert_eq!(code, 0, "{err}");
    let again = pool_worker(&fake, "p", 901, "w");
    let (code, _, err) = fake.run(&["logs", "w", "--pool", "p"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("submission id"), "{err}");
    assert!(err.contains(&again) && err.contains(&in_p), "{err}");
    let (code, out, _) = fake.run(&["logs", &in_p]);
    assert_eq!((code, out.as_str()), (0, "from p\n"));

    let (code, _, err) = fake.run(&["logs", "nope"]);
    assert_eq!(code, 3, "not found: {err}");
    assert!(err.contains("dispatch jobs"), "{err}");
}

/// dispatch with stdout and stderr piped, running on.
fn spawn(fake: &Fake, args: &[&str]) -> std::process::Child {
    fake.command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// All a (finished) child wrote on stderr.
fn stderr_of(child: &mut std::process::Child) -> String {
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    err
}

/// Read what `child` prints until `want` has appeared, within `within`.
fn read_until(out: &mut impl Read, seen: &mut String, want: &str, within: Duration) {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while !seen.contains(want) {
        assert!(
            Instant::now() < deadline,
            "{want:?} never came; saw {seen:?}"
        );
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "output closed before {want:?}; saw {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

#[test]
fn logs_follow_prints_what_the_worker_writes_until_it_ends() {
    let fake = Fake::new();
    attach(&fake, "p", 901);
    let id = pool_worker(&fake, "p", 901, "w");
    let stdout = evidence(&fake, Some("p"), &id).join("stdout");
    fake.scenario(json!({}));
    let mut child = spawn(&fake, &["logs", "w", "-f"]);
    let mut out = child.stdout.take().unwrap();
    let mut seen = String::new();
    // The file does not exist yet: the follower waits for it.
    std::thread::sleep(Duration::from_millis(700));
    std::fs::write(&stdout, "first\n").unwrap();
    read_until(&mut out, &mut seen, "first\n", Duration::from_secs(10));
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&stdout)
        .unwrap();
    f.write_all(b"second\n").unwrap();
    read_until(&mut out, &mut seen, "second\n", Duration::from_secs(10));
    assert!(
        child.try_wait().unwrap().is_none(),
        "ended while the worker runs"
    );

    // The coordinator's state has it over (here: an operator forgot it); what was written
    // just before is printed too, then the follower ends by itself.
    f.write_all(b"last words\n").unwrap();
    let (code, _, err) = fake.run(&["forget", "w", "--reason", "test: end the worker"]);
    assert_eq!(code, 0, "{err}");
    let status = wait_exit(&mut child, Duration::from_secs(15));
    out.read_to_string(&mut seen).unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(seen, "first\nsecond\nlast words\n");
    let err = stderr_of(&mut child);
    assert!(err.contains("ended"), "{err}");
    assert!(
        fake.calls().is_empty(),
        "following is offline: {:?}",
        fake.calls()
    );

    // Following a worker that has ended prints what there is and ends; with --json, one line
    // per chunk and a last one that says why it ended.
    let (code, out, err) = fake.run(&["--json", "logs", "w", "-f"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0]["offset"], 0);
    assert_eq!(lines[0]["text"], "first\nsecond\nlast words\n");
    assert!(
        lines[1]["ended"].as_str().unwrap().contains("forgotten"),
        "{out}"
    );
}

fn squeue_row(id: u32, state: &str, node: &str, reason: &str) -> String {
    format!("{id}|{id}|{state}|debug|dev|normal|root|1|2|{node}|4:00|10:00|2026-11-29T17:00:00|2026-11-29T17:10:00|{reason}|job\n")
}

fn json_of(fake: &Fake, args: &[&str]) -> Value {
    let (code, out, err) = fake.run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{args:?}: {out:?}: {e}"))
}

#[test]
fn jobs_lists_every_submit_worker_and_refresh_asks_only_about_them() {
    let fake = Fake::new();
    let (code, out, err) = fake.run(&["jobs"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no jobs"), "{out}");
    assert_eq!(
        json_of(&fake, &["--json", "jobs"]),
        json!({"jobs": [], "refresh": null})
    );

    attach(&fake, "p", 901);
    let queued = job_worker(&fake, "b", 43);
    fake.scenario(json!({"sbatch": [{
        "stderr": "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
        "exit": 1,
    }]}));
    let (code, _, _) = fake.run(&[
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "bad", "--", "true",
    ]);
    assert_eq!(code, 1);

    // Offline: from the journal alone.
    fake.scenario(json!({}));
    let r = json_of(&fake, &["--json", "jobs"]);
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    let jobs = r["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "{r}");
    assert_eq!(jobs[0]["worker"], "b");
    assert_eq!(jobs[0]["submission_id"], queued.as_str());
    assert_eq!(jobs[0]["job_id"], 43);
    assert_eq!(jobs[0]["state"], "queued");
    assert_eq!(jobs[0]["active"], true);
    assert_eq!(jobs[0]["slurm_state"], Value::Null);
    assert!(jobs[0]["stdout"]
        .as_str()
        .unwrap()
        .ends_with(&format!("/jobs/{queued}/evidence/stdout")));
    assert_eq!(jobs[1]["worker"], "bad");
    assert_eq!(jobs[1]["state"], "failed");
    assert_eq!(jobs[1]["active"], false);
    assert!(jobs[1]["failure"]
        .as_str()
        .unwrap()
        .contains("Invalid partition"));

    // --refresh: reconcile's own listing of the known job ids, nothing about the pool; what
    // it showed is in the report.
    fake.scenario(json!({"squeue": [{"match": ["--jobs=43"], "stdout": squeue_row(43, "RUNNING", "vm", "None")}]}));
    let r = json_of(&fake, &["--json", "jobs", "--refresh"]);
    assert_eq!(r["jobs"][0]["slurm_state"], "RUNNING", "{r}");
    assert_eq!(r["jobs"][0]["node"], "vm");
    assert_eq!(
        r["jobs"][0]["state"], "queued",
        "a live job is not a recorded change"
    );
    assert_eq!(r["refresh"]["slurm_calls"], 1);
    let calls = fake.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(
        !calls[0]
            .1
            .iter()
            .any(|a| a.contains("901") || a == "--steps"),
        "{calls:?}"
    );

    // A pending job says why.
    fake.scenario(json!({"squeue": [{"match": ["--jobs=43"], "stdout": squeue_row(43, "PENDING", "", "Priority")}]}));
    let (code, out, err) = fake.run(&["jobs", "--refresh"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("PENDING (Priority)"), "{out}");

    // What the refresh proves is recorded, as reconcile records it.
    fake.scenario(json!({"squeue": [{"match": ["--jobs=43"], "stdout": squeue_row(43, "COMPLETED", "vm", "None")}]}));
    let r = json_of(&fake, &["--json", "jobs", "--refresh"]);
    assert_eq!(r["refresh"]["resolved"], 1, "{r}");
    assert_eq!(r["jobs"][0]["state"], "released", "{r}");
    assert_eq!(r["jobs"][0]["active"], false);
    assert!(fake.kinds().iter().any(|k| k == "JobTerminal"));
}

/// Issue 36, item 2: a `dispatch submit` worker whose payload exited 3 (an older supervisor
/// wrote `completed` for it) is shown failed with its code by `jobs`, in JSON and the table.
#[test]
fn jobs_show_a_failed_payload_with_its_exit_code() {
    use dispatch::event::worker::{PayloadExited, PayloadStarted, SupervisorFinished};
    use dispatch::event::{Actor, WorkerEvent};
    let fake = Fake::new();
    let id = job_worker(&fake, "b", 43);
    let w = dispatch::journal::JournalWriter::<WorkerEvent>::open_as(
        &evidence(&fake, None, &id).join("journal"),
        dispatch::journal::Options::default(),
        Actor::current(),
    )
    .unwrap();
    w.append(vec![
        WorkerEvent::PayloadStarted(PayloadStarted { pid: 42 }),
        WorkerEvent::PayloadExited(PayloadExited {
            code: Some(3),
            signal: None,
            interrupted: false,
        }),
        WorkerEvent::SupervisorFinished(SupervisorFinished {
            outcome: "completed".into(),
            exit_code: 3,
        }),
    ])
    .unwrap();
    drop(w);
    fake.scenario(json!({}));
    let r = json_of(&fake, &["--json", "jobs"]);
    let j = &r["jobs"][0];
    assert_eq!(j["state"], "queued", "the coordinator's word stays: {r}");
    assert_eq!(j["stage"], "exited", "{r}");
    assert_eq!(
        (&j["outcome"], &j["exit_code"]),
        (&json!("failed"), &json!(3)),
        "{r}"
    );
    let (code, out, err) = fake.run(&["jobs"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("exited, exit 3"), "{out}");
    assert!(out.contains("b failed: exit 3"), "{out}");
}

/// Read one line from a child's stdout within `within` (the reader runs on its own thread).
fn lines_of(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn wait_exit(child: &mut std::process::Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "did not end within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn watch_prints_one_json_document_per_look_and_ends_quietly_on_ctrl_c() {
    let fake = Fake::new();
    attach(&fake, "p", 901);
    fake.scenario(json!({}));
    let mut child = spawn(&fake, &["--json", "pool", "status", "--watch", "1"]);
    let lines = lines_of(&mut child);
    for _ in 0..2 {
        let line = lines.recv_timeout(Duration::from_secs(10)).unwrap();
        let doc: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(doc["pools"][0]["pool"], "p", "{doc}");
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = wait_exit(&mut child, Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "{status:?}");
    let err = stderr_of(&mut child);
    assert!(err.is_empty(), "Ctrl-C ends it quietly: {err}");
    assert!(fake.calls().is_empty(), "no --refresh, no Slurm call");
}

#[test]
fn watch_with_refresh_asks_slurm_at_most_every_five_seconds() {
    let fake = Fake::new();
    job_worker(&fake, "b", 43);
    fake.scenario(json!({"squeue": [{"match": ["--jobs=43"], "stdout": squeue_row(43, "RUNNING", "vm", "None")}]}));
    let mut child = spawn(&fake, &["--json", "jobs", "--refresh", "--watch", "1"]);
    let lines = lines_of(&mut child);
    let first = lines.recv_timeout(Duration::from_secs(10)).unwrap();
    let at = Instant::now();
    let second = lines.recv_timeout(Duration::from_secs(15)).unwrap();
    let gap = at.elapsed();
    assert!(gap >= Duration::from_millis(4500), "looks {gap:?} apart");
    for line in [first, second] {
        let doc: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(doc["jobs"][0]["slurm_state"], "RUNNING", "{doc}");
    }
    // Closing its stdout ends it (at its next look), with success.
    drop(lines);
    let status = wait_exit(&mut child, Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "{status:?}");
    let err = stderr_of(&mut child);
    assert!(
        err.contains("every 5 s"),
        "the raised interval is said: {err}"
    );
    let squeues = fake.programs().iter().filter(|p| *p == "squeue").count();
    assert!((2..=4).contains(&squeues), "{squeues} squeue calls");
}

/// `session launch` says why its job waits, as squeue's `%r` names it, and says it again
/// when the reason changes.
#[test]
fn session_launch_progress_names_the_pending_reason() {
    let fake = Fake::new();
    let config = fake.dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[targets.T]\npartition = \"debug\"\naccount = \"dev\"\nqos = \"normal\"\n\
         time = \"01:00:00\"\nconfined = true\n\n[mirrors.sample]\n",
    )
    .unwrap();
    let pending = |reason: &str| {
        format!("4242|4242|PENDING|debug|dev|normal|u|1|1||1:00:00|1:00:00|N/A|N/A|{reason}|dispatch-sample\n")
    };
    fake.scenario(json!({
        "squeue": [
            // Before the submit nothing; after it, the launch's own held job (sbatch --hold).
            // (Named dispatch's way, and asked for beside sucoder's name: no prefix configured.)
            {"match": ["--me", "--name=dispatch-sample,sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=dispatch-sample,sucoder-sample"], "stdout": pending("JobHeldUser")},
            {"match": ["--jobs=4242"], "times": 1, "stdout": pending("Priority")},
            {"match": ["--jobs=4242"], "stdout": pending("QOSMaxJobsPerUserLimit")},
        ],
        "sbatch": [{"stdout": "4242\n"}],
    }));
    let out = fake
        .command(&[
            "--config",
            config.to_str().unwrap(),
            "session",
            "launch",
            "sample",
            "-T",
            "T",
            "--detached",
            "--wait",
            "2",
        ])
        .env("XDG_CACHE_HOME", fake.dir.path().join("cache"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("is PENDING (Priority)"), "{err}");
    assert!(err.contains("is PENDING (QOSMaxJobsPerUserLimit)"), "{err}");
}

/// On a terminal (`script` gives it one) every look clears the screen and redraws it whole;
/// Ctrl-C (SIGINT, here from `timeout`) ends it with success.
#[test]
fn watch_on_a_terminal_clears_and_redraws() {
    let fake = Fake::new();
    attach(&fake, "p", 901);
    let inner = format!(
        "timeout --preserve-status -s INT 3 {} --state-dir {} pool status --watch 1",
        env!("CARGO_BIN_EXE_dispatch"),
        fake.state().display()
    );
    let out = std::process::Command::new("script")
        .args(["-q", "-e", "-c", &inner, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) gives the command a terminal");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text:?}");
    let redraws = text.matches("\x1b[H\x1b[2J").count();
    assert!(redraws >= 2, "{redraws} redraws: {text:?}");
    assert!(text.contains("every 1 s: dispatch pool status"), "{text:?}");
    assert_eq!(text.matches("POOL  OWNER  ").count(), redraws, "{text:?}");
}
