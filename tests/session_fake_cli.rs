//! `dispatch session …` and `dispatch sessions` end to end: the real binary against the fake
//! Slurm executables (`tools/fake-slurm`), asserting the exact argv of every Slurm call and
//! their order from the fake's call log.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use support::scripted::{by_id, held_row, mine_listing, name_probe, release, row};

const T: (&str, &str, &str) = ("savio4_htc", "co_carleton", "carleton_htc4_normal");
const OTHER: (&str, &str, &str) = ("savio3", "fc_jevons", "normal");
const NAME: &str = "sucoder-sample";

/// The configured prefix of [`CONFIG`]: a configured `job_name_prefix` works alone, exactly as
/// before dispatch's own `dispatch-` became the default, so these tests pin that path's argv
/// (one name in every probe). The default's (`dispatch-` names, sucoder's adopted) are pinned
/// by the tests that take it out (`default_names`).
const PINNED_PREFIX: &str = "job_name_prefix = \"sucoder-\"\n";

const CONFIG: &str = r#"job_name_prefix = "sucoder-"

[targets.T]
partition = "savio4_htc"
account = "co_carleton"
qos = "carleton_htc4_normal"
time = "3-00:00:00"
confined = true

[targets.U]
partition = "savio3"
account = "fc_jevons"
qos = "normal"
time = "01:00:00"
confined = false

[mirrors.sample]
"#;

struct Fake {
    tmp: tempfile::TempDir,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// [`CONFIG`] without its `job_name_prefix`: the default names.
fn default_names() -> String {
    CONFIG.replace(PINNED_PREFIX, "")
}

impl Fake {
    fn new(scenario: Value) -> Fake {
        Fake::with_config(CONFIG, scenario)
    }

    fn with_config(config: &str, scenario: Value) -> Fake {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("config.toml"), config).unwrap();
        let f = Fake { tmp };
        f.scenario(scenario);
        f
    }

    /// Replace the scenario (and reset the use counts), keeping the log and the state.
    fn scenario(&self, scenario: Value) {
        std::fs::write(self.path("scenario.json"), scenario.to_string()).unwrap();
        let _ = std::fs::remove_file(self.path("counts.json"));
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn state(&self) -> PathBuf {
        self.path("state")
    }

    fn command(&self, args: &[&str]) -> Command {
        let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/fake-slurm/bin");
        let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
        c.arg("--state-dir")
            .arg(self.state())
            .arg("--config")
            .arg(self.path("config.toml"))
            .args(args)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("FAKE_SLURM_SCENARIO", self.path("scenario.json"))
            .env("FAKE_SLURM_LOG", self.path("calls.jsonl"))
            .env("FAKE_SLURM_STATE", self.path("counts.json"))
            .env("XDG_CACHE_HOME", self.path("cache"))
            .env_remove("DISPATCH_FAILPOINTS")
            .env_remove("DISPATCH_SLURM_TIMEOUT");
        c
    }

    fn run_with(&self, mut c: Command, stdin: &str) -> Run {
        use std::io::Write;
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_with(self.command(args), "")
    }

    /// Every Slurm call so far: the program, then its argv.
    fn calls(&self) -> Vec<Vec<String>> {
        std::fs::read_to_string(self.path("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let mut argv = vec![v["cmd"].as_str().unwrap().to_owned()];
                argv.extend(
                    v["argv"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|a| a.as_str().unwrap().to_owned()),
                );
                argv
            })
            .collect()
    }

    fn programs(&self) -> Vec<String> {
        self.calls().into_iter().map(|c| c[0].clone()).collect()
    }

    /// dispatch run by script(1) on a pty of its own: stdin, stdout and stderr are a terminal
    /// (all three arrive on our stdout); our stdin is what is typed there.
    fn in_pty(&self, args: &[&str]) -> Command {
        let inner = self.command(args);
        let line = std::iter::once(inner.get_program())
            .chain(inner.get_args())
            .map(|a| shell_word(&a.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ");
        let mut c = Command::new("script");
        c.args(["-qec", &line, "/dev/null"]);
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }

    fn clear_calls(&self) {
        let _ = std::fs::remove_file(self.path("calls.jsonl"));
    }
}

fn json_of(r: &Run) -> Value {
    serde_json::from_str(r.stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {:?} / {}", r.stdout, r.stderr))
}

const LAUNCH_T: &[&str] = &[
    "--json",
    "session",
    "launch",
    "sample",
    "-T",
    "T",
    "--detached",
];

fn running(id: u32, placement: (&str, &str, &str)) -> String {
    row(&id.to_string(), "RUNNING", "n0007", placement, NAME)
}

/// 11: a fresh confined launch: name probe, sbatch held, name probe (ours is the only job of
/// the target: nobody raced us), release, poll, exactly, in order; one JSON document with the
/// keys CLI.md gives.
#[test]
fn fresh_launch_argv_and_order() {
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(4242, T, NAME)},
            {"match": ["--jobs=4242"], "stdout": running(4242, T)},
        ],
        "sbatch": [{"stdout": "4242\n"}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json_of(&r);
    assert_eq!(
        j,
        json!({"mirror": "sample", "target": "T", "job_id": 4242, "action": "submitted",
               "node": "n0007", "state": "RUNNING"})
    );
    // Outside the state directory, so that losing the record does not kill a pending job.
    let files = f.path("cache/dispatch/sessions");
    let script = files.join("scripts/job-sample--T.sh");
    let log = files.join("logs/job-sample-%j.out");
    assert!(!f.state().join("sessions/logs").exists());
    let sbatch: Vec<String> = vec![
        "sbatch".to_owned(),
        "--parsable".into(),
        "--job-name=sucoder-sample".into(),
        "--partition=savio4_htc".into(),
        "--account=co_carleton".into(),
        "--qos=carleton_htc4_normal".into(),
        "--time=3-00:00:00".into(),
        format!("--output={}", log.display()),
        "--no-requeue".into(),
        "--hold".into(),
        script.to_string_lossy().into_owned(),
    ];
    // The same request tested first (a held job Slurm can never run would be accepted).
    let mut tested = sbatch.clone();
    tested.insert(1, "--test-only".into());
    assert_eq!(
        f.calls(),
        [
            name_probe(),
            tested,
            sbatch,
            name_probe(),
            release(4242),
            by_id(4242),
        ]
    );
}

/// 22 + the real-world issue 19: the whole state directory is lost; the next launch finds the
/// live job by name and adopts it. No sbatch. (Mutation check: disabling the name probe makes
/// this test fail.)
#[test]
fn lost_state_adopts_by_name() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(4242, T)}],
        "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "adopted");
    assert_eq!(json_of(&r)["job_id"], 4242);
    assert_eq!(f.calls(), [name_probe()]);
    assert!(!f.programs().contains(&"sbatch".to_owned()));
}

/// With no prefix configured, a live session job of sucoder (the tool sessions replace),
/// named `sucoder-<token>`, is found by the one name probe, which asks for dispatch's own name
/// beside it, and adopted: the existing tool's session is never doubled. No sbatch.
#[test]
fn default_names_adopt_sucoders_live_job() {
    let f = Fake::with_config(
        &default_names(),
        json!({
            "squeue": [{"match": ["--me", "--name=dispatch-sample,sucoder-sample"],
                        "stdout": running(4242, T)}],
            "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
        }),
    );
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "adopted");
    assert_eq!(json_of(&r)["job_id"], 4242);
    let mut probe = name_probe();
    *probe.last_mut().unwrap() = "--name=dispatch-sample,sucoder-sample".into();
    assert_eq!(f.calls(), [probe]);
    // `dispatch sessions` lists it under its token, beside dispatch's own names.
    f.scenario(json!({"squeue": [{"match": ["--me"], "stdout": running(4242, T)}]}));
    let r = f.run(&["--json", "sessions"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let listed = &json_of(&r)["targets"][0]["jobs"][0];
    assert_eq!(
        (&listed["job_id"], &listed["token"]),
        (&json!(4242), &json!("sample"))
    );
}

/// With no prefix configured, a new session job is named `dispatch-<token>`: every name probe
/// of the launch asks for it and sucoder's name in one listing, and the held job of its own
/// name is found and released.
#[test]
fn default_names_submit_a_dispatch_named_job() {
    let both = "--name=dispatch-sample,sucoder-sample";
    let f = Fake::with_config(
        &default_names(),
        json!({
            "squeue": [
                {"match": ["--me", both], "times": 1, "stdout": ""},
                {"match": ["--me", both], "stdout": held_row(4242, T, "dispatch-sample")},
                {"match": ["--jobs=4242"],
                 "stdout": row("4242", "RUNNING", "n0007", T, "dispatch-sample")},
            ],
            "sbatch": [{"stdout": "4242\n"}],
        }),
    );
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "submitted");
    let calls = f.calls();
    let sbatch: Vec<_> = calls.iter().filter(|c| c[0] == "sbatch").collect();
    assert_eq!(sbatch.len(), 2, "{calls:?}");
    assert!(sbatch
        .iter()
        .all(|c| c.contains(&"--job-name=dispatch-sample".to_owned())));
    let probes: Vec<_> = calls
        .iter()
        .filter(|c| c.iter().any(|a| a.starts_with("--name=")))
        .collect();
    assert_eq!(probes.len(), 2, "{calls:?}");
    assert!(
        probes.iter().all(|c| c.last().unwrap() == both),
        "{probes:?}"
    );
}

