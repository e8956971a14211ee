//! The in-scope given/when/then behaviours of `sucoder-behaviours.md` §9 for sessions, against
//! a scripted Slurm that records the exact argv of every call, in order, and what the journal
//! held at that moment. Test names carry the behaviour number.

mod support;

use std::path::{Path, PathBuf};

use dispatch::config::Config;
use dispatch::event::session::SessionKey;
use dispatch::ops::error::OpError;
use dispatch::ops::session::launch::{launch, LaunchAction, LaunchRequest};
use dispatch::ops::session::release::{release, ReleaseAction, ReplacedAction};
use dispatch::ops::session::renew::{renew, RenewSettings};
use dispatch::ops::session::{attach, report};
use dispatch::policy::session::renew::Backoff;
use dispatch::slurm::{Answer, JobId};
use support::scripted::*;

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

[targets.plain]
partition = "savio4_htc"
account = "co_plain"
time = "3-00:00:00"
confined = true

[targets.full]
partition = "savio4_htc"
account = "co_carleton"
qos = "q"
cpus_per_task = 4
mem = "16G"
confined = true

[targets.U]
partition = "savio3"
account = "fc_jevons"
qos = "normal"
time = "01:00:00"
confined = false

[mirrors.sample]
"#;

struct World {
    _tmp: tempfile::TempDir,
    state: PathBuf,
    config: Config,
    slurm: Scripted,
}

impl World {
    fn new() -> World {
        World::with_config(CONFIG)
    }

    /// [`CONFIG`] without its `job_name_prefix`: dispatch's own names, sucoder's adopted.
    fn default_names() -> World {
        World::with_config(&CONFIG.replace(PINNED_PREFIX, ""))
    }

    fn with_config(config: &str) -> World {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        let config = Config::parse(config, Path::new("/test/config.toml")).unwrap();
        let slurm = Scripted::new(&state);
        World {
            _tmp: tmp,
            state,
            config,
            slurm,
        }
    }

    fn q(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.slurm.q.lock().unwrap()
    }

    async fn launch(&self, target: &str, detached: bool) -> Result<LaunchAction, OpError> {
        self.launch_req(LaunchRequest {
            mirror: "sample".into(),
            target: target.into(),
            detached,
            ..LaunchRequest::default()
        })
        .await
        .map(|r| r.action)
    }

    async fn launch_req(
        &self,
        req: LaunchRequest,
    ) -> Result<dispatch::ops::session::launch::LaunchReport, OpError> {
        let env = env(&self.config, &self.state, &self.slurm);
        launch(&env, &req).await
    }

    /// The session's recorded (job, node).
    fn record(&self, target: &str) -> (Option<u32>, Option<String>) {
        let state = read_state(&self.state).unwrap();
        let s = state.sessions.get(&SessionKey::new("sample", target));
        (
            s.and_then(|s| s.job_id()).map(JobId::get),
            s.and_then(|s| s.job.as_ref()).and_then(|j| j.node.clone()),
        )
    }

    /// Give the session (sample, target) job `n` by a launch that adopts it.
    async fn seed(&self, target: &str, n: u32, placement: (&str, &str, &str)) {
        self.q()
            .by_name
            .push_back(live(&row(&n.to_string(), "RUNNING", "n1", placement, NAME)));
        assert_eq!(
            self.launch(target, true).await.unwrap(),
            LaunchAction::Adopted
        );
        self.slurm.assert_drained();
        self.slurm.reset();
    }

    fn log(&self) -> String {
        self.state
            .join("sessions/logs/job-sample-%j.out")
            .to_string_lossy()
            .into_owned()
    }
}

impl Scripted {
    fn reset(&self) {
        // Forget the calls of the set-up, keep the queues (which must be empty).
        self.assert_drained();
        self.clear_calls();
    }
}

fn err_text(r: Result<impl std::fmt::Debug, OpError>) -> (String, &'static str) {
    let e = r.expect_err("expected an error");
    // An error about the session's job (named by the error document) is its error's kind.
    let kind = match e.underlying() {
        OpError::Failed(_) => "failed",
        OpError::Unknown(_) => "unknown",
        OpError::SessionRefused(_) => "refused",
        OpError::Usage(_) | OpError::Config(_) => "usage",
        _ => "other",
    };
    (e.to_string(), kind)
}

// ---------------------------------------------------------------- sanitization and argv

/// A launch of `w`'s session on T (sbatch) and one on U (salloc), each finding no job, its
/// job named `name`: every Slurm call's argv, the sbatch's and the salloc's.
async fn launch_on_t_and_u(w: &World, name: &str) -> (Vec<Vec<String>>, Vec<String>, Vec<String>) {
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(11));
    w.q()
        .by_id
        .push_back(live(&row("11", "RUNNING", "n1", T, name)));
    w.launch("T", true).await.unwrap();
    w.q().by_name.push_back(gone());
    w.q().salloc.push_back(Ok(dispatch::slurm::Allocated {
        job_id: JobId::new(12).unwrap(),
    }));
    w.q()
        .by_id
        .push_back(live(&row("12", "RUNNING", "n2", OTHER, name)));
    w.launch("U", true).await.unwrap();
    let argvs = w.slurm.argvs();
    let sbatch = argvs.iter().find(|a| a[0] == "sbatch").unwrap().clone();
    let salloc = argvs.iter().find(|a| a[0] == "salloc").unwrap().clone();
    (argvs, sbatch, salloc)
}

/// 1, 2, 3: one token everywhere; the same `--job-name` for sbatch and salloc.
#[tokio::test]
async fn b01_b03_job_name_is_the_same_for_sbatch_and_salloc() {
    let w = World::new();
    let (_, sbatch, salloc) = launch_on_t_and_u(&w, NAME).await;
    assert_eq!(sbatch[2], "--job-name=sucoder-sample");
    assert_eq!(salloc[2], "--job-name=sucoder-sample", "{salloc:?}");
    assert_eq!(
        salloc,
        [
            "salloc",
            "--no-shell",
            "--job-name=sucoder-sample",
            "--partition=savio3",
            "--account=fc_jevons",
            "--qos=normal",
            "--time=01:00:00",
            "--immediate=30",
            "--hold",
        ]
    );
}

/// The default configuration: a new session job is named `dispatch-<token>`, for sbatch and
/// salloc alike, and every name probe asks for that name and sucoder's in one listing.
#[tokio::test]
async fn default_names_are_dispatchs_own_and_probes_ask_for_sucoders_too() {
    let w = World::default_names();
    let (argvs, sbatch, salloc) = launch_on_t_and_u(&w, "dispatch-sample").await;
    assert_eq!(sbatch[2], "--job-name=dispatch-sample");
    assert_eq!(salloc[2], "--job-name=dispatch-sample", "{salloc:?}");
    let probes: Vec<_> = argvs
        .iter()
        .filter(|a| a.iter().any(|x| x.starts_with("--name=")))
        .collect();
    assert!(probes.len() >= 2, "{argvs:?}");
    for p in probes {
        assert_eq!(p.last().unwrap(), "--name=dispatch-sample,sucoder-sample");
    }
}

/// The default configuration adopts sucoder's live job of the session (`sucoder-<token>`)
/// instead of submitting beside it; with both tools' jobs live on the target, it still adopts
/// exactly one and submits nothing (the one-job-per-session invariant across both names).
#[tokio::test]
async fn default_names_adopt_one_live_job_under_either_name() {
    let w = World::default_names();
    w.q()
        .by_name
        .push_back(live(&row("77", "RUNNING", "n1", T, "sucoder-sample")));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Adopted);
    w.slurm.assert_drained();
    assert_eq!(w.record("T").0, Some(77));
    assert!(!w.slurm.argvs().iter().any(|a| a[0] == "sbatch"));

    let w = World::default_names();
    let both = row("77", "RUNNING", "n1", T, "sucoder-sample")
        + &row("78", "RUNNING", "n1", T, "dispatch-sample");
    w.q().by_name.push_back(live(&both));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Adopted);
    w.slurm.assert_drained();
    assert!(matches!(w.record("T").0, Some(77 | 78)));
    assert!(!w.slurm.argvs().iter().any(|a| a[0] == "sbatch"));
}

