//! The CLI in the shell: colour only on a terminal (no ANSI escapes in a file or a pipe
//! unless asked for with `--color always`; `NO_COLOR` wins over a terminal), and a
//! `--version` that names the commit it was built from, and config files checked at load.

mod common;
mod fake_cli;

use fake_cli::Fake;
use serde_json::json;

fn stderr_of(fake: &Fake, extra: &[&str], env: &[(&str, &str)]) -> String {
    let mut args = extra.to_vec();
    args.push("sessions");
    let out = fake
        .command(&args)
        .env("DISPATCH_LOG", "debug")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn logs_to_a_pipe_have_no_escapes_unless_asked() {
    let fake = Fake::new();
    fake.scenario(json!({"squeue": [{"stdout": ""}]}));
    let plain = stderr_of(&fake, &[], &[]);
    assert!(
        plain.contains("slurm call"),
        "the debug log shows the call: {plain}"
    );
    assert!(!plain.contains('\u{1b}'), "escapes in a pipe: {plain:?}");
    let never = stderr_of(&fake, &["--color", "never"], &[]);
    assert!(!never.contains('\u{1b}'), "{never:?}");
    let always = stderr_of(&fake, &["--color", "always"], &[("NO_COLOR", "1")]);
    assert!(
        always.contains('\u{1b}'),
        "--color always colours: {always:?}"
    );
    let out = fake
        .command(&["--color", "sometimes", "sessions"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_version_names_the_commit_and_its_date() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let commit = String::from_utf8_lossy(&commit.stdout).trim().to_owned();
    assert!(
        text.starts_with(&format!(
            "dispatch {} ({commit} 20",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
}

#[test]
fn a_config_named_on_purpose_must_exist() {
    let fake = Fake::new();
    let missing = fake.dir.path().join("nope.toml");
    let out = fake
        .command(&["--json", "--config", missing.to_str().unwrap(), "sessions"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not exist"), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["exit_code"], 2);
}

#[test]
fn a_bad_time_in_the_config_fails_at_load_with_its_line() {
    let fake = Fake::new();
    let config = fake.dir.path().join("c.toml");
    std::fs::write(
        &config,
        "[targets.t]\npartition = \"p\"\naccount = \"a\"\ntime = \"2 hours\"\n",
    )
    .unwrap();
    let out = fake
        .command(&["--config", config.to_str().unwrap(), "sessions"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 4: targets.t.time"), "{stderr}");
}

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let journal = state.join("journal");
    std::fs::create_dir_all(&journal).unwrap();
    // Far more than a pipe holds, so the dump is still writing when `head` leaves.
    common::build_journal(&journal, 5_000, dispatch::journal::Options::default());
    for args in ["journal dump", "--json journal dump", "pool status"] {
        let script = format!(
            "{} --state-dir {} {args} 2>{}/err | head -n 1 >/dev/null; echo ${{PIPESTATUS[0]}}",
            env!("CARGO_BIN_EXE_dispatch"),
            state.display(),
            tmp.path().display()
        );
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .output()
            .unwrap();
        let code = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let err = std::fs::read_to_string(tmp.path().join("err")).unwrap();
        assert_eq!(code, "0", "{args}: exit {code}: {err}");
        assert!(!err.contains("panicked"), "{args}: {err}");
    }
}