/// 24: a job of this name on another target is reported and not adopted: a second job is
/// submitted for this target. (Mutation check: adopting regardless of target fails here.)
#[test]
fn other_targets_job_is_not_adopted() {
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": running(4242, OTHER)},
            {"match": ["--me", "--name=sucoder-sample"],
             "stdout": running(4242, OTHER) + &held_row(5000, T, NAME)},
            {"match": ["--jobs=5000"], "stdout": running(5000, T)},
        ],
        "sbatch": [{"stdout": "5000\n"}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "submitted");
    assert_eq!(json_of(&r)["job_id"], 5000);
    assert!(
        r.stderr.contains("4242") && r.stderr.contains("different target (U)"),
        "{}",
        r.stderr
    );
    // The other target's older job does not contend: ours is released, not cancelled.
    assert_eq!(
        f.programs(),
        ["squeue", "sbatch", "sbatch", "squeue", "scontrol", "squeue"]
    );
    assert_eq!(f.calls()[4], release(5000));
}

/// 3: an unconfined (salloc) launch carries the same job name, and is held as a confined one
/// is: name probe, `salloc --hold` (which names its job and waits on in the background), name
/// probe (ours is the only job of the target), release, poll. Its salloc's messages go to a
/// log beside the confined jobs' logs. (Mutation check: dropping the salloc job name fails
/// here.)
#[test]
fn salloc_carries_the_job_name() {
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(77, OTHER, NAME)},
            {"match": ["--jobs=77"], "stdout": running(77, OTHER)},
        ],
        "salloc": [{"stderr": "salloc: Job is in held state, pending scheduler release\n\
                               salloc: Pending job allocation 77\n", "hang": 1}],
    }));
    let r = f.run(&[
        "--json",
        "session",
        "launch",
        "sample",
        "-T",
        "U",
        "--detached",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let salloc: Vec<String> = [
        "salloc",
        "--no-shell",
        "--job-name=sucoder-sample",
        "--partition=savio3",
        "--account=fc_jevons",
        "--qos=normal",
        "--time=01:00:00",
        "--immediate=630",
        "--hold",
    ]
    .map(String::from)
    .into();
    // salloc has no test mode: a held job Slurm can never run is caught by sbatch's.
    let tested: Vec<String> = [
        "sbatch",
        "--test-only",
        "--parsable",
        "--job-name=sucoder-sample",
        "--partition=savio3",
        "--account=fc_jevons",
        "--qos=normal",
        "--time=01:00:00",
        "--wrap=:",
    ]
    .map(String::from)
    .into();
    assert_eq!(
        f.calls(),
        [
            name_probe(),
            tested,
            salloc,
            name_probe(),
            release(77),
            by_id(77)
        ]
    );
    let log = f.path("cache/dispatch/sessions/logs/salloc-sample--U.log");
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("Pending job allocation 77"),
        "{}",
        log.display()
    );
    // And the next launch, with the state lost, finds the allocation by that name.
    std::fs::remove_dir_all(f.state()).unwrap();
    f.clear_calls();
    f.scenario(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(77, OTHER)}],
    }));
    let r = f.run(&[
        "--json",
        "session",
        "launch",
        "sample",
        "-T",
        "U",
        "--detached",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "adopted");
    assert_eq!(f.calls(), [name_probe()]);
}

/// 30 + DESIGN: sbatch accepted the job but its answer never came (timeout): exit 4, the
/// intent is recorded as "may exist", and the next launch adopts the job by name. Never a
/// second sbatch.
#[test]
fn accepted_then_silent_sbatch_is_resolved_by_name() {
    let f = Fake::new(json!({}));
    let accepted = f.path("accepted.jsonl");
    f.scenario(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": ""}],
        // The test-only answers; the submission itself is accepted and then says nothing.
        "sbatch": [
            {"match": ["--test-only"], "stderr": "sbatch: Job 3 to start at 2026-12-01T10:00:00 using 1 processors on nodes vm in partition savio4_htc\n"},
            {"touch": accepted.to_string_lossy(), "hang": 30},
        ],
    }));
    let mut c = f.command(LAUNCH_T);
    c.env("DISPATCH_SLURM_TIMEOUT", "1");
    let r = f.run_with(c, "");
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr.contains("A job MAY have been submitted"),
        "{}",
        r.stderr
    );
    assert!(accepted.exists(), "the fake accepted the job");
    f.clear_calls();
    f.scenario(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(9001, T)}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "adopted");
    assert_eq!(json_of(&r)["job_id"], 9001);
    assert_eq!(f.programs(), ["squeue"], "no second sbatch");
}

/// Crash between the submit intent and the recorded id (failpoint): the next launch finds the
/// job by name and adopts it.
#[test]
fn crash_after_submit_then_adopt() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": ""}],
        "sbatch": [{"stdout": "31337\n"}],
    }));
    let mut c = f.command(LAUNCH_T);
    c.env("DISPATCH_FAILPOINTS", "session-after-submit=abort");
    let r = f.run_with(c, "");
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("failpoint session-after-submit"),
        "{}",
        r.stderr
    );
    let sessions = f.run(&["--json", "sessions"]);
    let unknown = &json_of(&sessions)["unknown"];
    assert_eq!(unknown[0]["session"], "sample--T", "{unknown}");
    f.clear_calls();
    f.scenario(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(31337, T)}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "adopted");
    assert_eq!(json_of(&r)["job_id"], 31337);
    assert_eq!(f.programs(), ["squeue"]);
}

/// Run `session launch` on target T aborting at `point`, after an sbatch that made job 31337
/// (held): the launch died between the held submission and its release or cancel.
fn crash_holding_31337(f: &Fake, point: &str) {
    let mut c = f.command(LAUNCH_T);
    c.env("DISPATCH_FAILPOINTS", format!("{point}=abort"));
    let r = f.run_with(c, "");
    assert_ne!(r.code, 0, "{point}");
    assert!(
        r.stderr.contains(&format!("failpoint {point}")),
        "{}",
        r.stderr
    );
    f.clear_calls();
}

/// The scenario of a crashed launch's next command: its job 31337 is still held, job 31330
/// (another state directory's launch, older) runs if `racer`.
fn after_crash(racer: bool) -> Value {
    let mut listed = String::new();
    if racer {
        listed.push_str(&running(31330, T));
    }
    listed.push_str(&held_row(31337, T, NAME));
    json!({
        "squeue": [
            {"match": ["--jobs=31337"], "times": 1, "stdout": held_row(31337, T, NAME)},
            {"match": ["--jobs=31337"], "stdout": row("31337", "PENDING", "", T, NAME)},
            {"match": ["--jobs=31330"], "stdout": running(31330, T)},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": listed},
        ],
        "scancel": [{"argv": ["31337"], "stdout": ""}],
        "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
    })
}

fn first_launch_holds_31337() -> Value {
    json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(31337, T, NAME)},
        ],
        "sbatch": [{"stdout": "31337\n"}],
    })
}

