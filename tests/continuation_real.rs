//! Issue 37 on the real dev cluster: a worker outlives its job. A payload that checkpoints at
//! its early-shutdown deadline is continued by `dispatch reconcile` as a new job, from its
//! verified publication and a copy of its native state, generation after generation. About
//! six minutes (three 2-minute jobs, Slurm's smallest `--time` that leaves a run after the
//! shutdown window): `tools/test` runs this binary in a shard of its own per Slurm version,
//! beside the others.

mod real_cluster;
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use real_cluster::{
    add_counter_source, assert_counted_chain, dispatch, json, published_subjects, require_cluster,
    COUNTER,
};

fn events(state: &Path) -> Vec<serde_json::Value> {
    let r = dispatch(state, &["journal", "dump", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout.lines().map(json).collect()
}

/// A payload that ignores SIGTERM: killed after the grace, it declares nothing.
const STUBBORN: &str = r#"trap '' TERM
echo "$DISPATCH_GENERATION" >> "$DISPATCH_STATE_DIR/runs"
while :; do sleep 0.1; done"#;

fn submit(state: &Path, name: &str, extra: &[&str], script: &str) {
    let mut args = vec![
        "submit", "--cpus", "1", "--mem", "100M", "--time", "2", "--name", name, "--json",
    ];
    args.extend_from_slice(&real_cluster::WORKER_BUDGETS);
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let r = dispatch(state, &args);
    assert_eq!(r.code, 0, "submit {name}: {}", r.stderr);
}

/// Every submission of worker `name`, first first.
fn submissions(evs: &[serde_json::Value], name: &str) -> Vec<String> {
    evs.iter()
        .filter(|e| e["kind"] == "JobSubmitIntent" && e["event"]["worker"] == name)
        .map(|e| e["event"]["submission_id"].as_str().unwrap().to_owned())
        .collect()
}

fn of_kind<'a>(
    evs: &'a [serde_json::Value],
    kind: &str,
    key: &str,
    id: &str,
) -> Vec<&'a serde_json::Value> {
    evs.iter()
        .filter(|e| e["kind"] == kind && e["event"][key] == id)
        .map(|e| &e["event"])
        .collect()
}

/// Issue 37 on the real cluster, four workers side by side, each job `--time 2`:
/// - a counter with `--continue 2` runs as three jobs, each submitted only after the last was
///   proven over, each resuming from the last's checkpoint: the final count is the sum of what
///   each generation counted, its checkout holds every generation's commit, `inspect` shows the
///   chain;
/// - a payload that ignores SIGTERM (killed after the grace) is not continued by default;
/// - with `--continue-crashed` it is, once (`--continue 1`), recorded as from a crash-class
///   state, and the chain stops at N;
/// - a worker a user stopped is never continued.
#[test]
fn continued_workers_count_everything_once_and_only_what_was_asked_is_continued() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let pid = std::process::id();
    let [counter, stubborn, crashed, stopped] =
        ["counter", "stubborn", "crashed", "stopped"].map(|w| format!("{w}-{pid}"));
    add_counter_source(&state, None, tmp.path());
    submit(
        &state,
        &counter,
        &["--continue", "2", "--source", "src"],
        COUNTER,
    );
    submit(&state, &stubborn, &["--continue", "1"], STUBBORN);
    submit(
        &state,
        &crashed,
        &["--continue", "1", "--continue-crashed"],
        STUBBORN,
    );
    submit(&state, &stopped, &["--continue", "3"], COUNTER);
    let r = dispatch(&state, &["stop", &stopped, "--grace", "2", "--json"]);
    assert_eq!(r.code, 0, "stop: {}{}", r.stdout, r.stderr);
    // reconcile proves each job over and continues it; three generations take about 6 min.
    let deadline = Instant::now() + Duration::from_secs(12 * 60);
    let evs = loop {
        let r = dispatch(&state, &["reconcile", "--json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let evs = events(&state);
        let ended = |name: &str| {
            submissions(&evs, name)
                .iter()
                .filter(|id| !of_kind(&evs, "JobTerminal", "submission_id", id).is_empty())
                .count()
        };
        let settled = |name: &str| {
            let ids = submissions(&evs, name);
            let last = ids.last().unwrap();
            !of_kind(&evs, "ContinuationRefused", "predecessor", last).is_empty()
        };
        if ended(&counter) == 3
            && ended(&crashed) == 2
            && ended(&stubborn) == 1
            && ended(&stopped) == 1
            && settled(&stubborn)
            && settled(&stopped)
        {
            break evs;
        }
        assert!(Instant::now() < deadline, "not settled in time: {evs:?}");
        std::thread::sleep(Duration::from_secs(5));
    };
    counter_chain(&state, &evs, &counter);
    // Ignoring SIGTERM is no checkpoint: refused, never continued.
    let ids = submissions(&evs, &stubborn);
    assert_eq!(ids.len(), 1, "{ids:?}");
    // Allowed crash-class states: continued once, said so, and the chain stops at N = 1.
    let ids = submissions(&evs, &crashed);
    assert_eq!(ids.len(), 2, "{ids:?}");
    let c = of_kind(&evs, "WorkerContinued", "predecessor", &ids[0]);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0]["from_crash_class"], true, "{c:?}");
    assert_eq!(c[0]["generation"], 2, "{c:?}");
    assert!(of_kind(&evs, "WorkerContinued", "predecessor", &ids[1]).is_empty());
    // Stopped by its user: never continued.
    let ids = submissions(&evs, &stopped);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let audit = dispatch(&state, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}{}", audit.stdout, audit.stderr);
}

