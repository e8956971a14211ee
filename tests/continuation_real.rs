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

use real_cluster::{dispatch, json, require_cluster};

fn events(state: &Path) -> Vec<serde_json::Value> {
    let r = dispatch(state, &["journal", "dump", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout.lines().map(json).collect()
}

/// The payload of the continuation test: counts in its native state every 0.1 s; on SIGTERM
/// saves the count, appends what this generation counted to `counted`, and declares a
/// checkpoint.
const COUNTER: &str = r#"f="$DISPATCH_STATE_DIR/count"
n=$(cat "$f" 2>/dev/null || echo 0)
start=$n
trap 'echo $n > "$f"; echo $((n - start)) >> "$DISPATCH_STATE_DIR/counted"; touch "$DISPATCH_CHECKPOINT"; exit 0' TERM
while :; do n=$((n + 1)); sleep 0.1; done"#;

/// Issue 37 on the real cluster: a counter submitted with `--time 2 --continue 2` runs as three
/// jobs, each submitted only after the last was proven over, each resuming from the last's
/// checkpoint, and the final count is the sum of what each generation counted.
#[test]
fn a_counter_continued_across_three_jobs_counts_everything_once() {
    let _cluster = require_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let worker = format!("counter-{}", std::process::id());
    let args = [
        "submit",
        "--cpus",
        "1",
        "--mem",
        "100M",
        "--time",
        "2",
        "--continue",
        "2",
        "--publication-timeout",
        "5",
        "--native-state-budget",
        "5",
        "--cleanup-budget",
        "5",
        "--grace",
        "5",
        "--name",
        &worker,
        "--json",
        "--",
        "sh",
        "-c",
        COUNTER,
    ];
    let r = dispatch(&state, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // reconcile proves each job over and continues it; three generations take about 6 min.
    let deadline = Instant::now() + Duration::from_secs(12 * 60);
    let last = loop {
        let r = dispatch(&state, &["reconcile", "--json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let report = json(&r.stdout);
        for c in report["continued"].as_array().into_iter().flatten() {
            assert_ne!(c["outcome"], "refused", "{report}");
        }
        let evs = events(&state);
        let continued: Vec<&serde_json::Value> = evs
            .iter()
            .filter(|e| e["kind"] == "WorkerContinued")
            .collect();
        let ended = evs.iter().filter(|e| e["kind"] == "JobTerminal").count();
        if continued.len() == 2 && ended == 3 {
            break continued[1]["event"]["submission_id"]
                .as_str()
                .unwrap()
                .to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "not three generations in time: {evs:?}"
        );
        std::thread::sleep(Duration::from_secs(5));
    };
    let evs = events(&state);
    // Each successor's receipt comes after its predecessor's proven end.
    let seq_of = |kind: &str, id: &str| {
        evs.iter()
            .find(|e| e["kind"] == kind && e["event"]["submission_id"] == id)
            .unwrap_or_else(|| panic!("{kind} of {id}"))["seq"]
            .as_u64()
            .unwrap()
    };
    for (i, c) in evs
        .iter()
        .filter(|e| e["kind"] == "WorkerContinued")
        .enumerate()
    {
        let c = &c["event"];
        assert_eq!(c["generation"], i + 2, "{c}");
        assert_eq!(c["cause"], "time-limit", "{c}");
        assert_eq!(c["from_crash_class"], false, "{c}");
        let (pred, succ) = (
            c["predecessor"].as_str().unwrap(),
            c["submission_id"].as_str().unwrap(),
        );
        assert!(
            seq_of("JobTerminal", pred) < seq_of("JobSubmitIntent", succ),
            "{c}"
        );
    }
    // Nothing lost, nothing counted twice: the last state's count is the sum of the counts.
    let last: uuid::Uuid = last.parse().unwrap();
    let dirs = dispatch::worker::dirs::WorkerDirs::for_job(&state.join("jobs"), last);
    let count: u64 = std::fs::read_to_string(dirs.state.join("count"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let counted: Vec<u64> = std::fs::read_to_string(dirs.state.join("counted"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counted.len(), 3, "{counted:?}");
    assert!(counted.iter().all(|c| *c > 0), "{counted:?}");
    assert_eq!(count, counted.iter().sum::<u64>(), "{counted:?}");
    // The audit checks the lineage too: one generation live at a time, within N, each
    // resumed from the publication the one before recorded (both worker journals agree).
    let audit = dispatch(&state, &["audit", "--json"]);
    assert_eq!(audit.code, 0, "{}{}", audit.stdout, audit.stderr);
    // The report's timeline shows the chain as one worker, a segment per generation.
    let report = dispatch(&state, &["report", "--worker", &worker, "--json"]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    let report = json(&report.stdout);
    let rows = report["chains"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{report}");
    assert_eq!(
        rows[0]["generations"].as_array().unwrap().len(),
        3,
        "{report}"
    );
    let ended: Vec<&str> = report["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["ended_by"].as_str())
        .collect();
    assert_eq!(ended.len(), 2, "{report}");
}