/// Issue 10 item 12, crash safety: a launch died with its held job recorded and undecided
/// (or decided to yield, scancel not run), and meanwhile another state directory's launch
/// made the older job 31330. The next launch arbitrates the held job as the dead one would
/// have: 31337 is cancelled (never released: two jobs), 31330 adopted.
#[test]
fn crash_while_held_then_relaunch_yields_to_an_older_racer() {
    for point in ["session-after-job-recorded", "session-after-yield-decided"] {
        let f = Fake::new(first_launch_holds_31337());
        if point == "session-after-yield-decided" {
            // The dead launch saw 31330 already.
            f.scenario(json!({
                "squeue": [
                    {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
                    {"match": ["--me", "--name=sucoder-sample"],
                     "stdout": running(31330, T) + &held_row(31337, T, NAME)},
                ],
                "sbatch": [{"stdout": "31337\n"}],
            }));
        }
        crash_holding_31337(&f, point);
        f.scenario(after_crash(true));
        let r = f.run(LAUNCH_T);
        assert_eq!(r.code, 0, "{point}: {}", r.stderr);
        assert_eq!(json_of(&r)["action"], "adopted", "{point}");
        assert_eq!(json_of(&r)["job_id"], 31330, "{point}");
        let calls = f.calls();
        assert!(
            calls.contains(&vec!["scancel".into(), "31337".into()]),
            "{point}: {calls:?}"
        );
        assert!(!calls.contains(&release(31337)), "{point}: {calls:?}");
        assert!(!f.programs().contains(&"sbatch".to_owned()), "{point}");
    }
}

/// The same crash with no racer, or right before the release: the next launch releases the
/// held job and reuses it (never leaves it held, never submits another).
#[test]
fn crash_while_held_then_relaunch_releases_it() {
    for point in ["session-after-job-recorded", "session-after-hold-decided"] {
        let f = Fake::new(first_launch_holds_31337());
        crash_holding_31337(&f, point);
        f.scenario(after_crash(false));
        // Released, it stays PENDING: waited for within --wait like a new job (issue 21 item
        // 7), then the launch fails saying so; it is the session's job all the same.
        let mut launch = LAUNCH_T.to_vec();
        launch.extend(["--wait", "1"]);
        let r = f.run(&launch);
        assert_eq!(r.code, 1, "{point}: {}", r.stderr);
        let error = json_of(&r)["error"].clone();
        let message = error["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("31337") && message.contains("still PENDING"),
            "{point}: {message}"
        );
        assert_eq!(
            (&error["job_id"], &error["state"]),
            (&json!(31337), &json!("PENDING")),
            "{point}: {error}"
        );
        assert!(
            f.calls().contains(&release(31337)),
            "{point}: {:?}",
            f.calls()
        );
        assert!(!f.programs().contains(&"sbatch".to_owned()), "{point}");
        assert!(!f.programs().contains(&"scancel".to_owned()), "{point}");
    }
}

/// Issue 36 item 13: a launch that adopts a job still PENDING when its `--wait` runs out fails
/// (exit 1), and its error document names the job, its state and that it was adopted: the job
/// is the session's now, and a script must be able to tell which.
#[test]
fn an_adopted_job_still_pending_after_the_wait_is_named_by_the_error_document() {
    let pending = row("4242", "PENDING", "", T, NAME);
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "stdout": pending},
            {"match": ["--jobs=4242"], "stdout": pending},
        ],
        "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
    }));
    let mut launch = LAUNCH_T.to_vec();
    launch.extend(["--wait", "1"]);
    let r = f.run(&launch);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let error = &json_of(&r)["error"];
    assert_eq!(
        (
            &error["exit_code"],
            &error["job_id"],
            &error["state"],
            &error["action"]
        ),
        (
            &json!(1),
            &json!(4242),
            &json!("PENDING"),
            &json!("adopted")
        ),
        "{error}"
    );
    let message = error["message"].as_str().unwrap();
    for what in ["job 4242", "adopted", "still PENDING"] {
        assert!(message.contains(what), "{what}: {message}");
    }
    assert!(r.stderr.contains(message), "{}", r.stderr);
    assert!(!f.programs().contains(&"sbatch".to_owned()));
    assert!(!f.programs().contains(&"scancel".to_owned()));
}

/// An attach after such a crash settles the held job too (it would otherwise never run):
/// released, and the attach says it is pending.
#[test]
fn attach_after_a_crash_while_held_releases_the_job() {
    let f = Fake::new(first_launch_holds_31337());
    crash_holding_31337(&f, "session-after-job-recorded");
    f.scenario(after_crash(false));
    let r = f.run(&["session", "attach", "sample", "-T", "T"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("PENDING"), "{}", r.stderr);
    assert!(f.calls().contains(&release(31337)), "{:?}", f.calls());
}

/// The same crash on an unconfined target: its held salloc job is cancelled, never released
/// (released after its salloc died with the launch, Slurm kills it about 10 s later). The next
/// attach cancels it, proves it gone and says to launch; the next launch does the same and
/// then submits a new held salloc. Never `scontrol release` of the dead launch's job.
#[test]
fn a_crashed_unconfined_launchs_held_job_is_cancelled_not_released() {
    let launch_u = ["session", "launch", "sample", "-T", "U", "--detached"];
    let holds_77 = || {
        json!({
            "squeue": [
                {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
                {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(77, OTHER, NAME)},
            ],
            "salloc": [{"stderr": "salloc: Pending job allocation 77\n", "hang": 1}],
        })
    };
    let after = || {
        json!({
            "squeue": [
                {"match": ["--jobs=77"], "times": 1, "stdout": held_row(77, OTHER, NAME)},
                {"match": ["--jobs=77"], "stdout": row("77", "CANCELLED", "", OTHER, NAME)},
                {"match": ["--jobs=78"], "stdout": running(78, OTHER)},
                {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
                {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(78, OTHER, NAME)},
            ],
            "scancel": [{"argv": ["77"], "stdout": ""}],
            "salloc": [{"stderr": "salloc: Pending job allocation 78\n", "hang": 1}],
        })
    };
    for next in ["attach", "launch"] {
        let f = Fake::new(holds_77());
        let mut c = f.command(&launch_u);
        c.env("DISPATCH_FAILPOINTS", "session-after-job-recorded=abort");
        let r = f.run_with(c, "");
        assert!(
            r.stderr.contains("failpoint session-after-job-recorded"),
            "{}",
            r.stderr
        );
        f.clear_calls();
        f.scenario(after());
        let r = match next {
            "attach" => f.run(&["session", "attach", "sample", "-T", "U"]),
            _ => f.run(&[
                "--json",
                "session",
                "launch",
                "sample",
                "-T",
                "U",
                "--detached",
            ]),
        };
        let calls = f.calls();
        assert!(!calls.contains(&release(77)), "{next}: {calls:?}");
        assert!(
            calls
                .iter()
                .any(|c| c == &["scancel".to_owned(), "77".to_owned()]),
            "{next}: {calls:?}"
        );
        if next == "attach" {
            assert_eq!(r.code, 1, "{}", r.stderr);
            assert!(
                r.stderr.contains("dispatch session launch sample -T U"),
                "{}",
                r.stderr
            );
            assert!(!f.programs().contains(&"salloc".to_owned()), "{calls:?}");
        } else {
            assert_eq!(r.code, 0, "{}", r.stderr);
            let j = json_of(&r);
            assert_eq!(
                (j["action"].as_str(), j["job_id"].as_u64()),
                (Some("submitted"), Some(78))
            );
            assert!(calls.contains(&release(78)), "{calls:?}");
        }
    }
}

/// 47: release without --force asks, and an empty answer means No.
#[test]
fn release_prompt_defaults_to_no() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(4242, T)}],
    }));
    assert_eq!(f.run(LAUNCH_T).code, 0);
    f.clear_calls();
    // On a terminal (script(1) gives it a pty; what it reads there is our "\n").
    let r = f.run_with(f.in_pty(&["session", "release", "sample", "-T", "T"]), "\n");
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    let said = format!("{}{}", r.stdout, r.stderr);
    assert!(
        said.contains("Cancel Slurm job 4242 on n0007") && said.contains("[y/N]"),
        "{said}"
    );
    assert!(said.contains("Aborted."), "{said}");
    assert!(f.calls().is_empty(), "no Slurm call: {:?}", f.calls());
}

/// 44, 45: release --force: scancel, then proof by squeue; a failing scancel exits 1 and
/// keeps the record.
#[test]
fn release_force_cancels_and_proves() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(4242, T)}],
    }));
    assert_eq!(f.run(LAUNCH_T).code, 0);
    f.clear_calls();
    f.scenario(json!({
        "scancel": [{"times": 1, "stderr": "scancel: error: Kill job error on job id 4242: Access/permission denied\n", "exit": 1}],
    }));
    let r = f.run(&["session", "release", "sample", "-T", "T", "--force"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("scancel returned exit 1"), "{}", r.stderr);
    f.clear_calls();
    f.scenario(json!({
        "scancel": [{"stdout": ""}],
        "squeue": [
            {"match": ["--jobs=4242"], "stdout": row("4242", "CANCELLED", "n0007", T, NAME)},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": ""},
            // The cancelled job, listed with --states=all: it vouches for the empty name
            // listing (the controller's current view).
            {"match": ["--me", "--states=all"], "stdout": row("4242", "CANCELLED", "n0007", T, NAME)},
        ],
    }));
    let r = f.run(&[
        "--json", "session", "release", "sample", "-T", "T", "--force",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        json_of(&r),
        json!({"mirror": "sample", "target": "T", "action": "released", "job_id": 4242,
               "holders": [], "proof": "cancelled: squeue shows job 4242 CANCELLED"})
    );
    assert_eq!(
        f.calls(),
        [
            vec!["scancel".to_owned(), "4242".into()],
            by_id(4242),
            name_probe(),
            mine_listing()
        ]
    );
    let r = f.run(&["session", "release", "sample", "-T", "T", "--force"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("Nothing to release."), "{}", r.stdout);
}

/// 49: attach from a terminal execs `srun --jobid=J --overlap --pty CMD`.
#[test]
fn attach_execs_srun_with_a_pty() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(42, T)}],
    }));
    assert_eq!(f.run(LAUNCH_T).code, 0);
    f.clear_calls();
    f.scenario(json!({
        "squeue": [{"match": ["--jobs=42"], "stdout": running(42, T)}],
        "srun": [{"stdout": "attached\n"}],
    }));
    // Without a terminal: a clear refusal, no srun.
    let r = f.run(&[
        "session", "attach", "sample", "-T", "T", "--", "htop", "-d", "5",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("needs a terminal"), "{}", r.stderr);
    // With one (script(1) gives it a pty).
    let c = f.in_pty(&[
        "session", "attach", "sample", "-T", "T", "--", "htop", "-d", "5",
    ]);
    let r = f.run_with(c, "");
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(r.stdout.contains("attached"), "{}", r.stdout);
    let calls = f.calls();
    assert_eq!(
        calls.last().unwrap(),
        &[
            "srun",
            "--jobid=42",
            "--overlap",
            "--pty",
            "htop",
            "-d",
            "5"
        ]
    );
}