/// 2: names with spaces, slashes, quotes and non-ASCII become safe tokens in the job name.
#[tokio::test]
async fn b02_hostile_mirror_names_become_safe_tokens() {
    let w = World::new();
    for (mirror, name) in [
        ("K Agg/x", "sucoder-K_Agg_x"),
        ("it's \"q\"", "sucoder-it_s__q_"),
        ("café", "sucoder-caf_"),
        ("x;rm -rf /", "sucoder-x_rm_-rf__"),
    ] {
        w.q().by_name.push_back(gone());
        w.q().sbatch.push_back(submitted(5));
        w.q()
            .by_id
            .push_back(live(&row("5", "RUNNING", "n1", T, name)));
        let env = env(&w.config, &w.state, &w.slurm);
        launch(
            &env,
            &LaunchRequest {
                mirror: mirror.into(),
                target: "T".into(),
                detached: true,
                ..LaunchRequest::default()
            },
        )
        .await
        .unwrap();
        let argvs = w.slurm.argvs();
        let sbatch = argvs.iter().rev().find(|a| a[0] == "sbatch").unwrap();
        assert_eq!(sbatch[2], format!("--job-name={name}"), "{mirror:?}");
        let probe = argvs
            .iter()
            .rev()
            .find(|a| a.len() == 5 && a[3] == "--me")
            .unwrap();
        assert_eq!(probe[4], format!("--name={name}"));
        // Release so that the next mirror's job id 5 is not held twice.
        w.q().scancel.push_back(scancel(0, "", 5));
        w.q().by_id.push_back(invalid_id());
        w.q().by_name.push_back(gone());
        release(&env, mirror, "T", JobId::new(5)).await.unwrap();
    }
}

/// 4, 5: the exact sbatch argv, with and without qos/cpus/mem (the script last).
#[tokio::test]
async fn b04_b05_sbatch_argv() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(7));
    w.q()
        .by_id
        .push_back(live(&row("7", "RUNNING", "n1", T, NAME)));
    w.launch("plain", true).await.unwrap();
    let script = w.state.join("sessions/scripts/job-sample--plain.sh");
    assert_eq!(
        w.slurm.argvs()[1],
        [
            "sbatch".to_owned(),
            "--parsable".into(),
            "--job-name=sucoder-sample".into(),
            "--partition=savio4_htc".into(),
            "--account=co_plain".into(),
            "--time=3-00:00:00".into(),
            format!("--output={}", w.log()),
            "--no-requeue".into(),
            "--hold".into(),
            script.to_string_lossy().into_owned(),
        ]
    );
    let body = std::fs::read_to_string(&script).unwrap();
    assert!(body.ends_with("exec sleep infinity\n"), "{body}");

    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(8));
    w.q().by_id.push_back(live(&row(
        "8",
        "RUNNING",
        "n1",
        ("savio4_htc", "co_carleton", "q"),
        NAME,
    )));
    w.launch_req(LaunchRequest {
        mirror: "sample".into(),
        target: "full".into(),
        detached: true,
        command: vec!["agent".into(), "--model".into(), "x y".into()],
        ..LaunchRequest::default()
    })
    .await
    .unwrap();
    let script = w.state.join("sessions/scripts/job-sample--full.sh");
    assert_eq!(
        w.slurm.argvs()[1],
        [
            "sbatch".to_owned(),
            "--parsable".into(),
            "--job-name=sucoder-sample".into(),
            "--partition=savio4_htc".into(),
            "--account=co_carleton".into(),
            "--qos=q".into(),
            "--time=02:00:00".into(),
            "--cpus-per-task=4".into(),
            "--mem=16384M".into(),
            format!("--output={}", w.log()),
            "--no-requeue".into(),
            "--hold".into(),
            script.to_string_lossy().into_owned(),
        ]
    );
    let body = std::fs::read_to_string(&script).unwrap();
    assert!(body.ends_with("exec agent --model 'x y'\n"), "{body}");
}

/// 6: the attach argv; never a `new-session` fallback.
#[test]
fn b06_attach_argv() {
    let argv = attach::srun_argv(JobId::new(42).unwrap(), &["bash".into(), "-l".into()]);
    let argv: Vec<_> = argv.iter().map(|a| a.to_str().unwrap()).collect();
    assert_eq!(argv, ["--jobid=42", "--overlap", "--pty", "bash", "-l"]);
    assert_eq!(attach::default_command(None), ["bash", "-l"]);
    assert_eq!(
        attach::default_command(Some("/bin/zsh".into())),
        ["/bin/zsh", "-l"]
    );
}

// ---------------------------------------------------------------- sbatch / salloc output

/// 9: an sbatch answer that does not parse: no id is recorded, the failure says a job may
/// exist and how to find it, and the next launch's name probe resolves it.
#[tokio::test]
async fn b09_unparsable_sbatch_records_may_exist_and_the_next_launch_adopts() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q()
        .sbatch
        .push_back(Err(action_unknown("sbatch: error: nonsense", None)));
    let (msg, kind) = err_text(w.launch("T", true).await);
    assert_eq!(kind, "unknown");
    assert!(
        msg.contains("MAY have been submitted")
            && msg.contains("scancel --me --name=sucoder-sample"),
        "{msg}"
    );
    let kinds = session_kinds(&w.state.join("journal"));
    assert_eq!(kinds, ["SessionLaunchIntent", "SessionSubmitFailed"]);
    assert_eq!(w.record("T").0, None);
    // The next launch finds the job by name.
    w.q()
        .by_name
        .push_back(live(&row("77", "RUNNING", "n1", T, NAME)));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Adopted);
    assert_eq!(w.record("T").0, Some(77));
    assert!(!read_state(&w.state)
        .unwrap()
        .sessions
        .get(&SessionKey::new("sample", "T"))
        .unwrap()
        .may_have_unknown_job());
    w.slurm.assert_drained();
}

/// Write the intent of a launch that was killed while its sbatch ran (no outcome follows).
fn interrupted_launch(w: &World) {
    let env = env(&w.config, &w.state, &w.slurm);
    drop(env.ctx.lock_and_load().unwrap());
    env.ctx
        .append(dispatch::event::Event::SessionLaunchIntent(
            dispatch::event::session::SessionLaunchIntent {
                session: SessionKey::new("sample", "T"),
                submission_id: uuid::Uuid::new_v4(),
                job_name: NAME.into(),
                confined: true,
                command: vec![],
                replacing: None,
            },
        ))
        .unwrap();
}

/// Issue 10 item 11: a launch killed while its sbatch was in flight, relaunched at once. The
/// orphaned sbatch may still create the job, so the relaunch waits (bounded by the submit
/// limit and the settle margin) and probes again; it adopts the job when it appears and never
/// submits beside it.
#[tokio::test]
async fn an_interrupted_submission_younger_than_its_limit_is_waited_for() {
    let w = World::new();
    interrupted_launch(&w);
    w.q().by_name.push_back(gone());
    w.q().by_name.push_back(gone());
    w.q()
        .by_name
        .push_back(live(&row("4242", "RUNNING", "n1", T, NAME)));
    let mut lines = Vec::new();
    let said = std::sync::Mutex::new(&mut lines);
    let progress = |l: &str| said.lock().unwrap().push(l.to_owned());
    let mut env = env(&w.config, &w.state, &w.slurm);
    env.progress = &progress;
    let r = launch(
        &env,
        &LaunchRequest {
            mirror: "sample".into(),
            target: "T".into(),
            detached: true,
            ..LaunchRequest::default()
        },
    )
    .await
    .unwrap();
    assert_eq!((r.action, r.job_id.get()), (LaunchAction::Adopted, 4242));
    assert!(!w.slurm.called("sbatch"), "{:?}", w.slurm.argvs());
    let said = lines.join("\n");
    assert!(
        said.contains("interrupted") && said.contains("nothing is submitted"),
        "{said}"
    );
}

/// Item 11: when nothing appears within the bound, the relaunch submits, and only after it.
#[tokio::test]
async fn an_interrupted_submission_that_created_nothing_is_submitted_after_the_bound() {
    let w = World::new();
    interrupted_launch(&w);
    let started = std::time::Instant::now();
    w.q().by_name_else = Some(gone());
    w.q().sbatch.push_back(submitted(5));
    w.q()
        .by_id
        .push_back(live(&row("5", "RUNNING", "n1", T, NAME)));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Submitted);
    let bound = LONGEST_CALL + fast_waits().submit_settle;
    assert!(started.elapsed() >= bound, "submitted before the bound");
    let probes = w
        .slurm
        .argvs()
        .iter()
        .filter(|a| **a == name_probe())
        .count();
    assert!(probes >= 2, "it probed again before submitting: {probes}");
    // An intent older than the bound is not waited for: one probe, then sbatch.
    let w = World::new();
    interrupted_launch(&w);
    std::thread::sleep(bound);
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(6));
    w.q()
        .by_id
        .push_back(live(&row("6", "RUNNING", "n1", T, NAME)));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Submitted);
    assert_eq!(
        w.slurm.programs(),
        ["squeue", "sbatch", "squeue", "scontrol", "squeue"]
    );
}

/// 10: salloc without "Granted job allocation": exit 4 (may exist), nothing recorded as a job.
#[tokio::test]
async fn b10_salloc_without_grant_records_no_job() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q()
        .salloc
        .push_back(Err(action_unknown("salloc: error: no", Some(102))));
    let (msg, kind) = err_text(w.launch("U", true).await);
    assert_eq!(kind, "unknown");
    assert!(msg.contains("Slurm mentioned job 102"), "{msg}");
    assert_eq!(w.record("U").0, None);
}

// ---------------------------------------------------------------- confined launch

