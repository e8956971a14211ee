//! The CLI contract (`docs/cli.md`) and the table of `docs/commands.md` checked against the
//! binary: every command and flag is documented, the documentation names nothing that does not
//! exist, "not found" is one exit
//! code everywhere, hints name commands that parse, and completions and man pages cover every
//! command.

mod fake_cli;

use clap::{CommandFactory, Parser};
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
        &["logs", "nope"],
        &["inspect", "--trial", "nope"],
        &["stop", "nope"],
        &["pool", "status", "nope"],
        &["pool", "stop-worker", "nope", "w"],
        &["pool", "stop-worker", "p", "nope"],
        &["pool", "detach", "nope"],
        &["pool", "release", "nope"],
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

/// Every command path below `dispatch` (without clap's `help`), with its clap command.
fn command_paths() -> Vec<(String, clap::Command)> {
    fn walk(prefix: &str, cmd: &clap::Command, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let path = format!("{prefix} {}", sub.get_name());
            out.push((path.clone(), sub.clone()));
            walk(&path, sub, out);
        }
    }
    let mut out = Vec::new();
    let mut root = Cli::command();
    root.build();
    walk("dispatch", &root, &mut out);
    out
}

fn contract() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md")).unwrap()
}

/// The section of docs/cli.md under the heading `## <path>` (a command group) or
/// `### <path>`, up to the next heading.
fn section<'a>(doc: &'a str, path: &str) -> Option<&'a str> {
    let (start, heading) = ["##", "###"].iter().find_map(|level| {
        let heading = format!("\n{level} `{path}`\n");
        doc.find(&heading).map(|at| (at, heading))
    })?;
    let start = start + heading.len();
    let len = doc[start..].find("\n#").unwrap_or(doc.len() - start);
    Some(&doc[start..start + len])
}

fn long_flags(cmd: &clap::Command) -> Vec<String> {
    cmd.get_arguments()
        .filter(|a| !a.is_global_set() && !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .filter(|l| !matches!(*l, "help" | "version"))
        .map(|l| format!("--{l}"))
        .collect()
}

/// docs/cli.md has a `## \`dispatch …\`` (group) or `###` section for every command, naming each of its
/// positionals and long flags; the global flags are in its "Global options".
#[test]
fn the_contract_documents_every_command_positional_and_flag() {
    let doc = contract();
    let global = doc
        .split("\n## Global options\n")
        .nth(1)
        .expect("docs/cli.md has a \"## Global options\" section");
    let global = &global[..global.find("\n## ").unwrap_or(global.len())];
    for flag in long_flags(&Cli::command()) {
        assert!(
            global.contains(&format!("`{flag}")),
            "global {flag} undocumented"
        );
    }
    let mut missing = Vec::new();
    for (path, cmd) in command_paths() {
        let Some(text) = section(&doc, &path) else {
            missing.push(format!("no section `### \\`{path}\\``"));
            continue;
        };
        for flag in long_flags(&cmd) {
            if !text.contains(&flag) {
                missing.push(format!("{path}: {flag}"));
            }
        }
        for positional in cmd.get_positionals() {
            let name = positional
                .get_value_names()
                .and_then(|v| v.first().map(|n| n.to_string()))
                .unwrap_or_else(|| positional.get_id().as_str().to_uppercase());
            if !text.contains(&name) {
                missing.push(format!("{path}: positional {name}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/cli.md lacks:\n{}",
        missing.join("\n")
    );
}

/// docs/cli.md names no command the binary lacks: every `### \`dispatch …\`` heading is a
/// command path.
#[test]
fn the_contract_names_no_command_that_does_not_exist() {
    let paths: Vec<String> = command_paths().into_iter().map(|(p, _)| p).collect();
    let doc = contract();
    for line in doc.lines().filter(|l| l.starts_with('#')) {
        let Some(rest) = line
            .trim_start_matches('#')
            .trim()
            .strip_prefix("`dispatch")
        else {
            continue;
        };
        let path = format!("dispatch{}", rest.trim_end_matches('`'));
        assert!(
            paths.contains(&path),
            "docs/cli.md documents `{path}`, which the binary does not have"
        );
    }
}

/// Every command's `--help` shows examples and says what each positional is.
#[test]
fn every_command_help_has_examples_and_described_positionals() {
    let mut lacking = Vec::new();
    for (path, cmd) in command_paths() {
        if cmd.has_subcommands() {
            continue;
        }
        let examples = cmd
            .get_after_help()
            .map(|h| h.to_string())
            .unwrap_or_default();
        if !examples.contains("Examples:") || !examples.contains(&path) {
            lacking.push(format!("{path}: no examples using it"));
        }
        for p in cmd.get_positionals() {
            if p.get_help().is_none() {
                lacking.push(format!("{path}: positional {} undescribed", p.get_id()));
            }
        }
    }
    assert!(lacking.is_empty(), "{}", lacking.join("\n"));
}

fn dispatch(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_dispatch"))
        .args(args)
        .output()
        .unwrap()
}

/// The top-level subcommand names (what a completion must offer after `dispatch`).
fn top_level_names() -> Vec<String> {
    Cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .filter(|n| n != "help")
        .collect()
}

#[test]
fn bash_completion_registers_dispatch() {
    let out = dispatch(&["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0));
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), &out.stdout).unwrap();
    let probe = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p dispatch",
            script.path().display()
        ))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&probe.stdout);
    assert!(probe.status.success(), "{said} {:?}", probe.stderr);
    assert!(said.contains("dispatch"), "{said}");
    // Completing `dispatch ` offers every command.
    let words = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && COMP_WORDS=(dispatch '') COMP_CWORD=1 COMP_LINE='dispatch ' \
             COMP_POINT=9 && _dispatch dispatch '' dispatch && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.path().display()
        ))
        .output()
        .unwrap();
    let offered = String::from_utf8_lossy(&words.stdout);
    for name in top_level_names() {
        assert!(
            offered.lines().any(|l| l == name),
            "bash does not offer {name}: {offered}"
        );
    }
}