fn shell_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Bad input: an unknown target or a malformed config fails before any Slurm call (exit 2).
#[test]
fn bad_input_makes_no_slurm_call() {
    let f = Fake::new(json!({}));
    let r = f.run(&["session", "launch", "sample", "-T", "nope", "--detached"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("no target \"nope\""), "{}", r.stderr);
    std::fs::write(f.path("config.toml"), "[targets.x]\npartition = \"p\"\n").unwrap();
    let r = f.run(&["session", "launch", "sample", "-T", "x", "--detached"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("config.toml") && r.stderr.contains("account"),
        "{}",
        r.stderr
    );
    // A value Slurm would misread: the file, its line and its real key, before any call.
    std::fs::write(
        f.path("config.toml"),
        "[targets.x]\naccount = \"a\"\npartition = \"debug; touch /tmp/x\"\n",
    )
    .unwrap();
    let r = f.run(&["session", "launch", "sample", "-T", "x", "--detached"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("config.toml: line 3: targets.x.partition = "),
        "{}",
        r.stderr
    );
    assert!(f.calls().is_empty());
    assert!(!f.state().exists());
}

/// 57–66: the report as JSON, with one document and the keys CLI.md gives; a failed listing
/// exits 4 and never calls a session stale.
#[test]
fn sessions_report_json() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(42, T)}],
    }));
    assert_eq!(f.run(LAUNCH_T).code, 0);
    let listing = running(42, T)
        + &row("43", "RUNNING", "n1", T, "sucoder-ghost")
        + &row("44", "RUNNING", "n1", T, "someone-else");
    f.scenario(
        json!({"squeue": [{"match": ["--me"], "absent": ["--name=.*"], "stdout": listing}]}),
    );
    let r = f.run(&["--json", "sessions"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json_of(&r);
    for key in ["targets", "unmatched", "stale", "unknown", "errors"] {
        assert!(j.get(key).is_some(), "{key} missing: {j}");
    }
    let t = j["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["target"] == "T")
        .unwrap();
    let jobs = t["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    for key in [
        "job_id",
        "mirror",
        "state",
        "time_left",
        "node",
        "session",
        "flags",
    ] {
        assert!(jobs[0].get(key).is_some(), "{key} missing: {}", jobs[0]);
    }
    assert_eq!(jobs[0]["session"], "sample--T");
    assert_eq!(jobs[1]["flags"], json!(["no session record"]));
    f.scenario(json!({"squeue": [{"fixture": "notes-squeue-ctld-down"}]}));
    let r = f.run(&["--json", "sessions"]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    let j = json_of(&r);
    assert_eq!(j["stale"], json!([]));
    assert!(
        j["errors"][0].as_str().unwrap().contains("squeue failed"),
        "{j}"
    );
    assert_eq!(j["unknown"][0]["job_id"], 42);
    let human = f.run(&["sessions"]);
    assert!(
        human.stdout.contains("never called stale") && human.stdout.contains("! squeue failed"),
        "{}",
        human.stdout
    );
}

/// A launch whose job stays pending says so on stderr while it waits, and says nothing but
/// the error with `-q`; stdout holds only the one JSON document either way.
#[test]
fn a_long_wait_reports_progress_unless_quiet() {
    for quiet in [false, true] {
        let f = Fake::new(json!({
            "squeue": [
                {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(4242, T, NAME)},
                {"match": ["--jobs=4242"], "stdout": row("4242", "PENDING", "", T, NAME)},
            ],
            "sbatch": [{"stdout": "4242\n"}],
        }));
        let mut args = LAUNCH_T.to_vec();
        args.extend_from_slice(&["--wait", "1"]);
        if quiet {
            args.push("-q");
        }
        let r = f.run(&args);
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert!(r.stderr.contains("still PENDING"), "{}", r.stderr);
        let progress = r.stderr.contains("is PENDING; waited");
        assert_eq!(progress, !quiet, "quiet={quiet}: {}", r.stderr);
        assert_eq!(json_of(&r)["error"]["exit_code"], 1);
    }
}

/// The journal's events as `journal dump --json` shows them.
fn events(f: &Fake) -> Vec<Value> {
    let r = f.run(&["journal", "dump", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// sbatch (target T) and salloc (target U) refusals as the dev cluster printed them, with the
/// phrase that must be quoted. Account and QOS refusals are not reproducible there (no
/// association enforcement): Slurm's texts as sites report them.
const LAUNCH_REFUSALS: &[(&str, &str, &str)] = &[
    (
        "T",
        "real-sbatch-refused-partition",
        "Invalid partition name specified",
    ),
    (
        "T",
        "real-sbatch-refused-partition-case",
        "Invalid partition name specified",
    ),
    (
        "T",
        "real-sbatch-refused-memory",
        "Memory specification can not be satisfied",
    ),
    (
        "T",
        "real-sbatch-refused-feature",
        "Invalid feature specification",
    ),
    (
        "T",
        "real-sbatch-refused-node",
        "Invalid node name specified",
    ),
    (
        "T",
        "real-sbatch-refused-gres",
        "Invalid generic resource (gres) specification",
    ),
    (
        "T",
        "real-sbatch-refused-time-spec",
        "Invalid --time specification",
    ),
    (
        "U",
        "real-salloc-refused-partition",
        "Invalid partition name specified",
    ),
    (
        "U",
        "real-salloc-refused-partition-case",
        "Invalid partition name specified",
    ),
    (
        "U",
        "real-salloc-refused-memory",
        "Memory specification can not be satisfied",
    ),
    (
        "U",
        "real-salloc-refused-feature",
        "Invalid feature specification",
    ),
    (
        "U",
        "real-salloc-refused-node",
        "Invalid node name specified",
    ),
    (
        "U",
        "real-salloc-memory-unsatisfiable",
        "Memory specification can not be satisfied",
    ),
    (
        "U",
        "notes-salloc-memory-unsatisfiable",
        "Memory specification can not be satisfied",
    ),
];

fn launch_on(target: &str) -> [&str; 7] {
    [
        "--json",
        "session",
        "launch",
        "sample",
        "-T",
        target,
        "--detached",
    ]
}

fn submitter(target: &str) -> &'static str {
    if target == "T" {
        "sbatch"
    } else {
        "salloc"
    }
}

/// Exit 1 quoting the phrase; recorded as "no job exists"; the next launch submits at once.
fn assert_launch_refused(target: &str, response: Value, phrase: &str) {
    let program = submitter(target);
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me"], "stdout": ""}],
        "sacct": [{"stdout": ""}],
        program: [response],
    }));
    let r = f.run(&launch_on(target));
    assert_eq!(r.code, 1, "{phrase}: {}", r.stderr);
    assert!(
        r.stderr.contains(&format!("{phrase:?}")),
        "{phrase}: {}",
        r.stderr
    );
    assert!(r.stderr.contains("No job was created"), "{}", r.stderr);
    assert_eq!(json_of(&r)["error"]["exit_code"], 1);
    let failed = events(&f)
        .into_iter()
        .find(|e| e["kind"] == "SessionSubmitFailed")
        .expect("SessionSubmitFailed");
    assert_eq!(failed["event"]["may_exist"], false, "{phrase}: {failed}");
    assert!(
        failed["event"]["reason"].as_str().unwrap().contains(phrase),
        "{failed}"
    );
    let sessions = json_of(&f.run(&["--json", "sessions"]));
    assert_eq!(sessions["unknown"], json!([]), "{phrase}: {sessions}");
    // Nothing may exist, so nothing blocks the next launch: it submits.
    f.clear_calls();
    f.scenario(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(4242, T, NAME)},
            {"match": ["--me", "--states=all"], "stdout": ""},
            {"match": ["--jobs=4242"], "stdout": running(4242, T)},
        ],
        "sacct": [{"stdout": ""}],
        "sbatch": [{"stdout": "4242\n"}],
        "salloc": [{"stderr": "salloc: Granted job allocation 4242\n"}],
    }));
    let r = f.run(&launch_on(target));
    assert_eq!(r.code, 0, "{phrase}: {}", r.stderr);
    assert_eq!(json_of(&r)["action"], "submitted");
    assert!(
        f.programs().contains(&program.to_owned()),
        "{:?}",
        f.calls()
    );
}