/// 11: no record, empty name probe: name probe, sbatch, poll, in that order; the record ends
/// with the id and the polled node.
#[tokio::test]
async fn b11_fresh_launch_calls_in_order() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(4242));
    w.q()
        .by_id
        .push_back(live(&row("4242", "RUNNING", "n0007", T, NAME)));
    assert_eq!(w.launch("T", false).await.unwrap(), LaunchAction::Submitted);
    assert_eq!(
        w.slurm.argvs(),
        [
            name_probe(),
            w.slurm.argvs()[1].clone(),
            name_probe(),
            vec!["scontrol".into(), "release".into(), "4242".into()],
            by_id(4242)
        ]
    );
    assert_eq!(w.slurm.argvs()[1][0], "sbatch");
    assert_eq!(w.record("T"), (Some(4242), Some("n0007".into())));
    w.slurm.assert_drained();
}

/// 12, 16: the id is durable before the first poll; a poll that keeps failing is "outcome
/// unknown, it is recorded", and nothing is cancelled.
#[tokio::test]
async fn b12_b16_id_is_durable_before_the_first_poll() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(6789));
    for _ in 0..3 {
        w.q().by_id.push_back(unknown("ssh: connect timeout"));
    }
    let (msg, kind) = err_text(w.launch("T", true).await);
    assert_eq!(kind, "unknown");
    assert!(
        msg.contains("could not poll Slurm job 6789") && msg.contains("It is recorded"),
        "{msg}"
    );
    let calls = w.slurm.calls();
    assert_eq!(
        calls[2].journal,
        ["SessionLaunchIntent", "SessionJobSubmitted"],
        "the id was written before the probe that decides the hold"
    );
    let first_poll = calls.iter().find(|c| c.argv == by_id(6789)).unwrap();
    assert_eq!(
        first_poll.journal,
        [
            "SessionLaunchIntent",
            "SessionJobSubmitted",
            "SessionHoldDecided",
            "SessionHoldSettled"
        ],
        "the id and the release were written before the first poll"
    );
    let sbatch = calls.iter().find(|c| c.argv[0] == "sbatch").unwrap();
    assert_eq!(
        sbatch.journal,
        ["SessionLaunchIntent"],
        "the intent precedes sbatch"
    );
    assert!(!w.slurm.called("scancel"));
    assert_eq!(w.record("T"), (Some(6789), None));
}

/// 13: PENDING, then RUNNING on a node: the node is recorded.
#[tokio::test]
async fn b13_pending_then_running() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(5));
    w.q()
        .by_id
        .push_back(live(&row("5", "PENDING", "", T, NAME)));
    w.q()
        .by_id
        .push_back(live(&row("5", "RUNNING", "n0007.savio4", T, NAME)));
    w.launch("T", true).await.unwrap();
    assert_eq!(w.record("T"), (Some(5), Some("n0007.savio4".into())));
}

/// 14: the job ends before it runs: "ended before" with sacct's state; the id stays
/// recorded; no scancel.
#[tokio::test]
async fn b14_job_ends_before_it_runs() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(5));
    w.q().by_id.push_back(invalid_id());
    let sacct = "5|5|FAILED|1:0|0:0|2026-11-29T16:00:00|2026-11-29T16:00:01|2026-11-29T16:00:02|00:00:01|01:00:00|n1|1|100M|savio4_htc|co_carleton|normal|u|sucoder-sample\n";
    w.q().sacct.push_back(Answer::Live(
        dispatch::slurm::sacct::parse_rows(sacct).unwrap_or_else(|e| panic!("{e}")),
    ));
    let (msg, kind) = err_text(w.launch("T", true).await);
    assert_eq!(kind, "failed");
    assert!(
        msg.contains("ended before") && msg.contains("FAILED"),
        "{msg}"
    );
    assert!(msg.contains("job-sample-5.out"), "{msg}");
    assert_eq!(w.record("T").0, Some(5));
    assert!(!w.slurm.called("scancel"));
    // A terminal state in squeue itself needs no sacct.
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(6));
    w.q()
        .by_id
        .push_back(live(&row("6", "FAILED", "n1", T, NAME)));
    let (msg, _) = err_text(w.launch("T", true).await);
    assert!(
        msg.contains("ended before") && msg.contains("FAILED"),
        "{msg}"
    );
    w.slurm.assert_drained();
}

/// 15: still PENDING when the budget is spent; the state word is never stored as a node.
#[tokio::test]
async fn b15_still_pending_after_the_budget() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(5));
    for _ in 0..1000 {
        w.q()
            .by_id
            .push_back(live(&row("5", "PENDING", "", T, NAME)));
    }
    let (msg, kind) = err_text(w.launch("T", true).await);
    assert_eq!(kind, "failed");
    assert!(
        msg.contains("still PENDING") && msg.contains("It is recorded"),
        "{msg}"
    );
    assert_eq!(w.record("T"), (Some(5), None));
}

/// What the session has when a launch (or its dry run) begins.
#[derive(Clone, Copy, Debug)]
enum Before {
    NoRecord,
    Recorded(&'static str),
    RecordedGone,
}

/// Script the answers `scenario` gives: the recorded job's probe, the name probe (a live job
/// of this target, 7000, or nothing), and for a launch the calls after its decision (the wait
/// out of an ending job, a submission and its first poll).
fn script(w: &World, (before, by_name): (Before, bool), launch: bool) {
    let mut q = w.q();
    let found = || live(&row("7000", "RUNNING", "n2", T, NAME));
    match before {
        Before::Recorded(state) => {
            q.by_id.push_back(live(&row("4242", state, "n1", T, NAME)));
            if launch && state == "PENDING" {
                q.by_id
                    .push_back(live(&row("4242", "RUNNING", "n1", T, NAME)));
            }
            if launch && state == "COMPLETING" {
                q.by_id.push_back(invalid_id());
                q.sacct.push_back(no_accounting());
            }
        }
        Before::RecordedGone => {
            q.by_id.push_back(invalid_id());
            if launch {
                q.sacct.push_back(no_accounting());
            }
        }
        Before::NoRecord => {}
    }
    q.by_name_else = Some(if by_name { found() } else { gone() });
    if launch && !by_name {
        q.sbatch.push_back(submitted(5000));
        q.by_id_else = Some(live(&row("5000", "RUNNING", "n1", T, NAME)));
    }
}

/// Issue 22 item 1: `session launch --dry-run` answers with the decision the launch then acts
/// on, over every case of the recorded job (none, live in each kind of state, ending, gone)
/// and of the name probe (a live job of this target, or none): reuse → reused, adopt →
/// adopted, submit or wait-then-submit → submitted, with the same job for the first two.
#[tokio::test]
async fn a_launch_dry_run_answers_what_the_launch_then_does() {
    use dispatch::ops::session::dry_run::{launch_dry_run, Would};
    let befores = [
        Before::NoRecord,
        Before::Recorded("RUNNING"),
        Before::Recorded("PENDING"),
        Before::Recorded("SUSPENDED"),
        Before::Recorded("COMPLETING"),
        Before::RecordedGone,
    ];
    for before in befores {
        for by_name in [false, true] {
            let scenario = (before, by_name);
            let worlds = [World::new(), World::new()];
            for w in &worlds {
                if !matches!(before, Before::NoRecord) {
                    w.seed("T", 4242, T).await;
                }
            }
            let req = LaunchRequest {
                mirror: "sample".into(),
                target: "T".into(),
                detached: true,
                ..LaunchRequest::default()
            };
            script(&worlds[0], scenario, false);
            let env = env(&worlds[0].config, &worlds[0].state, &worlds[0].slurm);
            let plan = launch_dry_run(&env, &req).await.unwrap();
            script(&worlds[1], scenario, true);
            let done = worlds[1].launch_req(req).await.unwrap();
            let expected = match plan.would {
                Would::Reuse => LaunchAction::Reused,
                Would::Adopt => LaunchAction::Adopted,
                Would::Submit | Would::WaitThenSubmit => LaunchAction::Submitted,
            };
            assert_eq!(
                done.action, expected,
                "{scenario:?}: the dry run said {:?}",
                plan.would
            );
            if matches!(plan.would, Would::Reuse | Would::Adopt) {
                assert_eq!(plan.job_id, Some(done.job_id), "{scenario:?}");
            }
            let acted: Vec<_> = worlds[0]
                .slurm
                .argvs()
                .into_iter()
                .filter(|a| a[0] != "squeue")
                .collect();
            assert!(
                acted.is_empty(),
                "{scenario:?}: the dry run acted: {acted:?}"
            );
        }
    }
}

/// 17: the recorded job runs: no sbatch, reused.
#[tokio::test]
async fn b17_recorded_running_job_is_reused() {
    let w = World::new();
    w.seed("T", 4242, T).await;
    w.q()
        .by_id
        .push_back(live(&row("4242", "RUNNING", "n1", T, NAME)));
    assert_eq!(w.launch("T", false).await.unwrap(), LaunchAction::Reused);
    assert_eq!(w.slurm.argvs(), [by_id(4242)]);
}

/// 18: SUSPENDED and CONFIGURING count as live for a detached launch. Departure from sucoder:
/// COMPLETING is ending, never reused (b18b).
#[tokio::test]
async fn b18_other_live_states_are_reused_detached() {
    for state in ["SUSPENDED", "CONFIGURING"] {
        let w = World::new();
        w.seed("T", 4242, T).await;
        w.q()
            .by_id
            .push_back(live(&row("4242", state, "", T, NAME)));
        assert_eq!(
            w.launch("T", true).await.unwrap(),
            LaunchAction::Reused,
            "{state}"
        );
        assert!(!w.slurm.called("sbatch"));
    }
}

/// 18b: a COMPLETING recorded job is waited out (it is gone seconds later), then replaced.
#[tokio::test]
async fn b18b_a_completing_job_is_waited_out_then_replaced() {
    let w = World::new();
    w.seed("T", 4242, T).await;
    w.q()
        .by_id
        .push_back(live(&row("4242", "COMPLETING", "n1", T, NAME)));
    w.q().by_id.push_back(invalid_id());
    w.q().sacct.push_back(no_accounting());
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(5000));
    w.q()
        .by_id
        .push_back(live(&row("5000", "RUNNING", "n1", T, NAME)));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Submitted);
    assert_eq!(w.record("T").0, Some(5000));
}