#[test]
fn zsh_and_fish_completions_name_every_command() {
    for shell in ["zsh", "fish"] {
        let out = dispatch(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        for (path, _) in command_paths() {
            let name = path.rsplit(' ').next().unwrap();
            assert!(script.contains(name), "{shell} completion lacks {path}");
        }
    }
    let out = dispatch(&["completions", "tcsh"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn man_pages_cover_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = dispatch(&["man", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{:?}", out.stderr);
    for (path, _) in command_paths() {
        let page = dir.path().join(format!("{}.1", path.replace(' ', "-")));
        let roff = std::fs::read_to_string(&page)
            .unwrap_or_else(|e| panic!("no man page {}: {e}", page.display()));
        assert!(roff.contains(".TH"), "{} is not roff", page.display());
    }
    let top = std::fs::read_to_string(dir.path().join("dispatch.1")).unwrap();
    for name in top_level_names() {
        assert!(top.contains(&name), "dispatch.1 does not list {name}");
    }
    // man itself renders it, where man is installed.
    if let Ok(rendered) = std::process::Command::new("man")
        .arg("-l")
        .arg(dir.path().join("dispatch-pool-submit.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80")
        .output()
    {
        if rendered.status.success() {
            let text = String::from_utf8_lossy(&rendered.stdout);
            assert!(text.contains("--cpus"), "{text}");
        }
    }
    let stdout = dispatch(&["man"]);
    assert_eq!(stdout.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&stdout.stdout).contains(".TH dispatch"));
}

/// A shell line's words up to the first pipe, redirection, `||` or comment (quotes honoured,
/// `$(…)` kept as one word): enough for the examples in `--help`.
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quote, mut depth) = (Vec::new(), String::new(), None, 0);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '(') => {
                depth += 1;
                word.push(c)
            }
            (None, ')') => {
                depth -= 1;
                word.push(c)
            }
            (None, ' ') if depth == 0 => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            (None, '|' | '>' | '#') if depth == 0 => break,
            (None, c) => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The examples are real: each `dispatch …` line in every command's help parses.
#[test]
fn every_help_example_parses() {
    let mut checked = 0;
    for (path, cmd) in command_paths() {
        let help = cmd
            .get_after_help()
            .map(|h| h.to_string())
            .unwrap_or_default();
        for line in help
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("dispatch "))
        {
            let words = shell_words(line);
            if let Err(e) = Cli::try_parse_from(&words) {
                panic!("{path}: the example `{line}` does not parse ({words:?}): {e}");
            }
            checked += 1;
        }
    }
    assert!(checked > 40, "only {checked} examples");
}

fn commands_page() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/commands.md")).unwrap()
}

/// docs/commands.md's table: for each row, the command path its first cell names (the longest
/// command path the cell's first backticked synopsis starts with) and every `--flag` that cell
/// shows. A row naming no command is an error string.
fn command_rows(page: &str, paths: &[String]) -> Vec<Result<(String, Vec<String>), String>> {
    page.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|row| {
            let cell = row[1..].split(" | ").next().unwrap_or_default();
            let synopsis = cell.split('`').nth(1).unwrap_or_default();
            let path = paths
                .iter()
                .filter(|p| {
                    let words = p.strip_prefix("dispatch ").unwrap_or(p);
                    synopsis == words || synopsis.starts_with(&format!("{words} "))
                })
                .max_by_key(|p| p.len())
                .ok_or_else(|| format!("a row names no command: {synopsis:?}"))?;
            Ok((path.clone(), flags_in(cell)))
        })
        .collect()
}

