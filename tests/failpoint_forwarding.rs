//! `DISPATCH_FAILPOINTS` and the Slurm children: a coordinator's own failpoints never reach a
//! worker step or batch job (whose supervisor would arm them too); `worker:` items reach only
//! those, prefix stripped. One test in this binary: it sets the variable for the process.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use dispatch::slurm::{
    BatchPayload, BatchRequest, CliConfig, CliScheduler, JobId, JobName, JobQuery, MemoryMb,
    Scheduler, StepRequest,
};

/// A stand-in for `program` that writes what it got as DISPATCH_FAILPOINTS to `<dir>/<program>`.
fn recorder(dir: &Path, program: &str, stdout: &str) {
    let path = dir.join("bin").join(program);
    let script = format!(
        "#!/bin/sh\nprintf '%s' \"${{DISPATCH_FAILPOINTS-<unset>}}\" > '{}/{program}.seen'\nprintf '{stdout}'\n",
        dir.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn seen(dir: &Path, program: &str) -> String {
    let path = dir.join(format!("{program}.seen"));
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = std::fs::read_to_string(&path) {
            if !s.is_empty() || Instant::now() > until {
                return s;
            }
        }
        assert!(Instant::now() < until, "{program} never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn only_worker_items_reach_steps_and_batch_jobs_and_nothing_reaches_queries() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("bin")).unwrap();
    recorder(dir.path(), "srun", "");
    recorder(dir.path(), "sbatch", "42\\n");
    recorder(dir.path(), "squeue", "");
    // The coordinator's item names a point this test never passes.
    std::env::set_var(
        "DISPATCH_FAILPOINTS",
        "reconcile-before-terminal=abort,worker:supervisor-before-exit-record=abort,\
         worker:journal-after-sync=exit:9@2",
    );
    let sched = CliScheduler::new(CliConfig {
        search_path: Some(format!("{}/bin:/usr/bin:/bin", dir.path().display()).into()),
        ..CliConfig::default()
    });
    let job = JobId::new(7).unwrap();
    let step = StepRequest::new(
        job,
        JobName::new("p.w").unwrap(),
        1,
        MemoryMb::parse("100M").unwrap(),
        vec!["true".into()],
    );
    sched.launch_step(&step).await.unwrap();
    let batch = BatchRequest::new(
        JobName::new("w-1").unwrap(),
        BatchPayload::Script {
            path: dir.path().join("batch.sh"),
            args: vec![],
        },
    );
    sched.submit_batch(&batch).await.unwrap();
    let _ = sched.list_jobs(&JobQuery::ids(vec![job])).await;
    let forwarded = "supervisor-before-exit-record=abort,journal-after-sync=exit:9@2";
    assert_eq!(seen(dir.path(), "srun"), forwarded);
    assert_eq!(seen(dir.path(), "sbatch"), forwarded);
    assert_eq!(seen(dir.path(), "squeue"), "<unset>");

    // Without worker items, a step gets no DISPATCH_FAILPOINTS at all (it used to inherit the
    // coordinator's, so a journal point aimed at the coordinator fired in the supervisor too).
    std::env::set_var("DISPATCH_FAILPOINTS", "journal-after-sync=abort@3");
    std::fs::remove_file(dir.path().join("srun.seen")).unwrap();
    sched.launch_step(&step).await.unwrap();
    assert_eq!(seen(dir.path(), "srun"), "<unset>");
}