/// 19, as issue 21 item 7 has it: a PENDING recorded job is waited for within --wait like a
/// new one, detached or not: reused once it runs (with its node), else the launch fails saying
/// it is still pending. Never an sbatch. (sucoder refused an interactive launch at once.)
#[tokio::test]
async fn b19_a_pending_recorded_job_is_waited_for() {
    for detached in [false, true] {
        let w = World::new();
        w.seed("T", 4242, T).await;
        w.q()
            .by_id
            .push_back(live(&row("4242", "PENDING", "", T, NAME)));
        w.q()
            .by_id
            .push_back(live(&row("4242", "RUNNING", "n1", T, NAME)));
        assert_eq!(w.launch("T", detached).await.unwrap(), LaunchAction::Reused);
        assert!(!w.slurm.called("sbatch"));

        let w = World::new();
        w.seed("T", 4242, T).await;
        w.q().by_id_else = Some(live(&row("4242", "PENDING", "", T, NAME)));
        let (msg, kind) = err_text(w.launch("T", detached).await);
        assert_eq!(kind, "failed");
        assert!(
            msg.contains("4242") && msg.contains("still PENDING"),
            "{msg}"
        );
        assert!(!w.slurm.called("sbatch"));
    }
}

/// 20: the record probe fails: fail closed with exit 4, no sbatch, record unchanged.
#[tokio::test]
async fn b20_record_probe_failure_fails_closed() {
    let w = World::new();
    w.seed("T", 4242, T).await;
    let before = session_kinds(&w.state.join("journal"));
    w.q().by_id.push_back(unknown("ssh: connect timeout"));
    let (msg, kind) = err_text(w.launch("T", true).await);
    assert_eq!(kind, "unknown");
    assert!(msg.contains("could not verify Slurm job 4242"), "{msg}");
    assert_eq!(w.slurm.programs(), ["squeue"], "no name probe, no sbatch");
    assert_eq!(session_kinds(&w.state.join("journal")), before);
}

/// 21: the recorded job is gone and the name probe is empty: sbatch, the new id recorded.
#[tokio::test]
async fn b21_gone_record_then_submit() {
    let w = World::new();
    w.seed("T", 4242, T).await;
    w.q().by_id.push_back(invalid_id());
    w.q().sacct.push_back(no_accounting());
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(5000));
    w.q()
        .by_id
        .push_back(live(&row("5000", "RUNNING", "n1", T, NAME)));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Submitted);
    assert_eq!(w.record("T").0, Some(5000));
    assert!(session_kinds(&w.state.join("journal")).contains(&"SessionCleared".to_owned()));
}

/// 22, 23: a lost record (no state at all) and a matching live job: adopted, no sbatch, and
/// the adoption is durable before anything else is done with the job.
#[tokio::test]
async fn b22_lost_record_adopts_by_name() {
    let w = World::new();
    w.q()
        .by_name
        .push_back(live(&row("4242", "RUNNING", "n1", T, NAME)));
    assert_eq!(w.launch("T", false).await.unwrap(), LaunchAction::Adopted);
    assert_eq!(w.slurm.argvs(), [name_probe()]);
    assert_eq!(w.record("T"), (Some(4242), Some("n1".into())));
    assert_eq!(
        session_kinds(&w.state.join("journal")),
        ["SessionAdopted", "SessionNodeResolved"]
    );
}

/// 24: a job of the same name on another target is reported and does not block.
#[tokio::test]
async fn b24_other_targets_job_does_not_block() {
    let w = World::new();
    w.q()
        .by_name
        .push_back(live(&row("4242", "RUNNING", "n1", OTHER, NAME)));
    w.q().sbatch.push_back(submitted(5000));
    w.q()
        .by_id
        .push_back(live(&row("5000", "RUNNING", "n1", T, NAME)));
    let r = w
        .launch_req(LaunchRequest {
            mirror: "sample".into(),
            target: "T".into(),
            detached: true,
            ..LaunchRequest::default()
        })
        .await
        .unwrap();
    assert_eq!((r.action, r.job_id.get()), (LaunchAction::Submitted, 5000));
    let note = r.warnings.join("\n");
    assert!(
        note.contains("4242") && note.contains("different target (U)"),
        "{note}"
    );
}

/// 25, departure from sucoder (which failed open: "a failed probe does not block"): with no
/// record, a failed name probe blocks (exit 4, nothing submitted, held or not). A job of this
/// session may run (a lost state directory, another state directory), and even a held job
/// beside it is a second job in the queue (the simulation's `failed_probe_gap`).
#[tokio::test]
async fn b25_failed_name_probe_blocks() {
    let w = World::new();
    // Every probe fails: the launch asks again within its --wait, then blocks.
    w.q().by_name_else = Some(unknown("slurm_load_jobs error: Socket timed out"));
    let (msg, kind) = err_text(
        w.launch_req(LaunchRequest {
            mirror: "sample".into(),
            target: "T".into(),
            detached: true,
            ..LaunchRequest::default()
        })
        .await,
    );
    assert_eq!(kind, "unknown");
    assert!(
        msg.contains("the name probe failed") && msg.contains("nothing was submitted"),
        "{msg}"
    );
    let programs = w.slurm.programs();
    assert!(
        programs.len() > 1 && programs.iter().all(|p| p == "squeue"),
        "{programs:?}"
    );
    w.slurm.assert_drained();
}

/// Departure from sucoder: when the record says an earlier submission may have created a job,
/// a failed name probe blocks (exit 4): submitting could make the second job.
#[tokio::test]
async fn b25b_failed_probe_blocks_when_a_job_may_exist() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q()
        .sbatch
        .push_back(Err(action_unknown("Socket timed out", None)));
    err_text(w.launch("T", true).await);
    w.q().by_name_else = Some(unknown("slurm_load_jobs error: Socket timed out"));
    let (msg, kind) = err_text(w.launch("T", true).await);
    assert_eq!(kind, "unknown");
    assert!(msg.contains("may have created a job"), "{msg}");
    let programs = w.slurm.programs();
    assert_eq!(programs[..3], ["squeue", "sbatch", "squeue"]);
    assert!(programs[3..].iter().all(|p| p == "squeue"), "{programs:?}");
}

/// 26: an array element of the same name is never adopted (neither 4242 nor 42423).
#[tokio::test]
async fn b26_array_element_is_not_adopted() {
    let w = World::new();
    w.q()
        .by_name
        .push_back(live(&row("4242_3", "RUNNING", "n1", T, NAME)));
    w.q().sbatch.push_back(submitted(5000));
    w.q()
        .by_id
        .push_back(live(&row("5000", "RUNNING", "n1", T, NAME)));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Submitted);
    assert_eq!(w.record("T").0, Some(5000));
}