/// Every flag written in `text`: `--name` (a lowercase letter, then letters, digits and `-`) or
/// `-X` (one letter), each after a space, bracket, parenthesis or backtick.
fn flags_in(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices('-') {
        let before_ok = at == 0 || text[..at].ends_with([' ', '[', '(', '`', '|']);
        let rest = &text[at + 1..];
        if !before_ok {
            continue;
        }
        if let Some(long) = rest.strip_prefix('-') {
            let name: String = long
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                .collect();
            if name.starts_with(|c: char| c.is_ascii_lowercase()) {
                found.push(format!("--{}", name.trim_end_matches('-')));
            }
        } else {
            let mut chars = rest.chars();
            let (letter, next) = (chars.next(), chars.next());
            if letter.is_some_and(|c| c.is_ascii_alphabetic())
                && next.is_none_or(|c| !c.is_alphanumeric() && c != '-')
            {
                found.push(format!("-{}", letter.unwrap()));
            }
        }
    }
    found
}

/// The flags a row must show for `cmd`: for each visible long flag, its long form and its short
/// one if it has one (a row may show either).
fn row_flags(cmd: &clap::Command) -> Vec<(String, Option<String>)> {
    cmd.get_arguments()
        .filter(|a| !a.is_global_set() && !a.is_hide_set())
        .filter_map(|a| Some((a.get_long()?, a.get_short())))
        .filter(|(l, _)| !matches!(*l, "help" | "version"))
        .map(|(l, s)| (format!("--{l}"), s.map(|c| format!("-{c}"))))
        .collect()
}

