//! Hostile names at the command line: every name-bearing argument of every command refuses
//! control characters, bytes that are not UTF-8, option-like and over-long values with a usage
//! error (exit 2) of one short line, before anything is created or any Slurm command runs, and
//! no value ever runs as code (a marker file that a hostile value would create never appears).
//!
//! The batch script of a session is checked by running it (`ops/session/script.rs` unit
//! tests), and on the real cluster by `session_real`'s hostile-name launch.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::Command;

/// Where a hostile value goes: a positional word, or glued to a flag (`--name=VALUE`), which
/// keeps a value that starts with '-' from being read as an option of its own.
fn commands() -> Vec<(&'static str, Vec<&'static str>)> {
    let path = "path";
    let label = "label";
    vec![
        (path, vec!["trial", "open", "{}"]),
        (path, vec!["trial", "open", "t", "--follows={}"]),
        (
            path,
            vec!["trial", "verdict", "{}", "failed", "--reason", "r"],
        ),
        (path, vec!["trial", "show", "{}"]),
        (path, vec!["inspect", "{}"]),
        (path, vec!["inspect", "--trial={}"]),
        (path, vec!["report", "--trial={}"]),
        (path, vec!["report", "--pool={}"]),
        (path, vec!["report", "--worker={}"]),
        (path, vec!["journal", "dump", "--worker={}"]),
        (path, vec!["journal", "dump", "--pool={}"]),
        (path, vec!["stop", "{}"]),
        (path, vec!["pool", "attach", "{}", "--job", "1"]),
        (
            path,
            vec![
                "pool", "submit", "{}", "--cpus", "1", "--mem", "1M", "--", "true",
            ],
        ),
        (
            path,
            vec![
                "pool",
                "submit",
                "p",
                "--cpus",
                "1",
                "--mem",
                "1M",
                "--name={}",
                "--",
                "true",
            ],
        ),
        (
            path,
            vec![
                "pool",
                "submit",
                "p",
                "--cpus",
                "1",
                "--mem",
                "1M",
                "--trial={}",
                "--",
                "true",
            ],
        ),
        (
            path,
            vec![
                "pool",
                "submit",
                "p",
                "--cpus",
                "1",
                "--mem",
                "1M",
                "--source={}",
                "--",
                "true",
            ],
        ),
        (
            path,
            vec![
                "pool",
                "submit",
                "p",
                "--cpus",
                "1",
                "--mem",
                "1M",
                "--image={}",
                "--",
                "true",
            ],
        ),
        (path, vec!["pool", "status", "{}"]),
        (path, vec!["logs", "{}"]),
        (path, vec!["logs", "w", "--pool={}"]),
        (path, vec!["pool", "stop-worker", "{}", "w"]),
        (path, vec!["pool", "stop-worker", "p", "{}"]),
        (path, vec!["pool", "detach", "{}"]),
        (path, vec!["pool", "release", "{}"]),
        (
            path,
            vec![
                "pool", "create", "{}", "--cpus", "1", "--mem", "1M", "--time", "5",
            ],
        ),
        (
            path,
            vec![
                "submit",
                "--cpus",
                "1",
                "--mem",
                "1M",
                "--time",
                "5",
                "--name={}",
                "--",
                "true",
            ],
        ),
        (
            path,
            vec![
                "submit",
                "--cpus",
                "1",
                "--mem",
                "1M",
                "--time",
                "5",
                "--trial={}",
                "--",
                "true",
            ],
        ),
        (
            path,
            vec![
                "submit",
                "--cpus",
                "1",
                "--mem",
                "1M",
                "--time",
                "5",
                "--source={}",
                "--",
                "true",
            ],
        ),
        (
            path,
            vec![
                "submit",
                "--cpus",
                "1",
                "--mem",
                "1M",
                "--time",
                "5",
                "--image={}",
                "--",
                "true",
            ],
        ),
        (path, vec!["asset", "add-source", "{}", "."]),
        (path, vec!["asset", "add-image", "{}", "f"]),
        (path, vec!["asset", "verify", "{}"]),
        (
            path,
            vec![
                "worker",
                "run",
                "--submission-id",
                "00000000-0000-4000-8000-000000000000",
                "--evidence-dir",
                "/nonexistent",
                "--deadline",
                "+60",
                "--worker={}",
                "--",
                "true",
            ],
        ),
        (
            path,
            vec![
                "worker",
                "run",
                "--submission-id",
                "00000000-0000-4000-8000-000000000000",
                "--evidence-dir",
                "/nonexistent",
                "--deadline",
                "+60",
                "--pool={}",
                "--",
                "true",
            ],
        ),
        (
            label,
            vec![
                "submit",
                "--target={}",
                "--cpus",
                "1",
                "--mem",
                "1M",
                "--time",
                "5",
                "--",
                "true",
            ],
        ),
        (
            label,
            vec!["session", "launch", "{}", "-T", "t", "--detached"],
        ),
        (
            label,
            vec!["session", "launch", "m", "--target={}", "--detached"],
        ),
        (
            label,
            vec!["session", "release", "{}", "-T", "t", "--force"],
        ),
        (
            label,
            vec!["session", "release", "m", "--target={}", "--force"],
        ),
        (label, vec!["session", "renew", "{}", "-T", "t", "--once"]),
        (
            label,
            vec!["session", "renew", "m", "--target={}", "--once"],
        ),
        (label, vec!["session", "attach", "{}", "-T", "t"]),
        (label, vec!["session", "attach", "m", "--target={}"]),
        (
            label,
            vec![
                "pool",
                "create",
                "p",
                "--cpus",
                "1",
                "--mem",
                "1M",
                "--time",
                "5",
                "--partition={}",
            ],
        ),
    ]
}