/// 27: two matching jobs: the newest is adopted and the other is reported.
#[tokio::test]
async fn b27_newest_of_two_matches_is_adopted() {
    let w = World::new();
    let text =
        row("39000001", "RUNNING", "n1", T, NAME) + &row("39000077", "RUNNING", "n2", T, NAME);
    w.q().by_name.push_back(live(&text));
    let r = w
        .launch_req(LaunchRequest {
            mirror: "sample".into(),
            target: "T".into(),
            detached: true,
            ..LaunchRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(
        (r.action, r.job_id.get()),
        (LaunchAction::Adopted, 39000077)
    );
    assert!(
        r.warnings
            .join(" ")
            .contains("more than one live job matches"),
        "{:?}",
        r.warnings
    );
    assert!(r.warnings.join(" ").contains("39000001"));
}

/// 28, departure from sucoder: a malformed line of this job name is a job that exists and
/// cannot be read, so it blocks a submission (exit 4) instead of being ignored; a good line
/// beside it is still adopted.
#[tokio::test]
async fn b28_malformed_lines_block_a_submission() {
    let w = World::new();
    w.q().by_name_else = Some(unparsable("4242|RUNNING|savio4_htc|co_carleton\nabc|x\n"));
    let (msg, kind) = err_text(w.launch("T", true).await);
    assert_eq!(kind, "unknown", "{msg}");
    assert!(
        msg.contains("Nothing was submitted") && msg.contains("abc|x"),
        "{msg}"
    );
    let w = World::new();
    let text = format!("garbage\n{}", row("4242", "RUNNING", "n1", T, NAME));
    w.q().by_name.push_back(unparsable(&text));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Adopted);
    assert_eq!(w.record("T").0, Some(4242));
}

/// 29: the id the record probe just proved gone is skipped by the name probe.
#[tokio::test]
async fn b29_the_gone_id_is_not_adopted_again() {
    let w = World::new();
    w.seed("T", 4242, T).await;
    w.q().by_id.push_back(invalid_id());
    w.q().sacct.push_back(no_accounting());
    w.q()
        .by_name
        .push_back(live(&row("4242", "RUNNING", "n1", T, NAME)));
    w.q().sbatch.push_back(submitted(5000));
    w.q()
        .by_id
        .push_back(live(&row("5000", "RUNNING", "n1", T, NAME)));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Submitted);
    assert_eq!(w.record("T").0, Some(5000));
}

/// 30: sbatch exits non-zero: "A job MAY have been submitted"; no job id recorded.
#[tokio::test]
async fn b30_failed_sbatch_says_a_job_may_exist() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(Err(action_unknown(
        "sbatch: error: Batch job submission failed: Socket timed out",
        None,
    )));
    let (msg, _) = err_text(w.launch("T", true).await);
    assert!(msg.contains("A job MAY have been submitted"), "{msg}");
    assert_eq!(w.record("T").0, None);
    assert!(!session_kinds(&w.state.join("journal")).contains(&"SessionJobSubmitted".to_owned()));
}

/// 31: recording the id fails after sbatch returned it: the error names the job and
/// `scancel <id>`, and says the next launch finds it.
#[tokio::test]
async fn b31_unrecorded_id_names_the_job_and_scancel() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(8899));
    // Break the journal mid-file the moment sbatch returns: the writer then refuses.
    w.slurm
        .after("sbatch", |journal| corrupt_first_frame(Path::new(journal)));
    let (msg, kind) = err_text(w.launch("T", true).await);
    assert_eq!(kind, "unknown");
    assert!(
        msg.contains("8899") && msg.contains("scancel 8899"),
        "{msg}"
    );
}

/// Mid-file damage that the next writer finds: a writer that opens from its checkpoint checks
/// only the tail after it (journal-format.md §7.2), so the checkpoint goes too, and the open
/// classifies the whole journal.
fn corrupt_first_frame(journal: &Path) {
    let seg = journal.join("segment-00000001.djl");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[96 + 30] ^= 0xff;
    std::fs::write(&seg, bytes).unwrap();
    let _ = std::fs::remove_file(journal.join("CHECKPOINT"));
}

// ---------------------------------------------------------------- unconfined (salloc)

/// 35, 39: a recorded salloc job without a node is resolved by the record probe; no salloc.
#[tokio::test]
async fn b35_recorded_job_without_node_gets_its_node() {
    let w = World::new();
    w.q().by_name.push_back(gone());
    w.q().salloc.push_back(Ok(dispatch::slurm::Allocated {
        job_id: JobId::new(777).unwrap(),
    }));
    w.q().by_id.push_back(unknown("x"));
    w.q().by_id.push_back(unknown("x"));
    w.q().by_id.push_back(unknown("x"));
    err_text(w.launch("U", true).await);
    assert_eq!(
        w.record("U"),
        (Some(777), None),
        "40: the id persisted, the node not"
    );
    w.slurm.reset();
    w.q()
        .by_id
        .push_back(live(&row("777", "RUNNING", "n0101.savio3", OTHER, NAME)));
    assert_eq!(w.launch("U", true).await.unwrap(), LaunchAction::Reused);
    assert_eq!(w.record("U"), (Some(777), Some("n0101.savio3".into())));
    assert!(!w.slurm.called("salloc"));
}

/// 36, 38: the recorded salloc job: unknown blocks (exit 4), gone clears and allocates.
#[tokio::test]
async fn b36_b38_unconfined_record_probe() {
    let w = World::new();
    w.seed("U", 777, OTHER).await;
    w.q().by_id.push_back(unknown("ssh: connect"));
    let (_, kind) = err_text(w.launch("U", true).await);
    assert_eq!(kind, "unknown");
    assert!(!w.slurm.called("salloc"));
    assert_eq!(w.record("U").0, Some(777));
    w.q().by_id.push_back(invalid_id());
    w.q().sacct.push_back(no_accounting());
    w.q().by_name.push_back(gone());
    w.q().salloc.push_back(Ok(dispatch::slurm::Allocated {
        job_id: JobId::new(778).unwrap(),
    }));
    w.q()
        .by_id
        .push_back(live(&row("778", "RUNNING", "n1", OTHER, NAME)));
    assert_eq!(w.launch("U", true).await.unwrap(), LaunchAction::Submitted);
    assert_eq!(w.record("U").0, Some(778));
}

// ---------------------------------------------------------------- release

/// 43, departed from (issue 10 item 8): nothing recorded: release asks Slurm by name, as launch
/// does, and only a listing without a live job of this target is "nothing to release"; one
/// that failed is an unknown outcome (exit 4), never a false "nothing".
#[tokio::test]
async fn b43_nothing_to_release() {
    let w = World::new();
    let env = env(&w.config, &w.state, &w.slurm);
    // Another target's job of this name is not this session's.
    w.q()
        .by_name
        .push_back(live(&row("9", "RUNNING", "n1", OTHER, NAME)));
    let r = release(&env, "sample", "T", None).await.unwrap();
    assert_eq!(r.action, ReleaseAction::Nothing);
    assert_eq!(w.slurm.argvs(), [name_probe()]);
    w.q().by_name.push_back(unknown("Socket timed out"));
    let (msg, kind) = err_text(release(&env, "sample", "T", None).await);
    assert_eq!(kind, "unknown", "{msg}");
    assert!(!w.slurm.called("scancel"));
    w.slurm.assert_drained();
}

/// 44, 48: one scancel, then proof that it is gone; the record is cleared; scancel's stderr
/// is passed on.
#[tokio::test]
async fn b44_b48_release_cancels_and_proves() {
    let w = World::new();
    w.seed("T", 4242, T).await;
    w.q()
        .scancel
        .push_back(scancel(0, "scancel: error: Invalid job id specified", 4242));
    w.q()
        .by_id
        .push_back(live(&row("4242", "COMPLETING", "n1", T, NAME)));
    w.q()
        .by_id
        .push_back(live(&row("4242", "CANCELLED", "n1", T, NAME)));
    w.q().by_name.push_back(gone());
    let env = env(&w.config, &w.state, &w.slurm);
    let r = release(&env, "sample", "T", JobId::new(4242))
        .await
        .unwrap();
    assert_eq!(r.action, ReleaseAction::Released);
    assert_eq!(
        r.proof.as_deref(),
        Some("cancelled: squeue shows job 4242 CANCELLED")
    );
    assert!(r.warnings.join(" ").contains("Invalid job id specified"));
    // The name probe last: no other live job of this session's name and target is left.
    assert_eq!(
        w.slurm.argvs(),
        [
            vec!["scancel".to_owned(), "4242".into()],
            by_id(4242),
            by_id(4242),
            name_probe(),
            // The name probe answered empty: the user's listing vouches for it.
            mine_listing()
        ]
    );
    assert_eq!(w.record("T").0, None);
    let calls = w.slurm.calls();
    assert_eq!(calls[0].journal.last().unwrap(), "SessionCancelIntent");
}

/// 45: scancel fails: exit 1 and the record unchanged; no answer at all: exit 4.
#[tokio::test]
async fn b45_failed_scancel_keeps_the_record() {
    let w = World::new();
    w.seed("T", 4242, T).await;
    w.q()
        .scancel
        .push_back(scancel(1, "scancel: error: Access/permission denied", 4242));
    let env = env(&w.config, &w.state, &w.slurm);
    let (msg, kind) = err_text(release(&env, "sample", "T", JobId::new(4242)).await);
    assert_eq!(kind, "failed");
    assert!(msg.contains("scancel returned exit 1"), "{msg}");
    assert_eq!(w.record("T").0, Some(4242));
    w.q()
        .scancel
        .push_back(Err(action_unknown("timed out", None)));
    let (_, kind) = err_text(release(&env, "sample", "T", JobId::new(4242)).await);
    assert_eq!(kind, "unknown");
    assert_eq!(w.record("T").0, Some(4242));
}