/// docs/commands.md has a row for every command (a group such as `pool` has none of its own),
/// and each row shows every flag of its command (long, or its short form); it shows no flag
/// the command lacks and no command the binary does not have.
#[test]
fn the_commands_table_shows_every_command_and_flag_and_nothing_else() {
    let tree = command_paths();
    let paths: Vec<String> = tree.iter().map(|(p, _)| p.clone()).collect();
    let global: Vec<String> = row_flags(&Cli::command())
        .into_iter()
        .flat_map(|(l, s)| [Some(l), s])
        .flatten()
        .collect();
    let mut wrong = Vec::new();
    let mut shown: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for row in command_rows(&commands_page(), &paths) {
        match row {
            Ok((path, flags)) => shown.entry(path).or_default().extend(flags),
            Err(e) => wrong.push(e),
        }
    }
    for (path, cmd) in &tree {
        if cmd.has_subcommands() {
            continue;
        }
        let Some(flags) = shown.get(path) else {
            wrong.push(format!("no row for `{path}`"));
            continue;
        };
        let real = row_flags(cmd);
        for (long, short) in &real {
            if !flags.contains(long) && !short.as_ref().is_some_and(|s| flags.contains(s)) {
                wrong.push(format!("{path}: the row lacks {long}"));
            }
        }
        let known = |f: &String| {
            global.contains(f) || real.iter().any(|(l, s)| l == f || s.as_ref() == Some(f))
        };
        for f in flags.iter().filter(|f| !known(f)) {
            wrong.push(format!("{path}: the row shows {f}, which it does not have"));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/commands.md and the binary disagree:\n{}",
        wrong.join("\n")
    );
}

/// Issue 36 item 6: `--mem` takes what sbatch takes (`4GB`, `512MB`: both refused before), on
/// every command that has it, and a refusal and `--help` name the forms that work.
#[test]
fn mem_takes_what_sbatch_takes_and_names_the_forms() {
    let lines: [&[&str]; 3] = [
        &[
            "pool", "submit", "p", "--cpus", "1", "--mem", "MEM", "--", "true",
        ],
        &[
            "submit", "--cpus", "1", "--mem", "MEM", "--time", "10", "--", "true",
        ],
        &[
            "pool", "create", "p", "--cpus", "1", "--mem", "MEM", "--time", "10",
        ],
    ];
    for line in lines {
        for mem in ["4GB", "512MB", "4gb", "1024K", "512"] {
            let argv: Vec<&str> = std::iter::once("dispatch")
                .chain(line.iter().map(|a| if *a == "MEM" { mem } else { a }))
                .collect();
            if let Err(e) = Cli::try_parse_from(&argv) {
                panic!("{argv:?}: {e}");
            }
        }
        let argv: Vec<&str> = line
            .iter()
            .map(|a| if *a == "MEM" { "4.5G" } else { a })
            .collect();
        let out = dispatch(&argv);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{argv:?}: {err}");
        assert!(err.contains("512M, 512MB, 4G, 4GB"), "{argv:?}: {err}");
        let help: Vec<&str> = line
            .iter()
            .take_while(|a| !a.starts_with('-'))
            .copied()
            .collect();
        let help = dispatch(&[help.as_slice(), &["--help"]].concat());
        let help = String::from_utf8_lossy(&help.stdout);
        assert!(
            help.contains("512M, 512MB, 4G, 4GB"),
            "{line:?} --help: {help}"
        );
    }
}

/// Issue 36 item 8: a command given without `--` is a usage error (exit 2) that says the
/// command goes after `--` and shows the line corrected, which parses; in `--json` too.
#[test]
fn a_command_without_double_dash_is_shown_where_it_goes() {
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "pool", "submit", "p", "--cpus", "1", "--mem", "100M", "echo", "hi",
            ],
            "`dispatch pool submit p --cpus 1 --mem 100M -- echo hi`",
        ),
        (
            &[
                "submit", "--cpus", "1", "--mem", "1G", "--time", "10", "ls", "-l", "it's",
            ],
            r"`dispatch submit --cpus 1 --mem 1G --time 10 -- ls -l 'it'\''s'`",
        ),
        (
            &["session", "launch", "m", "-T", "t", "echo", "hi"],
            "`dispatch session launch m -T t -- echo hi`",
        ),
        (
            &["session", "attach", "m", "-T", "t", "bash"],
            "`dispatch session attach m -T t -- bash`",
        ),
    ];
    for (args, corrected) in cases {
        let out = dispatch(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("the command to run goes after `--`") && err.contains(corrected),
            "{args:?}: {err}"
        );
        if !corrected.contains('\'') {
            assert_hints_parse(args, corrected);
        }
        let json = dispatch(&[&["--json"], args].concat());
        let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        let message = doc["error"]["message"].as_str().unwrap();
        let with_json = corrected.replacen("`dispatch ", "`dispatch --json ", 1);
        assert!(message.contains(&with_json), "{args:?}: {message}");
    }
    // A word clap does not know where no command is taken gets no such hint.
    let out = dispatch(&["pool", "status", "p", "extra"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("goes after `--`"));
}