/// The counter's three generations: each submitted after its predecessor's proven end, the
/// count whole, every generation's commit in the last checkout, the chain in `inspect`.
fn counter_chain(state: &Path, evs: &[serde_json::Value], counter: &str) {
    let ids = submissions(evs, counter);
    assert_eq!(ids.len(), 3, "{ids:?}");
    let seq_of = |kind: &str, id: &str| {
        evs.iter()
            .find(|e| e["kind"] == kind && e["event"]["submission_id"] == id)
            .unwrap_or_else(|| panic!("{kind} of {id}"))["seq"]
            .as_u64()
            .unwrap()
    };
    for (i, pair) in ids.windows(2).enumerate() {
        let c = of_kind(evs, "WorkerContinued", "predecessor", &pair[0]);
        assert_eq!(c.len(), 1, "{c:?}");
        let c = c[0];
        assert_eq!(c["submission_id"], pair[1].as_str(), "{c}");
        assert_eq!(c["generation"], i + 2, "{c}");
        assert_eq!(c["cause"], "time-limit", "{c}");
        assert_eq!(c["from_crash_class"], false, "{c}");
        assert!(
            seq_of("JobTerminal", &pair[0]) < seq_of("JobSubmitIntent", &pair[1]),
            "{c}"
        );
    }
    // Nothing lost, nothing counted twice; the chain in `inspect` and the report.
    let last: uuid::Uuid = ids[2].parse().unwrap();
    let dirs = dispatch::worker::dirs::WorkerDirs::for_job(&state.join("jobs"), last);
    assert_counted_chain(&|args| dispatch(state, args), counter, &dirs.state, 3);
    // The last publication's bundle carries every generation's commit on the pinned one.
    let published = std::fs::read_dir(state.join("jobs/published"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(ids[2].as_str()))
        .expect("the last generation's publication");
    let repo = state.parent().unwrap().join("repo");
    let log = published_subjects(&repo, &published);
    let subjects: Vec<&str> = log.lines().collect();
    assert_eq!(
        subjects,
        ["generation 3", "generation 2", "generation 1", "first"],
        "{log}"
    );
    // The audit checks the lineage too: one generation live at a time, within N, each
    // resumed from the publication the one before recorded (both worker journals agree).
    let audit = dispatch(state, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}{}", audit.stdout, audit.stderr);
    // The report's timeline shows the chain as one worker, a segment per generation; two of
    // them ended by their job's time limit.
    let report = dispatch(state, &["report", "--worker", counter, "--json"]);
    let report = json(&report.stdout);
    let ended: Vec<&str> = report["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["ended_by"].as_str())
        .collect();
    assert_eq!(ended.len(), 2, "{report}");
}