/// Values refused for every name; `mark` is a file each would create if it ran as code.
fn refused_everywhere(mark: &Path) -> Vec<OsString> {
    let m = mark.display();
    let mut v: Vec<OsString> = [
        format!("m\ntouch {m}\n#"),
        format!("m\rtouch {m}"),
        format!("m\ttouch {m}"),
        format!("m\u{1b}]0;touch {m}\u{7}"),
        format!("m\u{7f}touch {m}"),
        format!("m\u{85}touch {m}"),
        format!("-m;touch {m}"),
        format!("--help;touch {m}"),
        format!("{}$(touch {m})", "x".repeat(10_000)),
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    v.push(OsString::from_vec(
        [b"m\xff\xfe".as_slice(), format!("$(touch {m})").as_bytes()].concat(),
    ));
    v
}

/// Shell and path syntax: refused in path names (pool, worker, trial, asset), legitimate in
/// labels (mirror, target), which are only ever quoted or sanitized.
fn refused_in_path_names(mark: &Path) -> Vec<OsString> {
    let m = mark.display();
    [
        format!("$(touch {m})"),
        format!("`touch {m}`"),
        format!("x;touch {m}"),
        format!("x' ; touch {m}; '"),
        format!("x\" ; touch {m}; \""),
        format!("x && touch {m}"),
        "../../escape".to_owned(),
        ".hidden".to_owned(),
        "a/b".to_owned(),
        "a b".to_owned(),
        "é".to_owned(),
    ]
    .into_iter()
    .map(OsString::from)
    .collect()
}

fn argv(template: &[&str], value: &OsString) -> Vec<OsString> {
    template
        .iter()
        .map(|word| match word.split_once("{}") {
            Some((before, after)) => {
                let mut w = OsString::from(before);
                w.push(value);
                w.push(after);
                w
            }
            None => OsString::from(word),
        })
        .collect()
}

#[test]
fn every_name_argument_refuses_hostile_values_with_one_short_line() {
    let tmp = tempfile::tempdir().unwrap();
    let mark = tmp.path().join("PWNED");
    let state = tmp.path().join("state");
    let fake_bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/fake-slurm/bin");
    let calls = tmp.path().join("slurm-calls.jsonl");
    let path = format!("{}:/usr/bin:/bin", fake_bin.display());
    let mut tried = 0;
    for (rule, template) in commands() {
        let mut values = refused_everywhere(&mark);
        if rule == "path" {
            values.extend(refused_in_path_names(&mark));
        }
        for value in values {
            for json in [false, true] {
                let mut c = Command::new(env!("CARGO_BIN_EXE_dispatch"));
                c.arg("--state-dir").arg(&state);
                if json {
                    c.arg("--json");
                }
                let out = c
                    .args(argv(&template, &value))
                    .current_dir(tmp.path())
                    .env("PATH", &path)
                    .env("FAKE_SLURM_LOG", &calls)
                    .env_remove("DISPATCH_FAILPOINTS")
                    .output()
                    .unwrap();
                tried += 1;
                let what = format!("{template:?} with {value:?}");
                let what = &what[..what.len().min(300)];
                assert_eq!(out.status.code(), Some(2), "{what}: {out:?}");
                assert!(!mark.exists(), "{what} ran as code");
                assert!(!state.exists(), "{what} created the state directory");
                assert!(!calls.exists(), "{what} called Slurm");
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    stderr.len() < 400,
                    "{what}: {} bytes of stderr",
                    stderr.len()
                );
                if json {
                    let text = String::from_utf8_lossy(&out.stdout);
                    let doc: serde_json::Value = serde_json::from_str(text.trim())
                        .unwrap_or_else(|e| panic!("{what}: not one JSON document ({e})"));
                    assert_eq!(doc["error"]["exit_code"], 2, "{what}");
                    assert!(
                        doc["error"]["message"].as_str().unwrap().len() < 400,
                        "{what}"
                    );
                } else {
                    assert!(out.stdout.is_empty(), "{what}");
                }
            }
        }
    }
    eprintln!("hostile inputs tried at the CLI: {tried}; markers found: 0");
    assert!(tried > 1000, "{tried}");
}

#[test]
fn a_refusal_names_the_rule_and_the_length_not_the_whole_value() {
    let tmp = tempfile::tempdir().unwrap();
    let huge = "x".repeat(10_000);
    for (args, rule) in [
        (
            vec!["trial", "open", huge.as_str()],
            "1 to 64 characters of [A-Za-z0-9._-]",
        ),
        (
            vec!["session", "release", huge.as_str(), "-T", "t", "--force"],
            "longer than 256 bytes",
        ),
        (
            vec!["session", "launch", "m\nx", "-T", "t"],
            "contains a control character",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_dispatch"))
            .arg("--state-dir")
            .arg(tmp.path().join("s"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(rule), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        if args[2].len() > 1000 {
            assert!(stderr.contains("(10000 bytes)"), "{stderr}");
        }
    }
}
