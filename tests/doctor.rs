//! `dispatch doctor`: against the real dev cluster (whichever Slurm is first on PATH), against
//! the fake Slurm (a controller that does not answer, accounting off, an untested release), and
//! with no Slurm on PATH at all. Each check says what was seen and, when not ok, what to do.

mod fake_cli;
mod real_cluster;
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use fake_cli::Fake;
use serde_json::{json, Value};

fn doc(text: &str) -> Value {
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("not one JSON document ({e}): {text:?}"))
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {report}"))
}

fn status<'a>(report: &'a Value, name: &str) -> &'a str {
    check(report, name)["status"].as_str().unwrap()
}

/// Every check that is not ok says what to do.
fn every_finding_says_what_to_do(report: &Value) {
    for c in report["checks"].as_array().unwrap() {
        if c["status"] != "ok" {
            let todo = c["todo"].as_str().unwrap_or_default();
            assert!(!todo.trim().is_empty(), "{c} says nothing to do");
        }
    }
}

fn owner_only_dir(parent: &Path, name: &str) -> std::path::PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

fn run(mut cmd: Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn doctor(state: &Path, config: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
    c.arg("--state-dir")
        .arg(state)
        .arg("--config")
        .arg(config)
        .arg("doctor")
        .args(args)
        .env_remove("DISPATCH_FAILPOINTS");
    c
}

const GOOD_TARGET: &str =
    "[targets.dev]\npartition = \"debug\"\naccount = \"dev\"\nqos = \"normal\"\n";

#[test]
fn on_the_real_cluster_a_good_setup_is_ready_and_a_wrong_target_is_named() {
    let _cluster = real_cluster::require_cluster();
    let dir = tempfile::tempdir().unwrap();
    let state = owner_only_dir(dir.path(), "state");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, GOOD_TARGET).unwrap();

    let (code, out, err) = run(doctor(&state, &config, &["--json"]));
    let r = doc(&out);
    assert_eq!(code, 0, "{err}\n{r:#}");
    assert_eq!(r["ready"], true);
    for name in [
        "slurm commands",
        "slurm version",
        "controller",
        "accounting",
        "state directory",
        "flock",
        "config",
        "target dev",
    ] {
        assert_eq!(status(&r, name), "ok", "{name}: {r:#}");
    }
    let release = support::cluster_version();
    assert!(
        check(&r, "slurm version")["seen"]
            .as_str()
            .unwrap()
            .contains(&release),
        "{release}: {r:#}"
    );
    assert!(
        std::fs::read_dir(&state).unwrap().next().is_none(),
        "the flock test leaves nothing behind"
    );

    std::fs::write(
        &config,
        format!(
            "{GOOD_TARGET}[targets.wrong]\npartition = \"no-such-partition\"\naccount = \"no-such-account\"\nqos = \"no-such-qos\"\n"
        ),
    )
    .unwrap();
    let (code, out, _) = run(doctor(&state, &config, &["--json"]));
    let r = doc(&out);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(r["ready"], false);
    let wrong = check(&r, "target wrong");
    assert_eq!(wrong["status"], "fail", "{r:#}");
    let seen = wrong["seen"].as_str().unwrap();
    for what in ["no-such-partition", "no-such-account", "no-such-qos"] {
        assert!(seen.contains(what), "{seen}");
    }
    assert_eq!(status(&r, "target dev"), "ok");
    every_finding_says_what_to_do(&r);

    // The text form says the same, one line per check.
    let (code, out, _) = run(doctor(&state, &config, &[]));
    assert_eq!(code, 1);
    assert!(out.contains("FAIL  target wrong:"), "{out}");
    assert!(out.contains("not ready: 1 check(s) failed"), "{out}");
}

#[test]
fn on_node_runs_a_step_that_sees_the_binary_the_state_directory_and_git() {
    let _cluster = real_cluster::require_cluster();
    let dir = tempfile::tempdir().unwrap();
    let state = owner_only_dir(dir.path(), "state");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, GOOD_TARGET).unwrap();

    let (code, out, err) = run(doctor(
        &state,
        &config,
        &["--on-node", "-T", "dev", "--json"],
    ));
    let r = doc(&out);
    assert_eq!(code, 0, "{err}\n{r:#}");
    assert!(check(&r, "node")["seen"]
        .as_str()
        .unwrap()
        .starts_with("ran on "));
    assert_eq!(status(&r, "node: state directory"), "ok", "{r:#}");
    assert!(
        check(&r, "node: state directory")["seen"]
            .as_str()
            .unwrap()
            .contains("is this host's"),
        "{r:#}"
    );
    assert_eq!(status(&r, "node: flock"), "ok", "{r:#}");
    assert_eq!(status(&r, "node: git"), "ok", "{r:#}");
    assert_eq!(
        status(&r, "state file system"),
        "ok",
        "whatever the file system, the node was shown to see it: {r:#}"
    );
    assert!(
        std::fs::read_dir(&state).unwrap().next().is_none(),
        "the marker and the flock test files are removed"
    );

    // A state directory the node cannot see (here: one that does not exist anywhere yet).
    let missing = dir.path().join("not-yet");
    let (code, out, _) = run(doctor(&missing, &config, &["--on-node", "--json"]));
    let r = doc(&out);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(status(&r, "state directory"), "warn");
    assert_eq!(status(&r, "node: state directory"), "fail", "{r:#}");
    every_finding_says_what_to_do(&r);

    // An unknown target is a usage error, before anything runs.
    let (code, out, _) = run(doctor(
        &state,
        &config,
        &["--on-node", "-T", "nope", "--json"],
    ));
    assert_eq!(code, 2);
    assert_eq!(doc(&out)["error"]["exit_code"], 2);
}

