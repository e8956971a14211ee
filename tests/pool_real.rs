//! Pools against the real single-node Slurm cluster (`tools/slurm-dev-cluster start`).
//! Never skipped: without a cluster these tests fail and say how to start one.

mod real_cluster;
mod support;

use std::time::{Duration, Instant};

use real_cluster::{cpus_in, dispatch, json, require_cluster, squeue_steps, Allocation};

/// The CPU set a worker printed as its first line of output.
fn cpu_set_of(state: &std::path::Path, pool: &str, submission_id: &str) -> String {
    let out = state
        .join("pools")
        .join(pool)
        .join("workers")
        .join(submission_id)
        .join("evidence/stdout");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.starts_with("Cpus_allowed_list:")) {
            return line["Cpus_allowed_list:".len()..].trim().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "worker never printed its CPU set to {}",
            out.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

const PRINT_CPUS_AND_SLEEP: &str = "grep Cpus_allowed_list /proc/self/status; exec sleep 300";

#[test]
fn a_pool_runs_workers_as_separate_steps_within_its_budget() {
    let _cluster = require_cluster();
    // Its first two CPU ids on distinct real CPUs: the two 1-CPU workers' steps get those, and
    // ids folding onto one real CPU (seen in CI: {0} and {0}) would make any two steps overlap.
    let alloc = real_cluster::salloc_on_distinct_cpus(
        "dispatch-pool-budget",
        &["-c", "4", "--mem", "4G", "--time", "20"],
        2,
    );
    let state = tempfile::tempdir().unwrap();
    let sd = state.path();

    let attached = dispatch(
        sd,
        &[
            "pool",
            "attach",
            "p",
            "--job",
            &alloc.id.to_string(),
            "--json",
        ],
    );
    assert_eq!(attached.code, 0, "{}", attached.stderr);
    let a = json(&attached.stdout);
    assert_eq!(a["pool"], "p");
    assert_eq!(a["allocation"]["job_id"], alloc.id);
    assert_eq!(a["allocation"]["cpus"], 4);
    assert_eq!(a["allocation"]["mem_mb"], 4096);
    assert_eq!(a["allocation"]["user"], "root");
    for key in [
        "node",
        "start_time",
        "end_time",
        "partition",
        "account",
        "qos",
    ] {
        assert!(
            a["allocation"][key].is_string(),
            "allocation.{key} missing: {a}"
        );
    }

    let submit = |name: &str, cpus: &str| {
        dispatch(
            sd,
            &[
                "pool",
                "submit",
                "p",
                "--cpus",
                cpus,
                "--mem",
                "1G",
                "--name",
                name,
                "--json",
                "--",
                "sh",
                "-c",
                PRINT_CPUS_AND_SLEEP,
            ],
        )
    };
    let w1 = submit("w1", "1");
    assert_eq!(w1.code, 0, "{}", w1.stderr);
    let w1 = json(&w1.stdout);
    let w2 = submit("w2", "1");
    assert_eq!(w2.code, 0, "{}", w2.stderr);
    let w2 = json(&w2.stdout);
    for w in [&w1, &w2] {
        assert_eq!(w["state"], "running");
        assert!(
            w["step_id"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{}.", alloc.id)),
            "{w}"
        );
    }
    assert_ne!(w1["step_id"], w2["step_id"]);

    // Two workers at once, as separate steps, on disjoint CPUs.
    let running = squeue_steps(alloc.id);
    assert!(
        running.contains(&"p.w1".to_owned()) && running.contains(&"p.w2".to_owned()),
        "{running:?}"
    );
    let c1 = cpus_in(&cpu_set_of(sd, "p", w1["submission_id"].as_str().unwrap()));
    let c2 = cpus_in(&cpu_set_of(sd, "p", w2["submission_id"].as_str().unwrap()));
    assert!(c1.is_disjoint(&c2), "CPU sets overlap: {c1:?} {c2:?}");

    // 2 of 4 CPUs are held: 3 more do not fit. Refused, and nothing was launched or recorded.
    let before = dispatch(sd, &["journal", "verify", "--json"]);
    let refused = submit("w3", "3");
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("no node with room"),
        "{}",
        refused.stderr
    );
    assert!(!squeue_steps(alloc.id).contains(&"p.w3".to_owned()));
    let after = dispatch(sd, &["journal", "verify", "--json"]);
    assert_eq!(
        json(&before.stdout)["last_seq"],
        json(&after.stdout)["last_seq"],
        "a refusal wrote events"
    );

    // Stopping w1 cancels only its step.
    let stopped = dispatch(
        sd,
        &["pool", "stop-worker", "p", "w1", "--grace", "2", "--json"],
    );
    assert_eq!(stopped.code, 0, "{}", stopped.stderr);
    let s = json(&stopped.stdout);
    assert_eq!(s["state"], "released");
    assert!(s["proof"].as_str().unwrap().contains("absent"), "{s}");
    let running = squeue_steps(alloc.id);
    assert!(!running.contains(&"p.w1".to_owned()), "{running:?}");
    assert!(
        running.contains(&"p.w2".to_owned()),
        "the other worker stopped too: {running:?}"
    );
    assert_eq!(
        real_cluster::job_state(alloc.id),
        "RUNNING",
        "the allocation was touched"
    );

    // Its budget came back: 3 CPUs fit now.
    let w3 = submit("w3", "3");
    assert_eq!(w3.code, 0, "{}", w3.stderr);

    let status = dispatch(sd, &["pool", "status", "--json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let st = json(&status.stdout);
    let p = &st["pools"][0];
    assert_eq!(p["pool"], "p");
    assert_eq!(p["capacity"]["cpus"], 4);
    assert_eq!(p["reserved"]["cpus"], 4);
    assert_eq!(p["reserved"]["mem_mb"], 2048);
    assert!(p["allocation"]["seconds_left"].as_i64().unwrap() > 0);
    let states: Vec<(String, String)> = p["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap().to_owned(),
                w["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        states.contains(&("w1".into(), "released".into())),
        "{states:?}"
    );
    assert!(
        states.contains(&("w2".into(), "running".into())),
        "{states:?}"
    );

    // Detach is refused while workers hold budget, and never cancels the allocation.
    let refused = dispatch(sd, &["pool", "detach", "p"]);
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    for w in ["w2", "w3"] {
        let r = dispatch(sd, &["pool", "stop-worker", "p", w, "--grace", "1"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let detached = dispatch(sd, &["pool", "detach", "p", "--json"]);
    assert_eq!(detached.code, 0, "{}", detached.stderr);
    assert_eq!(real_cluster::job_state(alloc.id), "RUNNING");
    let v = dispatch(sd, &["journal", "verify", "--json"]);
    assert_eq!(json(&v.stdout)["status"], "clean");
    let audit = dispatch(sd, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}", audit.stdout);
    assert_eq!(json(&audit.stdout)["rules"]["held"], 0);
}

#[test]
fn attach_refuses_another_users_job_and_a_finished_job() {
    let _cluster = require_cluster();
    let other = real_cluster::other_user();
    let theirs = Allocation::salloc_as(
        &other,
        "dispatch-pool-theirs",
        &["-c", "1", "--mem", "100M", "--time", "5"],
    );
    let state = tempfile::tempdir().unwrap();
    let r = dispatch(
        state.path(),
        &["pool", "attach", "p", "--job", &theirs.id.to_string()],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains(&other), "{}", r.stderr);

    let done = real_cluster::sbatch_and_wait("dispatch-pool-done", "true");
    let r = dispatch(
        state.path(),
        &["pool", "attach", "q", "--job", &done.to_string()],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("not RUNNING") || r.stderr.contains("unknown to Slurm"),
        "{}",
        r.stderr
    );

    // Nothing was recorded for either refusal.
    let dump = dispatch(state.path(), &["journal", "dump", "--json"]);
    assert!(!dump.stdout.contains("PoolAttached"), "{}", dump.stdout);
}

#[test]
fn publication_timeout_is_bounded_and_defaults_to_30() {
    let _cluster = require_cluster();
    let state = tempfile::tempdir().unwrap();
    for bad in ["0", "301", "abc", "-5"] {
        let r = dispatch(
            state.path(),
            &[
                "pool",
                "submit",
                "p",
                "--cpus",
                "1",
                "--mem",
                "100M",
                "--publication-timeout",
                bad,
                "--",
                "true",
            ],
        );
        assert_eq!(r.code, 2, "{bad}: {}", r.stderr);
        // Every refusal names the bounds, whatever is wrong with the value.
        assert!(
            r.stderr.contains("whole seconds from 1 to 300"),
            "{bad}: the bounds are not named: {}",
            r.stderr
        );
    }
    let alloc = Allocation::salloc(
        "dispatch-pool-pubtimeout",
        &["-c", "1", "--mem", "500M", "--time", "10"],
    );
    let sd = state.path();
    assert_eq!(
        dispatch(sd, &["pool", "attach", "p", "--job", &alloc.id.to_string()]).code,
        0
    );
    let r = dispatch(
        sd,
        &[
            "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "--name", "w", "--", "true",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let dump = dispatch(sd, &["journal", "dump", "--json"]);
    let intent = dump
        .stdout
        .lines()
        .map(json)
        .find(|e| e["kind"] == "WorkerSubmitIntent")
        .expect("a submission intent");
    assert_eq!(intent["event"]["publication_timeout_s"], 30);
}

#[test]
fn a_submitted_worker_owns_its_job_and_stopping_it_ends_the_job() {
    let _cluster = require_cluster();
    let state = tempfile::tempdir().unwrap();
    let sd = state.path();
    let name = format!("dispatch-submit-{}", std::process::id());
    let r = dispatch(
        sd,
        &[
            "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", &name, "--json",
            "--", "sleep", "300",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let job = json(&r.stdout)["job_id"].as_u64().unwrap() as u32;
    // Cancelled on the way out even if an assertion fails.
    let _guard = Allocation { id: job };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while real_cluster::job_state(job) != "RUNNING" {
        assert!(std::time::Instant::now() < deadline, "job {job} never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stopped = dispatch(sd, &["stop", &name, "--grace", "2", "--json"]);
    assert_eq!(stopped.code, 0, "{}", stopped.stderr);
    let s = json(&stopped.stdout);
    assert_eq!(s["state"], "released");
    assert_eq!(s["job_id"], job);
    assert!(
        !matches!(real_cluster::job_state(job).as_str(), "RUNNING" | "PENDING"),
        "job {job} still runs"
    );
    let dump = dispatch(sd, &["journal", "dump", "--json"]);
    let kinds: Vec<String> = dump
        .stdout
        .lines()
        .map(|l| json(l)["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "Genesis",
            "JobSubmitIntent",
            "JobNamed",
            "JobSubmitted",
            "JobStopIntent",
            "JobTerminal"
        ]
    );
}

/// Issue 11: `stop-worker --grace S` gives the payload S seconds between TERM and KILL, whatever
/// grace the worker was submitted with (its supervisor's own default used to win: KILL came
/// 10 s after TERM for a `--grace 15` stop). The payload here ignores TERM, so only the KILL
/// ends it, and the stop cannot prove the step over before it.
#[test]
fn a_stop_gives_the_payload_the_grace_the_stop_asked_for() {
    let _cluster = require_cluster();
    let alloc = Allocation::salloc(
        "dispatch-pool-grace",
        &["-c", "1", "--mem", "200M", "--time", "5"],
    );
    let state = tempfile::tempdir().unwrap();
    let sd = state.path();
    let attached = dispatch(sd, &["pool", "attach", "p", "--job", &alloc.id.to_string()]);
    assert_eq!(attached.code, 0, "{}", attached.stderr);
    let submitted = dispatch(
        sd,
        &[
            "pool",
            "submit",
            "p",
            "--name",
            "g",
            "--cpus",
            "1",
            "--mem",
            "100M",
            "--grace",
            "1",
            "--json",
            "--",
            "sh",
            "-c",
            "trap '' TERM; echo ready; sleep 60 & wait; sleep 60",
        ],
    );
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    let id = json(&submitted.stdout)["submission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let stdout = sd.join("pools/p/workers").join(&id).join("evidence/stdout");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&stdout)
        .unwrap_or_default()
        .contains("ready")
    {
        assert!(Instant::now() < deadline, "the payload never started");
        std::thread::sleep(Duration::from_millis(50));
    }

    let t0 = Instant::now();
    let stopped = dispatch(
        sd,
        &["pool", "stop-worker", "p", "g", "--grace", "4", "--json"],
    );
    let took = t0.elapsed();
    assert_eq!(stopped.code, 0, "{}", stopped.stderr);
    assert_eq!(json(&stopped.stdout)["state"], "released");
    let evidence = sd.join("pools/p/workers").join(&id).join("evidence");
    let r = dispatch::worker::report::read(&evidence)
        .unwrap()
        .expect("the worker's journal");
    let sigs: Vec<_> = r
        .signals
        .iter()
        .map(|s| (s.signal.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(sigs, vec![("TERM", "forwarded"), ("KILL", "grace")]);
    assert!(
        took >= Duration::from_millis(3_900),
        "the payload was killed before the stop's 4 s grace: the stop took {took:?}"
    );
    let audit = dispatch(sd, &["audit", "--json"]);
    assert_eq!(json(&audit.stdout)["rules"]["held"], 0, "{}", audit.stdout);
}

/// Issue 21 item 6: one allocation, one owning journal, marked in Slurm's own job comment
/// (`scontrol update … Comment=`, which the job's owner may set on 22.05 and 24.11 alike).
#[test]
fn one_allocation_has_one_owning_journal_marked_in_its_comment() {
    let _cluster = require_cluster();
    let alloc = Allocation::salloc(
        "dispatch-pool-holder",
        &["-c", "1", "--mem", "100M", "--time", "5"],
    );
    let job = alloc.id.to_string();
    real_cluster::set_job_comment(alloc.id, "the user's words");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let journal_of = |sd: &std::path::Path| {
        let dump = dispatch(sd, &["journal", "dump", "--json"]);
        json(dump.stdout.lines().next().unwrap())["event"]["journal_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    let r = dispatch(a.path(), &["pool", "attach", "p", "--job", &job, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let ja = journal_of(a.path());
    let comment = real_cluster::job_comment(alloc.id);
    assert!(
        comment.starts_with(&format!("the user's words dispatch-pool/{ja}/"))
            && comment.ends_with("/p"),
        "{comment}"
    );
    assert_eq!(
        json(&r.stdout)["mark"],
        comment["the user's words ".len()..]
    );

    // A second state directory is refused, told whose it is.
    let r = dispatch(b.path(), &["pool", "attach", "q", "--job", &job]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains(&ja) && r.stderr.contains("--steal"),
        "{}",
        r.stderr
    );

    // --steal takes it, recorded as an override; the robbed journal then starts nothing.
    let r = dispatch(
        b.path(),
        &[
            "pool",
            "attach",
            "q",
            "--job",
            &job,
            "--steal",
            "a's host is gone",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let jb = journal_of(b.path());
    assert!(real_cluster::job_comment(alloc.id).contains(&jb));
    let audit = json(&dispatch(b.path(), &["audit", "--json"]).stdout);
    assert_eq!(audit["rules"]["override_count"], 1, "{audit}");
    let r = dispatch(
        a.path(),
        &[
            "pool", "submit", "p", "--cpus", "1", "--mem", "50M", "--", "true",
        ],
    );
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(squeue_steps(alloc.id).is_empty());

    // Detaching leaves the user's words, and the allocation free for a plain attach.
    assert_eq!(dispatch(a.path(), &["pool", "detach", "p"]).code, 0);
    let r = dispatch(b.path(), &["pool", "detach", "q", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json(&r.stdout)["unmarked"], true);
    assert_eq!(real_cluster::job_comment(alloc.id), "the user's words");
    let r = dispatch(a.path(), &["pool", "attach", "p", "--job", &job]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for sd in [a.path(), b.path()] {
        assert_eq!(dispatch(sd, &["audit"]).code, 0);
    }
}
