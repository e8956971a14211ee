//! `dispatch forget`: the way out of what no proof can settle (the controller cannot answer
//! and never will), recorded as an operator decision that the audit lists, never as proof.

mod fake_cli;

use fake_cli::Fake;
use serde_json::{json, Value};

fn doc(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text:?}"))
}

/// A `dispatch submit` whose sbatch answered garbage: unknown, its budget and name held.
fn unknown_submit(fake: &Fake) {
    fake.scenario(json!({
        "sbatch": [{"stdout": "Submitted batch job probably\n"}],
        "squeue": [{"fixture": "notes-squeue-ctld-down"}],
        "sacct": [{"fixture": "notes-sacct-timeout"}],
    }));
    let (code, _, err) = fake.run(&[
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "g", "--", "true",
    ]);
    assert_eq!(code, 4, "{err}");
}

#[test]
fn an_unresolvable_submission_is_forgotten_by_decision_and_the_audit_says_so() {
    let fake = Fake::new();
    unknown_submit(&fake);
    // The controller never answers: reconcile cannot settle it.
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(doc(&out)["unknown"][0]["worker"], "g");

    let (code, out, _) = fake.run(&["--json", "forget", "g", "--reason", " "]);
    assert_eq!(code, 2, "a reason is required");
    assert_eq!(doc(&out)["error"]["exit_code"], 2);
    let (code, _, _) = fake.run(&["forget", "--reason", "x"]);
    assert_eq!(code, 2, "a worker or a session is required");

    fake.forget_calls();
    let (code, out, err) = fake.run(&[
        "--json",
        "forget",
        "g",
        "--reason",
        "the cluster was rebuilt; its accounting is gone",
    ]);
    assert_eq!(code, 0, "{err}");
    let r = doc(&out);
    assert_eq!(r["forgot"], "worker");
    assert_eq!(r["worker"], "g");
    assert_eq!(r["state"], "unknown");
    assert!(r["seq"].as_u64().unwrap() > 0, "{r}");
    assert!(
        fake.calls().is_empty(),
        "forget is offline: {:?}",
        fake.calls()
    );
    let last = fake.events().pop().unwrap();
    assert_eq!(last["kind"], "WorkerForgotten");
    assert_eq!(
        last["event"]["reason"],
        "the cluster was rebuilt; its accounting is gone"
    );

    // Nothing is unknown any more, the name is free, a second forget finds nothing.
    let (code, out, err) = fake.run(&["reconcile", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(doc(&out)["unknown"], json!([]), "{out}");
    let (code, _, err) = fake.run(&["forget", "g", "--reason", "again"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("nothing to forget"), "{err}");
    fake.scenario(json!({"sbatch": [{"stdout": "78\n"}]}));
    let (code, out, err) = fake.run(&[
        "--json", "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", "g", "--",
        "true",
    ]);
    assert_eq!(code, 0, "the name is free again: {err}");
    assert_eq!(doc(&out)["job_id"], 78);

    // The audit holds: no violation, and the override is listed as a decision, not proof.
    let (code, out, err) = fake.run(&["--json", "audit"]);
    assert_eq!(code, 0, "{err}");
    let a = doc(&out);
    assert_eq!(a["status"], "ok", "{a}");
    assert_eq!(a["rules"]["override_count"], 1, "{a}");
    let o = &a["rules"]["overrides"][0];
    assert_eq!(o["kind"], "WorkerForgotten");
    assert!(
        o["subject"].as_str().unwrap().starts_with("worker g ("),
        "{o}"
    );
    let (code, out, _) = fake.run(&["audit"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("operator overrides (decisions, not proof): 1"),
        "{out}"
    );
}

#[test]
fn a_session_whose_submission_cannot_be_resolved_is_forgotten_and_launch_is_free_again() {
    let fake = Fake::new();
    let config = fake.dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[targets.T]\npartition = \"debug\"\naccount = \"dev\"\nconfined = true\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let cache = fake.dir.path().join("cache");
    let session = |args: &[&str]| {
        let mut all = vec!["--config", config];
        all.extend_from_slice(args);
        let out = fake
            .command(&all)
            .env("XDG_CACHE_HOME", &cache)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The name probe finds nothing, then sbatch answers garbage: a job may exist.
    fake.scenario(json!({
        "squeue": [{"match": ["--me"], "stdout": ""}],
        "sbatch": [{"stdout": "Submitted batch job probably\n"}],
    }));
    let (code, _, err) = session(&["session", "launch", "m", "-T", "T", "--detached"]);
    assert_eq!(code, 4, "{err}");
    // The controller stops answering: the next launch asks again within its --wait, then
    // fails closed and never submits.
    fake.scenario(json!({
        "squeue": [{"fixture": "notes-squeue-ctld-down"}],
        "sbatch": [{"stdout": "Submitted batch job probably\n"}],
    }));
    let (code, _, err) = session(&[
        "session",
        "launch",
        "m",
        "-T",
        "T",
        "--detached",
        "--wait",
        "2",
    ]);
    assert_eq!(code, 4, "{err}");
    assert!(
        !fake.programs().contains(&"sbatch".to_owned()),
        "{:?}",
        fake.calls()
    );

    let (code, _, err) = session(&["forget", "--session", "m", "--reason", "r"]);
    assert_eq!(code, 2, "--session needs -T: {err}");
    let (code, out, err) = session(&[
        "--json",
        "forget",
        "--session",
        "m",
        "-T",
        "T",
        "--reason",
        "old cluster retired",
    ]);
    assert_eq!(code, 0, "{err}");
    let r = doc(&out);
    assert_eq!(r["forgot"], "session");
    assert_eq!(r["session"], json!({"mirror": "m", "target": "T"}));
    assert!(r["submission_id"].is_string(), "{r}");
    let (code, _, err) = session(&["forget", "--session", "m", "-T", "T", "--reason", "x"]);
    assert_eq!(code, 3, "{err}");

    // The record no longer blocks: once squeue answers again, the launch goes on to submit
    // (a name probe that fails blocks every launch, with a record or without).
    fake.scenario(json!({
        "squeue": [{"match": ["--me"], "stdout": ""}],
        "sbatch": [{"stdout": "Submitted batch job probably\n"}],
    }));
    fake.forget_calls();
    let (code, _, err) = session(&["session", "launch", "m", "-T", "T", "--detached"]);
    assert!(
        fake.programs().contains(&"sbatch".to_owned()),
        "{code} {err}"
    );
    let (code, out, _) = fake.run(&["--json", "audit"]);
    assert_eq!(code, 0);
    let a = doc(&out);
    assert_eq!(
        a["rules"]["overrides"][0]["kind"], "SessionForgotten",
        "{a}"
    );
    assert_eq!(a["rules"]["overrides"][0]["subject"], "session m--T");
}
