//! With slurmctld stopped, every query is `Unknown` within its timeout (never `Gone`),
//! and actions report an unknown outcome. Then slurmctld is started again.
//!
//! Isolated from every other real-cluster test: its own test binary (cargo runs test
//! binaries one after another) *and* the exclusive side of the machine-wide cluster
//! lock that all real-cluster tests take (tests/support), so no other test, thread or
//! concurrent `cargo test` runs against the cluster while the controller is down.
//! Run alone with `cargo test --test slurm_ctld_down`.

mod support;

use std::time::{Duration, Instant};

use dispatch::slurm::{
    AcctQuery, ActionError, Answer, BatchPayload, BatchRequest, JobId, JobName, JobQuery, Scheduler,
};
use support::{
    cluster_command, cluster_script, cluster_version, exclusive_lock, poll, require_cluster,
    run_bounded, scheduler,
};

/// Brings slurmctld back however the test ends.
struct RestartCtld;

impl Drop for RestartCtld {
    fn drop(&mut self) {
        let ok = run_bounded(cluster_command().arg("start"), Duration::from_secs(300));
        if !ok {
            eprintln!(
                "could not restart the Slurm {} cluster: run `tools/slurm-dev-cluster --slurm {} start`",
                cluster_version(),
                cluster_version()
            );
        }
    }
}

#[tokio::test]
async fn controller_down_means_unknown_within_the_timeout() {
    let _lock = exclusive_lock();
    let s = scheduler(Duration::from_secs(3));
    require_cluster(&s).await;
    let script = cluster_script();
    assert!(
        script.exists(),
        "{} missing: the cluster script lives in tools/; from another checkout set \
         DISPATCH_SLURM_DEV_CLUSTER=/path/to/slurm-dev-cluster",
        script.display()
    );

    let _restart = RestartCtld;
    assert!(
        run_bounded(cluster_command().arg("stop-ctld"), Duration::from_secs(120)),
        "{} stop-ctld failed",
        script.display()
    );

    // The clients need ~9 s (MessageTimeout=10) to give up by themselves; our 3 s bound
    // ends each call first. Budget: timeout + 2 s kill grace + slack for a busy machine.
    let bound = Duration::from_secs(3 + 2 + 3);
    let job = JobId::new(1).unwrap();
    let t0 = Instant::now();
    let a = s.list_jobs(&JobQuery::ids(vec![job])).await;
    assert!(t0.elapsed() < bound, "{:?}", t0.elapsed());
    assert!(matches!(a, Answer::Unknown(_)), "{a:?}");

    let t0 = Instant::now();
    let a = s.show_job(job).await;
    assert!(t0.elapsed() < bound, "{:?}", t0.elapsed());
    assert!(matches!(a, Answer::Unknown(_)), "{a:?}");

    assert!(matches!(s.list_steps(job).await, Answer::Unknown(_)));
    let mine = s.list_jobs(&JobQuery::mine()).await;
    assert!(
        mine.is_unknown(),
        "an empty-looking 'mine' would be a lie: {mine:?}"
    );

    // sacct talks to slurmdbd, which still answers (rows it has, or nothing); either
    // way accounting never says Gone.
    let q = AcctQuery {
        jobs: vec![job],
        names: vec![],
        since: chrono::Local::now().naive_local() - chrono::Duration::hours(1),
    };
    assert!(!s.accounting(&q).await.is_gone());

    let req = BatchRequest::new(
        JobName::new("dispatch-test-down").unwrap(),
        BatchPayload::Wrap("true".into()),
    );
    let t0 = Instant::now();
    let r = s.submit_batch(&req).await;
    assert!(t0.elapsed() < bound);
    assert!(matches!(r, Err(ActionError::Unknown { .. })), "{r:?}");
    assert!(matches!(
        s.cancel_job(job).await,
        Err(ActionError::Unknown { .. })
    ));

    drop(_restart);
    let back = poll(Duration::from_secs(60), || async {
        (!s.list_jobs(&JobQuery::mine()).await.is_unknown()).then_some(())
    })
    .await;
    assert!(
        back.is_some(),
        "the cluster did not answer again after `start`"
    );
}

