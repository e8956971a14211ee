//! `dispatch report` on a trial run on the real dev cluster: the workers' own journals feed the
//! timeline (the payload's start and exit, the early-shutdown deadline the supervisor recorded,
//! the publication) and the evidence table (outcome, manifest SHA-256, published directory,
//! the worker journal heads the verdict rests on).

mod real_cluster;
mod support;

use real_cluster::{dispatch, json, require_cluster, Allocation};

#[test]
fn a_real_trial_reports_what_its_workers_own_journals_say() {
    let _cluster = require_cluster();
    let alloc = Allocation::salloc(
        "dispatch-report",
        &["-c", "2", "--mem", "1G", "--time", "10"],
    );
    let state = tempfile::tempdir().unwrap();
    let sd = state.path();
    let ok = |args: &[&str]| {
        let r = dispatch(sd, args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        r.stdout
    };
    ok(&["pool", "attach", "p", "--job", &alloc.id.to_string()]);
    ok(&["trial", "open", "t1"]);
    for (name, cmd) in [("w1", "echo hello"), ("w2", "sleep 60")] {
        ok(&[
            "pool", "submit", "p", "--cpus", "1", "--mem", "200M", "--name", name, "--trial", "t1",
            "--", "sh", "-c", cmd,
        ]);
    }
    // w1 ends on its own; w2 is stopped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let status = json(&ok(&["pool", "status", "--refresh", "--json"]));
        let w1 = status["pools"][0]["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["name"] == "w1")
            .cloned()
            .unwrap();
        if w1["state"] == "released" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "w1 never ended: {w1}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    ok(&["pool", "stop-worker", "p", "w2", "--grace", "2"]);
    ok(&["trial", "verdict", "t1", "failed", "--reason", "w2 stopped"]);
    let page = sd.join("t1.html");
    let r = json(&ok(&[
        "report",
        "--trial",
        "t1",
        "--json",
        "--html",
        page.to_str().unwrap(),
    ]));

    let w1 = &r["workers"][0];
    assert_eq!(w1["worker"], "w1");
    let marks: Vec<(&str, &str)> = w1["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["what"].as_str().unwrap(), m["source"].as_str().unwrap()))
        .collect();
    for what in [
        "submitted",
        "launched",
        "running",
        "exited",
        "published",
        "released",
    ] {
        assert!(marks.iter().any(|(w, _)| *w == what), "{what}: {marks:?}");
    }
    assert!(
        marks.iter().any(|(_, source)| *source == "worker"),
        "the worker's own journal drew nothing: {marks:?}"
    );
    assert_eq!(w1["shutdown_deadline_source"], "worker_journal", "{w1}");
    assert!(w1["shutdown_deadline_us"].as_i64() < w1["allocation_end_us"].as_i64());
    let w2_marks = r["workers"][1]["marks"].to_string();
    assert!(w2_marks.contains("stop_asked"), "{w2_marks}");

    let e1 = &r["evidence"][0];
    assert_eq!(e1["outcome"], "completed", "{e1}");
    let sha = e1["manifest_sha256"].as_str().unwrap();
    assert_eq!(sha.len(), 64);
    assert!(
        e1["published_dir"].as_str().unwrap().contains("w1-"),
        "{e1}"
    );
    assert_eq!(e1["worker_journal_head"].as_str().unwrap().len(), 64);
    assert!(r["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["source"] == "worker:w1" && e["kind"] == "Published"));
    assert_eq!(r["audit"]["status"], "ok", "{}", r["audit"]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(sha), "the page shows the manifest's SHA-256");
}
