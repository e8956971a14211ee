//! The CLI contract (`docs/cli.md`) checked against the binary: every command and flag is
//! documented, the documentation names nothing that does not exist, "not found" is one exit
//! code everywhere, hints name commands that parse, and completions and man pages cover every
//! command.

mod fake_cli;

use clap::Parser;
use dispatch::cli::Cli;
use fake_cli::Fake;
use serde_json::json;

/// Every `dispatch …` command line quoted in backticks in `text`.
fn quoted_commands(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("dispatch "))
        .map(str::to_owned)
        .collect()
}

/// A hint is only useful if the command it names exists: it must parse (placeholders such as
/// POOL parse as values).
fn assert_hints_parse(args: &[&str], message: &str) {
    let hints = quoted_commands(message);
    assert!(
        !hints.is_empty(),
        "{args:?}: no command in the hint: {message}"
    );
    for hint in hints {
        let argv: Vec<&str> = hint.split_whitespace().collect();
        if let Err(e) = Cli::try_parse_from(&argv) {
            panic!("{args:?} hints at `{hint}`, which does not parse: {e}");
        }
    }
}

fn show_job() -> String {
    let t = |secs: i64| {
        (chrono::Local::now() + chrono::Duration::seconds(secs))
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    format!(
        "JobId=901 JobName=alloc UserId=root(0) GroupId=root(0) Account=dev QOS=normal \
         JobState=RUNNING Reason=None RunTime=00:01:00 TimeLimit=01:00:00 SubmitTime={s} \
         StartTime={s} EndTime={e} Partition=debug NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=4 \
         NumTasks=1 CPUs/Task=4 TRES=cpu=4,mem=4G,node=1,billing=4 MinMemoryNode=4G\n",
        s = t(-60),
        e = t(3600),
    )
}

/// "Not found" is exit 3 for every command that names something the state does not hold
/// (refused: nothing was done, nothing journaled), and its hint names a command that exists.
#[test]
fn a_name_that_does_not_exist_is_exit_3_everywhere() {
    let fake = Fake::new();
    fake.scenario(json!({"scontrol": [{"stdout": show_job()}]}));
    let (code, _, err) = fake.run(&["pool", "attach", "p", "--job", "901"]);
    assert_eq!(code, 0, "{err}");
    let cases: &[&[&str]] = &[
        &["inspect", "nope"],
        &["inspect", "--trial", "nope"],
        &["stop", "nope"],
        &["pool", "status", "nope"],
        &["pool", "stop-worker", "nope", "w"],
        &["pool", "stop-worker", "p", "nope"],
        &["pool", "detach", "nope"],
        &[
            "pool", "submit", "nope", "--cpus", "1", "--mem", "1M", "--", "true",
        ],
        &["trial", "show", "nope"],
        &["trial", "verdict", "nope", "failed", "--reason", "x"],
        &["asset", "verify", "nope"],
        &["forget", "nope", "--reason", "x"],
    ];
    for args in cases {
        let before = fake.kinds();
        let (code, out, err) = fake.run(args);
        assert_eq!(code, 3, "{args:?}: not found must be exit 3: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(
            !err.contains("reconcile --json"),
            "{args:?}: reconcile does not list what is known: {err}"
        );
        assert_hints_parse(args, &err);
        assert_eq!(fake.kinds(), before, "{args:?} journaled something");
        let with_json = [&["--json"], *args].concat();
        let (code, out, _) = fake.run(&with_json);
        assert_eq!(code, 3, "{with_json:?}");
        let doc: serde_json::Value = serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("{with_json:?}: one JSON document, not {out:?}: {e}"));
        assert_eq!(doc["error"]["exit_code"], 3, "{with_json:?}: {out}");
    }
}