/// Issue 21 item 8 on a real controller: a launch's name probe fails while slurmctld is down
/// (the probe fails closed: nothing is submitted while it cannot be read), and is asked again
/// within `--wait`; once the controller is back the same launch submits, one job.
#[tokio::test]
async fn a_launch_outlasts_a_controller_blip_within_its_wait() {
    let _lock = exclusive_lock();
    let s = scheduler(Duration::from_secs(3));
    require_cluster(&s).await;
    let tmp = tempfile::tempdir().unwrap();
    let prefix = format!("dt-blip-{}-", std::process::id());
    let config = tmp.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "job_name_prefix = \"{prefix}\"\n[targets.dbg]\npartition = \"debug\"\n\
             account = \"dev\"\ntime = \"00:05:00\"\nmem = \"100M\"\nconfined = true\n"
        ),
    )
    .unwrap();
    let _restart = RestartCtld;
    assert!(run_bounded(
        cluster_command().arg("stop-ctld"),
        Duration::from_secs(120)
    ));
    // `session launch m -T dbg --detached` with this test's state and config.
    let launch_cmd = || {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_dispatch"));
        c.arg("--state-dir")
            .arg(tmp.path().join("state"))
            .arg("--config")
            .arg(&config)
            .args([
                "--json",
                "session",
                "launch",
                "m",
                "-T",
                "dbg",
                "--detached",
            ])
            .env_remove("DISPATCH_FAILPOINTS");
        c
    };
    let launch = launch_cmd()
        .args(["--wait", "120"])
        .env("DISPATCH_SLURM_TIMEOUT", "3")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Long enough for the probe to fail at least once (one call is 3 s + the kill grace).
    tokio::time::sleep(Duration::from_secs(8)).await;
    drop(_restart);
    let out = launch.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    // The probe failed while the controller was down and was asked again: the blip did not
    // end the launch.
    assert!(
        stderr.contains("the name probe of") && stderr.contains("asking again"),
        "the failed probe was not said: {stderr}"
    );
    let answer = if out.status.code() == Some(1)
        && stderr.contains("Requested node configuration is not available")
    {
        // The controller answered before its node had registered again (seen on 24.11, whose
        // restart here sometimes leaves slurmd to re-register by itself): past the probe, the
        // launch met Slurm's own refusal, and created nothing. Once the node is back, the
        // same launch goes through.
        let back = poll(Duration::from_secs(60), || async {
            let out = std::process::Command::new("sinfo")
                .args(["-h", "-o", "%t"])
                .output()
                .ok()?;
            let states = String::from_utf8_lossy(&out.stdout).into_owned();
            states
                .lines()
                .any(|l| matches!(l.trim(), "idle" | "mix" | "alloc"))
                .then_some(())
        })
        .await;
        assert!(back.is_some(), "the node did not come back");
        let again = launch_cmd().output().unwrap();
        let again_out = String::from_utf8_lossy(&again.stdout).into_owned();
        assert_eq!(again.status.code(), Some(0), "{again_out}");
        again_out
    } else {
        assert_eq!(out.status.code(), Some(0), "{stdout} {stderr}");
        stdout
    };
    let answer: serde_json::Value = serde_json::from_str(answer.trim()).unwrap();
    assert_eq!(answer["action"], "submitted", "{answer}");
    let mine = s.list_jobs(&JobQuery::mine()).await;
    let Answer::Live(rows) = mine else {
        panic!("{mine:?}")
    };
    let ours: Vec<_> = rows
        .iter()
        .filter(|r| r.name == format!("{prefix}m"))
        .collect();
    assert_eq!(ours.len(), 1, "{ours:?}");
    for r in ours {
        let _ = std::process::Command::new("scancel")
            .arg(r.id.to_string())
            .status();
    }
}