#[test]
fn a_recognised_refusal_fails_the_launch_and_leaves_nothing_unknown() {
    for (target, fixture, phrase) in LAUNCH_REFUSALS {
        assert_launch_refused(target, json!({"fixture": fixture}), phrase);
    }
    for target in ["T", "U"] {
        let prefix = if target == "T" {
            "sbatch: error: Batch job submission failed: "
        } else {
            "salloc: error: Job submit/allocate failed: "
        };
        for phrase in [
            "Invalid account or account/partition combination specified",
            "Invalid qos specification",
        ] {
            let refusal = json!({"stderr": format!("{prefix}{phrase}\n"), "exit": 1});
            assert_launch_refused(target, refusal, phrase);
        }
    }
}

#[test]
fn an_unrecognised_launch_failure_stays_unknown() {
    for (target, response) in [
        (
            "T",
            json!({"stderr": "sbatch: error: Batch job submission failed: Something new\n", "exit": 1}),
        ),
        ("T", json!({"fixture": "real-ctld-down-sbatch"})),
        (
            "U",
            json!({"stderr": "salloc: error: Job submit/allocate failed: Something new\n", "exit": 1}),
        ),
    ] {
        let f = Fake::new(json!({
            "squeue": [{"match": ["--me"], "stdout": ""}],
            "sacct": [{"stdout": ""}],
            submitter(target): [response.clone()],
        }));
        let r = f.run(&launch_on(target));
        assert_eq!(r.code, 4, "{response}: {}", r.stderr);
        assert!(
            r.stderr.contains("A job MAY have been submitted"),
            "{}",
            r.stderr
        );
    }
}

#[test]
fn a_submitter_missing_from_path_fails_the_launch_definitely() {
    for target in ["T", "U"] {
        let f = Fake::new(json!({
            "squeue": [{"match": ["--me"], "stdout": ""}],
            "sacct": [{"stdout": ""}],
        }));
        let bin = f.path("bin");
        std::fs::create_dir(&bin).unwrap();
        let fake_bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/fake-slurm/bin");
        for p in ["squeue", "scancel", "scontrol", "sacct", "srun"] {
            std::os::unix::fs::symlink(fake_bin.join(p), bin.join(p)).unwrap();
        }
        // The fake clients need their interpreter: a failed name probe would block the launch.
        let python = ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("python3 runs the fake Slurm");
        std::os::unix::fs::symlink(python, bin.join("python3")).unwrap();
        let mut c = f.command(&launch_on(target));
        c.env("PATH", &bin);
        let r = f.run_with(c, "");
        assert_eq!(r.code, 1, "{target}: {}", r.stderr);
        assert!(r.stderr.contains("nothing ran"), "{}", r.stderr);
        assert!(r.stderr.contains(submitter(target)), "{}", r.stderr);
        let failed = events(&f)
            .into_iter()
            .find(|e| e["kind"] == "SessionSubmitFailed")
            .expect("SessionSubmitFailed");
        assert_eq!(failed["event"]["may_exist"], false);
    }
}

/// A row of a job without a time limit, as squeue prints it (`UNLIMITED`, `%e` = `NONE`;
/// recorded: real-squeue-jobs-unlimited), placed on target T.
fn unlimited_row(id: u32, end: &str) -> String {
    let (p, a, q) = T;
    format!(
        "{id}|{id}|RUNNING|{p}|{a}|{q}|u|1|1|n0007|UNLIMITED|UNLIMITED|2026-12-01T08:13:03|{end}|None|{NAME}\n"
    )
}

/// Item 13: `time = "UNLIMITED"`: the job's `NONE` end time is understood, so a fresh-state
/// launch adopts it and a recorded one is reused; never another sbatch.
#[test]
fn an_unlimited_job_is_adopted_and_reused_not_submitted_again() {
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "stdout": unlimited_row(4242, "NONE")},
            {"match": ["--jobs=4242"], "stdout": unlimited_row(4242, "NONE")},
        ],
        "sbatch": [{"stdout": "5000\n"}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "adopted");
    assert_eq!(json_of(&r)["job_id"], 4242);
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "reused");
    assert!(
        !f.programs().contains(&"sbatch".to_owned()),
        "{:?}",
        f.calls()
    );
}

/// A row with one field no parser understands is a job of this name that exists: a fresh-state
/// launch must not read the listing as "no job found" and submit another.
#[test]
fn an_unreadable_row_of_this_name_blocks_a_fresh_submission() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": unlimited_row(4242, "someday")}],
        "sbatch": [{"stdout": "5000\n"}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr.contains("someday"),
        "the unreadable line is not shown: {}",
        r.stderr
    );
    assert!(r.stderr.contains("Nothing was submitted"), "{}", r.stderr);
    assert_eq!(
        f.programs(),
        ["squeue"],
        "submitted beside an unreadable job"
    );
}

/// Item 14: the recorded job is COMPLETING: it is ending, so it is neither reused nor a reason
/// to exit 0; the launch waits (saying so) until it is gone, then submits a new one.
#[test]
fn a_completing_recorded_job_is_waited_out_then_replaced() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(4242, T)}],
    }));
    assert_eq!(f.run(LAUNCH_T).code, 0);
    f.clear_calls();
    f.scenario(json!({
        "squeue": [
            {"match": ["--jobs=4242"], "times": 1, "stdout": row("4242", "COMPLETING", "n0007", T, NAME)},
            {"match": ["--jobs=4242"], "stdout": row("4242", "CANCELLED", "n0007", T, NAME)},
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(5000, T, NAME)},
            {"match": ["--jobs=5000"], "stdout": running(5000, T)},
        ],
        "sbatch": [{"stdout": "5000\n"}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "submitted", "{}", r.stdout);
    assert_eq!(json_of(&r)["job_id"], 5000);
    assert!(
        r.stderr.contains("COMPLETING"),
        "no progress said: {}",
        r.stderr
    );
    let calls = f.calls();
    assert_eq!(calls[..2], [by_id(4242), by_id(4242)], "{calls:?}");
    // One submit, after its --test-only.
    assert_eq!(f.programs().iter().filter(|p| *p == "sbatch").count(), 2);
}

/// Item 14: a COMPLETING job found by name is not adopted: the launch waits until it is gone,
/// then submits.
#[test]
fn a_completing_job_found_by_name_is_not_adopted() {
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": row("4242", "COMPLETING", "n0007", T, NAME)},
            {"match": ["--jobs=4242"], "stdout": row("4242", "COMPLETED", "n0007", T, NAME)},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(5000, T, NAME)},
            {"match": ["--jobs=5000"], "stdout": running(5000, T)},
        ],
        "sbatch": [{"stdout": "5000\n"}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "submitted", "{}", r.stdout);
    assert_eq!(json_of(&r)["job_id"], 5000);
    assert!(r.stderr.contains("COMPLETING"), "{}", r.stderr);
}

/// Item 14: a job that stays COMPLETING past the wait: exit 4 saying so, nothing submitted.
#[test]
fn a_job_completing_past_the_wait_is_unknown_and_nothing_is_submitted() {
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "stdout": row("4242", "COMPLETING", "n0007", T, NAME)},
            {"match": ["--jobs=4242"], "stdout": row("4242", "COMPLETING", "n0007", T, NAME)},
        ],
        "sbatch": [{"stdout": "5000\n"}],
    }));
    let mut args = LAUNCH_T.to_vec();
    args.extend_from_slice(&["--wait", "1"]);
    let r = f.run(&args);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(r.stderr.contains("still COMPLETING"), "{}", r.stderr);
    assert!(r.stderr.contains("Nothing was submitted"), "{}", r.stderr);
    assert!(!f.programs().contains(&"sbatch".to_owned()));
}

/// Item 15: without a terminal, release cannot ask: it exits 2 saying to pass `--yes`, and
/// cancels nothing. `--yes` releases.
#[test]
fn release_without_a_terminal_needs_yes() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(4242, T)}],
    }));
    assert_eq!(f.run(LAUNCH_T).code, 0);
    f.clear_calls();
    for json_flag in [false, true] {
        let mut args = vec!["session", "release", "sample", "-T", "T"];
        if json_flag {
            args.insert(0, "--json");
        }
        let out = f.command(&args).stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("--yes"), "{err}");
        assert!(!err.contains("Aborted"), "{err}");
        if json_flag {
            let j: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(j["error"]["exit_code"], 2, "{j}");
        }
        assert!(f.calls().is_empty(), "no Slurm call: {:?}", f.calls());
    }
    f.scenario(json!({
        "scancel": [{"stdout": ""}],
        "squeue": [
            {"match": ["--jobs=4242"], "stdout": row("4242", "CANCELLED", "n0007", T, NAME)},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": ""},
            {"match": ["--me", "--states=all"], "stdout": row("4242", "CANCELLED", "n0007", T, NAME)},
        ],
    }));
    let out = f
        .command(&["--json", "session", "release", "sample", "-T", "T", "--yes"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["action"], "released", "{j}");
}

