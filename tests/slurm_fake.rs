//! The driver against the scriptable fake Slurm (`tools/fake-slurm`): faults a real
//! controller does not produce on demand.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dispatch::slurm::{
    AcctQuery, ActionError, AllocRequest, Answer, BatchPayload, BatchRequest, CliConfig,
    CliScheduler, JobId, JobName, JobQuery, MemoryMb, Refusal, ScancelSaid, Scheduler, Signal,
    SlurmCommand, SlurmDuration, SlurmError, StepId, StepKind, StepRequest,
};
use serde_json::{json, Value};

struct Fake {
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fake_bin() -> PathBuf {
    manifest().join("tools/fake-slurm/bin")
}

impl Fake {
    fn new(scenario: Value) -> Fake {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::write(
            dir.join("scenario.json"),
            serde_json::to_vec(&scenario).unwrap(),
        )
        .unwrap();
        Fake {
            dir,
            _tmp: Some(tmp),
        }
    }

    /// Reuses a scenario directory made by another process (the detach helper).
    fn existing(dir: &Path) -> Fake {
        Fake {
            dir: dir.to_path_buf(),
            _tmp: None,
        }
    }

    fn config(&self, timeout: Duration) -> CliConfig {
        let mut path = OsString::from(fake_bin());
        path.push(":/usr/local/bin:/usr/bin:/bin");
        CliConfig {
            search_path: Some(path),
            env: vec![
                (
                    "FAKE_SLURM_SCENARIO".into(),
                    self.dir.join("scenario.json").into(),
                ),
                ("FAKE_SLURM_LOG".into(), self.dir.join("calls.jsonl").into()),
                (
                    "FAKE_SLURM_STATE".into(),
                    self.dir.join("state.json").into(),
                ),
            ],
            timeout,
            kill_grace: Duration::from_millis(500),
            ..CliConfig::default()
        }
    }

    fn scheduler(&self) -> CliScheduler {
        CliScheduler::new(self.config(Duration::from_secs(20)))
    }

    fn scheduler_with_timeout(&self, timeout: Duration) -> CliScheduler {
        CliScheduler::new(self.config(timeout))
    }

    /// Every recorded call: (command, argv).
    fn calls(&self) -> Vec<(String, Vec<String>)> {
        let text = std::fs::read_to_string(self.dir.join("calls.jsonl")).unwrap_or_default();
        text.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let argv = v["argv"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap().to_owned())
                    .collect();
                (v["cmd"].as_str().unwrap().to_owned(), argv)
            })
            .collect()
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn only_call(&self) -> (String, Vec<String>) {
        let calls = self.calls();
        assert_eq!(calls.len(), 1, "{calls:?}");
        calls.into_iter().next().unwrap()
    }
}

fn id(n: u32) -> JobId {
    JobId::new(n).unwrap()
}

fn name(s: &str) -> JobName {
    JobName::new(s).unwrap()
}

const ROW: &str = "42|42|RUNNING|debug|dev|normal|root|1|2|vm|9:58|10:00|2026-11-29T16:12:52|2026-11-29T16:22:52|None|sucoder-demo\n";

fn unknown<T: std::fmt::Debug>(a: Answer<T>) -> SlurmError {
    match a {
        Answer::Unknown(e) => e,
        other => panic!("expected Unknown, got {other:?}"),
    }
}

fn action_unknown<T: std::fmt::Debug>(r: Result<T, ActionError>) -> (SlurmError, Option<JobId>) {
    match r {
        Err(ActionError::Unknown { error, job_hint }) => (error, job_hint),
        other => panic!("expected ActionError::Unknown, got {other:?}"),
    }
}