/// 46: two sessions hold one job: releasing one only detaches it; no scancel.
#[tokio::test]
async fn b46_shared_job_is_only_detached() {
    let w = World::new();
    w.seed("T", 12345, T).await;
    w.seed("plain", 12345, ("savio4_htc", "co_plain", "other_qos"))
        .await;
    let env = env(&w.config, &w.state, &w.slurm);
    // The shared job shows up by name, but another session holds it: it is not cancelled.
    w.q().by_name.push_back(live(&row(
        "12345",
        "RUNNING",
        "n1",
        ("savio4_htc", "co_plain", "other_qos"),
        NAME,
    )));
    let r = release(&env, "sample", "plain", JobId::new(12345))
        .await
        .unwrap();
    assert_eq!(r.action, ReleaseAction::Detached);
    assert_eq!(r.holders, ["sample--T"]);
    assert_eq!(w.slurm.argvs(), [name_probe()], "no scancel");
    assert_eq!(w.record("plain").0, None);
    assert_eq!(w.record("T").0, Some(12345));
}

/// A release that was agreed for one job does nothing if the session holds another by now.
#[tokio::test]
async fn release_refuses_a_changed_session() {
    let w = World::new();
    w.seed("T", 4242, T).await;
    let env = env(&w.config, &w.state, &w.slurm);
    let (_, kind) = err_text(release(&env, "sample", "T", JobId::new(1)).await);
    assert_eq!(kind, "failed");
    assert!(w.slurm.calls().is_empty());
}

/// A session that held job 111 and started 222 to replace it (as renew does), with 111 not
/// yet seen to end: it holds 222 and still records 111 as replaced.
async fn replaced_111_by_222() -> World {
    let w = World::new();
    w.seed("T", 111, T).await;
    // 111 is excluded from adoption, so the launch submits.
    w.q()
        .by_name
        .push_back(live(&row("111", "RUNNING", "n1", T, NAME)));
    w.q().sbatch.push_back(submitted(222));
    w.q()
        .by_id
        .push_back(live(&row("222", "RUNNING", "n2", T, NAME)));
    w.launch_req(LaunchRequest {
        mirror: "sample".into(),
        target: "T".into(),
        detached: true,
        replacing: JobId::new(111),
        ..LaunchRequest::default()
    })
    .await
    .unwrap();
    w
}

/// The job a renewal replaced, never seen to end (its replacement was still pending, or the
/// old job's cancel failed), is settled by release: forgotten once squeue shows it gone, and
/// the session's own job is released as usual. Nothing stays stale.
#[tokio::test]
async fn release_settles_the_job_a_renewal_replaced() {
    let w = replaced_111_by_222().await;
    let state = read_state(&w.state).unwrap();
    let s = state.sessions.get(&SessionKey::new("sample", "T")).unwrap();
    assert_eq!((s.job_id(), s.replaced), (JobId::new(222), JobId::new(111)));
    w.slurm.assert_drained();
    w.slurm.reset();

    // 111 has ended meanwhile; 222 runs and is released.
    w.q().by_id.push_back(invalid_id());
    w.q().scancel.push_back(scancel(0, "", 222));
    w.q().by_id.push_back(invalid_id());
    w.q().by_name.push_back(gone());
    let env = env(&w.config, &w.state, &w.slurm);
    let r = release(&env, "sample", "T", JobId::new(222)).await.unwrap();
    assert_eq!(r.action, ReleaseAction::Released);
    let old = r.replaced.as_ref().expect("the replaced job is reported");
    assert_eq!(
        (old.job_id.get(), old.action),
        (111, ReplacedAction::Cleared)
    );
    let calls: Vec<(String, String)> = w
        .slurm
        .argvs()
        .iter()
        .map(|a| (a[0].clone(), a.last().unwrap().clone()))
        .collect();
    let expected = [
        ("squeue", "--jobs=111"),
        ("scancel", "222"),
        ("squeue", "--jobs=222"),
        ("squeue", "--name=sucoder-sample"),
        ("squeue", "--me"),
    ];
    assert_eq!(
        calls,
        expected.map(|(p, a)| (p.to_owned(), a.to_owned())),
        "111 is only looked at, 222 is cancelled and proven gone"
    );
    w.slurm.assert_drained();
    let state = read_state(&w.state).unwrap();
    assert!(
        state
            .sessions
            .get(&SessionKey::new("sample", "T"))
            .is_none(),
        "the session still records something"
    );
}

/// A replaced job that still runs is cancelled by release, like the session's own.
#[tokio::test]
async fn release_cancels_a_replaced_job_that_still_runs() {
    let w = replaced_111_by_222().await;
    w.slurm.reset();
    w.q()
        .by_id
        .push_back(live(&row("111", "RUNNING", "n1", T, NAME)));
    w.q().scancel.push_back(scancel(0, "", 111));
    w.q().by_id.push_back(invalid_id());
    w.q().scancel.push_back(scancel(0, "", 222));
    w.q().by_id.push_back(invalid_id());
    w.q().by_name.push_back(gone());
    let env = env(&w.config, &w.state, &w.slurm);
    let r = release(&env, "sample", "T", JobId::new(222)).await.unwrap();
    let old = r.replaced.as_ref().unwrap();
    assert_eq!(
        (old.job_id.get(), old.action),
        (111, ReplacedAction::Released)
    );
    assert_eq!(r.action, ReleaseAction::Released);
    w.slurm.assert_drained();
    assert_eq!(w.record("T").0, None);
}

/// A session whose target was since removed from the configuration can still be released
/// (by job id: no target is needed for that); launching on that target is still refused.
#[tokio::test]
async fn a_session_on_a_removed_target_can_still_be_released() {
    let w = World::new();
    w.seed("T", 4242, T).await;
    let without_t = Config::parse(
        "[targets.plain]\npartition = \"savio4_htc\"\naccount = \"co_carleton\"\n",
        Path::new("/test/config.toml"),
    )
    .unwrap();
    let env = env(&without_t, &w.state, &w.slurm);
    w.q().scancel.push_back(scancel(0, "", 4242));
    w.q().by_id.push_back(invalid_id());
    let r = release(&env, "sample", "T", JobId::new(4242))
        .await
        .unwrap();
    assert_eq!(r.action, ReleaseAction::Released);
    w.slurm.assert_drained();
    assert_eq!(w.record("T").0, None);
    let (msg, kind) = err_text(release(&env, "sample", "gone-target", None).await);
    assert_eq!(kind, "usage", "{msg}");
    assert!(msg.contains("no target \"gone-target\""), "{msg}");
    let launched = launch(
        &env,
        &LaunchRequest {
            mirror: "sample".into(),
            target: "T".into(),
            ..LaunchRequest::default()
        },
    )
    .await;
    assert!(launched.is_err(), "a launch on a removed target went ahead");
}

// ---------------------------------------------------------------- attach

/// 49, 51, 52: attach runs srun for a running job, refuses without a job (no Slurm call) and
/// for an ended job (record unchanged).
#[tokio::test]
async fn b49_b51_b52_attach() {
    let w = World::new();
    let env = env(&w.config, &w.state, &w.slurm);
    // Nothing recorded and nothing of this target by name (issue 10 item 8: it asks).
    w.q().by_name.push_back(gone());
    let (msg, _) = err_text(attach::plan(&env, "sample", "T", &[], None).await);
    assert!(msg.contains("no Slurm job recorded"), "{msg}");
    assert_eq!(w.slurm.argvs(), [name_probe(), mine_listing()]);
    w.slurm.reset();
    w.seed("T", 42, T).await;
    w.q()
        .by_id
        .push_back(live(&row("42", "RUNNING", "n1", T, NAME)));
    let plan = attach::plan(&env, "sample", "T", &["htop".into()], None)
        .await
        .unwrap();
    let argv: Vec<_> = plan.argv.iter().map(|a| a.to_str().unwrap()).collect();
    assert_eq!(argv, ["--jobid=42", "--overlap", "--pty", "htop"]);
    w.q().by_id.push_back(invalid_id());
    w.q().sacct.push_back(no_accounting());
    let (msg, _) = err_text(attach::plan(&env, "sample", "T", &[], None).await);
    assert!(msg.contains("the allocation has ended"), "{msg}");
    assert_eq!(w.record("T").0, Some(42));
}

