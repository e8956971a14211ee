//! `--at SEQ|TIME` on `pool status`, `sessions`, `trials`, `inspect` and the `journal dump`
//! filters, through the binary against the fake Slurm: the state as it was, offline.

mod fake_cli;

use fake_cli::Fake;
use serde_json::{json, Value};

fn ok(fake: &Fake, args: &[&str]) -> Value {
    let (code, out, err) = fake.run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn submit(name: &str) -> Vec<&str> {
    vec![
        "submit", "--cpus", "1", "--mem", "100M", "--time", "10", "--name", name, "--trial", "t1",
        "--json", "--", "true",
    ]
}

/// A trial with one worker, judged: `--at` before the verdict shows it unjudged.
fn judged_trial() -> (Fake, u64) {
    let fake = Fake::new();
    fake.scenario(json!({"sbatch": [{"stdout": "51\n"}, {"stdout": "52\n"}]}));
    ok(&fake, &["trial", "open", "t1", "--json"]);
    ok(&fake, &submit("w1"));
    ok(&fake, &submit("w2"));
    let before_verdict = fake.kinds().len() as u64;
    ok(
        &fake,
        &[
            "trial", "verdict", "t1", "failed", "--reason", "hung", "--json",
        ],
    );
    fake.forget_calls();
    (fake, before_verdict)
}

#[test]
fn trials_and_inspect_at_a_seq_show_the_state_then() {
    let (fake, before) = judged_trial();
    let at = before.to_string();
    let then = ok(&fake, &["trials", "--json", "--at", &at]);
    assert_eq!(then["at"]["seq"], before);
    assert!(then["trials"][0]["verdict"].is_null(), "{then}");
    assert_eq!(then["trials"][0]["workers"].as_array().unwrap().len(), 2);
    let now = ok(&fake, &["trials", "--json"]);
    assert_eq!(now["trials"][0]["verdict"]["verdict"], "failed");
    assert!(now.get("at").is_none(), "no --at, no at key: {now}");

    // Right after w1's intent: w2 does not exist yet, and w1's timeline stops there.
    let kinds = fake.kinds();
    let intent = 1 + kinds.iter().position(|k| k == "JobSubmitIntent").unwrap() as u64;
    let w1 = ok(
        &fake,
        &["inspect", "w1", "--json", "--at", &intent.to_string()],
    );
    let timeline = w1["timeline"].as_array().unwrap();
    assert_eq!(timeline.last().unwrap()["seq"], intent, "{w1}");
    assert!(timeline.iter().all(|e| e["seq"].as_u64() <= Some(intent)));
    assert!(ok(&fake, &["inspect", "w1", "--json"])["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["seq"].as_u64() > Some(intent)));
    let (code, _, err) = fake.run(&["inspect", "w2", "--at", &intent.to_string()]);
    assert_eq!(code, 3, "w2 was not submitted yet: {err}");

    let shown = ok(&fake, &["inspect", "--trial", "t1", "--json", "--at", &at]);
    assert!(shown["verdict"].is_null(), "{shown}");
    assert_eq!(shown["at"]["seq"], before);
    let human = fake.run(&["trials", "--at", &at]).1;
    assert!(
        human.starts_with(&format!("as recorded after event {before} (")),
        "{human}"
    );
    assert!(
        fake.calls().is_empty(),
        "--at called Slurm: {:?}",
        fake.calls()
    );
}

#[test]
fn at_a_time_takes_every_documented_form() {
    let (fake, _) = judged_trial();
    let events = fake.events();
    let last_time = events.last().unwrap()["time"].as_str().unwrap().to_owned();
    let all = ok(&fake, &["trials", "--json", "--at", &last_time]);
    assert_eq!(all["at"]["seq"], events.len());
    assert_eq!(all["at"]["now"], last_time.as_str());
    // A local time long after the journal: everything, seen from then.
    let later = ok(&fake, &["trials", "--json", "--at", "2999-01-01 00:00"]);
    assert_eq!(later["at"]["seq"], events.len());
    let (code, _, err) = fake.run(&["trials", "--at", "2001-01-01T00:00:00Z"]);
    assert_eq!(code, 3, "before the journal began: {err}");
    assert!(err.contains("no event at or before"), "{err}");
    let (code, _, err) = fake.run(&["trials", "--at", "yesterday"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("RFC 3339"), "{err}");
}

#[test]
fn at_is_offline_and_refuses_refresh() {
    let (fake, before) = judged_trial();
    let (code, _, err) = fake.run(&["pool", "status", "--refresh", "--at", "3"]);
    assert_eq!(code, 2, "--refresh with --at is a usage error: {err}");
    let (code, _, err) = fake.run(&["pool", "status", "--at", "100000"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("no event 100000"), "{err}");
    let status = ok(&fake, &["pool", "status", "--json", "--at", "2"]);
    assert_eq!(status["pools"], json!([]));
    assert_eq!(status["at"]["seq"], 2);
    let sessions = ok(&fake, &["sessions", "--json", "--at", &before.to_string()]);
    assert_eq!(sessions["sessions"], json!([]));
    assert_eq!(sessions["at"]["seq"], before);
    assert!(
        fake.calls().is_empty(),
        "--at called Slurm: {:?}",
        fake.calls()
    );
}

#[test]
fn dump_filters_and_together() {
    let (fake, _) = judged_trial();
    let lines = |args: &[&str]| -> Vec<Value> {
        let mut all = vec!["journal", "dump", "--json"];
        all.extend_from_slice(args);
        let (code, out, err) = fake.run(&all);
        assert_eq!(code, 0, "{args:?}: {err}");
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let w1 = lines(&["--worker", "w1"]);
    let sid = w1[0]["event"]["submission_id"].as_str().unwrap().to_owned();
    assert!(w1.len() >= 3, "{w1:?}");
    assert!(w1
        .iter()
        .all(|e| e["event"]["submission_id"] == sid.as_str()));
    assert_eq!(
        lines(&["--worker", &sid]),
        w1,
        "by name or by submission id"
    );
    let joined = lines(&["--worker", "w1", "--kind", "TrialWorkerJoined"]);
    assert_eq!(joined.len(), 1);
    let two = lines(&["--kind", "TrialOpened", "--kind", "TrialJudged"]);
    assert_eq!(
        two.iter().map(|e| e["kind"].clone()).collect::<Vec<_>>(),
        [json!("TrialOpened"), json!("TrialJudged")]
    );
    let last = fake.events().last().unwrap()["time"]
        .as_str()
        .unwrap()
        .to_owned();
    let since = lines(&["--since", &last]);
    assert!(since
        .iter()
        .all(|e| e["time"].as_str() >= Some(last.as_str())));
    assert_eq!(since.last().unwrap()["kind"], "TrialJudged");
    assert!(lines(&["--until", "2001-01-01 00:00"]).is_empty());
    assert!(lines(&["--pool", "p"]).is_empty(), "no pool, no events");
    // Without --json: one readable line per event, short, and the same events.
    let (code, text, err) = fake.run(&["journal", "dump", "--worker", "w1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(text.lines().count(), w1.len(), "{text}");
    for (line, e) in text.lines().zip(&w1) {
        assert!(line.chars().count() < 400, "{line}");
        assert!(line.contains(e["kind"].as_str().unwrap()), "{line}");
        assert!(line.contains(&format!("submission_id={sid}")), "{line}");
        assert!(!line.contains("{\""), "not raw JSON: {line}");
    }
    for bad in [
        &["--kind", "Nope"][..],
        &["--since", "12"],
        &["--worker", "../x"],
    ] {
        let mut all = vec!["journal", "dump"];
        all.extend_from_slice(bad);
        let (code, _, err) = fake.run(&all);
        assert_eq!(code, 2, "{bad:?}: {err}");
    }
}