/// Issue 10, item 7: the record names job 4242; squeue now answers exit 0 with nothing (a lying
/// or misconfigured controller, the wrong cluster) while the job still runs. An empty answer
/// is not proof that it is gone: the launch exits 4 and submits nothing beside it.
#[test]
fn an_empty_answer_about_the_recorded_job_submits_nothing() {
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(4242, T, NAME)},
            {"match": ["--jobs=4242"], "stdout": running(4242, T)},
        ],
        "sbatch": [{"stdout": "4242\n"}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    f.clear_calls();
    f.scenario(json!({
        "squeue": [{"stdout": ""}],
        "sacct": [{"stdout": ""}],
        "sbatch": [{"stdout": "4243\n"}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 4, "{} / {}", r.stdout, r.stderr);
    assert!(
        !f.programs().contains(&"sbatch".to_owned()),
        "a second job was submitted: {:?}",
        f.calls()
    );
}

// ---------------------------------------------------------------- issue 10, items 8-12

/// Item 10: two targets Slurm cannot tell apart (same partition and account, no QOS on one
/// side) are refused at load: exit 2 naming both, before any Slurm call, for every session
/// command. A job of one would otherwise be taken for the other's after a lost record.
#[test]
fn tied_targets_are_refused_at_load_naming_both() {
    let f = Fake::new(json!({}));
    for (second, why) in [
        ("", "neither pins a qos"),
        ("qos = \"normal\"\n", "\"a\" pins no qos"),
    ] {
        std::fs::write(
            f.path("config.toml"),
            format!(
                "[targets.a]\npartition = \"debug\"\naccount = \"dev\"\n\n\
                 [targets.b]\npartition = \"debug\"\naccount = \"dev\"\n{second}"
            ),
        )
        .unwrap();
        for args in [
            &["session", "launch", "m", "-T", "a", "--detached"][..],
            &["session", "release", "m", "-T", "b", "--force"],
            &["sessions"],
        ] {
            let r = f.run(args);
            assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
            assert!(
                r.stderr
                    .contains("targets \"a\" and \"b\" cannot be told apart")
                    && r.stderr.contains(why)
                    && r.stderr.contains("line 5"),
                "{}",
                r.stderr
            );
        }
    }
    assert!(f.calls().is_empty());
    assert!(!f.state().exists());
}

/// Item 8: with the state directory lost, every session command asks Slurm by name, as launch
/// does, and reaches the live job: release cancels it and proves no job of this session is
/// left; attach attaches to it; renew renews it.
#[test]
fn a_lost_record_heals_through_release_attach_and_renew() {
    // release --force
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": running(4242, T)},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": ""},
            {"match": ["--me", "--states=all"], "stdout": row("4242", "CANCELLED", "n0007", T, NAME)},
            {"match": ["--jobs=4242"], "stdout": row("4242", "CANCELLED", "n0007", T, NAME)},
        ],
        "scancel": [{"stdout": ""}],
    }));
    let r = f.run(&[
        "--json", "session", "release", "sample", "-T", "T", "--force",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json_of(&r);
    assert_eq!(
        (&j["action"], &j["job_id"]),
        (&json!("released"), &json!(4242)),
        "{j}"
    );
    assert_eq!(
        f.calls(),
        [
            name_probe(),
            vec!["scancel".to_owned(), "4242".into()],
            by_id(4242),
            name_probe(),
            mine_listing()
        ]
    );

    // attach: without a terminal it says what it would run, which names the live job.
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "stdout": running(42, T)},
            {"match": ["--jobs=42"], "stdout": running(42, T)},
        ],
    }));
    let r = f.run(&["session", "attach", "sample", "-T", "T", "--", "htop"]);
    assert!(
        r.stderr.contains("srun --jobid=42 --overlap --pty htop"),
        "{} / {}",
        r.code,
        r.stderr
    );
    assert_eq!(f.calls()[0], name_probe());

    // renew --once: the adopted job has time left, so renew holds it.
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "stdout": running(4242, T)},
            {"match": ["--jobs=4242"], "stdout": running(4242, T)},
        ],
    }));
    let r = f.run(&[
        "--json",
        "session",
        "renew",
        "sample",
        "-T",
        "T",
        "--once",
        "--drain-minutes",
        "5",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json_of(&r);
    assert_eq!(
        (&j["job_id"], &j["relaunched"]),
        (&json!(4242), &json!([])),
        "{j}"
    );
    assert!(!f.programs().contains(&"sbatch".to_owned()));
}

/// Item 9: a record restored from an old copy names job 100, which has ended, while a newer
/// job of the same session (200) runs. Release cancels the recorded job and then, by name,
/// every live job of this session's name and target: it never answers success while one runs.
#[test]
fn release_of_a_restored_record_also_cancels_the_live_job_of_the_session() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(100, T)}],
    }));
    assert_eq!(f.run(LAUNCH_T).code, 0);
    f.clear_calls();
    f.scenario(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": running(200, T)},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": ""},
            {"match": ["--me", "--states=all"], "stdout": row("200", "CANCELLED", "n0007", T, NAME)},
            {"match": ["--jobs=100"], "stdout": row("100", "COMPLETED", "n0007", T, NAME)},
            {"match": ["--jobs=200"], "stdout": row("200", "CANCELLED", "n0007", T, NAME)},
        ],
        "scancel": [{"stdout": ""}],
    }));
    let r = f.run(&[
        "--json", "session", "release", "sample", "-T", "T", "--force",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json_of(&r);
    assert_eq!(j["job_id"], 100, "{j}");
    assert_eq!(
        j["also_released"],
        json!([{"job_id": 200, "proof": "cancelled: squeue shows job 200 CANCELLED"}]),
        "{j}"
    );
    let calls = f.calls();
    assert!(
        calls.contains(&vec!["scancel".to_owned(), "200".into()]),
        "the live job of the session was left running: {calls:?}"
    );
    assert_eq!(calls[calls.len() - 2], name_probe(), "{calls:?}");
    assert_eq!(calls.last().unwrap(), &mine_listing(), "{calls:?}");
    // Had the name probe failed, release could not prove that nothing runs: exit 4.
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(100, T)}],
    }));
    assert_eq!(f.run(LAUNCH_T).code, 0);
    f.scenario(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "stderr": "slurm_load_jobs error: Socket timed out\n", "exit": 1},
            {"match": ["--jobs=100"], "stdout": row("100", "CANCELLED", "n0007", T, NAME)},
        ],
        "scancel": [{"stdout": ""}],
    }));
    let r = f.run(&["session", "release", "sample", "-T", "T", "--force"]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr.contains("squeue --me --name=sucoder-sample"),
        "{}",
        r.stderr
    );
}

/// Issue 14: `session launch --dry-run` says what a launch would do and does none of it: with
/// no job, a submit checked by `sbatch --test-only`; with a live job of this target found by
/// name, its adoption. No sbatch without `--test-only`, nothing journaled or written.
#[test]
fn a_dry_run_launch_says_what_it_would_do_and_does_nothing() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": ""}],
        "sbatch": [{"match": ["--test-only"], "stderr": "sbatch: Job 77 to start at 2026-12-01T12:00:00 using 1 processors on nodes n0007 in partition savio4_htc\n"}],
        "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
    }));
    let r = f.run(&[
        "--json",
        "session",
        "launch",
        "sample",
        "-T",
        "T",
        "--dry-run",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json_of(&r);
    assert_eq!(j["would"], "submit", "{j}");
    assert_eq!(j["would_start"], "2026-12-01T12:00:00", "{j}");
    assert_eq!(j["nodes"], "n0007", "{j}");
    let calls = f.calls();
    assert_eq!(calls[0], name_probe());
    assert_eq!(
        calls[1][..2],
        ["sbatch".to_owned(), "--test-only".to_owned()],
        "{calls:?}"
    );
    assert!(
        calls[1].contains(&"--partition=savio4_htc".to_owned()),
        "{calls:?}"
    );
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(!f.state().exists(), "a dry run created the state directory");

    f.scenario(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(4242, T)}],
        "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
    }));
    let r = f.run(&[
        "--json",
        "session",
        "launch",
        "sample",
        "-T",
        "T",
        "--dry-run",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json_of(&r);
    assert_eq!(
        (j["would"].as_str(), j["job_id"].as_u64()),
        (Some("adopt"), Some(4242)),
        "{j}"
    );
    assert!(!f.state().exists(), "a dry run created the state directory");
}

/// Issue 10 item 7 (the simulation's `session_gap`, seed 289): the state directory is lost and
/// the controller is in a blackout: every squeue answers exit 0 with nothing. A release must
/// not take the empty name listing for "nothing to release" while the session's job may run:
/// the user's listing right after is empty too, so nothing corroborates it, and it exits 4
/// naming what settles it. Nothing is cancelled, nothing is recorded as settled. On a healthy
/// cluster the user's listing shows some job (here another of the user's), which vouches for
/// the name listing, and the release says "nothing" as before.
///
/// Issue 21 item 5: with nothing of the user's listed, the release makes a job that is (a held
/// watermark, cancelled at once) and asks again; in the blackout even that one is not listed,
/// so it still proves nothing. On a healthy cluster where the user has no other job, the
/// listing after it shows the watermark, which vouches for the name listing.
#[test]
fn release_does_not_take_a_blackouts_empty_listing_for_nothing() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me"], "stdout": ""}],
        "sbatch": [{"match": ["--hold", "--job-name=sucoder-watermark-[0-9a-f]{8}", "--wrap=true"], "stdout": "55\n"}],
        "scancel": [{"argv": ["55"], "stdout": ""}],
        "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
    }));
    let r = f.run(&["session", "release", "sample", "-T", "T", "--force"]);
    assert_eq!(r.code, 4, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("proves nothing")
            && r.stderr.contains("have any job of yours listed")
            && r.stderr.contains("dispatch session release sample -T T"),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("Nothing to release"), "{}", r.stdout);
    assert_eq!(
        f.programs(),
        ["squeue", "squeue", "sbatch", "scancel", "squeue"],
        "{:?}",
        f.calls()
    );
    assert_eq!(f.calls()[..2], [name_probe(), mine_listing()]);
    assert_eq!(f.calls()[4], mine_listing());

    f.clear_calls();
    f.scenario(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "stdout": ""},
            {"match": ["--me", "--states=all"], "times": 1, "stdout": ""},
            {"match": ["--me", "--states=all"], "stdout": row("56", "CANCELLED", "", OTHER, "sucoder-watermark-0badcafe")},
        ],
        "sbatch": [{"match": ["--hold"], "stdout": "56\n"}],
        "scancel": [{"argv": ["56"], "stdout": ""}],
        "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
    }));
    let r = f.run(&["session", "release", "sample", "-T", "T", "--force"]);
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(r.stdout.contains("Nothing to release."), "{}", r.stdout);
    assert_eq!(
        f.programs(),
        ["squeue", "squeue", "sbatch", "scancel", "squeue"],
        "{:?}",
        f.calls()
    );

    f.clear_calls();
    f.scenario(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "stdout": ""},
            {"match": ["--me", "--states=all"], "stdout": running(9000, OTHER).replace(NAME, "other-job")},
        ],
        "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
    }));
    let r = f.run(&["session", "release", "sample", "-T", "T", "--force"]);
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert!(r.stdout.contains("Nothing to release."), "{}", r.stdout);
    assert_eq!(f.calls(), [name_probe(), mine_listing()]);
}