#[test]
fn a_silent_controller_fails_and_accounting_off_and_an_untested_release_only_warn() {
    let fake = Fake::new();
    fake.scenario(json!({
        "squeue": [
            {"match": ["--version"], "stdout": "slurm 23.02.7\n"},
            {"fixture": "notes-squeue-ctld-down"}
        ],
        "scontrol": [{"match": ["ping"], "stdout": "Slurmctld(primary) at ctl is DOWN\n", "exit": 1}],
        "sacct": [{"fixture": "notes-sacct-accounting-disabled"}],
    }));
    let (code, out, err) = fake.run(&["doctor", "--json"]);
    let r = doc(&out);
    assert_eq!(code, 1, "{err}\n{r:#}");
    assert_eq!(status(&r, "slurm commands"), "ok");
    assert_eq!(status(&r, "slurm version"), "warn");
    assert!(check(&r, "slurm version")["seen"]
        .as_str()
        .unwrap()
        .contains("untested"));
    assert_eq!(status(&r, "controller"), "fail");
    assert_eq!(status(&r, "accounting"), "warn");
    assert!(check(&r, "accounting")["todo"]
        .as_str()
        .unwrap()
        .contains("exit 4"));
    assert_eq!(status(&r, "state directory"), "warn", "not made yet: {r:#}");
    every_finding_says_what_to_do(&r);
    let calls = fake.calls();
    assert!(
        calls
            .iter()
            .all(|(p, _)| ["squeue", "scontrol", "sacct"].contains(&p.as_str())),
        "the doctor only asks: {calls:?}"
    );

    // The controller back, accounting still off: ready, with warnings.
    fake.scenario(json!({
        "squeue": [{"match": ["--version"], "stdout": "slurm 22.05.8\n"}, {"stdout": ""}],
        "scontrol": [{"match": ["ping"], "stdout": "Slurmctld(primary) at ctl is UP\n"}],
        "sacct": [{"fixture": "notes-sacct-accounting-disabled"}],
    }));
    let (code, out, _) = fake.run(&["doctor", "--json"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(doc(&out)["ready"], true);

    // A target whose partition reads as a flag is never sent to Slurm, and fails.
    let config = fake.dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[targets.odd]\npartition = \"--all\"\naccount = \"a\"\n",
    )
    .unwrap();
    fake.forget_calls();
    let mut cmd = fake.command(&["--config", config.to_str().unwrap(), "doctor", "--json"]);
    cmd.env_remove("DISPATCH_CONFIG");
    let (code, out, _) = run(cmd);
    let r = doc(&out);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(status(&r, "target odd"), "fail");
    let calls = fake.calls();
    assert!(
        calls
            .iter()
            .all(|(_, argv)| !argv.iter().any(|a| a == "--all")),
        "{calls:?}"
    );
}

#[test]
fn without_slurm_on_path_every_check_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let state = owner_only_dir(dir.path(), "state");
    let empty = owner_only_dir(dir.path(), "bin");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[targets.t]\npartition = \"p\"\n").unwrap();
    let mut cmd = doctor(&state, &config, &["--json"]);
    cmd.env("PATH", &empty);
    let (code, out, err) = run(cmd);
    let r = doc(&out);
    assert_eq!(code, 1, "{err}\n{r:#}");
    assert_eq!(r["ready"], false);
    let slurm = check(&r, "slurm commands");
    assert_eq!(slurm["status"], "fail");
    assert!(
        slurm["seen"].as_str().unwrap().contains("sbatch"),
        "{slurm}"
    );
    assert!(slurm["todo"].as_str().unwrap().contains("PATH"));
    assert_eq!(status(&r, "git"), "warn");
    assert_eq!(status(&r, "config"), "fail", "account is required: {r:#}");
    assert_eq!(
        status(&r, "flock"),
        "ok",
        "the state directory is checked without Slurm"
    );
    every_finding_says_what_to_do(&r);
}

/// The probe as the node runs it: a directory of the right path without the host's marker is
/// another directory (a node-local /tmp, say), and fails.
#[test]
fn the_node_probe_tells_another_directory_of_the_same_path_from_the_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let state = owner_only_dir(dir.path(), "state");
    let probe = |marker: &str| {
        let mut c = doctor(
            &state,
            &dir.path().join("none.toml"),
            &["--node-probe", "--json"],
        );
        c.args(["--marker", marker]);
        let (code, out, _) = run(c);
        (code, doc(&out))
    };
    let (code, r) = probe("0123abcd");
    assert_eq!(code, 1, "{r:#}");
    let sd = check(&r, "node: state directory");
    assert_eq!(sd["status"], "fail", "{sd}");
    assert!(
        sd["seen"].as_str().unwrap().contains("another directory"),
        "{sd}"
    );

    std::fs::write(state.join(".doctor-marker-0123abcd"), "0123abcd").unwrap();
    let (code, r) = probe("0123abcd");
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(status(&r, "node: state directory"), "ok");
}

#[test]
fn a_state_directory_others_can_write_fails_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let state = owner_only_dir(dir.path(), "state");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let empty = owner_only_dir(dir.path(), "bin");
    let mut cmd = doctor(&state, &dir.path().join("none.toml"), &["--json"]);
    cmd.env("PATH", &empty);
    let (code, out, _) = run(cmd);
    let r = doc(&out);
    assert_eq!(code, 1, "{r:#}");
    let sd = check(&r, "state directory");
    assert_eq!(sd["status"], "fail");
    assert!(sd["todo"].as_str().unwrap().contains("chmod 700"), "{sd}");
    assert_eq!(
        std::fs::metadata(&state).unwrap().permissions().mode() & 0o777,
        0o777,
        "the doctor changes nothing"
    );
}