/// 52 [recommend]: a job that is not running yet is refused with what to do, and a probe
/// that fails is an unknown outcome (exit 4) that changes nothing; neither runs srun.
#[tokio::test]
async fn attach_refuses_a_pending_job_and_a_failed_probe_changes_nothing() {
    let w = World::new();
    w.seed("T", 42, T).await;
    let env = env(&w.config, &w.state, &w.slurm);
    w.q()
        .by_id
        .push_back(live(&row("42", "PENDING", "", T, NAME)));
    let (msg, kind) = err_text(attach::plan(&env, "sample", "T", &[], None).await);
    assert_eq!(kind, "failed", "{msg}");
    assert!(msg.contains("PENDING, not running yet"), "{msg}");
    w.q()
        .by_id
        .push_back(unknown("slurm_load_jobs error: Socket timed out"));
    let (msg, kind) = err_text(attach::plan(&env, "sample", "T", &[], None).await);
    assert_eq!(kind, "unknown", "{msg}");
    assert!(msg.contains("could not check Slurm job 42"), "{msg}");
    assert!(!w.slurm.called("srun"));
    w.slurm.assert_drained();
    assert_eq!(w.record("T").0, Some(42), "the record is untouched");
}

// ---------------------------------------------------------------- records

/// 53: (mirror, target) pairs are independent sessions.
#[tokio::test]
async fn b53_sessions_per_target_are_independent() {
    let w = World::new();
    w.seed("T", 1, T).await;
    w.seed("U", 2, OTHER).await;
    assert_eq!((w.record("T").0, w.record("U").0), (Some(1), Some(2)));
}

// ---------------------------------------------------------------- sessions report

/// 61, 62, 66: the report asks `squeue --me` once and folds it with the journal.
#[tokio::test]
async fn b61_b62_report_asks_once() {
    let w = World::new();
    w.seed("T", 1, T).await;
    w.seed("U", 2, OTHER).await;
    let text = row("1", "RUNNING", "n1", T, NAME) + &row("3", "RUNNING", "n1", T, "sucoder-ghost");
    w.q().mine.push_back(live(&text));
    // Issue 38: the stale session's job, asked about once more, ended by preemption.
    w.q()
        .by_id
        .push_back(live(&row("2", "PREEMPTED", "n1", OTHER, NAME)));
    let env = env(&w.config, &w.state, &w.slurm);
    let r = report::sessions(&env).await.unwrap();
    assert_eq!(
        w.slurm.argvs(),
        [
            ["squeue", "--noheader", FORMAT, "--me"]
                .map(String::from)
                .to_vec(),
            by_id(2)
        ]
    );
    let t = r.targets.iter().find(|g| g.target == "T").unwrap();
    let ids: Vec<_> = t.jobs.iter().map(|j| (j.job_id, j.flags.clone())).collect();
    assert_eq!(ids, [(1, vec![]), (3, vec!["no session record"])]);
    assert_eq!(r.stale.len(), 1);
    assert_eq!(r.stale[0].job_id, Some(2));
    assert_eq!(
        r.stale[0].reason.as_deref(),
        Some("preempted: squeue shows job 2 PREEMPTED")
    );
    w.q()
        .mine
        .push_back(unknown("Unable to contact slurm controller"));
    let r = report::sessions(&env).await.unwrap();
    assert!(r.stale.is_empty());
    assert_eq!(r.unknown.len(), 2);
}

// ---------------------------------------------------------------- renew

fn settings(iterations: u64) -> RenewSettings {
    RenewSettings {
        drain_minutes: 20,
        poll: std::time::Duration::from_millis(1),
        max_iterations: Some(iterations),
        backoff: Backoff::new(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(1),
        ),
        stop: Default::default(),
    }
}

fn short(id: &str, state: &str, left: &str) -> String {
    format!("{id}|{id}|{state}|savio4_htc|co_carleton|carleton_htc4_normal|u|1|1|n1|{left}|2:00:00|N/A|N/A|None|{NAME}\n")
}

/// 69, 75: a draining job: its replacement is submitted (the old job, the only one with the
/// name, is not adopted), the old one is cancelled only after the new one runs; then hold.
#[tokio::test]
async fn b69_b75_drain_relaunches_then_cancels_the_old_job() {
    let w = World::new();
    w.seed("T", 111, T).await;
    w.q()
        .by_id
        .push_back(live(&short("111", "RUNNING", "10:00")));
    w.q()
        .by_name
        .push_back(live(&short("111", "RUNNING", "10:00")));
    w.q().sbatch.push_back(submitted(222));
    w.q()
        .by_id
        .push_back(live(&short("222", "PENDING", "2:00:00")));
    w.q()
        .by_id
        .push_back(live(&short("222", "RUNNING", "2:00:00")));
    w.q().scancel.push_back(scancel(0, "", 111));
    w.q().by_id.push_back(invalid_id());
    w.q()
        .by_id
        .push_back(live(&short("222", "RUNNING", "10:00:00")));
    let env = env(&w.config, &w.state, &w.slurm);
    let r = renew(&env, "sample", "T", &settings(2)).await.unwrap();
    assert_eq!(
        (
            r.job_id.get(),
            r.relaunched.iter().map(|j| j.get()).collect::<Vec<_>>(),
            r.cancelled.iter().map(|j| j.get()).collect::<Vec<_>>()
        ),
        (222, vec![222], vec![111])
    );
    let argvs = w.slurm.argvs();
    let probes: Vec<_> = argvs
        .iter()
        .filter(|a| a.len() == 5 && a[4].starts_with("--jobs="))
        .map(|a| a[4].clone())
        .collect();
    assert_eq!(
        probes,
        [
            "--jobs=111",
            "--jobs=222",
            "--jobs=222",
            "--jobs=111",
            "--jobs=222"
        ]
    );
    let programs = w.slurm.programs();
    let scancel_at = programs.iter().position(|p| p == "scancel").unwrap();
    let running_at = argvs.iter().position(|a| a == &by_id(222)).unwrap() + 1;
    assert!(
        running_at < scancel_at,
        "the old job is cancelled after the new one runs"
    );
    assert_eq!(argvs[scancel_at], ["scancel", "111"]);
    assert_eq!(w.record("T").0, Some(222));
    w.slurm.assert_drained();
}

/// 70: a lost job: relaunch, no scancel.
#[tokio::test]
async fn b70_lost_job_is_relaunched_without_cancel() {
    let w = World::new();
    w.seed("T", 111, T).await;
    w.q().by_id.push_back(invalid_id());
    w.q().by_id.push_back(invalid_id());
    w.q().sacct.push_back(no_accounting());
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(333));
    w.q()
        .by_id
        .push_back(live(&short("333", "RUNNING", "2:00:00")));
    let env = env(&w.config, &w.state, &w.slurm);
    let r = renew(&env, "sample", "T", &settings(1)).await.unwrap();
    assert_eq!(r.job_id.get(), 333);
    assert!(!w.slurm.called("scancel"));
    w.slurm.assert_drained();
}

/// 71, 72: a failing probe holds (no relaunch), and `--once` then answers unknown (exit 4),
/// never success naming a job it could not check; a failing relaunch of a draining job keeps
/// the old id, which is still live.
#[tokio::test]
async fn b71_b72_blips_hold_and_failed_relaunches_keep_the_job() {
    let w = World::new();
    w.seed("T", 111, T).await;
    w.q().by_id.push_back(unknown("Socket timed out"));
    let env = env(&w.config, &w.state, &w.slurm);
    let (msg, kind) = err_text(renew(&env, "sample", "T", &settings(1)).await);
    assert_eq!(kind, "unknown");
    assert!(msg.contains("could not check Slurm job 111"), "{msg}");
    assert!(msg.contains("nothing was relaunched"), "{msg}");
    assert_eq!(w.slurm.programs(), ["squeue"]);
    w.q()
        .by_id
        .push_back(live(&short("111", "RUNNING", "5:00")));
    w.q().by_name.push_back(gone());
    w.q()
        .sbatch
        .push_back(Err(dispatch::slurm::ActionError::Local("no".into())));
    let r = renew(&env, "sample", "T", &settings(1)).await.unwrap();
    assert_eq!((r.job_id.get(), r.failed_relaunches), (111, 1));
    assert!(!w.slurm.called("scancel"));
    assert_eq!(w.record("T").0, Some(111));
}

/// The simulation's `renew_gap` (seed 72): a lost job whose relaunch fails. `renew --once`
/// answered exit 0 naming the gone job; now a definite failure (sbatch could not run) is exit
/// 1 and an unknown outcome exit 4, each naming the job and `renew` to retry.
#[tokio::test]
async fn renew_never_succeeds_naming_a_gone_job() {
    for (sbatch, kind) in [
        (
            Err(dispatch::slurm::ActionError::Local("no".into())),
            "failed",
        ),
        (Err(action_unknown("Socket timed out", None)), "unknown"),
    ] {
        let w = World::new();
        w.seed("T", 111, T).await;
        w.q().by_id.push_back(invalid_id());
        w.q().by_id.push_back(invalid_id());
        w.q().sacct.push_back(no_accounting());
        w.q().by_name.push_back(gone());
        w.q().sbatch.push_back(sbatch);
        let env = env(&w.config, &w.state, &w.slurm);
        let (msg, got) = err_text(renew(&env, "sample", "T", &settings(1)).await);
        assert_eq!(got, kind, "{msg}");
        assert!(
            msg.contains("Slurm job 111") && msg.contains("is gone and its relaunch failed"),
            "{msg}"
        );
        assert!(msg.contains("dispatch session renew sample -T T"), "{msg}");
    }
}