/// Issue 10 (the simulation's `failed_probe_gap`): no record, and the name probe fails. A
/// launch must not submit anyway ("a failed probe does not block" was the old rule): a job of
/// this session may run, and salloc would start a second one; a held sbatch would still be a
/// second job in the queue. Exit 4, no salloc, no sbatch.
#[test]
fn a_failed_name_probe_blocks_a_launch() {
    for (target, submitter) in [("U", "salloc"), ("T", "sbatch")] {
        let f = Fake::new(json!({
            "squeue": [{"match": ["--me", "--name=sucoder-sample"], "exit": 1,
                        "stderr": "slurm_load_jobs error: Socket timed out on send/recv operation\n"}],
            "salloc": [{"stderr": "salloc: Granted job allocation 77\n"}],
            "sbatch": [{"stdout": "4242\n"}],
            "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
        }));
        // It asks again within --wait (issue 21 item 8), then blocks.
        let r = f.run(&[
            "session",
            "launch",
            "sample",
            "-T",
            target,
            "--detached",
            "--wait",
            "2",
        ]);
        assert_eq!(r.code, 4, "{target}: {} {}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("the name probe failed")
                && r.stderr.contains("nothing was submitted"),
            "{target}: {}",
            r.stderr
        );
        assert!(
            !f.programs().contains(&submitter.to_owned()),
            "{target}: {:?}",
            f.calls()
        );
    }
}

/// An unconfined launch on a blackout's empty answers never lets a second job run: it used to
/// need its empty name listing corroborated (accounting as the last resort, which is no
/// proof); now its salloc is held, and the name listing that follows must show that held job,
/// its watermark, before it is released. Every listing empty: exit 4, nothing released. A
/// listing that shows it alone: released, and the launch runs.
#[test]
fn an_unconfined_launch_is_released_only_beside_its_own_listed_job() {
    let salloc = json!({"stderr": "salloc: Pending job allocation 77\n", "hang": 1});
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me"], "stdout": ""}],
        "salloc": [salloc.clone()],
        "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
    }));
    let launch = ["session", "launch", "sample", "-T", "U", "--detached"];
    let r = f.run(&launch);
    assert_eq!(r.code, 4, "{} {}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("Slurm job 77 of sample--U was submitted held"),
        "{}",
        r.stderr
    );
    assert!(
        !f.programs().contains(&"scontrol".to_owned()),
        "{:?}",
        f.calls()
    );
    assert_eq!(f.programs()[..3], ["squeue", "sbatch", "salloc"]);
    assert!(f.programs()[3..].iter().all(|p| p == "squeue"));
    f.clear_calls();
    f.scenario(json!({
        "squeue": [
            {"match": ["--jobs=77"], "stdout": running(77, OTHER)},
            {"match": ["--me"], "stdout": ""},
        ],
        "salloc": [salloc],
        "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
    }));
    // The record names job 77 (held, then listed): the next launch reuses it once it runs.
    let r = f.run(&launch);
    assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
    assert_eq!(f.programs(), ["squeue"]);
}

/// A pool's allocation and a `dispatch submit` job under the prefix are never sessions:
/// `sessions` does not list them (not as orphans either), and a session of a mirror named
/// after one is refused before any Slurm call, so it can neither adopt nor cancel it.
#[test]
fn pool_and_submit_jobs_are_never_sessions() {
    let listing = row("45", "RUNNING", "n1", T, "sucoder-pool-ap-00c77252")
        + &row("46", "RUNNING", "n1", T, "sucoder-w1-1234abcd")
        + &row("47", "RUNNING", "n1", T, "sucoder-ghost");
    let f = Fake::new(json!({"squeue": [{"match": ["--me"], "stdout": listing}]}));
    let r = f.run(&["--json", "sessions"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json_of(&r);
    let ids: Vec<&Value> = j["targets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["jobs"].as_array().unwrap())
        .chain(j["unmatched"].as_array().unwrap())
        .map(|e| &e["job_id"])
        .collect();
    assert_eq!(ids, [&json!(47)], "{j}");
    f.clear_calls();
    for args in [
        &[
            "session",
            "launch",
            "pool-ap-00c77252",
            "-T",
            "T",
            "--detached",
        ][..],
        &["session", "release", "w1-1234abcd", "-T", "T", "--force"],
    ] {
        let r = f.run(args);
        assert_eq!(r.code, 3, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr
                .contains("pool allocations and `dispatch submit` jobs"),
            "{}",
            r.stderr
        );
    }
    assert!(f.calls().is_empty(), "{:?}", f.calls());
}

/// Issue 21 item 9: every sbatch hangs. The `--test-only` check gets no answer, so the launch
/// stops there, exit 4, saying that nothing was submitted and that the controller did not
/// answer: one sbatch call (one timeout), no real submission, no session left unknown.
#[test]
fn a_test_only_without_answer_submits_nothing() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": ""}],
        "sbatch": [{"hang": 30}],
    }));
    let mut c = f.command(LAUNCH_T);
    c.env("DISPATCH_SLURM_TIMEOUT", "2");
    let r = f.run_with(c, "");
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.stderr.contains("did not answer `sbatch --test-only`")
            && r.stderr.contains("nothing was submitted"),
        "{}",
        r.stderr
    );
    let sbatch: Vec<Vec<String>> = f.calls().into_iter().filter(|c| c[0] == "sbatch").collect();
    assert_eq!(sbatch.len(), 1, "{sbatch:?}");
    assert_eq!(sbatch[0][1], "--test-only");
    let failed = events(&f)
        .into_iter()
        .find(|e| e["kind"] == "SessionSubmitFailed")
        .expect("the launch's outcome is recorded");
    assert_eq!(failed["event"]["may_exist"], false);
    f.scenario(json!({"squeue": [{"match": ["--me"], "stdout": ""}]}));
    let j = json_of(&f.run(&["--json", "sessions"]));
    assert_eq!(j["unknown"], json!([]), "{j}");
}

