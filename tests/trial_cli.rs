//! Acceptance trials through the binary, against the fake Slurm: who may join, when a trial
//! may pass, and that a verdict is never relabelled. (A trial that passes on real evidence is
//! in `tests/worker_node.rs`.)

mod fake_cli;

use fake_cli::Fake;
use serde_json::{json, Value};

fn ok(fake: &Fake, args: &[&str]) -> Value {
    let (code, out, err) = fake.run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn refused(fake: &Fake, args: &[&str], why: &str) {
    let before = fake.kinds();
    let (code, _, err) = fake.run(args);
    assert_eq!(code, 3, "{args:?} should be refused: {err}");
    assert!(err.contains(why), "{args:?}: {err}");
    assert_eq!(fake.kinds(), before, "{args:?} journaled something");
}

fn submit<'a>(trial: &'a str, name: &'a str) -> Vec<&'a str> {
    vec![
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", name, "--trial", trial,
        "--json", "--", "true",
    ]
}

#[test]
fn a_trial_is_judged_once_and_passes_only_on_evidence() {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "51\n"}, {"stdout": "52\n"}]}));
    assert_eq!(
        ok(&fake, &["trials", "--json"]),
        json!({"trials": []}),
        "no journal yet: no trials"
    );
    ok(&fake, &["journal", "init", "--json"]);

    refused(&fake, &submit("t1", "w0"), "no trial \"t1\"");
    assert!(fake.calls().is_empty(), "sbatch ran for a refused join");

    let t = ok(
        &fake,
        &[
            "trial", "open", "t1", "--pin", "78f43ad", "--note", "native", "--json",
        ],
    );
    assert_eq!(t["trial"], "t1");
    assert_eq!(t["pin"], "78f43ad");
    assert!(t["verdict"].is_null());
    refused(&fake, &["trial", "open", "t1"], "already exists");
    let long = "x".repeat(5000);
    let (code, _, err) = fake.run(&["trial", "open", "t9", "--note", &long]);
    assert_eq!(code, 2, "an overlong note is a usage error: {err}");
    assert!(err.contains("at most 4096"), "{err}");
    refused(
        &fake,
        &["trial", "verdict", "t1", "passed", "--reason", "r"],
        "no workers",
    );
    refused(
        &fake,
        &["trial", "open", "t2", "--follows", "nope"],
        "no trial \"nope\"",
    );

    let w = ok(&fake, &submit("t1", "w1"));
    let sid = w["submission_id"].as_str().unwrap().to_owned();
    let kinds = fake.kinds();
    let intent = kinds.iter().position(|k| k == "JobSubmitIntent").unwrap();
    assert_eq!(kinds[intent + 1], "TrialWorkerJoined", "{kinds:?}");

    // The worker's job is only queued: nothing proves it ended, so the trial cannot pass.
    refused(
        &fake,
        &["trial", "verdict", "t1", "passed", "--reason", "all good"],
        "worker w1 is queued",
    );
    let judged = ok(
        &fake,
        &[
            "trial",
            "verdict",
            "t1",
            "failed",
            "--reason",
            "the payload hung",
            "--json",
        ],
    );
    assert_eq!(judged["verdict"]["verdict"], "failed");
    assert_eq!(judged["verdict"]["reason"], "the payload hung");
    let evidence = &judged["verdict"]["evidence"][0];
    assert_eq!(evidence["submission_id"], sid.as_str());
    assert_eq!(evidence["state"], "queued");
    assert!(evidence["manifest_sha256"].is_null());

    for verdict in ["passed", "failed"] {
        refused(
            &fake,
            &[
                "trial",
                "verdict",
                "t1",
                verdict,
                "--reason",
                "second thoughts",
            ],
            "never relabelled",
        );
    }
    refused(&fake, &submit("t1", "w2"), "was judged failed");

    // A follow-on is a new trial; the failed one stays failed.
    ok(&fake, &["trial", "open", "t2", "--follows", "t1", "--json"]);
    ok(&fake, &submit("t2", "w2"));
    let all = ok(&fake, &["trials", "--json"]);
    let trials = all["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2);
    assert_eq!(trials[0]["verdict"]["verdict"], "failed");
    assert_eq!(trials[1]["follows"], "t1");
    assert_eq!(trials[1]["workers"][0]["worker"], "w2");
    assert!(trials[1]["verdict"].is_null());
    let shown = ok(&fake, &["trial", "show", "t1", "--json"]);
    assert_eq!(ok(&fake, &["inspect", "--trial", "t1", "--json"]), shown);
    assert_eq!(shown["inspected"][0]["worker"], "w1");
    assert!(
        shown["inspected"][0]["timeline"].as_array().unwrap().len() >= 2,
        "{shown}"
    );

    let (code, out, _) = fake.run(&["audit", "--json"]);
    assert_eq!(code, 0, "{out}");
}