// ---------------------------------------------------------------- bad input

/// Unknown target, missing partition/account, malformed config: a clear error before any
/// Slurm call and before the state directory is made.
#[tokio::test]
async fn bad_input_fails_before_any_slurm_call() {
    let w = World::new();
    let (msg, kind) = err_text(w.launch("nope", true).await);
    assert_eq!(kind, "usage");
    assert!(
        msg.contains("no target \"nope\"") && msg.contains("T, U, full, plain"),
        "{msg}"
    );
    for bad in [
        "[targets.x]\npartition = \"p\"\n",
        "[targets.x]\naccount = \"a\"\n",
        "[targets.x]\npartition = \"\"\naccount = \"a\"\n",
        "[targets.x\n",
    ] {
        assert!(Config::parse(bad, Path::new("c.toml")).is_err(), "{bad}");
    }
    let mut config = w.config.clone();
    config.targets.get_mut("T").unwrap().time = Some("soon".into());
    let env = env(&config, &w.state, &w.slurm);
    let req = LaunchRequest {
        mirror: "sample".into(),
        target: "T".into(),
        ..LaunchRequest::default()
    };
    let (msg, kind) = err_text(launch(&env, &req).await);
    assert_eq!(kind, "usage");
    assert!(msg.contains("targets.T.time"), "{msg}");
    let (_, kind) = err_text(
        launch(
            &env,
            &LaunchRequest {
                mirror: String::new(),
                target: "U".into(),
                ..LaunchRequest::default()
            },
        )
        .await,
    );
    assert_eq!(kind, "usage");
    assert!(w.slurm.calls().is_empty());
    assert!(!w.state.exists(), "nothing was created");
}

/// A mirror named on the command line with a configured mirror's token is refused (exit 3).
#[tokio::test]
async fn token_twins_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let config = Config::parse(
        "[targets.T]\npartition = \"p\"\naccount = \"a\"\n[mirrors.\"K Agg\"]\n",
        Path::new("c.toml"),
    )
    .unwrap();
    let slurm = Scripted::new(tmp.path());
    let env = env(&config, tmp.path(), &slurm);
    let (msg, kind) = err_text(
        launch(
            &env,
            &LaunchRequest {
                mirror: "K/Agg".into(),
                target: "T".into(),
                ..LaunchRequest::default()
            },
        )
        .await,
    );
    assert_eq!(kind, "refused");
    assert!(msg.contains("K Agg"), "{msg}");
    assert!(slurm.calls().is_empty());
}

/// 73: a stop request ends renew between steps (here: during its pause), the job left running
/// and untouched; a request made before the first step makes no Slurm call at all.
#[tokio::test]
async fn renew_stops_between_steps_and_leaves_the_job_running() {
    let w = World::new();
    w.seed("T", 111, T).await;
    let env = env(&w.config, &w.state, &w.slurm);
    let mut s = settings(1);
    s.max_iterations = None;
    s.poll = std::time::Duration::from_secs(30);
    s.stop.request();
    let r = renew(&env, "sample", "T", &s).await.unwrap();
    assert!(r.stopped && r.iterations == 0, "{r:?}");
    assert!(w.slurm.calls().is_empty());

    let mut s = settings(1);
    s.max_iterations = None;
    s.poll = std::time::Duration::from_secs(30);
    w.q()
        .by_id
        .push_back(live(&short("111", "RUNNING", "10:00:00")));
    let stop = std::sync::Arc::clone(&s.stop);
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        stop.request();
    });
    let started = std::time::Instant::now();
    let r = renew(&env, "sample", "T", &s).await.unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "it slept on"
    );
    assert!(r.stopped, "{r:?}");
    assert_eq!((r.iterations, r.job_id.get()), (1, 111));
    w.slurm.assert_drained();
    assert!(!w.slurm.called("scancel"));
    assert_eq!(w.record("T").0, Some(111));
}

/// Issue 10 item 12: a launch from another state directory submitted job 899 first; ours (900)
/// was submitted held, so it yields: cancelled before it ran, 899 adopted (and released, its
/// launcher may have died), one job.
#[tokio::test]
async fn a_younger_held_job_yields_to_the_older_racer() {
    let w = World::new();
    w.q().manual_hold = true;
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(900));
    let held = |id: &str| row(id, "PENDING", "", T, NAME).replace("|None|", "|JobHeldUser|");
    w.q()
        .by_name
        .push_back(live(&format!("{}{}", held("899"), held("900"))));
    w.q().scancel.push_back(scancel(0, "", 900));
    w.q().release.push_back(Ok(()));
    w.q()
        .by_id
        .push_back(live(&row("899", "RUNNING", "n1", T, NAME)));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Adopted);
    assert_eq!(
        w.slurm.programs(),
        ["squeue", "sbatch", "squeue", "scancel", "scontrol", "squeue"]
    );
    assert_eq!(w.slurm.argvs()[3], ["scancel", "900"]);
    assert_eq!(w.slurm.argvs()[4], ["scontrol", "release", "899"]);
    assert_eq!(w.record("T"), (Some(899), Some("n1".into())));
    w.slurm.assert_drained();
}

/// Leave the session's job 900 recorded and held: its launch could not list it after the held
/// sbatch (the state a launch killed before settling its hold leaves too).
async fn leave_900_held(w: &World) {
    w.q().manual_hold = true;
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(900));
    for _ in 0..3 {
        w.q()
            .by_name
            .push_back(unknown("squeue: error: Socket timed out"));
    }
    assert_eq!(err_text(w.launch("T", true).await).1, "unknown");
    w.slurm.assert_drained();
    w.slurm.clear_calls();
}

/// Issue 10 item 12: renew over a session whose job its launch left held would hold forever
/// (a held job is PENDING, "fine"); it settles the hold first, as launch and attach do.
#[tokio::test]
async fn renew_settles_a_job_left_held() {
    let w = World::new();
    leave_900_held(&w).await;
    let held = || live(&held_row(900, T, NAME));
    w.q().by_id.push_back(held());
    w.q().by_name.push_back(held());
    w.q().release.push_back(Ok(()));
    w.q()
        .by_id
        .push_back(live(&row("900", "RUNNING", "n1", T, NAME)));
    let env = env(&w.config, &w.state, &w.slurm);
    let r = renew(&env, "sample", "T", &settings(1)).await.unwrap();
    assert_eq!(r.job_id.get(), 900, "{r:?}");
    assert!(
        w.slurm
            .argvs()
            .contains(&vec!["scontrol".into(), "release".into(), "900".into()]),
        "{:?}",
        w.slurm.argvs()
    );
    assert!(!w.slurm.called("sbatch"));
    w.slurm.assert_drained();
}

/// Issue 10 item 12: the name probe after a held sbatch fails every time. Releasing blind
/// could run our job beside an older racer's, so the job stays held and recorded (exit 4,
/// saying the next launch settles it); the next launch does: one job, released.
#[tokio::test]
async fn a_held_job_the_probe_cannot_list_stays_held_until_the_next_launch() {
    let w = World::new();
    w.q().manual_hold = true;
    w.q().by_name.push_back(gone());
    w.q().sbatch.push_back(submitted(900));
    for _ in 0..3 {
        w.q().by_name.push_back(unknown(
            "squeue: error: slurm_receive_msg: Socket timed out",
        ));
    }
    let (text, kind) = err_text(w.launch("T", true).await);
    assert_eq!(kind, "unknown", "{text}");
    assert!(
        text.contains("900") && text.contains("stays held") && text.contains("session launch"),
        "{text}"
    );
    assert!(!w.slurm.called("scontrol"), "released blind");
    assert_eq!(w.record("T").0, Some(900));
    w.slurm.assert_drained();
    w.slurm.clear_calls();

    let held = || live(&held_row(900, T, NAME));
    w.q().by_id.push_back(held());
    w.q().by_name.push_back(held());
    w.q().release.push_back(Ok(()));
    // Released, it is waited for until it runs, as a new job is (issue 21 item 7).
    w.q()
        .by_id
        .push_back(live(&row("900", "RUNNING", "n1", T, NAME)));
    assert_eq!(w.launch("T", true).await.unwrap(), LaunchAction::Reused);
    assert_eq!(
        w.slurm.programs(),
        ["squeue", "squeue", "scontrol", "squeue"]
    );
    assert_eq!(w.slurm.argvs()[2], ["scontrol", "release", "900"]);
    w.slurm.assert_drained();
}

/// The journal's state as a command would read it; no journal yet is an empty state.
fn read_state(state_dir: &Path) -> Result<dispatch::state::State, dispatch::journal::JournalError> {
    match dispatch::journal::load(&state_dir.join("journal")) {
        Err(dispatch::journal::JournalError::Missing(_)) => Ok(Default::default()),
        read => read.map(|l| l.state),
    }
}