#[tokio::test]
async fn timeout_is_unknown_never_gone() {
    let fake = Fake::new(json!({
        "squeue": [{"delay": 30, "stdout": ""}],
        "scontrol": [{"delay": 30, "stdout": ""}],
        "sacct": [{"delay": 30, "stdout": ""}],
        "scancel": [{"delay": 30}],
    }));
    let s = fake.scheduler_with_timeout(Duration::from_millis(1500));
    let t0 = Instant::now();
    let e = unknown(s.list_jobs(&JobQuery::ids(vec![id(42)])).await);
    assert!(e.is_timeout(), "{e}");
    // Timeout + grace + process start, with slack for a loaded 2-core machine.
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    assert!(unknown(s.show_job(id(42)).await).is_timeout());
    assert!(unknown(s.list_steps(id(42)).await).is_timeout());
    let since = chrono::NaiveDate::from_ymd_opt(2026, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    assert!(unknown(
        s.accounting(&AcctQuery {
            jobs: vec![id(42)],
            names: vec![],
            since
        })
        .await
    )
    .is_timeout());
    let (e, _) = action_unknown(s.cancel_job(id(42)).await);
    assert!(e.is_timeout());
}

#[tokio::test]
async fn sbatch_accepted_then_hung_is_unknown() {
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("accepted.jsonl");
    let fake = Fake::new(json!({"sbatch": [{"touch": marker, "hang": 30}]}));
    let s = fake.scheduler_with_timeout(Duration::from_millis(1500));
    let req = BatchRequest::new(name("sucoder-x"), BatchPayload::Wrap("sleep 300".into()));
    let (e, hint) = action_unknown(s.submit_batch(&req).await);
    assert!(e.is_timeout(), "{e}");
    assert_eq!(hint, None);
    // The fake recorded the job as accepted: "unknown" was the only honest answer.
    assert!(marker.exists());
}

#[tokio::test]
async fn garbage_is_unknown_with_raw_text() {
    let fake = Fake::new(json!({
        "squeue": [{"stdout": "this is not a row\n"}],
        "scontrol": [{"stdout": "Slurm says hello\n"}],
        "sacct": [{"stdout": "1|2|3\n"}],
        "sbatch": [{"stdout": "Submitted batch job 3\n"}],
        "salloc": [{"stderr": "salloc: something else\n"}],
    }));
    let s = fake.scheduler();
    match unknown(s.list_jobs(&JobQuery::ids(vec![id(1)])).await) {
        SlurmError::Unparsable { stdout, source, .. } => {
            assert_eq!(stdout, "this is not a row\n");
            assert_eq!(source.raw, "this is not a row");
        }
        e => panic!("{e}"),
    }
    match unknown(s.show_job(id(1)).await) {
        SlurmError::Unparsable { stdout, .. } => assert_eq!(stdout, "Slurm says hello\n"),
        e => panic!("{e}"),
    }
    let since = chrono::NaiveDate::from_ymd_opt(2026, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    match unknown(
        s.accounting(&AcctQuery {
            jobs: vec![id(1)],
            names: vec![],
            since,
        })
        .await,
    ) {
        SlurmError::Unparsable { stdout, .. } => assert_eq!(stdout, "1|2|3\n"),
        e => panic!("{e}"),
    }
    let req = BatchRequest::new(name("x"), BatchPayload::Wrap("true".into()));
    match action_unknown(s.submit_batch(&req).await).0 {
        SlurmError::Unparsable { stdout, .. } => assert_eq!(stdout, "Submitted batch job 3\n"),
        e => panic!("{e}"),
    }
    let (e, hint) = action_unknown(s.allocate(&AllocRequest::new(name("x"))).await);
    assert!(matches!(e, SlurmError::Unparsable { .. }), "{e}");
    assert_eq!(hint, None);
}

#[tokio::test]
async fn invalid_utf8_and_digits_are_unknown() {
    let fake = Fake::new(json!({
        // "4\xff2" and Arabic-Indic digits: neither is a job id.
        "sbatch": [{"stdout_b64": "NP8yCg==", "times": 1}, {"stdout": "٤٢\n"}],
    }));
    let s = fake.scheduler();
    let req = BatchRequest::new(name("x"), BatchPayload::Wrap("true".into()));
    assert!(matches!(
        action_unknown(s.submit_batch(&req).await).0,
        SlurmError::Unparsable { .. }
    ));
    assert!(matches!(
        action_unknown(s.submit_batch(&req).await).0,
        SlurmError::Unparsable { .. }
    ));
}

/// Issue 10, item 7: exit 0 with nothing is an answer without rows, never `Gone` (a lying or
/// misconfigured controller, the wrong cluster, answers that way too).
#[tokio::test]
async fn empty_squeue_is_an_answer_without_rows_not_gone() {
    let fake = Fake::new(json!({"squeue": [{"stdout": ""}], "scontrol": [{"stdout": ""}]}));
    let s = fake.scheduler();
    fn empty<T>(a: Answer<Vec<T>>) -> bool {
        matches!(a, Answer::Live(rows) if rows.is_empty())
    }
    assert!(empty(s.list_jobs(&JobQuery::ids(vec![id(42)])).await));
    let a = s.list_jobs(&JobQuery::ids(vec![id(42)])).await;
    assert!(matches!(a.job(id(42)), dispatch::slurm::Lookup::NotListed));
    assert!(empty(
        s.list_jobs(&JobQuery::ids(vec![id(42), id(43)])).await
    ));
    assert!(empty(
        s.list_jobs(&JobQuery::mine_named(name("sucoder-x"))).await
    ));
    assert!(empty(s.list_jobs(&JobQuery::mine()).await));
    assert!(empty(s.list_steps(id(42)).await));
    assert!(empty(s.show_job(id(42)).await));
}

#[tokio::test]
async fn invalid_job_id_is_gone_for_one_id_only() {
    let fake = Fake::new(json!({
        "squeue": [{"fixture": "notes-squeue-invalid-id"}],
        "scontrol": [{"fixture": "notes-scontrol-show-job-invalid-id"}],
    }));
    let s = fake.scheduler();
    assert!(s.list_jobs(&JobQuery::ids(vec![id(99999)])).await.is_gone());
    assert!(s.list_steps(id(99999)).await.is_gone());
    assert!(s.show_job(id(99999)).await.is_gone());
    // With two ids the message cannot say which one is unknown.
    let e = unknown(s.list_jobs(&JobQuery::ids(vec![id(1), id(99999)])).await);
    assert!(matches!(e, SlurmError::Failed { .. }), "{e}");
}

#[tokio::test]
async fn other_failures_are_unknown() {
    let fake = Fake::new(json!({
        "squeue": [
            {"match": ["--jobs=1"], "fixture": "notes-squeue-ctld-down"},
            {"match": ["--jobs=2"], "fixture": "notes-squeue-bad-id-text"},
            {"match": ["--jobs=3"], "exit": 1},
            {"match": ["--jobs=4"], "signal": 9},
            {"match": ["--steps"], "fixture": "notes-squeue-steps-format-error"},
        ],
        "scontrol": [{"fixture": "notes-scontrol-show-job-ctld-down"}],
        "sacct": [{"fixture": "notes-sacct-accounting-disabled"}],
        "sbatch": [{"fixture": "notes-sbatch-ctld-down"}],
    }));
    let s = fake.scheduler();
    for n in [1, 2, 3] {
        let e = unknown(s.list_jobs(&JobQuery::ids(vec![id(n)])).await);
        assert!(matches!(e, SlurmError::Failed { .. }), "{n}: {e}");
    }
    let e = unknown(s.list_jobs(&JobQuery::ids(vec![id(4)])).await);
    assert!(
        matches!(
            e,
            SlurmError::Failed {
                status: dispatch::slurm::ExitInfo::Signal(9),
                ..
            }
        ),
        "{e}"
    );
    // Exit 0 with "error" on stderr and literal %T in the rows (notes §3.2).
    let e = unknown(s.list_steps(id(9)).await);
    assert!(matches!(e, SlurmError::ErrorOnSuccess { .. }), "{e}");
    match unknown(s.show_job(id(1)).await) {
        SlurmError::Failed { stderr, .. } => assert!(stderr.contains("Unable to contact")),
        e => panic!("{e}"),
    }
    let since = chrono::NaiveDate::from_ymd_opt(2026, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    assert!(matches!(
        unknown(
            s.accounting(&AcctQuery {
                jobs: vec![id(1)],
                names: vec![],
                since
            })
            .await
        ),
        SlurmError::Failed { .. }
    ));
    let req = BatchRequest::new(name("x"), BatchPayload::Wrap("true".into()));
    assert!(matches!(
        action_unknown(s.submit_batch(&req).await).0,
        SlurmError::Failed { .. }
    ));
}

#[tokio::test]
async fn sacct_never_says_gone() {
    let fake = Fake::new(json!({"sacct": [{"stdout": ""}]}));
    let s = fake.scheduler();
    let since = chrono::NaiveDate::from_ymd_opt(2026, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    let e = unknown(
        s.accounting(&AcctQuery {
            jobs: vec![id(7)],
            names: vec![],
            since,
        })
        .await,
    );
    assert!(matches!(e, SlurmError::NotInAccounting { .. }), "{e}");
}

#[tokio::test]
async fn too_much_output_is_unknown() {
    let fake = Fake::new(json!({"squeue": [{"stdout": ROW, "repeat": 20000}]}));
    let mut config = fake.config(Duration::from_secs(20));
    config.max_output_bytes = 64 * 1024;
    let s = CliScheduler::new(config);
    let e = unknown(s.list_jobs(&JobQuery::mine()).await);
    assert!(
        matches!(e, SlurmError::OutputTooLarge { limit: 65536, .. }),
        "{e}"
    );
}

#[tokio::test]
async fn missing_program_is_unknown() {
    let fake = Fake::new(json!({}));
    let mut config = fake.config(Duration::from_secs(5));
    config.search_path = Some("/nonexistent-dir".into());
    let s = CliScheduler::new(config);
    assert!(matches!(
        unknown(s.list_jobs(&JobQuery::mine()).await),
        SlurmError::Spawn { .. }
    ));
    assert_eq!(
        s.call_counts().get(SlurmCommand::Squeue),
        1,
        "a failed spawn still counts"
    );
}

#[tokio::test]
async fn a_submitter_that_cannot_start_created_nothing() {
    let fake = Fake::new(json!({}));
    let mut config = fake.config(Duration::from_secs(5));
    config.search_path = Some("/nonexistent-dir".into());
    let s = CliScheduler::new(config);
    let batch = BatchRequest::new(name("x"), BatchPayload::Wrap("true".into()));
    let step = StepRequest::new(id(8), name("x"), 1, MemoryMb::new(10), vec!["true".into()]);
    for (command, result) in [
        (
            SlurmCommand::Sbatch,
            s.submit_batch(&batch).await.map(|_| ()),
        ),
        (
            SlurmCommand::Salloc,
            s.allocate(&AllocRequest::new(name("x"))).await.map(|_| ()),
        ),
        (SlurmCommand::Srun, s.launch_step(&step).await.map(|_| ())),
    ] {
        match result {
            Err(e @ ActionError::Refused(Refusal::NotStarted(SlurmError::Spawn { .. }))) => {
                assert!(e.nothing_happened());
                assert!(e.to_string().contains("nothing ran"), "{e}");
            }
            other => panic!("{command}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn recorded_refusals_are_definite_and_other_failures_unknown() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurm");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".exit").map(str::to_owned))
        .filter(|n| n.starts_with("real-sbatch-refused-") || n.starts_with("real-salloc-refused-"))
        .collect();
    names.sort();
    assert!(names.len() >= 12, "{names:?}");
    for n in names
        .iter()
        .map(String::as_str)
        .chain(["real-ctld-down-sbatch"])
    {
        let fake = Fake::new(json!({"sbatch": [{"fixture": n}], "salloc": [{"fixture": n}]}));
        let s = fake.scheduler();
        let result = if n.contains("salloc") {
            s.allocate(&AllocRequest::new(name("x"))).await.map(|_| ())
        } else {
            let batch = BatchRequest::new(name("x"), BatchPayload::Wrap("true".into()));
            s.submit_batch(&batch).await.map(|_| ())
        };
        match result {
            Err(ActionError::Refused(Refusal::Said { phrase, stderr, .. })) => {
                assert!(!n.contains("ctld-down"), "{n}: {phrase}");
                assert!(stderr.contains(phrase), "{n}");
            }
            Err(ActionError::Unknown { .. }) => assert!(n.contains("ctld-down"), "{n}"),
            other => panic!("{n}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn live_rows_and_lookup() {
    let fake = Fake::new(json!({"squeue": [{"stdout": ROW}]}));
    let s = fake.scheduler();
    let a = s.list_jobs(&JobQuery::ids(vec![id(42), id(43)])).await;
    let row = a.job(id(42)).live().unwrap().clone();
    assert_eq!(row.name, "sucoder-demo");
    assert_eq!(row.cpus, 2);
    assert_eq!(row.time_left, SlurmDuration::Finite(598));
    assert!(
        matches!(a.job(id(43)), dispatch::slurm::Lookup::NotListed),
        "answered without 43: not listed, which alone proves nothing"
    );
}

/// Each operation's exact argv, as the fake recorded it.
#[tokio::test]
async fn exact_argv_per_operation() {
    let fake = Fake::new(json!({
        "sbatch": [{"stdout": "77\n"}],
        "salloc": [{"stderr": "salloc: Granted job allocation 78\n"}],
        "squeue": [{"stdout": ""}],
        "scontrol": [{"stdout": ""}],
        "sacct": [{"stdout": ""}],
        "scancel": [{}],
    }));
    let s = fake.scheduler();
    let mut req = BatchRequest::new(name("sucoder-tok"), BatchPayload::Wrap("sleep 300".into()));
    req.placement.partition = Some("debug".into());
    req.placement.account = Some("dev".into());
    req.placement.qos = Some("normal".into());
    req.placement.time = Some(SlurmDuration::Finite(600));
    req.placement.cpus_per_task = Some(1);
    req.placement.mem = Some(MemoryMb::new(100));
    req.output = Some("/tmp/out.log".into());
    req.extra = vec!["--no-requeue".into()];
    assert_eq!(s.submit_batch(&req).await.unwrap().job_id, id(77));
    let mut alloc = AllocRequest::new(name("pool-a"));
    alloc.placement.cpus_per_task = Some(2);
    alloc.placement.mem = Some(MemoryMb::new(400));
    alloc.placement.time = Some(SlurmDuration::Finite(300));
    alloc.immediate_secs = Some(10);
    assert_eq!(s.allocate(&alloc).await.unwrap().job_id, id(78));
    let _ = s.list_jobs(&JobQuery::ids(vec![id(1), id(2)])).await;
    let _ = s
        .list_jobs(&JobQuery::mine_named(name("sucoder-tok")))
        .await;
    let _ = s.list_jobs(&JobQuery::mine()).await;
    let _ = s.list_steps(id(78)).await;
    let _ = s.show_job(id(78)).await;
    let since = chrono::NaiveDate::from_ymd_opt(2026, 11, 29)
        .unwrap()
        .and_hms_opt(16, 0, 0)
        .unwrap();
    let _ = s
        .accounting(&AcctQuery {
            jobs: vec![id(77), id(78)],
            names: vec![],
            since,
        })
        .await;
    let step = StepId::new(id(78), StepKind::Numbered(1));
    s.cancel_job(id(77)).await.unwrap();
    s.cancel_step(step).await.unwrap();
    s.signal_step(step, Signal::Term).await.unwrap();
    s.cancel_by_name(&name("sucoder-tok")).await.unwrap();

    let jf = format!("--format={}", dispatch::slurm::squeue::JOB_FORMAT);
    let sf = format!("--format={}", dispatch::slurm::squeue::STEP_FORMAT);
    let af = format!("--format={}", dispatch::slurm::sacct::ACCT_FORMAT);
    let expected: Vec<(&str, Vec<&str>)> = vec![
        (
            "sbatch",
            vec![
                "--parsable",
                "--job-name=sucoder-tok",
                "--partition=debug",
                "--account=dev",
                "--qos=normal",
                "--time=00:10:00",
                "--cpus-per-task=1",
                "--mem=100M",
                "--output=/tmp/out.log",
                "--no-requeue",
                "--wrap=sleep 300",
            ],
        ),
        (
            "salloc",
            vec![
                "--no-shell",
                "--job-name=pool-a",
                "--time=00:05:00",
                "--cpus-per-task=2",
                "--mem=400M",
                "--immediate=10",
            ],
        ),
        (
            "squeue",
            vec!["--noheader", &jf, "--states=all", "--jobs=1,2"],
        ),
        (
            "squeue",
            vec!["--noheader", &jf, "--me", "--name=sucoder-tok"],
        ),
        ("squeue", vec!["--noheader", &jf, "--me"]),
        ("squeue", vec!["--steps", "--noheader", &sf, "--jobs=78"]),
        (
            "scontrol",
            vec!["--oneliner", "--details", "show", "job", "78"],
        ),
        (
            "sacct",
            vec![
                "--parsable2",
                "--noheader",
                &af,
                "--starttime=2026-11-29T16:00:00",
                "--endtime=now",
                "--jobs=77,78",
            ],
        ),
        ("scancel", vec!["77"]),
        ("scancel", vec!["78.1"]),
        ("scancel", vec!["--signal=TERM", "78.1"]),
        ("scancel", vec!["--me", "--name=sucoder-tok"]),
    ];
    let calls = fake.calls();
    assert_eq!(calls.len(), expected.len(), "{calls:#?}");
    for ((cmd, argv), (ecmd, eargv)) in calls.iter().zip(&expected) {
        assert_eq!(cmd, ecmd);
        assert_eq!(argv, eargv, "{cmd}");
    }
    let counts = s.call_counts();
    assert_eq!(counts.get(SlurmCommand::Sbatch), 1);
    assert_eq!(counts.get(SlurmCommand::Salloc), 1);
    assert_eq!(counts.get(SlurmCommand::Squeue), 4);
    assert_eq!(counts.get(SlurmCommand::Scontrol), 1);
    assert_eq!(counts.get(SlurmCommand::Sacct), 1);
    assert_eq!(counts.get(SlurmCommand::Scancel), 4);
    assert_eq!(counts.get(SlurmCommand::Srun), 0);
    assert_eq!(counts.total(), 12);
}

const HOSTILE: &[&str] = &[
    "two words",
    "it's \"quoted\"",
    "semi;colon",
    "$(touch /tmp/dispatch-pwned)",
    "`id`",
    "pipe|inside",
    "ünïcødé ✓ 名前",
    "-looks-like-a-flag",
    "star * and ? glob",
    "back\\slash",
];

#[tokio::test]
async fn hostile_names_travel_as_one_argv_element() {
    let fake = Fake::new(json!({
        "sbatch": [{"stdout": "5\n"}],
        "squeue": [{"stdout": ""}],
        "scancel": [{}],
    }));
    let s = fake.scheduler();
    for n in HOSTILE {
        let jn = name(n);
        let req = BatchRequest::new(jn.clone(), BatchPayload::Wrap("true".into()));
        s.submit_batch(&req).await.unwrap();
        let _ = s.list_jobs(&JobQuery::mine_named(jn.clone())).await;
        s.cancel_by_name(&jn).await.unwrap();
    }
    let calls = fake.calls();
    assert_eq!(calls.len(), HOSTILE.len() * 3);
    for (i, n) in HOSTILE.iter().enumerate() {
        let (c, argv) = &calls[3 * i];
        assert_eq!(c, "sbatch");
        assert_eq!(argv[1], format!("--job-name={n}"));
        assert_eq!(argv.len(), 3);
        let (c, argv) = &calls[3 * i + 1];
        assert_eq!(c, "squeue");
        assert_eq!(argv.last().unwrap(), &format!("--name={n}"));
        let (c, argv) = &calls[3 * i + 2];
        assert_eq!(c, "scancel");
        assert_eq!(argv, &vec!["--me".to_owned(), format!("--name={n}")]);
    }
    assert!(!Path::new("/tmp/dispatch-pwned").exists());
}

#[tokio::test]
async fn names_that_cannot_travel_are_refused_before_any_call() {
    let fake = Fake::new(json!({"sbatch": [{"stdout": "5\n"}]}));
    let s = fake.scheduler();
    for bad in ["two\nlines", "tab\there", "cr\rhere", "a,b", ""] {
        assert!(JobName::new(bad).is_err(), "{bad:?}");
    }
    // A request can carry a bad value elsewhere too; it is refused with Invalid.
    let mut req = BatchRequest::new(name("ok"), BatchPayload::Wrap("true".into()));
    req.placement.partition = Some("debug\nbatch".into());
    assert!(matches!(
        s.submit_batch(&req).await,
        Err(ActionError::Invalid(_))
    ));
    assert!(fake.calls().is_empty(), "nothing reached the fake");
    assert_eq!(s.call_counts().total(), 0);
}

#[tokio::test]
async fn hostile_name_comes_back_whole_from_squeue() {
    let n = "pipe|inside $(x) ✓";
    let row = format!("42|42|RUNNING|debug|dev|normal|root|1|1|vm|9:58|10:00|N/A|N/A|None|{n}\n");
    let fake = Fake::new(json!({"squeue": [{"stdout": row}]}));
    let a = fake
        .scheduler()
        .list_jobs(&JobQuery::mine_named(name(n)))
        .await;
    assert_eq!(a.job(id(42)).live().unwrap().name, n);
}

#[tokio::test]
async fn salloc_outcomes() {
    let fake = Fake::new(json!({
        "salloc": [
            {"match": ["--job-name=granted"], "fixture": "notes-salloc-pending-then-granted"},
            {"match": ["--job-name=immediate"], "fixture": "notes-salloc-immediate-expired"},
            {"match": ["--job-name=hang"], "stderr": "salloc: Pending job allocation 104\n", "hang": 30},
            {"match": ["--job-name=nomem"], "fixture": "notes-salloc-memory-unsatisfiable"},
        ],
    }));
    let s = fake.scheduler_with_timeout(Duration::from_millis(1500));
    assert_eq!(
        s.allocate(&AllocRequest::new(name("granted")))
            .await
            .unwrap()
            .job_id,
        id(4)
    );
    let (e, hint) = action_unknown(s.allocate(&AllocRequest::new(name("immediate"))).await);
    assert!(matches!(e, SlurmError::Failed { .. }), "{e}");
    assert_eq!(hint, Some(id(103)), "salloc had queued job 103");
    let (e, hint) = action_unknown(s.allocate(&AllocRequest::new(name("hang"))).await);
    assert!(e.is_timeout(), "{e}");
    assert_eq!(
        hint,
        Some(id(104)),
        "the id printed before the timeout is kept"
    );
    // The controller's refusal, no job mentioned: definitely nothing was created.
    match s.allocate(&AllocRequest::new(name("nomem"))).await {
        Err(e @ ActionError::Refused(Refusal::Said { phrase, .. })) => {
            assert_eq!(phrase, "Memory specification can not be satisfied");
            assert!(e.nothing_happened());
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn cancel_reports_what_scancel_said() {
    let fake = Fake::new(json!({
        "scancel": [
            {"match": ["1"], "fixture": "notes-scancel-unknown-id-silent"},
            {"match": ["1.5"], "fixture": "notes-scancel-step-missing"},
            {"match": ["2"], "fixture": "notes-scancel-access-denied"},
            {"match": ["3"], "fixture": "notes-scancel-ctld-down"},
        ],
    }));
    let s = fake.scheduler();
    let r = s.cancel_job(id(1)).await.unwrap();
    assert_eq!(r.said, ScancelSaid::Accepted);
    let r = s
        .cancel_step(StepId::new(id(1), StepKind::Numbered(5)))
        .await
        .unwrap();
    assert_eq!(r.said, ScancelSaid::InvalidJobId);
    assert_eq!(r.status, dispatch::slurm::ExitInfo::Code(225));
    assert_eq!(
        s.cancel_job(id(2)).await.unwrap().said,
        ScancelSaid::AccessDenied
    );
    let r = s.cancel_job(id(3)).await.unwrap();
    assert_eq!(r.said, ScancelSaid::Other);
    assert!(r.stderr.contains("Unable to contact slurm controller"));
}

fn step_request(dir: &Path) -> StepRequest {
    let mut req = StepRequest::new(
        id(8),
        name("pool/w1"),
        1,
        MemoryMb::new(100),
        vec!["sleep".into(), "600".into()],
    );
    req.client_log = Some(dir.join("srun-client.log"));
    req
}

fn alive(pid: u32) -> bool {
    // A zombie is not alive: the process exited and waits to be reaped.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            !matches!(state, Some("Z") | Some("X"))
        }
        Err(_) => false,
    }
}

fn kill(pid: u32) {
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

#[tokio::test]
async fn launched_step_is_detached() {
    let fake = Fake::new(json!({"srun": [{"stderr": "srun: fake client up\n", "hang": 60}]}));
    let s = fake.scheduler();
    let req = step_request(&fake.dir);
    let pid = s.launch_step(&req).await.unwrap().srun_pid;
    struct Reap(u32);
    impl Drop for Reap {
        fn drop(&mut self) {
            kill(self.0);
        }
    }
    let _reap = Reap(pid);
    assert!(alive(pid));
    // Own session: no terminal, no signals aimed at our process group.
    let sid = unsafe { libc::getsid(pid as libc::pid_t) };
    assert_eq!(sid, pid as libc::pid_t);
    assert_ne!(sid, unsafe { libc::getsid(0) });
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap(),
        Path::new("/dev/null")
    );
    // argv recorded by the fake once it has started.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.calls().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (cmd, argv) = fake.only_call();
    assert_eq!(cmd, "srun");
    assert_eq!(
        argv,
        [
            "--jobid=8",
            "--verbose",
            "--overlap",
            "--job-name=pool/w1",
            "--ntasks=1",
            "--cpus-per-task=1",
            "--mem=100M",
            "--",
            "sleep",
            "600"
        ]
    );
    while !std::fs::read_to_string(fake.dir.join("srun-client.log"))
        .unwrap_or_default()
        .contains("fake client up")
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(std::fs::read_to_string(fake.dir.join("srun-client.log"))
        .unwrap()
        .contains("fake client up"));
    assert_eq!(s.call_counts().get(SlurmCommand::Srun), 1);
}

/// The re-executed test binary's output is shown only when it failed.
fn assert_helper_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "helper failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const HELPER_ENV: &str = "DISPATCH_FAKE_DETACH_HELPER_DIR";

/// In helper mode (env set) this launches a step and returns, ending the process; the
/// parent run then checks that the srun client survived its launcher.
#[tokio::test]
async fn launched_step_outlives_the_launcher() {
    if let Some(dir) = std::env::var_os(HELPER_ENV) {
        let fake = Fake::existing(Path::new(&dir));
        let pid = fake
            .scheduler()
            .launch_step(&step_request(&fake.dir))
            .await
            .unwrap()
            .srun_pid;
        std::fs::write(fake.file("pid"), pid.to_string()).unwrap();
        return;
    }
    let fake = Fake::new(json!({"srun": [{"hang": 60}]}));
    let helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "launched_step_outlives_the_launcher",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, &fake.dir)
        .output()
        .unwrap();
    assert_helper_ok(&helper);
    let pid: u32 = std::fs::read_to_string(fake.file("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let survived = alive(pid);
    kill(pid);
    assert!(survived, "srun client {pid} died with its launcher");
}
