//! How each `Next` reads in a message: the command line docs/cli.md spells.

use dispatch::next::Next;

#[test]
fn each_next_reads_as_its_command_line() {
    let (p, w, j) = (&"p1" as &dyn std::fmt::Display, &"w1" as _, &42 as _);
    let cases = [
        (Next::Reconcile, "reconcile"),
        (Next::Audit, "audit"),
        (Next::Jobs, "jobs"),
        (Next::Sessions, "sessions"),
        (Next::Trials, "trials"),
        (Next::Submit, "submit"),
        (Next::Stop(w), "stop w1"),
        (Next::Inspect(w), "inspect w1"),
        (Next::Forget(None), "forget"),
        (Next::Forget(Some(w)), "forget w1 --reason TEXT"),
        (Next::PoolStatus(None), "pool status"),
        (Next::PoolStatus(Some(p)), "pool status p1"),
        (Next::PoolRefresh, "pool status --refresh"),
        (Next::PoolCreate(p), "pool create p1"),
        (Next::PoolRelease(p), "pool release p1"),
        (
            Next::PoolAttach {
                pool: Some(p),
                job: Some(j),
                steal: false,
            },
            "pool attach p1 --job 42",
        ),
        (
            Next::PoolAttach {
                pool: None,
                job: None,
                steal: true,
            },
            "pool attach … --steal",
        ),
        (Next::PoolDetach(p), "pool detach p1"),
        (
            Next::Session {
                verb: "launch",
                mirror: &"m1",
                target: &"it's",
            },
            r#"session launch m1 -T 'it'\''s'"#,
        ),
        (Next::PoolStopWorker(None), "pool stop-worker"),
        (Next::PoolStopWorker(Some(w)), "pool stop-worker POOL w1"),
        (
            Next::PoolStopWorkerIn { pool: p, worker: w },
            "pool stop-worker p1 w1",
        ),
        (Next::SessionLaunch, "session launch"),
        (Next::SessionRelease, "session release"),
        (
            Next::TrialOpen {
                trial: Some(p),
                follows: None,
            },
            "trial open p1",
        ),
        (
            Next::TrialOpen {
                trial: None,
                follows: Some(p),
            },
            "trial open NEW --follows p1",
        ),
        (Next::AssetList, "asset list"),
        (Next::AssetVerify(None), "asset verify"),
        (Next::AssetVerify(Some(p)), "asset verify p1"),
        (
            Next::AssetAdd {
                kind: &"file",
                name: p,
            },
            "asset add-file p1 …",
        ),
        (Next::JournalInit(None), "journal init"),
        (
            Next::JournalInit(Some(&"/s")),
            "--state-dir /s journal init",
        ),
        (Next::JournalVerify, "journal verify"),
        (Next::JournalRepair, "journal repair"),
        (Next::JournalDump(None), "journal dump"),
        (Next::JournalDump(Some(&"K")), "journal dump --kind K"),
        (
            Next::Doctor {
                on_node: true,
                lock_probe: false,
            },
            "doctor --on-node",
        ),
        (
            Next::Doctor {
                on_node: false,
                lock_probe: true,
            },
            "doctor --lock-probe",
        ),
    ];
    for (next, line) in cases {
        assert_eq!(next.to_string(), format!("`dispatch {line}`"));
    }
}