/// Issue 21 item 8: the name probe fails twice, then answers. The launch asks again within
/// its `--wait` (saying so on stderr) and launches, one job; a probe that never answers still
/// submits nothing (exit 4) once the wait is over.
#[test]
fn a_name_probe_that_fails_then_answers_still_launches_one_job() {
    let blip = json!({"match": ["--me", "--name=sucoder-sample"], "times": 2,
                      "stderr": "squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation\n",
                      "exit": 1});
    let f = Fake::new(json!({
        "squeue": [
            blip,
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(4242, T, NAME)},
            {"match": ["--jobs=4242"], "stdout": running(4242, T)},
        ],
        "sbatch": [{"stdout": "4242\n"}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["action"], "submitted");
    assert!(
        r.stderr.contains("the name probe of sample--T failed"),
        "{}",
        r.stderr
    );
    let calls = f.calls();
    assert_eq!(calls[..3], [name_probe(), name_probe(), name_probe()]);
    let submits = calls
        .iter()
        .filter(|c| c[0] == "sbatch" && c[1] != "--test-only")
        .count();
    assert_eq!(submits, 1, "{calls:?}");

    let f = Fake::new(json!({"squeue": [blip.as_object().unwrap().clone()
        .into_iter().filter(|(k, _)| k != "times").collect::<serde_json::Map<_, _>>()]}));
    let mut launch = LAUNCH_T.to_vec();
    launch.extend(["--wait", "2"]);
    let r = f.run(&launch);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        f.programs().iter().all(|p| p == "squeue"),
        "{:?}",
        f.calls()
    );
    assert!(
        f.programs().len() >= 2,
        "asked again within --wait: {:?}",
        f.calls()
    );
}

/// Issue 21 item 7: an unconfined launch whose `squeue --jobs` polls failed exits 4; the next
/// launch reuses that job and, since it does not run yet, waits for it like a new one: the
/// answer names its node (it was `reused` with `"node": null`).
#[test]
fn a_reused_job_that_is_not_running_is_waited_for_and_its_node_named() {
    let salloc = json!({"stderr": "salloc: Job is in held state, pending scheduler release\n\
                                   salloc: Pending job allocation 77\n", "hang": 1});
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(77, OTHER, NAME)},
            {"match": ["--jobs=77"], "exit": 1,
             "stderr": "slurm_load_jobs error: Socket timed out on send/recv operation\n"},
        ],
        "salloc": [salloc],
    }));
    let launch = [
        "--json",
        "session",
        "launch",
        "sample",
        "-T",
        "U",
        "--detached",
    ];
    let r = f.run(&launch);
    assert_eq!(r.code, 4, "{}", r.stderr);
    f.clear_calls();
    f.scenario(json!({
        "squeue": [
            {"match": ["--jobs=77"], "times": 2, "stdout": row("77", "PENDING", "", OTHER, NAME)},
            {"match": ["--jobs=77"], "stdout": running(77, OTHER)},
        ],
    }));
    let r = f.run(&launch);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json_of(&r);
    assert_eq!(
        (&j["action"], &j["job_id"], &j["node"], &j["state"]),
        (
            &json!("reused"),
            &json!(77),
            &json!("n0007"),
            &json!("RUNNING")
        ),
        "{j}"
    );
    assert!(!f.programs().contains(&"salloc".to_owned()));
}

/// Job 4242 of session `sample` as squeue lists it in a preemption's grace: RUNNING, its end
/// (17:01:30) pulled forward from its start plus its 2-hour limit.
fn in_grace(id: u32) -> String {
    format!(
        "{id}|{id}|RUNNING|savio4_htc|co_carleton|carleton_htc4_normal|u|1|1|n0007|0:27|2:00:00|\
         2026-11-29T17:00:00|2026-11-29T17:01:30|None|{NAME}\n"
    )
}

/// `scontrol show job 4242` in the grace: still RUNNING, with `PreemptTime` and the `EndTime`
/// Slurm kills it at (the 22.05 dev cluster's words, as the notes record them).
fn shown_in_grace() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/slurm/notes-scontrol-show-job-running-alloc.stdout"
    ))
    .unwrap()
    .replace("JobId=1 ", "JobId=4242 ")
    .replace(
        "EndTime=2026-11-29T16:22:52",
        "EndTime=2026-11-29T17:01:30 PreemptEligibleTime=2026-11-29T17:00:00 \
         PreemptTime=2026-11-29T17:01:00",
    )
}

/// Issue 38: a session's job in Slurm's preemption grace is live: adopted and reused as the
/// session's (never a second job beside it), each time saying when Slurm kills it
/// (`preempted` in the JSON, "preempted, ends at …" on stderr), and `sessions` shows it so.
/// Once squeue shows it PREEMPTED, the next launch records its end with that cause and Slurm's
/// words (`SessionCleared`), says so (`ended`), and submits a new job.
#[test]
fn a_session_job_in_its_preemption_grace_is_kept_and_its_end_recorded_as_preempted() {
    let preempted = json!({"at": "2026-11-29T17:01:00", "ends_at": "2026-11-29T17:01:30"});
    let f = Fake::new(json!({
        "squeue": [
            {"match": ["--me", "--name=sucoder-sample"], "stdout": in_grace(4242)},
            {"match": ["--jobs=4242"], "stdout": in_grace(4242)},
            {"match": ["--me"], "stdout": in_grace(4242)},
        ],
        "scontrol": [{"match": ["show"], "stdout": shown_in_grace()}],
        "default": {"stderr": "fake-slurm: unexpected call\n", "exit": 99},
    }));
    // Adopted by name (no record), then reused from the record: kept, no sbatch; the dry run
    // says so first.
    for (would, action) in [("adopt", "adopted"), ("reuse", "reused")] {
        let dry: Vec<&str> = LAUNCH_T.iter().copied().chain(["--dry-run"]).collect();
        let r = f.run(&dry);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let j = json_of(&r);
        assert_eq!((&j["would"], &j["job_id"]), (&json!(would), &json!(4242)));
        assert_eq!(j["preempted"], preempted, "{j}");
        let r = f.run(LAUNCH_T);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let j = json_of(&r);
        assert_eq!((&j["action"], &j["job_id"]), (&json!(action), &json!(4242)));
        assert_eq!(j["preempted"], preempted, "{j}");
        assert!(
            r.stderr.contains("preempted, ends at 17:01:30")
                && r.stderr.contains("nothing new was submitted"),
            "{}",
            r.stderr
        );
    }
    assert!(!f.programs().contains(&"sbatch".to_owned()));
    let r = f.run(&["--json", "sessions"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json_of(&r)["targets"][0]["jobs"][0]["preempted"], preempted);
    let r = f.run(&["sessions"]);
    assert!(
        r.stdout.contains("preempted") && r.stdout.contains("preempted, ends at 17:01:30"),
        "{}",
        r.stdout
    );

    // Killed at the grace's end: PREEMPTED is the proof.
    f.scenario(json!({
        "squeue": [
            {"match": ["--jobs=4242"], "stdout": row("4242", "PREEMPTED", "n0007", T, NAME)},
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(4243, T, NAME)},
            {"match": ["--jobs=4243"], "stdout": running(4243, T)},
        ],
        "sbatch": [{"stdout": "4243\n"}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json_of(&r);
    assert_eq!(
        (&j["action"], &j["job_id"]),
        (&json!("submitted"), &json!(4243))
    );
    assert_eq!(
        j["ended"],
        json!({"job_id": 4242, "cause": "preempted",
               "proof": "squeue shows job 4242 PREEMPTED"}),
        "{j}"
    );
    assert!(j.get("preempted").is_none(), "{j}");
    assert!(r.stderr.contains("is over: preempted"), "{}", r.stderr);
    let cleared: Vec<Value> = events(&f)
        .into_iter()
        .filter(|e| e["kind"] == "SessionCleared")
        .map(|e| e["event"].clone())
        .collect();
    assert_eq!(
        cleared,
        [
            json!({"session": {"mirror": "sample", "target": "T"}, "job_id": 4242,
                "reason": "preempted: squeue shows job 4242 PREEMPTED"})
        ]
    );
}

/// Issue 38: a session's job squeue no longer knows ("Invalid job id", past MinJobAge) is asked
/// about once in accounting, whose PREEMPTED names the cause of the end the launch records.
#[test]
fn a_forgotten_session_job_ends_with_accountings_cause() {
    let f = Fake::new(json!({
        "squeue": [{"match": ["--me", "--name=sucoder-sample"], "stdout": running(4242, T)}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let acct = "4242|4242|PREEMPTED|0:0|0:0|2026-11-29T16:00:00|2026-11-29T16:00:01|\
                2026-11-29T17:01:30|01:01:29|02:00:00|n0007|1|100M|savio4_htc|co_carleton|\
                carleton_htc4_normal|u|sucoder-sample\n";
    f.scenario(json!({
        "squeue": [
            {"match": ["--jobs=4242"], "fixture": "notes-squeue-invalid-id"},
            {"match": ["--me", "--name=sucoder-sample"], "times": 1, "stdout": ""},
            {"match": ["--me", "--name=sucoder-sample"], "stdout": held_row(4243, T, NAME)},
            {"match": ["--jobs=4243"], "stdout": running(4243, T)},
        ],
        "sacct": [{"match": ["--jobs=4242"], "stdout": acct}],
        "sbatch": [{"stdout": "4243\n"}],
    }));
    let r = f.run(LAUNCH_T);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = json_of(&r);
    assert_eq!(j["ended"]["cause"], "preempted", "{j}");
    assert_eq!(
        j["ended"]["proof"],
        "squeue no longer knows job 4242; accounting shows job 4242 PREEMPTED"
    );
}
